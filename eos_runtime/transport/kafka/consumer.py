"""The Kafka consumer: explicitly assigned partitions, positions tracked here.

``KafkaConsumer`` never joins a group: ``assign`` with explicit offsets, no offset
commits, ``auto.offset.reset=error`` (an offset outside the log raises
``OffsetOutOfRange`` instead of silently jumping). ``position`` is tracked here from the
records returned and from ``assign``/``seek``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer as _CkConsumer
from confluent_kafka import KafkaError as _KafkaError
from confluent_kafka import KafkaException as _KafkaException
from confluent_kafka import TopicPartition as _CkTopicPartition

from ... import faults
from ...errors import OffsetOutOfRange, TopicNotFound, TransportError
from ..base import Consumer, Record, TopicPartition
from .errors import (
    _NOT_FOUND_CODES,
    _describe,
    _kafka_error,
    _make_client,
    _map_error,
    _map_exception,
    _transient,
    log,
)
from .zombie import _abandon

__all__ = ["KafkaConsumer"]


def _consumer_error_cb(fatal: list[TransportError]) -> Callable[[_KafkaError], None]:
    def on_error(err: _KafkaError) -> None:
        if err.fatal():
            log.error("Kafka consumer fatal error: %s", _describe(err))
            fatal.append(_map_error(err, "consumer"))
        else:
            log.debug("Kafka consumer error (librdkafka retries): %s", _describe(err))
    return on_error


class KafkaConsumer(Consumer):
    """A librdkafka consumer on explicitly assigned partitions (no group)."""

    def __init__(self, conf: Mapping[str, Any], *, read_committed: bool = True,
                 timeout: float = 30.0) -> None:
        self.read_committed = read_committed
        self._timeout = timeout
        self._positions: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()
        # paused partitions whose already-fetched records were held back: they
        # are re-read from the tracked position on resume.
        self._stale: set[TopicPartition] = set()
        self._pending: list[tuple[TopicPartition | None, TransportError]] = []
        # The error callback must not hold ``self`` (that would make a reference
        # cycle through the librdkafka handle).
        self._fatal: list[TransportError] = []
        full = dict(conf)
        full["error_cb"] = _consumer_error_cb(self._fatal)
        self._conf = full
        self._c: _CkConsumer | None = _make_client(_CkConsumer, full, "consumer")

    def _after_split(self) -> None:
        """In a zombie: a new handle, assigned where the old one had got to (paused
        partitions paused again; what the old one fetched and held back is fetched anew)."""
        if self._c is None:
            return
        _abandon(self._c)
        self._fatal = []
        self._conf["error_cb"] = _consumer_error_cb(self._fatal)
        self._c = _make_client(_CkConsumer, self._conf, "consumer")
        if self._positions:
            self._c.assign([_CkTopicPartition(t, p, off)
                            for (t, p), off in self._positions.items()])
        if self._paused:
            self._c.pause([_CkTopicPartition(t, p) for t, p in self._paused])
        self._stale = set()
        self._pending = []

    def _handle(self) -> _CkConsumer:
        c = self._c
        if c is None:
            raise TransportError("the Kafka consumer is closed")
        return c

    def _assigned(self, tp: TopicPartition | tuple[str, int]) -> TopicPartition:
        key = TopicPartition(*tp)
        if key not in self._positions:
            raise TransportError(f"{key.topic}[{key.partition}] is not assigned to this consumer")
        return key

    def _check_partitions_exist(self, tps: Iterable[TopicPartition]) -> None:
        """librdkafka silently waits on assigned partitions that do not exist."""
        c = self._handle()
        wanted: dict[str, list[int]] = {}
        for tp in tps:
            wanted.setdefault(tp.topic, []).append(tp.partition)
        for topic, partitions in wanted.items():
            try:
                md = c.list_topics(topic=topic, timeout=self._timeout)
            except _KafkaException as exc:
                raise _map_exception(exc, f"metadata of topic {topic!r}") from None
            tmd = md.topics.get(topic)
            if tmd is None or (tmd.error is not None and tmd.error.code() in _NOT_FOUND_CODES):
                raise TopicNotFound(f"topic {topic!r} does not exist")
            missing = [p for p in partitions if p not in tmd.partitions]
            if missing:
                raise TopicNotFound(f"topic {topic!r} has {len(tmd.partitions)} partition(s); "
                                    f"no partition {missing[0]}")

    # -- Consumer API

    def assign(self, positions: Mapping[TopicPartition, int]) -> None:
        c = self._handle()
        new: dict[TopicPartition, int] = {}
        for tp, offset in positions.items():
            key = TopicPartition(*tp)
            offset = int(offset)
            if offset < 0:
                raise OffsetOutOfRange(f"{key.topic}[{key.partition}]: offset {offset} is negative")
            new[key] = offset
        if new:
            self._check_partitions_exist(new)
        try:
            if new:
                c.assign([_CkTopicPartition(t, p, off) for (t, p), off in new.items()])
                # librdkafka keeps a partition paused across assign (even across unassign):
                # the contract says assign clears every pause, so resume them all here.
                c.resume([_CkTopicPartition(t, p) for t, p in new])
            else:
                c.unassign()
        except _KafkaException as exc:
            raise _map_exception(exc, "assign") from None
        self._positions = new
        self._paused = set()
        self._stale = set()
        self._pending = []

    def seek(self, tp: TopicPartition, offset: int) -> None:
        key = self._assigned(tp)
        offset = int(offset)
        if offset < 0:
            raise OffsetOutOfRange(f"{key.topic}[{key.partition}]: offset {offset} is negative")
        self._seek(key, offset)
        self._positions[key] = offset
        self._stale.discard(key)
        self._pending = [(t, e) for t, e in self._pending if t != key]

    def _seek(self, key: TopicPartition, offset: int) -> None:
        c = self._handle()
        ck = _CkTopicPartition(key.topic, key.partition, offset)
        try:
            c.seek(ck)
            return
        except _KafkaException as exc:
            err = _kafka_error(exc)
            # _STATE: the partition's fetcher is not running yet (seek right after
            # assign) or stopped on an error; re-assigning the partition works then.
            if err is None or err.code() != _KafkaError._STATE:
                where = f"seek {key.topic}[{key.partition}] to {offset}"
                raise _map_exception(exc, where) from None
        try:
            c.incremental_unassign([_CkTopicPartition(key.topic, key.partition)])
            c.incremental_assign([ck])
            if key in self._paused:
                c.pause([_CkTopicPartition(key.topic, key.partition)])
        except _KafkaException as exc:
            raise _map_exception(exc, f"seek {key.topic}[{key.partition}] to {offset}") from None

    def pause(self, tps: Iterable[TopicPartition]) -> None:
        keys = [self._assigned(tp) for tp in tps]
        if not keys:
            return
        try:
            self._handle().pause([_CkTopicPartition(t, p) for t, p in keys])
        except _KafkaException as exc:
            raise _map_exception(exc, "pause") from None
        self._paused.update(keys)

    def resume(self, tps: Iterable[TopicPartition]) -> None:
        keys = [self._assigned(tp) for tp in tps]
        if not keys:
            return
        try:
            self._handle().resume([_CkTopicPartition(t, p) for t, p in keys])
        except _KafkaException as exc:
            raise _map_exception(exc, "resume") from None
        for key in keys:
            self._paused.discard(key)
            if key in self._stale:
                self._stale.discard(key)
                self._seek(key, self._positions[key])

    def poll(self, max_records: int = 10_000, timeout: float = 1.0) -> list[Record]:
        if self._fatal:
            raise self._fatal[0]
        if self._pending:
            raise self._pending.pop(0)[1]
        c = self._handle()
        if max_records <= 0:
            return []
        try:
            # consume(n, t) waits the whole of t unless n messages arrive, so take
            # what is already fetched, else wait for the first one only and then
            # take whatever came with it.
            msgs = c.consume(max_records, 0)
            if not msgs and timeout > 0:
                msgs = c.consume(1, timeout)
                if msgs and max_records > 1:
                    msgs += c.consume(max_records - 1, 0)
        except (_KafkaException, SystemError) as exc:
            if _kafka_error(exc) is None and isinstance(exc, SystemError):
                raise
            raise _map_exception(exc, "poll") from None
        out: list[Record] = []
        append = out.append
        positions = self._positions
        paused = self._paused
        errors: list[tuple[TopicPartition | None, TransportError]] = []
        for m in msgs:
            err = m.error()
            if err is not None:
                self._message_error(m, err, errors)
                continue
            topic = m.topic()
            partition = m.partition()
            offset = m.offset()
            if topic is None or partition is None or offset is None:
                continue                  # only error events lack them (handled above)
            key = (topic, partition)
            if key not in positions:
                continue                  # left over from an earlier assignment
            if paused and key in paused:
                self._stale.add(TopicPartition(topic, partition))
                continue
            positions[key] = offset + 1
            append(Record(topic, partition, offset, m.key(), m.value(), m.timestamp()[1]))
        if not msgs and positions:
            self._skip_control_records(c)
        if errors:
            if out:
                # The records are returned (librdkafka has moved past them); the
                # error comes with the next poll.
                self._pending.extend(errors)
            else:
                self._pending.extend(errors[1:])
                raise errors[0][1]
        return out

    def _skip_control_records(self, c: _CkConsumer) -> None:
        """Transaction markers take offsets but are never returned; when nothing came,
        take librdkafka's position, which has moved past them, so that ``position``
        reaches the end offset of a partition that ends in a marker."""
        live = [_CkTopicPartition(t, p) for (t, p) in self._positions
                if TopicPartition(t, p) not in self._paused
                and TopicPartition(t, p) not in self._stale]
        if not live:
            return
        try:
            for tp in c.position(live):
                key = TopicPartition(tp.topic, tp.partition)
                if tp.error is None and tp.offset > self._positions.get(key, tp.offset):
                    self._positions[key] = tp.offset
        except (_KafkaException, RuntimeError) as exc:
            log.debug("Kafka consumer position: %s", exc)

    def _message_error(self, m: Any, err: _KafkaError,
                       errors: list[tuple[TopicPartition | None, TransportError]]) -> None:
        code = err.code()
        if code == _KafkaError._PARTITION_EOF:
            return
        topic, partition = m.topic(), m.partition()
        where = f"{topic}[{partition}]" if topic else "consumer"
        if _transient(err):
            # librdkafka reconnects and fetches on by itself once the broker is back; the
            # run's driver watches how long it is gone (the outage budget).
            log.debug("Kafka consumer: %s: %s (librdkafka retries)", where, _describe(err))
            return
        tp = TopicPartition(topic, partition) if topic and partition is not None else None
        errors.append((tp, _map_error(err, f"consume {where}")))

    def position(self, tp: TopicPartition) -> int:
        return self._positions[self._assigned(tp)]

    def assignment(self) -> list[TopicPartition]:
        return list(self._positions)

    def close(self) -> None:
        c, self._c = self._c, None
        if c is None:
            return
        if faults.in_zombie():
            # A zombie's consumer close was seen to block in librdkafka for over a minute
            # (a fresh-clone CI run); the zombie ends right after, and a consumer that
            # only assigns holds nothing a close gives back.
            _abandon(c)
            return
        try:
            c.close()
        except (_KafkaException, RuntimeError) as exc:
            log.debug("closing the Kafka consumer: %s", exc)

