"""A stage's steps as one function from an input record to its output values: ``Chain``
for a chain of steps to one output, ``Program`` for a stage that branches or merges.

Stateful steps see ``State`` scoped to the record's key; each stateful step has its own
store (``step<i>`` in the task's RocksDB). A user function that raises becomes
``UserFunctionError`` naming the step and where its function is (``user_code``); the task
adds the record and where it came from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import msgpack

from ..aggregates import RunningAggregate
from ..api import Lookup, State, Step
from ..errors import UserFunctionError
from ..graph import TIMERS, Op
from ..state import TaskStore
from ..user_code import function_error
from ..values import NO_KEY_WINDOW, unpack
from .join_ops import JoinState
from .window_ops import SessionState, StepTimers, WindowState, due, window_state

__all__ = ["UserFunctionError", "Chain", "Program"]


# msgpack ships no types: its packer is typed here, once, as what it returns.
_pack: Callable[[Any], bytes] = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def encode_key(key: Any) -> bytes:
    """Keys travel and are stored msgpack-encoded: prefix-free, so state names cannot collide."""
    if type(key) is str:   # the common key, without the checks below
        return _pack(key)
    if not isinstance(key, (str, bytes, int)) or isinstance(key, bool):
        raise UserFunctionError(f"keys must be str, bytes or int, "
                                f"not {type(key).__name__}: {key!r}")
    if type(key) is int and not -2**63 <= key < 2**64:   # msgpack's OverflowError named nothing
        raise UserFunctionError(f"an int key must fit in 64 bits (-2**63 .. 2**64 - 1), not "
                                f"{key}")
    return _pack(key)


def event_time_of(fn: Callable[[Any], Any], topic: str, value: Any) -> int:
    """W1: a source's ``timestamp(value)``, which must be a whole number of ms."""
    try:
        t = fn(value)
    except Exception as exc:
        raise UserFunctionError(f"source {topic!r} timestamp function raised "
                                f"{type(exc).__name__}: {exc}") from exc
    if isinstance(t, float) and t.is_integer():
        t = int(t)
    if type(t) is int:
        if _INT64_MIN <= t <= _INT64_MAX:
            return t
        raise UserFunctionError(f"source {topic!r} timestamp function returned {t}: an event "
                                f"time is milliseconds in a signed 64-bit number (every "
                                f"record carries it so, as Kafka's timestamps do)")
    raise UserFunctionError(f"source {topic!r} timestamp function returned {t!r}: an event "
                            f"time is whole milliseconds (an int)")


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


#: The header length of a msgpack str by its first byte: a stream key that is a str is
#: its UTF-8 bytes after it (fixstr: 0xa0-0xbf; str 8, 16, 32).
STR_HEADER = {**{lead: 1 for lead in range(0xA0, 0xC0)}, 0xD9: 2, 0xDA: 3, 0xDB: 5}
#: The first byte of a msgpack bin (a bytes key): bin 8, 16, 32.
BIN_HEADS = frozenset([0xC4, 0xC5, 0xC6])


def decode_key(raw: bytes | None) -> Any:
    return None if raw is None else unpack(raw)


class Chain:
    """Runs a stage's steps on one value; ``run`` returns the list of output values."""

    def __init__(self, steps: tuple[Step, ...], store: TaskStore | None) -> None:
        self._steps = steps
        self._states: list[State | Aggregate | None] = []
        for i, step in enumerate(steps):
            if step.stateful:
                assert store is not None
                self._states.append(_state(step, store.accessors(f"step{i}")))
            else:
                self._states.append(None)
        if len(steps) == 1:   # most stages: one call per record, no list rebuilt per step
            self.run = _one_step(steps[0], self._states[0])  # type: ignore[method-assign,assignment]
        #: a chain of one built-in running aggregate (``count()``, ``sum``...): its step on
        #: a record's key and value, which returns the one output value (``run`` without
        #: the list), for the record path's own loop
        self.aggregate: Aggregate | None = None
        if len(steps) == 1 and isinstance(steps[0].fn, RunningAggregate):
            self.aggregate = cast(Aggregate, self._states[0])
            self.aggregate_step = steps[0]

    def aggregate_error(self, exc: Exception) -> UserFunctionError:
        """What ``run`` raises when ``aggregate`` raised ``exc``."""
        return _raised(self.aggregate_step, exc)

    def run(self, key_bytes: bytes | None, value: Any) -> list[Any]:
        values = [value]
        for step, state in zip(self._steps, self._states, strict=True):
            values = _apply(step, state, key_bytes, values)
            if not values:
                break
        return values


class Program:
    """Runs a stage's program (``graph.py``: branches, merges, several outputs) on one
    value; ``run`` returns the values for each of the stage's outputs, in output order.

    Each op feeds only later ops, so one pass in program order sees every op's inputs
    complete. Branches share a value object: a function that changes its value in place
    changes it for the branches after it (docs/api.md says to return a new value)."""

    def __init__(self, ops: tuple[Op, ...], outputs: int, store: TaskStore | None,
                 stats: Any = None) -> None:
        """``stats``: the task's ``TaskStats``, whose ``lookup_misses`` a lookup counts."""
        self._ops = ops
        self._stats = stats
        self._outputs = outputs
        self._states: list[Any] = []
        self.windows: dict[int, WindowState | SessionState | JoinState | StepTimers] = {}
        self._store = store
        for i, op in enumerate(ops):
            if op.window is not None:
                assert store is not None and op.store is not None
                self.windows[i] = window_state(op.window, i, store.accessors(op.store),
                                               store.accessors(TIMERS))
                self._states.append(self.windows[i])
            elif op.store is not None:
                assert store is not None
                access = store.accessors(op.store)
                if op.lookup is not None:
                    self._states.append(access[0])
                    continue
                assert op.step is not None
                state = _state(op.step, access)
                if op.step.on_timer is not None and isinstance(state, State):
                    self.windows[i] = StepTimers(op.step, i, state, store.accessors(TIMERS))
                self._states.append(state)
            else:
                self._states.append(None)
        # Event time, for a stage with windows: the record's time and the watermark of
        # the task's last checkpoint (what a record is late against, W6); the values a
        # record brought that fell in no open window (the caller sets them aside).
        self.event_time = 0
        self.watermark: int | None = None
        self.late: list[Any] = []

    def run(self, key_bytes: bytes | None, value: Any) -> list[list[Any]]:
        return self._run(0, key_bytes, [value], entry=True)

    def _run(self, first: int, key_bytes: bytes | None, start: list[Any], *,
             entry: bool) -> list[list[Any]]:
        """``start`` into op ``first`` (``entry``), or as the output of op ``first`` (a
        window's results at its close), and on through the ops after it."""
        outs: list[list[Any]] = [[] for _ in range(self._outputs)]
        inputs: list[list[Any]] = [[] for _ in self._ops]
        inputs[first] = start
        for i in range(first, len(self._ops)):
            op, state, values = self._ops[i], self._states[i], inputs[i]
            if not values:
                continue
            if entry or i > first:
                if op.step is not None:
                    values = _apply(op.step, state, key_bytes, values)
                elif op.lookup is not None:
                    values, hit = _look_up(op.lookup, state, key_bytes, values)
                    if not hit and self._stats is not None:
                        self._stats.lookup_misses += 1
                elif op.window is not None:
                    values = self._window(state, key_bytes, values)
            for j in op.next:
                inputs[j] += values
            for k in op.outputs:
                outs[k] += values
        return outs

    def _window(self, window: Any, key_bytes: bytes | None, values: list[Any]) -> list[Any]:
        if key_bytes is None:   # a keyed source's record that has no key
            raise UserFunctionError(NO_KEY_WINDOW)
        out: list[Any] = []
        for v in values:
            results, late = window.add(key_bytes, v, self.event_time, self.watermark)
            out += results
            if late:
                self.late.append(v)
        return out

    def fire(self, watermark: int | None, emit: Emit,
             failed: Callable[[Exception, bytes, int], None] | None = None,
             undo: tuple[Callable[[], None], Callable[[], None]] | None = None,
             late: Callable[[bytes, list[Any], int], None] | None = None) -> None:
        """W5: every window ``watermark`` closes, in timer order: ``emit`` gets its key,
        what it sends to each of the stage's outputs, and the results' timestamp. A
        firing that raises (a timer's function, a step after the window, a join's, the
        output's encoding in ``emit``) goes to ``failed`` (the error, the key, the time),
        when given, with its state writes undone (``undo``: savepoint and rollback) and
        its window or timer gone, so it does not fail again at every checkpoint. A
        result a later window of the stage had already closed goes to ``late`` (the
        key, the results, their time), not to the next record read."""
        if not self.windows or watermark is None:
            return
        assert self._store is not None
        # Again, for the ops after one that sent results on: a later window of the stage
        # may now have a timer the same watermark passes (a roll-up of windows). Only
        # later ops, so it ends (a timer that sets a due timer of its own waits for the
        # next checkpoint, as before).
        after = -1
        while after < len(self._ops):
            fed = len(self._ops)
            for at, index, state_key in due(self._store.items(TIMERS), watermark):
                if index <= after:
                    continue
                if undo is not None:
                    undo[0]()
                try:
                    key_bytes, results, timestamp = self.windows[index].close(state_key, at)
                    if results:
                        # A later window places the results at their own time, not at
                        # the last record's.
                        self.event_time = timestamp
                        emit(key_bytes, self._run(index, key_bytes, results, entry=False),
                             timestamp)
                        fed = min(fed, index)
                        if self.late:
                            dropped, self.late = self.late, []
                            if late is not None:
                                late(key_bytes, dropped, timestamp)
                except Exception as exc:
                    if failed is None:
                        raise
                    if undo is not None:
                        undo[1]()
                    self.late = []   # the firing's, undone with it
                    failed(exc, self.windows[index].drop(state_key, at), at)
            after = fed


#: The first bytes of a key (msgpack) a table of each key format can hold: a utf8 table's
#: keys are str, a bytes table's bytes (json and msgpack tables: any key).
_TABLE_KEY_HEADS = {"utf8": frozenset(STR_HEADER), "bytes": BIN_HEADS}
_KEY_KINDS = {"utf8": "str", "bytes": "bytes"}


def _look_up(lookup: Lookup, get: Callable[[bytes], bytes | None], key_bytes: bytes | None,
             values: list[Any]) -> tuple[list[Any], bool]:
    """A lookup step on ``values`` (all of one record, so of one key): each with the
    table's row for the key, or dropped (inner) / with None (left) where there is none.
    A key of a type the table's keys never are is the record's error: it would miss every
    time, in silence (an int user id looked up in a utf8-keyed table). Also returns
    whether the key had a row (a miss is counted: ``TaskStats.lookup_misses``)."""
    heads = _TABLE_KEY_HEADS.get(lookup.table.key_format)
    if heads is not None and key_bytes and key_bytes[0] not in heads:
        key = decode_key(key_bytes)
        want = _KEY_KINDS[lookup.table.key_format]
        raise UserFunctionError(
            f"lookup({lookup.table.topic!r}): the stream's key {key!r} is {type(key).__name__}, "
            f"and table {lookup.table.topic!r} has {lookup.table.key_format} keys, each a "
            f"{want}: it can never match; key the stream by a {want} before the lookup")
    raw = get(key_bytes) if key_bytes is not None else None
    row = None if raw is None else unpack(raw)
    if row is None and lookup.how == "inner":
        return [], False
    join = lookup.join
    if join is None:
        return [(v, row) for v in values], row is not None
    try:
        return [join(v, row) for v in values], row is not None
    except Exception as exc:
        name = getattr(join, "__name__", "join")
        raise function_error(f"lookup({lookup.table.topic!r}) join {name}", join, exc) from exc


#: What a firing sends on: (key, the values for each output, their timestamp)
Emit = Callable[[bytes, list[list[Any]], int], None]

#: A running aggregate's step on its store (``RunningAggregate.over``): (key, value) -> acc
Aggregate = Callable[[bytes | None, Any], Any]


def _state(step: Step, access: tuple[Callable[[bytes], bytes | None],
                                     Callable[[bytes, bytes], None],
                                     Callable[[bytes], None]]) -> State | Aggregate:
    """A stateful step's state: a ``State``, or for a running aggregate its step on the
    store itself (no ``State`` and no key built per record)."""
    if isinstance(step.fn, RunningAggregate):
        return step.fn.over(access[0], access[1])
    return State(*access)


def _apply(step: Step, state: State | Aggregate | None, key_bytes: bytes | None,
           values: list[Any]) -> list[Any]:
    """One step on ``values``."""
    fn = step.fn
    try:
        if state is not None:
            if type(state) is not State:
                aggregate = cast(Aggregate, state)
                return [aggregate(key_bytes, v) for v in values]
            assert isinstance(state, State)
            state._prefix = key_bytes or b""
            if step.kind == "map":
                return [fn(v, state) for v in values]
            if step.kind == "flat_map":
                return [x for v in values for x in fn(v, state)]
            return [v for v in values if fn(v, state)]
        if step.kind == "map":
            return [fn(v) for v in values]
        if step.kind == "flat_map":
            return [x for v in values for x in fn(v)]
        return [v for v in values if fn(v)]
    except Exception as exc:
        raise _raised(step, exc) from exc


def _raised(step: Step, exc: Exception) -> UserFunctionError:
    if isinstance(step.fn, RunningAggregate):   # "step count()", at the user's own function
        return function_error(f"step {step.name}", step.fn.user, exc)
    return function_error(f"step {step.kind}({step.name})", step.fn, exc)


def _one_step(step: Step, state: State | Aggregate | None
              ) -> Callable[[bytes | None, Any], list[Any]]:
    """``Chain.run`` for a chain of one step: what the loop above does, for that step only."""
    fn, kind = step.fn, step.kind
    if state is not None and type(state) is not State:
        aggregate = cast(Aggregate, state)

        def aggregating(key_bytes: bytes | None, value: Any) -> list[Any]:
            try:
                return [aggregate(key_bytes, value)]
            except Exception as exc:
                raise _raised(step, exc) from exc
        return aggregating
    if state is not None:
        assert isinstance(state, State)
        def stateful(key_bytes: bytes | None, value: Any) -> list[Any]:
            state._prefix = key_bytes or b""
            try:
                if kind == "map":
                    return [fn(value, state)]
                if kind == "flat_map":
                    return list(fn(value, state))
                return [value] if fn(value, state) else []
            except Exception as exc:
                raise _raised(step, exc) from exc
        return stateful

    def stateless(key_bytes: bytes | None, value: Any) -> list[Any]:
        try:
            if kind == "map":
                return [fn(value)]
            if kind == "flat_map":
                return list(fn(value))
            return [value] if fn(value) else []
        except Exception as exc:
            raise _raised(step, exc) from exc
    return stateless
