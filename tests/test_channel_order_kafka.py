"""Checkpoints on a real broker, as a channel shows them and as the oracle judges them.

In every channel, each producer's data of version v + 1 comes after its marker of v:
what SEP-10's alignment reads, checked on the raw channel records of a wordcount run on
Kafka (a reordering there, such as a checkpoint that sent the next version's output
before its marker, fails it). And the committed output is exact under crashes at the
checkpoint steps on Kafka, where step 3 is a transaction's commit (tests/test_crashes.py
runs a fuller matrix on the local log).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from eos_runtime.joblog.committed import read_output, read_topic
from eos_runtime.plan import plan_job
from eos_runtime.protocol import wire
from eos_runtime.runner import run_pipeline
from eos_runtime.transport import open_transport

from pipeline_oracles import check_wordcount_exactly_once, encode_lines, produce, word_lines
from test_pipelines import fresh_pipeline

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

LINES = 3_000


def _run(tmp_path, bootstrap: str, faults=(), **options):
    pipeline, source, sink = fresh_pipeline("wordcount", tmp_path.name[-10:].replace("_", "-"))
    lines = word_lines(LINES)
    with open_transport(bootstrap_servers=bootstrap) as t:
        produce(t, source, encode_lines(lines))
    # checkpoints by count, never by timer: a crash point's hit means the same on a busy
    # machine
    summary = run_pipeline(pipeline, bootstrap_servers=bootstrap, commit_every=150,
                           commit_interval=1e9, poll_records=100,
                           state_dir=str(tmp_path / "state"), fault=list(faults), **options)
    with open_transport(bootstrap_servers=bootstrap) as t:
        check_wordcount_exactly_once(read_output(t, sink, job=pipeline.name), lines)
    return pipeline, summary


def _channel_order_violations(bootstrap: str, pipeline) -> tuple[list[str], int]:
    """In each channel, per producer and generation: every marker that follows data of a
    later version, and every data batch that follows a marker of its version or a later
    one; and how many markers were read."""
    with open_transport(bootstrap_servers=bootstrap) as t:
        topic = next(s for s in plan_job(pipeline, t).stages if not s.is_source).input_topic
        records = read_topic(t, topic, read_committed=False)   # by channel, in offset order
    bad: list[str] = []
    markers = 0
    latest: dict[tuple[int, int, int], int] = defaultdict(lambda: -1)   # data
    marked: dict[tuple[int, int, int], int] = defaultdict(lambda: -1)   # markers
    for r in records:
        msg = wire.decode_channel(r.value)
        if not isinstance(msg, (wire.DataBatch, wire.Envelope, wire.Marker)):
            continue
        stream = (r.partition, msg.producer_id, msg.generation)
        if isinstance(msg, wire.Marker):
            markers += 1
            if msg.version < latest[stream]:
                bad.append(f"channel {r.partition} offset {r.offset}: marker {msg.version} "
                           f"after data of version {latest[stream]}")
            marked[stream] = max(marked[stream], msg.version)
        else:
            if msg.version <= marked[stream]:
                bad.append(f"channel {r.partition} offset {r.offset}: data of version "
                           f"{msg.version} after marker {marked[stream]}")
            latest[stream] = max(latest[stream], msg.version)
    return bad, markers


def test_each_producers_next_version_follows_its_marker_in_every_channel(kafka_bootstrap,
                                                                        tmp_path):
    pipeline, _ = _run(tmp_path, kafka_bootstrap)
    bad, markers = _channel_order_violations(kafka_bootstrap, pipeline)
    # a checkpoint every 150 records, asked after each poll of 100: one every 200 records
    assert markers >= 2 * 2 * (LINES // 2 // 200), "each source's checkpoints, in each channel"
    assert bad == [], bad[:5]


# A crash after the transaction's commit (RocksDB not written), after RocksDB (no markers
# yet), and mid-version. Sources are tasks 0-1, the counting tasks 2-3; a channel task's
# mid-version hits need one message a record (channel_batch=1, as in run_by_count).
CASES = [("task.checkpoint.after_commit", 0, 3), ("task.checkpoint.after_store", 0, 2),
         ("task.checkpoint.after_commit", 2, 2), ("task.checkpoint.after_store", 3, 3),
         ("task.mid_version", 2, 12)]


@pytest.mark.parametrize("point,task,hit", CASES)
def test_a_crash_at_a_checkpoint_step_on_kafka_keeps_the_output_exact(point, task, hit,
                                                                     kafka_bootstrap,
                                                                     tmp_path):
    _, summary = _run(tmp_path, kafka_bootstrap,
                      [{"point": point, "task": task, "hit": hit, "attempt": 0}],
                      channel_batch=1)
    assert summary.tasks[task]["attempt"] == 1, "the crash point did not fire"
