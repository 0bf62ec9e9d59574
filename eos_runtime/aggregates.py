"""Running aggregates of a keyed stream: ``stream.key_by(fn).count()`` (``sum``, ``reduce``,
``aggregate``) sends each record's key's aggregate so far, on every record, as Kafka
Streams' ``groupByKey().count()`` and Flink's ``keyBy().sum()`` do.

The step is a stateful ``map`` whose function is a ``RunningAggregate``. Its aggregate is
the key's state in the step's own store, under the encoded key itself (what ``State``
names ``""``), as msgpack. ``over`` gives the record path a function that works on the
store directly: no ``State``, no user call for ``count()``, one key built per record.
Called as ``fn(value, state)`` (the step's plain form) it does the same through ``State``,
so the two forms keep one layout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import msgpack

from .errors import UserFunctionError
from .values import NO_KEY_STATE, State, unpack

__all__ = ["RunningAggregate", "count", "summing", "reducing", "aggregating"]

_pack: Callable[[Any], bytes] = msgpack.Packer(use_bin_type=True, autoreset=True).pack
_unpackb = unpack


@dataclass(frozen=True)
class RunningAggregate:
    """A key's aggregate: ``first(value)`` starts it, ``add(acc, value)`` adds to it.
    ``name`` is how messages name the step: "count()", "sum(price)"."""

    first: Callable[[Any], Any]
    add: Callable[[Any, Any], Any]
    name: str
    user: Callable[..., Any] | None = None   # the user's function, which errors point to
    #: whether the step needs the record's value: ``count()`` does not, so the record path
    #: need not decode it
    reads_value: ClassVar[bool] = True

    def __call__(self, value: Any, state: State) -> Any:
        # The record's key is the state's prefix: the same key and checks as the record path's
        return self.over(state._get, state._put)(state._prefix, value)

    def over(self, get: Callable[[bytes], bytes | None],
             put: Callable[[bytes, bytes], None]) -> Callable[[bytes | None, Any], Any]:
        """The step on one record's encoded key and value, on its store's ``get``/``put``."""
        first, add = self.first, self.add

        def step(key: bytes | None, value: Any) -> Any:
            if not key:
                raise UserFunctionError(NO_KEY_STATE)
            raw = get(key)
            acc = first(value) if raw is None else add(_unpackb(raw), value)
            put(key, _pack(acc))
            return acc
        return step


class _Count(RunningAggregate):
    """``count()``, without a call per record: the most common aggregate, kept tight."""

    reads_value: ClassVar[bool] = False

    def over(self, get: Callable[[bytes], bytes | None],
             put: Callable[[bytes, bytes], None]) -> Callable[[bytes | None, Any], Any]:
        def step(key: bytes | None, value: Any) -> Any:
            if not key:
                raise UserFunctionError(NO_KEY_STATE)
            raw = get(key)
            n = 1 if raw is None else _unpackb(raw) + 1
            put(key, _pack(n))
            return n
        return step


def _one(value: Any) -> int:
    return 1


def _plus_one(acc: Any, value: Any) -> Any:
    return acc + 1


def _itself(value: Any) -> Any:
    return value


def _plus(acc: Any, value: Any) -> Any:
    return acc + value


def count() -> RunningAggregate:
    return _Count(_one, _plus_one, "count()")


def summing(fn: Callable[[Any], Any] | None, name: str) -> RunningAggregate:
    if fn is None:
        return RunningAggregate(_itself, _plus, "sum()")
    f = fn
    return RunningAggregate(f, lambda acc, value: acc + f(value), f"sum({name})", f)


def reducing(fn: Callable[[Any, Any], Any], name: str) -> RunningAggregate:
    return RunningAggregate(_itself, fn, f"reduce({name})", fn)


def aggregating(initial: Callable[[], Any], add: Callable[[Any, Any], Any],
                name: str) -> RunningAggregate:
    return RunningAggregate(lambda value: add(initial(), value), add, f"aggregate({name})",
                            add)
