"""Encoding protocol records: ``encode`` any record, ``encode_data`` and ``encode_batch``
a channel's data on the hot path without building objects. Ranges are checked, so a
record that would not decode is never written."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgpack

from .records import (
    FORMAT_VERSION,
    INT32,
    INT64,
    INTEGER,
    LEASE_ACTIONS,
    OPTIONAL_BYTES,
    RUN_OUTCOMES,
    ChangeLogAbort,
    ChangeLogBase,
    ChangeLogBatch,
    ChangeLogCommit,
    ChangeLogData,
    ChangeLogRecord,
    ChannelRecord,
    CheckpointData,
    ControlRecord,
    DataBatch,
    Envelope,
    Lease,
    Marker,
    ParentCheckpoint,
    RecordType,
    Restore,
    RunEnd,
    RunStart,
    StopRequest,
)

__all__ = [
    "encode",
    "encode_data",
    "encode_batch",
    "encode_batch_unchecked",
    "encode_changes",
]

_packb: Callable[[Any], bytes] = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def _header(record_type: int) -> bytes:
    return bytes((FORMAT_VERSION, record_type))


_H_DATA = _header(RecordType.DATA)
_H_BATCH = _header(RecordType.DATA_BATCH)
_H_CL_BATCH = _header(RecordType.CL_BATCH)


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
    _check(seq, INT64, "seq")
    n = len(keys)
    if n == 0 or len(values) != n or len(timestamps) != n:
        raise ValueError(f"a data batch needs as many keys, values and timestamps, at least "
                         f"one (got {len(keys)}, {len(values)}, {len(timestamps)})")
    if not {type(k) for k in keys} <= OPTIONAL_BYTES or \
            not {type(v) for v in values} <= OPTIONAL_BYTES:
        raise ValueError("batch keys and values must be bytes or None")
    if not {type(t) for t in timestamps} <= INTEGER or min(timestamps) < INT64[0] or \
            max(timestamps) > INT64[1]:
        raise ValueError(f"batch timestamps must be integers in [{INT64[0]}, {INT64[1]}]")
    return encode_batch_unchecked(producer_id, generation, version, seq, keys, values,
                                  timestamps)


def encode_batch_unchecked(producer_id: int, generation: int, version: int, seq: int,
                           keys: Sequence[bytes | None], values: Sequence[bytes | None],
                           timestamps: Sequence[int]) -> bytes:
    """``encode_batch`` for a caller that made every key and value bytes (or None) and
    checked every timestamp itself (``ChannelWriter``): its per-message checks were half
    the cost of a batch. The reader checks them all the same (``_read_batch``)."""
    _check(producer_id, INT32, "producer_id")
    _check(generation, INT32, "generation")
    _check(version, INT64, "version")
    _check(seq + len(keys) - 1, INT64, "last seq")
    return _H_BATCH + _packb((producer_id, generation, version, seq, keys, values, timestamps))


def encode_changes(generation: int, version: int, store: str,
                   keys: list[bytes] | tuple[bytes, ...],
                   values: list[bytes | None] | tuple[bytes | None, ...]) -> bytes:
    """The bytes of a change-log batch, from plain lists (hot path: no object)."""
    _check(generation, INT32, "generation")
    _check(version, INT64, "version")
    if not isinstance(store, str):
        raise ValueError(f"store must be a str, not {type(store).__name__}")
    if not keys or len(values) != len(keys):
        raise ValueError(f"a change-log batch needs as many keys as values, at least one "
                         f"(got {len(keys)} and {len(values)})")
    if {type(k) for k in keys} != {bytes} or not {type(v) for v in values} <= OPTIONAL_BYTES:
        raise ValueError("change-log batch keys must be bytes, values bytes or None")
    return _H_CL_BATCH + _packb((generation, version, store, keys, values))


def encode(record: ChannelRecord | ChangeLogRecord | CheckpointData | ControlRecord) -> bytes:
    """The bytes of any protocol record."""
    match record:
        case Envelope():
            return encode_data(record.producer_id, record.generation, record.version,
                               record.seq, record.key, record.value, record.timestamp)
        case DataBatch():
            return encode_batch(record.producer_id, record.generation, record.version,
                                record.seq, record.keys, record.values, record.timestamps)
        case Marker(producer_id, generation, version, seq, watermark, idle):
            fields: list[Any] = [_check(producer_id, INT32, "producer_id"),
                                 _check(generation, INT32, "generation"),
                                 _check(version, INT64, "version"), _check(seq, INT64, "seq")]
            # without a watermark (and not idle) the record stays SEP-10's, to the byte
            return _header(RecordType.MARKER) + _packb(fields + _watermark_tail(watermark, idle))
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
        case ChangeLogBatch(generation, version, store, keys, values):
            return encode_changes(generation, version, store, keys, values)
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
        case RunEnd(run, ended_ms, outcome, detail):
            if outcome not in RUN_OUTCOMES or not isinstance(detail, str):
                raise ValueError(f"run end needs outcome in {RUN_OUTCOMES} and detail: str")
            fields = [_check(run, INT32, "run"), _check(ended_ms, INT64, "ended_ms"), outcome,
                      detail]
            return _header(RecordType.RUN_END) + _packb(fields)
    raise TypeError(f"not a protocol record: {record!r}")


def _parent_fields(p: ParentCheckpoint) -> list[Any]:
    fields: list[Any] = [
        _check(p.producer_id, INT32, "producer_id"), _check(p.generation, INT32, "generation"),
        _check(p.version, INT64, "version"), _check(p.seq, INT64, "seq"),
        _check(p.resume_offset, INT64, "resume_offset")]
    return fields + _watermark_tail(p.watermark, p.idle)


def _watermark_tail(watermark: int | None, idle: bool) -> list[Any]:
    """The optional last fields of a marker or parent: the watermark, where there is one;
    idle (W7): the watermark (nil if none yet), then true."""
    if idle:
        return [None if watermark is None else _check(watermark, INT64, "watermark"), True]
    return [] if watermark is None else [_check(watermark, INT64, "watermark")]


def _commit_fields(c: ChangeLogCommit) -> list[Any]:
    def text(s: object, name: str) -> str:
        if not isinstance(s, str):
            raise ValueError(f"{name} must be str, not {type(s).__name__}")
        return s

    outputs = [[text(o.topic, "topic"), _check(o.partition, INT32, "partition"),
                _check(o.seq, INT64, "seq")] for o in c.outputs]
    inputs = [[text(i.topic, "topic"), _check(i.partition, INT32, "partition"),
               _check(i.offset, INT64, "offset"),
               [_parent_fields(p) for p in i.parents]]
              for i in c.inputs]
    fences = [[_check(f.producer_id, INT32, "producer_id"),
               _check(f.generation, INT32, "generation"), _check(f.version, INT64, "version")]
              for f in c.fences]
    ranges = [[text(r.topic, "topic"), _check(r.partition, INT32, "partition"),
               _check(r.first, INT64, "first"), _check(r.last, INT64, "last")]
              for r in c.output_ranges]
    fields = [_check(c.generation, INT32, "generation"), _check(c.version, INT64, "version"),
              outputs, inputs, fences, ranges]
    if c.watermark is not None:   # a task without event time writes the six fields it did
        fields.append(_check(c.watermark, INT64, "watermark"))
    return fields
