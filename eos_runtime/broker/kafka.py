"""The project's own single-node Kafka broker: jars from Maven Central, KRaft, loopback.

Kafka 4.x is resolved from its Maven Central artifacts (``pom.xml`` beside this file)
into a cache directory, once: ``$EOS_CACHE_DIR/kafka-<version>/libs`` or
``~/.cache/eos_runtime/kafka-<version>/libs``. The fetch goes to a temporary directory
that is renamed into place when complete, so a killed fetch never leaves a half cache.

A broker lives in a *run dir*::

    <run dir>/server.properties   rendered from server.properties beside this file
    <run dir>/log4j2.xml          copy of log4j2.xml beside this file
    <run dir>/data/               the KRaft store (log.dirs; metadata log included)
    <run dir>/logs/server.log     the broker's log (log4j2)
    <run dir>/logs/stdout.log     the JVM's own stdout/stderr (crashes, log4j status)
    <run dir>/state.json          pid, bootstrap address, ports and dirs of the running broker
    <run dir>/.eos-kafka-run-dir  the marker: this directory is the broker's

A directory becomes a run dir when :meth:`KafkaBroker.start` takes it (a new or empty
one, or one whose ``data/`` is missing or empty; see :func:`claim_run_dir`). Only a run
dir is ever locked, cleaned or deleted from (:func:`is_run_dir`): ``eos kafka down`` on
any other directory touches nothing in it.

The broker is one JVM (``process.roles=broker,controller``) listening on
``127.0.0.1:<port>`` (PLAINTEXT) and ``127.0.0.1:<controller port>`` (CONTROLLER), with
every internal topic at replication factor 1 so that transactions work on one node.
It runs in a session of its own, so it outlives the process that started it; only
:meth:`KafkaBroker.stop` / :func:`stop_running` (``eos kafka down``) end it.

Python API::

    with KafkaBroker(tmp_dir) as broker:          # any free port
        bootstrap = broker.bootstrap_servers      # "127.0.0.1:<port>"

    state = find_running(run_dir)                 # BrokerState or None
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import signal
import socket
import string
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BrokerError, ConfigError, SetupError
from ..processes import parent_death_signal_hook

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

__all__ = [
    "KAFKA_VERSION",
    "DEFAULT_PORT",
    "HOST",
    "BrokerState",
    "KafkaBroker",
    "default_run_dir",
    "is_run_dir",
    "claim_run_dir",
    "cache_root",
    "libs_dir",
    "fetch",
    "find_java",
    "find_maven",
    "find_running",
    "stop_running",
    "port_is_free",
    "free_port",
    "check_sasl_plain",
]

log = logging.getLogger("eos_runtime.broker")

#: The pinned Kafka release (its jars come from Maven Central; docker-compose.yml uses
#: the apache/kafka image of the same version).
KAFKA_VERSION = "4.1.1"
#: The port ``eos kafka up`` takes when it is free (else any free port).
DEFAULT_PORT = 9092
#: Only loopback: the broker is for this machine's tests, benchmarks and examples.
HOST = "127.0.0.1"
#: Partitions of __consumer_offsets and __transaction_state (Kafka's default is 50;
#: a handful keeps the first group/transaction fast on a single node).
INTERNAL_TOPIC_PARTITIONS = 4

_JAVA_HINT = "install OpenJDK 17 (apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
_MAVEN_HINT = "install Maven 3.6+ (apt-get install maven)"
_STATE_FILE = "state.json"
_LOCK_FILE = ".lock"
#: Written into a run dir when the broker takes it; only such a directory is cleaned.
_MARKER = ".eos-kafka-run-dir"
#: What the broker writes into its run dir besides ``data/``; a directory that holds one
#: and is not a run dir is refused rather than overwritten.
_OWN_FILES = ("server.properties", "log4j2.xml", _STATE_FILE, "logs/server.log",
              "logs/stdout.log")
_BROKER_MAIN = "kafka.Kafka"
_STORAGE_TOOL = "kafka.tools.StorageTool"
_ENV_RUN_DIR = "EOS_KAFKA_DIR"
_ENV_CACHE = "EOS_CACHE_DIR"
_ENV_JVM_OPTS = "EOS_KAFKA_JVM_OPTS"


# --------------------------------------------------------------------------- places

def default_run_dir() -> Path:
    """``$EOS_KAFKA_DIR``, else ``.eos/kafka`` under the current directory (absolute)."""
    return Path(os.environ.get(_ENV_RUN_DIR) or Path.cwd() / ".eos" / "kafka").absolute()


def cache_root() -> Path:
    """``$EOS_CACHE_DIR``, else ``$XDG_CACHE_HOME/eos_runtime`` (``~/.cache/eos_runtime``)."""
    env = os.environ.get(_ENV_CACHE)
    if env:
        return Path(env).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "eos_runtime").absolute()


def libs_dir(version: str = KAFKA_VERSION) -> Path:
    """Where the jars of Kafka ``version`` are (or will be) cached."""
    return cache_root() / f"kafka-{version}" / "libs"


# --------------------------------------------------------------------------- tools

def find_java() -> str:
    """The ``java`` to run (``$JAVA_HOME/bin/java``, else ``java`` on PATH), checked to be 17+.

    Raises :class:`SetupError` saying what to install when there is none or it is too old.
    """
    java = None
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            java = str(candidate)
    if java is None:
        java = shutil.which("java")
    if java is None:
        raise SetupError(f"Java 17+ not found on PATH: {_JAVA_HINT}")
    major = _java_major(java)
    if major is not None and major < 17:
        raise SetupError(f"Java 17+ needed for Kafka {KAFKA_VERSION}, but {java} is Java {major}: "
                         f"{_JAVA_HINT}")
    return java


@lru_cache(maxsize=8)
def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SetupError(f"cannot run {java} -version ({exc}): {_JAVA_HINT}") from exc
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return None                     # unknown format: let the JVM speak for itself
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major      # "1.8.0_x" is Java 8


def find_maven() -> str:
    """``mvn`` on PATH, or :class:`SetupError` saying what to install."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SetupError(f"Maven not found on PATH (it fetches the Kafka jars from Maven Central "
                         f"once, into {cache_root()}): {_MAVEN_HINT}")
    return mvn


# --------------------------------------------------------------------------- fetch

def _cache_complete(libs: Path, version: str) -> bool:
    return (libs / f"kafka_2.13-{version}.jar").is_file() and any(libs.glob("log4j-core-*.jar"))


def fetch(version: str = KAFKA_VERSION, *, force: bool = False) -> Path:
    """Make sure the jars of Kafka ``version`` are in the cache; return the ``libs`` dir.

    Only the first call downloads (with ``mvn dependency:copy-dependencies``, into a
    temporary directory renamed into place at the end). Raises :class:`SetupError` when
    Java or Maven is missing or Maven fails.
    """
    libs = libs_dir(version)
    if not force and _cache_complete(libs, version):
        return libs
    find_java()                          # Maven needs it too; say so first
    mvn = find_maven()
    parent = libs.parent
    parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temp_dirs(parent)
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=parent))
    try:
        pom = work / "pom.xml"
        pom.write_bytes(resources.files(__package__).joinpath("pom.xml").read_bytes())
        out = work / "libs"
        cmd = [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(pom),
               f"-Dkafka.version={version}", "dependency:copy-dependencies",
               "-DincludeScope=runtime", f"-DoutputDirectory={out}"]
        log.info("fetching Kafka %s jars from Maven Central into %s", version, libs)
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True)
        if proc.returncode != 0 or not _cache_complete(out, version):
            tail = _tail_text((proc.stdout + proc.stderr).replace("\x1b[0m", ""), 30)
            raise SetupError(f"fetching Kafka {version} with Maven failed "
                             f"(exit {proc.returncode}); "
                             f"check that Maven Central is reachable and the version exists.\n"
                             f"{' '.join(cmd)}\n{tail}")
        (out / ".eos-complete").write_text(f"kafka {version}\n")
        if force and libs.exists():
            shutil.rmtree(libs)
        try:
            os.rename(out, libs)         # atomic: the cache is either whole or absent
        except OSError as exc:
            if (exc.errno not in (errno.ENOTEMPTY, errno.EEXIST)
                    or not _cache_complete(libs, version)):
                raise
            # A concurrent fetch won the race; its copy is as good as ours.
        log.info("fetched %d jars in %.1f s", len(list(libs.glob("*.jar"))), time.monotonic() - t0)
        return libs
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _remove_stale_temp_dirs(parent: Path, older_than: float = 3600.0) -> None:
    """Temporary dirs of fetches that were killed (an hour old, so not a live fetch)."""
    now = time.time()
    for d in parent.glob(".fetch-*"):
        with contextlib.suppress(OSError):
            if now - d.stat().st_mtime > older_than:
                shutil.rmtree(d, ignore_errors=True)


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


# --------------------------------------------------------------------------- state

@dataclasses.dataclass(frozen=True)
class BrokerState:
    """What ``state.json`` in a run dir says about the broker started there."""

    pid: int
    bootstrap_servers: str
    port: int
    controller_port: int
    run_dir: str
    data_dir: str
    log_file: str
    version: str
    started_at: float
    sasl_port: int | None = None        # the SASL_PLAINTEXT listener's (--sasl-plain)
    sasl_user: str | None = None        # its one user (the password is in no state file)

    @property
    def client_servers(self) -> str:
        """The address clients are meant to use: the SASL listener's if there is one."""
        return f"{HOST}:{self.sasl_port}" if self.sasl_port else self.bootstrap_servers

    @classmethod
    def load(cls, path: Path) -> BrokerState | None:
        try:
            raw = json.loads(path.read_text())
            names = {f.name for f in dataclasses.fields(cls)}
            return cls(**{k: v for k, v in raw.items() if k in names})
        except (OSError, ValueError, TypeError):
            return None

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=2) + "\n")
        os.replace(tmp, path)


def _server_properties(run_dir: Path) -> Path:
    return run_dir / "server.properties"


def _process_cmdline(pid: int) -> list[str] | None:
    """The argv of a live (non-zombie) process, or None when there is no such process."""
    proc = Path("/proc") / str(pid)
    if Path("/proc/self").exists():
        try:
            stat = (proc / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                _reap(pid)
                return None
            return (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except (OSError, IndexError):
            return None
    try:                                 # no /proc (macOS): ask ps
        out = subprocess.run(["ps", "-o", "stat=,command=", "-p", str(pid)],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = out.stdout.strip()
    if out.returncode != 0 or not line or line.split()[0].startswith("Z"):
        return None
    return line.split()[1:]


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _is_our_broker(pid: int, run_dir: Path) -> bool:
    """Whether ``pid`` is alive and is the broker of ``run_dir`` (not a recycled pid)."""
    argv = _process_cmdline(pid)
    if not argv:
        return False
    props = str(_server_properties(run_dir))
    return _BROKER_MAIN in argv and props in argv


def find_running(run_dir: str | os.PathLike[str] | None = None) -> BrokerState | None:
    """The state of the broker running from ``run_dir`` (default :func:`default_run_dir`).

    None when there is no state file or its process is gone (or is not that broker).
    This checks the process, not that the broker answers.
    """
    rd = Path(run_dir).absolute() if run_dir is not None else default_run_dir()
    state = BrokerState.load(rd / _STATE_FILE)
    if state is None or not _is_our_broker(state.pid, rd):
        return None
    return state


def is_run_dir(run_dir: str | os.PathLike[str]) -> bool:
    """Whether ``run_dir`` is a broker's run dir: it holds the marker the broker writes
    when it takes a directory, or (a run dir made before the marker existed) the broker's
    own ``server.properties``, whose ``log.dirs`` is this directory's ``data``."""
    rd = Path(run_dir).absolute()
    if (rd / _MARKER).is_file():
        return True
    try:
        text = _server_properties(rd).read_text()
    except (OSError, UnicodeDecodeError):
        return False
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "log.dirs":
            return value.strip() == str(rd / "data")
    return False


def claim_run_dir(run_dir: str | os.PathLike[str]) -> Path:
    """Make ``run_dir`` the broker's (create it, write the marker) and return it.

    A run dir already is. Any other directory is taken only if nothing in it would be
    overwritten or later deleted by ``eos kafka down``: a non-empty ``data/`` or one of
    the broker's own file names there is a :class:`BrokerError` naming it. A user's other
    files are left alone (nothing but ``data/`` and ``state.json`` is ever deleted).
    """
    rd = Path(run_dir).absolute()
    if not is_run_dir(rd):
        data = rd / "data"
        if (data.is_dir() and any(data.iterdir())) or (data.exists() and not data.is_dir()):
            raise BrokerError(
                f"{data} is not empty and no Kafka broker of eos made it (no {_MARKER} in "
                f"{rd}): refusing to format a Kafka store into it (and `eos kafka down` would "
                f"delete it); use another --dir (a new or empty directory)")
        for name in _OWN_FILES:
            if (rd / name).exists():
                raise BrokerError(
                    f"{rd / name} exists and no Kafka broker of eos wrote it (no {_MARKER} in "
                    f"{rd}): refusing to overwrite it; use another --dir (a new or empty "
                    f"directory)")
    if not (rd / _MARKER).is_file():
        rd.mkdir(parents=True, exist_ok=True)
        (rd / _MARKER).write_text("the run dir of an eos_runtime Kafka broker (eos kafka up); "
                                  "`eos kafka down` deletes data/ here\n")
    return rd


@contextlib.contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    """Serialise up/down on one run dir across processes. Only for a run dir
    (:func:`is_run_dir`, :func:`claim_run_dir`): the lock file is created in it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / _LOCK_FILE, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _wait_gone(pid: int, run_dir: Path, timeout: float,
               proc: subprocess.Popen[bytes] | None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                return True
        elif not _is_our_broker(pid, run_dir):
            return True
        time.sleep(0.05)
    return False


def _terminate(pid: int, run_dir: Path, timeout: float,
               proc: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM (a clean broker shutdown), then SIGKILL after ``timeout`` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if _wait_gone(pid, run_dir, timeout, proc):
        return
    log.warning("Kafka broker (pid %d) did not stop within %.0f s of SIGTERM; killing it",
                pid, timeout)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not _wait_gone(pid, run_dir, 10.0, proc):
        raise BrokerError(f"Kafka broker (pid {pid}) survived SIGKILL")


def _clean_run_dir(run_dir: Path, keep_data: bool) -> None:
    if not is_run_dir(run_dir):
        return                          # never delete from a directory the broker did not take
    with contextlib.suppress(FileNotFoundError):
        (run_dir / _STATE_FILE).unlink()
    if not keep_data:
        shutil.rmtree(run_dir / "data", ignore_errors=True)


def stop_running(run_dir: str | os.PathLike[str] | None = None, *, timeout: float = 30.0,
                 keep_data: bool = False) -> bool:
    """Stop the broker of ``run_dir`` (SIGTERM, SIGKILL after ``timeout``) and remove its data.

    Returns whether a broker was running. Data (``<run dir>/data``) is removed even when
    none was (a crashed broker's store) unless ``keep_data``; logs stay in ``<run dir>/logs``.
    A directory that is not a run dir (:func:`is_run_dir`) is left untouched: no broker
    ever ran from it, so nothing in it is the broker's to delete.
    """
    rd = Path(run_dir).absolute() if run_dir is not None else default_run_dir()
    if not is_run_dir(rd):
        return False
    with _locked(rd):
        state = find_running(rd)
        if state is not None:
            _terminate(state.pid, rd, timeout)
        _clean_run_dir(rd, keep_data)
    return state is not None


# --------------------------------------------------------------------------- broker

def _new_cluster_id() -> str:
    """A Kafka cluster id: a random UUID, URL-safe base64 without padding (22 chars)."""
    # Like Kafka's own Uuid.randomUuid: never starting with "-", which the storage
    # tool's argument parser would take for an option (1 id in 64 otherwise).
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _tail_text(text: str, lines: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


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
                 sasl_port: int | None = None) -> None:
        self.run_dir = Path(run_dir).absolute()
        if sasl_plain is not None:
            check_sasl_plain(*sasl_plain)
        self.sasl_plain = sasl_plain
        self.sasl_port = sasl_port
        self.port = port
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
                except _PortTaken:
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
        template = string.Template(
            resources.files(__package__).joinpath("server.properties").read_text())
        sasl = {"sasl_listener": "", "sasl_protocol": "", "sasl_settings": ""}
        if self.sasl_plain is not None:
            user, password = self.sasl_plain
            sasl = {
                "sasl_listener": f",SASL_PLAINTEXT://{HOST}:{sasl_port or DEFAULT_PORT + 2}",
                "sasl_protocol": ",SASL_PLAINTEXT:SASL_PLAINTEXT",
                "sasl_settings": (
                    "sasl.enabled.mechanisms=PLAIN\n"
                    "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN\n"
                    "listener.name.sasl_plaintext.plain.sasl.jaas.config="
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'user_{user}="{password}";\n'),
            }
        text = template.substitute(port=port, controller_port=controller_port,
                                   data_dir=str(self.data_dir),
                                   internal_partitions=INTERNAL_TOPIC_PARTITIONS, **sasl)
        path = _server_properties(self.run_dir)
        # It may hold the SASL user's password: readable by its owner only.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)

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
        port = self.port if self.port is not None else free_port()
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
                    raise _PortTaken()
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


_SASL_USER = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")


def check_sasl_plain(user: str, password: str) -> None:
    """``ConfigError`` unless the pair fits the broker's JAAS line as it is written there."""
    if not _SASL_USER.match(user):
        raise ConfigError(f"--sasl-plain: user {user!r} must be 1-64 of A-Z a-z 0-9 . _ @ -")
    if not password or any(c in password for c in '"\\\n\r'):
        raise ConfigError("--sasl-plain: the password must be non-empty, without quotes, "
                          "backslashes or line breaks")


class _PortTaken(Exception):
    """An auto-picked port was taken between picking it and the JVM binding it."""


def _port_open(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=0.5).close()
        return True
    except OSError:
        return False


def _admin_client(bootstrap: str) -> AdminClient:
    from confluent_kafka.admin import AdminClient
    quiet = logging.getLogger("eos_runtime.broker.librdkafka")
    quiet.propagate = False
    if not quiet.handlers:   # the readiness wait makes a client per try: one handler
        quiet.addHandler(logging.NullHandler())
    # Any: librdkafka takes a logging.Logger for "logger", the stubs only plain values
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": quiet,
                            "socket.connection.setup.timeout.ms": 2000}
    return AdminClient(conf)
