"""Event-time windows and timers (eos_runtime/windows.py): pure rules, driven directly."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eos_runtime.windows import (
    closes_at,
    hopping,
    is_late,
    merge_session,
    session,
    timer_key,
    timer_of,
    tumbling,
)

times = st.integers(-(10**12), 10**12)


def test_lengths_in_units_or_ms_and_bad_ones_named():
    assert tumbling(minutes=1).size == tumbling(60_000).size == tumbling(seconds=60).size
    assert tumbling(hours=1, minutes=30).size == 5_400_000
    for bad, match in ((lambda: tumbling(), "whole milliseconds > 0"),
                       (lambda: tumbling(0), "whole milliseconds > 0"),
                       (lambda: tumbling(1.5), "whole milliseconds > 0"),
                       (lambda: tumbling(True), "whole milliseconds > 0"),
                       (lambda: tumbling(1000, seconds=1), "not both"),
                       (lambda: hopping(10_000, 3_000), "must divide"),
                       (lambda: hopping(1_000, 2_000), "must divide"),
                       (lambda: session(-1), "whole milliseconds > 0")):
        with pytest.raises(ValueError, match=match):
            bad()


@given(times, st.integers(1, 10**6))
def test_a_tumbling_window_holds_its_record_and_starts_on_the_grid(t, size):
    [(start, end)] = tumbling(size).windows_of(t)
    assert start <= t < end and end - start == size and start % size == 0


@given(times, st.integers(1, 1000), st.integers(1, 20))
def test_a_hopping_record_is_in_exactly_size_over_every_windows(t, every, n):
    windows = hopping(every * n, every).windows_of(t)
    assert len(windows) == n
    assert all(s <= t < e and e - s == every * n and s % every == 0 for s, e in windows)
    assert [s for s, _ in windows] == sorted({s for s, _ in windows})


def test_a_window_closes_grace_after_its_end_and_records_after_that_are_late():
    assert closes_at(60_000, 5_000) == 65_000
    assert not is_late(60_000, 5_000, None)         # no watermark yet: nothing is late
    assert not is_late(60_000, 5_000, 64_999)
    assert is_late(60_000, 5_000, 65_000)


@given(st.lists(st.tuples(times, st.binary(max_size=6)), min_size=2, max_size=30))
def test_timers_sort_by_time_then_key_as_their_bytes_do(timers):
    assert sorted(timers) == [timer_of(k) for k in sorted(timer_key(t, k) for t, k in timers)]


@given(st.lists(st.integers(0, 500), min_size=1, max_size=40), st.integers(1, 50))
def test_sessions_hold_each_record_once_and_part_only_where_a_gap_is_wider(ts, gap):
    sessions: list[tuple[int, int]] = []
    for t in ts:
        current, merged = merge_session(sessions, t, gap)
        assert all(m in sessions for m in merged)
        sessions = sorted([s for s in sessions if s not in merged] + [current])
    # every record in exactly one session, sessions apart by more than nothing
    for t in ts:
        assert sum(s <= t < e for s, e in sessions) == 1
    assert all(a[1] < b[0] for a, b in zip(sessions, sessions[1:], strict=False))
    # what a batch computation gives: sorted times split where the next is more than gap on
    expected, start = [], None
    for prev, t in zip([None, *sorted(ts)], sorted(ts), strict=False):
        if prev is None or t > prev + gap:
            if start is not None:
                expected.append((start, prev + gap))
            start = t
    expected.append((start, sorted(ts)[-1] + gap))
    assert sessions == expected


@given(st.integers(-10**6, 10**6), st.integers(0, 10**4), st.integers(1, 10**4),
       st.integers(-10**6, 10**6), st.integers(0, 10**4))
def test_a_closed_session_can_be_joined_by_no_record_that_is_not_late(end, grace, gap, t,
                                                                      behind):
    """W6 for sessions against their close: once a session's timer fires, every record
    that could still join it (at most its end: a gap from its last record) is late; and a
    record within grace of the watermark is never late."""
    from eos_runtime.windows import session_closes_at, session_record_late

    closed = session_closes_at(end, grace)
    joins = merge_session([(end - gap, end)], t, gap)[1] != []
    if joins:
        assert session_record_late(t, grace, closed)
    assert not session_record_late(closed - min(behind, grace), grace, closed)
