"""Exactly-once under injected faults: a task's worker is SIGKILLed at a named crash point
(source, intermediate and sink tasks; each checkpoint step; mid marker fan-out; while
aligning with buffered early arrivals; during recovery), Spark retries it, it recovers
with a new generation, and the committed output still equals the oracle record by record.
At-least-once under the same crashes loses nothing."""

from __future__ import annotations

import pytest

from eos_runtime.runner import run_pipeline
from eos_runtime.runtime.committed import read_output
from eos_runtime.transport import open_transport

from pipeline_oracles import (
    check_pageviews_exactly_once, check_wordcount_at_least_once, check_wordcount_exactly_once,
    encode_lines, encode_views, page_views, produce, word_lines,
)
from test_pipelines import fresh_pipeline

# wordcount, parallelism 2: tasks 0-1 read the source, tasks 2-3 count and write the sink.
SOURCE, SINK = 0, 2
# pageviews: tasks 0-1 source, 2-3 per-user (intermediate), 4-5 per-page (sink).
INTERMEDIATE = 2

WORDCOUNT_CASES = [
    ("task.mid_version", SOURCE, 2),
    ("task.checkpoint.after_output_flush", SOURCE, 2),
    ("task.checkpoint.before_commit", SOURCE, 2),
    ("task.checkpoint.after_commit", SOURCE, 2),
    ("task.checkpoint.after_store", SOURCE, 2),
    ("task.checkpoint.mid_marker_fanout", SOURCE, 2),
    ("task.recovery", SOURCE, 1),
    ("task.mid_version", SINK, 3),
    ("task.aligning", SINK, 1),
    ("task.checkpoint.after_output_flush", SINK, 2),
    ("task.checkpoint.before_commit", SINK, 2),
    ("task.checkpoint.after_commit", SINK, 2),
    ("task.checkpoint.after_store", SINK, 2),
]

# Crashes after which a source's uncommitted output is already downstream.
SENT_BEFORE_COMMIT = {"task.mid_version", "task.checkpoint.after_output_flush",
                      "task.checkpoint.before_commit"}

PAGEVIEW_CASES = [
    ("task.mid_version", INTERMEDIATE, 3),
    ("task.aligning", INTERMEDIATE, 1),
    ("task.checkpoint.after_commit", INTERMEDIATE, 2),
    ("task.checkpoint.after_store", INTERMEDIATE, 2),
    ("task.checkpoint.mid_marker_fanout", INTERMEDIATE, 2),
    ("task.recovery", INTERMEDIATE, 1),
]


def run_crashing(name, tmp_path, point, task, hit, guarantee="exactly-once", n=1200):
    opts = {"data_dir": str(tmp_path / "data")}
    suffix = tmp_path.name[-10:].replace("_", "-")
    pipeline, source, sink = fresh_pipeline(name, suffix)
    data = word_lines(n) if name == "wordcount" else page_views(n)
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(data) if name == "wordcount" else encode_views(data))
    summary = run_pipeline(pipeline, guarantee=guarantee, commit_every=200, poll_records=100,
                           state_dir=str(tmp_path / "state"), **opts,
                           fault={"point": point, "task": task, "hit": hit, "attempt": 0})
    crashed = summary.tasks[task]
    with open_transport(**opts) as t:
        committed = guarantee == "exactly-once"
        records = read_output(t, sink, job=pipeline.name, committed=committed)
    return data, records, crashed, summary


@pytest.mark.slow
@pytest.mark.parametrize("point,task,hit", WORDCOUNT_CASES)
def test_wordcount_exactly_once_survives_a_crash(point, task, hit, tmp_path):
    lines, records, crashed, summary = run_crashing("wordcount", tmp_path, point, task, hit)
    assert crashed["attempt"] == 1, "the crash point did not fire"
    assert crashed["generation"] >= 2
    if task == SOURCE and point in SENT_BEFORE_COMMIT:
        # the dead attempt's output reached the sinks and had to be fenced there
        assert sum(summary.tasks[t]["fenced"] for t in (2, 3)) > 0
    check_wordcount_exactly_once(records, lines)


@pytest.mark.slow
@pytest.mark.parametrize("point,task,hit", PAGEVIEW_CASES)
def test_three_stages_exactly_once_survive_a_crash(point, task, hit, tmp_path):
    views, records, crashed, summary = run_crashing("pageviews", tmp_path, point, task, hit)
    assert crashed["attempt"] == 1, "the crash point did not fire"
    check_pageviews_exactly_once(records, views)


@pytest.mark.slow
@pytest.mark.parametrize("point,task", [("task.checkpoint.before_commit", SINK),
                                        ("task.mid_version", SOURCE)])
def test_at_least_once_loses_nothing_under_a_crash(point, task, tmp_path):
    lines, records, crashed, _ = run_crashing("wordcount", tmp_path, point, task, 2,
                                              guarantee="at-least-once")
    assert crashed["attempt"] == 1
    check_wordcount_at_least_once(records, lines)


@pytest.mark.slow
def test_sigkill_of_a_sink_worker_from_outside(tmp_path):
    """Not a crash point: the test SIGKILLs the Python worker running task 2 while it runs."""
    import os
    import signal
    import threading
    import time
    from pathlib import Path

    from eos_runtime.transport import TopicPartition

    opts = {"data_dir": str(tmp_path / "data")}
    pipeline, source, sink = fresh_pipeline("wordcount", "sigkill")
    lines = word_lines(6000)
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(lines))
    result = {}

    def run():
        result["summary"] = run_pipeline(pipeline, commit_every=200, poll_records=50,
                                         state_dir=str(tmp_path / "state"), **opts)

    runner = threading.Thread(target=run)
    runner.start()
    pid_file = Path(tmp_path / "state" / pipeline.name / f"task-{SINK}.pid")
    killed = None
    with open_transport(**opts) as t:
        deadline = time.monotonic() + 120
        while killed is None and time.monotonic() < deadline and runner.is_alive():
            if pid_file.exists() and sink in t.list_topics() and any(
                    t.watermarks(TopicPartition(sink, p))[1] > 0
                    for p in range(t.describe(sink).partitions)):
                pid, attempt = map(int, pid_file.read_text().split())
                if attempt == 0:
                    os.kill(pid, signal.SIGKILL)
                    killed = pid
            time.sleep(0.02)
    runner.join(timeout=300)
    assert killed is not None, "the run ended before the worker could be killed"
    assert result["summary"].tasks[SINK]["attempt"] == 1
    with open_transport(**opts) as t:
        check_wordcount_exactly_once(read_output(t, sink, job=pipeline.name), lines)
