"""Recovery as a fold over a task's change-log records (SEP-10 flow 1.x). No I/O.

Each task owns one partition of ``<job>.changelog``. It holds, in order: the
generation-start record of every (re)start (an abort record carrying the new generation
and the version it restored), the state changes of each version, and the commit record
that makes the version's checkpoint true (the task's one commit point, invariant 4).
``joblog/changelog.py`` reads the records and applies what this fold hands back to the
RocksDB store; the rules are here.

Rules:

C1  (invariant 4) A version's changes count once its commit record is read: they are
    handed back as one batch, with the checkpoint data (commit offset, generation,
    version) that goes in the same RocksDB write.
C2  An abort record (a generation's start, or an explicit abort) voids every change
    read since the last commit: a crashed generation's tail never counts.
C3  (invariant 5) Every record in the log was written by the newest generation of its
    time (exactly-once writes go through a fenced producer), so the last commit read is
    the truth, and the highest generation read is the one the next start must exceed.
    A change or commit record of a generation below one already started is a zombie's
    write (possible only where nothing fences it: an at-least-once job's plain
    producer): it is ignored, never applied, so the newest generation's view wins.
C4  A local store is trusted, and only the log after its commit replayed, iff the record
    at its checkpoint's commit offset is a commit record of the same generation and
    version. Anything else (an empty store, a store of another log, a store that ran
    ahead of a truncated log) is wiped and rebuilt from the whole log.
C5  (sequence numbers, SEP-10 CheckpointOutputSeq) A restarted task continues each
    output partition's sequence from its last commit.
C6  (invariant 5) A new generation exceeds both the highest one in the change log and
    the newest one registered at the fence: an attempt may register a generation and
    die before its start record reaches the log (a torn append), and reusing that
    number would put two instances in one generation.
C7  (snapshots) A base record starts a snapshot: the data records after it, up to its
    version's commit, are the task's whole state. That commit's batch *replaces* the
    state instead of adding to it, so a fold started at the base record ends where a fold
    of the whole log does. An abort before the commit voids the snapshot like any
    version (C2), and a zombie's base is ignored like its other records (C3).
C8  (the change log's bound) A task writes a snapshot at a checkpoint once its log holds
    ``min_records`` plus twice its last snapshot's size, both in changes (a batch record
    counts as the changes it holds, any other offset as one): the log stays within a
    constant factor of the live state plus ``min_records`` however long the job runs or
    idles, and a snapshot costs at most half of what was written since the last one. A
    restarted task counts the log it inherited by offsets, and snapshots after
    ``min_records`` (its last snapshot's size unknown). Only a
    fenced writer snapshots (G3): a zombie's snapshot would be ignored (C3), but its
    deletion below it would take its successor's records with it.
C9  Once a snapshot's commit is sealed, the log below its base record may be deleted. The
    commit records deleted with it may hold output ranges (local log, exactly-once: what
    a committed reader shows); the snapshot's commit carries them forward, merged
    (``carried_ranges``), so the union of ranges the log holds never shrinks. Past
    ``MAX_CARRIED_RANGES`` ranges no snapshot is written (the log then grows as before).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .wire import (
    ChangeLogAbort,
    ChangeLogBase,
    ChangeLogBatch,
    ChangeLogCommit,
    ChangeLogData,
    ChangeLogRecord,
    CheckpointData,
    OutputRange,
)

__all__ = ["Batch", "RecoveryFold", "trusts_local_store", "continued_seqs", "next_generation",
           "snapshot_due", "merged_ranges", "carried_ranges", "SNAPSHOT_MIN_RECORDS",
           "MAX_CARRIED_RANGES"]

#: C8's ``min_records``: change-log offsets a task writes before its first snapshot. An
#: idle exactly-once task writes about two a second at a 1 s commit interval on Kafka (a
#: commit record and its transaction marker), so its log is cut about every 80 minutes
#: and a recovery without a local store reads at most this many records plus twice the
#: state's.
SNAPSHOT_MIN_RECORDS = 10_000

#: C9: the most output ranges a snapshot's commit record carries forward (about 30 bytes
#: each). Only a local-log exactly-once sink task has any; they merge when the task's
#: appends to a partition are contiguous, which they are unless tasks share it.
MAX_CARRIED_RANGES = 8_192

Change = tuple[str, bytes, bytes | None]   # (store, key, value or None for a delete)


@dataclass(frozen=True, slots=True)
class Batch:
    """What one commit makes true: apply the changes and the checkpoint data at once (C1)."""

    changes: tuple[Change, ...]
    checkpoint: CheckpointData
    replace: bool = False                       # a snapshot: the changes are the whole state (C7)


@dataclass
class RecoveryFold:
    """Feed it the change log in order; it says what counts."""

    generation: int = 0                         # highest generation read (C3)
    commit: ChangeLogCommit | None = None       # the last commit record (C3)
    commit_offset: int = -1
    replayed: int = 0                           # changes handed back in batches
    ignored: int = 0                            # zombie records skipped (C3)
    _pending: list[Change] = field(default_factory=list)
    _started: int = 0                           # highest generation whose start was read
    _snapshot: bool = False                     # a base record opened the pending version (C7)

    @property
    def version(self) -> int:
        return self.commit.version if self.commit is not None else 0

    def feed(self, offset: int, record: ChangeLogRecord) -> Batch | None:
        if isinstance(record, ChangeLogAbort):   # C2
            self._pending, self._snapshot = [], False
            self._started = max(self._started, record.generation)
            self.generation = max(self.generation, record.generation)
            return None
        if record.generation < self._started:   # C3
            self.ignored += 1
            return None
        self.generation = max(self.generation, record.generation)
        if isinstance(record, ChangeLogBatch):
            self._pending += record.changes()
            return None
        if isinstance(record, ChangeLogData):
            self._pending.append((record.store, record.key, record.value))
            return None
        if isinstance(record, ChangeLogBase):   # C7: what came before is superseded
            self._pending, self._snapshot = [], True
            return None
        assert isinstance(record, ChangeLogCommit)
        batch = Batch(tuple(self._pending), CheckpointData(offset, record.generation,
                                                           record.version), self._snapshot)
        self.replayed += len(self._pending)
        self._pending, self._snapshot = [], False
        self.commit, self.commit_offset = record, offset
        return batch

    def resume_from(self, local: CheckpointData, commit: ChangeLogCommit) -> None:
        """Start the fold at a trusted local store's commit (C4)."""
        self.generation = max(self.generation, local.generation)
        self.commit, self.commit_offset = commit, local.changelog_offset


def trusts_local_store(local: CheckpointData | None, found: object) -> bool:
    """C4: ``found`` is the change-log record at the local checkpoint's commit offset."""
    return (local is not None and isinstance(found, ChangeLogCommit)
            and found.generation == local.generation and found.version == local.version)


def continued_seqs(commit: ChangeLogCommit | None, topic: str, partitions: int) -> list[int]:
    """C5: the next sequence number of each output partition of ``topic``."""
    seqs = [0] * partitions
    if commit is not None:
        for o in commit.outputs:
            if o.topic == topic and 0 <= o.partition < partitions:
                seqs[o.partition] = o.seq
    return seqs


def next_generation(log_generation: int, registered: int) -> int:
    """C6."""
    return max(log_generation, registered) + 1


def snapshot_due(log_records: int, last_snapshot: int, min_records: int = SNAPSHOT_MIN_RECORDS
                 ) -> bool:
    """C8: the task's change log holds ``log_records`` now, in changes; its last snapshot
    wrote ``last_snapshot`` changes (0 before the first)."""
    return log_records >= min_records + 2 * last_snapshot


def merged_ranges(ranges: Iterable[OutputRange]) -> tuple[OutputRange, ...]:
    """Every offset the given ranges cover, as the fewest ranges: sorted, and touching or
    overlapping ranges of one partition merged (what a committed reader shows, C9)."""
    merged: list[OutputRange] = []
    for r in sorted(ranges, key=lambda r: (r.topic, r.partition, r.first, r.last)):
        last = merged[-1] if merged else None
        if last is not None and (last.topic, last.partition) == (r.topic, r.partition) \
                and r.first <= last.last + 1:
            if r.last > last.last:
                merged[-1] = OutputRange(r.topic, r.partition, last.first, r.last)
        else:
            merged.append(r)
    return tuple(merged)


def carried_ranges(ranges: Iterable[OutputRange]) -> tuple[OutputRange, ...] | None:
    """C9: the ranges a snapshot's commit carries forward (``merged_ranges``); None past
    ``MAX_CARRIED_RANGES``."""
    merged = merged_ranges(ranges)
    return merged if len(merged) <= MAX_CARRIED_RANGES else None
