"""Peak resident memory of a system: every process of it, sampled from /proc.

A system names the roots of its processes (``Running.pids``); the sampler adds up the
resident set (VmRSS) of each root and all its descendants, a few times a second, and
keeps the peak. Linux only: elsewhere the peak is None and the report says so.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["RssSampler", "tree_rss_bytes"]

_PROC = Path("/proc")


def _parents() -> dict[int, int]:
    out: dict[int, int] = {}
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        try:
            stat = (_PROC / entry.name / "stat").read_text()
        except OSError:
            continue   # gone meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rindex(")") + 2:].split()
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


def tree_rss_bytes(roots: Iterable[int]) -> int:
    """The resident bytes of ``roots`` and all their descendants, each process once."""
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
    return sum(_rss_bytes(p) for p in seen)


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
