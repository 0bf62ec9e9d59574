"""Where a task's output goes: the channels of the next stage, or the sink topic.

``ChannelWriter`` routes each value by key to a channel and sends a channel's values as
data batches (producer id, generation, version, the first message's sequence number per
channel; many messages per record); it also fans out markers and restore commands to
every channel. ``SinkWriter`` encodes and partitions sink output and holds it until the
committer hands it on (``Committer.send_output``): after each poll batch, into the
change-log producer or the version's Kafka transaction, or at the checkpoint as one
append per partition whose offsets the commit record lists (exactly-once on the local
log: the committed reader shows only those).
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

import msgpack
from murmurhash2 import murmurhash2 as _c_murmur2

from ..api import FORMATS, Sink
from ..errors import UserFunctionError
from ..faults import crash_point, is_armed
from ..protocol import wire
from ..protocol.recovery import continued_seqs
from ..protocol.wire.records import INT64 as _INT64
from ..transport import Producer, TopicPartition
from .operators import STR_HEADER, decode_key

__all__ = ["ChannelFanout", "ChannelWriter", "SinkWriter", "channels_of", "check_timestamp",
           "kafka_partition", "murmur2"]

_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack


#: Kafka's seed for murmur2 (``Utils.murmur2``)
_MURMUR2_SEED = 0x9747B28C


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's ``Utils.murmur2``), as a signed 32-bit int."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (_MURMUR2_SEED ^ length) & mask
    body = length - length % 4
    for i in range(0, body, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[body + 2] << 16
    if tail >= 2:
        h ^= data[body + 1] << 8
    if tail >= 1:
        h ^= data[body]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def _fast_murmur2(data: bytes) -> int:
    """``murmur2`` unsigned, in C: a key space of millions meets a new sink key per record."""
    return int(_c_murmur2(data, _MURMUR2_SEED))


def kafka_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a keyed record."""
    return (_fast_murmur2(key) & 0x7FFFFFFF) % partitions


#: Sink keys whose partition a sink writer remembers (then it starts afresh): a job's
#: hot keys stay, a key space of millions costs a dict insert per record.
_KEY_PARTITIONS_KEPT = 1 << 14

#: A channel's pending batch is sent once it holds this many messages or bytes of keys and
#: values, whichever comes first (far below Kafka's default 1 MB record limit).
BATCH_MESSAGES = 4096
BATCH_BYTES = 256 << 10

_MID_FANOUT = "task.checkpoint.mid_marker_fanout"


def check_timestamp(timestamp: int) -> None:
    """A channel message's timestamp, which its batch's encoder trusts: an INT64."""
    if type(timestamp) is not int or not _INT64[0] <= timestamp <= _INT64[1]:
        raise ValueError(f"a channel message's timestamp must be an integer in "
                         f"[{_INT64[0]}, {_INT64[1]}], not {timestamp!r}")


class ChannelWriter:
    """Output to the next stage's channels, as data batches (``wire.DataBatch``).

    ``write`` only routes each value to its channel and keeps it in that channel's pending
    batch; ``send`` (the loop calls it after each poll batch) turns every pending batch
    into one channel record. A batch holds messages of one generation and version: a
    write under another one sends what is pending first. So does everything else that
    goes into a channel (``flush``, markers, restores), so every channel still holds
    the producer's messages and commands in the order they were made, as if each
    message were sent on its own."""

    def __init__(self, producer: Producer, topic: str, partitions: int, producer_id: int, *,
                 batch_messages: int = BATCH_MESSAGES) -> None:
        if batch_messages < 1:
            raise ValueError(f"batch_messages must be at least 1, not {batch_messages}")
        self.producer = producer
        self.batch_messages = batch_messages
        self.topic = topic
        self.partitions = partitions
        self.producer_id = producer_id
        self.seq = [0] * partitions   # the next message's sequence number, per channel
        self.generation = 0      # set by the committer whenever a generation starts
        self._rr = 0
        # per channel: the pending batch's keys, values, timestamps (empty: none)
        self._keys: list[list[bytes | None]] = [[] for _ in range(partitions)]
        self._values: list[list[bytes | None]] = [[] for _ in range(partitions)]
        self._stamps: list[list[int]] = [[] for _ in range(partitions)]
        self._bytes = [0] * partitions
        self._pending = False
        self._of: tuple[int, int] = (0, 0)   # (generation, version) of what is pending

    def write(self, generation: int, version: int, key_bytes: bytes | None, values: list[Any],
              timestamp: int) -> None:
        """``values`` under one key."""
        self.write_keyed(generation, version, [key_bytes] * len(values), values, timestamp)

    def write_keyed(self, generation: int, version: int, keys: Sequence[bytes | None],
                    values: list[Any], timestamp: int) -> None:
        """Each of ``values`` under its key in ``keys`` (encoded; None: keyless, which
        goes round robin). All or nothing: a value msgpack cannot encode raises before
        any value of the call is kept (a record's output is one call)."""
        self.append_packed(generation, version, keys, self.pack(values), timestamp)

    @staticmethod
    def pack(values: list[Any]) -> list[bytes]:
        """The values as a channel carries them (msgpack); raises before anything is kept."""
        return [_pack(value) for value in values]

    def append_packed(self, generation: int, version: int, keys: Sequence[bytes | None],
                      packed: list[bytes], timestamp: int) -> None:
        """Values ``pack`` made, each under its key, into their channels' pending batches."""
        check_timestamp(timestamp)   # once a call here, not once a message in the batch
        self.append_stamped(generation, version, keys, packed, [timestamp] * len(packed))

    def append_stamped(self, generation: int, version: int, keys: Sequence[bytes | None],
                       packed: list[bytes], stamps: Sequence[int]) -> None:
        """``append_packed`` with a timestamp per value, each checked by the caller
        (``check_timestamp``): a poll batch's output of many records in one call."""
        if self._of != (generation, version):
            self.send_pending()
            self._of = (generation, version)
        pending_keys, vals, pending_stamps = self._keys, self._values, self._stamps
        size, n, most = self._bytes, self.partitions, self.batch_messages
        crc32, limit = zlib.crc32, BATCH_BYTES
        for key_bytes, v, timestamp in zip(keys, packed, stamps, strict=True):
            if key_bytes is None:
                self._rr += 1
                p = self._rr % n
                grow = len(v)
            else:
                p = crc32(key_bytes) % n
                grow = len(key_bytes) + len(v)
            if size[p] + grow > limit and size[p]:
                # sent first: a large value after many small ones would take one record
                # past Kafka's limit, where each would fit alone
                self._send(p)
            size[p] += grow
            ks = pending_keys[p]
            ks.append(key_bytes)
            vals[p].append(v)
            pending_stamps[p].append(timestamp)
            if size[p] >= limit or len(ks) >= most:
                self._send(p)
        self._pending = True

    def _send(self, p: int) -> None:
        keys = self._keys[p]
        if not keys:
            return
        generation, version = self._of
        self.producer.produce(self.topic, p, wire.encode_batch_unchecked(
            self.producer_id, generation, version, self.seq[p], keys, self._values[p],
            self._stamps[p]))
        self.seq[p] += len(keys)
        self._keys[p], self._values[p], self._stamps[p] = [], [], []
        self._bytes[p] = 0

    def send_pending(self) -> None:
        """Every pending batch into its channel record (handed to the producer)."""
        if self._pending:
            for p in range(self.partitions):
                self._send(p)
            self._pending = False

    def discard(self) -> None:
        """Drop the pending batches unsent: a rewind discards the version they belong to
        (everything pending is of the open version: a checkpoint sends what is pending
        first). Sequence numbers count only what went out, so they stay."""
        for p in range(self.partitions):
            self._keys[p], self._values[p], self._stamps[p] = [], [], []
            self._bytes[p] = 0
        self._pending = False

    def send(self) -> None:
        """Pending batches out now, without waiting for acknowledgement."""
        self.send_pending()
        self.producer.send()

    def flush(self) -> dict[TopicPartition, int]:
        self.send_pending()
        return self.producer.flush()

    def markers(self, generation: int, version: int, watermark: int | None = None, *,
                wait: bool = True, idle: bool = False) -> None:
        """Marker ``version`` into every channel (SEP-10 3.8), carrying the task's
        watermark at ``version`` (W3; None: it keeps none) and whether the task is idle
        (W7), then flush, or (``wait``
        False) hand them on unacknowledged: a checkpoint's markers need not be durable
        before the task goes on, since a restarted task sends its last marker again
        (``runs.announcement``) and the producer keeps each channel's order. At ten
        checkpoints a second, a source task spent a round trip a checkpoint waiting."""
        self.send_pending()
        half = self.partitions // 2
        # The first half is flushed before the crash point, so a crash there leaves
        # channels that really hold the marker beside channels that never get it; where
        # no fault waits there, the flush would only be a round trip.
        split = is_armed(_MID_FANOUT)
        for p in range(self.partitions):
            if p == half:
                if split:
                    self.producer.flush()
                crash_point(_MID_FANOUT)
            self.producer.produce(self.topic, p, wire.encode(
                wire.Marker(self.producer_id, generation, version, self.seq[p], watermark,
                            idle)))
        if wait:
            self.producer.flush()
        else:
            self.producer.send()

    def restore(self, generation: int, version: int) -> None:
        """Restore command into every channel (SEP-10 1.4 / 4.5), then flush."""
        self.send_pending()
        for p in range(self.partitions):
            self.producer.produce(self.topic, p, wire.encode(
                wire.Restore(self.producer_id, generation, version)))
        self.producer.flush()

    def output_seqs(self) -> tuple[wire.OutputSeq, ...]:
        self.send_pending()   # the sequence numbers count what went out
        return tuple(wire.OutputSeq(self.topic, p, s) for p, s in enumerate(self.seq))

    def continue_from(self, commit: wire.ChangeLogCommit | None) -> None:
        """Sequence numbers on from where ``commit`` left them (recovery C5)."""
        self.seq = continued_seqs(commit, self.topic, self.partitions)


class ChannelFanout:
    """Several ``ChannelWriter``s (a stage with several ``key_by`` outputs) as one: what
    the committer does to its channels (send, flush, markers, restores, discard, sequence
    numbers) it does to each, in order. They share one producer."""

    def __init__(self, writers: Sequence[ChannelWriter]) -> None:
        self.writers = tuple(writers)
        self.producer = self.writers[0].producer

    @property
    def generation(self) -> int:
        return self.writers[0].generation

    @generation.setter
    def generation(self, generation: int) -> None:
        for w in self.writers:
            w.generation = generation

    def send(self) -> None:
        for w in self.writers:
            w.send_pending()
        self.producer.send()

    def flush(self) -> dict[TopicPartition, int]:
        for w in self.writers:
            w.send_pending()
        return self.producer.flush()

    def markers(self, generation: int, version: int, watermark: int | None = None, *,
                wait: bool = True, idle: bool = False) -> None:
        for w in self.writers:
            w.markers(generation, version, watermark, wait=False, idle=idle)
        if wait:   # one producer: one flush for every writer's markers
            self.producer.flush()

    def restore(self, generation: int, version: int) -> None:
        for w in self.writers:
            w.restore(generation, version)

    def discard(self) -> None:
        for w in self.writers:
            w.discard()

    def output_seqs(self) -> tuple[wire.OutputSeq, ...]:
        return tuple(s for w in self.writers for s in w.output_seqs())

    def continue_from(self, commit: wire.ChangeLogCommit | None) -> None:
        for w in self.writers:
            w.continue_from(commit)


def channels_of(writers: Sequence[ChannelWriter]) -> ChannelWriter | ChannelFanout | None:
    """What the committer drives: no channels, one writer, or a fan-out over several."""
    if not writers:
        return None
    return writers[0] if len(writers) == 1 else ChannelFanout(writers)


class SinkWriter:
    def __init__(self, sink: Sink, partitions: int) -> None:
        self.topic = sink.topic
        self.partitions = partitions
        self.key_format, self.value_format = sink.key_format, sink.value_format
        self._key = FORMATS[sink.key_format][0] if sink.key_format else None
        # A str key's sink key in utf8 is the stream key's bytes after its msgpack header:
        # no decode and encode for a key the cache does not hold (at 10^7 keys, most).
        self._utf8_key = sink.key_format == "utf8"
        self._value = FORMATS[sink.value_format][0]
        self._pending: list[tuple[int, bytes | None, bytes, int]] = []
        self.produced = 0     # records handed to a producer so far (the sink's count)
        self._rr = 0
        # stream key -> (sink key, partition), bounded
        self._by_key: dict[bytes, tuple[bytes | None, int]] = {}
        # The value format's encoder where it returns bytes or raises: one try per record,
        # and the checked path only for a record that fails.
        self._trusted = _TRUSTED.get(sink.value_format)
        # Where the values and keys come from, for the error a value the format cannot
        # encode raises ("returned by map(count)"); set by the record path.
        self.value_origin: str | None = None
        self.key_origin: str | None = None

    def write(self, key_bytes: bytes | None, values: list[Any], timestamp: int,
              into: list[tuple[int, bytes | None, bytes, int]] | None = None) -> None:
        """Encode ``values`` (and the key, from its stream form ``key_bytes``) with the
        sink's formats and hold them until the caller hands them on (``into``: append
        them there instead, for ``hold``). A value or key the format cannot encode is a
        ``UserFunctionError`` naming the sink, the format and what to change; nothing of
        the record is held."""
        if key_bytes is not None and len(values) == 1 and into is None:
            self.write_one(key_bytes, values[0], timestamp)
        else:
            self._write_all(key_bytes, values, timestamp, into)

    def write_one(self, key_bytes: bytes | None, value: Any, timestamp: int) -> None:
        """``write`` of one value: the common record, a keyed one, with no list built."""
        trusted = self._trusted
        if key_bytes is not None and trusted is not None:
            known = self._by_key.get(key_bytes)
            k, partition = known if known is not None else self._key_and_partition(key_bytes)
            try:
                encoded = trusted(value)
            except Exception:
                pass    # the checked encoding names what failed
            else:
                self._pending.append((partition, k, encoded, timestamp))
                return
        self._write_all(key_bytes, [value], timestamp, None)

    def _write_all(self, key_bytes: bytes | None, values: list[Any], timestamp: int,
                   into: list[tuple[int, bytes | None, bytes, int]] | None) -> None:
        if key_bytes is not None:
            known = self._by_key.get(key_bytes)
            k, fixed = known if known is not None else self._key_and_partition(key_bytes)
        else:
            k, fixed = None, None
        encoded: list[bytes] | None = None
        if self._trusted is not None:
            try:
                encoded = [self._trusted(value) for value in values]
            except Exception:
                pass    # the checked encoding below names what failed
        if encoded is None:
            ser, encode, fmt = self._value, self._encode, self.value_format
            encoded = [encode(ser, fmt, "value", value) for value in values]
        pending = self._pending if into is None else into
        if fixed is not None:
            for v in encoded:
                pending.append((fixed, k, v, timestamp))
            return
        for v in encoded:   # keyless output: round robin
            self._rr += 1
            pending.append((self._rr % self.partitions, k, v, timestamp))

    def encode(self, key_bytes: bytes | None, values: list[Any],
               timestamp: int) -> list[tuple[int, bytes | None, bytes, int]]:
        """``write``'s encoding without holding anything: ``(partition, key, value,
        timestamp)`` per value, for ``hold``. Raises as ``write`` does."""
        out: list[tuple[int, bytes | None, bytes, int]] = []
        self.write(key_bytes, values, timestamp, out)
        return out

    def hold(self, encoded: list[tuple[int, bytes | None, bytes, int]]) -> None:
        """Output ``encode`` made, held until the caller hands it on."""
        self._pending += encoded

    def _key_and_partition(self, key_bytes: bytes) -> tuple[bytes | None, int]:
        """The sink key of a stream key, and its partition: where Kafka's default
        partitioner (every Java client) puts the sink key, so other clients co-partition
        with the job's output; by the stream key when the sink has no key format.
        Remembered (up to a bound): a hot key is encoded and hashed once."""
        k = None
        if self._key is None:
            partition = zlib.crc32(key_bytes) % self.partitions
        else:
            skip = STR_HEADER.get(key_bytes[0]) if self._utf8_key and key_bytes else None
            k = (key_bytes[skip:] if skip is not None else
                 self._encode(self._key, self.key_format, "key", decode_key(key_bytes)))
            # kafka_partition, inlined: most records of a large key space come here
            partition = (_c_murmur2(k, _MURMUR2_SEED) & 0x7FFFFFFF) % self.partitions
        if len(self._by_key) >= _KEY_PARTITIONS_KEPT:
            self._by_key.clear()
        self._by_key[key_bytes] = (k, partition)
        return k, partition

    def _encode(self, ser: Any, fmt: str | None, what: str, value: Any) -> bytes:
        try:
            out = ser(value)
        except Exception as exc:
            raise self._cannot_encode(fmt, what, value, exc) from None
        if type(out) is not bytes:  # the bytes format passes the value through
            if isinstance(out, (bytearray, memoryview)):
                return bytes(out)
            raise self._cannot_encode(fmt, what, value, None) from None
        return out

    def _cannot_encode(self, fmt: str | None, what: str, value: Any,
                       exc: Exception | None) -> UserFunctionError:
        origin = self.value_origin if what == "value" else self.key_origin
        shown = "None" if value is None else f"{type(value).__name__} {_short_repr(value)}"
        why = f" ({type(exc).__name__}: {exc})" if fmt in ("json", "msgpack") and exc else ""
        err = UserFunctionError(
            f"sink {self.topic!r} {what} format {fmt} cannot encode {shown}"
            f"{f' ({origin})' if origin else ''}{why}: {_format_hint(fmt, what, value)}")
        err.sink_format = True  # type: ignore[attr-defined]  # the fix is the format
        return err

    def __len__(self) -> int:
        return len(self._pending)

    def produce_into(self, producer: Producer, *, reported: bool = True) -> int:
        """Hand the held output to ``producer``; returns how many records. ``reported=False``:
        nobody needs their offsets (a transaction's output, whose commit fails if any of
        it does; ``Producer.produce_many``)."""
        pending, self._pending = self._pending, []
        producer.produce_many(self.topic, pending, reported=reported)
        self.produced += len(pending)
        return len(pending)

    def produce_counted(self, producer: Producer) -> dict[int, int]:
        """``produce_into``, returning the records per partition (the local log's output
        ranges: a count per record that the other output modes do not pay)."""
        counts = Counter(p for p, _, _, _ in self._pending)
        self.produce_into(producer)
        return dict(counts)

    def discard(self) -> None:
        self._pending = []


#: Encoders that return bytes or raise, like their FORMATS entries (the bytes format
#: passes any value through, so it is checked value by value).
_TRUSTED: dict[str, Any] = {"utf8": str.encode, "json": FORMATS["json"][0],
                            "msgpack": _pack}


#: What each sink format encodes, for the error of a value it cannot.
_TAKES = {"utf8": "a str", "bytes": "bytes",
          "json": "JSON values (dict, list, str, int, float but NaN and infinities, bool, "
                  "None)",
          "msgpack": "msgpack values (dict, list, str, bytes, int, float, bool, None)"}

_TAKES_KEY = {"utf8": "a str", "bytes": "bytes", "json": "a str or an int"}


def _format_hint(fmt: str | None, what: str, value: Any) -> str:
    """What to change when sink format ``fmt`` cannot encode ``value`` (a key or value)."""
    option = "value" if what == "value" else "key"
    if what == "value":
        fix = f"return {_TAKES.get(fmt or '', 'what the format takes')}"
    else:  # keys are str, bytes or int (runtime/operators.encode_key)
        fix = f"make the key {_TAKES_KEY.get(fmt or '', 'what the format takes')}"
    if fmt == "utf8":
        other = "'bytes'" if isinstance(value, (bytes, bytearray)) else "'json'/'msgpack'"
        return f"{fix}, or choose {option}={other}"
    if fmt == "bytes":
        other = "'utf8'" if isinstance(value, str) else "'json'/'msgpack'"
        return f"{fix}, or choose {option}={other}"
    if fmt == "json":
        return f"{fix}, or choose {option}='msgpack' (bytes too), or convert it first"
    return f"{fix}, or convert it first (e.g. with a .map step)"


def _short_repr(value: Any, limit: int = 60) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
