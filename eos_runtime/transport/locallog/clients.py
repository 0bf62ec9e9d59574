"""The local log's clients, handed out by ``LocalLogTransport`` (``transport.py``).

``_LocalProducer`` buffers records per partition and makes each flush one atomic append
per partition, so a batch is committed whole or not at all. ``_LocalConsumer`` reads
committed frames straight from the files: it reads a partition's commit pointer first and
never looks past it, and checks the low watermark before it reads, so nothing reads the
hole ``delete_records`` may have punched below it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from typing import Protocol

from ...errors import OffsetOutOfRange, TransportError
from ..base import Consumer, Producer, Record, TopicPartition
from .files import _FRAME, _PartitionFiles, _scan


class LocalLog(Protocol):
    """What the clients use of the ``LocalLogTransport`` that hands them out: its
    partitions' files and its one append path (the transport imports this module, so
    the clients name it by this, not by its class)."""

    def _partition(self, tp: TopicPartition) -> _PartitionFiles: ...

    def _writable_partition(self, tp: TopicPartition) -> _PartitionFiles: ...

    def _position_of(self, tp: TopicPartition, offset: int) -> int: ...

    def _append(self, tp: TopicPartition, records: list[tuple[bytes | None, bytes | None, int]],
                fence: tuple[int, str, int] | None = None) -> int: ...


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _as_bytes(data: object, what: str) -> bytes:
    """A bytes-like key or value as bytes; anything else (``bytes(5)`` is five zero bytes,
    not b"5") is an error naming it."""
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TransportError(f"a record's {what} must be bytes, not {type(data).__name__}")


class _LocalProducer(Producer):
    """Buffers per partition; every flush is one atomic append per partition."""

    #: records buffered per partition before they are appended without waiting for flush
    MAX_PENDING = 10_000

    def __init__(self, log: LocalLog, fence: tuple[int, str, int] | None = None) -> None:
        self._log = log
        self._fence = fence
        self._pending: dict[TopicPartition, list[tuple[bytes | None, bytes | None, int]]] = {}
        self._written: dict[TopicPartition, int] = {}
        self._closed = False

    def produce(self, topic: str, partition: int, value: bytes | None,
                key: bytes | None = None, timestamp: int | None = None) -> None:
        if self._closed:   # a fenced one's close drops its fence: it must not write on
            raise TransportError("produce on a closed producer")
        tp = TopicPartition(topic, partition)
        batch = self._pending.get(tp)
        if batch is None:
            # An unknown topic or partition, or a read-only log, fails here, not at flush.
            self._log._writable_partition(tp)
            batch = self._pending[tp] = []
        if key is not None and type(key) is not bytes:
            key = _as_bytes(key, "key")
        if value is not None and type(value) is not bytes:
            value = _as_bytes(value, "value")
        if timestamp is not None and not -(2**63) <= timestamp < 2**63:
            raise TransportError(f"timestamp {timestamp} is outside 64 bits")
        batch.append((key, value, _now_ms() if timestamp is None else timestamp))
        if len(batch) >= self.MAX_PENDING and self._fence is None:
            self._written[tp] = self._log._append(tp, batch)
            self._pending[tp] = []

    def _append_pending(self) -> None:
        # Each partition's batch leaves the pending ones once appended: a flush that fails
        # at a later partition, tried again, must not append the earlier ones twice.
        for tp in list(self._pending):
            batch = self._pending[tp]
            if batch:
                self._written[tp] = self._log._append(tp, batch, self._fence)
            del self._pending[tp]

    def send(self) -> None:
        if self._fence is None:  # a fenced producer keeps one append per partition per flush
            self._append_pending()

    def flush(self, timeout: float = 30.0) -> dict[TopicPartition, int]:
        if self._closed:
            raise TransportError("flush on a closed producer")
        self._append_pending()
        written, self._written = self._written, {}
        return written

    def close(self) -> None:
        self._closed = True
        self._pending.clear()
        if self._fence is not None:
            os.close(self._fence[0])
            self._fence = None


class _LocalConsumer(Consumer):
    """Reads committed frames straight from the files; waits by polling the pointers."""

    _IDLE_SLEEP = (0.001, 0.05)  # first and longest pause between empty looks

    def __init__(self, log: LocalLog) -> None:
        self._log = log
        # partition -> [next offset, file position]
        self._cursor: dict[TopicPartition, list[int]] = {}
        self._paused: set[TopicPartition] = set()
        self._rr = 0

    def assign(self, positions: Mapping[TopicPartition, int]) -> None:
        cursors = {}
        for tp, offset in positions.items():
            tp = TopicPartition(*tp)
            cursors[tp] = [offset, self._log._position_of(tp, offset)]
        self._cursor = cursors
        # The contract: a new assignment starts unpaused (callers re-position after
        # backpressure and forget their pauses).
        self._paused = set()

    def _assigned(self, tp: TopicPartition | tuple[str, int]) -> TopicPartition:
        tp = TopicPartition(*tp)
        if tp not in self._cursor:
            raise TransportError(f"{tp.topic}[{tp.partition}] is not assigned")
        return tp

    def seek(self, tp: TopicPartition, offset: int) -> None:
        tp = self._assigned(tp)
        self._cursor[tp] = [offset, self._log._position_of(tp, offset)]

    def pause(self, tps: Iterable[TopicPartition]) -> None:
        # All checked before any is paused, as on Kafka.
        self._paused.update([self._assigned(tp) for tp in tps])

    def resume(self, tps: Iterable[TopicPartition]) -> None:
        self._paused.difference_update([self._assigned(tp) for tp in tps])

    def position(self, tp: TopicPartition) -> int:
        return self._cursor[self._assigned(tp)][0]

    def assignment(self) -> list[TopicPartition]:
        return list(self._cursor)

    def poll(self, max_records: int = 10_000, timeout: float = 1.0) -> list[Record]:
        deadline = time.monotonic() + timeout
        sleep = self._IDLE_SLEEP[0]
        while True:
            out = self._read(max_records)
            if out or time.monotonic() >= deadline:
                return out
            time.sleep(min(sleep, max(0.0, deadline - time.monotonic())))
            sleep = min(sleep * 2, self._IDLE_SLEEP[1])

    def _read(self, max_records: int) -> list[Record]:
        active = [tp for tp in self._cursor if tp not in self._paused]
        out: list[Record] = []
        if not active:
            return out
        self._rr = (self._rr + 1) % len(active)
        for tp in active[self._rr:] + active[:self._rr]:
            budget = max_records - len(out)
            if budget <= 0:
                break
            files = self._log._partition(tp)
            cursor = self._cursor[tp]
            end = files.pointer().end
            if cursor[1] >= end:
                continue
            low = files.low()[0]
            if cursor[0] < low:   # deleted under this reader: its bytes may be a hole now
                raise OffsetOutOfRange(f"{tp.topic}[{tp.partition}]: position {cursor[0]} was "
                                       f"deleted (the partition starts at {low})")
            topic, partition = tp
            for offset, pos, ts, key, value in _scan(files, cursor[1], end, cursor[0]):
                out.append(Record(topic, partition, offset, key, value, ts))
                cursor[0] = offset + 1
                cursor[1] = pos + _FRAME.size + (len(key) if key is not None else 0) + (
                    len(value) if value is not None else 0)
                budget -= 1
                if budget == 0:
                    break
        return out

    def close(self) -> None:
        self._cursor.clear()
        self._paused.clear()
