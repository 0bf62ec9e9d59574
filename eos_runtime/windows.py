"""Event-time windows and timers: which windows a record falls in, when a window closes,
which records are late, and how a timer is keyed in a task's store. No I/O.

The rules (docs/design/event-time.md):

- A window is ``[start, end)`` in event-time milliseconds. A watermark ``w`` says records
  before ``w`` are not expected any more (``protocol/watermarks.py``), so a window is
  complete once ``w >= end``, and *closes* once ``w >= end + grace``: its timer is at
  ``end + grace`` (W5).
- A record is *late* when a window it falls in has closed already: ``end + grace <=
  w`` at the time it is processed (W6). A record within ``grace`` of its partition's
  highest event time is never late, since no watermark passes that highest time.
- Timers are stored under a key whose byte order is their time order, then the record
  key's: a range scan of the store yields them in the order they fire (T1).
- Sessions: a record at ``t`` opens ``[t, t + gap)``; sessions of one key that overlap or
  touch merge into one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import UserFunctionError

__all__ = ["Tumbling", "Hopping", "Session", "tumbling", "hopping", "session", "closes_at",
           "is_late", "session_closes_at", "session_record_late", "timer_key", "timer_of",
           "merge_session", "time_bytes", "time_of", "TIME_BYTES", "MS"]

MS = {"ms": 1, "seconds": 1000, "minutes": 60_000, "hours": 3_600_000, "days": 86_400_000}
_TIME = struct.Struct(">Q")
_SIGN = 1 << 63


def _span(what: str, size: int | None, units: dict[str, float]) -> int:
    """A length in ms from ``size`` (ms) or keyword units; one way only, a whole ms, > 0."""
    given = {u: v for u, v in units.items() if v}
    if size is not None and given:
        raise ValueError(f"{what}: give the length once, in ms or in units, not both")
    total = size if size is not None else sum(v * MS[u] for u, v in given.items())
    if isinstance(total, bool) or not isinstance(total, (int, float)) or total != int(total) \
            or total <= 0:
        raise ValueError(f"{what}: a length of whole milliseconds > 0, not {total!r}")
    return int(total)


@dataclass(frozen=True, slots=True)
class Tumbling:
    """Windows of ``size`` ms back to back, aligned to the epoch: each record in one."""

    size: int

    def __post_init__(self) -> None:   # built directly too (the class is public)
        _whole("tumbling size", self.size)

    def windows_of(self, t: int) -> list[tuple[int, int]]:
        start = t - t % self.size
        return [(start, start + self.size)]


@dataclass(frozen=True, slots=True)
class Hopping:
    """Windows of ``size`` ms starting every ``every`` ms: each record in ``size / every``."""

    size: int
    every: int

    def __post_init__(self) -> None:
        _whole("hopping size", self.size)
        _whole("hopping every", self.every)
        if self.every > self.size or self.size % self.every:
            raise ValueError(f"hopping: every ({self.every} ms) must divide size "
                             f"({self.size} ms)")

    def windows_of(self, t: int) -> list[tuple[int, int]]:
        last = t - t % self.every                 # the latest start at or before t
        first = last - self.size + self.every     # the earliest whose window holds t
        return [(s, s + self.size) for s in range(first, last + 1, self.every)]


@dataclass(frozen=True, slots=True)
class Session:
    """A key's records no more than ``gap`` ms apart, in one window."""

    gap: int

    def __post_init__(self) -> None:
        _whole("session gap", self.gap)


def _whole(what: str, ms: object) -> None:
    if isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0:
        raise ValueError(f"{what}: a length of whole milliseconds > 0, not {ms!r}")


def tumbling(size: int | None = None, *, ms: float = 0, seconds: float = 0, minutes: float = 0,
             hours: float = 0, days: float = 0) -> Tumbling:
    return Tumbling(_span("tumbling", size, {"ms": ms, "seconds": seconds, "minutes": minutes,
                                             "hours": hours, "days": days}))


def hopping(size: int, every: int) -> Hopping:
    """``size`` and ``every`` in ms; ``every`` must divide ``size`` (as in Kafka Streams'
    and Quix Streams' aligned hopping windows), so every record is in as many windows."""
    return Hopping(_span("hopping size", size, {}), _span("hopping every", every, {}))


def session(gap: int) -> Session:
    return Session(_span("session gap", gap, {}))


def closes_at(end: int, grace: int) -> int:
    """The watermark at which window ``[.., end)`` closes: its timer's time (W5)."""
    return end + grace


def is_late(end: int, grace: int, watermark: int | None) -> bool:
    """Whether a record of window ``[.., end)`` comes after the window closed (W6)."""
    return watermark is not None and closes_at(end, grace) <= watermark


def session_closes_at(end: int, grace: int) -> int:
    """The watermark at which session ``[.., end)`` closes: once every record that could
    still join it (one at ``end`` included: no more than the gap from its last record)
    would be late (``session_record_late``)."""
    return closes_at(end + 1, grace)


def session_record_late(t: int, grace: int, watermark: int | None) -> bool:
    """W6 for sessions: a record more than ``grace`` behind the watermark. Not "the
    session it alone would open has closed": a record that is, yet within a gap of a
    session that closed, would join a session whose result is out."""
    return is_late(t + 1, grace, watermark)


#: Bytes of an encoded time (``time_bytes``).
TIME_BYTES = _TIME.size


def time_bytes(time: int) -> bytes:
    """A time (ms) as bytes whose order is the times' order: big-endian with its sign bit
    flipped, so negative times sort first. A time past a signed 64-bit number is the
    record's error: masked, ``state.timer(2**63)`` became a timer at -2**63, and a window
    near the largest time closed at once."""
    if not -_SIGN <= time < _SIGN:
        raise UserFunctionError(f"time {time} is past the times an event may carry "
                                f"(-2**63 .. 2**63 - 1): no window or timer can close there")
    return _TIME.pack(time + _SIGN)


def time_of(raw: bytes, at: int = 0) -> int:
    """``time_bytes`` undone, from offset ``at`` of ``raw``."""
    return int(_TIME.unpack_from(raw, at)[0]) - _SIGN


def timer_key(time: int, key: bytes) -> bytes:
    """The store key of a timer: its time (``time_bytes``), then the record key (T1)."""
    return time_bytes(time) + key


def timer_of(stored: bytes) -> tuple[int, bytes]:
    """``timer_key`` undone."""
    return time_of(stored), stored[TIME_BYTES:]


def merge_session(sessions: list[tuple[int, int]], t: int,
                  gap: int) -> tuple[tuple[int, int], list[tuple[int, int]]]:
    """A record at ``t`` joins a key's ``sessions`` (each ``[start, end)``, ``end`` being its
    last record's time + ``gap``): returns the session it is in now and the ones merged
    into it (to delete, with their timers)."""
    start, end = t, t + gap
    merged = [s for s in sessions if s[0] <= end and start <= s[1]]
    for s in merged:
        start, end = min(start, s[0]), max(end, s[1])
    return (start, end), merged
