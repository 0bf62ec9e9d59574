"""When a timer checkpoint is due, and which version it closes: the commit grid
(``runtime/policy.CommitTimer``, ``protocol/runs.grid_line``, rule S4).

Timer checkpoints are due at the multiples of the commit interval on the wall clock, and
a source's timer checkpoint takes its time version from that line. Exactly-once output is
readable once every source's marker of its version reached the last stage, and a channel
task holds back a producer's messages of a version above its open one (R1). Sources that
closed versions a few milliseconds apart (each from its own moment) made half the data
wait a whole interval in that buffer; sources out of phase made it wait longer still
(issue 10's latency target: p99 within the interval + 100 ms). Times are passed in, never
read, so a busy machine cannot fail these tests."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eos_runtime.protocol.runs import SourceVersions, first_version, grid_line, time_version
from eos_runtime.runtime.policy import CommitTimer


def test_a_checkpoint_is_due_at_the_next_line_of_the_grid():
    t = CommitTimer(1.0, 0, now=10.2)
    assert not t.due(10.99)
    assert t.due(11.0)


def test_tasks_started_at_different_moments_keep_one_schedule():
    first, second = CommitTimer(1.0, 0, now=0.3), CommitTimer(1.0, 0, now=0.8)
    assert [t.due(0.99) for t in (first, second)] == [False, False]
    assert [t.due(1.0) for t in (first, second)] == [True, True]
    first.reset(1.01)
    second.reset(1.4)            # its checkpoint took longer
    assert [t.due(1.99) for t in (first, second)] == [False, False]
    assert [t.due(2.0) for t in (first, second)] == [True, True]


def test_the_time_a_checkpoint_takes_does_not_push_the_next_one_back():
    t = CommitTimer(1.0, 0, now=0.0)
    assert t.due(1.0)
    t.reset(1.3)                 # the checkpoint due at 1.0 took 0.3 s
    assert not t.due(1.99)
    assert t.due(2.0)            # not 2.3


def test_after_a_stall_the_next_checkpoint_is_at_the_next_line_not_a_burst_of_them():
    t = CommitTimer(1.0, 0, now=0.0)
    assert t.due(5.0)
    t.reset(5.2)                 # four lines missed: one checkpoint, then the grid again
    assert not t.due(5.3)
    assert not t.due(5.99) and t.due(6.0)


def test_every_n_records_makes_a_checkpoint_due_at_once_and_the_count_starts_again():
    t = CommitTimer(60.0, 100, now=0.0)
    t.count(99)
    assert not t.due(0.1)
    t.count(1)
    assert t.due(0.1)
    t.reset(0.2)
    assert not t.due(0.3)
    t.count(100)
    assert t.due(0.3)


STARTED_MS = 1_700_000_000_000


def _source_checkpoints(looks: list[float], interval: float) -> list[int]:
    """The versions one source closes when its loop looks at the clock at ``looks``."""
    timer = CommitTimer(interval, 0, now=STARTED_MS / 1000)
    versions = SourceVersions(restored=0, run=0, started_ms=STARTED_MS)
    closed = []
    for now in looks:
        if timer.due(now):
            v = versions.for_checkpoint(timer.line_ms(now))
            versions.committed(v)
            timer.reset(now)
            closed.append(v)
    return closed


@given(st.lists(st.tuples(st.floats(0, 0.4), st.floats(0, 0.4)), min_size=1, max_size=20),
       st.sampled_from([0.1, 0.5, 1.0, 2.5]))
def test_sources_that_look_at_different_moments_close_the_same_versions(lateness, interval):
    """S4: however late each source's loop notices a line (within the interval), both
    close one version per line, and the same one."""
    start = STARTED_MS / 1000
    lines = [start + interval * (i + 1) for i in range(len(lateness))]
    a = _source_checkpoints([t + late[0] * interval
                             for t, late in zip(lines, lateness, strict=True)], interval)
    b = _source_checkpoints([t + late[1] * interval
                             for t, late in zip(lines, lateness, strict=True)], interval)
    assert a == b
    assert len(a) == len(lines)
    assert a == sorted(set(a))


def test_a_versions_time_is_its_line_not_the_moment_it_was_taken():
    assert grid_line(STARTED_MS + 3_017, 1_000) == grid_line(STARTED_MS + 3_999, 1_000) \
        == STARTED_MS + 3_000
    timer = CommitTimer(0.25, 0, now=STARTED_MS / 1000)
    assert timer.line_ms(STARTED_MS / 1000 + 0.3) == STARTED_MS + 250
    assert time_version(0, STARTED_MS, timer.line_ms(STARTED_MS / 1000 + 0.3)) \
        == first_version(0) + 250


def test_a_source_task_closes_the_version_of_the_line_whenever_its_loop_looks(monkeypatch):
    """The wiring of S4 in ``SourceSide.checkpoint_due``: two sources whose loops notice
    the same line 3 ms and 180 ms late close the same version."""
    from types import SimpleNamespace

    from eos_runtime.runtime import source

    start = STARTED_MS / 1000
    closed = []
    for late in (0.003, 0.180):
        side = SimpleNamespace(timer=CommitTimer(1.0, 0, now=start),
                               versions=SourceVersions(restored=0, run=0,
                                                       started_ms=STARTED_MS))
        monkeypatch.setattr(source.time, "time", lambda late=late: start + 1 + late)
        closed.append(source.SourceSide.checkpoint_due(side))   # type: ignore[arg-type]
    assert closed[0] == closed[1] == first_version(0) + 1_000
