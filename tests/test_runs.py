"""The version blocks of runs (protocol/runs.py): growing across runs, never overlapping."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eos_runtime.protocol import wire
from eos_runtime.protocol.runs import (
    MAX_RUN,
    first_version,
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
    with pytest.raises(ValueError, match="not below the end of run 2"):
        source_start_version(run_end(2), 2)
    with pytest.raises(ValueError, match="outside"):
        first_version(MAX_RUN + 1)


@given(st.integers(0, 50), st.integers(0, 2**45), st.integers(-10**6, 2**45))
def test_time_versions_stay_inside_the_run_and_grow_with_time(run, started, elapsed):
    v = time_version(run, started, started + elapsed)
    assert first_version(run) <= v < run_end(run)
    assert time_version(run, started, started + elapsed + 1000) >= v
