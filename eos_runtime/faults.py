"""Named crash points for fault-injection experiments.

Code on a path worth crashing in calls ``crash_point("name")``. Nothing happens unless
that point is armed, either in-process with ``arm()`` or for a child process through
the environment: ``EOS_CRASH_AT="name"`` (first hit) or ``EOS_CRASH_AT="name@N"`` (the
N-th hit). An armed point kills its own process with SIGKILL, the harshest way a
worker dies: no ``finally`` blocks, no flushes, no atexit.

Every crash point is listed in ``CRASH_POINTS`` with what it interrupts, so
experiments can enumerate them and a typo fails loudly instead of never firing.

Besides ``kill`` and ``stop``, an armed point can ``lose-state`` (delete a directory,
the task's RocksDB store, then SIGKILL: the retry finds no local state, as on a new
host) or become a ``zombie`` (fork; the parent dies as a killed worker does, the child
stops itself and, once continued with SIGCONT, goes on as the old instance beside its
successor). An armed point can also step this process's wall clock (``clock``, with
``step`` seconds, negative: back; ``eos_runtime/clock.py``) and go on: the process lives,
as a host whose clock NTP stepped. ``record_to(path, ...)`` makes a firing point append
one JSON line to ``path`` first, so an experiment knows when and where its faults fired.
"""

from __future__ import annotations

import faulthandler
import json
import math
import os
import select
import shutil
import signal
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import clock
from .errors import ConfigError

__all__ = ["CRASH_POINTS", "ACTIONS", "arm", "disarm", "is_armed", "crash_point", "record_to",
           "zombie_ended", "zombie_armed", "in_zombie", "on_split"]

CRASH_POINTS: dict[str, str] = {
    "locallog.append.mid_data": "local log append: half of a batch's frames are written",
    "locallog.append.after_data": "local log append: frames written, commit pointer not yet",
    "task.mid_version": "a task processed a batch of its open version; no checkpoint yet",
    "task.aligning": "a marker arrived, not every producer's yet (early arrivals may be buffered)",
    "task.window.fired": ("a checkpoint's watermark closed its windows: their results made "
                          "and their state deleted, all staged; checkpoint step 1 not yet"),
    "task.checkpoint.after_output_flush": "checkpoint step 1 done: output flushed",
    "task.checkpoint.before_commit": "checkpoint step 2 done: change-log records produced",
    "task.checkpoint.after_commit": "checkpoint step 3 done: commit record sealed, RocksDB not yet",
    "task.checkpoint.after_store": "checkpoint step 4 done: RocksDB written, markers not yet sent",
    "task.checkpoint.mid_marker_fanout": ("checkpoint step 5: markers flushed to the first half "
                                          "of the channels (with one channel: none), not the rest"),
    "task.checkpoint.after_cut": ("a snapshot's checkpoint done: markers sent, the change log "
                                  "below the snapshot deleted (recovery C9)"),
    "task.recovery": "recovery: new generation written, restore commands not yet sent",
    "task.rewind": "handling a restore: state discarded, new generation not yet written",
}

_armed: dict[str, int] = {}
_actions: dict[str, str] = {}
_paths: dict[str, str] = {}
_steps: dict[str, float] = {}      # action "clock": seconds the wall clock steps
_not_before: dict[str, float] = {}   # epoch seconds before which a point's hits do not count
_record: dict[str, Any] = {}
_zombie: list[str] = []     # in a zombie: the point it split at
_stack_out: list[Any] = []  # in a zombie: the file faulthandler writes its stack to
# Split hooks, (before, after): ``before`` runs in the process about to split, ``after``
# in the zombie just after the split, before it stops. A client library whose threads do
# not survive a fork settles its clients before and makes them anew after
# (transport/kafka/zombie.py).
_split_hooks: list[tuple[Callable[[], None], Callable[[], None]]] = []
ACTIONS = ("kill", "stop", "lose-state", "zombie", "clock")
SPLIT_WAIT = 60.0   # seconds the dying half waits for the zombie to be ready, at most


def arm(name: str, hit: int = 1, action: str = "kill", *, path: str | None = None,
        not_before: float | None = None, step: float | None = None) -> None:
    """At the ``hit``-th time ``name`` is reached, SIGKILL this process (``kill``),
    SIGSTOP it (``stop``: it goes on after SIGCONT, as a zombie would), delete the
    directory ``path`` and SIGKILL (``lose-state``), split into a dead parent and a
    stopped child that lives on (``zombie``), or step this process's wall clock by
    ``step`` seconds and go on (``clock``). With ``not_before`` (epoch seconds, the true
    clock) only the hits from that moment on count: a soak spreads its faults over its
    duration."""
    if name not in CRASH_POINTS:
        raise ConfigError(f"unknown crash point {name!r}; known: {', '.join(sorted(CRASH_POINTS))}")
    if hit < 1:
        raise ConfigError(f"crash point {name!r}: hit must be >= 1, not {hit}")
    if action not in ACTIONS:
        raise ConfigError(f"crash point {name!r}: action must be one of {ACTIONS}, not {action!r}")
    if (action == "lose-state") != (path is not None):
        raise ConfigError(f"crash point {name!r}: a path goes with action 'lose-state', and only "
                          f"with it")
    if (action == "clock") != (step is not None):
        raise ConfigError(f"crash point {name!r}: a step goes with action 'clock', and only "
                          f"with it")
    if step is not None and (isinstance(step, bool) or not isinstance(step, (int, float))
                             or not math.isfinite(step) or step == 0):
        raise ConfigError(f"crash point {name!r}: clock step {step!r}: give seconds, a finite "
                          f"number other than 0 (negative: back)")
    _armed[name] = hit
    _actions[name] = action
    if path is not None:
        _paths[name] = path
    if step is not None:
        _steps[name] = float(step)
    if not_before is not None:
        _not_before[name] = not_before


def record_to(path: str, **tag: Any) -> None:
    """Append a JSON line (time, point, action, pid and ``tag``) to ``path`` whenever an
    armed point fires, before its action."""
    _record.clear()
    _record.update(tag, _path=path)


def disarm() -> None:
    _armed.clear()
    _actions.clear()
    _paths.clear()
    _steps.clear()
    _not_before.clear()
    _record.clear()


def in_zombie() -> bool:
    """Whether this process is a zombie split off a task (``zombie``)."""
    return bool(_zombie)


def zombie_armed() -> bool:
    """Whether this process may split into a zombie (a client keeps what it must redo)."""
    return "zombie" in _actions.values()


def is_armed(name: str) -> bool:
    """For paths that must prepare a crash (e.g. write half a batch) only when armed."""
    return name in _armed


def crash_point(name: str) -> None:
    if not _armed:
        return
    left = _armed.get(name)
    if left is None:
        return
    # The true clock: a step this process took must not hold back its other faults.
    if _not_before and time.time() < _not_before.get(name, 0.0):
        return
    if left <= 1:
        action = _actions.get(name, "kill")
        if action == "clock":
            del _armed[name]
            _note(name, action, step=_steps[name])
            clock.step(_steps[name])
            return
        if action == "zombie":
            _split_zombie(name)   # returns in the child only, after SIGCONT
            del _armed[name]
            return
        _note(name, action)
        if action == "stop":
            del _armed[name]
            os.kill(os.getpid(), signal.SIGSTOP)
            return
        if action == "lose-state":
            shutil.rmtree(_paths[name], ignore_errors=True)
        os.kill(os.getpid(), signal.SIGKILL)
    _armed[name] = left - 1


def _note(name: str, action: str, **more: Any) -> None:
    if not _record:
        return
    tag = {k: v for k, v in _record.items() if k != "_path"}
    line = json.dumps({"time": time.time(), "point": name, "action": action, "pid": os.getpid(),
                       **tag, **more}) + "\n"
    # One write of a short line with O_APPEND: lines of several processes never interleave.
    fd = os.open(_record["_path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def on_split(before: Callable[[], None], after: Callable[[], None]) -> None:
    """Run ``before`` just before a zombie splits off and ``after`` in the zombie just
    after, before it stops (each pair once)."""
    if (before, after) not in _split_hooks:
        _split_hooks.append((before, after))


def _split_zombie(name: str) -> None:
    """The parent is SIGKILLed (its engine retries the task); the child is the old
    instance kept alive: it stops itself and, after SIGCONT, carries on where it was."""
    for before, _ in _split_hooks:
        before()
    ready, done = os.pipe()
    if os.fork() != 0:
        os.close(done)
        # Die only once the zombie is ready (its hooks ran, or it died): a Kafka zombie's
        # new transactional producer must fence this process's, never the successor's,
        # and the successor starts only once this process is gone.
        select.select([ready], [], [], SPLIT_WAIT)
        os.kill(os.getpid(), signal.SIGKILL)
    os.close(ready)
    # Out of the worker's process group: an engine that kills its workers' group when it
    # shuts down must not take the zombie along. It ends on its own, or its experiment ends it.
    os.setsid()
    # Sockets are the engine's line to the worker: while the child held them open the
    # engine would not see its worker die. They become /dev/null rather than closed, so
    # their numbers are never reused for a file the engine's code would then write to.
    # Files (the local log, RocksDB) stay open.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in range(3, _max_fd()):
        try:
            if fd != null and stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.dup2(null, fd)
        except OSError:
            pass
    os.close(null)
    # The engine's code around the task reports its end on the socket just closed and
    # prints a traceback of that failure: noise, since zombie_ended() notes the real end.
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 2)
    os.close(fd)
    _zombie.append(name)
    _dump_stack_on_request()
    _note(name, "zombie")
    try:
        for _, after in _split_hooks:
            after()
    finally:
        os.close(done)   # the parent may die now
    os.kill(os.getpid(), signal.SIGSTOP)


def stack_file(log: str | os.PathLike[str], pid: int) -> Path:
    """Where zombie ``pid``, recording to fault log ``log``, writes its stack on SIGUSR2."""
    return Path(f"{os.fspath(log)}.zombie-{pid}.stack")


def _dump_stack_on_request() -> None:
    """A zombie that will not end is killed after its run; on SIGUSR2 before that, it
    writes where every thread is, so the report can say where it hung."""
    if not _record:
        return
    # Left open for good: faulthandler writes to it whenever the signal comes.
    out = open(stack_file(_record["_path"], os.getpid()), "w")
    faulthandler.register(signal.SIGUSR2, file=out, all_threads=True)
    _stack_out.append(out)


def zombie_ended(exc: BaseException | None) -> None:
    """In a zombie (only): note how it ended, None for a normal end."""
    if _zombie:
        _note(_zombie[0], "zombie-end",
              error=None if exc is None else f"{type(exc).__name__}: {exc}"[:300])


def _max_fd() -> int:
    try:
        return max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1
    except (OSError, ValueError):
        return 1024


def _arm_from_environment() -> None:
    spec = os.environ.get("EOS_CRASH_AT", "").strip()
    if not spec:
        return
    name, _, hit = spec.partition("@")
    try:
        count = int(hit) if hit else 1
    except ValueError:
        raise ConfigError(f"EOS_CRASH_AT={spec!r}: the part after @ must be a hit count") from None
    arm(name, count)


_arm_from_environment()
