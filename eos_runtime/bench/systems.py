"""The systems a bench compares, each behind one small interface.

A system is started on empty topics, says when it is ready (warm: past start-up, reading
its input), and is stopped once its output is complete. ``guarantee`` is what it really
promises, as the report prints it; ``verify_as`` is how its output is judged: exactly-once
must match the oracle exactly, the others must lose nothing and invent nothing, and their
duplicates are counted. A system whose software is missing says why in ``unavailable``
and is skipped.
"""

from __future__ import annotations

import contextlib
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

from ..broker.jars import KAFKA_VERSION, find_java
from ..errors import EosError
from .faust_peer import FAUST_VERSION
from .faust_peer import install as install_faust
from .kafka_streams import APP_CLASS, APP_JAR, COMMIT_INTERVALS, build
from .pyflink_peer import FLINK_VERSION, PYFLINK_WORKLOADS, kill_a_python_worker
from .pyflink_peer import install as install_pyflink
from .workloads import BenchWorkload

__all__ = ["Setup", "Running", "System", "SYSTEM_NAMES", "all_systems", "EosSystem",
           "RawSystem", "QuixSystem", "SparkStructuredStreaming", "KafkaStreamsSystem",
           "FaustSystem", "PyFlinkSystem"]


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
        # shares the bench's own process and is not counted.
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
    def __init__(self, guarantee: str) -> None:
        self.guarantee = guarantee
        self.verify_as = guarantee
        self.name = f"eos-{guarantee}"

    def unavailable(self) -> str | None:
        return None

    def cannot_run(self, workload: BenchWorkload) -> str | None:
        return None

    def start(self, setup: Setup) -> Running:
        from ..runner import start_pipeline

        pipeline = setup.workload.make_pipeline()
        pipeline.rename(setup.name, source=setup.source, sink=setup.sink, sources=setup.tables)
        run = start_pipeline(pipeline, bootstrap_servers=setup.bootstrap,
                             state_dir=str(setup.work_dir / "state"), guarantee=self.guarantee,
                             commit_interval=setup.commit_interval,
                             parallelism=setup.partitions, bounded=False)
        return _EosRun(run, setup.work_dir / "state" / setup.name)


# --------------------------------------------------------------------------- raw client

class _Processes:
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


class _Group(_Processes):
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
        return _tables_beyond_one(workload)

    def start(self, setup: Setup) -> Running:
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
                     *(["--table", _the_table(setup)] if stage in LOOKS_UP else [])],
                    stdout=subprocess.PIPE, stderr=log.open("w"), text=True))
        # the victim of a recovery run: the last stage's process of partition 0 (it keeps
        # no offsets, so its restart reads its input again from the start)
        return _Processes(procs, logs, victim=(len(stages) - 1) * setup.partitions)


def _the_table(setup: Setup) -> str:
    """The run's one table topic (``_tables_beyond_one`` kept the others from running)."""
    (topic,) = setup.tables.values()
    return topic


def _tables_beyond_one(workload: BenchWorkload) -> str | None:
    """Why a peer that looks up one table (the raw dataflow, the Quix app) cannot run
    ``workload`` (None: it can)."""
    tables = workload.tables()
    if len(tables) > 1:
        return (f"written for one table; {workload.name} reads {len(tables)} "
                f"({', '.join(tables)})")
    return None


# --------------------------------------------------------------------------- peers

class QuixSystem:
    """Quix Streams, one process per core (at most one per partition), one consumer group.

    It runs on an interpreter of its own: Quix pins confluent-kafka below the version the
    runtime is built and tested on, so sharing one venv would change the runtime under
    measurement."""

    def __init__(self, guarantee: str, python: str | None = None) -> None:
        self.guarantee = guarantee
        self.verify_as = guarantee
        self.name = f"quix-{guarantee}"
        self.python = python
        self.version: str | None = None

    def unavailable(self) -> str | None:
        if self.python is None:
            return ("no interpreter with Quix Streams: python3 -m venv .venv-quix && "
                    ".venv-quix/bin/pip install quixstreams (or --quix-python)")
        try:
            found = subprocess.run([self.python, "-c", "import quixstreams as q; "
                                    "print(q.__version__)"],
                                   capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{self.python} does not run: {exc}"
        if found.returncode != 0:
            return f"{self.python} cannot import quixstreams"
        self.version = found.stdout.strip()
        return None

    def cannot_run(self, workload: BenchWorkload) -> str | None:
        if workload.name == "pageviews":
            # A Quix user would chain two applications through a topic of their own;
            # that is another dataflow, not this one.
            return ("Quix refuses a second group_by in one application "
                    "(GroupByNestingLimit)")
        return _tables_beyond_one(workload)

    def start(self, setup: Setup) -> Running:
        assert self.python is not None
        return _start_group(
            setup, self.python, "quix", max(1, min(os.cpu_count() or 1, setup.partitions)),
            lambda i: ["--guarantee", self.guarantee,
                       "--commit-interval", str(setup.commit_interval),
                       "--state-dir", str(setup.work_dir / f"quix-state-{i}"),
                       *(["--table", _the_table(setup)] if setup.tables else []),
                       *_window_args(setup.workload)])


def _window_args(workload: BenchWorkload) -> list[str]:
    """The windows workload's window and grace, for a peer's command line."""
    if workload.name != "windows":
        return []
    from .windows import GRACE_MS, WINDOW_MS

    return ["--window-ms", str(WINDOW_MS), "--grace-ms", str(GRACE_MS)]


def _start_group(setup: Setup, python: str, peer: str, count: int,
                 more_args: Callable[[int], list[str]]) -> Running:
    """``count`` processes of a Python peer's consumer group, named after the run: each
    runs ``<peer>_app.py`` (beside this file) on ``python``, with ``more_args(i)`` after
    the arguments every such app takes."""
    from .kafka import BenchKafka

    procs, logs = [], []
    for i in range(count):
        log = setup.work_dir / f"{peer}-{i}.log"
        logs.append(log)
        procs.append(subprocess.Popen(
            [python, str(Path(__file__).with_name(f"{peer}_app.py")),
             setup.workload.name, "--bootstrap-servers", setup.bootstrap,
             "--group", setup.name, "--source", setup.source, "--sink", setup.sink,
             *more_args(i)],
            stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True))
    kafka = BenchKafka(setup.bootstrap)
    return _Group(procs, logs, lambda: kafka.group_ready(setup.name, count, setup.source,
                                                          setup.partitions))


class _SparkApp(_Processes):
    """The Spark peer's one process, leading a session of its own: its JVM and Python
    workers go with it when it is killed."""

    def kill_one(self) -> str:
        """SIGKILL the application, JVM and all, and start it again with the same command,
        as a supervisor restarts a Spark application: it recovers from its checkpoint."""
        old = self.procs[0]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(old.pid, signal.SIGKILL)
        old.wait()
        self.procs[0] = subprocess.Popen(old.args, stdout=subprocess.DEVNULL,
                                         stderr=self.logs[0].open("a"), text=True,
                                         start_new_session=True)
        return f"the Spark application (pid {old.pid}, its JVM and workers), started again"

    def stop(self) -> None:
        super().stop()
        for proc in self.procs:   # whatever of its session outlived it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)


class SparkStructuredStreaming:
    """Spark Structured Streaming on pyspark's own Spark (bench/spark_app.py), with Spark's
    Kafka connector and the token-provider module built from its public source
    (bench/spark_jars.py)."""

    name = "spark-structured-streaming"
    guarantee = "at-least-once"     # Spark's Kafka sink, even in Spark 4
    verify_as = "at-least-once"

    def __init__(self) -> None:
        self.jars: list[Path] = []
        self.version: str | None = None

    def unavailable(self) -> str | None:
        from ..errors import EosError

        try:
            import pandas  # noqa: F401   applyInPandasWithState needs both
            import pyarrow  # noqa: F401
            import pyspark
        except ImportError as exc:
            return f"{exc.name} is not installed: pip install -e '.[bench]'"
        try:
            from .spark_jars import fetch

            self.jars = fetch()
        except EosError as exc:
            return f"Spark's Kafka connector could not be set up: {exc}"
        self.version = pyspark.__version__
        return None

    def cannot_run(self, workload: BenchWorkload) -> str | None:
        if workload.name == "pageviews":
            return ("not written for Spark: pageviews chains two stateful stages, the "
                    "bench's Spark query has one")
        if workload.tables():
            return ("not written for Spark: it joins a stream with a static DataFrame (a "
                    "batch read of the whole table topic, again every micro-batch) or with "
                    "another stream (a left join emits a click without a row only once a "
                    "watermark passes it), not with a table read as a topic")
        return None

    def start(self, setup: Setup) -> Running:
        log = setup.work_dir / "spark-app.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "eos_runtime.bench.spark_app", setup.workload.name,
             "--bootstrap-servers", setup.bootstrap, "--source", setup.source,
             "--sink", setup.sink, "--partitions", str(setup.partitions),
             "--commit-interval", str(setup.commit_interval),
             "--checkpoint", str(setup.work_dir / "spark-checkpoint"),
             "--jars", ",".join(str(j) for j in self.jars), *_window_args(setup.workload)],
            stdout=subprocess.PIPE, stderr=log.open("w"), text=True, start_new_session=True)
        return _SparkApp([proc], [log])


class KafkaStreamsSystem:
    """Kafka Streams, exactly_once_v2, at a commit interval of its own (``interval``, a key
    of ``COMMIT_INTERVALS``), whatever the bench's ``--commit-interval``."""

    guarantee = "exactly-once"
    verify_as = "exactly-once"

    def __init__(self, interval: str) -> None:
        self.commit_interval = COMMIT_INTERVALS[interval]
        self.name = f"kafka-streams-exactly-once-{interval}"
        self.version: str | None = None
        self.built: Path | None = None
        self.java = "java"

    def unavailable(self) -> str | None:
        try:
            self.built = build()
            self.java = find_java()
        except EosError as exc:
            return f"the Kafka Streams peer could not be built: {exc}"
        self.version = KAFKA_VERSION
        return None

    def cannot_run(self, workload: BenchWorkload) -> str | None:
        if workload.name == "windows":
            return ("not written for Kafka Streams yet (BenchApp.java has no windowed "
                    "count; issue 25 asks for Quix and Spark)")
        return _tables_beyond_one(workload)

    def start(self, setup: Setup) -> Running:
        assert self.built is not None, "unavailable() builds the peer first"
        table = list(setup.tables.values())
        threads = max(1, min(os.cpu_count() or 1, setup.partitions))
        log = setup.work_dir / "kafka-streams.log"
        proc = subprocess.Popen(
            [self.java, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
             "-cp", f"{self.built / APP_JAR}:{self.built / 'libs' / '*'}", APP_CLASS,
             setup.workload.name, "--bootstrap-servers", setup.bootstrap,
             # its internal topics (change logs, repartition topics) start with the run's
             # name, so the bench deletes them with the run's own
             "--application-id", setup.name, "--source", setup.source, "--sink", setup.sink,
             "--commit-interval-ms", str(round(self.commit_interval * 1000)),
             "--threads", str(threads), "--state-dir", str(setup.work_dir / "kafka-streams"),
             *(["--table", table[0]] if table else [])],
            stdout=subprocess.PIPE, stderr=log.open("w"), text=True)
        return _Processes([proc], [log])


class FaustSystem:
    """faust-streaming, exactly_once, on an interpreter of its own (bench/faust_peer.py):
    one worker process, its consumer group's only member."""

    name = "faust-exactly-once"
    guarantee = "exactly-once"
    verify_as = "exactly-once"

    def __init__(self) -> None:
        self.python: str | None = None
        self.version = FAUST_VERSION

    def unavailable(self) -> str | None:
        try:
            self.python = install_faust()
        except EosError as exc:
            return f"faust-streaming could not be installed: {exc}"
        return None

    def cannot_run(self, workload: BenchWorkload) -> str | None:
        if workload.name not in ("wordcount", "aggregate", "passthrough"):
            return "not written for faust (bench/faust_app.py: wordcount, aggregate, passthrough)"
        return None

    def start(self, setup: Setup) -> Running:
        assert self.python is not None, "unavailable() installs faust first"
        # One worker: faust's exactly_once sends through the transactional producer of the
        # destination partition, which only the worker holding that partition has; with
        # two, a regroup fails ("No transaction producer found", docs/benchmarks.md).
        return _start_group(setup, self.python, "faust", 1, lambda i: [
            "--partitions", str(setup.partitions),
            "--commit-interval", str(setup.commit_interval),
            "--data-dir", str(setup.work_dir / f"faust-data-{i}")])


class _PyFlinkApp(_SparkApp):
    """The PyFlink job's driver, leading a session of its own: Flink's JVM and its Python
    workers go with it when it is stopped."""

    def kill_one(self) -> str:
        return kill_a_python_worker(self.procs[0].pid)


class PyFlinkSystem:
    """PyFlink, checkpoints EXACTLY_ONCE every commit interval and an exactly-once Kafka sink
    (bench/pyflink_app.py), on an interpreter of its own with Flink's Kafka connector
    (bench/pyflink_peer.py): one local Flink, every operator at ``--partitions``."""

    name = "pyflink-exactly-once"
    guarantee = verify_as = "exactly-once"
    version = FLINK_VERSION

    def unavailable(self) -> str | None:
        try:
            self.python, self.connector = install_pyflink()
        except EosError as exc:
            return f"PyFlink could not be set up: {exc}"
        return None

    def cannot_run(self, workload: BenchWorkload) -> str | None:
        return None if workload.name in PYFLINK_WORKLOADS else \
            f"not written for PyFlink (bench/pyflink_app.py: {', '.join(PYFLINK_WORKLOADS)})"

    def start(self, setup: Setup) -> Running:
        log = setup.work_dir / "pyflink.log"
        proc = subprocess.Popen(
            [self.python, str(Path(__file__).with_name("pyflink_app.py")), setup.workload.name,
             "--bootstrap-servers", setup.bootstrap, "--name", setup.name, "--source",
             setup.source, "--sink", setup.sink, "--parallelism", str(setup.partitions),
             "--checkpoint-interval-ms", str(round(setup.commit_interval * 1000)),
             "--connector", str(self.connector)],
            stdout=subprocess.PIPE, stderr=log.open("w"), text=True, start_new_session=True,
            # Flink's own log in the run's scratch, not in the venv's package
            env={**os.environ, "FLINK_LOG_DIR": str(setup.work_dir / "pyflink-log")})
        return _PyFlinkApp([proc], [log])


def all_systems(*, quix_python: str | None = None) -> dict[str, System]:
    """Every system by name, in the order the bench runs them."""
    systems: list[System] = [EosSystem("exactly-once"), EosSystem("at-least-once"), RawSystem(),
                             QuixSystem("exactly-once", quix_python),
                             QuixSystem("at-least-once", quix_python),
                             SparkStructuredStreaming(),
                             *(KafkaStreamsSystem(i) for i in COMMIT_INTERVALS),
                             FaustSystem(), PyFlinkSystem()]
    return {s.name: s for s in systems}


SYSTEM_NAMES = list(all_systems())


def scratch_dir(root: Path, name: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))


def remove_scratch(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
