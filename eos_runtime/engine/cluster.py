"""The Spark cluster and session set-up: the master, its slots, and the conf Spark starts with.

``EngineConfig`` says how to run; ``_plan`` reads its master (``local[N,F]`` sized to the
plan by default, or a cluster's) into the attempts per task and the slots it has, and a
plan needing more slots than tasks is refused before anything starts. ``_spark_conf``
renders the SparkConf of the job's one SparkContext (no speculation, a fresh Python worker
per attempt, loopback only for local masters) and ``_log4j_file`` Spark's logging. Nothing
here imports pyspark: it is pure set-up, checked in the caller's thread before the job's
thread starts Spark.
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError
from .class_archive import java_options
from .stall import DEFAULT_NO_PROGRESS_TIMEOUT

__all__ = ["EngineConfig", "available_slots", "check_slots"]


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
    ``python_path``: directories every worker puts first on ``sys.path``, whatever the
    master (a pipeline file's directory; the same path must hold it on each worker).
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
    python_path: tuple[str, ...] = ()


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


# --------------------------------------------------------------------------- session

_FAILURE_LOGGERS = ("org.apache.spark.executor.Executor",
                    "org.apache.spark.scheduler.TaskSetManager",
                    "org.apache.spark.scheduler.TaskSchedulerImpl")
_STARTUP_LOGGERS = ("org.apache.hadoop.util.NativeCodeLoader", "org.apache.spark.util.Utils")
_LEVELS = ("ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")


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
    if plan.local:
        # A local job's JVM only schedules its tasks and relays a few bytes each (the
        # Python workers do the work): C2's compiles and the parallel collector's threads
        # were a quarter of a short job's CPU, and Spark's classes load from their
        # archive (engine/class_archive.py). A user's own options replace these.
        conf["spark.driver.extraJavaOptions"] = java_options()
    else:
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
    key = "spark.executorEnv.PYTHONPATH"
    paths = [*config.python_path, *[p for p in [conf.get(key, "")] if p]]
    if plan.local:
        paths += [p for p in _driver_python_path() if p not in paths]
    if paths:
        conf[key] = os.pathsep.join(paths)
    if log4j is not None:
        opt = f"-Dlog4j2.configurationFile=file:{log4j}"
        old = conf.get("spark.driver.extraJavaOptions", "")
        conf["spark.driver.extraJavaOptions"] = f"{old} {opt}".strip()
    return conf


def _quiet_failure_loggers(sc: Any, level: str) -> None:
    """Set Spark's per-attempt failure loggers to ``level`` (``OFF`` mutes their Java
    stacks) in the running context's JVM."""
    try:
        jvm = sc._jvm
        lvl = jvm.org.apache.logging.log4j.Level.toLevel(level)
        for name in _FAILURE_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, lvl)
    except Exception:  # logging only; never fail a job over it
        pass
