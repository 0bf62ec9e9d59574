"""A task's change log: recovery from it (SEP-10 flow 1.x) and writing to it (3.x).

Each task owns one partition of ``<job>.changelog``. It holds, in order: the
generation-start record of every (re)start (an abort record carrying the new
generation), state changes of each version, and the commit record that makes the
version's checkpoint true (the task's one commit point, invariant 4).

Writes go through a *fenced* producer (``Transport.fenced_producer``): once a newer
generation of the task registered, a zombie's write fails with ``ProducerFenced``. So
every commit record found in the log was written by the newest generation of its time,
and recovery can take the last commit record as the truth without further checks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..errors import EosError, RecoveryError
from ..protocol import wire
from ..state import TaskStore
from ..transport import TopicPartition, Transport

__all__ = ["Recovered", "recover", "catch_up", "last_commit", "ChangeLogWriter"]


@dataclass
class Recovered:
    generation: int = 0                         # highest generation found
    commit: wire.ChangeLogCommit | None = None  # the last commit record
    commit_offset: int = -1
    replayed: int = 0                           # change records applied to the store
    rebuilt: bool = False                       # the local store was wiped and rebuilt
    read_to: int = 0                            # the log was read up to here

    @property
    def version(self) -> int:
        return self.commit.version if self.commit else 0


def _read(transport: Transport, tp: TopicPartition, start: int, end: int):
    with transport.consumer(read_committed=True) as consumer:
        consumer.assign({tp: start})
        deadline = time.monotonic() + 120
        while consumer.position(tp) < end:
            batch = consumer.poll(50_000, 1.0)
            if not batch and time.monotonic() > deadline:
                raise RecoveryError(f"change log {tp.topic}[{tp.partition}]: could not read up to "
                                    f"offset {end} (stuck at {consumer.position(tp)})")
            for r in batch:
                if r.offset >= end:
                    return
                yield r


def recover(transport: Transport, tp: TopicPartition, store: TaskStore) -> Recovered:
    """Bring ``store`` to the last commit in the change log; report what was found.

    Same-host restart: a local store whose checkpoint data points at a commit record of
    the log replays only the log after it. A store that is empty, or points anywhere
    else, is wiped and rebuilt from the whole log. ``Recovered.read_to`` is where reading
    stopped: after registering its new generation the task calls ``catch_up`` to read what
    a zombie may have committed in between.
    """
    result = Recovered()
    low, high = transport.watermarks(tp)
    start = low
    local = store.checkpoint_data()
    if local is not None:
        result.generation = local.generation
        found = None
        if low <= local.changelog_offset < high:
            for r in _read(transport, tp, local.changelog_offset, local.changelog_offset + 1):
                found = wire.decode_changelog(r.value, topic=r.topic, partition=r.partition,
                                              offset=r.offset)
        if (isinstance(found, wire.ChangeLogCommit) and found.generation == local.generation
                and found.version == local.version):
            start = local.changelog_offset + 1
            result.commit, result.commit_offset = found, local.changelog_offset
        else:
            store.wipe()
            result.rebuilt = True
            result.generation = 0
    catch_up(transport, tp, store, result, start, high)
    return result


def catch_up(transport: Transport, tp: TopicPartition, store: TaskStore, result: Recovered,
             start: int, end: int) -> None:
    """Apply the change log's [start, end) to ``store``: every commit's changes in one batch."""
    pending: list[tuple[str, bytes, bytes | None]] = []
    for r in _read(transport, tp, start, end):
        rec = wire.decode_changelog(r.value, topic=r.topic, partition=r.partition, offset=r.offset)
        if rec.generation > result.generation:
            result.generation = rec.generation
        if isinstance(rec, wire.ChangeLogData):
            pending.append((rec.store, rec.key, rec.value))
        elif isinstance(rec, wire.ChangeLogCommit):
            store.restore(pending, wire.CheckpointData(r.offset, rec.generation, rec.version))
            result.replayed += len(pending)
            pending = []
            result.commit, result.commit_offset = rec, r.offset
        else:  # abort: the changes since the last commit never counted
            pending = []
    result.read_to = max(result.read_to, end)


def last_commit(transport: Transport, tp: TopicPartition) -> wire.ChangeLogCommit | None:
    """The newest commit record of a change-log partition, read from the tail backwards in
    growing windows (for the driver and tools: a task recovers with ``recover``)."""
    low, high = transport.watermarks(tp)
    window, end = 64, high
    while end > low:
        start = max(low, end - window)
        found = None
        for r in _read(transport, tp, start, end):
            rec = wire.decode_changelog(r.value, topic=r.topic, partition=r.partition,
                                        offset=r.offset)
            if isinstance(rec, wire.ChangeLogCommit):
                found = rec
        if found is not None:
            return found
        end, window = start, window * 4
    return None


class ChangeLogWriter:
    """Writes one generation's change-log records; ``commit`` is the task's commit point.

    With ``fenced`` (exactly-once) the producer is fenced against zombies; on Kafka it is
    transactional and each version's records form one transaction, which sink output may
    join (``producer``). Without it (at-least-once) a plain producer is used.
    """

    def __init__(self, transport: Transport, tp: TopicPartition, fence_id: str, generation: int,
                 *, fenced: bool) -> None:
        self.tp = tp
        self.generation = generation
        self.producer = (transport.fenced_producer(fence_id, generation) if fenced
                         else transport.producer())
        self.transactional = self.producer.transactional
        if self.transactional:
            self.producer.begin_transaction()

    def _seal(self) -> dict[TopicPartition, int]:
        if self.transactional:
            report = self.producer.commit_transaction()
            self.producer.begin_transaction()
            return report
        return self.producer.flush()

    def start_generation(self, restored_version: int) -> int:
        """Make this generation durable before anything else is written (invariant 5)."""
        self.producer.produce(self.tp.topic, self.tp.partition,
                              wire.encode(wire.ChangeLogAbort(self.generation, restored_version)))
        return self._seal()[self.tp]

    def changes(self, version: int, staged: list[tuple[str, bytes, bytes | None]]) -> None:
        topic, partition, produce = self.tp.topic, self.tp.partition, self.producer.produce
        gen = self.generation
        for store, key, value in staged:
            record = wire.ChangeLogData(gen, version, store, key, value)
            produce(topic, partition, wire.encode(record))

    def commit(self, record: wire.ChangeLogCommit) -> tuple[int, dict[TopicPartition, int]]:
        """Write the commit record and seal it; returns its offset and the flush report."""
        self.producer.produce(self.tp.topic, self.tp.partition, wire.encode(record))
        report = self._seal()
        return report[self.tp], report

    def abort_open(self) -> None:
        """Drop what the open version wrote, where the log can (a Kafka transaction)."""
        if self.transactional:
            self.producer.abort_transaction()
            self.producer.begin_transaction()

    def close(self) -> None:
        if self.transactional:
            try:
                self.producer.abort_transaction()
            except EosError:
                pass
        self.producer.close()
