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
    highest,
    lowest,
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
