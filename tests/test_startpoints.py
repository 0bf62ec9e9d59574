"""Startpoints: the pure rules (fan-out P1a, applies-until-committed P1b) driven directly;
then real runs on both transports: every kind, both key kinds and the fan-out, precedence
over the checkpoint, deletion at the next commit, re-application after a crash before it
and none after a crash just after it. Output is checked record by record against what the
source was told to read (exactly-once: each of those records once)."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

import pytest

from eos_runtime import Pipeline
from eos_runtime.errors import ConfigError, JobRunning, TopicNotFound
from eos_runtime.joblog.committed import read_output
from eos_runtime.joblog.control import ControlLog
from eos_runtime.joblog.startpoints import (
    Startpoint,
    StartpointKey,
    clear_startpoints,
    list_startpoints,
    set_startpoint,
)
from eos_runtime.protocol import wire
from eos_runtime.protocol.positions import choose_start, fan_out, startpoint_applies
from eos_runtime.runner import run_pipeline
from eos_runtime.transport import TopicSpec, open_transport

KINDS = ["local", pytest.param("kafka", marks=pytest.mark.kafka)]
PARTS = 4
# Recent: Kafka's retention (7 days) deletes older records, input and output alike.
T0 = int(time.time() * 1000) - 3_600_000


# --------------------------------------------------------------------------- pure rules

def test_a_startpoint_applies_until_its_run_committed():
    assert startpoint_applies(None, 5)            # not fanned out yet: the run starting now
    assert startpoint_applies(3, None)            # no checkpoint at all
    assert startpoint_applies(3, 2)               # the checkpoint is older than the startpoint
    assert not startpoint_applies(3, 3)           # the task committed in that run: used up
    assert not startpoint_applies(3, 4)


def test_a_startpoint_beats_the_checkpoint_and_reset_until_used_up():
    from eos_runtime.protocol.positions import Start
    sp = Start("offset", 7, "startpoint")
    got = choose_start(checkpoint=50, checkpoint_run=1, run=2, reset=True, startpoint=sp,
                       startpoint_run=2)
    assert (got.kind, got.value, got.why) == ("offset", 7, "startpoint")
    used = choose_start(checkpoint=50, checkpoint_run=2, run=2, startpoint=sp, startpoint_run=2)
    assert (used.kind, used.value, used.why) == ("offset", 50, "checkpoint")


def test_fan_out_gives_partition_keys_to_their_reader_and_task_keys_win():
    chosen, unread = fan_out({0: "p0", 1: "p1", 9: "p9"}, {(1, 1): "t1", (0, 2): "bad"},
                             {0: 0, 1: 1, 2: 2})
    assert chosen == {(0, 0): "p0", (1, 1): "t1"}
    assert sorted(unread) == [2, 9]   # no reader of 9; task 0 does not read 2


def test_startpoint_values_are_checked():
    with pytest.raises(ConfigError, match="needs a value"):
        Startpoint("offset")
    with pytest.raises(ConfigError, match="takes no value"):
        Startpoint("oldest", 3)
    with pytest.raises(ConfigError, match="use one of"):
        Startpoint("newest")
    key = StartpointKey("lines", 3, 2)
    assert StartpointKey.decode(key.encode()) == key


# ------------------------------------------------- every kind x both keys, no Spark

# (name, Startpoint, where it puts partition 1: ten records at T0 .. T0+9)
UNIT_CASES = [("offset", Startpoint.offset(3), 3),
              ("timestamp", Startpoint.timestamp(T0 + 6), 6),
              ("oldest", Startpoint.oldest(), 0),
              ("upcoming", Startpoint.upcoming(), 10),
              ("custom", Startpoint.custom("back", "4"), 6)]   # 4 before the end


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_with_either_key_is_fanned_out_resolved_and_beats_the_checkpoint(
        kind, tmp_path, request):
    """Set (CLI-free API), fanned out at a run's start (a partition key becomes the reading
    task's key), resolved by the transport (the consumer-side visitor) in the task's
    start_positions ahead of run 0's checkpoint; used up once the task committed in the
    run it was fanned out for."""
    from eos_runtime.joblog.startpoints import fan_out_startpoints
    from eos_runtime.plan import plan_job
    from eos_runtime.protocol.runs import first_version, run_end
    from eos_runtime.runtime.source import start_positions

    opts = opts_for(kind, tmp_path, request)
    tag = uuid.uuid4().hex[:6]
    source = f"spu-in-{tag}"
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec(source, 2)])
        with t.producer() as p:
            for part in (0, 1):
                for i in range(10):
                    p.produce(source, part, f"v{i}".encode(), timestamp=T0 + i)
            p.flush()
        stage = plan_job(passthrough("spu", source, "out"), t).stages[0]
        at = (wire.InputPosition(source, 0, 8), wire.InputPosition(source, 1, 8))
        checkpoint = wire.ChangeLogCommit(1, run_end(0), inputs=at)            # run 0's
        readers = {0: 0, 1: 1}
        for name, sp, want in UNIT_CASES:
            for task in (None, 1):
                job = f"spu-{tag}-{name}-{'part' if task is None else 'task'}"
                key = set_startpoint(job, source, 1, sp, task=task, transport=t)
                assert key == StartpointKey(source, 1, task)
                assert list_startpoints(job, transport=t) == {key: sp}
                fanned = fan_out_startpoints(t, job, source, readers, run=1)
                assert list(fanned) == [1] and list(fanned[1]) == [1], fanned
                assert (fanned[1][1].kind, fanned[1][1].run) == (name, 1)
                assert list_startpoints(job, transport=t) == {
                    StartpointKey(source, 1, 1): fanned[1][1]}, "not fanned out to task 1"
                got = start_positions(t, stage, (0, 1), checkpoint, 1, fanned[1], job=job)
                assert got == {0: (8, "checkpoint"), 1: (want, "startpoint")}, (name, task)
                # a retry of task 1 after its first commit in run 1: used up
                mine = wire.ChangeLogCommit(2, first_version(1) + 5, inputs=(
                    at[0], wire.InputPosition(source, 1, 9)))
                assert start_positions(t, stage, (0, 1), mine, 1, fanned[1], job=job) == {
                    0: (8, "checkpoint"), 1: (9, "checkpoint")}, (name, task)


def test_a_custom_startpoint_retried_in_its_run_starts_where_the_first_attempt_did(tmp_path):
    """P5 for custom Startpoints: a task that crashed before its first commit and starts
    again in the run asked its resolver with the partition's end now, not as the run
    started, so it began later than the first attempt (whose output was aborted) and what
    came between the two starts was never read."""
    from eos_runtime.joblog.startpoints import fan_out_startpoints
    from eos_runtime.plan import plan_job
    from eos_runtime.runtime.source import start_positions

    opts = {"data_dir": str(tmp_path / "data")}
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec("in", 1)])

        def write(n):
            with t.producer() as p:
                for i in range(n):
                    p.produce("in", 0, f"v{i}".encode())
                p.flush()

        write(100)
        stage = plan_job(passthrough("retry", "in", "out"), t).stages[0]
        set_startpoint("retry", "in", 0, Startpoint.custom("back", "10"), transport=t)
        fanned = fan_out_startpoints(t, "retry", "in", {0: 0}, run=0)[0]
        ends = {0: 100}                         # the driver's, as the run started
        first = start_positions(t, stage, (0,), None, 0, fanned, job="retry",
                                run_start_ends=ends)
        write(50)                               # arrives while the first attempt runs
        again = start_positions(t, stage, (0,), None, 0, fanned, job="retry",
                                run_start_ends=ends)
    assert first == again == {0: (90, "startpoint")}


# --------------------------------------------------------------------------- real runs

def opts_for(kind, tmp_path, request):
    return ({"data_dir": str(tmp_path / "data")} if kind == "local"
            else {"bootstrap_servers": request.getfixturevalue("kafka_bootstrap")})


def last_digit(topic, partition, argument, low, high):
    """A custom resolver: ``argument`` records before the end."""
    return max(low, high - int(argument))


def passthrough(job, source, sink):
    # checkpoints by count only: the commit grid's lines of 1e9 s are in 2001 and 2033
    p = Pipeline(job, commit_every=5, commit_interval=1e9)
    p.source(source, value="utf8",
             startpoint_resolvers={"back": last_digit}).map(str.upper).sink(sink, value="utf8")
    return p


def produce(opts, topic, per_partition: dict[int, list[str]], ts: int):
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec(topic, PARTS)])
        with t.producer() as p:
            for part, values in per_partition.items():
                for i, v in enumerate(values):
                    p.produce(topic, part, v.encode(), timestamp=ts + i)
            p.flush()


def output(opts, sink, job) -> Counter:
    with open_transport(**opts) as t:
        return Counter(r.value.decode() for r in read_output(t, sink, job=job))


def batch(tag: str, n: int) -> dict[int, list[str]]:
    return {p: [f"{tag}{p}-{i}" for i in range(n)] for p in range(PARTS)}


def upper(values) -> Counter:
    return Counter(v.upper() for v in values)


class SeesStartpoints:
    """A checkpoint listener writing, at each checkpoint, the Startpoints of its task the
    metadata store still holds (the tasks run in Spark's workers: to a file)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def open(self, context):
        self.context = context

    def on_checkpoint(self, task, offsets):
        left = sorted(k.partition for k in list_startpoints(
            self.context.job, transport=self.context.transport) if k.task in (task, None))
        with open(self.path, "a") as f:
            f.write(json.dumps([task, left]) + "\n")


def assert_kept_in_the_metadata_store(opts, job):
    """Startpoints live in <job>.metadata: one partition, compacted (on Kafka: its
    cleanup.policy), holding Startpoint records only; the change log and the checkpoint
    topic hold none."""
    from eos_runtime.joblog.committed import read_topic
    from eos_runtime.joblog.startpoints import metadata_topic

    with open_transport(**opts) as t:
        meta = t.describe(metadata_topic(job))
        assert (meta.name, meta.partitions, meta.compacted) == (f"{job}.metadata", 1, True)
        keys = [r.key for r in read_topic(t, f"{job}.metadata", read_committed=False)]
        assert keys and all(k.startswith(b"startpoint/") for k in keys), keys
        changelog = read_topic(t, f"{job}.changelog", read_committed=False)
        assert changelog and not [r for r in changelog
                                  if (r.key or b"").startswith(b"startpoint/")]
        with pytest.raises(TopicNotFound):
            t.describe(f"__eos_checkpoint_{job}_1")


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_with_both_key_kinds_beats_the_checkpoint_and_is_used_up(kind, tmp_path,
                                                                            request):
    opts = opts_for(kind, tmp_path, request)
    tag = uuid.uuid4().hex[:6]
    job, source, sink = f"sp-{tag}", f"sp-in-{tag}", f"sp-out-{tag}"
    first = batch("a", 20)                    # timestamps T0 .. T0+19 in every partition
    produce(opts, source, first, T0)
    state = str(tmp_path / "state")
    pipeline = passthrough(job, source, sink)
    run_pipeline(pipeline, state_dir=state, **opts)
    expected = upper(v for vs in first.values() for v in vs)
    assert output(opts, sink, job) == expected

    # Run 1: each partition is moved back another way; partition keys go to their reader
    # (task p reads partition p), task keys to the task named.
    set_startpoint(job, source, 0, Startpoint.offset(12), **opts)
    set_startpoint(job, source, 1, Startpoint.timestamp(T0 + 15), task=1, **opts)
    set_startpoint(job, source, 2, Startpoint.oldest(), **opts)
    set_startpoint(job, source, 3, Startpoint.upcoming(), task=3, **opts)
    assert set(list_startpoints(job, **opts)) == {
        StartpointKey(source, 0), StartpointKey(source, 1, 1), StartpointKey(source, 2),
        StartpointKey(source, 3, 3)}
    assert_kept_in_the_metadata_store(opts, job)
    more = batch("b", 3)
    produce(opts, source, more, T0 + 100)
    calls = tmp_path / "calls.jsonl"
    pipeline.on_checkpoint(SeesStartpoints(str(calls)))
    run_pipeline(pipeline, state_dir=state, **opts)
    firsts: dict[int, list] = {}
    for line in calls.read_text().splitlines():
        task, left = json.loads(line)
        firsts.setdefault(task, left)
    # Deleted at each task's first commit of the run, before its listeners were told
    # (and not before the run: they were listed above).
    assert firsts == {0: [], 1: [], 2: [], 3: []}, firsts
    expected += upper(first[0][12:] + more[0])          # offset 12
    expected += upper(first[1][15:] + more[1])          # the first record at T0+15
    expected += upper(first[2] + more[2])               # oldest: all again
    # upcoming: nothing of partition 3 (a bounded run ends at the offsets of its start)
    assert output(opts, sink, job) == expected
    assert list_startpoints(job, **opts) == {}, "used-up startpoints were not deleted"

    # Run 2: a custom resolver (3 records before the end) on partition 0 only; the others
    # continue from their checkpoints, so partition 3's skipped records stay skipped.
    set_startpoint(job, source, 0, Startpoint.custom("back", "3"), **opts)
    run_pipeline(pipeline, state_dir=state, **opts)
    expected += upper(more[0])                          # offsets 20..22 again
    assert output(opts, sink, job) == expected
    assert list_startpoints(job, **opts) == {}


@pytest.mark.parametrize("kind", KINDS)
def test_a_crash_before_the_commit_applies_it_again_one_after_does_not(kind, tmp_path, request):
    opts = opts_for(kind, tmp_path, request)
    tag = uuid.uuid4().hex[:6]
    job, source, sink = f"spc-{tag}", f"spc-in-{tag}", f"spc-out-{tag}"
    first = batch("a", 30)
    produce(opts, source, first, T0)
    state = str(tmp_path / "state")
    pipeline = passthrough(job, source, sink)
    run_pipeline(pipeline, state_dir=state, **opts)
    expected = upper(v for vs in first.values() for v in vs)

    # Task 0 dies after processing records of its startpoint, before any commit: its retry
    # starts from the startpoint again. Task 1 dies right after its first commit (before
    # the startpoint is deleted): its retry resumes from that commit.
    set_startpoint(job, source, 0, Startpoint.offset(10), **opts)
    set_startpoint(job, source, 1, Startpoint.offset(20), **opts)
    summary = run_pipeline(pipeline, state_dir=state, poll_records=2, **opts, fault=[
        {"point": "task.mid_version", "task": 0, "hit": 2},
        {"point": "task.checkpoint.after_commit", "task": 1, "hit": 1}])
    attempts = {t["task_id"]: t["attempt"] for t in summary.tasks}
    assert attempts[0] == 1 and attempts[1] == 1, attempts
    expected += upper(first[0][10:]) + upper(first[1][20:])
    assert output(opts, sink, job) == expected
    assert list_startpoints(job, **opts) == {}


def test_startpoints_are_refused_for_internal_channels_other_topics_and_while_running(tmp_path):
    opts = {"data_dir": str(tmp_path / "data")}
    produce(opts, "words", batch("a", 2), T0)
    p = Pipeline("wc")
    p.source("words").flat_map(str.split).key_by(str).sink("counts")
    run_pipeline(p, state_dir=str(tmp_path / "state"), **opts)
    with pytest.raises(ConfigError, match="internal topic of job 'wc': Startpoints apply to "
                                          "the job's source stream only"):
        set_startpoint("wc", "wc.shuffle-1", 0, Startpoint.oldest(), **opts)
    with pytest.raises(ConfigError, match="job 'wc' reads 'words', not 'counts'"):
        set_startpoint("wc", "counts", 0, Startpoint.oldest(), **opts)
    with pytest.raises(ConfigError, match="partitions 0..3, not 4"):
        set_startpoint("wc", "words", 4, Startpoint.oldest(), **opts)
    with pytest.raises(ConfigError, match="task 0 does not read words\\[1\\]: task 1 does"):
        set_startpoint("wc", "words", 1, Startpoint.oldest(), task=0, **opts)
    with open_transport(**opts) as t:
        ControlLog(t, "wc").append_lease(wire.Lease(1, "acquire", "x", 1, "h",
                                                    int(time.time() * 1000),
                                                    3_600_000))
    with pytest.raises(JobRunning, match="job 'wc' is running \\(run 1, .*Startpoints can be "
                                         "set only while the job is stopped"):
        set_startpoint("wc", "words", 0, Startpoint.oldest(), **opts)
    with pytest.raises(JobRunning):
        clear_startpoints("wc", **opts)


def test_a_startpoint_no_task_reads_stops_the_run_before_it_is_recorded(tmp_path):
    opts = {"data_dir": str(tmp_path / "data")}
    produce(opts, "words", batch("a", 2), T0)
    produce(opts, "other", batch("a", 2), T0)
    set_startpoint("fresh", "other", 1, Startpoint.oldest(), **opts)   # never ran: any topic
    p = Pipeline("fresh")
    p.source("words").map(str.upper).sink("out")
    with pytest.raises(ConfigError, match=r"job 'fresh' has Startpoints for other\[1\], which no "
                                          r"task of this run reads \(it reads 'words'\): "
                                          r"clear them with `eos startpoint clear fresh`"):
        run_pipeline(p, state_dir=str(tmp_path / "state"), **opts)
    with open_transport(**opts) as t:
        log = ControlLog(t, "fresh")
        assert log.runs() == [] and log.lease()[0] == "free"
    clear_startpoints("fresh", **opts)
    p2 = Pipeline("fresh2")
    p2.source("words", startpoint_resolvers={}).map(str.upper).sink("out")
    set_startpoint("fresh2", "words", 0, Startpoint.custom("nope"), **opts)
    with pytest.raises(ConfigError, match="names resolver 'nope', which source 'words' does not "
                                          "have"):
        run_pipeline(p2, state_dir=str(tmp_path / "state"), **opts)


def test_keys_of_one_partition_with_and_without_a_task_sort_partition_key_first():
    """Issue 27 item 17: a partition key and a --task key on one partition (the docs allow
    both) made `eos startpoint list`, `clear` and `eos checkpoint show` fail with
    TypeError: '<' not supported between 'int' and 'NoneType'."""
    from eos_runtime.joblog.startpoints import StartpointKey

    keys = [StartpointKey("lines", 1, 2), StartpointKey("lines", 1), StartpointKey("lines", 0, 0)]
    assert sorted(keys) == [StartpointKey("lines", 0, 0), StartpointKey("lines", 1),
                            StartpointKey("lines", 1, 2)]


def test_a_startpoint_outside_the_partition_at_the_start_fails_at_once_naming_the_clear(tmp_path):
    """Issue 27 item 5: eos startpoint set refuses such an offset now, but retention may
    delete past one between the set and the run (here: written below the check). The
    run failed after every retry, hinting at reset_offset; no retry can help, and the
    Startpoint is what to clear."""
    from eos_runtime.errors import EosError
    from eos_runtime.joblog.startpoints import MetadataStore

    opts = {"data_dir": str(tmp_path / "data")}
    produce(opts, "words", batch("a", 2), T0)
    with open_transport(**opts) as t:
        MetadataStore(t, "far").write({StartpointKey("words", 0): Startpoint.offset(99)})
    p = Pipeline("far")
    p.source("words").sink("out")
    with pytest.raises(EosError) as caught:
        run_pipeline(p, state_dir=str(tmp_path / "state"), max_attempts=2, **opts)
    text = str(caught.value)
    assert "not retried" in text and getattr(caught.value, "attempts", None) == 1, text
    assert "source words[0]: offset 99" in text, text
    assert "its Startpoint: eos startpoint clear far --stream words --partition 0" in text, text
