"""The project's own single-node Kafka broker: jars from Maven Central, KRaft, loopback.

The broker is one JVM (``process.roles=broker,controller``) listening on
``127.0.0.1:<port>`` (PLAINTEXT) and ``127.0.0.1:<controller port>`` (CONTROLLER), with
every internal topic at replication factor 1 so that transactions work on one node.
It runs in a session of its own, so it outlives the process that started it; only
:meth:`KafkaBroker.stop` / :func:`stop_running` (``eos kafka down``) end it.

Its jars are ``jars.py``'s (fetched once into a cache), its ``server.properties`` is
``config.py``'s, and its run dir (state file, the process it names, stopping it) is
``rundir.py``'s; this module starts it: formats the store, launches the JVM on free ports
and waits until it answers.

Python API::

    with KafkaBroker(tmp_dir) as broker:          # any free port
        bootstrap = broker.bootstrap_servers      # "127.0.0.1:<port>"

    state = find_running(run_dir)                 # BrokerState or None
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import socket
import subprocess
import time
import uuid
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BrokerError, PortTaken
from ..processes import parent_death_signal_hook
from .config import (
    DEFAULT_PORT,
    HOST,
    _server_properties,
    _write_server_properties,
    check_sasl_plain,
)
from .jars import KAFKA_VERSION, _tail_text, fetch, find_java
from .rundir import (
    _BROKER_MAIN,
    _STATE_FILE,
    BrokerState,
    _clean_run_dir,
    _is_our_broker,
    _locked,
    _terminate,
    claim_run_dir,
    find_running,
)

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

__all__ = ["KafkaBroker", "port_is_free", "free_port"]

log = logging.getLogger("eos_runtime.broker")

_STORAGE_TOOL = "kafka.tools.StorageTool"
_ENV_JVM_OPTS = "EOS_KAFKA_JVM_OPTS"


# --------------------------------------------------------------------------- ports

def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether a listener could bind ``host:port`` now (with SO_REUSEADDR, as the JVM does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = HOST, *, avoid: tuple[int, ...] = ()) -> int:
    """A port the kernel reports free on ``host`` (not in ``avoid``)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port
    raise BrokerError(f"no free port found on {host}")


def listener_port(fixed: int | None, preferred: int | None) -> int:
    """The PLAINTEXT listener's port: ``fixed`` (the user's --port), else ``preferred`` if
    it is free now (each launch asks again: a port taken since an earlier look is passed
    over, not insisted on), else any free one."""
    if fixed is not None:
        return fixed
    if preferred is not None and port_is_free(preferred):
        return preferred
    return free_port()


# --------------------------------------------------------------------------- broker

def _new_cluster_id() -> str:
    """A Kafka cluster id: a random UUID, URL-safe base64 without padding (22 chars)."""
    # Like Kafka's own Uuid.randomUuid: never starting with "-", which the storage
    # tool's argument parser would take for an option (1 id in 64 otherwise).
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            return _tail_text(fh.read().decode(errors="replace"), lines)
    except OSError:
        return "(no log)"


class KafkaBroker:
    """A single-node KRaft Kafka broker on 127.0.0.1, run from ``run_dir``.

    ``port=None`` takes any free port (``eos kafka up`` prefers 9092); the controller
    port is always a free one. :meth:`start` takes ``run_dir`` (:func:`claim_run_dir`:
    a directory with a non-empty ``data/`` the broker did not make is refused), formats
    the store if ``run_dir/data`` is not formatted yet (a kept store is reused), starts
    the JVM detached in its own session, waits until it answers a metadata request and
    returns the bootstrap address. If a broker of ``run_dir`` is running already,
    :meth:`start` adopts it.

    ``die_with_parent=True`` (Linux) makes the JVM receive SIGTERM when the process that
    started it dies, even by SIGKILL: for test fixtures. The CLI leaves it off so the
    broker outlives ``eos kafka up``.
    """

    def __init__(self, run_dir: str | os.PathLike[str], port: int | None = None, *,
                 version: str = KAFKA_VERSION, controller_port: int | None = None,
                 startup_timeout: float = 60.0, heap: str = "512m",
                 die_with_parent: bool = False, sasl_plain: tuple[str, str] | None = None,
                 sasl_port: int | None = None, preferred_port: int | None = None) -> None:
        self.run_dir = Path(run_dir).absolute()
        if sasl_plain is not None:
            check_sasl_plain(*sasl_plain)
        self.sasl_plain = sasl_plain
        self.sasl_port = sasl_port
        self.port = port
        self.preferred_port = preferred_port   # without ``port``: this one if it is free
        self.controller_port = controller_port
        self.version = version
        self.startup_timeout = startup_timeout
        self.heap = heap
        self.die_with_parent = die_with_parent
        self.state: BrokerState | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # -- properties
    @property
    def bootstrap_servers(self) -> str | None:
        """``127.0.0.1:<port>`` once started, else None."""
        return self.state.bootstrap_servers if self.state else None

    @property
    def pid(self) -> int | None:
        return self.state.pid if self.state else None

    @property
    def data_dir(self) -> Path:
        return self.run_dir / "data"

    @property
    def log_file(self) -> Path:
        """The broker's log4j2 log."""
        return self.run_dir / "logs" / "server.log"

    @property
    def running(self) -> bool:
        if self.state is None:
            return False
        if self._proc is not None:
            return self._proc.poll() is None
        return _is_our_broker(self.state.pid, self.run_dir)

    def __repr__(self) -> str:
        return f"KafkaBroker({str(self.run_dir)!r}, bootstrap={self.bootstrap_servers!r})"

    def __enter__(self) -> KafkaBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- lifecycle
    def start(self) -> str:
        """Start (or adopt) the broker; return its bootstrap address.

        Raises :class:`SetupError` when Java/Maven/jars are missing and
        :class:`BrokerError` when the broker does not answer within ``startup_timeout``
        (the message carries the tail of its log).
        """
        if self.running:
            assert self.state is not None
            return self.state.bootstrap_servers
        claim_run_dir(self.run_dir)         # before anything is written, or Java started
        with _locked(self.run_dir):
            existing = find_running(self.run_dir)
            if existing is not None:
                if self.port is not None and existing.port != self.port:
                    raise BrokerError(
                        f"a Kafka broker is running from {self.run_dir} already, at "
                        f"{existing.bootstrap_servers}, not on port {self.port}; stop it first "
                        f"(eos kafka down --dir {self.run_dir})")
                self.state = existing
                return existing.bootstrap_servers
            with contextlib.suppress(FileNotFoundError):
                (self.run_dir / _STATE_FILE).unlink()           # a dead broker's
            java = find_java()
            libs = fetch(self.version)
            t0 = time.monotonic()
            self._prepare_dirs()
            if not (self.data_dir / "meta.properties").exists():
                # The ports in the properties do not matter to formatting.
                self._write_config(self.port or DEFAULT_PORT,
                                   self.controller_port or DEFAULT_PORT + 1)
                self._format(java, libs)
            attempts = 1 if (self.port is not None and self.controller_port is not None
                             and (self.sasl_plain is None or self.sasl_port is not None)) else 3
            for attempt in range(1, attempts + 1):
                try:
                    bootstrap = self._launch(java, libs, t0)
                    log.info("Kafka %s broker up at %s in %.1f s (pid %d, run dir %s)",
                             self.version, bootstrap, time.monotonic() - t0, self.pid, self.run_dir)
                    return bootstrap
                except PortTaken:
                    if attempt == attempts:
                        raise BrokerError(f"Kafka broker could not bind its ports after {attempts} "
                                          f"tries; see {self.log_file}") from None
                    log.info("a port was taken meanwhile; retrying with other ports")
        raise AssertionError("unreachable")

    def stop(self, timeout: float = 30.0, *, keep_data: bool = False) -> None:
        """Stop the broker (SIGTERM, SIGKILL after ``timeout``) and remove its data
        unless ``keep_data``. Stopping a stopped broker does nothing."""
        if self.state is None:
            return
        with _locked(self.run_dir):
            if self.running:
                _terminate(self.state.pid, self.run_dir, timeout, self._proc)
            elif self._proc is not None:
                self._proc.poll()
            _clean_run_dir(self.run_dir, keep_data)
        self.state = None
        self._proc = None

    # -- internals
    def _prepare_dirs(self) -> None:
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "log4j2.xml").write_bytes(
            resources.files(__package__).joinpath("log4j2.xml").read_bytes())

    def _write_config(self, port: int, controller_port: int,
                      sasl_port: int | None = None) -> None:
        _write_server_properties(self.run_dir, self.data_dir, port, controller_port,
                                 self.sasl_plain, sasl_port)

    def _jvm_logging(self) -> list[str]:
        return [f"-Dlog4j2.configurationFile={self.run_dir / 'log4j2.xml'}",
                f"-Dkafka.logs.dir={self.run_dir / 'logs'}",
                "-Dlog4j2.disable.jmx=true"]

    def _format(self, java: str, libs: Path) -> None:
        cmd = [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
               "-Djava.awt.headless=true", *self._jvm_logging(), "-cp", str(libs / "*"),
               _STORAGE_TOOL, "format", "--cluster-id", _new_cluster_id(),
               "--config", str(_server_properties(self.run_dir))]
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if proc.returncode != 0:
            output = _tail_text(proc.stdout + proc.stderr, 30)
            raise BrokerError(f"formatting the Kafka store in {self.data_dir} failed "
                              f"(exit {proc.returncode}):\n{output}")

    def _launch(self, java: str, libs: Path, t0: float) -> str:
        port = listener_port(self.port, self.preferred_port)
        if self.port is not None and not port_is_free(port):
            raise BrokerError(f"port {port} on {HOST} is in use; pick another with --port "
                              f"(or stop what listens there)")
        cport = (self.controller_port if self.controller_port is not None
                 else free_port(avoid=(port,)))
        sport = None
        if self.sasl_plain is not None:
            sport = self.sasl_port if self.sasl_port is not None else free_port(
                avoid=(port, cport))
            if self.sasl_port is not None and not port_is_free(sport):
                raise BrokerError(f"port {sport} on {HOST} is in use; pick another with "
                                  f"--sasl-port (or stop what listens there)")
        self._write_config(port, cport, sport)
        cmd = [java, f"-Xmx{self.heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
               "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
               "-Djava.awt.headless=true", *self._jvm_logging(),
               *os.environ.get(_ENV_JVM_OPTS, "").split(),
               "-cp", str(libs / "*"), _BROKER_MAIN, str(_server_properties(self.run_dir))]
        stdout_log = self.run_dir / "logs" / "stdout.log"
        with open(stdout_log, "wb") as out:
            proc = subprocess.Popen(
                cmd, cwd=self.run_dir, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                preexec_fn=parent_death_signal_hook() if self.die_with_parent else None)
        self._proc = proc
        self.state = BrokerState(
            pid=proc.pid, bootstrap_servers=f"{HOST}:{port}", port=port, controller_port=cport,
            run_dir=str(self.run_dir), data_dir=str(self.data_dir), log_file=str(self.log_file),
            version=self.version, started_at=time.time(), sasl_port=sport,
            sasl_user=self.sasl_plain[0] if self.sasl_plain is not None else None)
        self.state.save(self.run_dir / _STATE_FILE)
        try:
            self._wait_ready(proc, port, t0)
        except BaseException:
            with contextlib.suppress(BrokerError):
                _terminate(proc.pid, self.run_dir, 10.0, proc)
            with contextlib.suppress(FileNotFoundError):
                (self.run_dir / _STATE_FILE).unlink()
            self.state = None
            self._proc = None
            raise
        return self.state.bootstrap_servers

    def _wait_ready(self, proc: subprocess.Popen[bytes], port: int, t0: float) -> None:
        bootstrap = f"{HOST}:{port}"
        deadline = t0 + self.startup_timeout
        admin = None
        while True:
            code = proc.poll()
            if code is not None:
                logs = self._log_tails()
                if "Address already in use" in logs and (
                        self.port is None or self.controller_port is None
                        or (self.sasl_plain is not None and self.sasl_port is None)):
                    raise PortTaken()
                raise BrokerError(f"Kafka broker exited with code {code} while starting "
                                  f"(run dir {self.run_dir}):\n{logs}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerError(f"Kafka broker did not answer at {bootstrap} within "
                                  f"{self.startup_timeout:.0f} s (run dir {self.run_dir}):\n"
                                  f"{self._log_tails()}")
            if _port_open(port):
                if admin is None:
                    admin = _admin_client(bootstrap)
                try:
                    md = admin.list_topics(timeout=max(0.5, min(remaining, 5.0)))
                    if md.brokers:
                        return
                except Exception:       # KafkaException: not ready yet
                    pass
            time.sleep(0.1)

    def _log_tails(self) -> str:
        parts = [f"--- {self.log_file} (last lines)\n{_tail(self.log_file)}"]
        stdout_log = self.run_dir / "logs" / "stdout.log"
        text = _tail(stdout_log, 20)
        if text.strip() and text != "(no log)":
            parts.append(f"--- {stdout_log} (last lines)\n{text}")
        return "\n".join(parts)


def _port_open(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=0.5).close()
        return True
    except OSError:
        return False


def _admin_client(bootstrap: str) -> AdminClient:
    # `eos kafka` is registered at `eos` start: the Kafka client loads when it is used
    from confluent_kafka.admin import AdminClient
    quiet = logging.getLogger("eos_runtime.broker.librdkafka")
    quiet.propagate = False
    if not quiet.handlers:   # the readiness wait makes a client per try: one handler
        quiet.addHandler(logging.NullHandler())
    # Any: librdkafka takes a logging.Logger for "logger", the stubs only plain values
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": quiet,
                            "socket.connection.setup.timeout.ms": 2000}
    return AdminClient(conf)
