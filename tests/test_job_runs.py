"""A job runs many times: bounded runs one after another, unbounded runs stopped
gracefully, runs whose driver died. Each continues from the last one's checkpoints, and
the committed output over all runs equals the oracle over all input, record by record."""

from __future__ import annotations

import time

import pytest

from eos_runtime.errors import ConfigError
from eos_runtime.joblog.committed import read_output
from eos_runtime.joblog.control import ControlLog
from eos_runtime.runner import run_pipeline, start_pipeline
from eos_runtime.transport import open_transport

from pipeline_oracles import (
    check_wordcount_at_least_once,
    check_wordcount_exactly_once,
    encode_lines,
    produce,
    word_lines,
)
from test_pipelines import KINDS, fresh_pipeline, transport_opts


def output(opts, pipeline):
    with open_transport(**opts) as t:
        return read_output(t, pipeline.sink_topic, job=pipeline.name)


def wait_for_output(opts, pipeline, records: int, run, timeout: float = 120.0) -> None:
    """Until the committed output holds ``records`` records (the run keeps running)."""
    deadline = time.monotonic() + timeout
    while len(output(opts, pipeline)) < records:
        assert not run.wait(0), "the run ended before it was stopped"
        assert time.monotonic() < deadline, f"no {records} committed records after {timeout}s"
        time.sleep(0.3)


def words(lines):
    return sum(len(line.split()) for line in lines)


@pytest.mark.parametrize("kind", KINDS)
def test_a_job_continues_across_bounded_runs(kind, tmp_path, request):
    opts = transport_opts(kind, tmp_path, request)
    pipeline, source, _ = fresh_pipeline("wordcount", f"runs-{kind}")
    first, second = word_lines(300, seed=1), word_lines(200, seed=2)
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(first))
    s1 = run_pipeline(pipeline, **opts)
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(second))
    s2 = run_pipeline(pipeline, **opts)
    assert (s1.run, s2.run) == (0, 1)
    assert (s1.input_records, s2.input_records) == (300, 200)
    check_wordcount_exactly_once(output(opts, pipeline), first + second)
    s3 = run_pipeline(pipeline, **opts)            # nothing new: a run that reads nothing
    assert s3.run == 2 and s3.input_records == 0
    check_wordcount_exactly_once(output(opts, pipeline), first + second)


def test_an_unbounded_run_reads_new_input_until_stopped_then_the_next_run_goes_on(tmp_path):
    opts = {"data_dir": str(tmp_path / "data")}
    pipeline, source, _ = fresh_pipeline("wordcount", "unbounded")
    a, b, c = word_lines(150, seed=3), word_lines(150, seed=4), word_lines(100, seed=5)
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(a))
    run = start_pipeline(pipeline, bounded=False, commit_interval=0.3, **opts)
    try:
        wait_for_output(opts, pipeline, words(a), run)
        with open_transport(**opts) as t:
            produce(t, source, encode_lines(b))        # arrives while the run goes on
        wait_for_output(opts, pipeline, words(a + b), run)
        assert run.progress()["source_new_records"] == len(b)
        run.stop("test")
        summary = run.summary()
    finally:
        run.cancel()
        run.wait()
        run.close()
    assert summary.stopped and not summary.bounded and summary.input_records == len(a + b)
    check_wordcount_exactly_once(output(opts, pipeline), a + b)
    with open_transport(**opts) as t:
        assert ControlLog(t, pipeline.name).last_run().stopped.reason == "test"
        produce(t, source, encode_lines(c))
    assert run_pipeline(pipeline, **opts).run == 1
    check_wordcount_exactly_once(output(opts, pipeline), a + b + c)


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_a_run_cancelled_without_final_checkpoints_is_continued(guarantee, tmp_path):
    """The driver dies: no run-end checkpoints, tasks stop anywhere inside the run. The next
    run's versions are above all of them; exactly-once output is still exact."""
    opts = {"data_dir": str(tmp_path / "data")}
    pipeline, source, _ = fresh_pipeline("wordcount", f"cancel-{guarantee[:2]}")
    a, b = word_lines(300, seed=6), word_lines(200, seed=7)
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(a))
    run = start_pipeline(pipeline, bounded=False, commit_interval=0.2, guarantee=guarantee, **opts)
    try:
        wait_for_output(opts, pipeline, words(a) // 2, run)
    finally:
        run.cancel()
        run.wait()
        run.close()
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(b))
    summary = run_pipeline(pipeline, guarantee=guarantee, **opts)
    assert summary.run == 1
    if guarantee == "exactly-once":
        check_wordcount_exactly_once(output(opts, pipeline), a + b)
    else:
        check_wordcount_at_least_once(output(opts, pipeline), a + b)


def test_a_crash_in_a_continued_run_keeps_exactly_once(tmp_path):
    opts = {"data_dir": str(tmp_path / "data")}
    pipeline, source, _ = fresh_pipeline("wordcount", "crash-again")
    a, b = word_lines(300, seed=8), word_lines(300, seed=9)
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(a))
    run_pipeline(pipeline, **opts)
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(b))
    faults = [{"point": "task.checkpoint.before_commit", "task": 2, "hit": 2},
              {"point": "task.mid_version", "task": 0, "hit": 2}]
    summary = run_pipeline(pipeline, commit_every=100, fault=faults, **opts)
    assert {t["task_id"]: t["attempt"] for t in summary.tasks}[2] == 1
    check_wordcount_exactly_once(output(opts, pipeline), a + b)


def test_a_job_whose_layout_changed_is_refused_before_anything_starts(tmp_path):
    opts = {"data_dir": str(tmp_path / "data")}
    pipeline, source, _ = fresh_pipeline("wordcount", "layout")
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(word_lines(20)))
    run_pipeline(pipeline, **opts)
    with pytest.raises(ConfigError, match=r"another layout(.|\n)*now:(.|\n)*tasks 1, stores"
                                          r"(.|\n)*new name"):
        run_pipeline(pipeline, parallelism=1, **opts)
    with pytest.raises(ConfigError, match="guarantee at-least-once"):
        run_pipeline(pipeline, guarantee="at-least-once", **opts)
    with open_transport(**opts) as t:       # the refused runs left no trace
        assert ControlLog(t, pipeline.name).last_run().start.run == 0
