"""One contract suite for the three checkpoint managers (Samza 0.7's CheckpointManager),
on both transports where the manager keeps its checkpoints in a topic."""

from __future__ import annotations

import uuid

import pytest

from eos_runtime.errors import ConfigError, TopicNotFound
from eos_runtime.joblog.changelog import ChangeLogWriter, fold_log, recover
from eos_runtime.joblog.checkpoints import (
    ChangeLogCheckpoints,
    Checkpoint,
    FileSystemCheckpoints,
    TopicCheckpoints,
    checkpoint_topic,
)
from eos_runtime.protocol import wire
from eos_runtime.state import TaskStore
from eos_runtime.transport import TopicPartition, TopicSpec, open_transport

TASKS = 3
KINDS = ["local", pytest.param("kafka", marks=pytest.mark.kafka)]


@pytest.fixture(params=[("change-log", "local"), ("topic", "local"), ("file-system", None),
                        pytest.param(("change-log", "kafka"), marks=pytest.mark.kafka),
                        pytest.param(("topic", "kafka"), marks=pytest.mark.kafka)],
                ids=lambda p: "-".join(x for x in p if x))
def make(request, tmp_path):
    backend, kind = request.param
    job = f"cpjob-{request.node.name[-30:]}".replace("[", "-").replace("]", "")
    job = "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in job)
    transports = []

    def factory():
        if backend == "file-system":
            return FileSystemCheckpoints(tmp_path / "checkpoints", job)
        opts = ({"data_dir": str(tmp_path / "data")} if kind == "local"
                else {"bootstrap_servers": request.getfixturevalue("kafka_bootstrap")})
        t = open_transport(**opts)
        transports.append(t)
        if backend == "change-log":
            if f"{job}.changelog" not in t.list_topics():
                t.create_topics([TopicSpec(f"{job}.changelog", TASKS, keep_forever=True)])
            return ChangeLogCheckpoints(t, job)
        return TopicCheckpoints(t, job, TASKS)

    yield factory
    for t in transports:
        t.close()


def started(factory, *tasks):
    m = factory()
    m.start()
    for task in tasks:
        m.register(task)
    return m


def test_no_checkpoint_reads_none(make):
    m = started(make, 0)
    assert m.read_last_checkpoint(0) is None
    m.stop()


def test_the_last_write_is_read_back_per_task_and_survives_a_new_manager(make):
    m = started(make, 0, 1, 2)
    m.write_checkpoint(0, Checkpoint({("in", 0): 5, ("in", 3): 7}))
    m.write_checkpoint(0, Checkpoint({("in", 0): 9, ("in", 3): 7}))
    m.write_checkpoint(2, Checkpoint({("in", 1): 1}))
    assert m.read_last_checkpoint(0) == Checkpoint({("in", 0): 9, ("in", 3): 7})
    assert m.read_last_checkpoint(1) is None
    m.stop()
    again = started(make, 0, 2)
    assert again.read_last_checkpoint(0).offsets == {("in", 0): 9, ("in", 3): 7}
    assert again.read_last_checkpoint(2).offsets == {("in", 1): 1}


def test_use_before_start_or_register_is_refused(make):
    m = make()
    with pytest.raises(ConfigError, match="start"):
        m.read_last_checkpoint(0)
    m.start()
    with pytest.raises(ConfigError, match="not registered"):
        m.write_checkpoint(1, Checkpoint({("in", 0): 1}))


def test_bad_checkpoints_are_refused():
    with pytest.raises(ConfigError, match="non-negative"):
        Checkpoint({("in", 0): -1})
    with pytest.raises(ConfigError, match="stream name, partition"):
        Checkpoint({("in", "0"): 1})


def test_the_topic_is_named_like_samzas_and_partitioned_like_the_job(tmp_path):
    with open_transport(data_dir=str(tmp_path)) as t:
        m = TopicCheckpoints(t, "myjob", 4, job_id="7")
        m.start()
        assert checkpoint_topic("myjob", "7") == "__eos_checkpoint_myjob_7"
        assert t.describe("__eos_checkpoint_myjob_7").partitions == 4
        with pytest.raises(ConfigError, match="tasks 0..3"):
            m.register(4)
        with pytest.raises(ConfigError, match="another layout"):
            TopicCheckpoints(t, "myjob", 5, job_id="7").start()


@pytest.mark.parametrize("kind", KINDS)
def test_a_change_log_write_keeps_state_and_version_and_fences_the_old_generation(
        kind, tmp_path, request):
    """Written positions become a new generation's commit of the same version: the state
    is kept, and the next recovery starts from the new positions."""
    opts = ({"data_dir": str(tmp_path / "data")} if kind == "local"
            else {"bootstrap_servers": request.getfixturevalue("kafka_bootstrap")})
    # A name of its own: the session's broker may hold an earlier session's job
    job = f"cpstate-{kind}-{uuid.uuid4().hex[:8]}"
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec(f"{job}.changelog", 1, keep_forever=True)])
        tp = TopicPartition(f"{job}.changelog", 0)
        writer = ChangeLogWriter.open(t, tp, f"{job}.task-0", 1, fenced=True)
        writer.start_generation(0)
        writer.changes(4, [("s", [b"k"], [b"v"])])
        writer.commit(wire.ChangeLogCommit(1, 4, inputs=(wire.InputPosition("in", 0, 10),)))
        writer.close()
        store = TaskStore(tmp_path / "store", ("s",))
        recover(t, tp, store)
        m = ChangeLogCheckpoints(t, job)
        m.start()
        m.register(0)
        m.write_checkpoint(0, Checkpoint({("in", 0): 3}))
        back = m.read_last_checkpoint(0)
        assert back.offsets == {("in", 0): 3} and back.version == 4 and back.generation == 2
        assert fold_log(t, tp).generation == 2
        again = recover(t, tp, store)
        assert again.version == 4 and again.generation == 2
        assert again.commit.inputs == (wire.InputPosition("in", 0, 3),)
        assert store.get("s", b"k") == b"v"
        store.close()
        fresh = TaskStore(tmp_path / "fresh", ("s",))   # a new host: rebuilt from the log
        assert recover(t, tp, fresh).rebuilt is False and fresh.get("s", b"k") == b"v"
        fresh.close()
        store.close()


# --------------------------------------------------------------------------- in a job

def test_a_job_has_a_name_and_an_id_and_exactly_once_refuses_both_other_stores(tmp_path):
    from eos_runtime import Pipeline
    from eos_runtime.plan import plan_job
    from eos_runtime.runner import run_pipeline

    assert Pipeline("j").job_id == "1"
    for bad in ("", "a b", 7):
        with pytest.raises(ConfigError, match="job_id"):
            Pipeline("j", job_id=bad)
    with open_transport(data_dir=str(tmp_path / "data")) as t:
        t.create_topics([TopicSpec("in", 1)])
        p = Pipeline("j", processing_guarantee="at-least-once", checkpoints="kafka")
        p.source("in").map(str.upper).sink("out")
        assert plan_job(p, t).job_id == "1"
        assert plan_job(p, t, job_id="9").job_id == "9"
    for store in ("kafka", "filesystem"):    # the Pipeline setting, not only the run option
        p = Pipeline("eo", checkpoints=store)
        p.source("in").map(str.upper).sink("out")
        with pytest.raises(ConfigError, match=f"checkpoints '{store}' is for at-least-once "
                                              f"jobs: an exactly-once job's checkpoint is its "
                                              f"change-log commit"):
            run_pipeline(p, data_dir=str(tmp_path / "data"), state_dir=str(tmp_path / "st"))


@pytest.mark.kafka
def test_an_at_least_once_job_keeps_its_positions_in_the_checkpoint_topic_on_kafka(
        kafka_bootstrap, tmp_path):
    """Pipeline(checkpoints="kafka", job_id=...) on Kafka: the sources' positions go to
    __eos_checkpoint_<job>_<job-id>, one partition per task, and the next run starts there."""
    import uuid
    from collections import Counter

    from eos_runtime import Pipeline
    from eos_runtime.joblog.committed import read_output
    from eos_runtime.joblog.control import ControlLog
    from eos_runtime.plan import plan_job
    from eos_runtime.runner import run_pipeline

    from pipeline_oracles import produce as produce_values

    opts = {"bootstrap_servers": kafka_bootstrap}
    tag = uuid.uuid4().hex[:6]
    job, source, sink = f"alo-{tag}", f"alo-in-{tag}", f"alo-out-{tag}"

    def pipeline(job_id: str) -> Pipeline:
        p = Pipeline(job, processing_guarantee="at-least-once", checkpoints="kafka",
                     job_id=job_id, commit_every=5)
        p.source(source).map(str.upper).sink(sink)
        return p

    def produce(values):
        with open_transport(**opts) as t:
            produce_values(t, source, [v.encode() for v in values])

    produce([f"a{i}" for i in range(12)])
    state = str(tmp_path / "state")
    run_pipeline(pipeline("7"), state_dir=state, **opts)
    with open_transport(**opts) as t:
        topic = checkpoint_topic(job, "7")
        assert topic == f"__eos_checkpoint_{job}_7"
        assert t.describe(topic).partitions == 2 and t.describe(topic).compacted
        with pytest.raises(TopicNotFound):
            t.describe(checkpoint_topic(job, "1"))
        m = TopicCheckpoints(t, job, 2, job_id="7")
        m.start()
        for task in (0, 1):
            m.register(task)
            assert m.read_last_checkpoint(task) == Checkpoint({(source, task): 6})
    produce([f"b{i}" for i in range(4)])
    summary = run_pipeline(pipeline("7"), state_dir=state, **opts)
    assert summary.stages[0]["processed"] == 4, "the second run did not start at the topic's"
    with open_transport(**opts) as t:
        got = Counter(r.value.decode() for r in read_output(t, sink, job=job))
        assert got == Counter([f"A{i}" for i in range(12)] + [f"B{i}" for i in range(4)])
        # the job id selects the positions: another is another layout, refused
        with pytest.raises(ConfigError, match="(?s)ran before .*job id 7.*now:.*job id 8"):
            ControlLog(t, job).start_run(plan_job(pipeline("8"), t), bounded=True)


class _CountingTransport:
    """A transport that counts the records its consumers return."""

    def __init__(self, t):
        self._t, self.read = t, 0

    def __getattr__(self, name):
        return getattr(self._t, name)

    def consumer(self, **kw):
        outer, inner = self, self._t.consumer(**kw)

        class Counting:
            def __enter__(self):
                inner.__enter__()
                return self

            def __exit__(self, *exc):
                return inner.__exit__(*exc)

            def poll(self, *a, **k):
                got = inner.poll(*a, **k)
                outer.read += len(got)
                return got

            def __getattr__(self, name):
                return getattr(inner, name)

        return Counting()


@pytest.mark.parametrize("kind", KINDS)
def test_a_tasks_last_checkpoint_is_read_from_its_partitions_tail(kind, tmp_path, request):
    """At 100 ms a task writes ten checkpoints a second, and the local log never compacts
    (nor does Kafka's active segment): a task start must not read them all, nor the other
    tasks'. A tombstone at the tail is passed over, as before."""
    from eos_runtime.joblog.checkpoints import _encode

    opts = ({"data_dir": str(tmp_path / "data")} if kind == "local"
            else {"bootstrap_servers": request.getfixturevalue("kafka_bootstrap")})
    job = f"tail-{uuid.uuid4().hex[:8]}"
    t = open_transport(**opts)
    try:
        TopicCheckpoints(t, job, TASKS).start()
        with t.producer() as p:
            for n in range(3000):
                for task in range(TASKS):
                    p.produce(checkpoint_topic(job), task,
                              _encode(Checkpoint({("in", task): n})), key=b"%d" % task)
            p.produce(checkpoint_topic(job), 1, None, key=b"1")
            p.flush()
        counting = _CountingTransport(t)
        m = TopicCheckpoints(counting, job, TASKS, create=False)
        m.start()
        m.register(0)
        m.register(1)
        assert m.read_last_checkpoint(0).offsets == {("in", 0): 2999}
        assert m.read_last_checkpoint(1).offsets == {("in", 1): 2999}
        assert counting.read <= 1000, counting.read
    finally:
        t.close()
