"""A task's counters: what its summary, its progress file and the driver's live view show
(docs/cli.md lists them). Below every other runtime module, which counts into it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["TaskStats"]


@dataclass
class TaskStats:
    task_id: int
    attempt: int = 0
    generation: int = 0
    restored_version: int = 0
    checkpoints: int = 0
    processed: int = 0
    emitted: int = 0
    buffered: int = 0
    max_buffer_bytes: int = 0
    overflowed: int = 0                  # early arrivals skipped past the buffer's bound (R8)
    rereads: int = 0                     # channels read again from an overflow offset
    stale: int = 0
    fenced: int = 0
    # Records this run's checkpoints committed to the dead-letter topic, over all its
    # attempts, counted as sink_records is: those whose function raised, and late ones
    dead_letters: int = 0
    late: int = 0                        # records in no open window (W6)
    lookup_misses: int = 0               # records a lookup found no row for (this attempt)
    rewinds: int = 0
    replayed_changes: int = 0
    rebuilt_store: bool = False
    changelog_cuts: int = 0              # snapshots whose log below was deleted (C9)
    stopped: bool = False                # a stop request ended the run (sources)
    outage_restarts: int = 0             # in-place restarts after transient transport errors
    seconds: float = 0.0                 # from recovery start to the task's end
    # A source task's positions per input partition: how far it read, and what its last
    # checkpoint committed (the driver's "read" and "committed" figures)
    read_to: dict[int, int] = field(default_factory=dict)
    committed_to: dict[int, int] = field(default_factory=dict)
    # Records this run's checkpoints committed to the task's sinks, over all its attempts
    # (a retry carries the count on: runtime/progress.py), never a transaction's marker
    sink_records: int = 0
    # per-checkpoint metrics as distributions (runtime/metrics.py)
    checkpoint_metrics: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)
