"""A task's counters in a file beside its pid file, for the driver's live view.

``<state dir>/<job>/task-<id>.progress`` holds the task's ``TaskStats`` as JSON, and
``generations``: each generation the task's process took, with when; the task loop ticks
it once per poll, writes it when the task takes a generation, and a last time, marked
done, when the task ends; the driver (``runner.PipelineRun.progress``) reads every
task's, and experiments draw the generations on their timelines. Best effort: a write
that fails is skipped, never the task's failure.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from .stats import TaskStats

__all__ = ["TaskProgress", "carried_counts", "read_task_progress"]


class TaskProgress:
    """A task's counters (its ``TaskStats``) in a file beside its pid file,
    ``<state dir>/<job>/task-<id>.progress``, for the driver's live view
    (``runner.PipelineRun.progress``). The task loop calls ``tick()`` once per poll (it
    rewrites the file at most every ``every`` seconds) and ``write(done=True)`` when the
    task ends. Each write replaces the file whole (write, then rename), so a reader sees
    this write or the one before; a write that fails is skipped (progress is best effort).
    """

    def __init__(self, path: str | os.PathLike[str], stats: TaskStats, every: float = 0.5) -> None:
        self.path = Path(path)
        self.stats = stats
        self.every = every
        self._next = 0.0
        self._tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        # [generation, epoch seconds first written] of each generation this task took; a
        # task writes at once when it takes one (checkpoint.Committer.on_generation)
        self.generations: list[list[float]] = []
        # [version, sink records, dead letters] a checkpoint about to commit would make
        # the counts (``carried_counts`` reads it after a crash)
        self.pending: list[int] | None = None

    def note_pending(self, version: int, sink_records: int, dead_letters: int) -> None:
        """Before a commit (``Committer.on_pending``): written at once, so a retry whose
        recovery finds that commit knows the counts it made."""
        self.pending = [version, sink_records, dead_letters]
        self.write()

    def tick(self) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.every
            self.write()

    def write(self, *, done: bool = False) -> None:
        now = time.time()
        generation = getattr(self.stats, "generation", 0)
        if generation and (not self.generations or self.generations[-1][0] != generation):
            self.generations.append([generation, round(now, 3)])
        data = {"pid": os.getpid(), "time": now, "done": done, **self.stats.as_dict(),
                "generations": self.generations, "pending": self.pending}
        try:
            self._tmp.write_text(json.dumps(data))
            os.replace(self._tmp, self.path)
        except (OSError, TypeError, ValueError):
            pass


def carried_counts(earlier: dict[str, Any] | None, recovered_version: int) -> tuple[int, int]:
    """(sink records, dead letters) an earlier attempt of this run committed (its progress
    file, ``earlier``; the driver deletes the files at a run's start), by the version the
    new attempt recovered: the counts its last commit made, noted just before that commit
    (``pending``), else the counts it had written."""
    if earlier is None:
        return 0, 0
    pending = earlier.get("pending")
    if isinstance(pending, list) and len(pending) == 3 and pending[0] == recovered_version:
        return int(pending[1]), int(pending[2])
    return (int(earlier.get("sink_records", 0) or 0),
            int(earlier.get("dead_letters", 0) or 0))


def read_task_progress(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """What ``TaskProgress`` last wrote to ``path``; None if there is no such file (yet)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
