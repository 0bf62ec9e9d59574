"""Event-time watermarks (protocol/watermarks.py): a source's (W2) and a lane's (W4). The
aligner's part of W4 is driven by the model in test_aligner.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eos_runtime.protocol.watermarks import (
    NO_BOUND,
    LaneWatermark,
    SourceWatermark,
    TableWatermark,
    across_lanes,
    highest,
    lowest,
    lowest_at_end,
)


def test_none_is_below_every_time():
    assert lowest([3, None, 1]) is None
    assert lowest([3, 1]) == 1
    assert lowest([]) is None
    assert highest(None, -5) == -5 and highest(4, None) == 4 and highest(4, 7) == 7


def test_a_source_is_as_late_as_its_slowest_partition_with_something_to_read():
    w = SourceWatermark([0, 1])
    w.read(0, 500, now_ms=0)
    assert w.at_checkpoint(behind={0, 1}, now_ms=0) is None   # partition 1: nothing read yet
    w.read(1, 200, now_ms=0)
    assert w.at_checkpoint(behind={0, 1}, now_ms=0) == 200
    w.read(1, 100, now_ms=0)                                   # out of order: the high stays
    assert w.at_checkpoint(behind={0, 1}, now_ms=0) == 200


def test_a_caught_up_partition_is_idle_and_holds_nothing_back():
    w = SourceWatermark([0, 1])
    w.read(0, 500, now_ms=0)
    assert w.at_checkpoint(behind={0}, now_ms=0) == 500     # 1 never had a record: idle
    w.read(1, 100, now_ms=10)
    assert w.at_checkpoint(behind={0, 1}, now_ms=10) == 500   # never back
    w.read(0, 900, now_ms=20)
    assert w.at_checkpoint(behind={1}, now_ms=20) == 500     # 1 holds it at its own 100: floor


def test_idle_after_keeps_a_partition_read_lately_in_the_minimum():
    w = SourceWatermark([0, 1], idle_after_ms=1_000)
    w.read(0, 500, now_ms=0)
    w.read(1, 100, now_ms=0)
    assert w.at_checkpoint(behind=(), now_ms=999) == 100     # both read within the second
    assert w.at_checkpoint(behind=(), now_ms=1_000) == 500   # both idle: the highest read


def test_a_restart_goes_on_from_its_checkpoint():
    w = SourceWatermark([0], restored=700)
    w.read(0, 300, now_ms=0)
    assert w.at_checkpoint(behind={0}, now_ms=0) == 700
    with pytest.raises(ValueError, match="negative"):
        SourceWatermark([0], idle_after_ms=-1)


reads = st.lists(st.tuples(st.integers(0, 2), st.integers(-50, 50), st.integers(0, 30),
                           st.frozensets(st.integers(0, 2))), max_size=40)


@given(reads, st.integers(0, 20))
def test_w2_grows_and_never_passes_what_was_read_nor_an_active_partition(steps, idle_after):
    w = SourceWatermark([0, 1, 2], idle_after_ms=idle_after)
    before, now = None, 0
    for partition, high, dt, behind in steps:
        now += dt
        w.read(partition, high, now)
        active = w.active(behind, now)
        value = w.at_checkpoint(behind, now)
        assert value is None or before is None or value >= before
        seen = [h for h in w.highs.values() if h is not None]
        assert value is None or value <= max(seen)
        # the floor aside, no active partition is passed: a record within the grace of
        # its partition's high is never late (W6)
        if value != before:
            assert all(w.highs[p] is not None and value <= w.highs[p] for p in active)
        before = value


def test_a_lane_takes_the_latest_marker_up_to_the_checkpoint_only():
    lane = LaneWatermark()
    lane.marker(1, 10)
    lane.marker(5, 50)
    assert lane.settle(3) == 10        # the marker of 5 is in front of version 5's messages
    assert lane.settle(5) == 50
    lane.marker(5, 50)                 # read again (R6, R8): no harm
    lane.marker(7, None)               # a producer without event time says nothing
    assert lane.settle(9) == 50
    lane.marker(9, 90)
    lane.drop_above(8)                 # voided by a restore
    assert lane.settle(9) == 50


def test_a_tables_lane_holds_no_window_back():
    """A table's source reads rows with no event time: its checkpoints' watermark is the
    largest time, so a lookup's lowest is its streams' (None, "not yet", held it back
    for the whole run)."""
    table = TableWatermark()
    table.read(0, 10, 0)
    assert table.at_checkpoint([0], 0) == NO_BOUND
    assert lowest([5000, table.at_checkpoint([], 0)]) == 5000
    assert lowest([None, NO_BOUND]) is None    # a stream with nothing read still holds back


def test_a_source_is_idle_only_where_it_asks_and_once_nothing_was_read_that_long():
    """W7. With idle_after 0 (the default) no task is ever idle: a caught-up task's
    watermark is what it read, which never makes a record of its own late (W6)."""
    never = SourceWatermark([0])
    never.at_checkpoint(behind=(), now_ms=0)
    assert never.at_checkpoint(behind=(), now_ms=10**9) is None and not never.idle
    w = SourceWatermark([0, 1], idle_after_ms=1_000)
    w.at_checkpoint(behind=(), now_ms=0)            # the first checkpoint: the clock starts
    assert not w.idle                               # (an empty partition at start too)
    w.at_checkpoint(behind=(), now_ms=999)
    assert not w.idle
    w.at_checkpoint(behind=(), now_ms=1_000)
    assert w.idle                                   # two empty partitions, a second on
    w.read(0, 40, now_ms=1_500)
    w.at_checkpoint(behind=(), now_ms=1_500)
    assert not w.idle                               # read from: busy again
    w.at_checkpoint(behind=(), now_ms=2_499)
    assert not w.idle
    w.at_checkpoint(behind={1}, now_ms=2_500)
    assert not w.idle                               # something left to read: busy
    assert w.at_checkpoint(behind=(), now_ms=2_500) == 40 and w.idle
    assert not TableWatermark().idle                # NO_BOUND already holds nothing back


def test_w4_passes_over_idle_lanes_never_goes_back_and_is_idle_when_all_are():
    # one source went quiet at 1 200 (idle), the other read on to 9 100
    assert across_lanes(500, [(1_200, True), (9_100, False)]) == (9_100, False)
    # the quiet one is back, its own watermark below where the task went: no going back
    assert across_lanes(9_100, [(1_300, False), (9_200, False)]) == (9_100, False)
    assert across_lanes(9_100, [(9_500, False), (9_200, False)]) == (9_200, False)
    # every lane idle: the highest they read (as W2 over partitions), and the task is idle
    assert across_lanes(9_100, [(1_300, True), (9_600, True)]) == (9_600, True)
    assert across_lanes(9_100, [(1_300, True), (None, True)]) == (9_100, True)
    # an idle lane with nothing read yet holds nothing back; a busy one still does
    assert across_lanes(None, [(None, True), (700, False)]) == (700, False)
    assert across_lanes(None, [(None, False), (700, False)]) == (None, False)


def test_a_lanes_idleness_is_its_latest_marker_up_to_the_checkpoint():
    lane = LaneWatermark()
    lane.marker(2, 10, idle=True)
    lane.marker(4, 10, idle=False)
    assert lane.settle(3) == 10 and lane.idle       # 4 is in front of version 4's messages
    assert lane.settle(4) == 10 and not lane.idle
    lane.marker(6, 20, idle=True)
    lane.marker(6, 20, idle=True)                   # read again (R6, R8)
    assert lane.settle(9) == 20 and lane.idle
    lane.marker(7, 30, idle=False)
    lane.drop_above(6)                              # voided by a restore
    assert lane.settle(9) == 20 and lane.idle


@given(st.lists(st.lists(st.tuples(st.one_of(st.none(), st.integers(-50, 50)), st.booleans()),
                         min_size=1, max_size=4), max_size=30))
def test_w4_with_w7_never_goes_back_nor_below_a_busy_lane_it_moved(rounds):
    before = None
    for lanes in rounds:
        value, idle = across_lanes(before, lanes)
        assert value is None or before is None or value >= before
        assert idle == all(i for _, i in lanes)
        busy = [w for w, i in lanes if not i]
        if value != before and busy:   # moved by the busy lanes: to their lowest
            assert None not in busy and value == min(busy)
        elif value != before:          # every lane idle: to the highest they read
            assert value == max(w for w, _ in lanes if w is not None)
        before = value


def test_a_tables_lanes_never_take_the_watermark_to_no_bound():
    """A lookup stage reads a table's lanes (NO_BOUND, never idle) beside its streams'.
    With every stream lane idle, the table's were the only busy ones, and W4 went to
    NO_BOUND for good: every window fired at once and every later record was late. At a
    run's end, streams that read nothing left the table's NO_BOUND as the minimum known,
    with the same effect in the next run."""
    assert across_lanes(100, [(NO_BOUND, False), (200, True)]) == (200, True)
    assert across_lanes(100, [(NO_BOUND, False), (200, True), (150, True)]) == (200, True)
    assert across_lanes(100, [(NO_BOUND, False), (200, False)]) == (200, False)
    assert across_lanes(100, [(NO_BOUND, False), (None, True)]) == (100, True)
    assert lowest_at_end([None, NO_BOUND]) is None
    assert lowest_at_end([None, NO_BOUND, 70]) == 70
    assert lowest_at_end([NO_BOUND]) == NO_BOUND and lowest_at_end([]) is None
