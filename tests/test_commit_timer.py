"""When a timer checkpoint is due, and which version it closes: the commit grid
(``runtime/policy.CommitTimer``, ``protocol/runs.grid_line``, rules S4 and S5).

Timer checkpoints are due at the multiples of the commit interval on the wall clock, and
a source's timer checkpoint takes its time version from that line. Exactly-once output is
readable once every source's marker of its version reached the last stage, and a channel
task holds back a producer's messages of a version above its open one (R1). Sources that
closed versions a few milliseconds apart (each from its own moment) made half the data
wait a whole interval in that buffer; sources out of phase made it wait longer still
(issue 10's latency target: p99 within the interval + 100 ms).

*When* a line is due is timed on the monotonic clock, and only its phase is taken from
the wall clock (issue 22, case 5): timed on the wall clock, a 600 s step back kept
exactly-once output invisible for 600 s. The clocks are passed in (``FakeClock``), never
read, so a busy machine cannot fail these tests."""

from __future__ import annotations

from fake_clock import FakeClock
from hypothesis import given
from hypothesis import strategies as st

from eos_runtime.protocol.runs import (
    EXACTLY_ONCE,
    SourceVersions,
    first_version,
    grid_line,
    time_version,
)
from eos_runtime.runtime.policy import CommitTimer


def timer(interval: float, every: int, now: float) -> tuple[CommitTimer, FakeClock]:
    c = FakeClock(now)
    return CommitTimer(interval, every, clock=c), c


def test_a_checkpoint_is_due_at_the_next_line_of_the_grid():
    t, c = timer(1.0, 0, 10.2)
    assert not (c.at(10.99) and t.due())
    assert c.at(11.0) and t.due()


def test_tasks_started_at_different_moments_keep_one_schedule():
    (first, c1), (second, c2) = timer(1.0, 0, 0.3), timer(1.0, 0, 0.8)
    c1.at(0.99), c2.at(0.99)
    assert [first.due(), second.due()] == [False, False]
    c1.at(1.0), c2.at(1.0)
    assert [first.due(), second.due()] == [True, True]
    c1.at(1.01), first.reset()
    c2.at(1.4), second.reset()   # its checkpoint took longer
    c1.at(1.99), c2.at(1.99)
    assert [first.due(), second.due()] == [False, False]
    c1.at(2.0), c2.at(2.0)
    assert [first.due(), second.due()] == [True, True]


def test_the_time_a_checkpoint_takes_does_not_push_the_next_one_back():
    t, c = timer(1.0, 0, 0.0)
    assert c.at(1.0) and t.due()
    c.at(1.3), t.reset()         # the checkpoint due at 1.0 took 0.3 s
    assert not (c.at(1.99) and t.due())
    assert c.at(2.0) and t.due()   # not 2.3


def test_after_a_stall_the_next_checkpoint_is_at_the_next_line_not_a_burst_of_them():
    t, c = timer(1.0, 0, 0.0)
    assert c.at(5.0) and t.due()
    c.at(5.2), t.reset()         # four lines missed: one checkpoint, then the grid again
    assert not (c.at(5.3) and t.due())
    assert not (c.at(5.99) and t.due())
    assert c.at(6.0) and t.due()


def test_every_n_records_makes_a_checkpoint_due_at_once_and_the_count_starts_again():
    t, c = timer(60.0, 100, 0.0)
    t.count(99)
    assert not (c.at(0.1) and t.due())
    t.count(1)
    assert t.due()
    assert not t.fired()         # the count made it due, not the timer
    c.at(0.2), t.reset()
    assert not (c.at(0.3) and t.due())
    t.count(100)
    assert t.due()
    assert c.at(60.0) and t.fired()


STARTED_MS = 1_700_000_000_000


def _checkpoint(t: CommitTimer, versions: SourceVersions) -> int | None:
    """What ``SourceSide.checkpoint_due`` and ``committed`` do: the version a source
    closes now, if a checkpoint is due."""
    if not t.due():
        return None
    v = versions.for_checkpoint(t.line_ms(), t.interval_ms if t.fired() else None)
    versions.committed(v)
    t.reset()
    return v


def _source_checkpoints(looks: list[float], interval: float) -> list[int]:
    """The versions one source closes when its loop looks at the clock at ``looks``."""
    t, c = timer(interval, 0, STARTED_MS / 1000)
    versions = SourceVersions(restored=0, run=0, started_ms=STARTED_MS)
    closed = []
    for now in looks:
        c.at(now)
        v = _checkpoint(t, versions)
        if v is not None:
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
    t, c = timer(0.25, 0, STARTED_MS / 1000)
    c.advance(0.3)
    assert t.line_ms() == STARTED_MS + 250
    assert time_version(0, STARTED_MS, t.line_ms()) == first_version(0) + 250


def _side(c: FakeClock, interval: float = 1.0):
    from types import SimpleNamespace

    # an exactly-once source: it checkpoints at every line, read or not (S6)
    return SimpleNamespace(timer=CommitTimer(interval, 0, clock=c),
                           versions=SourceVersions(restored=0, run=0, started_ms=STARTED_MS),
                           guarantee=EXACTLY_ONCE, inputs=lambda: (), _recorded=(),
                           event_time=None, _said_idle=False)


def test_a_source_task_closes_the_version_of_the_line_whenever_its_loop_looks():
    """The wiring of S4 in ``SourceSide.checkpoint_due``: two sources whose loops notice
    the same line 3 ms and 180 ms late close the same version."""
    from eos_runtime.runtime.source import SourceSide

    start = STARTED_MS / 1000
    closed = []
    for late in (0.003, 0.180):
        c = FakeClock(start)
        side = _side(c)
        c.at(start + 1 + late)
        closed.append(SourceSide.checkpoint_due(side))   # type: ignore[arg-type]
    assert closed[0] == closed[1] == first_version(0) + 1_000


# ---------------------------------------------------------------- clock steps (issue 22)

def _taken(t: CommitTimer, c: FakeClock, looks: int, every: float) -> int:
    """Timer checkpoints taken while the loop looks ``looks`` times, ``every`` s apart."""
    taken = 0
    for _ in range(looks):
        c.advance(every)
        if t.due():
            taken += 1
            t.reset()
    return taken


def test_checkpoints_go_on_at_the_interval_after_the_wall_clock_steps_back_600_s():
    """Case 5: timed on the wall clock, the next checkpoint was due 600 s later."""
    t, c = timer(1.0, 0, STARTED_MS / 1000)
    assert c.advance(1.0) and t.due()
    t.reset()
    c.step(-600.0)
    assert _taken(t, c, 10, 1.0) == 10


def test_a_step_forward_moves_one_checkpoint_and_makes_no_burst():
    t, c = timer(1.0, 0, STARTED_MS / 1000)
    c.advance(0.5)
    c.step(+600.0)
    assert not t.due()                 # due when the interval is over, not at once
    assert _taken(t, c, 40, 0.25) == 10


def test_a_source_whose_clock_stepped_back_closes_the_versions_of_the_lines_it_missed():
    """S5: after a step back a source names its timer checkpoints as if the step had not
    happened (the grid's next line above its open version): the same versions as a source
    whose clock did not step, so a channel task holds back neither's data (R1). Each
    source steps alone here, as on hosts of their own."""
    start = STARTED_MS / 1000
    closed = []
    for step in (0.0, -600.0, -0.4, -1.5):
        c = FakeClock(start)
        side = _side(c)
        mine = []
        for i in range(6):
            c.advance(1.0)
            if i == 1:
                c.step(step)
            v = _checkpoint(side.timer, side.versions)
            mine.append(v)
        closed.append(mine)
    assert closed[0] == [first_version(0) + 1000 * (i + 1) for i in range(6)]
    for mine in closed[1:]:
        assert [v for v in mine if v is not None] == [v for v in closed[0][:len(
            [v for v in mine if v is not None])]]


def test_a_monotonic_clock_a_little_ahead_of_the_wall_names_the_line_and_fires_once():
    """NTP slews the wall clock: the monotonic deadline may come a fraction of a
    millisecond before the wall clock's line. The checkpoint is still named after the
    line it was due for, and the next one is due at the next line, not at once."""
    start = STARTED_MS / 1000
    c = FakeClock(start)
    side = _side(c)
    c.at(start + 0.998)
    c.m += 0.002                       # the monotonic clock reached the deadline, 2 ms ahead
    assert _checkpoint(side.timer, side.versions) == first_version(0) + 1000
    c.advance(0.01)                    # the wall clock passes the line just checkpointed
    assert _checkpoint(side.timer, side.versions) is None
    c.at(start + 2.01)
    assert _checkpoint(side.timer, side.versions) == first_version(0) + 2000


LOOK = 0.25    # of an interval: how often the loop looks at the clock


@given(st.lists(st.tuples(st.integers(1, 12), st.sampled_from([0.0, 0.0, -600.0, 600.0,
                                                               -0.4, 0.7, -2.5, 3.1])),
                min_size=1, max_size=30),
       st.sampled_from([0.1, 1.0, 2.5]))
def test_whatever_the_wall_clock_does_versions_increase_and_checkpoints_keep_coming(events,
                                                                                    interval):
    """S2, S5 and the timer together: under any sequence of steps, every checkpoint's
    version is above the last, and on the monotonic clock no two timer checkpoints are
    more than two intervals apart (a step moves one checkpoint by less than an interval)."""
    c = FakeClock(STARTED_MS / 1000)
    side = _side(c, interval)
    last_v, last_m = 0, c.m
    for looks, step in events:
        c.step(step)
        for _ in range(looks):
            c.advance(interval * LOOK)
            v = _checkpoint(side.timer, side.versions)
            if v is not None:
                assert v > last_v
                last_v, last_m = v, c.m
            assert c.m - last_m <= interval * (2 + LOOK) + 1e-6


def test_a_source_task_goes_on_checkpointing_after_its_clock_steps_back_600_s(tmp_path):
    """End to end, the real source task in a child process on the local log: the fault
    action ``clock`` steps its wall clock 600 s back once it processed its second record
    (after its first checkpoint, before the next), and each record takes 0.1 s (fault
    ``lag``), more than two commit intervals of 0.02 s, so a timer checkpoint is due after
    every poll of one record. Counted in checkpoints, not in seconds: timed on the wall
    clock, the only checkpoint after the step was the run's last one."""
    from scripted import ScriptedJob

    job = ScriptedJob(tmp_path, {"data_dir": str(tmp_path / "data")}, producers=1,
                      commit_interval=0.02)
    try:
        job.feed_source(0, *[f"v{i}" for i in range(12)])
        stats = job.run_task(task_id=0, poll_records=1, fault=[
            {"point": "task.mid_version", "hit": 2, "action": "clock",
             "step": -600.0},
            {"action": "lag", "delay": 0.1}])
    finally:
        job.close()
    assert stats is not None
    assert stats["processed"] == 12
    assert stats["checkpoints"] >= 12 + 1      # one after each record, and the run's end


def test_an_idle_at_least_once_channel_task_takes_no_timer_checkpoint():
    """S6 (issue 22, idle jobs): a timer checkpoint that would record the positions the
    last one did is skipped at least once; one after data, or after a marker (an ended
    lane is recorded), is taken."""
    from eos_runtime.protocol import wire
    from eos_runtime.protocol.runs import run_end
    from eos_runtime.runtime.policy import Unaligned

    c = FakeClock(1_000_000.0)
    chan = ("job.shuffle-1", 0)
    commit = wire.ChangeLogCommit(1, 7, inputs=(wire.InputPosition(*chan, 40),))
    policy = Unaligned([chan], (0, 1), run_end(0), commit, CommitTimer(1.0, 0, clock=c), 8)

    def taken() -> list[int]:
        c.advance(1.0)
        return [version for version, _, _, _ in policy.checkpoints()]

    assert taken() == [], "nothing read since version 7"
    policy.on_record(chan, 40, wire.Envelope(0, 1, 8, 1, None, b"x", 0), b"")
    assert taken() == [8]
    assert taken() == [], "nothing read since version 8"
    policy.on_record(chan, 41, wire.Marker(1, 1, run_end(0), 2), b"")
    assert taken() == [9], "producer 1's lane ended: recorded"
    assert taken() == []


def test_an_at_least_once_rewind_goes_back_to_the_last_checkpoint():
    """``Unaligned`` implements all of ``InputPolicy``: a rewind (none of its actions asks
    for one) reads again from the last checkpoint's positions, as a restart does."""
    from eos_runtime.protocol import wire
    from eos_runtime.protocol.runs import run_end
    from eos_runtime.runtime.policy import Unaligned

    c = FakeClock(1_000_000.0)
    chan = ("job.shuffle-1", 0)
    commit = wire.ChangeLogCommit(1, 7, inputs=(wire.InputPosition(*chan, 40),))
    policy = Unaligned([chan], (0, 1), run_end(0), commit, CommitTimer(1.0, 0, clock=c), 8)
    policy.on_record(chan, 40, wire.Envelope(0, 1, 8, 1, None, b"x", 0), b"")
    c.advance(1.0)
    assert [version for version, _, _, _ in policy.checkpoints()] == [8]
    policy.on_record(chan, 41, wire.Envelope(0, 1, 9, 2, None, b"y", 0), b"")
    after = policy.resume_offsets()
    assert policy.rewind() == 8
    assert policy.resume_offsets() != after
    assert policy.resume_offsets() == {chan: 41}
    assert policy.version == 9


def test_an_at_least_once_rewind_keeps_the_watermark_of_its_checkpoint():
    """The tracker a rewind builds started from no watermark (None), so the task's went
    back to None; no at-least-once action asks for a rewind today, but one that did would
    have fired nothing until every lane spoke again, and judged lateness against None."""
    from eos_runtime.protocol import wire
    from eos_runtime.protocol.runs import run_end
    from eos_runtime.runtime.policy import Unaligned

    c = FakeClock(1_000_000.0)
    chan = ("job.shuffle-1", 0)
    commit = wire.ChangeLogCommit(1, 7, inputs=(wire.InputPosition(*chan, 40),), watermark=900)
    policy = Unaligned([chan], (0, 1), run_end(0), commit, CommitTimer(1.0, 0, clock=c), 8)
    policy.rewind()
    assert policy.watermark == 900
