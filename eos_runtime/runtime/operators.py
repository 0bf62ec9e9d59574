"""A stage's steps as one function from an input record to its output values.

Stateful steps see ``State`` scoped to the record's key; each stateful step has its own
store (``step<i>`` in the task's RocksDB). A user function that raises becomes
``UserFunctionError`` naming the step; the task adds topic, partition and offset.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import msgpack

from ..api import State, Step
from ..errors import UserFunctionError
from ..state import TaskStore

__all__ = ["UserFunctionError", "Chain"]


_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def encode_key(key: Any) -> bytes:
    """Keys travel and are stored msgpack-encoded: prefix-free, so state names cannot collide."""
    if not isinstance(key, (str, bytes, int)) or isinstance(key, bool):
        raise UserFunctionError(f"keys must be str, bytes or int, "
                                f"not {type(key).__name__}: {key!r}")
    return _pack(key)


def decode_key(raw: bytes | None) -> Any:
    return None if raw is None else msgpack.unpackb(raw, raw=False)


class Chain:
    """Runs a stage's steps on one value; ``run`` returns the list of output values."""

    def __init__(self, steps: tuple[Step, ...], store: TaskStore | None) -> None:
        self._steps = steps
        self._states: list[State | None] = []
        for i, step in enumerate(steps):
            if step.stateful:
                name = f"step{i}"
                assert store is not None
                self._states.append(State(partial(store.get, name), partial(store.put, name),
                                          partial(store.delete, name)))
            else:
                self._states.append(None)

    def run(self, key_bytes: bytes | None, value: Any) -> list[Any]:
        values = [value]
        for step, state in zip(self._steps, self._states, strict=True):
            fn = step.fn
            try:
                if state is not None:
                    state._prefix = key_bytes or b""
                    if step.kind == "map":
                        values = [fn(v, state) for v in values]
                    elif step.kind == "flat_map":
                        values = [x for v in values for x in fn(v, state)]
                    else:
                        values = [v for v in values if fn(v, state)]
                elif step.kind == "map":
                    values = [fn(v) for v in values]
                elif step.kind == "flat_map":
                    values = [x for v in values for x in fn(v)]
                else:
                    values = [v for v in values if fn(v)]
            except Exception as exc:
                raise UserFunctionError(
                    f"step {step.kind}({step.name}) raised {type(exc).__name__}: {exc}") from exc
            if not values:
                break
        return values
