"""A task's change log: recovery from it (SEP-10 flow 1.x) and writing to it (3.x).

Each task owns one partition of ``<job>.changelog``. It holds, in order: the
generation-start record of every (re)start (an abort record carrying the new
generation), state changes of each version, and the commit record that makes the
version's checkpoint true (the task's one commit point, invariant 4). Now and then a
snapshot (a base record, every live key, a commit) lets the log below it go (C7-C9):
a reader may then find its start deleted under it (``OffsetOutOfRange``), and reads
again from the new start, where a snapshot begins.

Writes go through a *fenced* producer (``Transport.fenced_producer``): once a newer
generation of the task registered, a zombie's write fails with ``ProducerFenced``. What
recovery trusts is decided by the pure fold in ``protocol/recovery.py``; this module
reads the log and applies what the fold hands back.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..errors import OffsetOutOfRange, RecoveryError
from ..protocol import wire
from ..protocol.recovery import RecoveryFold, trusts_local_store
from ..state import TaskStore
from ..transport import Producer, Record, TopicPartition, Transport

__all__ = ["Recovered", "recover", "catch_up", "fold_log", "last_commit", "fence_id",
           "ChangeLogWriter", "own_ranges", "cut_below_snapshot"]


#: A change-log batch record holds at most this many changes, or this many bytes of keys
#: and values, whichever comes first (far below Kafka's default 1 MB record limit; a
#: larger change is a record of its own, as before batches).
CHANGES_PER_RECORD = 4096
CHANGE_BYTES_PER_RECORD = 256 << 10

#: Seconds a change-log read waits per empty poll (recovery's path to output resuming).
_MARKER_WAIT = 0.05


def _read(transport: Transport, tp: TopicPartition, start: int,
          end: int) -> Iterator[Record]:
    with transport.consumer(read_committed=True) as consumer:
        consumer.assign({tp: start})
        deadline = time.monotonic() + 120
        while consumer.position(tp) < end:
            # A short wait: the log ends in a transaction marker after each commit, which a
            # poll never returns, so the read's last poll finds nothing and waits it out.
            batch = consumer.poll(50_000, _MARKER_WAIT)
            if not batch and time.monotonic() > deadline:
                raise RecoveryError(f"change log {tp.topic}[{tp.partition}]: could not read up to "
                                    f"offset {end} (stuck at {consumer.position(tp)})")
            for r in batch:
                if r.offset >= end:
                    return
                yield r


@dataclass
class Recovered:
    """What recovery found: the fold's result, and how it was reached."""

    fold: RecoveryFold
    rebuilt: bool = False                       # the local store was wiped and rebuilt
    empty: bool = False                         # there was no local store to start from
    read_to: int = 0                            # the log was read up to here

    @property
    def generation(self) -> int:
        return self.fold.generation

    @property
    def commit(self) -> wire.ChangeLogCommit | None:
        return self.fold.commit

    @property
    def version(self) -> int:
        return self.fold.version

    @property
    def replayed(self) -> int:
        return self.fold.replayed

    @property
    def from_log(self) -> bool:
        """The state was built from the change log alone: a local store wiped, or none
        (its task ran with another state directory, or on another host) where the log
        has a commit to build it from."""
        return self.rebuilt or (self.empty and self.commit is not None)


def recover(transport: Transport, tp: TopicPartition, store: TaskStore) -> Recovered:
    """Bring ``store`` to the last commit in the change log (``protocol/recovery.py``).

    A local store the log vouches for (C4) replays only the log after its commit; any
    other is wiped and rebuilt from the whole log. ``Recovered.read_to`` is where reading
    stopped: after registering its new generation the task calls ``catch_up`` to read
    what a zombie may have committed in between.
    """
    result = Recovered(RecoveryFold())
    low, high = transport.watermarks(tp)
    start = low
    local = store.checkpoint_data()
    result.empty = local is None
    if local is not None:
        found = None
        if low <= local.changelog_offset < high:
            try:
                for r in _read(transport, tp, local.changelog_offset,
                               local.changelog_offset + 1):
                    found = wire.decode_changelog(r.value, topic=r.topic,
                                                  partition=r.partition, offset=r.offset)
            except OffsetOutOfRange:   # cut meanwhile: the store is older than the log
                found = None
        if trusts_local_store(local, found):
            assert isinstance(found, wire.ChangeLogCommit)
            result.fold.resume_from(local, found)
            start = local.changelog_offset + 1
        else:
            store.wipe()
            result.rebuilt = True
    catch_up(transport, tp, store, result, start, high)
    return result


def catch_up(transport: Transport, tp: TopicPartition, store: TaskStore, result: Recovered,
             start: int, end: int) -> None:
    """Feed the change log's [start, end) to the fold; apply each batch it hands back.

    Where the log was cut below a snapshot meanwhile (a predecessor's last checkpoint, C9),
    the store is rebuilt from the log's new start: a snapshot's base."""
    try:
        _feed(transport, tp, store, result.fold, start, end)
    except OffsetOutOfRange:
        store.wipe()
        result.fold, result.rebuilt = RecoveryFold(generation=result.fold.generation), True
        _feed(transport, tp, store, result.fold, transport.watermarks(tp)[0], end)
    result.read_to = max(result.read_to, end)


def _feed(transport: Transport, tp: TopicPartition, store: TaskStore, fold: RecoveryFold,
          start: int, end: int) -> None:
    for r in _read(transport, tp, start, end):
        batch = fold.feed(r.offset, wire.decode_changelog(r.value, topic=r.topic,
                                                          partition=r.partition,
                                                          offset=r.offset))
        if batch is not None:
            store.restore(list(batch.changes), batch.checkpoint, replace=batch.replace)


def fold_log(transport: Transport, tp: TopicPartition) -> RecoveryFold:
    """The whole change-log partition through the recovery fold, with no store: what a
    task would recover (its generation, last commit), for tools."""
    try:
        return _fold_log(transport, tp)
    except OffsetOutOfRange:   # cut below a snapshot while read: its new start is one
        return _fold_log(transport, tp)


def _fold_log(transport: Transport, tp: TopicPartition) -> RecoveryFold:
    fold = RecoveryFold()
    low, high = transport.watermarks(tp)
    for r in _read(transport, tp, low, high):
        fold.feed(r.offset, wire.decode_changelog(r.value, topic=r.topic, partition=r.partition,
                                                  offset=r.offset))
    return fold


def own_ranges(transport: Transport, tp: TopicPartition, end: int) -> list[wire.OutputRange]:
    """The output ranges of every commit record in the partition below ``end`` (what a
    snapshot carries forward, C9)."""
    found: list[wire.OutputRange] = []
    for r in _read(transport, tp, transport.watermarks(tp)[0], end):
        rec = wire.decode_changelog(r.value, topic=r.topic, partition=r.partition,
                                    offset=r.offset)
        if isinstance(rec, wire.ChangeLogCommit):
            found.extend(rec.output_ranges)
    return found


def cut_below_snapshot(transport: Transport, tp: TopicPartition, base: int,
                       expected: wire.ChangeLogBase) -> bool:
    """C9: delete the partition's records below ``base`` once the record there is the
    sealed snapshot's base ``expected`` (checked, so an offset worked out wrong never
    deletes a snapshot's own records). Returns whether it did."""
    found = None
    for r in _read(transport, tp, base, base + 1):
        found = wire.decode_changelog(r.value, topic=r.topic, partition=r.partition,
                                      offset=r.offset)
    if found != expected:
        return False
    transport.delete_records(tp, base)
    return True


def last_commit(transport: Transport, tp: TopicPartition) -> wire.ChangeLogCommit | None:
    """The newest commit record of a change-log partition, read from the tail backwards in
    growing windows (for the driver and tools: a task recovers with ``recover``)."""
    try:
        return _last_commit(transport, tp)
    except OffsetOutOfRange:   # cut below a snapshot while read: the snapshot's commit is newer
        return _last_commit(transport, tp)


def _last_commit(transport: Transport, tp: TopicPartition) -> wire.ChangeLogCommit | None:
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


def fence_id(job: str, task_id: int) -> str:
    """What fences a task's zombies: one id per task, every generation alike."""
    return f"{job}.task-{task_id}"


class ChangeLogWriter:
    """Writes one generation's change-log records; ``commit`` is the task's commit point.

    Exactly-once writes through a producer fenced against zombies (``open``'s
    ``fenced``); on Kafka it is transactional and each version's records form one
    transaction, which sink output may join (``producer``). At-least-once writes through
    a plain producer.
    """

    def __init__(self, tp: TopicPartition, producer: Producer, generation: int, *,
                 fenced: bool) -> None:
        self.tp = tp
        self.generation = generation
        self.producer = producer
        self.fenced = fenced
        self.transactional = producer.transactional
        if self.transactional:
            producer.begin_transaction()

    @classmethod
    def open(cls, transport: Transport, tp: TopicPartition, fence_id: str, generation: int,
             *, fenced: bool) -> ChangeLogWriter:
        pending = transport.start_producer(fence_id if fenced else None)
        return cls(tp, pending.take(generation), generation, fenced=fenced)

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

    def changes(self, version: int,
                staged: Iterable[tuple[str, list[bytes], list[bytes | None]]]
                ) -> tuple[int, int, int]:
        """Write state changes of ``version``, given as (store, keys, values), in batch
        records (``CL_BATCH``); returns (records, changes, bytes) written."""
        topic, partition, produce = self.tp.topic, self.tp.partition, self.producer.produce
        gen, encode = self.generation, wire.encode_changes
        records = changes = written = 0
        for store, keys, values in staged:
            for ks, vs in _batches(keys, values):
                raw = encode(gen, version, store, ks, vs)
                produce(topic, partition, raw)
                records += 1
                changes += len(ks)
                written += len(raw)
        return records, changes, written

    def snapshot(self, version: int, store: TaskStore) -> tuple[int, int, int]:
        """Write a snapshot of ``version`` (C7): a base record, then every live key of
        every store with the staged changes applied. Returns (data records, changes,
        bytes), the base record not counted."""
        self.producer.produce(self.tp.topic, self.tp.partition,
                              wire.encode(wire.ChangeLogBase(self.generation, version)))
        return self.changes(version, _chunked(store))

    def commit(self, record: wire.ChangeLogCommit) -> tuple[int, dict[TopicPartition, int]]:
        """Write the commit record and seal it; returns its offset and the flush report."""
        if not self.fenced:
            # A plain producer (at-least-once) reports a change it could not write (too
            # large, refused) only at a flush. Sealed after the commit record, the commit
            # would stand without the change. A fenced writer's version is one
            # transaction (Kafka), or one append (the local log): refused whole.
            self.producer.flush()
        self.producer.produce(self.tp.topic, self.tp.partition, wire.encode(record))
        report = self._seal()
        return report[self.tp], report

    def abort_open(self) -> None:
        """Drop what the open version wrote, where the log can (a Kafka transaction)."""
        if self.transactional:
            self.producer.abort_transaction()
            self.producer.begin_transaction()

    def close(self) -> None:
        # The producer's close aborts an open transaction, waiting a few seconds at most:
        # in a broker outage nothing answers, and the next generation's fence aborts it.
        self.producer.close()


def _batches(keys: list[bytes], values: list[bytes | None]
             ) -> Iterator[tuple[list[bytes], list[bytes | None]]]:
    """``keys`` and ``values`` cut into batch records of at most ``CHANGES_PER_RECORD``
    changes and ``CHANGE_BYTES_PER_RECORD`` bytes (one larger change: a record of its
    own), in order."""
    step = CHANGES_PER_RECORD
    for i in range(0, len(keys), step):
        ks, vs = keys[i:i + step], values[i:i + step]
        if sum(map(len, ks)) + sum(map(len, filter(None, vs))) <= CHANGE_BYTES_PER_RECORD:
            yield ks, vs
            continue
        start, size = 0, 0
        for n, (k, v) in enumerate(zip(ks, vs, strict=True)):
            change = len(k) + (len(v) if v else 0)
            if n > start and size + change > CHANGE_BYTES_PER_RECORD:
                yield ks[start:n], vs[start:n]
                start, size = n, 0
            size += change
        yield ks[start:], vs[start:]


def _chunked(store: TaskStore) -> Iterator[tuple[str, list[bytes], list[bytes | None]]]:
    """Every live key of every store, as (store, keys, values) a batch record at a time."""
    for name in store.stores:
        items = store.items(name)
        while chunk := list(itertools.islice(items, CHANGES_PER_RECORD)):
            yield name, [k for k, _ in chunk], [v for _, v in chunk]
