"""Where a task's output goes: the channels of the next stage, or the sink topic.

``ChannelWriter`` wraps each value in a data envelope (producer id, generation, version,
sequence per channel) and routes it by key; it also fans out markers and restore
commands to every channel. ``SinkWriter`` holds a version's output until the checkpoint
writes it: inside the Kafka transaction of the checkpoint, or on the local log as one
append per partition whose offsets the commit record lists (the committed reader shows
only those).
"""

from __future__ import annotations

import zlib
from typing import Any

import msgpack

from ..api import FORMATS, Sink
from ..faults import crash_point
from ..protocol import wire
from ..transport import Producer, TopicPartition

__all__ = ["ChannelWriter", "SinkWriter", "partition_for"]

_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def partition_for(key_bytes: bytes | None, partitions: int, fallback: int) -> int:
    if key_bytes is None:
        return fallback % partitions
    return zlib.crc32(key_bytes) % partitions


class ChannelWriter:
    def __init__(self, producer: Producer, topic: str, partitions: int, producer_id: int) -> None:
        self.producer = producer
        self.topic = topic
        self.partitions = partitions
        self.producer_id = producer_id
        self.seq = [0] * partitions
        self.generation = 0      # set by the committer whenever a generation starts
        self._rr = 0

    def write(self, generation: int, version: int, key_bytes: bytes | None, values: list[Any],
              timestamp: int) -> None:
        pid, topic, produce, seq = self.producer_id, self.topic, self.producer.produce, self.seq
        for value in values:
            self._rr += 1
            p = partition_for(key_bytes, self.partitions, self._rr)
            produce(topic, p, wire.encode_data(pid, generation, version, seq[p], key_bytes,
                                               _pack(value), timestamp))
            seq[p] += 1

    def flush(self) -> dict[TopicPartition, int]:
        return self.producer.flush()

    def markers(self, generation: int, version: int) -> None:
        """Marker ``version`` into every channel (SEP-10 3.8), then flush."""
        half = self.partitions // 2
        for p in range(self.partitions):
            if p == half:
                # The first half is flushed before the crash point, so a crash there leaves
                # channels that really hold the marker beside channels that never get it.
                self.producer.flush()
                crash_point("task.checkpoint.mid_marker_fanout")
            self.producer.produce(self.topic, p, wire.encode(
                wire.Marker(self.producer_id, generation, version, self.seq[p])))
        self.producer.flush()

    def restore(self, generation: int, version: int) -> None:
        """Restore command into every channel (SEP-10 1.4 / 4.5), then flush."""
        for p in range(self.partitions):
            self.producer.produce(self.topic, p, wire.encode(
                wire.Restore(self.producer_id, generation, version)))
        self.producer.flush()

    def output_seqs(self) -> tuple[wire.OutputSeq, ...]:
        return tuple(wire.OutputSeq(self.topic, p, s) for p, s in enumerate(self.seq))


class SinkWriter:
    def __init__(self, sink: Sink, partitions: int) -> None:
        self.topic = sink.topic
        self.partitions = partitions
        self._key = FORMATS[sink.key_format][0] if sink.key_format else None
        self._value = FORMATS[sink.value_format][0]
        self._pending: list[tuple[int, bytes | None, bytes, int]] = []
        self._rr = 0

    def write(self, key: Any, key_bytes: bytes | None, values: list[Any], timestamp: int) -> None:
        k = self._key(key) if self._key is not None and key is not None else None
        ser, pending = self._value, self._pending
        for value in values:
            self._rr += 1
            pending.append((partition_for(key_bytes, self.partitions, self._rr), k, ser(value),
                            timestamp))

    def __len__(self) -> int:
        return len(self._pending)

    def produce_into(self, producer: Producer) -> dict[int, int]:
        """Hand the held output to ``producer``; returns records per partition."""
        counts: dict[int, int] = {}
        topic, produce = self.topic, producer.produce
        for p, k, v, ts in self._pending:
            produce(topic, p, v, key=k, timestamp=ts)
            counts[p] = counts.get(p, 0) + 1
        self._pending = []
        return counts

    def discard(self) -> None:
        self._pending = []
