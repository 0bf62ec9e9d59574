"""The engine's ``--master spark://`` path on a real Spark standalone cluster (no mocks).

One cluster for the module (eos_runtime.engine.standalone: a master and one worker
started from the pip pyspark's jars, on 127.0.0.1 only); every test is one Spark
application on it: the driver (this process) registers with the master, the worker
launches an executor JVM, and the tasks run in that executor's Python workers, not in
the driver's local mode.

Task functions live at module level and travel by reference, so the executors must
import this module: on a cluster the engine does not hand the driver's sys.path to the
workers (local masters only), so the tests give ``PYTHONPATH`` through
``EngineConfig.env``, as a user would install the module on the workers.

Costs on 2 cores: the cluster ~10 s to start, then ~6-10 s per application (executor JVM
and Python worker start-up) on top of what the tasks do.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from eos_runtime.engine import EngineConfig, EngineError, TaskAttempt, run_tasks, start_tasks
from eos_runtime.engine.standalone import StandaloneCluster
from eos_runtime.processes import alive

from task_files import touch, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TESTS = Path(__file__).resolve().parent
EXAMPLES = TESTS.parent / "examples"
ENV = {"PYTHONPATH": str(TESTS)}   # the executors import this module (see the docstring)
# Slots: the worker's cores. wordcount on a 2-partition source is 2 source tasks + 2
# counting tasks (plan.py: source parallelism = its partitions, then the pipeline's
# parallelism=2), and every task holds a slot for its whole life. The engine tests
# below use 3 tasks. More cores than the machine's CPUs is fine: the tasks mostly wait.
CORES = 4
WAIT = 90.0   # a task waiting for its peers gives up after this (a deadlock fails, not hangs)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), cores=CORES,
                           startup_timeout=120) as c:
        print(f"standalone cluster up at {c.master_url} in {c.startup_seconds:.1f} s")
        yield c


def _apps(cluster: StandaloneCluster) -> dict[str, dict]:
    state = cluster.status()
    return {a["name"]: a for a in state.get("activeapps", []) + state.get("completedapps", [])}


# --------------------------------------------------------------------------- task functions

def _wait_for(paths: list[Path], what: str) -> None:
    wait_for(paths, what, WAIT)



def _ancestors() -> list[str]:
    """The command lines of this process's ancestors, nearest first."""
    out, pid = [], os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                out.append(fh.read().replace(b"\0", b" ").decode(errors="replace"))
            with open(f"/proc/{pid}/stat") as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    return out


def _answer(task: TaskAttempt) -> bytes:
    return json.dumps({"index": task.index, "attempt": task.attempt, "pid": os.getpid(),
                       "python": sys.executable, "ancestors": _ancestors()}).encode()


def rendezvous_task(task: TaskAttempt) -> bytes:
    """Every task announces itself, then waits for all: deadlocks unless concurrent."""
    cfg = json.loads(task.payload)
    d = Path(cfg["dir"])
    touch(d / f"ready-{task.index}")
    _wait_for([d / f"ready-{i}" for i in range(cfg["n"])], f"task {task.index}")
    return _answer(task)


def sigkill_task(task: TaskAttempt) -> bytes:
    """Task `victim` SIGKILLs its own Python worker on attempt 0 while its peers run; the
    peers return only after the victim's retry is up, so they live through the crash."""
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


def always_failing_task(task: TaskAttempt) -> bytes:
    touch(Path(json.loads(task.payload)["dir"]) / f"attempt-{task.index}-{task.attempt}")
    raise ValueError("boom")


def _payloads(n: int, **cfg) -> list[bytes]:
    return [json.dumps({"n": n, **cfg}).encode() for _ in range(n)]


# --------------------------------------------------------------------------- tests

def test_tasks_run_concurrently_in_the_cluster_executor(cluster: StandaloneCluster,
                                                         tmp_path: Path) -> None:
    app = f"eos-cluster-a-{uuid.uuid4().hex[:6]}"
    t0 = time.monotonic()
    out = run_tasks(rendezvous_task, _payloads(3, dir=str(tmp_path)),
                    EngineConfig(master=cluster.master_url, app_name=app, env=ENV))
    print(f"3 tasks on the cluster: {time.monotonic() - t0:.1f} s")
    results = [json.loads(b) for b in out]
    assert [r["index"] for r in results] == [0, 1, 2]          # in task order
    assert [r["attempt"] for r in results] == [0, 0, 0]
    assert len({r["pid"] for r in results}) == 3               # one Python worker each
    for r in results:
        assert r["python"] == sys.executable                    # the driver's interpreter
        # Python worker <- pyspark.daemon <- the executor JVM the worker launched
        # (its stdout/stderr under the worker's work dir), not the driver's JVM.
        executor = [c for c in r["ancestors"] if "CoarseGrainedExecutorBackend" in c]
        assert executor, r["ancestors"]
        assert "--hostname 127.0.0.1" in executor[0]
    assert app in _apps(cluster)                               # the master ran our app
    assert cluster.status()["aliveworkers"] == 1


def test_a_sigkilled_python_worker_is_retried_by_the_cluster(cluster: StandaloneCluster,
                                                              tmp_path: Path) -> None:
    job = start_tasks(sigkill_task, _payloads(3, dir=str(tmp_path), victim=1),
                      EngineConfig(master=cluster.master_url, max_attempts=2, env=ENV))
    results = [json.loads(b) for b in job.result(timeout=180)]
    assert [r["index"] for r in results] == [0, 1, 2]
    assert [r["attempt"] for r in results] == [0, 1, 0]        # only the victim restarted
    assert sorted(p.name for p in tmp_path.glob("started-*")) == [
        "started-0-0", "started-1-0", "started-1-1", "started-2-0"]
    killed = int((tmp_path / "started-1-0").read_text())
    assert results[1]["pid"] != killed and not alive(killed)  # a fresh worker process
    for i in (0, 2):                                           # peers kept their worker
        assert results[i]["pid"] == int((tmp_path / f"started-{i}-0").read_text())
    status = job.status()
    assert (status.state, status.finished, status.failed_attempts) == ("succeeded", 3, 1)


def test_max_attempts_is_the_clusters_task_max_failures(cluster: StandaloneCluster,
                                                        tmp_path: Path) -> None:
    """Spark's own default is 4 attempts on a cluster; the engine sets
    spark.task.maxFailures from max_attempts."""
    with pytest.raises(EngineError) as info:
        run_tasks(always_failing_task, _payloads(1, dir=str(tmp_path)),
                  EngineConfig(master=cluster.master_url, max_attempts=2, env=ENV))
    err = info.value
    assert (err.task_index, err.attempts, err.reason) == (0, 2, "ValueError: boom")
    assert sorted(p.name for p in tmp_path.glob("attempt-*")) == ["attempt-0-0", "attempt-0-1"]


def test_wordcount_on_the_cluster_matches_the_oracle(cluster: StandaloneCluster,
                                                     tmp_path: Path) -> None:
    from eos_runtime.joblog.committed import read_output
    from eos_runtime.runner import load_pipeline, run_pipeline
    from eos_runtime.transport import open_transport

    from pipeline_oracles import check_wordcount_exactly_once, encode_lines, produce, word_lines

    suffix = f"cluster-{uuid.uuid4().hex[:6]}"
    pipeline = load_pipeline(EXAMPLES / "wordcount.py")
    pipeline.rename(f"{pipeline.name}-{suffix}", source=f"{pipeline.source_topic}-{suffix}",
                    sink=f"{pipeline.sink_topic}-{suffix}")
    data_dir = str(tmp_path / "data")
    lines = word_lines(1500)
    with open_transport(data_dir=data_dir) as t:
        produce(t, pipeline.source_topic, encode_lines(lines))      # 2 partitions
    t0 = time.monotonic()
    summary = run_pipeline(pipeline, data_dir=data_dir, master=cluster.master_url)
    print(f"wordcount on the cluster: {time.monotonic() - t0:.1f} s "
          f"(tasks {summary.task_seconds:.1f} s)")
    assert summary.input_records == len(lines)
    assert [len(s["tasks"]) for s in summary.plan] == [2, 2]     # 4 tasks = CORES slots
    assert f"eos:{pipeline.name}" in _apps(cluster)              # ran as a cluster app
    with open_transport(data_dir=data_dir) as t:
        check_wordcount_exactly_once(read_output(t, pipeline.sink_topic, job=pipeline.name),
                                     lines)


def test_eos_run_on_the_cluster_imports_a_module_beside_the_pipeline_file(
        cluster: StandaloneCluster, tmp_path: Path) -> None:
    """Issue 27 item 9 on a cluster: its executors get the pipeline file's directory on
    sys.path too (the driver's own sys.path reaches local workers only)."""
    from test_user_errors import eos, produce_lines, write_beside

    data = produce_lines(tmp_path, "Hello World")
    name = f"beside-{uuid.uuid4().hex[:6]}"
    path = write_beside(tmp_path / "project", name)
    p = eos("run", str(path), "--master", cluster.master_url, "--data-dir", str(data),
            "--state-dir", str(tmp_path / "state"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert f"eos:{name}" in _apps(cluster)                      # ran as a cluster app
    out = eos("consume", "normed", "--all", "--data-dir", str(data))
    assert sorted(out.stdout.splitlines()) == ["hello\thello", "world\tworld"], out
