"""The protocol's records: frozen dataclasses, the record types of the wire format
and the integer ranges (``docs/protocol.md``, "Wire formats"). No I/O, no encoding."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "FORMAT_VERSION",
    "RecordType",
    "Envelope",
    "DataBatch",
    "Marker",
    "Restore",
    "ChangeLogData",
    "ChangeLogBatch",
    "ParentCheckpoint",
    "InputPosition",
    "OutputSeq",
    "ProducerFence",
    "OutputRange",
    "ChangeLogCommit",
    "ChangeLogAbort",
    "ChangeLogBase",
    "CheckpointData",
    "RunStart",
    "StopRequest",
    "Lease",
    "LEASE_ACTIONS",
    "ChannelRecord",
    "ControlRecord",
    "ChangeLogRecord",
    "AnyRecord",
    "INT32",
    "INT64",
    "OPTIONAL_BYTES",
    "INTEGER",
]

FORMAT_VERSION = 1

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
# The types a batch's keys and values, and its timestamps, may have (checked as sets).
OPTIONAL_BYTES = frozenset((bytes, type(None)))
INTEGER = frozenset((int,))


class RecordType:
    """The second byte of every record. Values are part of the wire format."""

    DATA = 1            # channel: a user message inside its envelope
    MARKER = 2          # channel: checkpoint command message
    RESTORE = 3         # channel: restore checkpoint command
    DATA_BATCH = 4      # channel: many user messages of one producer, generation, version
    CL_DATA = 16        # change log: one staged state change
    CL_COMMIT = 17      # change log: commit message (the task's commit point)
    CL_ABORT = 18       # change log: abort message
    CL_BASE = 19        # change log: a snapshot starts; state is what follows (C7)
    CL_BATCH = 20       # change log: many staged changes of one store, in one record
    CHECKPOINT_DATA = 32  # RocksDB: pointer from local state to the change log
    RUN_START = 48      # control topic: the driver started run N of the job
    STOP = 49           # control topic: stop run N gracefully (final checkpoint)
    LEASE = 50          # control topic: a driver takes, renews or releases the job's lease
    RUN_END = 51        # control topic: how run N ended (finished, stopped, failed, cancelled)


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class Envelope:
    """A user message as it travels in a channel (SEP-10 "Message Protocol")."""

    producer_id: int
    generation: int
    version: int
    seq: int
    key: bytes | None
    value: bytes | None
    timestamp: int


@dataclass(frozen=True, slots=True)
class DataBatch:
    """Messages ``seq``, ``seq + 1``, ... of one producer, generation and version, in one
    channel record: message i is ``(keys[i], values[i], timestamps[i])``.

    Not in SEP-10, whose unit is one message. Everything the protocol decides about a
    message depends only on its producer, generation and version, which a batch's
    messages share, so a reader decides once per batch (one offset, one aligner
    decision) exactly as it would for each message. Never empty."""

    producer_id: int
    generation: int
    version: int
    seq: int                           # the first message's sequence number
    keys: tuple[bytes | None, ...]
    values: tuple[bytes | None, ...]
    timestamps: tuple[int, ...]

    @property
    def last_seq(self) -> int:
        return self.seq + len(self.keys) - 1


@dataclass(frozen=True, slots=True)
class Marker:
    """Checkpoint command: every message of ``producer_id`` before it is of version
    <= ``version``. ``watermark``: the producer's event-time watermark at ``version``
    (W3), None where it keeps none (then the record is as SEP-10's, four fields).
    ``idle``: the producer holds no event time back at ``version`` (W7): none of its
    inputs brought a record within its ``idle_after``; a sixth field, written only when
    true."""

    producer_id: int
    generation: int
    version: int
    seq: int
    watermark: int | None = None
    idle: bool = False


@dataclass(frozen=True, slots=True)
class Restore:
    """Restore checkpoint command: ``producer_id`` restarted as ``generation`` from ``version``.

    SEP-10 carries only generation and version; the producer id is added so a
    downstream task with several producers knows whose messages to fence.
    """

    producer_id: int
    generation: int
    version: int


@dataclass(frozen=True, slots=True)
class ChangeLogData:
    """One state change. ``value`` None is a delete. ``store`` names the task's store.

    SEP-10 carries generation, key and value; the version is added so recovery can
    tell which checkpoint a change was staged for.
    """

    generation: int
    version: int
    store: str
    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class ChangeLogBatch:
    """Changes ``(keys[i], values[i])`` of one store, generation and version, in one
    change-log record. Never empty.

    Not in SEP-10, whose unit is one change. Recovery decides by generation and version
    only, which a batch's changes share, so folding a batch is folding its changes in
    order; one record instead of one per key spares the producer a call and a delivery
    report per change, which at 10⁶ keys were about a quarter of the counting stage's
    time (under cProfile)."""

    generation: int
    version: int
    store: str
    keys: tuple[bytes, ...]
    values: tuple[bytes | None, ...]

    def changes(self) -> list[tuple[str, bytes, bytes | None]]:
        store = self.store
        return [(store, k, v) for k, v in zip(self.keys, self.values, strict=True)]


@dataclass(frozen=True, slots=True)
class ParentCheckpoint:
    """SEP-10 ParentCheckpointMetadata: what a producer had reached in this input partition."""

    producer_id: int
    generation: int
    version: int
    seq: int
    resume_offset: int
    watermark: int | None = None       # what the producer's marker of ``version`` said (W4)
    # its latest marker said idle (W7; at-least-once, whose idle source sends no more
    # markers until it reads again): a seventh field, written only when true
    idle: bool = False


@dataclass(frozen=True, slots=True)
class InputPosition:
    """SEP-10 PartitionMetadata: where to resume an input partition, and its producers' state."""

    topic: str
    partition: int
    offset: int
    parents: tuple[ParentCheckpoint, ...] = ()


@dataclass(frozen=True, slots=True)
class OutputSeq:
    """SEP-10 CheckpointOutputSeq: the last sequence number written to an output partition."""

    topic: str
    partition: int
    seq: int


@dataclass(frozen=True, slots=True)
class ProducerFence:
    """Restore knowledge (protocol notes, invariant 6): ignore ``producer_id``'s messages of
    generation < ``generation`` with version > ``version``, for good."""

    producer_id: int
    generation: int
    version: int


@dataclass(frozen=True, slots=True)
class OutputRange:
    """Offsets [first, last] of ``topic[partition]`` this checkpoint made visible to the
    project's committed reader (sink output on a log without transactions)."""

    topic: str
    partition: int
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class ChangeLogCommit:
    """Change log commit message: checkpoint ``version`` of this task is true from here on."""

    generation: int
    version: int
    outputs: tuple[OutputSeq, ...] = ()
    inputs: tuple[InputPosition, ...] = ()
    fences: tuple[ProducerFence, ...] = ()
    output_ranges: tuple[OutputRange, ...] = ()
    watermark: int | None = None       # the task's event-time watermark at ``version`` (W2, W4)


@dataclass(frozen=True, slots=True)
class ChangeLogAbort:
    """Change log abort message: ``generation`` discards every change after the last commit.

    ``version`` is the checkpoint version the task restored to (SEP-10 carries only
    the generation; the version makes the log readable on its own).
    """

    generation: int
    version: int


@dataclass(frozen=True, slots=True)
class ChangeLogBase:
    """A snapshot of the task's whole state starts here (rule C7, docs/protocol.md): the
    data records up to the next commit of ``version`` are every live key, so recovery may
    start at this record and the log below it may be deleted. Not in SEP-10, whose change
    log Kafka compacts; ours also holds commit records, which compaction cannot merge."""

    generation: int
    version: int


@dataclass(frozen=True, slots=True)
class CheckpointData:
    """Stored in RocksDB with the state: the change-log offset this state corresponds to."""

    changelog_offset: int
    generation: int
    version: int


@dataclass(frozen=True, slots=True)
class RunStart:
    """The driver started run ``run`` of the job (``protocol/runs.py``). ``layout`` names
    each task's stage, input and stores, so a later run can refuse a changed job."""

    run: int
    started_ms: int
    bounded: bool
    layout: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StopRequest:
    """Stop run ``run`` gracefully: sources take their final checkpoint and end the run."""

    run: int
    requested_ms: int
    reason: str


#: What a ``Lease`` record does (``protocol/lease.py`` folds them).
LEASE_ACTIONS = ("acquire", "renew", "release")


@dataclass(frozen=True, slots=True)
class Lease:
    """A driver's claim on the job (one driver per job, ``protocol/lease.py``).

    ``owner`` is a random token of the driver process; ``pid`` and ``host`` are for the
    person the refusal is shown to. ``at_ms`` is the writer's clock; the lease lapses
    ``timeout_ms`` after the holder's last record. ``take_over`` on an acquire takes the
    lease from a live holder."""

    run: int
    action: str
    owner: str
    pid: int
    host: str
    at_ms: int
    timeout_ms: int
    take_over: bool = False


#: How a run ended (``RunEnd.outcome``).
RUN_OUTCOMES = ("finished", "stopped", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How run ``run`` ended, written by its driver as it ends (for operators: ``eos
    jobs``; no rule reads it). ``detail``: a failed run's error, one line; else empty. A
    driver that was killed writes none."""

    run: int
    ended_ms: int
    outcome: str
    detail: str


ChannelRecord = Envelope | DataBatch | Marker | Restore
ControlRecord = RunStart | StopRequest | Lease | RunEnd
ChangeLogRecord = ChangeLogData | ChangeLogBatch | ChangeLogCommit | ChangeLogAbort | ChangeLogBase
AnyRecord = ChannelRecord | ChangeLogRecord | CheckpointData | ControlRecord
