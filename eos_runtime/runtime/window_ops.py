"""A stage's windows: records into their windows' aggregates, and windows out when the
watermark closes them. The rules are ``windows.py``'s (W5, W6, T1-T3); this carries them
out against the task's store.

- A window's aggregate is kept under (key, window start) in the op's store, with its end
  (T3); its timer, at ``end + grace``, in the stage's timers store, keyed in firing order
  (T1). Both are staged writes, so they commit with the checkpoint, or go with a rewind.
- ``add`` puts a record in each of its windows that has not closed by the task's
  watermark (the one of its last checkpoint); a record whose every window has closed is
  late (W6), and the caller counts it and sets it aside.
- ``due`` yields the windows the watermark of a checkpoint closes, in timer order; the
  caller emits a final result and deletes the window's aggregate and timer in the same
  version (T2): a crash before the commit undoes all three, one after it has all three.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import msgpack

from ..api import State, Step
from ..api_windows import JoinOp, WindowOp
from ..errors import UserFunctionError
from ..values import unpack
from ..windows import (
    TIME_BYTES,
    Session,
    closes_at,
    is_late,
    merge_session,
    session_closes_at,
    session_record_late,
    time_bytes,
    time_of,
    timer_key,
    timer_of,
)
from .join_ops import JoinState

__all__ = ["WindowState", "SessionState", "window_state", "result"]


Get = Callable[[bytes], bytes | None]
Put = Callable[[bytes, bytes], None]
Delete = Callable[[bytes], None]


def _state_key(key_bytes: bytes, start: int) -> bytes:
    """Keys are msgpack-encoded, so prefix-free: a key's windows sort by start after it."""
    return key_bytes + time_bytes(start)


def _split(state_key: bytes) -> tuple[bytes, int]:
    return state_key[:-TIME_BYTES], time_of(state_key, len(state_key) - TIME_BYTES)


def result(start: int, end: int, value: Any) -> dict[str, Any]:
    """What a window emits: its bounds and its aggregate."""
    return {"start": start, "end": end, "value": value}


class WindowState:
    """One window op of a stage (``index``: its place in the program, which its timers
    name), over its store and the stage's timers store."""

    def __init__(self, op: WindowOp, index: int,
                 state: tuple[Get, Put, Delete], timers: tuple[Get, Put, Delete]) -> None:
        self.op, self.index = op, index
        self._get, self._put, self._delete = state
        self._tput, self._tdelete = timers[1], timers[2]
        self._tag = bytes([index])

    def add(self, key_bytes: bytes, value: Any, t: int,
            watermark: int | None) -> tuple[list[Any], bool]:
        """``value`` of event time ``t`` into its open windows. Returns the results to
        emit now (``current``: each window's updated result) and whether it was late
        (in no open window)."""
        op = self.op
        spec = op.spec
        assert not isinstance(spec, Session)
        out: list[Any] = []
        placed = False
        for start, end in spec.windows_of(t):
            if is_late(end, op.grace, watermark):
                continue
            placed = True
            sk = _state_key(key_bytes, start)
            raw = self._get(sk)
            try:
                if raw is None:
                    acc = op.first(value)
                    self._tput(timer_key(closes_at(end, op.grace), self._tag + sk), b"")
                else:
                    acc = op.add(unpack(raw)[1], value)
            except Exception as exc:
                raise UserFunctionError(f"window {op.name} raised {type(exc).__name__}: "
                                        f"{exc}") from exc
            self._put(sk, _kept(op, [end, acc], acc))
            if op.emit == "current":
                out.append(result(start, end, acc))
        return out, not placed

    def drop(self, state_key: bytes, at: int) -> bytes:
        """The window of ``state_key`` and its timer go, emitting nothing (its firing
        failed and was set aside); returns its key."""
        self._tdelete(timer_key(at, self._tag + state_key))
        self._delete(state_key)
        return _split(state_key)[0]

    def close(self, state_key: bytes, at: int) -> tuple[bytes, list[Any], int]:
        """The window of ``state_key`` (timer at ``at``) closes: its aggregate and timer
        are deleted; returns its key, what it emits (``final``: its result) and the
        result's timestamp (the window's last ms)."""
        self._tdelete(timer_key(at, self._tag + state_key))
        raw = self._get(state_key)
        self._delete(state_key)
        key_bytes, start = _split(state_key)
        if raw is None:   # never: a timer is set with its window
            return key_bytes, [], at
        end, acc = unpack(raw)
        return key_bytes, ([result(start, end, acc)] if self.op.emit == "final" else []), end - 1


class SessionState:
    """A session window op: a key's sessions (each ``[start, end)``, ``end`` its last
    record's time plus the gap) are one entry of the op's store, ``[[start, end, acc],
    ...]``; each has its timer at ``end + grace``. A record joins every session it
    touches (``windows.merge_session``), their aggregates merged with ``op.merge``."""

    def __init__(self, op: WindowOp, index: int,
                 state: tuple[Get, Put, Delete], timers: tuple[Get, Put, Delete]) -> None:
        assert isinstance(op.spec, Session) and op.merge is not None
        self.op, self.index, self.gap = op, index, op.spec.gap
        self._get, self._put, self._delete = state
        self._tput, self._tdelete = timers[1], timers[2]
        self._tag = bytes([index])

    def _timer(self, key_bytes: bytes, start: int, end: int) -> bytes:
        return timer_key(session_closes_at(end, self.op.grace),
                         self._tag + _state_key(key_bytes, start))

    def add(self, key_bytes: bytes, value: Any, t: int,
            watermark: int | None) -> tuple[list[Any], bool]:
        op = self.op
        if session_record_late(t, op.grace, watermark):
            return [], True
        raw = self._get(key_bytes)
        sessions: list[list[Any]] = [] if raw is None else unpack(raw)
        (start, end), merged = merge_session([(s, e) for s, e, _ in sessions], t, self.gap)
        joined = [s for s in sessions if (s[0], s[1]) in merged]
        kept = [s for s in sessions if (s[0], s[1]) not in merged]
        merge = op.merge
        assert merge is not None
        try:   # in time order: the sessions before the record, the record, those after
            parts = [*(s[2] for s in joined if s[0] <= t), op.first(value),
                     *(s[2] for s in joined if s[0] > t)]
            acc = parts[0]
            for part in parts[1:]:
                acc = merge(acc, part)
        except Exception as exc:
            raise UserFunctionError(f"window {op.name} raised {type(exc).__name__}: "
                                    f"{exc}") from exc
        for s in joined:
            self._tdelete(self._timer(key_bytes, s[0], s[1]))
        self._tput(self._timer(key_bytes, start, end), b"")
        kept.append([start, end, acc])
        kept.sort(key=lambda s: s[0])
        self._put(key_bytes, _kept(op, kept, acc))
        return ([result(start, end, acc)] if op.emit == "current" else []), False

    def drop(self, state_key: bytes, at: int) -> bytes:
        """``close`` emitting nothing (its firing failed and was set aside)."""
        return self.close(state_key, at)[0]

    def close(self, state_key: bytes, at: int) -> tuple[bytes, list[Any], int]:
        key_bytes, start = _split(state_key)
        self._tdelete(timer_key(at, self._tag + state_key))
        raw = self._get(key_bytes)
        sessions: list[list[Any]] = [] if raw is None else unpack(raw)
        closing = [s for s in sessions if s[0] == start]
        rest = [s for s in sessions if s[0] != start]
        if rest:
            self._put(key_bytes, _pack(rest))
        else:
            self._delete(key_bytes)
        if not closing:   # never: a session's timer goes with it
            return key_bytes, [], at
        _, end, acc = closing[0]
        return key_bytes, ([result(start, end, acc)] if self.op.emit == "final" else []), end - 1


class StepTimers:
    """The timers of a step with ``on_timer``: ``state.timer(at)`` sets one for the
    record's key (T1); when the watermark reaches it, ``on_timer(at, state)`` runs with
    the key's state, and what it returns (None: nothing) is the step's output."""

    def __init__(self, step: Step, index: int, state: State,
                 timers: tuple[Get, Put, Delete]) -> None:
        self.step, self.state = step, state
        tag, put, self._tdelete = bytes([index]), timers[1], timers[2]
        state._timer = lambda at, key_bytes: put(timer_key(at, tag + key_bytes), b"")
        self._tag = tag

    def drop(self, key_bytes: bytes, at: int) -> bytes:
        """The timer goes without its ``on_timer`` (which failed and was set aside)."""
        self._tdelete(timer_key(at, self._tag + key_bytes))
        return key_bytes

    def close(self, key_bytes: bytes, at: int) -> tuple[bytes, list[Any], int]:
        self._tdelete(timer_key(at, self._tag + key_bytes))
        on_timer = self.step.on_timer
        assert on_timer is not None
        self.state._prefix = key_bytes
        try:
            out = on_timer(at, self.state)
        except Exception as exc:
            raise UserFunctionError(f"step {self.step.kind}({self.step.name}) on_timer raised "
                                    f"{type(exc).__name__}: {exc}") from exc
        return key_bytes, ([] if out is None else [out]), at


def window_state(op: WindowOp | JoinOp, index: int, state: tuple[Get, Put, Delete],
                 timers: tuple[Get, Put, Delete]) -> WindowState | SessionState | JoinState:
    """The operator of a window op, by its kind of window (a join's too)."""
    if isinstance(op, JoinOp):
        return JoinState(op, index, state, timers)
    if isinstance(op.spec, Session):
        return SessionState(op, index, state, timers)
    return WindowState(op, index, state, timers)


def due(timers: Iterator[tuple[bytes, bytes]], watermark: int | None
        ) -> list[tuple[int, int, bytes]]:
    """The timers at or below ``watermark``, in firing order (T1): (time, op index, the
    window's state key). Collected before any is deleted."""
    if watermark is None:
        return []
    out = []
    for stored, _ in timers:
        at, rest = timer_of(stored)
        if at > watermark:
            break
        out.append((at, rest[0], rest[1:]))
    return out


_pack: Callable[[Any], bytes] = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def _kept(op: WindowOp, entry: Any, acc: Any) -> bytes:
    """``entry`` packed for the op's store; an aggregate msgpack cannot hold is the
    record's error, naming the window (a bare TypeError named nothing)."""
    try:
        return _pack(entry)
    except Exception as exc:
        raise UserFunctionError(
            f"window {op.name}: its aggregate, a {type(acc).__name__}, cannot be kept as "
            f"state ({exc}): return None, a bool, number, str, bytes, list or dict") from exc
