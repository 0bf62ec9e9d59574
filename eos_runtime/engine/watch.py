"""What the driver learns of a running Spark job: its progress, whether it stalled, and
what a failed attempt (or Spark's failed start) means.

``JobStatus`` is read from Spark's status tracker (``_progress``); ``_wait_for_stall``
gives the job up once the pure rule of ``engine/stall.py`` says it cannot make progress.
A failed attempt tags its traceback with one machine-readable line (``_TAG``), from which
``_map_job_error`` names the task, its attempts and the reason; an attempt failing with a
``fail_fast`` exception also tells the driver at once (``_report_fail_fast`` to the
``_FailFastListener``), so the job ends without Spark's retries. Nothing here imports
pyspark: Spark's objects come in as ``Any``.
"""

from __future__ import annotations

import json
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, EngineError, EosError, JobCancelled, JobStalled, SetupError
from .stall import StallWatch

__all__ = ["JobStatus"]


@dataclass(frozen=True)
class JobStatus:
    """A snapshot of a running job, for progress displays."""

    state: str            # "starting" | "running" | "succeeded" | "failed" | "cancelled"
    tasks: int            # number of runtime tasks
    running: int          # task attempts running now (== tasks once all have a slot)
    finished: int         # tasks that returned their result
    failed_attempts: int  # task attempts that failed so far (each retried until the last)
    master: str


def _progress(sc: Any, group: str) -> tuple[int, int, int]:
    """Task attempts (running, finished, failed) of the job group's stages, as Spark's
    status tracker has them now; raises whatever the tracker raises."""
    tracker = sc.statusTracker()
    running = finished = failed = 0
    for job_id in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job_id)
        for stage_id in (info.stageIds if info else []):
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                running += stage.numActiveTasks
                finished += stage.numCompletedTasks
                failed += stage.numFailedTasks
    return running, finished, failed


def _wait_for_stall(status: Callable[[], JobStatus], done: threading.Event,
                    timeout: float) -> JobStalled | None:
    """Watch the job until it is ``done`` (None) or stalls (``engine/stall.py``): then the
    ``JobStalled`` to end it with, for Spark would wait forever for a cluster that lost its
    workers."""
    watch = StallWatch(timeout)
    every = min(1.0, timeout / 4)
    while not done.wait(every):
        st = status()
        short = watch.observe(time.monotonic(), st.tasks, st.running, st.finished)
        if short is None:
            continue
        missing = st.tasks - st.finished - st.running
        return JobStalled(
            f"{missing} of {st.tasks} tasks had no running attempt for {short:.0f} s "
            f"(no-progress timeout {timeout:g} s; {st.running} running, {st.finished} "
            f"finished, {st.failed_attempts} failed attempts) on master {st.master}: "
            f"the cluster lost its workers or has fewer free slots than tasks; the job "
            f"was cancelled", reason="stalled")
    return None


# --------------------------------------------------------------------------- attempts

_TAG = "eos-task-failure: "


def _report_fail_fast(report: tuple[str, int, str], tag: dict[str, Any],
                      timeout: float = 5.0) -> None:
    """Tell the driver this failure is not worth a retry, before Spark hears of it (the
    driver acknowledges once it has cancelled the job). Best effort: if the driver
    cannot be reached, Spark retries the task as usual."""
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
            python_traceback=_python_traceback(head), user_traceback=tag.get("user_traceback"))
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
                      python_traceback=tag.get("traceback"),
                      user_traceback=tag.get("user_traceback"))
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

