"""Where sources start: offset_default without a checkpoint, reset_offset ignoring an
earlier run's checkpoint (never a retry's own), on both transports, checked record by
record against what the source was told to read."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from eos_runtime import Pipeline
from eos_runtime.joblog.committed import read_output
from eos_runtime.runner import run_pipeline
from eos_runtime.transport import open_transport

from pipeline_oracles import produce

KINDS = ["local", pytest.param("kafka", marks=pytest.mark.kafka)]


def opts_for(kind, tmp_path, request):
    return ({"data_dir": str(tmp_path / "data")} if kind == "local"
            else {"bootstrap_servers": request.getfixturevalue("kafka_bootstrap")})


def passthrough(name, source, sink, **source_options):
    p = Pipeline(name, commit_every=20)
    p.source(source, value="utf8", **source_options).map(str.upper).sink(sink, value="utf8")
    return p


def output(opts, sink, job):
    with open_transport(**opts) as t:
        return Counter(r.value.decode() for r in read_output(t, sink, job=job))


@pytest.mark.parametrize("kind", KINDS)
def test_reset_offset_reads_again_from_the_default_once_per_run(kind, tmp_path, request):
    opts = opts_for(kind, tmp_path, request)
    tag = uuid.uuid4().hex[:6]
    job, source, sink = f"pos-{tag}", f"pos-in-{tag}", f"pos-out-{tag}"
    first = [f"a{i}".encode() for i in range(100)]
    with open_transport(**opts) as t:
        produce(t, source, first)
    state = str(tmp_path / "state")
    run_pipeline(passthrough(job, source, sink), state_dir=state, **opts)
    assert output(opts, sink, job) == Counter(v.decode().upper() for v in first)
    more = [f"b{i}".encode() for i in range(60)]
    with open_transport(**opts) as t:
        produce(t, source, more)
    # Run 2 resets: everything again, once, although its source dies after its own
    # checkpoints inside the run (its retry resumes from them, not from the oldest).
    summary = run_pipeline(passthrough(job, source, sink, reset_offset=True), state_dir=state,
                           poll_records=10,
                           fault={"point": "task.mid_version", "task": 0, "hit": 4}, **opts)
    assert summary.tasks[0]["attempt"] == 1, "the crash point did not fire"
    once = Counter(v.decode().upper() for v in first)
    expected = once + once + Counter(v.decode().upper() for v in more)
    assert output(opts, sink, job) == expected


@pytest.mark.parametrize("kind", KINDS)
def test_offset_default_upcoming_skips_what_the_topic_held(kind, tmp_path, request):
    opts = opts_for(kind, tmp_path, request)
    tag = uuid.uuid4().hex[:6]
    job, source, sink = f"up-{tag}", f"up-in-{tag}", f"up-out-{tag}"
    with open_transport(**opts) as t:
        produce(t, source, [b"old"] * 10)
    run_pipeline(passthrough(job, source, sink, offset_default="upcoming"),
                 state_dir=str(tmp_path / "state"), **opts)
    assert output(opts, sink, job) == Counter()
    with open_transport(**opts) as t:
        produce(t, source, [b"new"] * 5)
    run_pipeline(passthrough(job, source, sink, offset_default="upcoming"),
                 state_dir=str(tmp_path / "state"), **opts)
    assert output(opts, sink, job) == Counter({"NEW": 5})   # the checkpoint now rules


def test_bad_position_settings_are_refused():
    from eos_runtime.errors import ConfigError

    with pytest.raises(ConfigError, match="offset_default 'latest'"):
        Pipeline("x").source("in", offset_default="latest")
    with pytest.raises(ConfigError, match="reset_offset must be True or False"):
        Pipeline("x").source("in", reset_offset="yes")


def test_no_fallback_is_a_choice_of_its_own():
    """P4 with offset_default 'none' (Samza 0.7: no fallback, no checkpoint: fail)."""
    from eos_runtime.protocol.positions import NoFallback, Start, choose_start

    with pytest.raises(NoFallback, match="it has no checkpoint and no Startpoint, and "
                                         "offset_default is 'none' \\(no fallback\\)"):
        choose_start(checkpoint=None, checkpoint_run=None, run=0, default="none")
    with pytest.raises(NoFallback, match="its checkpoint is ignored \\(reset_offset\\)"):
        choose_start(checkpoint=5, checkpoint_run=0, run=1, reset=True, default="none")
    assert choose_start(checkpoint=5, checkpoint_run=0, run=1, default="none") == \
        Start("offset", 5, "checkpoint")
    assert choose_start(checkpoint=5, checkpoint_run=1, run=1, reset=True,
                        default="none").why == "checkpoint"          # a retry's own
    sp = Start("oldest", None, "startpoint")
    assert choose_start(checkpoint=None, checkpoint_run=None, run=0, default="none",
                        startpoint=sp) == sp
    assert Pipeline("x").source("in", offset_default="none").__class__.__name__ == "Stream"


@pytest.mark.parametrize("default", ["oldest", "upcoming", "none"])
def test_reset_offset_on_a_partition_without_a_checkpoint_is_its_default(default):
    """Nothing to ignore: a reset of a first run (or of a partition never committed)
    starts where offset_default says, and is not reported as a reset."""
    from eos_runtime.protocol.positions import NoFallback, Start, choose_start

    if default == "none":
        with pytest.raises(NoFallback) as info:
            choose_start(checkpoint=None, checkpoint_run=None, run=0, reset=True,
                         default=default)
        assert info.value.reset is False
        return
    for run in (0, 3):
        assert choose_start(checkpoint=None, checkpoint_run=None, run=run, reset=True,
                            default=default) == Start(default, None, "default")


@pytest.mark.parametrize("kind", KINDS)
def test_a_first_run_with_reset_offset_reads_from_its_default(kind, tmp_path, request):
    opts = opts_for(kind, tmp_path, request)
    tag = uuid.uuid4().hex[:6]
    values = [f"r{i}".encode() for i in range(50)]
    with open_transport(**opts) as t:
        produce(t, f"in-{tag}", values)
    state = str(tmp_path / "state")
    run_pipeline(passthrough(f"up-{tag}", f"in-{tag}", f"up-out-{tag}", reset_offset=True,
                             offset_default="upcoming"), state_dir=state, **opts)
    assert output(opts, f"up-out-{tag}", f"up-{tag}") == Counter()
    run_pipeline(passthrough(f"old-{tag}", f"in-{tag}", f"old-out-{tag}", reset_offset=True),
                 state_dir=state, **opts)
    assert output(opts, f"old-out-{tag}", f"old-{tag}") == Counter(
        v.decode().upper() for v in values)


def no_fallback_re(source: str, partition: int, job: str, reset: bool = False) -> str:
    what = ("its checkpoint is ignored \\(reset_offset\\) and it has no Startpoint" if reset
            else "it has no checkpoint and no Startpoint")
    return (rf"^source {source}\[{partition}\]: {what}, and offset_default is 'none' \(no "
            rf"fallback\): give the source offset_default='oldest' or 'upcoming' \(eos run "
            rf"--offset-default oldest\|upcoming\), or the partition a Startpoint \(eos "
            rf"startpoint set {job} {source} {partition} --oldest\)$")


@pytest.mark.parametrize("kind", KINDS)
def test_offset_default_none_fails_before_processing_without_checkpoint_or_startpoint(
        kind, tmp_path, request):
    from eos_runtime.errors import ConfigError
    from eos_runtime.joblog.control import ControlLog
    from eos_runtime.joblog.startpoints import Startpoint, list_startpoints, set_startpoint

    opts = opts_for(kind, tmp_path, request)
    tag = uuid.uuid4().hex[:6]
    job, source, sink = f"none-{tag}", f"none-in-{tag}", f"none-out-{tag}"
    first = [f"a{i}".encode() for i in range(10)]     # a0, a2, .. in [0]; a1, a3, .. in [1]
    with open_transport(**opts) as t:
        produce(t, source, first)
    state = str(tmp_path / "state")
    strict = passthrough(job, source, sink, offset_default="none")
    with pytest.raises(ConfigError, match=no_fallback_re(source, 0, job)):
        run_pipeline(strict, state_dir=state, **opts)
    set_startpoint(job, source, 0, Startpoint.offset(2), **opts)   # [0] has one now, [1] not
    with pytest.raises(ConfigError, match=no_fallback_re(source, 1, job)):
        run_pipeline(strict, state_dir=state, **opts)
    with open_transport(**opts) as t:
        log = ControlLog(t, job)
        assert log.runs() == [] and log.lease()[0] == "free", "a refused run was recorded"
    # The run's option gives partition 1 its fallback; partition 0 follows its Startpoint.
    run_pipeline(strict, state_dir=state, offset_default="oldest", **opts)
    expected = Counter(v.decode().upper() for v in first[4::2] + first[1::2])   # a4..; a1..
    assert output(opts, sink, job) == expected
    assert list_startpoints(job, **opts) == {}
    # Checkpoints now: 'none' runs, from them; a reset without a fallback is refused.
    more = [f"b{i}".encode() for i in range(4)]
    with open_transport(**opts) as t:
        produce(t, source, more)
    with pytest.raises(ConfigError, match=no_fallback_re(source, 0, job, reset=True)):
        run_pipeline(strict, state_dir=state, reset_offset=True, **opts)
    run_pipeline(strict, state_dir=state, **opts)
    assert output(opts, sink, job) == expected + Counter(v.decode().upper() for v in more)


def test_upcoming_and_an_unreached_timestamp_start_at_the_end_the_run_started_with():
    """P5: the partition's end when the run started, not its end now; a timestamp whose
    first record arrived after the start starts there too (as it did in the first
    attempt, when no record had reached the timestamp yet)."""
    from eos_runtime.protocol.positions import Start, resolve

    up, ts = Start("upcoming", None, "default"), Start("timestamp", 1_000, "startpoint")
    assert resolve(up, 2, 10, upcoming=6) == 6
    assert resolve(up, 2, 10) == 10
    assert resolve(ts, 2, 10, at_timestamp=4, upcoming=6) == 4
    assert resolve(ts, 2, 10, at_timestamp=8, upcoming=6) == 6
    assert resolve(ts, 2, 10, at_timestamp=None, upcoming=6) == 6
    assert resolve(Start("oldest", None, "default"), 2, 10, upcoming=6) == 2
    assert resolve(Start("offset", 9, "checkpoint"), 2, 10, upcoming=6) == 9


@pytest.mark.parametrize("default", ["upcoming", "none"])
def test_a_checkpoint_store_without_a_partition_falls_back_to_the_change_logs_commit(
        default, tmp_path):
    """An at-least-once job's file store, empty where the next run looks (another
    --state-dir, a retry on another host): the change log's commit was ignored, so
    'upcoming' skipped what came since the last commit and 'none' refused a job that has
    a checkpoint. The store's positions are held to the commit (P3a), and a partition the
    store lacks starts from the commit."""
    opts = {"data_dir": str(tmp_path / "data")}
    tag = uuid.uuid4().hex[:6]
    first = [f"a{i}".encode() for i in range(40)]
    later = [f"b{i}".encode() for i in range(40)]
    with open_transport(**opts) as t:
        produce(t, f"in-{tag}", first)
    run_pipeline(passthrough(f"fs-{tag}", f"in-{tag}", f"out-{tag}"), guarantee="at-least-once",
                 checkpoints="filesystem", state_dir=str(tmp_path / "one"), **opts)
    with open_transport(**opts) as t:
        produce(t, f"in-{tag}", later)
    run_pipeline(passthrough(f"fs-{tag}", f"in-{tag}", f"out-{tag}", offset_default=default),
                 guarantee="at-least-once", checkpoints="filesystem",
                 state_dir=str(tmp_path / "elsewhere"), **opts)
    assert output(opts, f"out-{tag}", f"fs-{tag}") == Counter(
        v.decode().upper() for v in first + later)


def test_a_changed_layout_is_named_before_a_partition_without_a_checkpoint(tmp_path):
    """With offset_default none, the check for a start position ran before the layout's:
    a job rerun with another parallelism was told that a partition had no checkpoint and
    to set a Startpoint (which the layout check then refused), not what changed."""
    from eos_runtime.errors import ConfigError

    opts = {"data_dir": str(tmp_path / "data")}
    tag = uuid.uuid4().hex[:6]
    with open_transport(**opts) as t:
        produce(t, f"in-{tag}", [f"a{i}".encode() for i in range(20)])
    run_pipeline(passthrough(f"lay-{tag}", f"in-{tag}", f"out-{tag}"), **opts)
    with pytest.raises(ConfigError, match=rf"^job 'lay-{tag}' ran before \(run 0\) with "
                                          rf"another layout"):
        run_pipeline(passthrough(f"lay-{tag}", f"in-{tag}", f"out-{tag}",
                                 offset_default="none"), parallelism=1, **opts)
