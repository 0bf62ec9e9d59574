"""Decoding protocol records: every malformed, truncated, unknown-type or unknown-version
record raises ``WireFormatError`` naming topic, partition and offset where the caller
passes them; nothing of the backend's errors leaks out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import msgpack

from ...errors import WireFormatError
from .records import (
    FORMAT_VERSION,
    INT32,
    INT64,
    INTEGER,
    LEASE_ACTIONS,
    OPTIONAL_BYTES,
    RUN_OUTCOMES,
    AnyRecord,
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
    InputPosition,
    Lease,
    Marker,
    OutputRange,
    OutputSeq,
    ParentCheckpoint,
    ProducerFence,
    RecordType,
    Restore,
    RunEnd,
    RunStart,
    StopRequest,
)

__all__ = [
    "decode",
    "decode_channel",
    "decode_changelog",
    "decode_checkpoint_data",
    "decode_control",
    "READERS",
]

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
    if not _all_bytes(keys) and not {type(k) for k in keys} <= OPTIONAL_BYTES:
        raise _Malformed("a batch key is not bytes or nil")
    if not _all_bytes(values) and not {type(v) for v in values} <= OPTIONAL_BYTES:
        raise _Malformed("a batch value is not bytes or nil")
    if not {type(t) for t in stamps} <= INTEGER or min(stamps) < INT64[0] or \
            max(stamps) > INT64[1]:
        raise _Malformed(f"a batch timestamp is not an integer in [{INT64[0]}, {INT64[1]}]")
    seq = _int(f[3], INT64, "seq")
    _int(seq + n - 1, INT64, "last seq")
    return DataBatch(_int(f[0], INT32, "producer_id"), _int(f[1], INT32, "generation"),
                     _int(f[2], INT64, "version"), seq, tuple(keys), tuple(values), tuple(stamps))


def _all_bytes(items: list[Any]) -> bool:
    """Whether every item is bytes, in one pass in C (a fifth of the cost of collecting
    their types): ``join`` refuses anything else msgpack decodes to (it makes no
    bytearray or memoryview). False: look closer (None is allowed)."""
    try:
        b"".join(items)
    except TypeError:
        return False
    return True


def _optional_tail(f: list[Any], n: int, name: str) -> int | None:
    """A record of ``n`` fields, or of ``n + 1`` whose last is an INT64 a later writer added
    (a watermark): older records stay readable as they were written."""
    _array(f, n + 1 if len(f) == n + 1 else n, name)
    return _int(f[n], INT64, f"{name} watermark") if len(f) == n + 1 else None


def _watermark_tail(f: list[Any], n: int, name: str) -> tuple[int | None, bool]:
    """``_optional_tail``'s watermark and whether the record says idle: a record of ``n +
    2`` fields is an idle producer's (W7), its watermark (nil if none yet) then true."""
    if type(f) is list and len(f) == n + 2:
        if f[n + 1] is not True:
            raise _Malformed(f"{name} field {n + 2} (idle) is {f[n + 1]!r}, expected true")
        return (None if f[n] is None else _int(f[n], INT64, f"{name} watermark")), True
    return _optional_tail(f, n, name), False


def _read_marker(f: list[Any]) -> Marker:
    watermark, idle = _watermark_tail(f, 4, "marker")
    return Marker(_int(f[0], INT32, "producer_id"), _int(f[1], INT32, "generation"),
                  _int(f[2], INT64, "version"), _int(f[3], INT64, "seq"), watermark, idle)


def _read_restore(f: list[Any]) -> Restore:
    _array(f, 3, "restore command")
    return Restore(_int(f[0], INT32, "producer_id"), _int(f[1], INT32, "generation"),
                   _int(f[2], INT64, "version"))


def _read_cl_data(f: list[Any]) -> ChangeLogData:
    _array(f, 5, "change-log data")
    return ChangeLogData(_int(f[0], INT32, "generation"), _int(f[1], INT64, "version"),
                         _str(f[2], "store"), _bin(f[3], "key", optional=False),  # type: ignore[arg-type]
                         _bin(f[4], "value", optional=True))


def _read_cl_batch(f: list[Any]) -> ChangeLogBatch:
    _array(f, 5, "change-log batch")
    keys = _array(f[3], None, "change-log batch keys")
    values = _array(f[4], None, "change-log batch values")
    if not keys or len(values) != len(keys):
        raise _Malformed(f"change-log batch holds {len(keys)} keys and {len(values)} values, "
                         f"expected as many of each, at least one")
    if {type(k) for k in keys} != {bytes}:
        raise _Malformed("a change-log batch key is not bytes")
    if not {type(v) for v in values} <= OPTIONAL_BYTES:
        raise _Malformed("a change-log batch value is not bytes or nil")
    return ChangeLogBatch(_int(f[0], INT32, "generation"), _int(f[1], INT64, "version"),
                          _str(f[2], "store"), tuple(keys), tuple(values))


def _read_parent(p: list[Any]) -> ParentCheckpoint:
    watermark, idle = _watermark_tail(p, 5, "parent")
    return ParentCheckpoint(_int(p[0], INT32, "parent producer_id"),
                            _int(p[1], INT32, "parent generation"),
                            _int(p[2], INT64, "parent version"), _int(p[3], INT64, "parent seq"),
                            _int(p[4], INT64, "parent resume_offset"), watermark, idle)


def _read_commit(f: list[Any]) -> ChangeLogCommit:
    watermark = _optional_tail(f, 6, "change-log commit")
    outputs = tuple(
        OutputSeq(_str(o[0], "output topic"), _int(o[1], INT32, "output partition"),
                  _int(o[2], INT64, "output seq"))
        for o in (_array(x, 3, "output") for x in _array(f[2], None, "outputs")))
    inputs = []
    for x in _array(f[3], None, "inputs"):
        i = _array(x, 4, "input")
        parents = tuple(_read_parent(y) for y in _array(i[3], None, "parents"))
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
                           outputs, tuple(inputs), fences, ranges, watermark)


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


def _read_run_end(f: list[Any]) -> RunEnd:
    _array(f, 4, "run end")
    outcome = _str(f[2], "outcome")
    if outcome not in RUN_OUTCOMES:
        raise _Malformed(f"unknown run outcome {outcome!r}")
    return RunEnd(_int(f[0], INT32, "run"), _int(f[1], INT64, "ended_ms"), outcome,
                  _str(f[3], "detail"))


READERS: dict[int, Callable[[list[Any]], AnyRecord]] = {
    RecordType.DATA: _read_data,
    RecordType.DATA_BATCH: _read_batch,
    RecordType.MARKER: _read_marker,
    RecordType.RESTORE: _read_restore,
    RecordType.CL_DATA: _read_cl_data,
    RecordType.CL_BATCH: _read_cl_batch,
    RecordType.CL_COMMIT: _read_commit,
    RecordType.CL_ABORT: _read_abort,
    RecordType.CL_BASE: _read_base,
    RecordType.CHECKPOINT_DATA: _read_checkpoint_data,
    RecordType.RUN_START: _read_run_start,
    RecordType.STOP: _read_stop,
    RecordType.LEASE: _read_lease,
    RecordType.RUN_END: _read_run_end,
}

_CHANNEL_TYPES = frozenset((RecordType.DATA, RecordType.DATA_BATCH, RecordType.MARKER,
                            RecordType.RESTORE))
_CHANGELOG_TYPES = frozenset((RecordType.CL_DATA, RecordType.CL_BATCH, RecordType.CL_COMMIT,
                              RecordType.CL_ABORT, RecordType.CL_BASE))
_CHECKPOINT_TYPES = frozenset((RecordType.CHECKPOINT_DATA,))
_CONTROL_TYPES = frozenset((RecordType.RUN_START, RecordType.STOP, RecordType.LEASE,
                            RecordType.RUN_END))


def _decode(raw: object, allowed: frozenset[int], kind: str, topic: str | None,
            partition: int | None, offset: int | None) -> AnyRecord:
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
            known = "known" if record_type in READERS else "unknown"
            raise _Malformed(f"{known} record type {record_type} is not a {kind} record")
        try:
            fields = msgpack.unpackb(memoryview(raw)[2:], raw=False, use_list=True,
                                     strict_map_key=True)
        except Exception as exc:  # msgpack raises a zoo of types; all mean "malformed"
            raise _Malformed(f"msgpack body does not decode "
                             f"({type(exc).__name__}: {exc})") from None
        return READERS[record_type](fields)
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
    """A record read from a job's control topic: a ``RunStart``, a ``StopRequest``, a
    ``Lease`` or a ``RunEnd``."""
    return cast(ControlRecord, _decode(raw, _CONTROL_TYPES, "control", topic, partition, offset))


_ALL_TYPES = frozenset(READERS)


def decode(raw: bytes | None, *, topic: str | None = None, partition: int | None = None,
           offset: int | None = None) -> AnyRecord:
    """Any protocol record, whatever its type."""
    return _decode(raw, _ALL_TYPES, "protocol", topic, partition, offset)
