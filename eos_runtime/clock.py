"""The wall clock the runtime reads, and the monotonic clock it times with.

The runtime reads the wall clock only through ``wall()``, so that a test or an experiment
can step it the way NTP steps a host's clock (the fault action ``clock``,
``faults.py``): ``step(seconds)`` moves this process's wall clock by ``seconds``
(negative: back) from then on, and leaves ``monotonic()`` alone, as a real step does.

What reads which (docs/protocol.md, "Clocks"): *when* something is due (a checkpoint, a
lease renewal, a stop watch's look, a stall's timeout) is measured on the monotonic
clock, which no step moves; the wall clock only *names* things that several processes
must agree on (the commit grid's lines and the versions named after them, a lease
record's time, a run's start).
"""

from __future__ import annotations

import math
import threading
import time
from typing import Protocol

__all__ = ["Clock", "SYSTEM", "Stamps", "monotonic", "offset", "reset", "stamp_ms", "step",
           "wall"]

_offset = 0.0


def wall() -> float:
    """This process's wall clock, epoch seconds (with any injected step)."""
    return time.time() + _offset


def monotonic() -> float:
    """Seconds on a clock no step moves (``time.monotonic``)."""
    return time.monotonic()


def step(seconds: float) -> None:
    """Step this process's wall clock by ``seconds`` (negative: back), as NTP would."""
    global _offset
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not math.isfinite(seconds):
        raise ValueError(f"clock step {seconds!r}: give a finite number of seconds")
    _offset += float(seconds)


def offset() -> float:
    """The sum of the steps taken so far (seconds)."""
    return _offset


def reset() -> None:
    """Undo every step: a reused worker starts its next task on the true clock."""
    global _offset
    _offset = 0.0


class Clock(Protocol):
    """What a timer reads; tests pass their own (``tests/test_commit_timer.py``)."""

    def wall(self) -> float: ...

    def monotonic(self) -> float: ...


class _System:
    """This module's clocks as one object (the default ``Clock``)."""

    @staticmethod
    def wall() -> float:
        return wall()

    @staticmethod
    def monotonic() -> float:
        return monotonic()


SYSTEM: Clock = _System()


class Stamps:
    """Times a process writes into records that other processes compare with their own
    clocks (a lease's acquire and heartbeats, ``protocol/lease.py``): never below the last
    one. Each stamp is the wall clock's time, or,
    where the wall clock stepped back, the last stamp plus the monotonic time since. A
    step back on a lease holder's host would otherwise make its heartbeats look as old
    as the step to every other host, and a live lease lapse. A step forward is followed:
    stamps from the future only make a lease look alive longer (by the step)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._last: tuple[int, float] | None = None   # (stamp ms, monotonic s)
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            wall_now, mono = int(self.clock.wall() * 1000), self.clock.monotonic()
            if self._last is not None:
                last, then = self._last
                wall_now = max(wall_now, last + int((mono - then) * 1000))
            self._last = (wall_now, mono)
            return wall_now


_STAMPS = Stamps(SYSTEM)


def stamp_ms() -> int:
    """This process's next stamp (``Stamps``): the wall clock's ms, never going back."""
    return _STAMPS.now_ms()
