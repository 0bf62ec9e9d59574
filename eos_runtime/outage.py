"""Outages of the log: when a transient transport error is retried, and when to give up.

A run rides through an outage of its Kafka broker (stopped, SIGKILLed, restarted,
unreachable) for up to its *outage budget*: the driver keeps watching, and a task that
hit a transient error restarts in place and recovers (as after a crash, so exactly-once
holds: the failed transaction is aborted by the next generation's fence). This module
holds the rule, and no I/O: time comes from the caller (or the ``now`` it injects).

Rules:

    O1  An outage begins at the first failure after the last success (when the failing
        call began, where that is known); a success ends it.
    O2  A failure less than ``budget`` seconds after its outage began is retried, after a
        delay that starts at ``FIRST_DELAY`` and doubles per retry up to ``MAX_DELAY``,
        never reaching past the end of the budget (so a last try lands at the budget).
    O3  A failure ``budget`` seconds or more after its outage began gives up.
    O4  Budget 0: the first failure gives up (riding through is off).
    O5  A task restarted in place is back once it commits a checkpoint, not before: its
        recovery reaching the log proves reads (and a new generation), not that commits
        go through. A broker half shut down may serve the one and refuse the other; a
        failure before that first commit continues the outage, so the task gives up
        within its budget instead of restarting for ever. A healthy task commits every
        commit interval, idle or not (its source's timer).

Which errors are transient is the transport's to say (Kafka: ``transport/kafka/errors.py``,
``_transient``), carried as ``TransportError.transient``; ``is_transient`` reads it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from .errors import TransportError

__all__ = ["DEFAULT_BUDGET", "FIRST_DELAY", "MAX_DELAY", "OutageClock", "Verdict",
           "check_budget", "gone_too_long", "is_transient", "task_failed", "verdict"]

#: Seconds a run rides through an outage unless told otherwise (``--outage-budget``).
DEFAULT_BUDGET = 60.0
FIRST_DELAY = 0.25
MAX_DELAY = 2.0


@dataclass(frozen=True)
class Verdict:
    retry: bool          # try again (after ``delay``), or give up
    delay: float         # seconds to wait before the retry; 0 when giving up
    down_for: float      # seconds since the outage began


def check_budget(budget: float) -> float:
    """The budget as a float; ``ValueError`` unless it is a finite number >= 0."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) \
            or not math.isfinite(budget) or budget < 0:
        raise ValueError(f"outage budget must be a number of seconds >= 0, not {budget!r}")
    return float(budget)


def verdict(began: float, now: float, budget: float, retries: int) -> Verdict:
    """O2-O4 for a failure at ``now`` in an outage that began at ``began``, after
    ``retries`` retries of it."""
    down = max(now - began, 0.0)
    if down >= budget:
        return Verdict(False, 0.0, down)
    delay = min(FIRST_DELAY * 2 ** min(retries, 16), MAX_DELAY, budget - down)
    return Verdict(True, delay, down)


class OutageClock:
    """O1 around ``verdict``: tell it each failure and each success.

    ``now`` is the time source (``time.monotonic``; tests inject their own)."""

    def __init__(self, budget: float, now: Callable[[], float] = time.monotonic) -> None:
        self.budget = check_budget(budget)
        self._now = now
        self.began: float | None = None
        self.retries = 0
        self.outages = 0         # outages seen (each began by a failure after a success)

    def failed(self, since: float | None = None) -> Verdict:
        """A failure now, of a call that began at ``since`` (its time source's reading)
        if given: a call that waited for a frozen broker until its timeout was already
        in the outage while it waited."""
        now = self._now()
        if self.began is None:
            self.began = now if since is None else min(since, now)
            self.retries = 0
            self.outages += 1
        v = verdict(self.began, now, self.budget, self.retries)
        if v.retry:
            self.retries += 1
        return v

    def ok(self) -> None:
        self.began = None
        self.retries = 0

    @property
    def down_for(self) -> float:
        """Seconds since the current outage began; 0 when there is none."""
        return 0.0 if self.began is None else max(self._now() - self.began, 0.0)


def task_failed(clock: OutageClock, committed: bool) -> Verdict:
    """O5: a transient failure of a task that restarts in place; ``committed``: whether
    the failed incarnation committed a checkpoint (only then did its outage end)."""
    if committed:
        clock.ok()
    return clock.failed()


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a transport error that the same call may not hit once the log
    is back (the transport classified it so)."""
    return isinstance(exc, TransportError) and bool(getattr(exc, "transient", False))


def gone_too_long(where: str, down_for: float, budget: float, cause: object) -> str:
    """The one line a run fails with once an outage outlasted its budget."""
    return (f"{where} was unreachable for {down_for:.0f} s, longer than the outage budget "
            f"of {budget:g} s (--outage-budget); last error: {cause}")
