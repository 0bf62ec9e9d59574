"""The version blocks of runs (protocol/runs.py): growing across runs, never overlapping."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eos_runtime.errors import ProtocolViolation
from eos_runtime.protocol import wire
from eos_runtime.protocol.runs import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    MAX_RUN,
    RUN_BITS,
    OutputMode,
    announcement,
    checkpoint_needed,
    first_version,
    guarantee_named,
    markers_awaited,
    run_end,
    run_of,
    source_start_version,
    time_version,
)


@given(st.integers(0, MAX_RUN))
def test_blocks_are_ordered_and_disjoint(run):
    assert first_version(run) <= run_end(run)
    assert run_of(first_version(run)) == run == run_of(run_end(run))
    if run < MAX_RUN:
        assert run_end(run) + 1 == first_version(run + 1)
    wire.encode(wire.Marker(0, 1, run_end(run), 0))   # fits the wire format's INT64


def test_first_run_starts_where_a_fresh_task_starts():
    assert first_version(0) == 1


@given(st.integers(0, 50), st.data())
def test_a_source_starts_above_its_restored_version_and_inside_its_run(run, data):
    restored = data.draw(st.integers(0, run_end(run) - 1))
    v = source_start_version(restored, run)
    assert v > restored
    assert first_version(run) <= v < run_end(run) or v == run_end(run) == restored + 1


def test_a_source_already_at_or_past_the_run_end_is_refused():
    with pytest.raises(ProtocolViolation, match="not below the end of run 2"):
        source_start_version(run_end(2), 2)
    with pytest.raises(ValueError, match="outside"):
        first_version(MAX_RUN + 1)


@given(st.integers(0, 50), st.integers(0, 2**45), st.integers(-10**6, 2**45))
def test_time_versions_stay_inside_the_run_and_grow_with_time(run, started, elapsed):
    v = time_version(run, started, started + elapsed)
    assert first_version(run) <= v < run_end(run)
    assert time_version(run, started, started + elapsed + 1000) >= v


# ---------------------------------------------------------------- the guarantee (G1-G4)

def test_a_guarantee_is_chosen_by_its_name_and_an_unknown_name_is_refused():
    assert guarantee_named("exactly-once") is EXACTLY_ONCE
    assert guarantee_named("at-least-once") is AT_LEAST_ONCE
    with pytest.raises(ValueError, match="guarantee 'twice': use exactly-once or at-least-once"):
        guarantee_named("twice")


def test_exactly_once_markers_every_checkpoint_fences_and_shows_output_at_its_commit():
    g = EXACTLY_ONCE
    assert g.markers_each_checkpoint and g.restores and g.fenced_writer   # G1-G3
    assert g.output_ranges(transactions=False)      # G4: the local log lists its ranges
    assert not g.output_ranges(transactions=True)   # the transaction decides on Kafka


def test_at_least_once_marks_only_the_run_end_and_hides_nothing():
    g = AT_LEAST_ONCE
    assert not (g.markers_each_checkpoint or g.restores or g.fenced_writer)
    assert not g.output_ranges(transactions=False)
    assert not g.output_ranges(transactions=True)


@given(st.integers(0, 3), st.integers(0, 2 ** 41))
def test_a_restart_resends_the_last_marker_it_sent(run, restored):
    """G1 read by ``announcement``: exactly-once sent a marker at every checkpoint, so its
    last one is the restored version's (none before the first); at-least-once sent only
    the run's end. Only exactly-once fences its older generations downstream (G2)."""
    end = run_end(run)
    eo, alo = announcement(EXACTLY_ONCE, restored, run), announcement(AT_LEAST_ONCE, restored,
                                                                         run)
    assert eo[-1] == ("restore", restored)
    assert (("marker", restored) in eo) == (restored > 0)
    assert alo == ((("marker", restored),) if restored >= end else ())


@given(st.integers(0, 3), st.integers(0, 2 ** RUN_BITS - 1))
def test_only_the_runs_end_markers_are_waited_for(run, step):
    """A restart sends the last marker again, but a task that ended its run exits and is
    not restarted: its end markers are the only ones it must see acknowledged."""
    version = min(first_version(run) + step, run_end(run))
    assert markers_awaited(version, run) == (version == run_end(run))


def test_only_at_least_once_skips_a_timer_checkpoint_that_moved_no_input():
    """S6 follows G1: nothing waits for an at-least-once marker before the run's end."""
    moved, same = ((("t", 0, 5),), (("t", 0, 4),)), ((("t", 0, 4),), (("t", 0, 4),))
    assert checkpoint_needed(EXACTLY_ONCE, *same)
    assert checkpoint_needed(EXACTLY_ONCE, *moved)
    assert not checkpoint_needed(AT_LEAST_ONCE, *same)
    assert checkpoint_needed(AT_LEAST_ONCE, *moved)
    assert checkpoint_needed(AT_LEAST_ONCE, (), None)   # a first checkpoint records
    # W7: a source that may turn idle and has not said so takes it, for its markers
    assert checkpoint_needed(AT_LEAST_ONCE, *same, unannounced_idleness=True)


def test_sink_output_leaves_by_guarantee_and_log_kind():
    """The table ``Committer`` used to write as nested conditions, chosen once."""
    assert EXACTLY_ONCE.output_mode(transactions=True) is OutputMode.JOIN
    assert EXACTLY_ONCE.output_mode(transactions=False) is OutputMode.HOLD
    assert AT_LEAST_ONCE.output_mode(transactions=True) is OutputMode.STREAM
    assert AT_LEAST_ONCE.output_mode(transactions=False) is OutputMode.STREAM
