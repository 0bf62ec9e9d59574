"""Run long-lived runtime tasks as one Spark job (the only module that imports pyspark).

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

Nothing here exposes a Spark type; pyspark is imported lazily, so importing this module
is cheap.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError, EngineError, EosError, JobCancelled, JobStalled, SetupError
from .stall import DEFAULT_NO_PROGRESS_TIMEOUT, StallWatch, check_timeout

__all__ = [
    "TaskAttempt",
    "EngineConfig",
    "EngineError",
    "JobCancelled",
    "JobStatus",
    "RunningJob",
    "available_slots",
    "check_slots",
    "start_tasks",
    "run_tasks",
]


# --------------------------------------------------------------------------- public types

@dataclass(frozen=True)
class TaskAttempt:
    """What the task function receives, in its Spark Python worker."""

    index: int       # which task (0..n-1)
    attempt: int     # Spark's attemptNumber(): 0 first, 1 after one failure, ...
    payload: bytes   # opaque, given by the caller per task


@dataclass(frozen=True)
class EngineConfig:
    """How to run the tasks on Spark.

    ``master``: ``None`` -> ``local[N,F]`` with N = number of tasks and F =
    ``max_attempts``. An explicit ``local`` / ``local[N]`` / ``local[*]`` gets
    ``,F`` = ``max_attempts`` added (Spark's ``local[N]`` never retries); an explicit
    ``local[N,F]`` keeps its F. For a cluster master (``spark://``, ``yarn``,
    ``k8s://``) ``spark.task.maxFailures`` is set to ``max_attempts`` unless ``conf``
    sets it.

    ``conf``: extra Spark conf, applied over the engine's defaults.
    ``env``: environment variables for the Python workers (``spark.executorEnv.*``);
    use this, not ``os.environ``, to reach the workers: the JVM (and through it every
    worker) keeps the environment it had when the first job of the process started it.
    ``log_level``: Spark's log level (``ERROR`` by default). At ``ERROR`` and above
    Spark's per-attempt failure logs (a Java stack per failed attempt) are muted too:
    the engine reports the final failure itself, and a retried task sees its attempt.
    ``fail_fast``: exception types not worth a retry (see the field).
    """

    master: str | None = None
    max_attempts: int = 4
    app_name: str = "eos_runtime"
    conf: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    log_level: str = "ERROR"
    #: Exception types that end the job at a task's first failure, unretried: failures
    #: that a retry would only repeat (a user function raising on a record). The failing
    #: attempt tells the driver, which cancels the job (``EngineError.retried`` False).
    fail_fast: tuple[type[BaseException], ...] = ()
    #: Seconds some unfinished task may go without a running attempt before the job is
    #: cancelled and fails with ``JobStalled`` (``engine/stall.py``); None or 0: never.
    no_progress_timeout: float | None = DEFAULT_NO_PROGRESS_TIMEOUT


@dataclass(frozen=True)
class JobStatus:
    """A snapshot of a running job, for progress displays."""

    state: str            # "starting" | "running" | "succeeded" | "failed" | "cancelled"
    tasks: int            # number of runtime tasks
    running: int          # task attempts running now (== tasks once all have a slot)
    finished: int         # tasks that returned their result
    failed_attempts: int  # task attempts that failed so far (each retried until the last)
    master: str


# --------------------------------------------------------------------------- planning

_LOCAL = re.compile(r"^local$")
_LOCAL_N = re.compile(r"^local\[\s*([0-9]+|\*)\s*\]$")
_LOCAL_N_F = re.compile(r"^local\[\s*([0-9]+|\*)\s*,\s*([0-9]+)\s*\]$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*([0-9]+)\s*,\s*([0-9]+)\s*,\s*([0-9]+)\s*\]$")
_CLUSTER_PREFIXES = ("spark://", "yarn", "k8s://", "mesos://")

# Spark conf the engine owns; a user value that breaks long-running tasks is refused.
_FORBIDDEN = {
    "spark.speculation": ("false", "a speculative copy of a long-running task is a zombie "
                          "twin of it"),
}


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class _Plan:
    master: str           # what Spark gets
    max_attempts: int     # attempts per task Spark will allow
    slots: int | None     # concurrent tasks possible; None = unknown before the cluster is up
    slots_why: str        # how slots was found, for messages
    local: bool


def _task_cpus(config: EngineConfig) -> int:
    return _positive_int_conf(config, "spark.task.cpus", 1)


def _plan(config: EngineConfig, tasks: int | None) -> _Plan:
    if not isinstance(config.max_attempts, int) or config.max_attempts < 1:
        raise ConfigError(f"max_attempts must be an integer >= 1, not {config.max_attempts!r}")
    cpus = _task_cpus(config)
    f = config.max_attempts
    master = config.master.strip() if config.master is not None else None
    if master is None or master == "":
        if tasks is None:
            return _Plan(f"local[N,{f}]", f, None, "one slot per task", True)
        n = max(tasks, 1) * cpus
        return _Plan(f"local[{n},{f}]", f, max(tasks, 1), "one slot per task", True)

    def threads(spec: str) -> int:
        return _cpu_count() if spec == "*" else int(spec)

    m = _LOCAL_N_F.match(master)
    if m:
        n, f = threads(m.group(1)), int(m.group(2))
        if f < 1:
            raise ConfigError(f"master {master}: the number of attempts must be >= 1")
        return _Plan(master, f, n // cpus, _slots_why(master, n, cpus), True)
    m = _LOCAL_N.match(master)
    if m or _LOCAL.match(master):
        n = threads(m.group(1)) if m else 1
        spec = m.group(1) if m else "1"
        return _Plan(f"local[{spec},{f}]", f, n // cpus, _slots_why(master, n, cpus), True)
    m = _LOCAL_CLUSTER.match(master)
    if m:
        workers, cores = int(m.group(1)), int(m.group(2))
        attempts = _max_failures(config)
        return _Plan(master, attempts, workers * cores // cpus,
                     _slots_why(master, workers * cores, cpus), False)
    if master.startswith(_CLUSTER_PREFIXES):
        slots, why = _cluster_slots(config, cpus)
        return _Plan(master, _max_failures(config), slots, why, False)
    if master.startswith("local"):
        raise ConfigError(f"master {master!r} is not a Spark local master: use local[N] or "
                          f"local[N,F] (N threads = concurrent tasks, F attempts per task)")
    raise ConfigError(f"unknown Spark master {master!r}: use local[N], spark://host:port, "
                      f"yarn or k8s://... (or leave it unset for local[<tasks>,<attempts>])")


def _slots_why(master: str, cores: int, cpus: int) -> str:
    if cpus == 1:
        return f"master {master} has {cores} slots"
    return f"master {master} has {cores} cores / spark.task.cpus={cpus} = {cores // cpus} slots"


def _max_failures(config: EngineConfig) -> int:
    return _positive_int_conf(config, "spark.task.maxFailures", config.max_attempts)


def _positive_int_conf(config: EngineConfig, key: str, default: int) -> int:
    value = _int_conf(config, key)
    if value is None:
        return default
    if value < 1:
        raise ConfigError(f"{key} must be >= 1, not {value}")
    return value


def _int_conf(config: EngineConfig, key: str) -> int | None:
    raw = config.conf.get(key)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{key} must be an integer, not {raw!r}") from None


def _cluster_slots(config: EngineConfig, cpus: int) -> tuple[int | None, str]:
    if config.conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        return None, "dynamic allocation: slots unknown before executors start"
    instances = _int_conf(config, "spark.executor.instances")
    cores = _int_conf(config, "spark.executor.cores")
    if instances is not None and cores is not None:
        total = instances * cores
        return total // cpus, (f"spark.executor.instances={instances} x spark.executor.cores="
                               f"{cores} / spark.task.cpus={cpus} = {total // cpus} slots")
    cores_max = _int_conf(config, "spark.cores.max")
    if cores_max is not None:
        return cores_max // cpus, (f"spark.cores.max={cores_max} / spark.task.cpus={cpus} = "
                                   f"{cores_max // cpus} slots")
    return None, "cluster size unknown (set spark.executor.instances and spark.executor.cores, " \
                 "or spark.cores.max)"


def available_slots(config: EngineConfig, tasks: int | None = None) -> int | None:
    """How many tasks can run at once under ``config``.

    With the default master (``None``) the engine sizes ``local[N,F]`` to the plan, so
    the answer is ``tasks`` (``None`` if not given). For a cluster master it is known
    only from the conf (``spark.executor.instances`` x ``spark.executor.cores``, or
    ``spark.cores.max``, divided by ``spark.task.cpus``); otherwise ``None``: unknown
    before the cluster is up. Raises ``ConfigError`` for a master it cannot parse.
    """
    return _plan(config, tasks).slots


def check_slots(config: EngineConfig, tasks: int) -> None:
    """Raise ``ConfigError`` now if ``config``'s master is known to have fewer slots than
    ``tasks`` (what ``start_tasks`` would refuse), before the caller records anything."""
    _check_slots(_plan(config, tasks), tasks)


def _check_slots(plan: _Plan, tasks: int) -> None:
    if plan.slots is None or plan.slots >= tasks:
        return
    if plan.local:
        fix = f"use --master local[{tasks}] or lower the parallelism"
    else:
        fix = "give the cluster more executor cores or lower the parallelism"
    raise ConfigError(f"pipeline needs {tasks} concurrent tasks but {plan.slots_why}: {fix} "
                      f"(every task holds a slot for its whole life; with fewer slots the "
                      f"tasks that got one would wait forever for the others)")


# --------------------------------------------------------------------------- worker side

_TAG = "eos-task-failure: "


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
            try:
                exc.add_note(_TAG + json.dumps(tag))
            except Exception:  # pragma: no cover - exotic exception objects
                pass
            if self.report is not None and self.fail_fast and isinstance(exc, self.fail_fast):
                import traceback

                _report_fail_fast(self.report, {**tag, "traceback": traceback.format_exc()})
            raise


def _report_fail_fast(report: tuple[str, int, str], tag: dict[str, Any],
                      timeout: float = 5.0) -> None:
    """Tell the driver this failure is not worth a retry, before Spark hears of it (the
    driver acknowledges once it has cancelled the job). Best effort: if the driver
    cannot be reached, Spark retries the task as usual."""
    import socket

    host, port, token = report
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(json.dumps({"token": token, **tag}).encode() + b"\n")
            conn.recv(16)
    except OSError:
        pass


class _FailFastListener:
    """The driver's end of ``EngineConfig.fail_fast``: a loopback (or driver-host) socket
    the failing attempt reports to; ``on_failure`` gets the task's tag, once."""

    def __init__(self, host: str, on_failure: Callable[[dict[str, Any]], None]) -> None:
        import secrets
        import socket

        self.token = secrets.token_hex(16)
        self._on_failure = on_failure
        self._sock = socket.create_server((host, 0))
        self._sock.settimeout(0.5)
        self.address = (host, self._sock.getsockname()[1], self.token)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="eos-fail-fast", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(5.0)
                    data = b""
                    while not data.endswith(b"\n") and len(data) < 1 << 20:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    tag = json.loads(data)
                    if isinstance(tag, dict) and tag.pop("token", None) == self.token:
                        self._on_failure(tag)
                    conn.sendall(b"ok\n")
                except (OSError, ValueError):
                    continue

    def close(self) -> None:
        self._closed.set()
        try:
            self._sock.close()
        except OSError:
            pass


# --------------------------------------------------------------------------- error mapping

_PY_PREFIX = re.compile(r"^\s*\[PYTHON_EXCEPTION\][^:]*:\s*")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\s*$")
_STAGE_FAILURE = re.compile(
    r"Task (\d+) in stage \S+ failed (\d+) times?, most recent failure: "
    r"Lost task \S+ in stage \S+ \(TID \d+\) \([^)]*\): (.*)", re.S)
_JAVA_CLASS_PREFIX = re.compile(r"^(?:[a-z][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error|Failure):\s*")


def _strip_java_stack(text: str) -> str:
    cut = text.find("\n\tat ")
    return text if cut < 0 else text[:cut]


def _java_text(exc: BaseException) -> str:
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            return str(java.toString())
        except Exception:
            pass
    text = str(exc)
    # Py4JJavaError's str: "An error occurred while calling ...\n: <java toString + stack>"
    marker = "\n: "
    return text.split(marker, 1)[1] if marker in text else text


def _python_traceback(text: str) -> str:
    text = _strip_java_stack(text)
    start = text.find("Traceback (most recent call last):")
    if start >= 0:
        text = text[start:]
    else:
        text = _PY_PREFIX.sub("", _JAVA_CLASS_PREFIX.sub("", text))
    return _SQLSTATE.sub("", text).rstrip() + "\n"


def _tag_of(text: str) -> dict[str, Any] | None:
    found = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(_TAG):
            try:
                found = json.loads(line[len(_TAG):])
            except ValueError:
                continue
    return found


def _map_job_error(exc: BaseException, cancelled: bool) -> EosError:
    text = _java_text(exc)
    if cancelled or "SPARK_JOB_CANCELLED" in text or "cancelled as part of" in text:
        return JobCancelled("the Spark job was cancelled", reason="cancelled")
    head = _strip_java_stack(text)
    tag = _tag_of(head)
    if tag is not None:
        reason = f"{tag['type']}: {tag['message']}" if tag["message"] else tag["type"]
        attempts = int(tag["attempt"]) + 1
        stage = _STAGE_FAILURE.search(head)
        if stage and int(stage.group(1)) == int(tag["index"]):
            attempts = int(stage.group(2))
        return EngineError(
            f"task {tag['index']} failed after {attempts} attempt(s): {reason}",
            task_index=int(tag["index"]), attempts=attempts, reason=reason,
            python_traceback=_python_traceback(head))
    stage = _STAGE_FAILURE.search(head)
    if stage:
        index, attempts = int(stage.group(1)), int(stage.group(2))
        raw = stage.group(3).strip()
        reason = _JAVA_CLASS_PREFIX.sub("", raw)
        reason = reason.split(" Consider setting", 1)[0].strip()
        reason = (reason.splitlines()[0] if reason else raw).rstrip(".")
        return EngineError(f"task {index} failed after {attempts} attempt(s): {reason}",
                           task_index=index, attempts=attempts, reason=reason)
    if "PythonException" in head or "[PYTHON_EXCEPTION]" in head:
        tb = _python_traceback(head)
        last = [ln for ln in tb.splitlines() if ln.strip()]
        reason = last[-1].strip() if last else "Python error"
        if "read_command" in tb or "cloudpickle.loads" in tb:
            hint = (" (a worker could not unpickle the task function: cloudpickle ships a "
                    "function by reference to its module, which every worker must import; "
                    "install that module on the workers or define the function in __main__)")
            return EngineError(f"a task failed before the task function ran: {reason}{hint}",
                               reason=reason, python_traceback=tb)
        return EngineError(f"a task failed: {reason}", reason=reason, python_traceback=tb)
    first = head.strip().splitlines()[0] if head.strip() else type(exc).__name__
    return EngineError(f"the Spark job failed: {_JAVA_CLASS_PREFIX.sub('', first)}",
                       reason=first)


def _fail_fast_error(tag: dict[str, Any]) -> EngineError:
    """The job's error when a task's attempt failed with a ``fail_fast`` exception."""
    message = str(tag.get("message") or "")
    reason = f"{tag.get('type')}: {message}" if message else str(tag.get("type"))
    attempt = int(tag.get("attempt", 0))
    text = message or reason
    if f"task {tag.get('index')} " not in text:
        text = f"task {tag.get('index')} failed: {reason}"
    err = EngineError(f"{text} (not retried: it would fail the same way)",
                      task_index=int(tag.get("index", -1)), attempts=attempt + 1, reason=reason,
                      python_traceback=tag.get("traceback"))
    err.retried = False  # type: ignore[attr-defined]
    return err


def _map_start_error(exc: BaseException, master: str) -> EosError:
    text = str(exc)
    if "JAVA_GATEWAY_EXITED" in text or "Java gateway process exited" in text:
        return SetupError("Spark's JVM did not start: install Java 17 or 21 (java on PATH "
                          "or JAVA_HOME set); the JVM's own message is printed above")
    java = _strip_java_stack(_java_text(exc)).strip()
    first = java.splitlines()[0] if java else type(exc).__name__
    if "Master URL" in java or "master URL" in java:
        return ConfigError(f"Spark refused master {master!r}: {_JAVA_CLASS_PREFIX.sub('', first)}")
    return EngineError(f"Spark did not start (master {master}): "
                       f"{_JAVA_CLASS_PREFIX.sub('', first)}")


# --------------------------------------------------------------------------- driver side

_ONE_JOB = threading.Lock()        # one SparkContext per process, so one job at a time
_FAILURE_LOGGERS = ("org.apache.spark.executor.Executor",
                    "org.apache.spark.scheduler.TaskSetManager",
                    "org.apache.spark.scheduler.TaskSchedulerImpl")
_STARTUP_LOGGERS = ("org.apache.hadoop.util.NativeCodeLoader", "org.apache.spark.util.Utils")
_LEVELS = ("ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")


def _check_java() -> None:
    """Spark's launcher runs $JAVA_HOME/bin/java when JAVA_HOME is set, else java on PATH."""
    home = os.environ.get("JAVA_HOME", "")
    if home:
        if not os.access(os.path.join(home, "bin", "java"), os.X_OK):
            raise SetupError(f"Spark needs Java 17 or 21, but JAVA_HOME={home} has no bin/java: "
                             f"fix JAVA_HOME or unset it to use java from PATH")
        return
    if shutil.which("java") is None:
        raise SetupError("Spark needs Java 17 or 21: no java on PATH and JAVA_HOME is not set")


def _driver_python_path() -> list[str]:
    """The driver's sys.path entries outside the interpreter's own tree (script dir,
    test dirs, ``PYTHONPATH`` entries). Local workers get them, so a task function from
    a module the driver imported from such a directory unpickles in the worker."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                              sys.base_exec_prefix) if p}
    out: list[str] = []
    for entry in sys.path:
        path = os.path.realpath(entry or os.getcwd())
        if not os.path.exists(path) or path in out:
            continue
        if any(path == p or path.startswith(p + os.sep) for p in prefixes):
            continue
        out.append(path)
    return out


def _log4j_file(level: str, quiet_failures: bool) -> str:
    # The root level stays WARN while the JVM starts: Spark prints "Setting default log
    # level to WARN" unless the root logger is at WARN already. setLogLevel applies
    # ``level`` once the context is up; the known start-up warnings are muted here.
    lines = [
        "rootLogger.level = warn",
        "rootLogger.appenderRef.stderr.ref = console",
        "appender.console.type = Console",
        "appender.console.name = console",
        "appender.console.target = SYSTEM_ERR",
        "appender.console.layout.type = PatternLayout",
        "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex",
    ]
    for i, name in enumerate(_STARTUP_LOGGERS):
        lines += [f"logger.start{i}.name = {name}", f"logger.start{i}.level = error"]
    if quiet_failures:
        for i, name in enumerate(_FAILURE_LOGGERS):
            lines += [f"logger.eos{i}.name = {name}", f"logger.eos{i}.level = off"]
    fd, path = tempfile.mkstemp(prefix="eos_runtime-log4j2-", suffix=".properties")
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _loopback_master(master: str) -> bool:
    """``spark://host:port[,host:port...]`` with every host a loopback address."""
    if not master.startswith("spark://"):
        return False
    hosts = []
    for part in master[len("spark://"):].split(","):
        try:
            hosts.append(urlsplit("spark://" + part.strip()).hostname)
        except ValueError:
            return False
    return bool(hosts) and all(h == "localhost" or _is_loopback_ip(h) for h in hosts)


def _is_loopback_ip(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _spark_conf(config: EngineConfig, plan: _Plan, python: str,
                log4j: str | None) -> dict[str, str]:
    conf: dict[str, str] = {
        "spark.ui.showConsoleProgress": "false",
        "spark.speculation": "false",
        "spark.python.worker.reuse": "false",
        # Workers fork from a daemon that imported the runtime already (engine/daemon.py).
        "spark.python.daemon.module": "eos_runtime.engine.daemon",
        # JobStatus reads Spark's status store; by default it writes a running stage's
        # counters at most every 100 ms *on the next event*, so with long-running tasks
        # (no further events) the counts could lag until the next heartbeat flush.
        "spark.ui.liveUpdate.period": "0",
    }
    if plan.local or _loopback_master(plan.master):
        # The driver listens on loopback only. For a spark:// master on a loopback
        # address too: such a master only has workers on this machine, and Spark's
        # default would advertise the host's first non-loopback address (and serve the
        # driver UI on 0.0.0.0; it binds SPARK_LOCAL_IP, fixed at JVM start, not a conf).
        conf.update({
            "spark.ui.enabled": "false",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.host": "127.0.0.1",
        })
    if not plan.local:
        conf["spark.task.maxFailures"] = str(config.max_attempts)
    for key, value in config.conf.items():
        conf[str(key)] = str(value)
    for key, (required, why) in _FORBIDDEN.items():
        if conf.get(key, required).strip().lower() != required:
            raise ConfigError(f"{key}={conf[key]} is not supported: {why}; leave it {required}")
    conf["spark.master"] = plan.master
    conf["spark.app.name"] = config.app_name
    conf["spark.pyspark.python"] = python
    for key, value in config.env.items():
        conf[f"spark.executorEnv.{key}"] = str(value)
    if plan.local:
        extra = _driver_python_path()
        if extra:
            key = "spark.executorEnv.PYTHONPATH"
            conf[key] = os.pathsep.join([p for p in [conf.get(key, "")] if p] + extra)
    if log4j is not None:
        opt = f"-Dlog4j2.configurationFile=file:{log4j}"
        old = conf.get("spark.driver.extraJavaOptions", "")
        conf["spark.driver.extraJavaOptions"] = f"{old} {opt}".strip()
    return conf


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
            self._set_failure_loggers(sc, "OFF" if quiet else level)
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
                try:
                    sc.stop()
                except Exception:
                    pass
            self._done.set()
            _ONE_JOB.release()

    def _watch(self, timeout: float) -> None:
        """Cancel the job once it stalls (``engine/stall.py``): Spark would wait forever
        for a cluster that lost its workers."""
        watch = StallWatch(timeout)
        every = min(1.0, timeout / 4)
        while not self._done.wait(every):
            st = self.status()
            short = watch.observe(time.monotonic(), st.tasks, st.running, st.finished)
            if short is None:
                continue
            missing = st.tasks - st.finished - st.running
            self._stalled = JobStalled(
                f"{missing} of {st.tasks} tasks had no running attempt for {short:.0f} s "
                f"(no-progress timeout {timeout:g} s; {st.running} running, {st.finished} "
                f"finished, {st.failed_attempts} failed attempts) on master {self.master}: "
                f"the cluster lost its workers or has fewer free slots than tasks; the job "
                f"was cancelled", reason="stalled")
            self.cancel()
            return

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
                tracker = sc.statusTracker()
                active = 0
                for job_id in tracker.getJobIdsForGroup(self._group):
                    info = tracker.getJobInfo(job_id)
                    for stage_id in (info.stageIds if info else []):
                        stage = tracker.getStageInfo(stage_id)
                        active += stage.numActiveTasks if stage is not None else 0
            except Exception:
                return
            if active == 0:
                return
            time.sleep(0.1)

    @staticmethod
    def _set_failure_loggers(sc: Any, level: str) -> None:
        try:
            jvm = sc._jvm
            lvl = jvm.org.apache.logging.log4j.Level.toLevel(level)
            for name in _FAILURE_LOGGERS:
                jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, lvl)
        except Exception:  # logging only; never fail a job over it
            pass

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
                tracker = sc.statusTracker()
                running = finished = failed = 0
                for job_id in tracker.getJobIdsForGroup(self._group):
                    info = tracker.getJobInfo(job_id)
                    for stage_id in (info.stageIds if info else []):
                        stage = tracker.getStageInfo(stage_id)
                        if stage is not None:
                            running += stage.numActiveTasks
                            finished += stage.numCompletedTasks
                            failed += stage.numFailedTasks
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
        _check_java()
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
