"""The job lease's rules (protocol/lease.py, L1-L3), driven directly: no I/O, no clock."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eos_runtime.protocol.lease import (
    DEAD,
    EXPIRED,
    FREE,
    HELD,
    fold_lease,
    lease_state,
    release_for,
)
from eos_runtime.protocol.wire import Lease

T = 60_000   # timeout


def acq(owner, at, run=0, take_over=False, timeout=T):
    return Lease(run, "acquire", owner, 100, "h", at, timeout, take_over)


def renew(owner, at, run=0):
    return Lease(run, "renew", owner, 100, "h", at, T)


def release(owner, at, run=0):
    return Lease(run, "release", owner, 100, "h", at, T)


def test_no_records_is_free():
    assert lease_state([], 0) == (FREE, None)


def test_an_acquire_holds_until_its_timeout_passes():
    a = acq("a", 1_000)
    assert lease_state([a], 1_000) == (HELD, a)
    assert lease_state([a], 1_000 + T) == (HELD, a)
    assert lease_state([a], 1_001 + T) == (EXPIRED, a)


def test_renewals_keep_it_held():
    recs = [acq("a", 0), renew("a", 50_000), renew("a", 100_000)]
    assert lease_state(recs, 100_000 + T)[0] == HELD
    assert lease_state(recs, 100_001 + T)[0] == EXPIRED


def test_a_release_frees_it():
    recs = [acq("a", 0), renew("a", 10), release("a", 20)]
    status, holder = lease_state(recs, 30)
    assert status == FREE and holder is not None and holder.owner == "a"


def test_of_two_racing_acquires_the_first_in_the_log_wins():
    first, second = acq("a", 10), acq("b", 5)   # b's clock is behind: order decides
    assert lease_state([first, second], 20) == (HELD, first)
    assert lease_state([second, first], 20) == (HELD, second)


def test_a_gone_holder_is_dead_and_the_first_acquire_after_a_release_for_it_wins():
    """L4 (issue 27 item 4): a holder whose process is known gone is dead, not held; a
    taker releases on its behalf, then acquires as for a free lease. Of two takers the
    first acquire wins, whether the second's release came before it or after."""
    a = acq("a", 0)
    state = fold_lease([a])
    assert (state.status(10), state.status(10, gone=True)) == (HELD, DEAD)
    assert state.status(T + 1, gone=True) == EXPIRED
    rel_b, rel_c = release_for(a, 20, pid=7, host="h"), release_for(a, 21, pid=8, host="h")
    assert (rel_b.action, rel_b.owner, rel_b.run, rel_b.pid) == ("release", "a", 0, 7)
    b, c = acq("b", 20), acq("c", 21)
    assert lease_state([a, rel_b, rel_c, b, c], 30) == (HELD, b)
    assert lease_state([a, rel_b, b, rel_c, c], 30) == (HELD, b)
    assert lease_state([a, b], 30) == (HELD, a), "an acquire without the release loses"


def test_an_acquire_takes_an_expired_lease():
    old = acq("a", 0)
    new = acq("b", T + 1, run=1)
    assert lease_state([old, new], T + 2) == (HELD, new)


def test_take_over_beats_a_live_holder_and_the_old_holder_renews_in_vain():
    recs = [acq("a", 0), acq("b", 10, run=1, take_over=True), renew("a", 20), release("a", 30)]
    status, holder = lease_state(recs, 40)
    assert status == HELD and holder is not None and holder.owner == "b"


def test_a_stranger_cannot_renew_or_release():
    recs = [acq("a", 0), renew("b", T), release("b", T)]
    assert lease_state(recs, T + 1)[0] == EXPIRED


def test_renew_of_another_run_by_the_same_owner_does_not_count():
    recs = [acq("a", 0, run=2), renew("a", T, run=1)]
    assert lease_state(recs, T + 1)[0] == EXPIRED


def test_a_released_lease_is_not_brought_back_by_a_late_renewal():
    recs = [acq("a", 0), release("a", 10), renew("a", 20)]
    assert lease_state(recs, 30)[0] == FREE


owners = st.sampled_from("abc")
records = st.lists(st.tuples(st.sampled_from(["acquire", "renew", "release"]), owners,
                             st.integers(0, 3 * T), st.booleans()), max_size=12)


@given(records, st.integers(0, 4 * T))
def test_the_holder_is_always_the_last_acquire_that_could_take_it(recs, now):
    log = [Lease(0, action, owner, 1, "h", at, T, take and action == "acquire")
           for action, owner, at, take in recs]
    state = fold_lease(log)
    status = state.status(now)
    # Invariants: a holder is one of the acquires; held/expired only with a holder; a
    # take-over acquire always ends up the holder if it is the last acquire.
    acquires = [r for r in log if r.action == "acquire"]
    if state.holder is not None:
        assert state.holder in acquires
    else:
        assert not acquires and status == FREE
    if acquires and acquires[-1].take_over:
        assert state.holder == acquires[-1]


def test_a_step_back_on_the_holders_host_does_not_make_its_live_lease_lapse():
    """Expiry compares the holder's stamps with another host's clock. A holder whose
    clock stepped 600 s back stamped its heartbeats 600 s in the past, and to a driver on
    a host whose clock did not step its live lease lapsed within a timeout: a second run
    took the job. The holder's stamps never go back (``clock.Stamps``)."""
    from fake_clock import FakeClock

    from eos_runtime.clock import Stamps

    start = 1_700_000_000.0
    holder = FakeClock(start)
    stamps = Stamps(holder)
    records = [acq("a", stamps.now_ms())]
    for beat in range(20):                  # a heartbeat every 10 s for 200 s
        holder.advance(10.0)
        if beat == 1:
            holder.step(-600.0)
        records.append(renew("a", stamps.now_ms()))
    now = int((start + 205) * 1000)         # another host's true clock, 5 s after the last
    assert lease_state(records, now)[0] == HELD
    assert [r.at_ms for r in records] == sorted(r.at_ms for r in records)


def test_a_drivers_lease_records_do_not_go_back_with_its_clock():
    """The wiring: ``LeaseKeeper`` stamps its heartbeats with ``clock.stamp_ms``."""
    from eos_runtime import clock
    from eos_runtime.joblog.control import LeaseRequest
    from eos_runtime.joblog.live_run import LeaseKeeper

    keeper = object.__new__(LeaseKeeper)
    keeper.run, keeper.lease = 0, LeaseRequest()
    first = keeper._record("renew").at_ms
    clock.step(-600.0)
    try:
        second = keeper._record("renew").at_ms
    finally:
        clock.reset()
    assert second >= first
