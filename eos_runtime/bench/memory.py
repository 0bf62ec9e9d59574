"""Peak resident memory and CPU time of a system: every process of it, sampled from /proc.

A system names the roots of its processes (``Running.pids``); ``TreeSampler`` finds each
root and all its descendants a few times a second, in one pass over /proc a sample: it
adds up their resident sets and keeps the peak, and adds up the CPU time each spent while
it counted. Linux only: elsewhere both are None and the report says so.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

__all__ = ["BrokerCPU", "TreeSampler", "listening_pid", "tree_rss_bytes"]

_PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after "pid (comm)", from state on (None: gone)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses
    return stat[stat.rindex(")") + 2:].split()


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _cpu_ticks(fields: list[str]) -> int:
    """A process's CPU so far (user and system), in clock ticks, from ``_stat_fields``."""
    return int(fields[11]) + int(fields[12])


def _scan() -> dict[int, tuple[int, int, int]]:
    """Every process: its parent, CPU ticks so far (user and system) and resident bytes,
    from one read of its /proc/<pid>/stat (one pass over /proc a sample)."""
    out: dict[int, tuple[int, int, int]] = {}
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        f = _stat_fields(int(entry.name))
        if f is not None:   # else gone meanwhile
            # ppid, utime + stime, rss in pages (what VmRSS counts)
            out[int(entry.name)] = (int(f[1]), _cpu_ticks(f), int(f[21]) * _PAGE)
    return out


def _comm(pid: int) -> str:
    try:
        return (_PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def classify(new: Iterable[int], parent: Mapping[int, int], known: dict[int, str],
             name: Callable[[int], str] | None = None) -> None:
    """Add to ``known`` what each process of ``new`` is (``TreeSampler.cpu_by_kind``), from
    its name and its parent's kind (``parent``: each one's parent), a parent before its
    children. Not in pid order: pids wrap around at the kernel's pid_max (32 768 here),
    and after a few benches' processes a Python worker's pid was below its daemon's,
    which was then not known yet, so every task's CPU was counted as "other"."""
    pending = set(new)
    name_of = name or _comm

    def kind(pid: int) -> None:
        if pid not in known:
            ppid = parent[pid]
            if ppid in pending:
                kind(ppid)
            own = name_of(pid)
            known[pid] = ("java" if own == "java" else "python under java"
                          if known.get(ppid) in ("java", "python under java") else "other")

    for pid in pending:
        kind(pid)


def _tree(roots: Iterable[int], procs: dict[int, tuple[int, int, int]]) -> set[int]:
    """``roots`` and all their descendants, each process once."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    seen: set[int] = set()
    todo = [p for p in roots if p in procs]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, ()))
    return seen


def tree_rss_bytes(roots: Iterable[int]) -> int:
    """The resident bytes of ``roots`` and all their descendants, each process once."""
    procs = _scan()
    return sum(procs[p][2] for p in _tree(roots, procs))


class TreeSampler(threading.Thread):
    """Samples the process tree of ``roots()`` every ``every`` seconds until closed, one
    pass over /proc a sample: the peak of its resident bytes (``peak``) and, between
    ``count_cpu`` and ``cpu_seconds``, the CPU time its processes spend.

    A process counts its CPU from its value at the first sample after ``count_cpu`` (0
    for one started later) to its value at its last sample; one that exits between
    samples loses at most one interval of its time."""

    def __init__(self, roots: Callable[[], list[int]], every: float = 0.25, *,
                 cpu: bool = False) -> None:
        super().__init__(name="bench-sampler", daemon=True)
        self.roots = roots
        self.every = every
        self.peak: int | None = None if not _PROC.is_dir() else 0
        #: The peak sample's resident bytes by kind of process (``cpu_by_kind``'s kinds):
        #: which processes a system's peak is made of, and so which of them moves it.
        self.peak_by_kind: dict[str, int] = {}
        self._first: dict[int, int] | None = None
        self._last: dict[int, int] = {}
        self._counting = False
        self._kind: dict[int, str] = {}   # each process's kind, from its first sample
        self._lock = threading.Lock()
        self._halt = threading.Event()
        if self.peak is not None:
            if cpu:
                self.count_cpu()
            self.start()

    def count_cpu(self) -> None:
        """Count CPU from now: a sample taken here is the baseline."""
        if self.peak is None:
            return
        with self._lock:
            self._first, self._last, self._counting = {}, {}, True
            self._sample(baseline=True)

    def _sample(self, *, baseline: bool = False) -> None:
        try:
            procs = _scan()
            pids = _tree(self.roots(), procs)
        except Exception:   # a system between processes; the next sample
            return
        # New processes, and those still "other": a JVM started through a script (Spark's
        # spark-class) is bash until it execs java under the same pid, and a process's
        # kind must not stay what its first sample, while it started, saw.
        again = {p for p in pids if self._kind.get(p, "other") == "other"}
        if again:
            for pid in again:
                self._kind.pop(pid, None)
            classify(again, {p: procs[p][0] for p in again}, self._kind)
        resident = sum(procs[p][2] for p in pids)
        if resident > (self.peak or 0):
            self.peak = resident
            by_kind: dict[str, int] = {}
            for pid in pids:
                kind = self._kind.get(pid, "other")
                by_kind[kind] = by_kind.get(kind, 0) + procs[pid][2]
            self.peak_by_kind = by_kind
        if not self._counting or self._first is None:
            return
        for pid in pids:
            ticks = procs[pid][1]
            # a process seen at the baseline counts from there; a later one from its start
            self._first.setdefault(pid, ticks if baseline else 0)
            self._last[pid] = ticks

    def cpu_by_kind(self) -> dict[str, float]:
        """The CPU seconds ``cpu_seconds`` counted, by kind of process: ``java`` (a JVM),
        ``python under java`` (Spark's Python daemon and workers, where the tasks run), and
        ``other`` (a driver, the raw dataflow's or a Python peer's processes)."""
        tick = os.sysconf("SC_CLK_TCK")
        out: dict[str, float] = {}
        with self._lock:
            first = self._first or {}
            for pid, last in self._last.items():
                kind = self._kind.get(pid, "other")
                out[kind] = out.get(kind, 0.0) + (last - first.get(pid, 0)) / tick
        return out

    def run(self) -> None:
        while True:
            with self._lock:
                self._sample()
            if self._halt.wait(self.every):
                return

    def cpu_seconds(self) -> float | None:
        """Stop counting CPU; the seconds spent since ``count_cpu`` (None: no /proc here,
        or never counted)."""
        if self.peak is None or self._first is None:
            return None
        with self._lock:
            if self._counting:
                self._sample()
                self._counting = False
        ticks = sum(self._last[p] - self._first.get(p, 0) for p in self._last)
        return ticks / os.sysconf("SC_CLK_TCK")

    def close(self) -> int | None:
        """Stop sampling; the peak resident bytes (None: no /proc here)."""
        self._halt.set()
        if self.is_alive():
            self.join()
        return self.peak


def listening_pid(port: int) -> int | None:
    """The process listening on TCP ``port`` of this machine (None: none, or no /proc):
    the socket's inode from /proc/net/tcp and tcp6, then the process holding it."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            # local address "HEX_IP:HEX_PORT", state 0A: listening
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{f[9]}]")
    if not inodes:
        return None
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        try:
            with os.scandir(_PROC / entry.name / "fd") as fds:
                for fd in fds:
                    try:
                        if os.readlink(fd.path) in inodes:
                            return int(entry.name)
                    except OSError:
                        continue
        except OSError:
            continue
    return None


class BrokerCPU:
    """The CPU time the broker spends from ``start`` to ``spent``, where the bench's
    bootstrap address is on this machine: the process listening on its port (a remote
    broker, or none found: None). The systems' CPU per result leaves the broker out; at
    ten transactions a second, what the broker does for them is part of the cost."""

    _LOCAL = ("127.0.0.1", "localhost", "::1", "[::1]")

    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
        self.pid = (listening_pid(int(port))
                    if host in self._LOCAL and port.isdigit() else None)
        self._start: int | None = None

    def _ticks(self) -> int | None:
        f = _stat_fields(self.pid) if self.pid is not None else None
        return None if f is None else _cpu_ticks(f)

    def start(self) -> None:
        self._start = self._ticks()

    def spent(self) -> float | None:
        end = self._ticks()
        if self._start is None or end is None:
            return None
        return (end - self._start) / os.sysconf("SC_CLK_TCK")
