"""The source side of a task, in-process on a real transport: where a run starts and
when a bounded run's input is over, whatever wrote the input and however often the
task starts again inside the run."""

from __future__ import annotations

import uuid

import pytest

from eos_runtime import Pipeline
from eos_runtime.plan import plan_job
from eos_runtime.protocol.runs import guarantee_named
from eos_runtime.runner import task_configs
from eos_runtime.runtime.source import SourceSide
from eos_runtime.transport import TopicPartition, TopicSpec, open_transport

KINDS = ["local", pytest.param("kafka", marks=pytest.mark.kafka)]


def opts_for(kind, tmp_path, request):
    return ({"data_dir": str(tmp_path / "data")} if kind == "local"
            else {"bootstrap_servers": request.getfixturevalue("kafka_bootstrap")})


def source_job(t, tag, partitions=1, **source_options):
    name, source = f"src-{tag}", f"src-in-{tag}"
    t.create_topics([TopicSpec(source, partitions)])
    p = Pipeline(name)
    p.source(source, value="utf8", **source_options).sink(f"src-out-{tag}", value="utf8")
    return plan_job(p, t), source


def fill(t, topic: str, partitions: int, records: int) -> None:
    """``topic`` made, with ``records`` values v0, v1, ... round robin."""
    t.create_topics([TopicSpec(topic, partitions)])
    with t.producer() as p:
        for i in range(records):
            p.produce(topic, i % partitions, f"v{i}".encode())
        p.flush()


def read_all(side: SourceSide, polls: int = 200) -> list[bytes]:
    """Poll until the side says its input is over; a side that never says so after
    ``polls`` empty polls is a hang."""
    got: list[bytes] = []
    empty = 0
    while not side.finished():
        batch = side.poll(1_000, 0.2)
        got += [r.value for r in batch]
        empty = 0 if batch else empty + 1
        if empty > polls:
            raise AssertionError(f"the bounded input never ended: positions {side.positions}, "
                                 f"ends {side.ends}, done {side.done}")
    return got


@pytest.mark.kafka
def test_a_bounded_run_over_transactional_input_ends(tmp_path, kafka_bootstrap):
    """Job B reading job A's exactly-once sink: the partition's end is one past a commit
    marker, which no poll ever returns. Every record is read and the run ends."""
    opts = {"bootstrap_servers": kafka_bootstrap}
    tag = uuid.uuid4().hex[:6]
    with open_transport(**opts) as t:
        plan, source = source_job(t, tag)
        with t.producer(transactional_id=f"writer-{tag}") as p:
            for batch in (range(0, 3), range(3, 5)):
                p.begin_transaction()
                for i in batch:
                    p.produce(source, 0, f"v{i}".encode())
                p.commit_transaction()
        config = task_configs(plan, t, opts, str(tmp_path / "state"))[0]
        assert config.end_offsets[0] == 7, "5 records and 2 commit markers"
        with t.consumer() as c:
            side = SourceSide(t, c, plan, plan.stages[0], 0, config, None, 0,
                              guarantee=guarantee_named(plan.guarantee))
            try:
                assert read_all(side) == [f"v{i}".encode() for i in range(5)]
            finally:
                side.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", ["offset_default", "reset_offset", "startpoint"])
def test_an_upcoming_start_is_fixed_once_per_run(kind, how, tmp_path, request):
    """A source that starts at ``upcoming`` and starts again inside the run (a retry
    after a crash before its first commit, or after a broker outage) starts where the
    run's first attempt did: input that arrived since is read, never skipped."""
    from eos_runtime.joblog.startpoints import Startpoint, fan_out_startpoints, set_startpoint

    opts = opts_for(kind, tmp_path, request)
    tag = uuid.uuid4().hex[:6]
    with open_transport(**opts) as t:
        options = ({"offset_default": "upcoming"} if how == "offset_default" else
                   {"offset_default": "upcoming", "reset_offset": True} if how == "reset_offset"
                   else {})
        plan, source = source_job(t, tag, **options)
        tp = TopicPartition(source, 0)
        with t.producer() as p:
            for i in range(4):
                p.produce(source, 0, f"old{i}".encode())
            p.flush()
        startpoints: dict = {}
        if how == "startpoint":
            set_startpoint(plan.name, source, 0, Startpoint.upcoming(), transport=t)
            startpoints = fan_out_startpoints(t, plan.name, source, {0: 0}, 1)
        config = task_configs(plan, t, opts, str(tmp_path / "state"), bounded=False,
                              startpoints=startpoints, run=1)[0]
        with t.consumer() as c:
            first = SourceSide(t, c, plan, plan.stages[0], 0, config, None, 0,
                              guarantee=guarantee_named(plan.guarantee))
            first.close()
        assert first.starts[0][0] == 4
        with t.producer() as p:      # arrives while the first attempt runs, then it dies
            for i in range(3):
                p.produce(source, 0, f"new{i}".encode())
            p.flush()
        assert t.watermarks(tp)[1] == 7
        with t.consumer() as c:
            retry = SourceSide(t, c, plan, plan.stages[0], 0, config, None, 0,
                              guarantee=guarantee_named(plan.guarantee))
            retry.close()
        assert retry.starts == first.starts


@pytest.mark.parametrize("checkpoints", ["kafka", "filesystem"])
def test_a_zombies_positions_in_the_store_never_start_a_source_past_its_state(
        checkpoints, tmp_path):
    """At-least-once with positions in the checkpoint topic or files: a zombie writes its
    positions there after its successor started, while recovery ignores its commits in
    the change log. The source starts at the commit its state holds (replaying what the
    zombie read), not past it; behind the commit the store's position replays, as
    at-least-once allows."""
    from eos_runtime.joblog.checkpoints import Checkpoint
    from eos_runtime.protocol import wire
    from eos_runtime.runtime.source import position_store, start_positions

    opts = {"data_dir": str(tmp_path / "data")}
    tag = uuid.uuid4().hex[:6]
    with open_transport(**opts) as t:
        name, source = f"src-{tag}", f"src-in-{tag}"
        fill(t, source, 2, 20)
        pipe = Pipeline(name, processing_guarantee="at-least-once", checkpoints=checkpoints)
        pipe.source(source, value="utf8").sink(f"src-out-{tag}", value="utf8")
        plan = plan_job(pipe, t)
        state = str(tmp_path / "state")
        store = position_store(t, plan, state)
        store.register(0)
        store.write_checkpoint(0, Checkpoint({(source, 0): 9, (source, 1): 2}))   # the zombie's
        cp = store.read_last_checkpoint(0)
        store.stop()
        kept = {p: off for (_, p), off in cp.offsets.items()}
        commit = wire.ChangeLogCommit(3, 5, inputs=(wire.InputPosition(source, 0, 4),
                                                    wire.InputPosition(source, 1, 6)))
        got = start_positions(t, plan.stages[0], (0, 1), commit, 1, None, kept, job=name)
        assert got == {0: (4, "checkpoint"), 1: (2, "checkpoint")}


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_an_idle_at_least_once_source_takes_no_timer_checkpoint(guarantee, tmp_path):
    """Issue 22, idle jobs: a source that read nothing since its last checkpoint would
    record what that one did. At-least-once skips it (no channel task waits for its
    markers mid-run); exactly-once takes it (R2: a channel task commits a version once
    every producer's marker came). A start that moved (upcoming, a Startpoint) is
    recorded even with nothing read."""
    from fake_clock import FakeClock

    from eos_runtime.protocol import wire
    from eos_runtime.runtime.policy import CommitTimer

    opts = {"data_dir": str(tmp_path / "data")}
    tag = uuid.uuid4().hex[:6]
    with open_transport(**opts) as t:
        name, source = f"idle-{tag}", f"idle-in-{tag}"
        fill(t, source, 1, 5)

        def side(commit, **source_options):
            pipe = Pipeline(name, processing_guarantee=guarantee)
            pipe.source(source, value="utf8", **source_options).sink(f"o-{tag}", value="utf8")
            plan = plan_job(pipe, t)
            config = task_configs(plan, t, opts, str(tmp_path / "state"), bounded=False,
                                  run=1)[0]
            s = SourceSide(t, t.consumer(), plan, plan.stages[0], 0, config, commit, 0,
                           guarantee=guarantee_named(plan.guarantee))
            clock = FakeClock(1_000_000.0)
            s.timer = CommitTimer(1.0, 0, clock=clock)
            return s, clock

        def checkpoints(s, clock):
            clock.advance(1.0)
            return s.checkpoint_due() is not None

        eo = guarantee == "exactly-once"
        commit = wire.ChangeLogCommit(1, 7, inputs=(wire.InputPosition(source, 0, 3),))
        s, clock = side(commit)
        assert checkpoints(s, clock) is eo, "nothing read: the last checkpoint says it all"
        s.poll(10, 5.0)
        assert s.positions == {0: 5}
        assert checkpoints(s, clock), "two records read"
        s.committed(8)
        assert checkpoints(s, clock) is eo, "nothing read since version 8"
        s.close()
        s, clock = side(commit, offset_default="upcoming", reset_offset=True)
        assert s.positions == {0: 5}
        assert checkpoints(s, clock), "the start moved from 3 to 5: recorded"
        s.close()


@pytest.mark.parametrize("how,begin", [("oldest", 0), ("upcoming", 6), ("reset", 0),
                                       ("reset-upcoming", 6), ("checkpoint", 4)])
def test_the_driver_counts_a_runs_input_from_where_its_sources_start(how, begin, tmp_path):
    """Issue 27 item 18: the run summary counted input from the last checkpoint (or the
    oldest offset), not from where the run started: a --reset-offset run that read 200
    records said 'input 0', a fresh upcoming run that read none said 200. The driver's
    start positions are the tasks' own (start_positions), with the run's ends (P5)."""
    from eos_runtime.protocol import wire
    from eos_runtime.runner import run_begin, run_start_ends

    opts = {"data_dir": str(tmp_path / "data")}
    tag = uuid.uuid4().hex[:6]
    with open_transport(**opts) as t:
        source = f"b-in-{tag}"
        fill(t, source, 1, 6)
        options = {"upcoming": {"offset_default": "upcoming"},
                   "reset": {"reset_offset": True},
                   "reset-upcoming": {"reset_offset": True, "offset_default": "upcoming"},
                   }.get(how, {})
        pipe = Pipeline(f"b-{tag}")
        pipe.source(source, value="utf8", **options).sink(f"b-out-{tag}", value="utf8")
        plan = plan_job(pipe, t)
        if how in ("reset", "reset-upcoming", "checkpoint"):   # run 0 committed offset 4
            t.create_topics(plan.topics_to_create())
            with t.producer() as p:
                p.produce(plan.changelog_topic, 0, wire.encode(wire.ChangeLogCommit(
                    1, 5, inputs=(wire.InputPosition(source, 0, 4),))))
                p.flush()
        got = run_begin(t, plan, 1, str(tmp_path / "state"), {}, run_start_ends(t, plan))
        assert set(run_start_ends(t, plan)) == {source}
        assert got == {TopicPartition(source, 0): begin}


@pytest.mark.kafka
def test_an_unbounded_source_caught_up_on_transactional_input_lets_its_partitions_idle(
        tmp_path, kafka_bootstrap):
    """Caught up on another exactly-once job's output, a partition's end is one past a
    commit marker no record ever reaches: it counted as behind for ever, so a quiet
    partition held the watermark at its last event time whatever ``idle_after`` said."""
    import dataclasses
    import time

    from eos_runtime.windows import tumbling

    opts = {"bootstrap_servers": kafka_bootstrap}
    tag = uuid.uuid4().hex[:6]
    with open_transport(**opts) as t:
        source = f"src-in-{tag}"
        t.create_topics([TopicSpec(source, 2)])
        p = Pipeline(f"src-{tag}")
        (p.source(source, value="utf8", timestamp=int, idle_after=0.001).key_by(str)
         .window(tumbling(seconds=1)).count().final().sink(f"src-out-{tag}", value="json"))
        plan = plan_job(p, t, parallelism=1)   # one task reads both partitions
        with t.producer(transactional_id=f"writer-{tag}") as w:
            for partition, times in ((0, (50, 100)), (1, (4000, 5000))):
                w.begin_transaction()
                for time_ms in times:
                    w.produce(source, partition, str(time_ms).encode())
                w.commit_transaction()
        config = dataclasses.replace(task_configs(plan, t, opts, str(tmp_path / "state"))[0],
                                     bounded=False)
        assert config.end_offsets == {0: 3, 1: 3}, "2 records and a commit marker each"
        with t.consumer() as c:
            side = SourceSide(t, c, plan, plan.stages[0], 0, config, None, 0,
                              guarantee=guarantee_named(plan.guarantee))
            try:
                got, highs = 0, {}
                for _ in range(100):
                    for r in side.poll(1_000, 0.2):
                        got += 1
                        highs[r.partition] = max(highs.get(r.partition, 0), int(r.value))
                    if got == 4 and all(c.position(tp) == 3 for tp in side.tps.values()):
                        break
                assert got == 4
                side.read_event_times(highs)
                time.sleep(0.05)   # both partitions idle: read more than idle_after ago
                assert side.watermark() == 5000
            finally:
                side.close()


class _BusyAfterTheEnd:
    """A consumer of one partition whose end (10) is one past a commit marker (offset 9)
    and whose writer keeps committing more than a poll's timeout apart never: every poll
    brings records, those past the end included."""

    def __init__(self, topic):
        from eos_runtime.transport import Record

        self.topic, self.Record = topic, Record
        self.next, self.paused = 0, set()

    def assign(self, positions):
        self.next = min(positions.values())

    def pause(self, tps):
        self.paused |= set(tps)

    def position(self, tp):
        return self.next

    def poll(self, max_records, timeout):
        if self.paused:
            return []
        first, self.next = self.next, (11 if self.next < 9 else self.next + 3)
        offsets = [o for o in range(first, self.next) if o != 9]   # 9: the commit marker
        return [self.Record(self.topic, 0, o, None, f"v{o}".encode(), 0) for o in offsets]

    def close(self):
        pass


def test_a_bounded_run_ends_on_busy_transactional_input(tmp_path):
    """The end is one past a commit marker no record reaches, so a bounded source
    finished a partition only on an empty poll (the consumer's position then past the
    marker). Behind a writer committing more often than a poll's timeout, no poll was
    empty: the run read and dropped records past its end for ever."""
    import dataclasses

    opts = {"data_dir": str(tmp_path / "data")}
    tag = uuid.uuid4().hex[:6]
    with open_transport(**opts) as t:
        plan, source = source_job(t, tag)
        config = dataclasses.replace(task_configs(plan, t, opts, str(tmp_path / "state"))[0],
                                     end_offsets={0: 10})
        side = SourceSide(t, _BusyAfterTheEnd(source), plan, plan.stages[0], 0, config, None,
                          0, guarantee=guarantee_named(plan.guarantee))
        try:
            assert read_all(side, polls=5) == [f"v{i}".encode() for i in range(9)]
        finally:
            side.close()


def test_a_checkpoint_past_the_partitions_end_is_named_as_such(tmp_path):
    """A checkpoint at 1 000 on a partition of 10 records (the topic made again) was told
    that retention may have deleted input, which was not what happened."""
    from eos_runtime.errors import StartOutOfRange
    from eos_runtime.protocol import wire
    from eos_runtime.protocol.runs import run_end
    from eos_runtime.runtime.source import start_positions

    opts = {"data_dir": str(tmp_path / "data")}
    tag = uuid.uuid4().hex[:6]
    with open_transport(**opts) as t:
        plan, source = source_job(t, tag)
        fill(t, source, 1, 10)
        commit = wire.ChangeLogCommit(1, run_end(0), inputs=(wire.InputPosition(source, 0,
                                                                                1_000),))
        with pytest.raises(StartOutOfRange, match=r"offset 1000 \(checkpoint\) is outside .*"
                                                  r"the topic ends before it"):
            start_positions(t, plan.stages[0], (0,), commit, 1, job=plan.name)
