"""The figures ``eos run`` shows, on a real broker (issue 27 item 10): records read and
committed by the sources, records committed to the sink. Each counts what it says: a
transaction's commit marker takes an offset in the sink but is no record, and a frame
never shows more committed than read. The last frame (``watch_run`` gives one after the
run ended) and the summary are exact."""

from __future__ import annotations

import json
import uuid

import pytest

from eos_runtime import Pipeline
from eos_runtime.runner import run_pipeline
from eos_runtime.transport import open_transport

from pipeline_oracles import produce
from test_cli import ok_here

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

COUNT = 3_000


def test_progress_and_summary_count_records_not_offsets(kafka_bootstrap, tmp_path):
    tag = uuid.uuid4().hex[:8]
    source, sink = f"in-{tag}", f"out-{tag}"
    with open_transport(bootstrap_servers=kafka_bootstrap) as t:
        produce(t, source, [f"line {i}".encode() for i in range(COUNT)])
    pipeline = Pipeline(f"progress-{tag}")
    pipeline.source(source).map(str.upper).sink(sink)
    frames: list[dict] = []
    # a checkpoint every 500 records: several transactions, so several commit markers
    summary = run_pipeline(pipeline, bootstrap_servers=kafka_bootstrap, commit_every=500,
                           state_dir=str(tmp_path / "state"), on_progress=frames.append,
                           progress_interval=0.1)
    assert summary.input_records == COUNT
    assert summary.sink_records == COUNT
    as_json = summary.as_dict()
    assert (as_json["input_read"], as_json["sink_records"]) == (COUNT, COUNT)
    for p in frames:
        if p.get("input_read") is not None:
            assert p["input_read"] >= p["input_committed"], p
    last = frames[-1]
    assert last["final"] is True
    assert (last["input_read"], last["input_committed"], last["input_total"],
            last["sink_records"]) == (COUNT, COUNT, COUNT, COUNT)
    with open_transport(bootstrap_servers=kafka_bootstrap) as t:
        from eos_runtime.transport import TopicPartition

        offsets = sum(t.watermarks(TopicPartition(sink, p))[1] for p in range(1))
    assert offsets > COUNT   # the markers: what the old figure counted as records


def test_eos_run_says_what_it_read_committed_and_wrote(kafka_bootstrap, tmp_path):
    tag = uuid.uuid4().hex[:8]
    path = tmp_path / "upper.py"
    path.write_text("from eos_runtime import Pipeline\n\n"
                    f"pipeline = Pipeline('upper-{tag}')\n"
                    f"pipeline.source('in-{tag}').map(str.upper).sink('out-{tag}')\n")
    with open_transport(bootstrap_servers=kafka_bootstrap) as t:
        produce(t, f"in-{tag}", [f"line {i}".encode() for i in range(COUNT)])
    env = {"EOS_BOOTSTRAP_SERVERS": kafka_bootstrap}
    summary = json.loads(ok_here("run", str(path), "--commit-every", "500", "--json",
                                 "--state-dir", str(tmp_path / "state"), env=env).stdout)
    assert (summary["input_records"], summary["input_read"], summary["sink_records"]) == \
        (COUNT, COUNT, COUNT)
    text = ok_here("run", str(path), "--state-dir", str(tmp_path / "state"), env=env).stdout
    assert "input 0 read, 0 committed; sink 0 records committed" in text, text
