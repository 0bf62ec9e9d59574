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
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .wire import ChangeLogAbort, ChangeLogCommit, ChangeLogData, ChangeLogRecord, CheckpointData

__all__ = ["Batch", "RecoveryFold", "trusts_local_store", "continued_seqs", "next_generation"]

Change = tuple[str, bytes, bytes | None]   # (store, key, value or None for a delete)


@dataclass(frozen=True, slots=True)
class Batch:
    """What one commit makes true: apply the changes and the checkpoint data at once (C1)."""

    changes: tuple[Change, ...]
    checkpoint: CheckpointData


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

    @property
    def version(self) -> int:
        return self.commit.version if self.commit is not None else 0

    def feed(self, offset: int, record: ChangeLogRecord) -> Batch | None:
        if isinstance(record, ChangeLogAbort):   # C2
            self._pending = []
            self._started = max(self._started, record.generation)
            self.generation = max(self.generation, record.generation)
            return None
        if record.generation < self._started:   # C3
            self.ignored += 1
            return None
        self.generation = max(self.generation, record.generation)
        if isinstance(record, ChangeLogData):
            self._pending.append((record.store, record.key, record.value))
            return None
        assert isinstance(record, ChangeLogCommit)
        batch = Batch(tuple(self._pending), CheckpointData(offset, record.generation,
                                                           record.version))
        self.replayed += len(self._pending)
        self._pending = []
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
