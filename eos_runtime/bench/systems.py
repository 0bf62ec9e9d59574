"""The systems a bench compares, each behind one small interface: eos_runtime in both
guarantees and the raw client dataflow here; the peers in ``peers.py``; every one, in
the bench's order, in ``lineup.py``.

A system is started on empty topics, says when it is ready (warm: past start-up, reading
its input), and is stopped once its output is complete. ``guarantee`` is what it really
promises, as the report prints it; ``verify_as`` is how its output is judged: exactly-once
must match the oracle exactly, the others must lose nothing and invent nothing, and their
duplicates are counted. A system whose software is missing says why in ``unavailable``
and is skipped.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..runner import start_pipeline
from .workloads import BenchWorkload

__all__ = ["Setup", "Running", "System", "EosSystem", "RawSystem", "scratch_dir",
           "remove_scratch"]


@dataclass(frozen=True)
class Setup:
    """One run's world: the broker, the workload, and its topics (made by the bench)."""

    bootstrap: str
    workload: BenchWorkload
    name: str                   # unique per run; every topic of the run starts with it
    source: str
    sink: str
    partitions: int
    commit_interval: float
    work_dir: Path              # scratch space for the run, removed after it
    # the workload's tables (BenchWorkload.tables): its pipeline's topic -> the run's,
    # written before the system starts
    tables: dict[str, str] = field(default_factory=dict)


class Running(Protocol):
    def failure(self) -> str | None:
        """Why the system died, once it has (None while it runs)."""

    def ready(self) -> bool: ...

    def stop(self) -> None: ...

    def pids(self) -> list[int]:
        """The roots of the system's processes: it is they and their descendants
        (bench/memory.py)."""

    def kill_one(self) -> str:
        """SIGKILL one task of the last stage, restarted as the system's supervisor
        restarts it; say which."""

    def details(self) -> dict[str, Any]:
        """What the system reports of itself once stopped (eos_runtime: its tasks'
        per-checkpoint metrics); empty for most."""


class System(Protocol):
    name: str
    guarantee: str
    verify_as: str

    def unavailable(self) -> str | None: ...

    def cannot_run(self, workload: BenchWorkload) -> str | None:
        """Why this system cannot run ``workload`` as the others do (None: it can)."""

    def start(self, setup: Setup) -> Running: ...


# --------------------------------------------------------------------------- eos_runtime

class _EosRun:
    def __init__(self, run: Any, task_dir: Path) -> None:
        self.run = run
        self.task_dir = task_dir       # where each task writes its pid file
        self._failure: str | None = None
        self._details: dict[str, Any] = {}

    def failure(self) -> str | None:
        if self._failure is None and self.run.wait(0):
            try:
                self.run.summary()
                self._failure = "the run ended on its own"
            except Exception as exc:   # what ended it, as the summary raises it
                self._failure = f"{type(exc).__name__}: {exc}"
        return self._failure

    def ready(self) -> bool:
        # A task writes its counters first from inside its loop, after recovery and
        # assignment: every task reporting means every task is reading.
        p = self.run.progress()
        return all(st["reporting"] == st["tasks"] for st in p["stages"])

    def stop(self) -> None:
        self.run.stop("bench run complete")
        stopped = self.run.wait(60)
        if not stopped:
            self.run.cancel()
            self.run.wait(30)
        elif self._failure is None:
            try:
                tasks = self.run.summary().tasks
                self._details = {"checkpoint_metrics": {
                    str(t["task_id"]): t.get("checkpoint_metrics", {}) for t in tasks
                    if "task_id" in t}}
            except Exception:   # the summary is a bonus; the run's verdict stands without it
                pass
        self.run.close()

    def details(self) -> dict[str, Any]:
        return self._details

    def pids(self) -> list[int]:
        # The Spark JVM, and under it the Python workers that run the tasks. The driver
        # shares the bench's own process and is not counted. (pyspark: the run loaded it;
        # this module does not.)
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None)
        return [proc.pid] if proc is not None else []

    def kill_one(self) -> str:
        task = self.run.plan.stages[-1].task_ids[0]
        pid = int((self.task_dir / f"task-{task}.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        return f"task {task} (Python worker pid {pid}); Spark runs its next attempt"


class EosSystem:
    """eos_runtime on Spark, at the bench's commit interval or at ``commit_interval``
    seconds whatever the bench's (named after it: ``eos-exactly-once-1s``, so one run
    compares the two intervals round by round)."""

    def __init__(self, guarantee: str, commit_interval: float | None = None) -> None:
        self.guarantee = guarantee
        self.verify_as = guarantee
        self.commit_interval = commit_interval
        self.name = f"eos-{guarantee}" + ("" if commit_interval is None
                                          else f"-{commit_interval:g}s")

    def unavailable(self) -> str | None:
        return None

    def cannot_run(self, workload: BenchWorkload) -> str | None:
        return None

    def start(self, setup: Setup) -> Running:
        pipeline = setup.workload.make_pipeline()
        pipeline.rename(setup.name, source=setup.source, sink=setup.sink, sources=setup.tables)
        run = start_pipeline(pipeline, bootstrap_servers=setup.bootstrap,
                             state_dir=str(setup.work_dir / "state"), guarantee=self.guarantee,
                             commit_interval=(setup.commit_interval
                                              if self.commit_interval is None
                                              else self.commit_interval),
                             parallelism=setup.partitions, bounded=False)
        return _EosRun(run, setup.work_dir / "state" / setup.name)


# --------------------------------------------------------------------------- raw client

class Processes:
    """Child processes that each print ``ready`` once warm."""

    def __init__(self, procs: list[subprocess.Popen[str]], logs: list[Path],
                 victim: int = 0) -> None:
        self.procs = procs
        self.logs = logs   # one per process, named after it
        self.victim = victim   # the process kill_one kills
        self._ready = [False] * len(procs)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.poll() is None]

    def details(self) -> dict[str, Any]:
        return {}

    def kill_one(self) -> str:
        """SIGKILL the victim and start it again with the same command, as a supervisor
        (systemd, Kubernetes) restarts a process that died."""
        old = self.procs[self.victim]
        old.send_signal(signal.SIGKILL)
        old.wait()
        log = self.logs[self.victim]
        self.procs[self.victim] = subprocess.Popen(
            old.args, stdout=subprocess.DEVNULL, stderr=log.open("a"), text=True)
        self._ready[self.victim] = True
        return f"{log.stem} (pid {old.pid}), started again"

    def failure(self) -> str | None:
        for proc, log in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                return f"{log.stem} exited with {proc.returncode}: {' | '.join(tail)}"
        return None

    def ready(self) -> bool:
        for i, proc in enumerate(self.procs):
            out = proc.stdout
            if not self._ready[i] and out is not None and select.select([out], [], [], 0)[0]:
                # the child prints whole lines and flushes: a readable pipe holds one
                self._ready[i] = out.readline().strip() == "ready"
        return all(self._ready)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class ProcessGroup(Processes):
    """Processes of one consumer group: warm once the group is stable and every source
    partition is assigned (their own output says nothing about it)."""

    def __init__(self, procs: list[subprocess.Popen[str]], logs: list[Path],
                 assigned: Callable[[], bool]) -> None:
        super().__init__(procs, logs, victim=0)
        self.assigned = assigned

    def ready(self) -> bool:
        return self.assigned()


class RawSystem:
    name = "raw-kafka"
    guarantee = "none"
    verify_as = "at-least-once"

    def unavailable(self) -> str | None:
        return None

    def cannot_run(self, workload: BenchWorkload) -> str | None:
        if not workload.raw_stages:
            return ("no raw dataflow is written for it: event-time windows need watermarks "
                    "and timers, which bare clients do not have")
        return tables_beyond_one(workload)

    def start(self, setup: Setup) -> Running:
        # the Kafka client loads when a system starts, not with the lineup
        from .kafka import BenchKafka
        from .raw_dataflow import LOOKS_UP

        stages = setup.workload.raw_stages
        # Between two stages: a shuffle topic of the run's own, as wide as the source.
        between = [f"{setup.name}.raw-shuffle-{i + 1}" for i in range(len(stages) - 1)]
        if between:
            BenchKafka(setup.bootstrap).create_topics(between, setup.partitions)
        inputs = [setup.source, *between]
        outputs = [*between, setup.sink]
        procs, logs = [], []
        for stage, src, dst in zip(stages, inputs, outputs, strict=True):
            for p in range(setup.partitions):
                log = setup.work_dir / f"raw-{stage}-{p}.log"
                logs.append(log)
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "eos_runtime.bench.raw_dataflow", stage,
                     "--bootstrap-servers", setup.bootstrap, "--input", src,
                     "--partition", str(p), "--output", dst,
                     "--output-partitions", str(setup.partitions),
                     *(["--table", the_table(setup)] if stage in LOOKS_UP else [])],
                    stdout=subprocess.PIPE, stderr=log.open("w"), text=True))
        # the victim of a recovery run: the last stage's process of partition 0 (it keeps
        # no offsets, so its restart reads its input again from the start)
        return Processes(procs, logs, victim=(len(stages) - 1) * setup.partitions)


def the_table(setup: Setup) -> str:
    """The run's one table topic (``tables_beyond_one`` kept the others from running)."""
    (topic,) = setup.tables.values()
    return topic


def tables_beyond_one(workload: BenchWorkload) -> str | None:
    """Why a peer that looks up one table (the raw dataflow, the Quix app) cannot run
    ``workload`` (None: it can)."""
    tables = workload.tables()
    if len(tables) > 1:
        return (f"written for one table; {workload.name} reads {len(tables)} "
                f"({', '.join(tables)})")
    return None




def scratch_dir(root: Path, name: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))


def remove_scratch(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
