"""A windowed (interval) join of two keyed streams: each left record pairs with each right
record of its key whose event time is within ``within`` ms of its own, each pair
emitted once, when the second of the two is processed; with ``how="left"``, a left
record that found no partner is emitted alone once no partner can come any more.

The API (``api_windows.join_streams``) tags each side's values ``["L", value]`` /
``["R", value]`` and shuffles both by their join key into one stage, where this op
keeps, per key, the records of each side that a partner may still meet:

- A record is late when ``t + grace < watermark`` (the watermark of the task's last
  checkpoint): a partner of its may be gone. Late records are counted and set aside (W6).
- A record ``x`` can meet no partner any more once ``watermark - grace > t_x + within``
  (every partner still to come is later than that), so it is kept until the watermark
  reaches ``t_x + within + grace + 1``: its timer (T1). Then it goes, and an unmatched
  left record is emitted with the partner None.
- The buffer, the matched flags and the timers are staged with the version's other
  writes (T2): a pair's output and the buffer change that records it are one version's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack

from ..api_windows import JoinOp
from ..errors import UserFunctionError
from ..values import unpack
from ..windows import TIME_BYTES, time_bytes, timer_key

__all__ = ["JoinState"]


Get = Callable[[bytes], bytes | None]
Put = Callable[[bytes, bytes], None]
Delete = Callable[[bytes], None]
_pack: Callable[[Any], bytes] = msgpack.Packer(use_bin_type=True, autoreset=True).pack


class JoinState:
    """One join op of a stage (``index``: its place in the program, which its timers name)."""

    def __init__(self, op: JoinOp, index: int,
                 state: tuple[Get, Put, Delete], timers: tuple[Get, Put, Delete]) -> None:
        self.op, self.index = op, index
        self._get, self._put, self._delete = state
        self._tput, self._tdelete = timers[1], timers[2]
        self._tag = bytes([index])

    def _expires(self, t: int) -> int:
        return t + self.op.within + self.op.grace + 1

    def _buffer(self, key_bytes: bytes) -> dict[str, list[list[Any]]]:
        raw = self._get(key_bytes)
        return {"L": [], "R": []} if raw is None else unpack(raw)

    def add(self, key_bytes: bytes, tagged: Any, t: int,
            watermark: int | None) -> tuple[list[Any], bool]:
        """A tagged record (``[side, value]``) of event time ``t``: the pairs it makes now,
        and whether it was late."""
        op = self.op
        if watermark is not None and t + op.grace < watermark:
            return [], True
        side, value = tagged
        buffer = self._buffer(key_bytes)
        out: list[Any] = []
        matched = False
        other = buffer["R" if side == "L" else "L"]
        for rec in other:
            if abs(rec[0] - t) <= op.within:
                matched = True
                if side == "L":
                    out.append(self._pair(value, rec[1]))
                else:
                    out.append(self._pair(rec[1], value))
                    rec[2] = True      # that left record found a partner
        buffer[side].append([t, value, matched])
        self._put(key_bytes, _pack(buffer))
        self._tput(timer_key(self._expires(t), self._tag + key_bytes + time_bytes(t)), b"")
        return out, False

    def _pair(self, left: Any, right: Any) -> Any:
        join = self.op.join
        if join is None:
            return [left, right]
        try:
            return join(left, right)
        except Exception as exc:
            raise UserFunctionError(f"join {self.op.name} raised {type(exc).__name__}: "
                                    f"{exc}") from exc

    def drop(self, state_key: bytes, at: int) -> bytes:
        """``close`` emitting nothing (its join function failed and was set aside)."""
        key_bytes = state_key[:-TIME_BYTES]
        self._tdelete(timer_key(at, self._tag + state_key))
        buffer = self._buffer(key_bytes)
        for side in ("L", "R"):
            buffer[side] = [r for r in buffer[side] if self._expires(r[0]) > at]
        if buffer["L"] or buffer["R"]:
            self._put(key_bytes, _pack(buffer))
        else:
            self._delete(key_bytes)
        return key_bytes

    def close(self, state_key: bytes, at: int) -> tuple[bytes, list[Any], int]:
        """The timer at ``at`` of a record of this key: every record of the key that can
        meet no partner any more goes; an unmatched left one is emitted (``how="left"``)."""
        key_bytes = state_key[:-TIME_BYTES]
        self._tdelete(timer_key(at, self._tag + state_key))
        buffer = self._buffer(key_bytes)
        out: list[Any] = []
        for side in ("L", "R"):
            gone = [r for r in buffer[side] if self._expires(r[0]) <= at]
            buffer[side] = [r for r in buffer[side] if self._expires(r[0]) > at]
            if side == "L" and self.op.how == "left":
                out += [self._pair(r[1], None) for r in gone if not r[2]]
        if buffer["L"] or buffer["R"]:
            self._put(key_bytes, _pack(buffer))
        else:
            self._delete(key_bytes)
        return key_bytes, out, at - self.op.grace - 1
