"""Peak resident memory and CPU time of a system: every process of it, sampled from /proc.

A system names the roots of its processes (``Running.pids``); the samplers find each
root and all its descendants a few times a second. ``RssSampler`` adds up their resident
sets (VmRSS) and keeps the peak; ``CpuSampler`` adds up the CPU time each spent while
it sampled. Linux only: elsewhere both give None and the report says so.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["CpuSampler", "RssSampler", "tree_rss_bytes"]

_PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after "pid (comm)", from state on (None: gone)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses
    return stat[stat.rindex(")") + 2:].split()


def _parents() -> dict[int, int]:
    out: dict[int, int] = {}
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:   # else gone meanwhile
            out[int(entry.name)] = int(fields[1])
    return out


def _rss_bytes(pid: int) -> int:
    try:
        for line in (_PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _tree(roots: Iterable[int]) -> set[int]:
    """``roots`` and all their descendants, each process once."""
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    seen: set[int] = set()
    todo = [p for p in roots if p in parents]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, ()))
    return seen


def tree_rss_bytes(roots: Iterable[int]) -> int:
    """The resident bytes of ``roots`` and all their descendants, each process once."""
    return sum(_rss_bytes(p) for p in _tree(roots))


def _cpu_ticks(pid: int) -> int | None:
    """User and system CPU time of ``pid`` so far, in clock ticks (None: gone)."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[11]) + int(fields[12])   # utime, stime


class RssSampler(threading.Thread):
    """Samples ``tree_rss_bytes(roots())`` every ``every`` seconds until closed."""

    def __init__(self, roots: Callable[[], list[int]], every: float = 0.25) -> None:
        super().__init__(name="bench-rss", daemon=True)
        self.roots = roots
        self.every = every
        self.peak: int | None = None if not _PROC.is_dir() else 0
        self._halt = threading.Event()
        if self.peak is not None:
            self.start()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                now = tree_rss_bytes(self.roots())
            except Exception:   # a system between processes; the next sample
                now = 0
            self.peak = max(self.peak or 0, now)
            self._halt.wait(self.every)

    def close(self) -> int | None:
        """Stop sampling; the peak in bytes (None: no /proc here)."""
        self._halt.set()
        if self.is_alive():
            self.join()
        return self.peak


class CpuSampler(threading.Thread):
    """The CPU time the processes of ``roots()`` spend from the start until ``close``.

    Each process counts from its value at the first sample (0 for one started later) to
    its value at its last sample; a process that exits between samples loses at most
    one interval of its time."""

    def __init__(self, roots: Callable[[], list[int]], every: float = 0.25) -> None:
        super().__init__(name="bench-cpu", daemon=True)
        self.roots = roots
        self.every = every
        self._first: dict[int, int] = {}
        self._last: dict[int, int] = {}
        self._sampled = False
        self._halt = threading.Event()
        if _PROC.is_dir():
            self._sample()    # the baseline, before the caller goes on
            self.start()

    def _sample(self) -> None:
        try:
            pids = _tree(self.roots())
        except Exception:   # a system between processes; the next sample
            return
        for pid in pids:
            ticks = _cpu_ticks(pid)
            if ticks is None:
                continue
            # a process seen at the baseline counts from there; a later one from its start
            self._first.setdefault(pid, ticks if not self._sampled else 0)
            self._last[pid] = ticks
        self._sampled = True

    def run(self) -> None:
        while not self._halt.wait(self.every):
            self._sample()

    def close(self) -> float | None:
        """Stop sampling; CPU seconds spent (None: no /proc here)."""
        if not _PROC.is_dir():
            return None
        self._halt.set()
        if self.is_alive():
            self.join()
            self._sample()
        ticks = sum(self._last[p] - self._first[p] for p in self._last)
        return ticks / os.sysconf("SC_CLK_TCK")
