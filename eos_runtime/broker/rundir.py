"""A broker's run dir: what it holds, its state file, the process it names, and stopping it.

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
any other directory touches nothing in it. The state file names the broker's pid, which
counts only while that process is the broker of this run dir (not a recycled pid).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import BrokerError
from .config import HOST, _server_properties

__all__ = ["BrokerState", "default_run_dir", "is_run_dir", "claim_run_dir", "find_running",
           "stop_running"]

log = logging.getLogger("eos_runtime.broker")

_STATE_FILE = "state.json"
_LOCK_FILE = ".lock"
#: Written into a run dir when the broker takes it; only such a directory is cleaned.
_MARKER = ".eos-kafka-run-dir"
#: What the broker writes into its run dir besides ``data/``; a directory that holds one
#: and is not a run dir is refused rather than overwritten.
_OWN_FILES = ("server.properties", "log4j2.xml", _STATE_FILE, "logs/server.log",
              "logs/stdout.log")
#: The broker JVM's main class: a live process whose argv holds it and this run dir's
#: ``server.properties`` is this run dir's broker (not a recycled pid).
_BROKER_MAIN = "kafka.Kafka"
_ENV_RUN_DIR = "EOS_KAFKA_DIR"


def default_run_dir() -> Path:
    """``$EOS_KAFKA_DIR``, else ``.eos/kafka`` under the current directory (absolute)."""
    return Path(os.environ.get(_ENV_RUN_DIR) or Path.cwd() / ".eos" / "kafka").absolute()


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

