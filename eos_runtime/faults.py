"""Named crash points for fault-injection experiments.

Code on a path worth crashing in calls ``crash_point("name")``. Nothing happens unless
that point is armed, either in-process with ``arm()`` or for a child process through
the environment: ``EOS_CRASH_AT="name"`` (first hit) or ``EOS_CRASH_AT="name@N"`` (the
N-th hit). An armed point kills its own process with SIGKILL, the harshest way a
worker dies: no ``finally`` blocks, no flushes, no atexit.

Every crash point is listed in ``CRASH_POINTS`` with what it interrupts, so
experiments can enumerate them and a typo fails loudly instead of never firing.
"""

from __future__ import annotations

import os
import signal

from .errors import ConfigError

__all__ = ["CRASH_POINTS", "arm", "disarm", "is_armed", "crash_point"]

CRASH_POINTS: dict[str, str] = {
    "locallog.append.mid_data": "local log append: half of a batch's frames are written",
    "locallog.append.after_data": "local log append: frames written, commit pointer not yet",
    "task.mid_version": "a task processed a batch of its open version; no checkpoint yet",
    "task.aligning": "a marker arrived, not every producer's yet (early arrivals may be buffered)",
    "task.checkpoint.after_output_flush": "checkpoint step 1 done: output flushed",
    "task.checkpoint.before_commit": "checkpoint step 2 done: change-log records produced",
    "task.checkpoint.after_commit": "checkpoint step 3 done: commit record sealed, RocksDB not yet",
    "task.checkpoint.after_store": "checkpoint step 4 done: RocksDB written, markers not yet sent",
    "task.checkpoint.mid_marker_fanout": ("checkpoint step 5: markers flushed to the first half "
                                          "of the channels (with one channel: none), not the rest"),
    "task.recovery": "recovery: new generation written, restore commands not yet sent",
    "task.rewind": "handling a restore: state discarded, new generation not yet written",
}

_armed: dict[str, int] = {}
_actions: dict[str, str] = {}
ACTIONS = ("kill", "stop")


def arm(name: str, hit: int = 1, action: str = "kill") -> None:
    """At the ``hit``-th time ``name`` is reached, SIGKILL this process (``kill``) or
    SIGSTOP it (``stop``: it goes on after SIGCONT, as a zombie would)."""
    if name not in CRASH_POINTS:
        raise ConfigError(f"unknown crash point {name!r}; known: {', '.join(sorted(CRASH_POINTS))}")
    if hit < 1:
        raise ConfigError(f"crash point {name!r}: hit must be >= 1, not {hit}")
    if action not in ACTIONS:
        raise ConfigError(f"crash point {name!r}: action must be one of {ACTIONS}, not {action!r}")
    _armed[name] = hit
    _actions[name] = action


def disarm() -> None:
    _armed.clear()
    _actions.clear()


def is_armed(name: str) -> bool:
    """For paths that must prepare a crash (e.g. write half a batch) only when armed."""
    return name in _armed


def crash_point(name: str) -> None:
    if not _armed:
        return
    left = _armed.get(name)
    if left is None:
        return
    if left <= 1:
        if _actions.get(name) == "stop":
            del _armed[name]
            os.kill(os.getpid(), signal.SIGSTOP)
            return
        os.kill(os.getpid(), signal.SIGKILL)
    _armed[name] = left - 1


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
