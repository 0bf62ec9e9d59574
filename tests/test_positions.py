"""Where sources start: offset_default without a checkpoint, reset_offset ignoring an
earlier run's checkpoint (never a retry's own), on both transports, checked record by
record against what the source was told to read."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from eos_runtime import Pipeline
from eos_runtime.runner import run_pipeline
from eos_runtime.runtime.committed import read_output
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
