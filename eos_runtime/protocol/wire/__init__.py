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

from .decoding import (
    decode,
    decode_changelog,
    decode_channel,
    decode_checkpoint_data,
    decode_control,
)
from .encoding import encode, encode_batch, encode_batch_unchecked, encode_changes, encode_data
from .records import (
    FORMAT_VERSION,
    LEASE_ACTIONS,
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
    "RunEnd",
    "RUN_OUTCOMES",
    "ChannelRecord",
    "ControlRecord",
    "ChangeLogRecord",
    "encode",
    "encode_data",
    "encode_batch",
    "encode_batch_unchecked",
    "encode_changes",
    "decode",
    "decode_channel",
    "decode_changelog",
    "decode_checkpoint_data",
    "decode_control",
]
