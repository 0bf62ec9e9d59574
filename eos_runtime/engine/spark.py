"""Run long-lived runtime tasks as one Spark job: the job's launch (the only module that
imports pyspark).

One runtime task is one Spark task: ``sc.parallelize([(i, payload_i) ...], n)`` gives n
partitions of exactly one element each, and ``mapPartitionsWithIndex`` calls the task
function once per partition with a :class:`TaskAttempt`. Every task holds a Spark slot
(a core of ``local[N,F]``, or an executor core on a cluster) for its whole life, so the
job needs as many slots as tasks; a plan needing more is refused before anything starts.

A task that fails (exception, or its Python worker killed) is retried by Spark on a
fresh Python worker (``spark.python.worker.reuse=false``) with ``attemptNumber()`` + 1,
up to ``max_attempts`` attempts; then the whole job fails and the other tasks are
killed. Barrier mode is NOT used: it restarts every task of the stage on one failure
and aborts a single-stage job (docs/engine.md).

The Spark job runs in a background thread of the driver: :func:`start_tasks` returns a
:class:`RunningJob` at once (``wait``/``done``/``result``/``cancel``/``status``);
:func:`run_tasks` is the blocking form, calling ``poll`` in the caller's thread every
``poll_interval`` seconds while the job runs, and cancelling the job on Ctrl-C.

The set-up (the master, its slots, the SparkConf) is ``cluster.py``'s; what the driver
learns of the running job (progress, stall, failed attempts) is ``watch.py``'s.

Nothing here exposes a Spark type; pyspark is imported lazily, inside the functions that
start Spark or run in its workers, so importing the engine is cheap (no JVM, no pyspark).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, EngineError, EosError, JobCancelled, JobStalled
from .cluster import (
    _LEVELS,
    EngineConfig,
    _check_slots,
    _log4j_file,
    _loopback_master,
    _Plan,
    _plan,
    _quiet_failure_loggers,
    _spark_conf,
    _unlink,
)
from .java import spark_java
from .stall import check_timeout
from .watch import (
    _TAG,
    JobStatus,
    _fail_fast_error,
    _FailFastListener,
    _map_job_error,
    _map_start_error,
    _progress,
    _report_fail_fast,
    _wait_for_stall,
)

__all__ = ["TaskAttempt", "RunningJob", "start_tasks", "run_tasks"]


@dataclass(frozen=True)
class TaskAttempt:
    """What the task function receives, in its Spark Python worker."""

    index: int       # which task (0..n-1)
    attempt: int     # Spark's attemptNumber(): 0 first, 1 after one failure, ...
    payload: bytes   # opaque, given by the caller per task


_ONE_JOB = threading.Lock()        # one SparkContext per process, so one job at a time


class _PartitionTask:
    """The function Spark runs per partition (pickled by reference; ``fn`` by value).

    ``report``: where the driver listens for fail-fast failures, ``(host, port, token)``;
    ``fail_fast``: the exception types it wants to hear of (``EngineConfig.fail_fast``).
    """

    def __init__(self, fn: Callable[[TaskAttempt], bytes],
                 report: tuple[str, int, str] | None = None,
                 fail_fast: tuple[type[BaseException], ...] = ()) -> None:
        self.fn = fn
        self.report = report
        self.fail_fast = fail_fast

    def __call__(self, split: int, items: Any) -> list[bytes]:
        # lazy: runs in Spark's Python worker, where pyspark is at hand; the driver that
        # imports this module need not load it
        from pyspark import TaskContext

        rows = list(items)
        if len(rows) != 1 or rows[0][0] != split:
            raise RuntimeError(f"eos_runtime engine: partition {split} holds "
                               f"{[r[0] for r in rows]} instead of exactly task {split}")
        index, payload = rows[0]
        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        try:
            out = self.fn(TaskAttempt(index=index, attempt=attempt, payload=payload))
            if not isinstance(out, (bytes, bytearray, memoryview)):
                raise TypeError(f"the task function returned {type(out).__name__}, not bytes")
            return [bytes(out)]
        except BaseException as exc:
            # One machine-readable line in the traceback Spark ships to the driver: the
            # driver learns the task index and attempt from it (Spark 4 rethrows the
            # worker's PythonException without naming the task).
            tag = {"index": index, "attempt": attempt, "type": type(exc).__name__,
                   "message": str(exc)}
            user = getattr(exc, "user_traceback", None)   # a user function's own frames
            if isinstance(user, str):
                tag["user_traceback"] = user
            try:
                exc.add_note(_TAG + json.dumps(tag))
            except Exception:  # pragma: no cover - exotic exception objects
                pass
            if self.report is not None and self.fail_fast and isinstance(exc, self.fail_fast):
                _report_fail_fast(self.report, {**tag, "traceback": traceback.format_exc()})
            raise


class RunningJob:
    """A Spark job running the tasks in a background thread of the driver.

    ``wait(timeout)`` -> bool (done?), ``done()``, ``started()`` (Spark is up and the
    job submitted; stays false if Spark never came up), ``result(timeout)`` -> the
    tasks' bytes in task order, or raises (``EngineError``, ``JobCancelled``,
    ``SetupError``; ``TimeoutError`` if not done in time), ``cancel()`` (returns at
    once; the job ends with ``JobCancelled`` unless it had already ended), ``status()``
    -> :class:`JobStatus`.

    When ``done()`` is true the SparkContext is stopped, and stopping it kills every
    Python worker of the job (Spark's worker daemon SIGHUPs its process group).
    """

    def __init__(self, fn: Callable[[TaskAttempt], bytes], payloads: list[bytes],
                 config: EngineConfig, plan: _Plan, python: str) -> None:
        self.tasks = len(payloads)
        self.master = plan.master
        self.max_attempts = plan.max_attempts
        self.startup_seconds: float | None = None   # SparkContext start, measured
        self._fn = fn
        self._payloads = payloads
        self._config = config
        self._plan = plan
        self._python = python
        self._group = f"eos_runtime-{uuid.uuid4().hex}"
        self._lock = threading.Lock()
        self._sc: Any = None
        self._started = threading.Event()
        self._done = threading.Event()
        self._cancel_requested = False
        self._canceller: threading.Thread | None = None
        self._result: list[bytes] | None = None
        self._error: BaseException | None = None
        self._last_status = JobStatus("starting", self.tasks, 0, 0, 0, self.master)
        self._thread: threading.Thread | None = None
        self._fail_fast: dict[str, Any] | None = None   # the tag of a fail-fast failure
        self._stalled: JobStalled | None = None          # why the watch cancelled the job
        self._final = False                              # the final status is written

    # -- lifecycle -----------------------------------------------------------------

    def _launch(self) -> None:
        if self.tasks == 0:
            self._result = []
            self._last_status = JobStatus("succeeded", 0, 0, 0, 0, self.master)
            self._started.set()
            self._done.set()
            _ONE_JOB.release()
            return
        self._thread = threading.Thread(target=self._run, name="eos-spark-job", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        log4j: str | None = None
        sc = None
        listener: _FailFastListener | None = None
        try:
            # lazy: importing the engine must not load pyspark (seconds); only a job does
            from pyspark import SparkConf, SparkContext

            if SparkContext._active_spark_context is not None:
                raise EngineError("a SparkContext is already active in this process; the "
                                  "engine needs its own (stop the other one first)")
            level = self._config.log_level.upper()
            quiet = _LEVELS.index(level) >= _LEVELS.index("ERROR")
            jvm_running = SparkContext._gateway is not None
            if not jvm_running:
                log4j = _log4j_file(level, quiet)
            conf = SparkConf(loadDefaults=False)
            for key, value in _spark_conf(self._config, self._plan, self._python,
                                          log4j).items():
                conf.set(key, value)
            t0 = time.monotonic()
            try:
                sc = SparkContext(conf=conf)
            except EosError:
                raise
            except Exception as exc:
                raise _map_start_error(exc, self.master) from exc
            finally:
                if log4j is not None:   # read once, at JVM start
                    _unlink(log4j)
            self.startup_seconds = time.monotonic() - t0
            # The workers run this interpreter: the project's packages, venv or not.
            # (pyspark reads PYSPARK_PYTHON once, at SparkContext creation; set the
            # attribute instead of mutating the caller's environment.)
            sc.pythonExec = self._python
            if self.master.startswith("local"):
                # one directory for the driver and its executor: the daemon puts it on
                # sys.path before it forks, so no worker's start re-reads pyspark's zips
                # (imported here: the daemon runs as __main__ of a process that imports
                # this package, which must not hold a second copy of it)
                from pyspark import SparkFiles

                from .daemon import FILES_DIR_ENV
                sc.environment[FILES_DIR_ENV] = SparkFiles.getRootDirectory()
            sc.setLogLevel(level)
            _quiet_failure_loggers(sc, "OFF" if quiet else level)
            with self._lock:
                self._sc = sc
                cancelled = self._cancel_requested
            if cancelled:
                raise JobCancelled("the Spark job was cancelled before it started",
                                   reason="cancelled")
            sc.setJobGroup(self._group, f"eos_runtime: {self.tasks} tasks",
                           interruptOnCancel=True)
            report = None
            if self._config.fail_fast:
                listener = _FailFastListener(self._driver_host(sc), self._on_fail_fast)
                report = listener.address
            inputs = sc.parallelize(list(enumerate(self._payloads)), self.tasks)
            results = inputs.mapPartitionsWithIndex(
                _PartitionTask(self._fn, report, tuple(self._config.fail_fast)))
            self._started.set()
            timeout = check_timeout(self._config.no_progress_timeout)
            if timeout is not None:
                threading.Thread(target=self._watch, args=(timeout,), name="eos-spark-watch",
                                 daemon=True).start()
            rows = results.collect()
            if len(rows) != self.tasks:
                raise EngineError(f"Spark returned {len(rows)} results for {self.tasks} tasks")
            self._result = list(rows)
        except EosError as exc:
            self._error = exc
        except BaseException as exc:
            if self._stalled is not None:
                self._error = self._stalled
            elif self._fail_fast is not None:
                self._error = _fail_fast_error(self._fail_fast)
            else:
                self._error = _map_job_error(exc, self._cancel_requested)
            self._error.__suppress_context__ = True
        finally:
            if listener is not None:
                listener.close()
            if sc is not None and self._error is not None:
                self._drain(sc)
            self._snapshot(final=True)
            with self._lock:
                self._sc = None
            if sc is not None:
                _stop_context(sc)
            self._done.set()
            _ONE_JOB.release()

    def _watch(self, timeout: float) -> None:
        """Cancel the job once it stalls (``watch._wait_for_stall``)."""
        stalled = _wait_for_stall(self.status, self._done, timeout)
        if stalled is not None:
            self._stalled = stalled
            self.cancel()

    def _driver_host(self, sc: Any) -> str:
        """Where the workers reach the driver: loopback for local masters, else the
        address Spark gave its executors (``spark.driver.host``)."""
        if self._plan.local or _loopback_master(self.master):
            return "127.0.0.1"
        try:
            return str(sc.getConf().get("spark.driver.host", "0.0.0.0"))
        except Exception:
            return "0.0.0.0"

    def _on_fail_fast(self, tag: dict[str, Any]) -> None:
        """A task failed in a way a retry would repeat: end the job now, with its error."""
        with self._lock:
            if self._fail_fast is not None or self._done.is_set():
                return
            self._fail_fast = tag
        self.cancel()

    def _drain(self, sc: Any, limit: float = 5.0) -> None:
        """After a failed or cancelled job, give the killed tasks time to end (Spark
        kills a cancelled task's Python worker ``spark.python.task.killTimeout``, 2 s,
        after interrupting it) so that stopping the context does not pull their
        broadcast from under them. Stopping kills whatever is left anyway."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            try:
                active = _progress(sc, self._group)[0]
            except Exception:
                return
            if active == 0:
                return
            time.sleep(0.1)

    # -- queries -------------------------------------------------------------------

    def started(self) -> bool:
        return self._started.is_set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def result(self, timeout: float | None = None) -> list[bytes]:
        if not self._done.wait(timeout):
            raise TimeoutError(f"the Spark job did not finish within {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return list(self._result)

    def status(self) -> JobStatus:
        if not self._done.is_set():
            self._snapshot(final=False)
        return self._last_status

    def _snapshot(self, final: bool) -> None:
        with self._lock:
            sc = self._sc
        last = self._last_status
        running, finished, failed = last.running, last.finished, last.failed_attempts
        if sc is not None:
            try:
                running, finished, failed = _progress(sc, self._group)
            except Exception:
                running, finished, failed = last.running, last.finished, last.failed_attempts
        if final:
            if self._error is None and self._result is not None:
                state, finished, running = "succeeded", self.tasks, 0
            elif isinstance(self._error, JobCancelled):
                state, running = "cancelled", 0
            else:
                state, running = "failed", 0
        else:
            state = "running" if self._started.is_set() else "starting"
        status = JobStatus(state, self.tasks, running, finished, failed, self.master)
        with self._lock:
            # A look taken while the job ended (the no-progress watch's thread, a caller's
            # status()) must not overwrite the final state.
            if final or not self._final:
                self._last_status = status
            self._final = self._final or final

    # -- cancel --------------------------------------------------------------------

    def cancel(self) -> None:
        """Ask Spark to kill the tasks; returns at once (``wait()`` for the end).

        Cancelling is repeated every 0.5 s until the job ends, so a cancel that races
        with the job's submission is not lost. The tasks' Python workers die at the
        latest when the SparkContext stops, right after the job ends.
        """
        with self._lock:
            if self._done.is_set() or self._cancel_requested:
                return
            self._cancel_requested = True
        self._canceller = threading.Thread(target=self._cancel_loop, name="eos-spark-cancel",
                                           daemon=True)
        self._canceller.start()

    def _cancel_loop(self) -> None:
        while not self._done.is_set():
            with self._lock:
                sc = self._sc
            if sc is not None:
                try:
                    sc.cancelJobGroup(self._group)
                except Exception:
                    pass
            self._done.wait(0.5)


def _stop_context(sc: Any) -> None:
    """Stop ``sc`` without waiting for pyspark's accumulator server: its stop waits for
    the server's thread, which polls its connection once a second, and no runtime task
    uses accumulators. That stop finishes in a daemon thread: a process may exit
    before it does."""
    server = getattr(sc, "_accumulatorServer", None)
    if isinstance(getattr(server, "server_address", None), str):
        server = None   # a Unix socket's server (spark.python.unix.domain.socket.enabled)
        # removes its file as it stops: a process exiting first would leave it behind
    if server is not None:
        sc._accumulatorServer = None
    try:
        sc.stop()
    except Exception:
        pass
    if server is not None:
        threading.Thread(target=server.shutdown, name="eos-spark-accumulators-stop",
                         daemon=True).start()


def start_tasks(fn: Callable[[TaskAttempt], bytes], payloads: Sequence[bytes],
                config: EngineConfig | None = None) -> RunningJob:
    """Start ``fn`` once per payload as concurrent Spark tasks of one job; return at once.

    Checked before anything starts (raising at once): the master and the slots
    (``ConfigError``), Java (``SetupError``), that ``fn`` pickles (``EngineError``),
    that no other engine job runs in this process (``EngineError``). Spark itself starts
    in the background thread (seconds); its failures come out of ``result()``.
    """
    config = config if config is not None else EngineConfig()
    data: list[bytes] = []
    for i, p in enumerate(payloads):
        if not isinstance(p, (bytes, bytearray, memoryview)):
            raise TypeError(f"payload {i} is {type(p).__name__}, not bytes")
        data.append(bytes(p))
    plan = _plan(config, len(data))
    _check_slots(plan, len(data))
    python = str(config.conf.get("spark.pyspark.python") or sys.executable)
    if config.log_level.upper() not in _LEVELS:
        raise ConfigError(f"log_level must be one of {', '.join(_LEVELS)}, "
                          f"not {config.log_level!r}")
    _spark_conf(config, plan, python, None)   # refuses forbidden conf now, not in the thread
    try:
        check_timeout(config.no_progress_timeout)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if data:
        spark_java()
        # lazy, as above; Spark's own cloudpickle, the one that ships the task function
        from pyspark import cloudpickle

        try:
            cloudpickle.dumps(_PartitionTask(fn))
        except Exception as exc:
            raise EngineError(f"the task function cannot be pickled for Spark's workers: "
                              f"{type(exc).__name__}: {exc}") from exc
    if not _ONE_JOB.acquire(blocking=False):
        raise EngineError("another engine job is running in this process: Spark allows one "
                          "SparkContext per process, so jobs run one at a time")
    job = RunningJob(fn, data, config, plan, python)
    try:
        job._launch()
    except BaseException:
        if not job.done():
            _ONE_JOB.release()
        raise
    return job


def run_tasks(fn: Callable[[TaskAttempt], bytes], payloads: Sequence[bytes],
              config: EngineConfig | None = None, *,
              on_start: Callable[[], None] | None = None,
              poll: Callable[[], None] | None = None,
              poll_interval: float = 0.5) -> list[bytes]:
    """Run ``fn`` once per payload as concurrent long-running Spark tasks of one job.

    Returns each task's result bytes in task order. Blocks the caller's thread, but the
    Spark job runs in a background thread: ``on_start`` is called once (in the caller's
    thread, within ``poll_interval``) after Spark is up and the job is submitted (never if
    Spark did not come up), ``poll`` every ``poll_interval``
    seconds while the job runs (show progress with ``job.status()`` from
    :func:`start_tasks` if you need numbers). If ``poll``/``on_start`` raise or Ctrl-C
    arrives, the job is cancelled, awaited (Spark stopped, workers dead), and the
    exception re-raised.

    Raises ``ConfigError`` before anything starts if the master has fewer slots than
    tasks, ``EngineError`` (with ``task_index``, ``attempts``, ``reason``) if a task
    failed on its last attempt.
    """
    job = start_tasks(fn, payloads, config)
    announced = False
    try:
        while True:
            finished = job.wait(poll_interval)
            if not announced and job.started():
                announced = True
                if on_start is not None:
                    on_start()
            if finished:
                break
            if poll is not None:
                poll()
    except BaseException:
        job.cancel()
        job.wait()
        raise
    return job.result()
