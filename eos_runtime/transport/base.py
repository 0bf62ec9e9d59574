"""The transport seam: one narrow interface for a partitioned, offset-addressed log.

Two implementations stand behind it: Kafka (``kafka/``, confluent-kafka) and the
embedded local log (``locallog/``, files under a data directory). Nothing above
this seam imports a backend; backend errors become ``eos_runtime.errors`` classes
inside the implementations.

The contract (``tests/test_transport_contract.py`` runs it against both):

* A partition is an append-only sequence of records addressed by offsets that
  increase strictly with every record. Offsets are *not* promised to be dense:
  Kafka spends offsets on transaction markers. ``watermarks`` gives ``(low, high)``
  where ``high`` is the offset the next appended record will get at the earliest.
* ``Producer.produce`` only enqueues. ``Producer.flush`` returns once every record
  enqueued before it is acknowledged, and reports the offset of the last record
  written to each partition since the previous flush; a record that was not
  acknowledged makes ``flush`` raise ``DeliveryFailed``. An acknowledged record
  survives the death of the producing process (SIGKILL included).
* Records of one producer to one partition keep their order.
* ``Consumer.poll`` returns records of the assigned, un-paused partitions in offset
  order per partition, in batches. ``assign`` clears every pause; ``seek`` keeps it.
* Transactions exist only where ``Transport.supports_transactions`` is true (Kafka).
  The exactly-once protocol never depends on them except for the Kafka sink.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "TopicSpec",
    "TopicPartition",
    "Record",
    "Oldest",
    "Upcoming",
    "AtOffset",
    "AtTimestamp",
    "Position",
    "OLDEST",
    "UPCOMING",
    "Producer",
    "PendingProducer",
    "Consumer",
    "Transport",
]


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """What a topic should look like: its name, partition count and cleanup policy.

    ``keep_forever`` asks for no time or size retention (a job's change log and control
    topic: recovery reads them back to the start). ``describe`` does not report it."""

    name: str
    partitions: int = 1
    compacted: bool = False
    keep_forever: bool = field(default=False, compare=False)
    #: how far past its clock a record's timestamp may be (ms), as ``describe`` found it
    #: (Kafka's message.timestamp.after.max.ms: an hour by default on Kafka 4); None: no
    #: bound (the local log)
    ahead_ms: int | None = field(default=None, compare=False)
    #: the largest record the topic takes (Kafka's max.message.bytes), as ``describe``
    #: found it; None: no bound known
    max_bytes: int | None = field(default=None, compare=False)


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class Record(NamedTuple):
    """One consumed record. ``timestamp`` is milliseconds since the epoch."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


# Positions a reader can start from (Samza's offset.default and Startpoint kinds).
@dataclass(frozen=True, slots=True)
class Oldest:
    """The first record still held by the partition."""


@dataclass(frozen=True, slots=True)
class Upcoming:
    """The offset the next appended record will get: only new records are read."""


@dataclass(frozen=True, slots=True)
class AtOffset:
    offset: int


@dataclass(frozen=True, slots=True)
class AtTimestamp:
    """The first record whose timestamp is >= ``timestamp`` ms; ``Upcoming`` if none."""

    timestamp: int


Position = Oldest | Upcoming | AtOffset | AtTimestamp
OLDEST = Oldest()
UPCOMING = Upcoming()


class Producer(abc.ABC):
    """Writes records; see the module docstring for what ``flush`` promises."""

    #: True where begin/commit/abort_transaction work.
    transactional: bool = False

    @abc.abstractmethod
    def produce(self, topic: str, partition: int, value: bytes | None,
                key: bytes | None = None, timestamp: int | None = None) -> None:
        """Enqueue one record. ``timestamp`` (ms) defaults to now."""

    def produce_many(self, topic: str,
                     records: Iterable[tuple[int, bytes | None, bytes | None, int]], *,
                     reported: bool = True) -> None:
        """Enqueue ``(partition, key, value, timestamp)`` records in order: what ``produce``
        does for each, where a transport can do it for less per record.

        ``reported=False``: the caller needs none of their offsets. In a transaction, a
        transport may then leave them out of the flush and commit reports (a Kafka
        producer spends no delivery report on each); a record that fails still fails the
        transaction's commit."""
        for partition, key, value, timestamp in records:
            self.produce(topic, partition, value, key=key, timestamp=timestamp)

    @abc.abstractmethod
    def flush(self, timeout: float = 30.0) -> dict[TopicPartition, int]:
        """Wait for every enqueued record; return the last offset per partition written."""

    def send(self) -> None:  # noqa: B027 - an optional hook: by default nothing to send
        """Hand what ``produce`` buffered to the log now, without waiting for
        acknowledgement (readers may see it before ``flush``). Kafka sends in the
        background anyway; the local log appends its buffered batches."""

    def begin_transaction(self) -> None:
        raise NotImplementedError("this producer is not transactional")

    def commit_transaction(self, timeout: float = 30.0) -> dict[TopicPartition, int]:
        """Flush, then commit; returns what ``flush`` would."""
        raise NotImplementedError("this producer is not transactional")

    def abort_transaction(self, timeout: float = 30.0) -> None:
        raise NotImplementedError("this producer is not transactional")

    @abc.abstractmethod
    def close(self) -> None:
        """Release resources. Records not flushed may be lost."""

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PendingProducer:
    """A producer on its way (``Transport.start_producer``). ``take(generation)`` returns
    it once, ready; ``close`` releases one never taken (or does nothing after a take)."""

    def __init__(self, make: Callable[[int], Producer],
                 drop: Callable[[], None] | None = None) -> None:
        self._make: Callable[[int], Producer] | None = make
        self._drop = drop

    def take(self, generation: int) -> Producer:
        make, self._make = self._make, None
        if make is None:
            raise RuntimeError("this pending producer was taken or closed already")
        self._drop = None
        return make(generation)

    def close(self) -> None:
        drop, self._make, self._drop = self._drop, None, None
        if drop is not None:
            drop()


class Consumer(abc.ABC):
    """Reads records from explicitly assigned partitions (no group management)."""

    @abc.abstractmethod
    def assign(self, positions: Mapping[TopicPartition, int]) -> None:
        """Replace the assignment: read each partition from the given offset.

        Every pause is cleared, including those of partitions assigned again: after
        ``assign`` all of ``positions`` are read, whatever was paused before."""

    @abc.abstractmethod
    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Continue reading an assigned partition from ``offset``. A paused partition
        stays paused; after ``resume`` it is read from ``offset``."""

    @abc.abstractmethod
    def pause(self, tps: Iterable[TopicPartition]) -> None:
        """Stop returning records of these partitions until resumed (backpressure).
        Only assigned partitions can be paused: any other raises ``TransportError``
        and nothing is paused. Pausing a paused partition changes nothing."""

    @abc.abstractmethod
    def resume(self, tps: Iterable[TopicPartition]) -> None:
        """Undo ``pause``; reading goes on from ``position``. Partitions that are not
        assigned raise ``TransportError`` (nothing is resumed); resuming a partition
        that is not paused changes nothing."""

    @abc.abstractmethod
    def poll(self, max_records: int = 10_000, timeout: float = 1.0) -> list[Record]:
        """Return up to ``max_records`` records, waiting at most ``timeout`` s for the first."""

    @abc.abstractmethod
    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record ``poll`` may return for ``tp``."""

    @abc.abstractmethod
    def assignment(self) -> list[TopicPartition]: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Transport(abc.ABC):
    """A partitioned log: topics, producers, consumers and position look-ups."""

    #: "kafka" or "local"
    name: str
    supports_transactions: bool = False

    @property
    def location(self) -> str:
        """Where the log is, as messages name it: "the local log in DIR", "Kafka at HOST"."""
        return f"the {self.name} transport"

    @abc.abstractmethod
    def create_topics(self, specs: Iterable[TopicSpec]) -> None:
        """Create missing topics. An existing topic of the same partition count is
        fine; one with another partition count raises ``TopicExists``."""

    @abc.abstractmethod
    def describe(self, topic: str) -> TopicSpec:
        """The topic's layout; ``TopicNotFound`` if it does not exist."""

    @abc.abstractmethod
    def list_topics(self) -> list[str]: ...

    @abc.abstractmethod
    def delete_topics(self, names: Iterable[str]) -> list[str]:
        """Delete these topics, records and all; names that do not exist are skipped.
        Returns the names deleted. On return each is gone: ``describe`` raises
        ``TopicNotFound``, ``list_topics`` leaves it out, and ``create_topics`` makes a
        new, empty topic of that name (of any partition count). Clients still holding
        the old topic (another process's producer, say) are not warned: delete only
        what nothing uses. Fences (``fenced_producer``) are not topics and stay."""

    @abc.abstractmethod
    def producer(self, *, transactional_id: str | None = None) -> Producer:
        """A new producer; a transactional one needs ``supports_transactions``."""

    def fenced_producer(self, fence_id: str, generation: int) -> Producer:
        """A producer that stops working once one with the same ``fence_id`` and a newer
        ``generation`` exists: its writes then raise ``ProducerFenced``. A write that
        succeeded happened before the newer producer started (zombie fencing). Generations
        must grow: registering one not newer than the last raises ``ProducerFenced``.

        Kafka: a transactional producer (``transactional.id`` = ``fence_id``; the broker's
        epoch does the fencing, so write inside transactions). Local log: a fence checked
        under each append's lock; each partition's records go in one append per flush.
        """
        raise NotImplementedError(f"{type(self).__name__} has no fenced producers")

    def start_producer(self, fence_id: str | None = None) -> PendingProducer:
        """A producer made while its owner does other work: ``take(generation)`` hands it
        over, a ``fenced_producer(fence_id, generation)`` if ``fence_id`` is given, else a
        plain one. Errors making it are raised by ``take``. A task starts its change-log
        writer's producer this way before it reads its change log: what the broker makes
        a new producer wait for then passes while recovery runs.

        By default a plain producer is made at once and a fenced one at ``take`` (its
        generation is not known before). Kafka starts a fenced one at once too, in the
        background: its fence is the transactional id, whatever the generation, and its
        ``init_transactions`` waits for the broker to abort the open transaction of the
        instance it fences (librdkafka retries every 500 ms); a new idempotent producer
        waits 500 ms for its producer id before its first write."""
        if fence_id is not None:
            return PendingProducer(lambda generation: self.fenced_producer(fence_id, generation))
        producer = self.producer()
        return PendingProducer(lambda generation: producer, producer.close)

    def max_record_bytes(self) -> int | None:
        """The largest record (key and value) this transport's producers send, where it
        has a limit (Kafka: the producer's ``message.max.bytes``); None: none known."""
        return None

    def fence_generation(self, fence_id: str) -> int:
        """The newest generation registered for ``fence_id`` (0: none, or a transport that
        does not number them: Kafka's broker keeps its own epoch). A generation handed out
        here may never have reached the change log (its holder died before writing), so a
        new one must exceed both."""
        return 0

    @abc.abstractmethod
    def consumer(self, *, read_committed: bool = True) -> Consumer:
        """A new consumer. ``read_committed`` hides records of open and aborted
        transactions where the log has transactions."""

    @abc.abstractmethod
    def watermarks(self, tp: TopicPartition, *, read_committed: bool = True) -> tuple[int, int]:
        """``(low, high)``: the first offset held and the end (next offset, or the
        last stable offset for read_committed on Kafka)."""

    @abc.abstractmethod
    def offset_for_timestamp(self, tp: TopicPartition, timestamp: int) -> int:
        """The first offset whose record timestamp is >= ``timestamp``; ``high`` if none."""

    @abc.abstractmethod
    def delete_records(self, tp: TopicPartition, before: int) -> int:
        """Delete ``tp``'s records below offset ``before`` (retention: input every reader
        has consumed). Returns the partition's low watermark afterwards: ``before``, or the
        old low if that was higher already (a deletion never moves it back). ``before``
        above the high watermark raises ``OffsetOutOfRange``. Afterwards ``watermarks``
        reports the new low, and assigning or seeking a consumer below it, or reading a
        position that fell below it, raises ``OffsetOutOfRange``; offsets of the records
        kept do not change. Kafka: the broker's DeleteRecords; local log: a low watermark
        per partition, and the file's bytes below it freed (a hole punched)."""

    def resolve(self, tp: TopicPartition, position: Position) -> int:
        """Turn a ``Position`` into a concrete offset for ``tp``."""
        match position:
            case AtOffset(offset):
                return offset
            case Oldest():
                return self.watermarks(tp)[0]
            case Upcoming():
                return self.watermarks(tp)[1]
            case AtTimestamp(timestamp):
                return self.offset_for_timestamp(tp, timestamp)
        raise TypeError(f"not a Position: {position!r}")

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def partitions_of(specs: Sequence[TopicSpec]) -> list[TopicPartition]:
    """Every partition of the given topics, in order."""
    return [TopicPartition(s.name, p) for s in specs for p in range(s.partitions)]
