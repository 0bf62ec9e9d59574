"""One driver per job: who holds the job's lease, from its ``Lease`` records. No I/O.

A driver appends ``Lease`` records to the job's control topic (one partition, so every
reader sees them in one order): ``acquire`` before it records its run, ``release`` when
the run is over; ``renew`` every few seconds while the run goes on, to the heartbeat
topic ``<job>.heartbeats`` (``joblog/control.py``: a reader of the control topic must
not read every heartbeat). The lease is decided by folding the control topic's records
in offset order, the holder's latest heartbeat counting as its last record at the time
of the look (L3). A driver appends an acquire only after such a look found the lease
free or lapsed, so L1 over the control topic alone, where a holder's last record is its
acquire, never lets an acquire take a lease whose holder still beats. The rules:

L1  An ``acquire`` takes the lease when nobody holds it: no holder yet, the holder
    released it, or the holder's last record is more than its ``timeout_ms`` older than
    the acquire (a driver that died, judged by the acquiring driver's clock). A
    ``take_over`` acquire takes it from a live holder too. Any other acquire loses and
    changes nothing: of two drivers racing for a free lease, the first record in the log
    wins, and the loser learns it by reading the log back.
L2  ``renew`` and ``release`` count only from the holder (same ``owner`` token and run):
    a driver whose lease was taken over, or expired and taken, renews in vain.
L3  At time ``now``: no holder or a released lease is ``free``; a holder whose last
    record is more than its timeout old is ``expired`` (anyone may take it); else ``held``.
L4  A holder known to be gone within its timeout is ``dead``: a driver on the holder's own
    host found its pid not running (only that host can know: elsewhere a dead driver's
    lease lapses by L3). A taker first appends a ``release`` on the holder's behalf
    (``release_for``: the holder's owner and run, which L2 counts), then acquires it as a
    free lease by L1. Two takers race as for a free lease: the first acquire in the log
    wins, and a release appended after it names a holder that no longer holds, which
    changes nothing (L2).

Clocks: expiry compares times written by different drivers' clocks, so the timeout must
be much larger than the clock skew between the machines that run drivers of one job
(the default is a minute; NTP keeps hosts within milliseconds).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .wire import Lease

__all__ = ["FREE", "HELD", "EXPIRED", "DEAD", "LeaseState", "fold_lease", "lease_state",
           "release_for"]

FREE = "free"
HELD = "held"
EXPIRED = "expired"
DEAD = "dead"


@dataclass(frozen=True, slots=True)
class LeaseState:
    """Who holds the lease: ``holder`` is the acquire that took it (None: never taken),
    ``last_ms`` the time of the holder's last record, ``released`` whether it let go."""

    holder: Lease | None = None
    last_ms: int = 0
    released: bool = False

    def status(self, now_ms: int, *, gone: bool = False) -> str:
        """L3; L4 with ``gone``: the holder's process is known not to run any more."""
        if self.holder is None or self.released:
            return FREE
        if now_ms - self.last_ms > self.holder.timeout_ms:
            return EXPIRED
        return DEAD if gone else HELD

    def apply(self, rec: Lease) -> LeaseState:
        """The state after one more record (L1, L2)."""
        if rec.action == "acquire":
            if rec.take_over or self.status(rec.at_ms) != HELD:
                return LeaseState(rec, rec.at_ms, False)
            return self
        if self.holder is None or self.released or rec.owner != self.holder.owner \
                or rec.run != self.holder.run:
            return self
        if rec.action == "renew":
            return LeaseState(self.holder, max(self.last_ms, rec.at_ms), False)
        return LeaseState(self.holder, self.last_ms, True)


def fold_lease(records: Iterable[Lease]) -> LeaseState:
    """The lease after ``records``, in the order the log holds them."""
    state = LeaseState()
    for rec in records:
        state = state.apply(rec)
    return state


def lease_state(records: Iterable[Lease], now_ms: int) -> tuple[str, Lease | None]:
    """``(free | held | expired, the acquire that holds or held it)`` at ``now_ms``."""
    state = fold_lease(records)
    return state.status(now_ms), state.holder


def release_for(holder: Lease, at_ms: int, *, pid: int, host: str) -> Lease:
    """L4: the release a taker appends for a dead ``holder`` (``pid`` and ``host`` are the
    taker's, for the person reading the log)."""
    return Lease(holder.run, "release", holder.owner, pid, host, at_ms, holder.timeout_ms)
