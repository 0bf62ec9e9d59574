"""Wire formats: every record round-trips, and no byte string makes the decoder fail with
anything but WireFormatError (which names where the record was)."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eos_runtime.errors import WireFormatError
from eos_runtime.protocol import wire
from eos_runtime.protocol.wire import (
    ChangeLogAbort,
    ChangeLogBatch,
    ChangeLogCommit,
    ChangeLogData,
    CheckpointData,
    DataBatch,
    Envelope,
    InputPosition,
    Lease,
    Marker,
    OutputRange,
    OutputSeq,
    ParentCheckpoint,
    ProducerFence,
    Restore,
    RunEnd,
    RunStart,
    StopRequest,
)

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
opt_bytes = st.none() | st.binary(max_size=64)
text = st.text(max_size=20)

envelopes = st.builds(Envelope, i32, i32, i64, i64, opt_bytes, opt_bytes, i64)


@st.composite
def data_batches(draw):
    """A data batch of 1 to 20 messages; its first sequence number leaves room for the
    last one in INT64."""
    n = draw(st.integers(1, 20))
    return DataBatch(draw(i32), draw(i32), draw(i64), draw(st.integers(-(2**63), 2**63 - n)),
                     tuple(draw(st.lists(opt_bytes, min_size=n, max_size=n))),
                     tuple(draw(st.lists(opt_bytes, min_size=n, max_size=n))),
                     tuple(draw(st.lists(i64, min_size=n, max_size=n))))


batches = data_batches()
markers = st.builds(Marker, i32, i32, i64, i64, st.none() | i64, st.booleans())
restores = st.builds(Restore, i32, i32, i64)
cl_data = st.builds(ChangeLogData, i32, i64, text, st.binary(max_size=64), opt_bytes)


@st.composite
def cl_batches(draw):
    """A change-log batch of 1 to 20 changes."""
    n = draw(st.integers(1, 20))
    return ChangeLogBatch(draw(i32), draw(i64), draw(text),
                          tuple(draw(st.lists(st.binary(max_size=64), min_size=n, max_size=n))),
                          tuple(draw(st.lists(opt_bytes, min_size=n, max_size=n))))


cl_batch = cl_batches()
parents = st.builds(ParentCheckpoint, i32, i32, i64, i64, i64, st.none() | i64, st.booleans())
inputs = st.builds(InputPosition, text, i32, i64, st.lists(parents, max_size=3).map(tuple))
outputs = st.builds(OutputSeq, text, i32, i64)
fences = st.builds(ProducerFence, i32, i32, i64)
ranges = st.builds(OutputRange, text, i32, i64, i64)
commits = st.builds(ChangeLogCommit, i32, i64, st.lists(outputs, max_size=3).map(tuple),
                    st.lists(inputs, max_size=3).map(tuple),
                    st.lists(fences, max_size=3).map(tuple),
                    st.lists(ranges, max_size=3).map(tuple), st.none() | i64)
aborts = st.builds(ChangeLogAbort, i32, i64)
checkpoint_data = st.builds(CheckpointData, i64, i32, i64)

run_starts = st.builds(RunStart, i32, i64, st.booleans(), st.lists(text, max_size=4).map(tuple))
stops = st.builds(StopRequest, i32, i64, text)
leases = st.builds(Lease, i32, st.sampled_from(wire.LEASE_ACTIONS), text, i32, text, i64, i64,
                   st.booleans())
run_ends = st.builds(RunEnd, i32, i64, st.sampled_from(wire.RUN_OUTCOMES), text)
control_records = run_starts | stops | leases | run_ends

channel_records = envelopes | batches | markers | restores
changelog_records = cl_data | cl_batch | commits | aborts
any_record = channel_records | changelog_records | checkpoint_data | control_records


@given(channel_records)
def test_channel_records_round_trip(record):
    raw = wire.encode(record)
    assert raw[0] == wire.FORMAT_VERSION
    assert wire.decode_channel(raw) == record
    assert wire.decode(raw) == record


@given(changelog_records)
def test_changelog_records_round_trip(record):
    assert wire.decode_changelog(wire.encode(record)) == record


@given(control_records)
def test_control_records_round_trip(record):
    assert wire.decode_control(wire.encode(record)) == record


def test_a_channel_reader_refuses_a_control_record():
    raw = wire.encode(StopRequest(3, 0, "test"))
    with pytest.raises(WireFormatError, match="record type 49 is not a channel record"):
        wire.decode_channel(raw, topic="t", partition=0, offset=5)


@given(checkpoint_data)
def test_checkpoint_data_round_trips(record):
    assert wire.decode_checkpoint_data(wire.encode(record)) == record


@given(envelopes)
def test_encode_data_is_the_envelope_encoding(e):
    fast = wire.encode_data(e.producer_id, e.generation, e.version, e.seq, e.key, e.value,
                            e.timestamp)
    assert fast == wire.encode(e)


@given(batches)
def test_encode_batch_is_the_data_batch_encoding(b):
    fast = wire.encode_batch(b.producer_id, b.generation, b.version, b.seq, list(b.keys),
                             list(b.values), list(b.timestamps))
    assert fast == wire.encode(b)
    assert wire.decode_channel(fast) == b
    assert b.last_seq == b.seq + len(b.keys) - 1
    # the writer's encoder, which leaves the messages' checks to its caller, writes the same
    assert wire.encode_batch_unchecked(b.producer_id, b.generation, b.version, b.seq,
                                       list(b.keys), list(b.values),
                                       list(b.timestamps)) == fast


def test_a_data_batch_is_type_4_with_parallel_arrays():
    """Pinned: producer, generation, version, first seq, then keys, values, timestamps."""
    raw = wire.encode_batch(1, 2, 3, 10, [b"k", None], [b"v", b"w"], [5, 6])
    assert raw == bytes((1, 4)) + msgpack.packb([1, 2, 3, 10, [b"k", None], [b"v", b"w"],
                                                 [5, 6]], use_bin_type=True)
    assert wire.decode_channel(raw) == DataBatch(1, 2, 3, 10, (b"k", None), (b"v", b"w"),
                                                 (5, 6))


@pytest.mark.parametrize("fields,error", [
    ([1, 2, 3, 0, [], [], []], "at least one"),
    ([1, 2, 3, 0, [b"k"], [b"v", b"w"], [1]], "1 keys, 2 values and 1 timestamps"),
    ([1, 2, 3, 0, ["k"], [b"v"], [1]], "key is not bytes"),
    ([1, 2, 3, 0, [b"k", None, "k"], [b"v"] * 3, [1] * 3], "key is not bytes"),
    ([1, 2, 3, 0, [b"k"], [7], [1]], "value is not bytes"),
    ([1, 2, 3, 0, [b"k"] * 2, [b"v", [b"v"]], [1, 1]], "value is not bytes"),
    ([1, 2, 3, 0, [b"k"], [b"v"], [True]], "timestamp is not an integer"),
    ([1, 2, 3, 0, [b"k"], [b"v"], [2**64 - 1]], "timestamp is not an integer"),
    ([1, 2, 3, 2**63 - 1, [b"k", b"l"], [b"v", b"w"], [1, 2]], "last seq"),
    ([1, 2, 3, 0, [b"k"], [b"v"]], "array of 7"),
    ([1, 2, 3, 0, b"k", [b"v"], [1]], "batch keys"),
])
def test_malformed_data_batches_are_named(fields, error):
    _refused_by_name(wire.RecordType.DATA_BATCH, fields, wire.decode_channel, error)


def test_a_data_batch_s_keys_and_values_may_be_nil_among_bytes():
    raw = bytes((wire.FORMAT_VERSION, wire.RecordType.DATA_BATCH)) + msgpack.packb(
        [1, 2, 3, 0, [None, b"k"], [b"v", None], [5, 6]], use_bin_type=True)
    batch = wire.decode_channel(raw)
    assert (batch.keys, batch.values) == ((None, b"k"), (b"v", None))


def _refused_by_name(record_type: int, fields: list, decode, error: str) -> None:
    """A record of ``record_type`` with ``fields`` is refused, saying ``error`` and where."""
    raw = bytes((wire.FORMAT_VERSION, record_type)) + msgpack.packb(fields, use_bin_type=True)
    with pytest.raises(WireFormatError, match=error) as info:
        decode(raw, topic="t", partition=1, offset=9)
    assert "offset=9" in str(info.value)


@pytest.mark.parametrize("args", [
    (0, 0, 0, 0, [], [], []),
    (0, 0, 0, 0, [b"k"], [b"v"], []),
    (0, 0, 0, 0, ["k"], [b"v"], [0]),
    (0, 0, 0, 0, [b"k"], ["v"], [0]),
    (0, 0, 0, 0, [b"k"], [b"v"], [False]),
    (0, 0, 0, 0, [b"k"], [b"v"], [2**63]),
    (0, 0, 0, 2**63 - 1, [b"k", b"l"], [b"v", b"w"], [0, 0]),
    (2**31, 0, 0, 0, [b"k"], [b"v"], [0]),
])
def test_encoding_a_bad_data_batch_is_refused(args):
    with pytest.raises(ValueError):
        wire.encode_batch(*args)


@given(cl_batch)
def test_encode_changes_is_the_change_log_batch_encoding(b):
    assert wire.encode_changes(b.generation, b.version, b.store, list(b.keys),
                               list(b.values)) == wire.encode(b)
    assert wire.decode_changelog(wire.encode(b)).changes() == [
        (b.store, k, v) for k, v in zip(b.keys, b.values, strict=True)]


@pytest.mark.parametrize(("fields", "error"), [
    ([1, 2, "s", [], []], "at least one"),
    ([1, 2, "s", [b"k"], [b"v", b"w"]], "1 keys and 2 values"),
    ([1, 2, "s", [None], [b"v"]], "key is not bytes"),
    ([1, 2, "s", ["k"], [b"v"]], "key is not bytes"),
    ([1, 2, "s", [b"k"], [7]], "value is not bytes"),
    ([1, 2, 3, [b"k"], [b"v"]], "store"),
    ([1, 2, "s", [b"k"]], "array of 5"),
    ([1, 2, "s", b"k", [b"v"]], "batch keys"),
])
def test_malformed_change_log_batches_are_named(fields, error):
    _refused_by_name(wire.RecordType.CL_BATCH, fields, wire.decode_changelog, error)


@pytest.mark.parametrize("args", [
    (0, 0, "s", [], []),
    (0, 0, "s", [b"k"], []),
    (0, 0, "s", [None], [b"v"]),
    (0, 0, "s", ["k"], [b"v"]),
    (0, 0, "s", [b"k"], ["v"]),
    (0, 0, b"s", [b"k"], [b"v"]),
    (2**31, 0, "s", [b"k"], [b"v"]),
    (0, 2**63, "s", [b"k"], [b"v"]),
])
def test_encoding_a_bad_change_log_batch_is_refused(args):
    with pytest.raises(ValueError):
        wire.encode_changes(*args)


@settings(max_examples=500)
@given(st.binary(max_size=200), st.text(max_size=5), st.integers(0, 5), st.integers(0, 10**6))
def test_random_bytes_raise_only_wire_format_error(raw, topic, partition, offset):
    try:
        wire.decode(raw, topic=topic, partition=partition, offset=offset)
    except WireFormatError as exc:
        assert (exc.topic, exc.partition, exc.offset) == (topic, partition, offset)
        assert f"offset={offset}" in str(exc)


@settings(max_examples=500)
@given(st.sampled_from(sorted(wire.decoding.READERS)), st.binary(max_size=100))
def test_random_body_behind_a_valid_header_raises_only_wire_format_error(record_type, body):
    try:
        wire.decode(bytes((wire.FORMAT_VERSION, record_type)) + body)
    except WireFormatError:
        pass


json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=5)
    | st.binary(max_size=5),
    lambda children: st.lists(children, max_size=6)
    | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=20)


@settings(max_examples=500)
@given(st.sampled_from(sorted(wire.decoding.READERS)), json_like)
def test_well_formed_msgpack_of_the_wrong_shape_raises_only_wire_format_error(record_type, body):
    """Structured garbage reaches the field readers, unlike random bytes."""
    raw = bytes((wire.FORMAT_VERSION, record_type)) + msgpack.packb(body, use_bin_type=True)
    try:
        wire.decode(raw)
    except WireFormatError:
        pass


@given(any_record)
def test_every_truncation_is_rejected(record):
    raw = wire.encode(record)
    for cut in range(len(raw)):
        with pytest.raises(WireFormatError):
            wire.decode(raw[:cut])


def test_unknown_format_version_is_named():
    raw = bytearray(wire.encode(Marker(1, 2, 3, 4)))
    raw[0] = 9
    with pytest.raises(WireFormatError, match="unknown format version 9") as info:
        wire.decode_channel(bytes(raw), topic="t", partition=3, offset=17)
    assert "topic='t' partition=3 offset=17" in str(info.value)


def test_a_changelog_record_is_not_a_channel_record():
    raw = wire.encode(ChangeLogAbort(1, 2))
    with pytest.raises(WireFormatError, match="not a channel record"):
        wire.decode_channel(raw)
    assert wire.decode_changelog(raw) == ChangeLogAbort(1, 2)


def test_unknown_record_type_is_named():
    with pytest.raises(WireFormatError, match="unknown record type 99"):
        wire.decode(bytes((wire.FORMAT_VERSION, 99, 0x90)))


def test_trailing_bytes_are_rejected():
    with pytest.raises(WireFormatError, match="ExtraData"):
        wire.decode(wire.encode(Marker(1, 2, 3, 4)) + b"\x00")


def test_bool_is_not_an_integer_field():
    raw = bytes((wire.FORMAT_VERSION, wire.RecordType.MARKER)) + msgpack.packb([True, 1, 1, 1])
    with pytest.raises(WireFormatError, match="producer_id"):
        wire.decode(raw)


@pytest.mark.parametrize("bad", [
    Marker(2**31, 0, 0, 0),
    Restore(0, -(2**31) - 1, 0),
    Envelope(0, 0, 2**63, 0, None, None, 0),
    CheckpointData(0, 0, "1"),
    ChangeLogData(0, 0, "s", "not bytes", None),
])
def test_encoding_out_of_range_fields_is_refused(bad):
    with pytest.raises(ValueError):
        wire.encode(bad)


def test_record_type_values_are_pinned():
    """These numbers are on disk and on the wire: changing one breaks old data."""
    rt = wire.RecordType
    assert (rt.DATA, rt.MARKER, rt.RESTORE, rt.DATA_BATCH) == (1, 2, 3, 4)
    assert (rt.CL_DATA, rt.CL_COMMIT, rt.CL_ABORT, rt.CHECKPOINT_DATA) == (16, 17, 18, 32)
    assert (rt.CL_BASE, rt.CL_BATCH) == (19, 20)
    assert (rt.RUN_START, rt.STOP, rt.LEASE) == (48, 49, 50)
    assert wire.encode(Marker(1, 2, 3, 4)) == bytes((1, 2)) + msgpack.packb([1, 2, 3, 4])


def test_a_record_without_a_watermark_is_byte_for_byte_the_one_written_before_watermarks():
    # Pinned: a marker of four fields and a commit of six, as every log written before
    # event time holds them; and what a reader of today makes of them.
    marker = wire.encode(Marker(1, 2, 3, 4))
    assert marker[2:] == msgpack.packb([1, 2, 3, 4])
    assert wire.decode_channel(marker) == Marker(1, 2, 3, 4, None)
    commit = wire.encode(ChangeLogCommit(1, 9))
    assert commit[2:] == msgpack.packb([1, 9, [], [], [], []])
    assert wire.decode_changelog(commit).watermark is None


def test_a_watermark_is_one_field_more_and_a_second_one_is_refused():
    marker = wire.encode(Marker(1, 2, 3, 4, -5))
    assert marker[2:] == msgpack.packb([1, 2, 3, 4, -5])
    assert wire.decode_channel(marker).watermark == -5
    # a sixth field is W7's idle flag, written only true; anything else there is refused
    six = marker[:2] + msgpack.packb([1, 2, 3, 4, -5, 6])
    with pytest.raises(WireFormatError, match=r"marker field 6 \(idle\) is 6, expected true"):
        wire.decode_channel(six)
    idle = wire.encode(Marker(1, 2, 3, 4, None, True))
    assert idle[2:] == msgpack.packb([1, 2, 3, 4, None, True])
    assert wire.decode_channel(idle) == Marker(1, 2, 3, 4, None, True)
    assert wire.encode(Marker(1, 2, 3, 4, -5, False)) == marker   # not idle: as before
    seven = marker[:2] + msgpack.packb([1, 2, 3, 4, -5, True, 7])
    with pytest.raises(WireFormatError, match="marker is 7 items"):
        wire.decode_channel(seven)
    bad = marker[:2] + msgpack.packb([1, 2, 3, 4, "late"])
    with pytest.raises(WireFormatError, match="marker watermark"):
        wire.decode_channel(bad)
