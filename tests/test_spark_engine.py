"""The Spark engine on real Spark in local mode (no mocks).

The task functions live at module level on purpose: cloudpickle ships them *by
reference*, so the workers must import this test module. That only works because the
engine gives local workers the driver's extra sys.path entries (pytest's tests/ dir).

The first test pays the JVM start (seconds); later ones reuse the JVM (~0.2 s a job).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eos_runtime.engine import (
    EngineConfig,
    EngineError,
    JobCancelled,
    TaskAttempt,
    available_slots,
    run_tasks,
    start_tasks,
)
from eos_runtime.errors import ConfigError, SetupError
from eos_runtime.processes import alive

from task_files import touch, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

WAIT = 60.0  # a task waiting for its peers gives up after this (a deadlock fails, not hangs)


def _wait_for(paths: list[Path], what: str) -> None:
    wait_for(paths, what, WAIT)



def _answer(task: TaskAttempt) -> bytes:
    return json.dumps({"index": task.index, "attempt": task.attempt, "pid": os.getpid(),
                       "python": sys.executable, "prefix": sys.prefix}).encode()


def rendezvous_task(task: TaskAttempt) -> bytes:
    """Every task announces itself, then waits for all: deadlocks unless concurrent."""
    cfg = json.loads(task.payload)
    d = Path(cfg["dir"])
    touch(d / f"ready-{task.index}")
    _wait_for([d / f"ready-{i}" for i in range(cfg["n"])], f"task {task.index}")
    time.sleep(cfg.get("linger", 0))
    return _answer(task)


def preload_task(task: TaskAttempt) -> bytes:
    """What the worker had imported before its task ran, and its parent's threads."""
    loaded = [m for m in ("eos_runtime.runtime.task", "rocksdict", "confluent_kafka")
              if m in sys.modules]
    parent = os.getppid()
    # the daemon's own module stays __main__ in the worker it forked
    daemon = sys.modules["__main__"]
    before_fork = getattr(daemon, "imported", frozenset())
    from pyspark import SparkFiles
    return json.dumps({"loaded": loaded,
                       "files_dir_before_fork":
                           SparkFiles.getRootDirectory() in getattr(daemon, "path", ()),
                       "before_fork": sorted({"pyspark.worker", "eos_runtime.runtime.task",
                                              "eos_runtime.engine.daemon"} & before_fork),
                       "driver_side": sorted({"eos_runtime.runner", "eos_runtime.cli",
                                              "eos_runtime.run_start"} & before_fork),
                       "pyspark_from": sys.modules["pyspark.worker"].__file__,
                       "py4j_from": sys.modules["py4j"].__file__,
                       "parent": Path(f"/proc/{parent}/cmdline").read_bytes().decode(),
                       "parent_threads": len(os.listdir(f"/proc/{parent}/task"))}).encode()


def sigkill_task(task: TaskAttempt) -> bytes:
    """Task `victim` SIGKILLs its worker on attempt 0 while its peers run; the peers
    return only after the victim's retry is up, so they live through the crash."""
    cfg = json.loads(task.payload)
    d, n, victim = Path(cfg["dir"]), cfg["n"], cfg["victim"]
    touch(d / f"started-{task.index}-{task.attempt}", str(os.getpid()))
    if task.index == victim:
        if task.attempt == 0:
            _wait_for([d / f"started-{i}-0" for i in range(n)], "victim")
            os.kill(os.getpid(), signal.SIGKILL)
        return _answer(task)
    _wait_for([d / f"started-{victim}-1"], f"task {task.index}")
    return _answer(task)


def failing_task(task: TaskAttempt) -> bytes:
    cfg = json.loads(task.payload)
    d = Path(cfg["dir"])
    touch(d / f"attempt-{task.index}-{task.attempt}")
    if task.index == cfg["bad"]:
        if cfg["how"] == "raise":
            raise ValueError("boom")
        os.kill(os.getpid(), signal.SIGKILL)
    return _answer(task)


def sleeping_task(task: TaskAttempt) -> bytes:
    cfg = json.loads(task.payload)
    touch(Path(cfg["dir"]) / f"pid-{task.index}", str(os.getpid()))
    time.sleep(3600)
    return b"never"


def _payloads(n: int, **cfg) -> list[bytes]:
    return [json.dumps({"n": n, **cfg}).encode() for _ in range(n)]


# --------------------------------------------------------------------------- tests

def test_tasks_run_concurrently_in_order_on_the_project_python(tmp_path: Path) -> None:
    polls: list[float] = []
    started: list[float] = []
    t0 = time.monotonic()
    out = run_tasks(rendezvous_task, _payloads(3, dir=str(tmp_path), linger=1.0),
                    EngineConfig(), on_start=lambda: started.append(time.monotonic()),
                    poll=lambda: polls.append(time.monotonic()), poll_interval=0.2)
    took = time.monotonic() - t0
    results = [json.loads(b) for b in out]
    assert [r["index"] for r in results] == [0, 1, 2]          # in task order
    assert [r["attempt"] for r in results] == [0, 0, 0]
    assert len({r["pid"] for r in results}) == 3               # one Python worker each
    for r in results:                                          # check 5: the venv's Python
        assert r["python"] == sys.executable
        assert r["prefix"] == sys.prefix
    assert len(started) == 1
    assert len(polls) >= 3, f"poll ran {len(polls)} times in {took:.1f} s"
    print(f"3 concurrent tasks, Spark start included: {took:.1f} s")


def test_sigkilled_worker_is_retried_on_a_fresh_worker(tmp_path: Path) -> None:
    job = start_tasks(sigkill_task, _payloads(3, dir=str(tmp_path), victim=1),
                      EngineConfig(max_attempts=2))
    results = [json.loads(b) for b in job.result(timeout=120)]
    assert [r["index"] for r in results] == [0, 1, 2]
    assert [r["attempt"] for r in results] == [0, 1, 0]        # only the victim restarted
    killed = int((tmp_path / "started-1-0").read_text())
    assert results[1]["pid"] != killed and not alive(killed)  # a new worker process
    for i in (0, 2):                                           # peers kept their worker
        assert results[i]["pid"] == int((tmp_path / f"started-{i}-0").read_text())
        assert not (tmp_path / f"started-{i}-1").exists()
    status = job.status()
    assert (status.state, status.finished, status.failed_attempts) == ("succeeded", 3, 1)
    print(f"Spark start (JVM already up): {job.startup_seconds:.2f} s")


def jvm_task(task: TaskAttempt) -> bytes:
    """The command line of the JVM this worker runs under (its nearest java ancestor)."""
    pid = os.getppid()
    while pid > 1:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if cmd[0].endswith(b"java"):
            return json.dumps([c.decode() for c in cmd]).encode()
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return b"[]"


def test_a_local_jobs_jvm_runs_c1_only_with_the_serial_collector() -> None:
    """A local job's JVM only schedules tasks and relays a few bytes each; its C2 compiles
    and parallel collectors were a quarter of a short job's CPU (docs/engine.md)."""
    args = json.loads(run_tasks(jvm_task, _payloads(1), EngineConfig())[0])
    assert "-XX:TieredStopAtLevel=1" in args and "-XX:+UseSerialGC" in args


@pytest.mark.timeout(420)
def test_a_job_returns_without_waiting_for_pysparks_accumulator_server(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """pyspark's ``SparkContext.stop`` waits for its accumulator server's thread, which
    polls its connection once a second: up to a second at the end of every job, for a
    server no runtime task uses (docs/engine.md). Here the server's stop is held until
    the job has returned; a job that waited for it would not return."""
    import threading

    from pyspark import accumulators

    release, stopping = threading.Event(), threading.Event()
    servers = [accumulators.AccumulatorTCPServer, accumulators.AccumulatorUnixServer]
    for cls in servers:
        original = cls.shutdown

        def held(self, original=original) -> None:
            stopping.set()
            release.wait(600)
            original(self)
        monkeypatch.setattr(cls, "shutdown", held)
    done: list[bytes] = []
    job = threading.Thread(target=lambda: done.extend(run_tasks(_answer, _payloads(1),
                                                                EngineConfig())))
    job.start()
    try:
        job.join(300)   # a job takes seconds: 300 s is a job blocked on the held stop
        assert done, "the job waited for the accumulator server's stop"
        assert stopping.wait(30), "the accumulator server was never stopped"
    finally:
        release.set()
        job.join(60)


def test_a_users_driver_java_options_replace_the_local_defaults() -> None:
    from eos_runtime.engine.cluster import _plan, _spark_conf

    mine = EngineConfig(conf={"spark.driver.extraJavaOptions": "-Dmine=1"})
    conf = _spark_conf(mine, _plan(mine, 2), sys.executable, "/tmp/log4j2.xml")
    assert conf["spark.driver.extraJavaOptions"] == \
        "-Dmine=1 -Dlog4j2.configurationFile=file:/tmp/log4j2.xml"
    cluster = EngineConfig(master="spark://127.0.0.1:7077")
    conf = _spark_conf(cluster, _plan(cluster, 2), sys.executable, None)
    assert "spark.driver.extraJavaOptions" not in conf   # a cluster's driver is the user's


def test_workers_fork_from_a_daemon_that_imported_the_runtime(tmp_path: Path) -> None:
    """A restarted task's worker does not import the runtime or pyspark's worker module
    anew (engine/daemon.py); the daemon it forks from runs one thread, so no worker lost
    a thread in the fork."""
    out = [json.loads(b) for b in run_tasks(preload_task, _payloads(1), EngineConfig())]
    assert out[0]["loaded"] == ["eos_runtime.runtime.task", "rocksdict", "confluent_kafka"]
    # pyspark's worker module too: 0.13 s of a restarted task's path on a busy machine
    # (and the daemon module once, as __main__: runpy warns of a second copy)
    assert out[0]["before_fork"] == ["eos_runtime.runtime.task", "pyspark.worker"]
    # but not the driver's side: the runner, the CLI (a third of the import)
    assert out[0]["driver_side"] == []
    # so the worker adds no path, and re-reads no zip directory: 0.07 s and 16 MB each
    assert out[0]["files_dir_before_fork"]
    assert "eos_runtime.engine.daemon" in out[0]["parent"]
    assert out[0]["parent_threads"] == 1
    # pyspark and py4j as installed, compiled once, not from the zips Spark puts first on
    # a worker's path: zipimport compiles every module from source in every new daemon
    # (a second of CPU each run)
    import py4j
    import pyspark.worker
    assert out[0]["pyspark_from"] == pyspark.worker.__file__
    assert out[0]["py4j_from"] == py4j.__file__


@pytest.mark.parametrize("how", ["raise", "sigkill"])
def test_task_failing_every_attempt_fails_the_job(tmp_path: Path, how: str) -> None:
    attempts = 3
    with pytest.raises(EngineError) as info:
        run_tasks(failing_task, _payloads(2, dir=str(tmp_path), bad=1, how=how),
                  EngineConfig(max_attempts=attempts))
    err = info.value
    assert not isinstance(err, JobCancelled)
    assert err.task_index == 1 and err.attempts == attempts
    assert "task 1" in str(err)
    assert sorted(p.name for p in tmp_path.glob("attempt-1-*")) == \
        [f"attempt-1-{a}" for a in range(attempts)]
    if how == "raise":
        assert err.reason == "ValueError: boom"
        assert "boom" in str(err)
        assert "ValueError: boom" in err.python_traceback
        assert "\tat org.apache" not in str(err) + err.python_traceback   # no Java stack
    else:
        assert err.reason == "Python worker exited unexpectedly (crashed)"
        assert err.python_traceback is None
    assert "\n" not in str(err)


def test_too_many_tasks_for_the_master_is_refused_before_spark(tmp_path: Path) -> None:
    payloads = _payloads(3, dir=str(tmp_path))
    cfg = EngineConfig(master="local[2]")
    assert available_slots(cfg) == 2
    assert available_slots(EngineConfig(), 9) == 9
    with pytest.raises(ConfigError) as info:
        start_tasks(rendezvous_task, payloads, cfg)
    assert str(info.value).startswith(
        "pipeline needs 3 concurrent tasks but master local[2] has 2 slots: "
        "use --master local[3] or lower the parallelism")
    assert not list(tmp_path.iterdir())                          # no task ever ran
    with pytest.raises(ConfigError, match="spark.speculation"):
        run_tasks(rendezvous_task, payloads, EngineConfig(conf={"spark.speculation": "true"}))
    with pytest.raises(ConfigError, match="local\\[N\\]"):
        run_tasks(rendezvous_task, payloads, EngineConfig(master="local[two]"))
    assert run_tasks(rendezvous_task, [], EngineConfig(master="local[2]")) == []


def test_missing_java_is_a_setup_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SetupError, match="Java"):
        start_tasks(rendezvous_task, _payloads(1, dir=str(tmp_path)), EngineConfig())


def test_cancel_kills_the_tasks(tmp_path: Path) -> None:
    job = start_tasks(sleeping_task, _payloads(2, dir=str(tmp_path)), EngineConfig())
    with pytest.raises(EngineError, match="one at a time"):      # one SparkContext/process
        start_tasks(sleeping_task, _payloads(1, dir=str(tmp_path)), EngineConfig())
    pid_files = [tmp_path / "pid-0", tmp_path / "pid-1"]
    _wait_for(pid_files, "sleeping tasks")
    deadline = time.monotonic() + 60
    while job.status().running != 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job.status().running == 2 and job.status().state == "running"
    pids = [int(p.read_text()) for p in pid_files]
    t0 = time.monotonic()
    job.cancel()
    assert job.wait(60)
    print(f"cancel -> job done, Spark stopped: {time.monotonic() - t0:.2f} s")
    with pytest.raises(JobCancelled):
        job.result()
    assert job.status().state == "cancelled"
    # no zombie task left: each is killed, which a busy machine may take a moment to finish
    deadline = time.monotonic() + 60
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)], "tasks still running 60 s after the job ended"


CTRL_C_CHILD = """
import json, sys, time
sys.path.insert(0, {tests!r})
from test_spark_engine import sleeping_task, _payloads
from eos_runtime.engine import EngineConfig, run_tasks
try:
    run_tasks(sleeping_task, _payloads(2, dir={dir!r}), EngineConfig())
except KeyboardInterrupt:
    print("interrupted", flush=True)
    out = run_tasks(lambda t: b"after", [b""], EngineConfig())   # the engine is free again
    print(out[0].decode(), flush=True)
    sys.exit(130)
"""


def test_ctrl_c_cancels_the_job(tmp_path: Path) -> None:
    """A real Ctrl-C: SIGINT to the driver's whole process group, as a terminal sends it."""
    code = CTRL_C_CHILD.format(tests=str(Path(__file__).parent), dir=str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        pid_files = [tmp_path / "pid-0", tmp_path / "pid-1"]
        _wait_for(pid_files, "sleeping tasks of the child")
        pids = [int(p.read_text()) for p in pid_files]
        os.killpg(child.pid, signal.SIGINT)
        out, err = child.communicate(timeout=90)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130, err[-3000:]
    assert out.split() == ["interrupted", "after"]
    assert not any(alive(p) for p in pids)
