"""A throwaway Spark standalone cluster on loopback: one master, one worker.

    with StandaloneCluster(tmp_dir, cores=4) as cluster:
        run_tasks(fn, payloads, EngineConfig(master=cluster.master_url))

It runs the master and the worker JVMs straight from the pip-installed pyspark (its
``jars/``; no ``SPARK_HOME`` distribution needed), bound to 127.0.0.1 only, on free
ports, each in its own process group, and stops them (and the worker's executors) by
killing those groups. It is for tests and for trying ``--master spark://`` on one
machine, not for production clusters.

Layout under ``directory``: ``logs/master.log``, ``logs/worker.log`` (the daemons'
log4j output), ``work/<app-id>/<executor-id>/{stdout,stderr}`` (each executor's own
logs: look there when a task fails on the cluster), ``local/`` (executor scratch).

What the executors get: ``SPARK_LOCAL_IP=127.0.0.1`` (inherited from the worker, so
they bind loopback too) and ``PYSPARK_PYTHON`` = ``python`` (default: this process's
``sys.executable``; the engine also sends the driver's interpreter with every task
through ``spark.pyspark.python``). The driver side of loopback binding is the engine's
job: for a ``spark://`` master on a loopback address it binds the driver to 127.0.0.1
(docs/engine.md).

pyspark is not imported here (only located), so this module is cheap to import.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ..errors import EngineError, PortTaken
from ..processes import parent_death_signal_hook
from .java import pyspark_home, spark_java

__all__ = ["StandaloneCluster", "pyspark_home"]

HOST = "127.0.0.1"
_MASTER_MAIN = "org.apache.spark.deploy.master.Master"
_WORKER_MAIN = "org.apache.spark.deploy.worker.Worker"
# The master's web UI is on loopback: never ask an http_proxy from the environment.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _free_ports(n: int) -> list[int]:
    """``n`` distinct ports the kernel reports free on 127.0.0.1 (held open together
    while picking, so they differ; a race with another process stays possible)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _log_end(path: Path, start: int = 0, size: int = 32 * 1024) -> str:
    """The end of a log file, from ``start`` on (what the latest launch wrote)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(start, fh.tell() - size))
            return fh.read().decode(errors="replace")
    except OSError:
        return "(no log)"


def _tail(text: str, lines: int = 25) -> str:
    """The last ``lines`` lines of a log text, Java stack frames left out."""
    kept = [ln for ln in text.rstrip().splitlines() if not ln.lstrip().startswith("at ")]
    return "\n".join(kept[-lines:])


class StandaloneCluster:
    """A Spark standalone master and one worker with ``cores`` cores on 127.0.0.1.

    ``cores`` is the number of task slots the worker offers; it may exceed the
    machine's CPUs (the engine's tasks mostly wait on I/O). Size it to the plan: every
    runtime task holds a slot for its whole life. ``memory`` is the worker's memory
    for executors (an executor asks for ``spark.executor.memory``, 1g by default).

    :meth:`start` returns the master URL once the worker is registered with the master
    (polling the master's web UI JSON); :meth:`stop` kills both process groups
    (SIGTERM, SIGKILL after ``stop_timeout``). With ``die_with_parent`` (Linux, the
    default) the daemons get SIGTERM if the process that started them dies.
    """

    def __init__(self, directory: str | os.PathLike[str], cores: int = 2, *,
                 memory: str = "1g", python: str | None = None,
                 startup_timeout: float = 60.0, stop_timeout: float = 15.0,
                 daemon_heap: str = "256m", die_with_parent: bool = True) -> None:
        if not isinstance(cores, int) or cores < 1:
            raise ValueError(f"cores must be an integer >= 1, not {cores!r}")
        self.directory = Path(directory).absolute()
        self.cores = cores
        self.memory = memory
        self.python = python or sys.executable
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.daemon_heap = daemon_heap
        self.die_with_parent = die_with_parent
        self.master_url: str | None = None
        self.web_url: str | None = None
        self.worker_web_url: str | None = None
        self.startup_seconds: float | None = None
        self._master: subprocess.Popen[bytes] | None = None
        self._worker: subprocess.Popen[bytes] | None = None
        self._log_start: dict[Path, int] = {}   # log size at the latest launch

    # -- places
    @property
    def log_dir(self) -> Path:
        return self.directory / "logs"

    @property
    def master_log(self) -> Path:
        return self.log_dir / "master.log"

    @property
    def worker_log(self) -> Path:
        return self.log_dir / "worker.log"

    @property
    def work_dir(self) -> Path:
        """Where the worker runs executors: ``<app-id>/<executor-id>/{stdout,stderr}``."""
        return self.directory / "work"

    def __repr__(self) -> str:
        return f"StandaloneCluster({str(self.directory)!r}, master_url={self.master_url!r})"

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- lifecycle
    def start(self) -> str:
        """Start the master and the worker; return the master URL (``spark://...``).

        Raises ``SetupError`` (no Java, no pyspark jars) or ``EngineError`` (a daemon
        exited, or the worker did not register within ``startup_timeout``; the message
        names the log file and shows its tail). Nothing is left running on failure.
        """
        if self._master is not None:
            assert self.master_url is not None
            return self.master_url
        java = spark_java()
        home = pyspark_home()
        for d in (self.log_dir, self.work_dir, self.directory / "local"):
            d.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        env = self._env(home)
        tries = 3
        for attempt in range(1, tries + 1):
            try:
                master_url = self._start_once(java, home, env, t0)
                break
            except PortTaken:
                self.stop()
                if attempt == tries:
                    raise EngineError(f"the Spark standalone daemons could not bind their ports "
                                      f"after {tries} tries; see {self.master_log} and "
                                      f"{self.worker_log}") from None
            except BaseException:
                self.stop()
                raise
        self.master_url = master_url
        self.startup_seconds = time.monotonic() - t0
        return master_url

    def _start_once(self, java: str, home: Path, env: dict[str, str], t0: float) -> str:
        port, web, worker_web = _free_ports(3)
        master_url = f"spark://{HOST}:{port}"
        # No REST submission server (a fixed port, 6066); no silent move to port+1 when
        # a picked port was taken meanwhile: fail, and start() retries with new ports.
        self._master = self._launch(java, home, env, self.master_log, [
            "-Dspark.master.rest.enabled=false", "-Dspark.port.maxRetries=0", _MASTER_MAIN,
            "--host", HOST, "--port", str(port), "--webui-port", str(web)])
        self.web_url = f"http://{HOST}:{web}"
        self._worker = self._launch(java, home, env, self.worker_log, [
            "-Dspark.port.maxRetries=0", _WORKER_MAIN, master_url, "--host", HOST,
            "--cores", str(self.cores), "--memory", self.memory,
            "--webui-port", str(worker_web), "--work-dir", str(self.work_dir)])
        self.worker_web_url = f"http://{HOST}:{worker_web}"
        self._wait_registered(t0)
        return master_url

    def stop(self) -> None:
        """Kill the worker's process group (the worker and its executors, whose Python
        worker daemons exit when their executor's pipe closes), then the master's.
        Stopping a stopped cluster does nothing."""
        for attr in ("_worker", "_master"):
            proc = getattr(self, attr)
            if proc is not None:
                self._kill_group(proc)
                setattr(self, attr, None)
        self.master_url = self.web_url = self.worker_web_url = None

    def stop_worker(self) -> None:
        """Kill only the worker's process group (it and its executors): the master stays
        and accepts applications that then never get an executor, as a cluster that lost
        its workers (what the engine's no-progress timeout is for)."""
        if self._worker is not None:
            self._kill_group(self._worker)
            self._worker = None
            self.worker_web_url = None

    def status(self) -> dict[str, Any]:
        """The master's web UI JSON (``workers``, ``aliveworkers``, ``cores``,
        ``coresused``, ``activeapps``, ``completedapps``, ...)."""
        if self.web_url is None:
            raise EngineError("the standalone cluster is not running")
        with _NO_PROXY.open(f"{self.web_url}/json/", timeout=5) as resp:
            return json.loads(resp.read().decode())

    # -- internals
    def _env(self, home: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "SPARK_HOME": str(home),
            # The worker builds each executor's command with Spark's launcher, which
            # needs the Scala version (bin/load-spark-env.sh sets it; we bypass bin/).
            "SPARK_SCALA_VERSION": "2.13",
            # Master, worker and (inherited) executors bind and advertise loopback only;
            # web UIs bind SPARK_LOCAL_IP instead of 0.0.0.0.
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOCAL_HOSTNAME": HOST,
            "SPARK_LOCAL_DIRS": str(self.directory / "local"),
            "PYSPARK_PYTHON": self.python,
        })
        env.pop("SPARK_CONF_DIR", None)
        env.pop("PYSPARK_DRIVER_PYTHON", None)
        return env

    def _launch(self, java: str, home: Path, env: dict[str, str], log: Path,
                args: list[str]) -> subprocess.Popen[bytes]:
        cmd = [java, f"-Xmx{self.daemon_heap}", "-XX:TieredStopAtLevel=1",
               "-Djava.awt.headless=true", "-cp", str(home / "jars" / "*"), *args]
        with open(log, "ab") as out:
            self._log_start[log] = out.tell()
            return subprocess.Popen(
                cmd, cwd=self.directory, env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                preexec_fn=parent_death_signal_hook() if self.die_with_parent else None)

    def _wait_registered(self, t0: float) -> None:
        deadline = t0 + self.startup_timeout
        last = "no answer yet"
        while True:
            for name, proc, log in (("master", self._master, self.master_log),
                                    ("worker", self._worker, self.worker_log)):
                assert proc is not None
                code = proc.poll()
                if code is not None:
                    text = _log_end(log, self._log_start.get(log, 0))
                    if "BindException" in text or "Address already in use" in text:
                        raise PortTaken()
                    raise EngineError(f"the Spark standalone {name} exited with code {code} "
                                      f"while starting; see {log}:\n{_tail(text)}")
            try:
                state = self.status()
                alive = [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
                if state.get("aliveworkers", len(alive)) >= 1 and alive \
                        and sum(w.get("cores", 0) for w in alive) >= self.cores:
                    return
                last = (f"master answers, {state.get('aliveworkers', 0)} alive worker(s) "
                        f"registered")
            except (OSError, ValueError, urllib.error.URLError) as exc:
                last = f"master web UI not answering ({exc})"
            if time.monotonic() > deadline:
                raise EngineError(
                    f"the Spark standalone worker did not register with the master within "
                    f"{self.startup_timeout:.0f} s ({last}); see {self.worker_log} and "
                    f"{self.master_log}:\n"
                    f"{_tail(_log_end(self.worker_log, self._log_start.get(self.worker_log, 0)))}")
            time.sleep(0.2)

    def _kill_group(self, proc: subprocess.Popen[bytes]) -> None:
        pgid = proc.pid        # start_new_session: the daemon leads its own group
        for sig, wait in ((signal.SIGTERM, self.stop_timeout), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if proc.poll() is not None and not _group_alive(pgid):
                    return
                time.sleep(0.1)
        proc.poll()


def _group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is still alive (zombies do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg(0) also succeeds for zombies; look at /proc to tell them apart.
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
