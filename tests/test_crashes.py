"""Exactly-once under injected faults: a task's worker is SIGKILLed at a named crash point
(source, intermediate and sink tasks; each checkpoint step; mid marker fan-out; while
aligning with buffered early arrivals; during recovery), Spark retries it, it recovers
with a new generation, and the committed output still equals the oracle record by record.
At-least-once under the same crashes loses nothing from its committed view.

Every fault must fire on every run, so no test leaves the number of times a crash point
is reached to timing: sources checkpoint by record count only (``NO_TIMER``), and a
crash while aligning holds the other source back (``HOLD``)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from eos_runtime.joblog.committed import read_output
from eos_runtime.runner import run_pipeline, start_pipeline
from eos_runtime.runtime.progress import read_task_progress
from eos_runtime.transport import open_transport

from pipeline_oracles import (
    check_pageviews_exactly_once,
    check_wordcount_at_least_once,
    check_wordcount_exactly_once,
    encode_lines,
    encode_views,
    page_views,
    produce,
    word_lines,
)
from test_pipelines import fresh_pipeline

# wordcount, parallelism 2: tasks 0-1 read the source, tasks 2-3 count and write the sink.
SOURCE, SINK = 0, 2
# pageviews: tasks 0-1 source, 2-3 per-user (intermediate), 4-5 per-page (sink).
INTERMEDIATE = 2

# Each source reads 600 records in batches of at most 100 and checkpoints once 200 came
# in since its last checkpoint, and at the end of the run; never on a timer, whose
# checkpoints a slow machine takes at other places. So a source commits at least twice
# within its records and once more at the end, each channel task has at least two
# checkpoints (the first when both sources' first markers are in, the last at the run's
# end), and each task sees at least six batches: every hit below is reached.
# NO_TIMER: timer checkpoints fall on the multiples of the interval since the epoch (the
# commit grid); with 1e9 s the last was in 2001 and the next is in 2033.
RECORDS, POLL, COMMIT_EVERY, NO_TIMER = 1200, 100, 200, 1e9

# ``task.mid_version`` is reached once per poll that read something. A source's polls
# are of its own input; a channel task's are of the records its producers send, one data
# batch per channel and poll, which may all be in before its first poll. So where a
# channel task is to crash there at hit n, its producers send one message per record
# (``channel_batch=1``): every channel then holds hundreds of records, read at most POLL
# at a time, and the point is surely reached n times. The same holds for an at-least-once
# channel task's checkpoints: its commit timer (COMMIT_EVERY messages) is asked once per
# poll, so it checkpoints at most once per poll.
SOURCES = (0, 1)

# ``task.aligning`` is reached by a marker after which the task still waits for another
# producer's. With both sources running, their markers may leapfrog, each completing the
# alignment the other's began: then the point is reached once in the whole run. So while
# a task is to crash there, source 1 is frozen (SIGSTOP) at its recovery, before it has
# sent anything, until that crash happened: every marker of source 0 (at least three,
# see above) then comes while source 1's is missing.
HOLD = {"point": "task.recovery", "task": 1, "hit": 1, "attempt": 0, "action": "stop"}

WORDCOUNT_CASES = [
    ("task.mid_version", SOURCE, 2),
    ("task.checkpoint.after_output_flush", SOURCE, 2),
    ("task.checkpoint.before_commit", SOURCE, 2),
    ("task.checkpoint.after_commit", SOURCE, 2),
    ("task.checkpoint.after_store", SOURCE, 2),
    ("task.checkpoint.mid_marker_fanout", SOURCE, 2),
    ("task.recovery", SOURCE, 1),
    ("task.mid_version", SINK, 3),
    ("task.aligning", SINK, 3),
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
    ("task.aligning", INTERMEDIATE, 3),
    ("task.checkpoint.after_commit", INTERMEDIATE, 2),
    ("task.checkpoint.after_store", INTERMEDIATE, 2),
    ("task.checkpoint.mid_marker_fanout", INTERMEDIATE, 2),
    ("task.recovery", INTERMEDIATE, 1),
]


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def _pid_and_attempt(pid_file: Path) -> tuple[int, int] | None:
    try:
        pid, attempt = map(int, pid_file.read_text().split())
    except (OSError, ValueError):   # not there yet, or caught half written
        return None
    return pid, attempt


def _overflowed(job_dir: Path) -> bool:
    """Whether some task's progress file (rewritten every half second) counts an overflow."""
    return any((read_task_progress(f) or {}).get("overflowed", 0) > 0
               for f in job_dir.glob("task-*.progress"))


def _release_when_crashed(run, job_dir: Path, crashing: int, start_wait: float = 240.0,
                          wait: float = 120.0, or_overflowed: bool = False) -> None:
    """Wake the held source once ``crashing``'s first attempt died (its retry wrote its
    pid file), or with ``or_overflowed`` once some task overflowed its buffer: a crash at
    a checkpoint of a task downstream of the held source cannot come before the held
    source's markers, and waiting for it only ran out the clock. If neither happens
    within ``wait`` seconds of the held source being seen stopped (Spark's start, which a
    busy machine can make slow, counts against ``start_wait`` instead), the run is let go
    anyway: the test's own checks then report what did not happen."""
    held_file = job_dir / f"task-{HOLD['task']}.pid"
    retry_file = job_dir / f"task-{crashing}.pid"
    held = None
    deadline = time.monotonic() + start_wait
    try:
        while time.monotonic() < deadline and not run.wait(0.05):
            if held is None:
                found = _pid_and_attempt(held_file)
                held = found[0] if found and _stopped(found[0]) else None
                if held is not None:   # the crash's clock starts now
                    deadline = time.monotonic() + wait
            retry = _pid_and_attempt(retry_file)
            if held is not None and retry is not None and retry[1] >= 1:
                return
            if held is not None and or_overflowed and _overflowed(job_dir):
                return
        if held is None:
            raise AssertionError(f"source task {HOLD['task']} never reached its hold point")
    finally:
        if held is not None:
            os.kill(held, signal.SIGCONT)


def run_job(name, tmp_path, faults, guarantee="exactly-once", hold_until=None, **options):
    """Run the example once with ``faults``; returns its input, its committed output (the
    view ``eos consume --job`` shows) and the run's summary."""
    opts = {"data_dir": str(tmp_path / "data")}
    suffix = tmp_path.name[-10:].replace("_", "-")
    pipeline, source, sink = fresh_pipeline(name, suffix)
    data = word_lines(RECORDS) if name == "wordcount" else page_views(RECORDS)
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(data) if name == "wordcount" else encode_views(data))
    aligning = [f["task"] for f in faults if f["point"] == "task.aligning"]
    if hold_until is not None:   # hold source 1 until this task's first attempt died
        aligning.append(hold_until)
    assert all(f["task"] != HOLD["task"] for f in faults) or not aligning
    if any(f["task"] not in SOURCES and (f["point"] == "task.mid_version" or (
            guarantee == "at-least-once" and f["point"].startswith("task.checkpoint")))
           for f in faults):
        options = {"channel_batch": 1, **options}   # see SOURCES
    state = tmp_path / "state"
    run = start_pipeline(pipeline, guarantee=guarantee, commit_every=COMMIT_EVERY,
                         commit_interval=NO_TIMER, poll_records=POLL, state_dir=str(state),
                         fault=faults + [HOLD] if aligning else faults, **options, **opts)
    try:
        if aligning:
            _release_when_crashed(run, state / pipeline.name, aligning[0],
                                  or_overflowed=options.get("buffer_max_bytes") == 1)
        summary = run.summary()
    except BaseException:
        run.cancel()
        run.wait()
        raise
    finally:
        run.close()
    with open_transport(**opts) as t:
        return data, read_output(t, sink, job=pipeline.name), summary


def run_crashing(name, tmp_path, point, task, hit, guarantee="exactly-once"):
    data, records, summary = run_job(
        name, tmp_path, [{"point": point, "task": task, "hit": hit, "attempt": 0}], guarantee)
    return data, records, summary.tasks[task], summary


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


# Crashes of the intermediate and sink stages while their one-byte buffers overflow: every
# early arrival is skipped and read again (aligner R8) while tasks die and rewind. Source 1
# is held (as for task.aligning) until the crash happened, so source 0's output past its
# first checkpoint surely arrives early: the overflow path surely runs.
OVERFLOW_CASES = [
    ("task.mid_version", INTERMEDIATE, 3),
    ("task.checkpoint.after_commit", INTERMEDIATE, 2),
    ("task.checkpoint.mid_marker_fanout", INTERMEDIATE, 2),
    ("task.mid_version", 4, 3),
    ("task.checkpoint.after_store", 4, 2),
]


@pytest.mark.slow
@pytest.mark.parametrize("point,task,hit", OVERFLOW_CASES)
def test_three_stages_exactly_once_survive_a_crash_while_buffers_overflow(point, task, hit,
                                                                          tmp_path):
    views, records, summary = run_job(
        "pageviews", tmp_path, [{"point": point, "task": task, "hit": hit, "attempt": 0}],
        hold_until=task, buffer_max_bytes=1)
    assert summary.tasks[task]["attempt"] == 1, "the crash point did not fire"
    assert sum(t["overflowed"] for t in summary.tasks) > 0, "nothing overflowed"
    check_pageviews_exactly_once(records, views)


@pytest.mark.slow
@pytest.mark.parametrize("point,task", [("task.checkpoint.before_commit", SINK),
                                        ("task.mid_version", SOURCE)])
def test_at_least_once_loses_nothing_under_a_crash(point, task, tmp_path):
    lines, records, crashed, _ = run_crashing("wordcount", tmp_path, point, task, 2,
                                              guarantee="at-least-once")
    assert crashed["attempt"] == 1, "the crash point did not fire"
    duplicates = check_wordcount_at_least_once(records, lines)
    # The dead attempt had written output past its last commit (the sink its second
    # checkpoint's, the source its first two batches) and its retry did that work again:
    # the committed view shows both, as a read_committed reader on Kafka would.
    assert duplicates > 0, "the dead attempt's output is missing from the committed view"


@pytest.mark.slow
def test_sigkill_of_a_sink_worker_from_outside(tmp_path):
    """Not a crash point: the test SIGKILLs the Python worker running task 2 while it runs."""
    import threading

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


@pytest.mark.slow
@pytest.mark.parametrize("case,faults", [
    # the source dies mid version; the sink, rewinding on its restore, dies there too
    ("crash while rewinding", [
        {"point": "task.mid_version", "task": SOURCE, "hit": 2},
        {"point": "task.rewind", "task": SINK, "hit": 1}]),
    # a second crash of the same task during its recovery
    ("second crash during recovery", [
        {"point": "task.mid_version", "task": SOURCE, "hit": 2},
        {"point": "task.recovery", "task": SOURCE, "hit": 1, "attempt": 1}]),
    # both producers of the sinks' channels restart, one after the other
    ("two producers restarting in turn", [
        {"point": "task.mid_version", "task": 0, "hit": 2},
        {"point": "task.mid_version", "task": 1, "hit": 5}]),
    # upstream and downstream crash in the same run: the sink's second aligning hit is
    # the source's first marker again, re-sent by its retry (source 1 is held, HOLD)
    ("upstream and downstream together", [
        {"point": "task.checkpoint.before_commit", "task": SOURCE, "hit": 2},
        {"point": "task.aligning", "task": SINK, "hit": 2}]),
])
def test_wordcount_exactly_once_survives_several_faults(case, faults, tmp_path):
    lines, records, summary = run_job("wordcount", tmp_path, faults)
    for f in faults:
        assert summary.tasks[f["task"]]["attempt"] >= f.get("attempt", 0) + 1, f"{f} did not fire"
    check_wordcount_exactly_once(records, lines)


@pytest.mark.slow
def test_three_stages_survive_intermediate_and_sink_crashing_together(tmp_path):
    views, records, summary = run_job("pageviews", tmp_path, [
        {"point": "task.mid_version", "task": INTERMEDIATE, "hit": 3},
        {"point": "task.checkpoint.after_commit", "task": 4, "hit": 2},
        {"point": "task.mid_version", "task": 1, "hit": 2}])
    assert [summary.tasks[t]["attempt"] for t in (INTERMEDIATE, 4, 1)] == [1, 1, 1]
    check_pageviews_exactly_once(records, views)


@pytest.mark.slow
def test_a_lost_local_store_is_rebuilt_from_the_change_log(tmp_path):
    """The sink task dies after its second checkpoint and its RocksDB directory is gone
    (the retry runs on another host): the retry rebuilds the state from the change log."""
    import shutil
    import subprocess
    import sys

    import cloudpickle

    from eos_runtime.plan import plan_job
    from eos_runtime.runner import create_job_topics, task_configs
    from eos_runtime.runtime.task import run_task

    state = tmp_path / "state"
    opts = {"data_dir": str(tmp_path / "data")}
    pipeline, source, sink = fresh_pipeline("wordcount", "lost")
    lines = word_lines(1200)
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(lines))
        plan = plan_job(pipeline, t, commit_every=200)
        create_job_topics(t, plan)
        configs = task_configs(plan, t, opts, str(state), poll_records=100)
    for c in configs[:2]:
        run_task(c)  # the sources, to their end
    sink_cfg = configs[SINK]
    sink_cfg.fault = {"point": "task.checkpoint.after_store", "task": SINK, "hit": 2}
    payload = tmp_path / "sink.pickle"
    payload.write_bytes(cloudpickle.dumps(sink_cfg))
    dead = subprocess.run([sys.executable, "-c",
                           "import sys\nfrom eos_runtime.runtime.task import run_task_payload\n"
                           "run_task_payload(open(sys.argv[1], 'rb').read(), 0)\n", str(payload)])
    assert dead.returncode == -9
    shutil.rmtree(state / pipeline.name / f"task-{SINK}")
    sink_cfg.fault = None
    stats = run_task(sink_cfg, attempt=1)
    assert stats.restored_version == 2 and stats.replayed_changes > 0
    run_task(configs[3])
    with open_transport(**opts) as t:
        check_wordcount_exactly_once(read_output(t, sink, job=pipeline.name), lines)
