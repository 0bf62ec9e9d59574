"""The bench's own Kafka I/O, straight on confluent-kafka.

Not the runtime's transport: the bench measures the runtime against peers, so the topics
it times, the burst it feeds them and the reading of their output must not depend on the
code under test. Its topics keep the broker's append time
(``message.timestamp.type=LogAppendTime``): every system is then timed by the same clock,
the broker's, from the first input record's append to the last output record's.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable, Iterable

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    ConsumerGroupState,
    KafkaException,
    Producer,
)
from confluent_kafka import TopicPartition as _TP
from confluent_kafka.admin import AdminClient, NewTopic

from ..errors import EosError
from ..runtime.outputs import kafka_partition
from ..transport import Record

__all__ = ["BenchKafka", "OutputWatch", "readable_at", "topic_process_arguments", "APPEND_TIME"]

APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


class BenchKafka:
    def __init__(self, bootstrap_servers: str, timeout: float = 30.0) -> None:
        self.bootstrap = bootstrap_servers
        self.timeout = timeout
        self.admin = AdminClient({"bootstrap.servers": bootstrap_servers})

    def check(self) -> None:
        """One clear error when the broker does not answer."""
        try:
            self.admin.list_topics(timeout=min(self.timeout, 10.0))
        except KafkaException as exc:
            raise EosError(f"Kafka at {self.bootstrap} does not answer: {exc}") from None

    def create_topics(self, names: Iterable[str], partitions: int) -> None:
        new = [NewTopic(n, num_partitions=partitions, replication_factor=-1, config=APPEND_TIME)
               for n in names]
        for name, fut in self.admin.create_topics(new, operation_timeout=self.timeout).items():
            try:
                fut.result(timeout=self.timeout + 5)
            except KafkaException as exc:
                raise EosError(f"creating bench topic {name!r}: {exc}") from None
        # A producer that races the leader election gets UNKNOWN_TOPIC errors; wait it out.
        deadline = time.monotonic() + self.timeout
        for topic in new:
            while True:
                md = self.admin.list_topics(topic=topic.topic, timeout=self.timeout).topics
                parts = md.get(topic.topic)
                if (parts is not None and parts.error is None and len(parts.partitions) ==
                        partitions and all(p.leader >= 0 for p in parts.partitions.values())):
                    break
                if time.monotonic() > deadline:
                    raise EosError(f"bench topic {topic.topic!r} has no leader after "
                                   f"{self.timeout:g}s")
                time.sleep(0.1)

    def write_table(self, topic: str, records: list[tuple[bytes | None, bytes]],
                    partitions: int) -> None:
        """Write a table's keyed records, each where Kafka's default partitioner (murmur2,
        the Java client's and Quix's) puts its key, so a key's rows stay in order and the
        table is co-partitioned with a stream keyed the same way; wait until every one is
        acknowledged."""
        failed: list[str] = []

        def report(err: object, _msg: object) -> None:
            if err is not None:
                failed.append(str(err))

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5,
                             "on_delivery": report})
        for key, value in records:
            if key is None:
                raise EosError(f"table {topic!r}: a record without a key ({value[:60]!r})")
            while True:
                try:
                    producer.produce(topic, value, key, kafka_partition(key, partitions))
                    break
                except BufferError:   # the client's queue is full: let it send
                    producer.poll(0.05)
        left = producer.flush(self.timeout)
        if left or failed:
            raise EosError(f"writing table {topic!r}: {left} records undelivered, "
                           f"errors: {failed[:3]}")

    def delete_topics_of(self, run: str) -> None:
        """Drop a finished run's topics: its own and those its system made, all of which
        carry the run's unique name (as a prefix, or inside a peer's naming scheme)."""
        names = [t for t in self.admin.list_topics(timeout=self.timeout).topics if run in t]
        if names:
            for fut in self.admin.delete_topics(names, operation_timeout=self.timeout).values():
                try:
                    fut.result(timeout=self.timeout + 5)
                except KafkaException:
                    pass   # cleanup is best effort; a left topic only costs disk

    def group_ready(self, group: str, members: int, topic: str, partitions: int) -> bool:
        """The consumer group is stable with ``members`` members, and together they hold
        every partition of ``topic``."""
        try:
            desc = self.admin.describe_consumer_groups([group])[group].result(timeout=10)
        except KafkaException:
            return False
        if desc.state != ConsumerGroupState.STABLE or len(desc.members) != members:
            return False
        held = {tp.partition for m in desc.members if m.assignment is not None
                for tp in m.assignment.topic_partitions if tp.topic == topic}
        return held == set(range(partitions))

    def append_times(self, topic: str, partitions: int, wanted: set[tuple[bytes | None, bytes]]
                     ) -> dict[tuple[bytes | None, bytes], int]:
        """The broker's append time of each record (key, value) in ``wanted`` (its first
        copy), reading the topic to its current end."""
        found: dict[tuple[bytes | None, bytes], int] = {}
        with _consumer(self.bootstrap, read_committed=False) as c:
            tps = [_TP(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
            ends = dict(enumerate(partition_ends(c, topic, partitions, self.timeout)))
            c.assign(tps)
            done = {p for p, end in ends.items() if end == 0}
            deadline = time.monotonic() + self.timeout
            while len(done) < partitions and time.monotonic() < deadline:
                for m in c.consume(10_000, 0.5):
                    part = m.partition()
                    if m.error() is not None or part is None:
                        continue
                    pair = (m.key(), m.value() or b"")
                    if pair in wanted and pair not in found:
                        found[pair] = m.timestamp()[1]
                    if (m.offset() or 0) + 1 >= ends[part]:
                        done.add(part)
        return found

    def first_append_ms(self, topic: str, partitions: int) -> int:
        """The broker's append time of the topic's first record (all partitions)."""
        first: list[int] = []
        with _consumer(self.bootstrap, read_committed=False) as c:
            c.assign([_TP(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
            deadline = time.monotonic() + self.timeout
            seen: set[int] = set()
            while len(seen) < partitions and time.monotonic() < deadline:
                for m in c.consume(100, 0.5):
                    part = m.partition()
                    if m.error() is not None or part is None or part in seen:
                        continue
                    kind, ts = m.timestamp()
                    if kind != TIMESTAMP_LOG_APPEND_TIME:
                        raise EosError(f"topic {topic!r} does not keep append times")
                    seen.add(part)
                    first.append(ts)
        if not first:
            raise EosError(f"topic {topic!r} holds no record")
        return min(first)


class _consumer:
    """A group-less consumer as a context manager (offsets are never committed)."""

    def __init__(self, bootstrap: str, *, read_committed: bool) -> None:
        # A short fetch wait: the broker answers a fetch as soon as records are visible
        # anyway; this only bounds how late an empty one returns.
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                           "fetch.wait.max.ms": 20,
                           "enable.auto.commit": False, "auto.offset.reset": "earliest",
                           "isolation.level": "read_committed" if read_committed
                           else "read_uncommitted",
                           "enable.partition.eof": False})

    def __enter__(self) -> Consumer:
        return self.c

    def __exit__(self, *exc: object) -> None:
        self.c.close()


class OutputWatch:
    """Reads a sink topic as a read_committed reader, keeping every record with its append
    time, and ticks the expected results off as they arrive."""

    def __init__(self, bootstrap: str, topic: str, partitions: int,
                 expected: dict[tuple[bytes, bytes], int],
                 value_part: Callable[[bytes], bytes] | None = None) -> None:
        self._ctx = _consumer(bootstrap, read_committed=True)
        self.c = self._ctx.__enter__()
        self.c.assign([_TP(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.topic = topic
        self.partitions = partitions
        self.remaining = dict(expected)
        self.value_part = value_part
        self.missing = sum(expected.values())
        self.records: list[Record] = []
        self.complete_ms: int | None = None     # the latest append among the answer's records
        self.visible_ms: int | None = None      # when this reader saw it (this host's clock)
        self.last_ms: int | None = None
        self.needed: dict[int, int] = {}        # per partition, the answer's last offset
        self.first_read_at: float | None = None  # time.monotonic() of the first record read

    def poll(self, timeout: float = 0.5) -> int:
        """Read what is there; return how many expected results were newly ticked off."""
        ticked = 0
        # consume(n, t) waits all of t unless n records come: take what is fetched, else
        # wait for the first record only, so the answer's arrival is seen when it happens
        msgs = self.c.consume(50_000, 0)
        if not msgs:
            msgs = self.c.consume(1, timeout)
            if msgs:
                msgs += self.c.consume(50_000, 0)
        if msgs and self.first_read_at is None:
            self.first_read_at = time.monotonic()
        for m in msgs:
            if m.error() is not None:
                continue
            ts = m.timestamp()[1]
            key, value = m.key(), m.value()
            self.records.append(Record(self.topic, m.partition() or 0, m.offset() or 0,
                                       key, value, ts))
            self.last_ms = ts if self.last_ms is None else max(self.last_ms, ts)
            part = value or b""
            if self.value_part is not None:
                part = self.value_part(part)
            pair = (key or b"", part)
            left = self.remaining.get(pair, 0)
            if left:
                self.remaining[pair] = left - 1
                self.missing -= 1
                ticked += 1
                p, offset = m.partition() or 0, m.offset() or 0
                self.needed[p] = max(self.needed.get(p, -1), offset)
                self.complete_ms = ts if self.complete_ms is None else max(self.complete_ms, ts)
                if self.missing == 0:
                    self.visible_ms = int(time.time() * 1000)
        return ticked

    def _tps(self) -> list[_TP]:
        return [_TP(self.topic, p) for p in range(self.partitions)]

    def pause(self) -> None:
        """Fetch nothing until ``resume``: the client fetches ahead of ``poll`` otherwise."""
        self.c.pause(self._tps())

    def resume(self) -> None:
        self.c.resume(self._tps())

    def ends(self, timeout: float = 30.0) -> list[int]:
        """Every partition's last stable offset: how far a read_committed reader may read."""
        return partition_ends(self.c, self.topic, self.partitions, timeout)

    def drain(self, timeout: float = 30.0) -> None:
        """Read up to the topic's current committed end."""
        ends = dict(enumerate(self.ends(timeout)))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pos = {tp.partition: tp.offset for tp in self.c.position(self._tps())}
            if all(pos.get(p, -1) >= ends[p] or ends[p] == 0 for p in ends):
                return
            self.poll(0.2)

    def close(self) -> None:
        self._ctx.__exit__()


def partition_ends(c: Consumer, topic: str, partitions: int, timeout: float) -> list[int]:
    """Each partition's end, asked of the broker: the last stable offset for a
    read_committed consumer (what it may read), else the high watermark."""
    return [c.get_watermark_offsets(_TP(topic, p), timeout=timeout, cached=False)[1]
            for p in range(partitions)]


def topic_process_arguments(doc: str | None) -> argparse.ArgumentParser:
    """The command line of a bench process on one topic (the burst producer, the
    visibility clock): FILE, the broker, the topic and its partitions."""
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    return ap


def readable_at(samples: list[tuple[int, list[int]]], needed: dict[int, int]) -> int | None:
    """The first sample time by which each partition's end had passed its offset in
    ``needed``: the latest of those per partition (None if a partition never got there,
    or nothing is needed)."""
    if not needed:
        return None
    latest = 0
    for part, offset in needed.items():
        when = next((t for t, ends in samples if ends[part] > offset), None)
        if when is None:
            return None
        latest = max(latest, when)
    return latest
