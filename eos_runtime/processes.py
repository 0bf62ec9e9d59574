"""Helpers for the child processes the project starts itself (the Kafka broker, a Spark
standalone cluster), and for telling whether a driver of this host is still running."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

__all__ = ["alive", "parent_death_signal_hook", "process_gone", "state"]

#: How much later than a lease's acquire a process with the holder's pid may have started
#: and still be taken for the holder: /proc's boot time is whole seconds, and the wall
#: clock may have been stepped since the boot.
REUSE_SLACK_MS = 5_000


def parent_death_signal_hook() -> Callable[[], None] | None:
    """A preexec_fn making the child get SIGTERM when its parent dies (Linux), or None."""
    if sys.platform != "linux":
        return None
    import ctypes  # for prctl, on Linux only
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl   # loaded here, not in the child
    except (OSError, AttributeError):
        return None

    def hook() -> None:
        prctl(1, int(signal.SIGTERM))                      # PR_SET_PDEATHSIG
    return hook


def state(pid: int) -> str | None:
    """Process ``pid``'s state letter (``/proc/<pid>/stat``: R, S, D, T stopped, Z zombie,
    X dead...), None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]   # the name may hold spaces
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs: it exists and is neither a zombie nor dead."""
    return state(pid) not in (None, "Z", "X")


def process_gone(pid: int, since_ms: int) -> bool:
    """Whether process ``pid`` of this host is certainly not one that ran at ``since_ms``
    (wall clock): no such process, a zombie (dead, not yet reaped by its parent), or one
    started later, which reused the pid (a restarted container's pid 1). When in doubt
    (no /proc, another user's process) it is not gone."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:        # EPERM: it runs, as another user
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()   # the name may hold spaces
        with open("/proc/stat") as f:
            boot_s = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    except (OSError, StopIteration, ValueError, IndexError):
        return False
    if fields[0] in ("Z", "X"):
        return True
    started_ms = (boot_s + int(fields[19]) / os.sysconf("SC_CLK_TCK")) * 1000
    return started_ms > since_ms + REUSE_SLACK_MS
