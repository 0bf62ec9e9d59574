"""The peers a bench holds eos_runtime against (``systems.py``'s interface): Quix Streams,
Spark Structured Streaming, Kafka Streams (at each commit interval), faust-streaming and
PyFlink, each installed on first use, each saying why in ``unavailable`` when it cannot
run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from ..broker.jars import KAFKA_VERSION, find_java
from ..errors import EosError
from . import spark_jars
from .faust_peer import FAUST_VERSION
from .faust_peer import install as install_faust
from .kafka_streams import APP_CLASS, APP_JAR, COMMIT_INTERVALS, build
from .pyflink_peer import FLINK_VERSION, PYFLINK_WORKLOADS, kill_a_python_worker
from .pyflink_peer import install as install_pyflink
from .systems import Processes, ProcessGroup, Running, Setup, tables_beyond_one, the_table
from .windows import GRACE_MS, WINDOW_MS
from .workloads import BenchWorkload

__all__ = ["QuixSystem", "SparkStructuredStreaming", "KafkaStreamsSystem", "FaustSystem",
           "PyFlinkSystem"]


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
        return tables_beyond_one(workload)

    def start(self, setup: Setup) -> Running:
        assert self.python is not None
        return _start_group(
            setup, self.python, "quix", max(1, min(os.cpu_count() or 1, setup.partitions)),
            lambda i: ["--guarantee", self.guarantee,
                       "--commit-interval", str(setup.commit_interval),
                       "--state-dir", str(setup.work_dir / f"quix-state-{i}"),
                       *(["--table", the_table(setup)] if setup.tables else []),
                       *_window_args(setup.workload)])


def _window_args(workload: BenchWorkload) -> list[str]:
    """The windows workload's window and grace, for a peer's command line."""
    if workload.name != "windows":
        return []
    return ["--window-ms", str(WINDOW_MS), "--grace-ms", str(GRACE_MS)]


def _start_group(setup: Setup, python: str, peer: str, count: int,
                 more_args: Callable[[int], list[str]]) -> Running:
    """``count`` processes of a Python peer's consumer group, named after the run: each
    runs ``<peer>_app.py`` (beside this file) on ``python``, with ``more_args(i)`` after
    the arguments every such app takes."""
    # the Kafka client loads when a system starts, not with the lineup
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
    return ProcessGroup(procs, logs, lambda: kafka.group_ready(setup.name, count, setup.source,
                                                          setup.partitions))


class _SparkApp(Processes):
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
        try:
            import pandas  # noqa: F401   applyInPandasWithState needs both
            import pyarrow  # noqa: F401
            import pyspark
        except ImportError as exc:
            return f"{exc.name} is not installed: pip install -e '.[bench]'"
        try:
            self.jars = spark_jars.fetch()
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
        return tables_beyond_one(workload)

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
        return Processes([proc], [log])


class FaustSystem:
    """faust-streaming, exactly_once, on an interpreter of its own (bench/faust_peer.py):
    one worker process, its consumer group's only member."""

    name = "faust-exactly-once"
    guarantee = "exactly-once"
    verify_as = "exactly-once"
    #: its output stands still for over a minute at a time on a burst at 10⁵ keys
    #: (docs/benchmarks.md): 600 s before a run is given up, unless --idle-timeout says
    idle_timeout = 600.0

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
    idle_timeout = 600.0      # as faust's (FaustSystem.idle_timeout)

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
             "--checkpoint-dir", str(setup.work_dir / "pyflink-checkpoints"),
             "--connector", str(self.connector)],
            stdout=subprocess.PIPE, stderr=log.open("w"), text=True, start_new_session=True,
            # Flink's own log in the run's scratch, not in the venv's package
            env={**os.environ, "FLINK_LOG_DIR": str(setup.work_dir / "pyflink-log")})
        return _PyFlinkApp([proc], [log])
