"""Wire formats of the exactly-once protocol (SEP-10 "Protocol Design", extended).

Every record the protocol writes is ``FORMAT_VERSION`` (1 byte), a record type
(1 byte), then one msgpack array holding the fields in the order documented in
``docs/protocol.md``. The two leading bytes let a reader tell a channel's data
envelope from a marker or a restore command without unpacking it, and let a
later release change a layout without guessing.

Rules this module keeps:

* Decoding never lets a backend error out: any malformed, truncated, unknown-type
  or unknown-version record raises ``WireFormatError`` naming topic, partition and
  offset where the caller passes them.
* Encoding checks ranges (SEP-10's INT32 / INT64 fields) so a record that would
  not decode is never written.
* Records are frozen dataclasses. The hot path sends a channel's messages as data
  batches (``DataBatch``: many messages of one producer, generation and version in one
  record), built by ``encode_batch`` from plain lists, so that encoding, producing,
  fetching and decoding are paid per batch, not per message; ``encode_data`` builds one
  data envelope without an object.

No I/O happens here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import msgpack

from ..errors import WireFormatError

__all__ = [
    "FORMAT_VERSION",
    "RecordType",
    "Envelope",
    "DataBatch",
    "Marker",
    "Restore",
    "ChangeLogData",
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
    "encode",
    "encode_data",
    "encode_batch",
    "decode",
    "decode_channel",
    "decode_changelog",
    "decode_checkpoint_data",
    "decode_control",
]

FORMAT_VERSION = 1

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


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
    CHECKPOINT_DATA = 32  # RocksDB: pointer from local state to the change log
    RUN_START = 48      # control topic: the driver started run N of the job
    STOP = 49           # control topic: stop run N gracefully (final checkpoint)
    LEASE = 50          # control topic: a driver takes, renews or releases the job's lease


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
    <= ``version``."""

    producer_id: int
    generation: int
    version: int
    seq: int


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
class ParentCheckpoint:
    """SEP-10 ParentCheckpointMetadata: what a producer had reached in this input partition."""

    producer_id: int
    generation: int
    version: int
    seq: int
    resume_offset: int


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


ChannelRecord = Envelope | DataBatch | Marker | Restore
ControlRecord = RunStart | StopRequest | Lease
ChangeLogRecord = ChangeLogData | ChangeLogCommit | ChangeLogAbort | ChangeLogBase
_AnyRecord = ChannelRecord | ChangeLogRecord | CheckpointData | ControlRecord


# --------------------------------------------------------------------------- encoding

_packb: Callable[[Any], bytes] = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def _header(record_type: int) -> bytes:
    return bytes((FORMAT_VERSION, record_type))


_H_DATA = _header(RecordType.DATA)
_H_BATCH = _header(RecordType.DATA_BATCH)
_OPT_BYTES = frozenset((bytes, type(None)))
_INT = frozenset((int,))


def _check(value: int, bounds: tuple[int, int], name: str) -> int:
    if type(value) is not int or not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{name}={value!r} is not an integer in [{bounds[0]}, {bounds[1]}]")
    return value


def encode_data(producer_id: int, generation: int, version: int, seq: int,
                key: bytes | None, value: bytes | None, timestamp: int) -> bytes:
    """The bytes of a data envelope, built without an ``Envelope`` object (hot path)."""
    _check(producer_id, INT32, "producer_id")
    _check(generation, INT32, "generation")
    _check(version, INT64, "version")
    _check(seq, INT64, "seq")
    _check(timestamp, INT64, "timestamp")
    if key is not None and not isinstance(key, bytes):
        raise ValueError(f"key must be bytes or None, not {type(key).__name__}")
    if value is not None and not isinstance(value, bytes):
        raise ValueError(f"value must be bytes or None, not {type(value).__name__}")
    return _H_DATA + _packb((producer_id, generation, version, seq, key, value, timestamp))


def encode_batch(producer_id: int, generation: int, version: int, seq: int,
                 keys: list[bytes | None] | tuple[bytes | None, ...],
                 values: list[bytes | None] | tuple[bytes | None, ...],
                 timestamps: list[int] | tuple[int, ...]) -> bytes:
    """The bytes of a data batch, from plain lists (hot path: no ``DataBatch`` object)."""
    _check(producer_id, INT32, "producer_id")
    _check(generation, INT32, "generation")
    _check(version, INT64, "version")
    _check(seq, INT64, "seq")
    n = len(keys)
    if n == 0 or len(values) != n or len(timestamps) != n:
        raise ValueError(f"a data batch needs as many keys, values and timestamps, at least "
                         f"one (got {len(keys)}, {len(values)}, {len(timestamps)})")
    _check(seq + n - 1, INT64, "last seq")
    if not {type(k) for k in keys} <= _OPT_BYTES or not {type(v) for v in values} <= _OPT_BYTES:
        raise ValueError("batch keys and values must be bytes or None")
    if not {type(t) for t in timestamps} <= _INT or min(timestamps) < INT64[0] or \
            max(timestamps) > INT64[1]:
        raise ValueError(f"batch timestamps must be integers in [{INT64[0]}, {INT64[1]}]")
    return _H_BATCH + _packb((producer_id, generation, version, seq, keys, values, timestamps))


def encode(record: ChannelRecord | ChangeLogRecord | CheckpointData | ControlRecord) -> bytes:
    """The bytes of any protocol record."""
    match record:
        case Envelope():
            return encode_data(record.producer_id, record.generation, record.version,
                               record.seq, record.key, record.value, record.timestamp)
        case DataBatch():
            return encode_batch(record.producer_id, record.generation, record.version,
                                record.seq, record.keys, record.values, record.timestamps)
        case Marker(producer_id, generation, version, seq):
            fields: list[Any] = [_check(producer_id, INT32, "producer_id"),
                                 _check(generation, INT32, "generation"),
                                 _check(version, INT64, "version"), _check(seq, INT64, "seq")]
            return _header(RecordType.MARKER) + _packb(fields)
        case Restore(producer_id, generation, version):
            fields = [_check(producer_id, INT32, "producer_id"),
                      _check(generation, INT32, "generation"), _check(version, INT64, "version")]
            return _header(RecordType.RESTORE) + _packb(fields)
        case ChangeLogData(generation, version, store, key, value):
            if not isinstance(store, str) or not isinstance(key, bytes) or not (
                    value is None or isinstance(value, bytes)):
                raise ValueError("change-log data needs store: str, key: bytes, "
                                 "value: bytes | None")
            fields = [_check(generation, INT32, "generation"), _check(version, INT64, "version"),
                      store, key, value]
            return _header(RecordType.CL_DATA) + _packb(fields)
        case ChangeLogCommit():
            return _header(RecordType.CL_COMMIT) + _packb(_commit_fields(record))
        case ChangeLogAbort(generation, version):
            fields = [_check(generation, INT32, "generation"), _check(version, INT64, "version")]
            return _header(RecordType.CL_ABORT) + _packb(fields)
        case ChangeLogBase(generation, version):
            fields = [_check(generation, INT32, "generation"), _check(version, INT64, "version")]
            return _header(RecordType.CL_BASE) + _packb(fields)
        case CheckpointData(changelog_offset, generation, version):
            fields = [_check(changelog_offset, INT64, "changelog_offset"),
                      _check(generation, INT32, "generation"), _check(version, INT64, "version")]
            return _header(RecordType.CHECKPOINT_DATA) + _packb(fields)
        case RunStart(run, started_ms, bounded, layout):
            if type(bounded) is not bool or not all(isinstance(x, str) for x in layout):
                raise ValueError("run start needs bounded: bool and layout: strings")
            fields = [_check(run, INT32, "run"), _check(started_ms, INT64, "started_ms"),
                      bounded, list(layout)]
            return _header(RecordType.RUN_START) + _packb(fields)
        case StopRequest(run, requested_ms, reason):
            if not isinstance(reason, str):
                raise ValueError("stop request needs reason: str")
            fields = [_check(run, INT32, "run"), _check(requested_ms, INT64, "requested_ms"),
                      reason]
            return _header(RecordType.STOP) + _packb(fields)
        case Lease(run, action, owner, pid, host, at_ms, timeout_ms, take_over):
            if action not in LEASE_ACTIONS or not isinstance(owner, str) or not isinstance(
                    host, str) or type(take_over) is not bool:
                raise ValueError(f"lease needs action in {LEASE_ACTIONS}, owner and host: str, "
                                 f"take_over: bool")
            fields = [_check(run, INT32, "run"), action, owner, _check(pid, INT32, "pid"), host,
                      _check(at_ms, INT64, "at_ms"), _check(timeout_ms, INT64, "timeout_ms"),
                      take_over]
            return _header(RecordType.LEASE) + _packb(fields)
    raise TypeError(f"not a protocol record: {record!r}")


def _commit_fields(c: ChangeLogCommit) -> list[Any]:
    def text(s: object, name: str) -> str:
        if not isinstance(s, str):
            raise ValueError(f"{name} must be str, not {type(s).__name__}")
        return s

    outputs = [[text(o.topic, "topic"), _check(o.partition, INT32, "partition"),
                _check(o.seq, INT64, "seq")] for o in c.outputs]
    inputs = [[text(i.topic, "topic"), _check(i.partition, INT32, "partition"),
               _check(i.offset, INT64, "offset"),
               [[_check(p.producer_id, INT32, "producer_id"),
                 _check(p.generation, INT32, "generation"), _check(p.version, INT64, "version"),
                 _check(p.seq, INT64, "seq"), _check(p.resume_offset, INT64, "resume_offset")]
                for p in i.parents]]
              for i in c.inputs]
    fences = [[_check(f.producer_id, INT32, "producer_id"),
               _check(f.generation, INT32, "generation"), _check(f.version, INT64, "version")]
              for f in c.fences]
    ranges = [[text(r.topic, "topic"), _check(r.partition, INT32, "partition"),
               _check(r.first, INT64, "first"), _check(r.last, INT64, "last")]
              for r in c.output_ranges]
    return [_check(c.generation, INT32, "generation"), _check(c.version, INT64, "version"),
            outputs, inputs, fences, ranges]


# --------------------------------------------------------------------------- decoding


class _Malformed(Exception):
    """Internal: raised by the field readers, turned into WireFormatError with a location."""


def _int(v: object, bounds: tuple[int, int], name: str) -> int:
    if type(v) is not int or not bounds[0] <= v <= bounds[1]:
        raise _Malformed(f"field {name} is {v!r}, expected an integer in "
                         f"[{bounds[0]}, {bounds[1]}]")
    return v


def _bin(v: object, name: str, *, optional: bool) -> bytes | None:
    if v is None and optional:
        return None
    if type(v) is not bytes:
        raise _Malformed(f"field {name} is {type(v).__name__}, expected bytes")
    return v


def _str(v: object, name: str) -> str:
    if type(v) is not str:
        raise _Malformed(f"field {name} is {type(v).__name__}, expected str")
    return v


def _array(v: object, n: int | None, name: str) -> list[Any]:
    if type(v) is not list or (n is not None and len(v) != n):
        want = "an array" if n is None else f"an array of {n}"
        got = f"{len(v)} items" if type(v) is list else type(v).__name__
        raise _Malformed(f"{name} is {got}, expected {want}")
    return v


def _read_data(f: list[Any]) -> Envelope:
    _array(f, 7, "data envelope")
    return Envelope(_int(f[0], INT32, "producer_id"), _int(f[1], INT32, "generation"),
                    _int(f[2], INT64, "version"), _int(f[3], INT64, "seq"),
                    _bin(f[4], "key", optional=True), _bin(f[5], "value", optional=True),
                    _int(f[6], INT64, "timestamp"))


def _read_batch(f: list[Any]) -> DataBatch:
    _array(f, 7, "data batch")
    keys = _array(f[4], None, "batch keys")
    values = _array(f[5], None, "batch values")
    stamps = _array(f[6], None, "batch timestamps")
    n = len(keys)
    if n == 0 or len(values) != n or len(stamps) != n:
        raise _Malformed(f"data batch holds {len(keys)} keys, {len(values)} values and "
                         f"{len(stamps)} timestamps, expected as many of each, at least one")
    if not {type(k) for k in keys} <= _OPT_BYTES:
        raise _Malformed("a batch key is not bytes or nil")
    if not {type(v) for v in values} <= _OPT_BYTES:
        raise _Malformed("a batch value is not bytes or nil")
    if not {type(t) for t in stamps} <= _INT or min(stamps) < INT64[0] or \
            max(stamps) > INT64[1]:
        raise _Malformed(f"a batch timestamp is not an integer in [{INT64[0]}, {INT64[1]}]")
    seq = _int(f[3], INT64, "seq")
    _int(seq + n - 1, INT64, "last seq")
    return DataBatch(_int(f[0], INT32, "producer_id"), _int(f[1], INT32, "generation"),
                     _int(f[2], INT64, "version"), seq, tuple(keys), tuple(values), tuple(stamps))


def _read_marker(f: list[Any]) -> Marker:
    _array(f, 4, "marker")
    return Marker(_int(f[0], INT32, "producer_id"), _int(f[1], INT32, "generation"),
                  _int(f[2], INT64, "version"), _int(f[3], INT64, "seq"))


def _read_restore(f: list[Any]) -> Restore:
    _array(f, 3, "restore command")
    return Restore(_int(f[0], INT32, "producer_id"), _int(f[1], INT32, "generation"),
                   _int(f[2], INT64, "version"))


def _read_cl_data(f: list[Any]) -> ChangeLogData:
    _array(f, 5, "change-log data")
    return ChangeLogData(_int(f[0], INT32, "generation"), _int(f[1], INT64, "version"),
                         _str(f[2], "store"), _bin(f[3], "key", optional=False),  # type: ignore[arg-type]
                         _bin(f[4], "value", optional=True))


def _read_commit(f: list[Any]) -> ChangeLogCommit:
    _array(f, 6, "change-log commit")
    outputs = tuple(
        OutputSeq(_str(o[0], "output topic"), _int(o[1], INT32, "output partition"),
                  _int(o[2], INT64, "output seq"))
        for o in (_array(x, 3, "output") for x in _array(f[2], None, "outputs")))
    inputs = []
    for x in _array(f[3], None, "inputs"):
        i = _array(x, 4, "input")
        parents = tuple(
            ParentCheckpoint(_int(p[0], INT32, "parent producer_id"),
                             _int(p[1], INT32, "parent generation"),
                             _int(p[2], INT64, "parent version"), _int(p[3], INT64, "parent seq"),
                             _int(p[4], INT64, "parent resume_offset"))
            for p in (_array(y, 5, "parent") for y in _array(i[3], None, "parents")))
        inputs.append(InputPosition(_str(i[0], "input topic"), _int(i[1], INT32, "input partition"),
                                    _int(i[2], INT64, "input offset"), parents))
    fences = tuple(
        ProducerFence(_int(p[0], INT32, "fence producer_id"), _int(p[1], INT32, "fence generation"),
                      _int(p[2], INT64, "fence version"))
        for p in (_array(y, 3, "fence") for y in _array(f[4], None, "fences")))
    ranges = tuple(
        OutputRange(_str(r[0], "range topic"), _int(r[1], INT32, "range partition"),
                    _int(r[2], INT64, "range first"), _int(r[3], INT64, "range last"))
        for r in (_array(y, 4, "output range") for y in _array(f[5], None, "output_ranges")))
    return ChangeLogCommit(_int(f[0], INT32, "generation"), _int(f[1], INT64, "version"),
                           outputs, tuple(inputs), fences, ranges)


def _read_abort(f: list[Any]) -> ChangeLogAbort:
    _array(f, 2, "change-log abort")
    return ChangeLogAbort(_int(f[0], INT32, "generation"), _int(f[1], INT64, "version"))


def _read_base(f: list[Any]) -> ChangeLogBase:
    _array(f, 2, "change-log base")
    return ChangeLogBase(_int(f[0], INT32, "generation"), _int(f[1], INT64, "version"))


def _read_checkpoint_data(f: list[Any]) -> CheckpointData:
    _array(f, 3, "checkpoint data")
    return CheckpointData(_int(f[0], INT64, "changelog_offset"), _int(f[1], INT32, "generation"),
                          _int(f[2], INT64, "version"))


def _read_run_start(f: list[Any]) -> RunStart:
    _array(f, 4, "run start")
    if type(f[2]) is not bool:
        raise _Malformed(f"bounded must be a boolean, not {type(f[2]).__name__}")
    layout = tuple(_str(x, "layout entry") for x in _array(f[3], None, "layout"))
    return RunStart(_int(f[0], INT32, "run"), _int(f[1], INT64, "started_ms"), f[2], layout)


def _read_stop(f: list[Any]) -> StopRequest:
    _array(f, 3, "stop request")
    return StopRequest(_int(f[0], INT32, "run"), _int(f[1], INT64, "requested_ms"),
                       _str(f[2], "reason"))


def _read_lease(f: list[Any]) -> Lease:
    _array(f, 8, "lease")
    action = _str(f[1], "action")
    if action not in LEASE_ACTIONS:
        raise _Malformed(f"unknown lease action {action!r}")
    if type(f[7]) is not bool:
        raise _Malformed(f"take_over must be a boolean, not {type(f[7]).__name__}")
    return Lease(_int(f[0], INT32, "run"), action, _str(f[2], "owner"),
                 _int(f[3], INT32, "pid"), _str(f[4], "host"), _int(f[5], INT64, "at_ms"),
                 _int(f[6], INT64, "timeout_ms"), f[7])


_READERS: dict[int, Callable[[list[Any]], _AnyRecord]] = {
    RecordType.DATA: _read_data,
    RecordType.DATA_BATCH: _read_batch,
    RecordType.MARKER: _read_marker,
    RecordType.RESTORE: _read_restore,
    RecordType.CL_DATA: _read_cl_data,
    RecordType.CL_COMMIT: _read_commit,
    RecordType.CL_ABORT: _read_abort,
    RecordType.CL_BASE: _read_base,
    RecordType.CHECKPOINT_DATA: _read_checkpoint_data,
    RecordType.RUN_START: _read_run_start,
    RecordType.STOP: _read_stop,
    RecordType.LEASE: _read_lease,
}

_CHANNEL_TYPES = frozenset((RecordType.DATA, RecordType.DATA_BATCH, RecordType.MARKER,
                            RecordType.RESTORE))
_CHANGELOG_TYPES = frozenset((RecordType.CL_DATA, RecordType.CL_COMMIT, RecordType.CL_ABORT,
                              RecordType.CL_BASE))
_CHECKPOINT_TYPES = frozenset((RecordType.CHECKPOINT_DATA,))
_CONTROL_TYPES = frozenset((RecordType.RUN_START, RecordType.STOP, RecordType.LEASE))


def _decode(raw: object, allowed: frozenset[int], kind: str, topic: str | None,
            partition: int | None, offset: int | None) -> _AnyRecord:
    """The record ``raw`` holds, of one of the ``allowed`` types (the callers' casts rely on
    that), or ``WireFormatError`` (for a record without a value, ``raw=None``, too)."""
    try:
        if not isinstance(raw, (bytes, bytearray, memoryview)):
            raise _Malformed(f"expected bytes, got {type(raw).__name__}")
        if len(raw) < 3:
            raise _Malformed(f"{len(raw)} bytes is too short for a record")
        if raw[0] != FORMAT_VERSION:
            raise _Malformed(f"unknown format version {raw[0]} "
                             f"(this release reads {FORMAT_VERSION})")
        record_type = raw[1]
        if record_type not in allowed:
            known = "known" if record_type in _READERS else "unknown"
            raise _Malformed(f"{known} record type {record_type} is not a {kind} record")
        try:
            fields = msgpack.unpackb(memoryview(raw)[2:], raw=False, use_list=True,
                                     strict_map_key=True)
        except Exception as exc:  # msgpack raises a zoo of types; all mean "malformed"
            raise _Malformed(f"msgpack body does not decode "
                             f"({type(exc).__name__}: {exc})") from None
        return _READERS[record_type](fields)
    except _Malformed as exc:
        raise WireFormatError(str(exc), topic=topic, partition=partition, offset=offset) from None
    except (TypeError, IndexError) as exc:  # a nested field of the wrong shape
        raise WireFormatError(f"bad field layout ({exc})", topic=topic, partition=partition,
                              offset=offset) from None


def decode_channel(raw: bytes | None, *, topic: str | None = None, partition: int | None = None,
                   offset: int | None = None) -> ChannelRecord:
    """A record read from a channel: a data ``Envelope`` or ``DataBatch``, a ``Marker`` or a
    ``Restore``."""
    return cast(ChannelRecord, _decode(raw, _CHANNEL_TYPES, "channel", topic, partition, offset))


def decode_changelog(raw: bytes | None, *, topic: str | None = None, partition: int | None = None,
                     offset: int | None = None) -> ChangeLogRecord:
    """A record read from a change log: data, commit, abort or a snapshot's base."""
    return cast(ChangeLogRecord,
                _decode(raw, _CHANGELOG_TYPES, "change-log", topic, partition, offset))


def decode_checkpoint_data(raw: bytes) -> CheckpointData:
    """The checkpoint data value kept in RocksDB."""
    return cast(CheckpointData,
                _decode(raw, _CHECKPOINT_TYPES, "checkpoint-data", None, None, None))


def decode_control(raw: bytes | None, *, topic: str | None = None, partition: int | None = None,
                   offset: int | None = None) -> ControlRecord:
    """A record read from a job's control topic: a ``RunStart``, a ``StopRequest`` or a
    ``Lease``."""
    return cast(ControlRecord, _decode(raw, _CONTROL_TYPES, "control", topic, partition, offset))


_ALL_TYPES = frozenset(_READERS)


def decode(raw: bytes | None, *, topic: str | None = None, partition: int | None = None,
           offset: int | None = None) -> _AnyRecord:
    """Any protocol record, whatever its type."""
    return _decode(raw, _ALL_TYPES, "protocol", topic, partition, offset)
