"""The Kafka transport: topics, offset look-ups and the clients it hands out.

``KafkaTransport`` opens an admin client (and checks that the brokers answer), creates,
describes and deletes topics, and makes the producers (fenced ones by transactional id)
and consumers of ``producer.py`` and ``consumer.py``. ``watermarks`` asks a consumer
handle of the wanted isolation level (``get_watermark_offsets``); with ``read_committed``
the broker answers with the last stable offset, so an open transaction's records are not
counted.
"""

from __future__ import annotations

import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import Consumer as _CkConsumer
from confluent_kafka import KafkaError as _KafkaError
from confluent_kafka import KafkaException as _KafkaException
from confluent_kafka import TopicPartition as _CkTopicPartition
from confluent_kafka.admin import AdminClient as _AdminClient
from confluent_kafka.admin import ConfigResource as _ConfigResource
from confluent_kafka.admin import NewTopic as _NewTopic
from confluent_kafka.admin import ResourceType as _ResourceType

from ... import faults
from ...errors import (
    BrokerUnavailable,
    ConfigError,
    OffsetOutOfRange,
    TopicExists,
    TopicNotFound,
    TransportError,
)
from ...redact import remember
from ..base import PendingProducer, TopicPartition, TopicSpec, Transport
from .consumer import KafkaConsumer
from .errors import (
    _AUTH_CODES,
    _CONNECT_CODES,
    _LEADERSHIP_CODES,
    _NOT_FOUND_CODES,
    _TLS_CODES,
    _ConnectWatch,
    _describe,
    _kafka_error,
    _log_client_error,
    _make_client,
    _map_error,
    _map_exception,
    _refusal,
    check_bootstrap_servers,
    log,
    rdkafka_log,
)
from .producer import KafkaProducer, _max_bytes
from .zombie import _abandon, _live

__all__ = ["KafkaTransport"]

_T = TypeVar("_T")

#: What a producer holds unsent, at most: 32 MiB, as Java's ``buffer.memory``.
PRODUCER_QUEUE_KBYTES = 32 << 10


def _int_config(entries: Mapping[str, Any], name: str) -> int | None:
    """A topic config entry's value as an int (None: absent or not a number)."""
    entry = entries.get(name)
    try:
        return int(entry.value) if entry is not None else None
    except (TypeError, ValueError):
        return None


def _topic_config(spec: TopicSpec) -> dict[str, str]:
    config = {"cleanup.policy": "compact"} if spec.compacted else {}
    if spec.keep_forever:   # the broker's default retention (7 days) would eat the history
        config.update({"retention.ms": "-1", "retention.bytes": "-1"})
    return config


class KafkaTransport(Transport):
    """Topics, producers, consumers and offset look-ups on a Kafka cluster.

    Options: ``client_config`` (librdkafka settings for every client),
    ``producer_config`` / ``consumer_config`` (for one kind only, applied after
    ``client_config``), ``timeout`` (seconds for admin and metadata requests,
    ``init_transactions`` and offset look-ups; default 30), ``topic_ready_timeout``
    (how long ``create_topics`` waits for leaders; default 30), ``linger_ms``
    (producer batching delay; default 5) and ``connect_timeout`` (how long opening
    the transport waits for the brokers to answer at all; default 5).

    Opening the transport checks that the brokers answer: an unreachable address is a
    ``TransportError`` "cannot reach Kafka at ..." within ``connect_timeout`` seconds
    (at once for a refused connection or an unknown host).
    """

    name = "kafka"
    supports_transactions = True

    @property
    def location(self) -> str:
        return f"Kafka at {self.bootstrap_servers}"

    def __init__(self, bootstrap_servers: str, *, client_config: Mapping[str, Any] | None = None,
                 producer_config: Mapping[str, Any] | None = None,
                 consumer_config: Mapping[str, Any] | None = None,
                 timeout: float = 30.0, topic_ready_timeout: float = 30.0,
                 linger_ms: float = 5, connect_timeout: float = 5.0,
                 **unknown: object) -> None:
        if unknown:
            raise ConfigError(f"unknown Kafka transport option(s): {', '.join(sorted(unknown))}")
        check_bootstrap_servers(bootstrap_servers)
        bootstrap_servers = bootstrap_servers.strip()
        if timeout <= 0 or topic_ready_timeout <= 0 or connect_timeout <= 0:
            raise ConfigError("timeouts must be positive")
        self.bootstrap_servers = bootstrap_servers
        self.timeout = float(timeout)
        self.topic_ready_timeout = float(topic_ready_timeout)
        self._base: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            "client.id": "eos-runtime",
            "logger": rdkafka_log,
            # A metadata look-up of a missing topic must never create it.
            "allow.auto.create.topics": False,
        }
        remember(client_config or {})   # masked in every error and log line from here on
        self._base.update(client_config or {})
        self._producer_conf: dict[str, Any] = {
            **self._base,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger_ms,
            **(producer_config or {}),
        }
        # librdkafka queues up to 1 GiB unsent: a snapshot of millions of keys, made
        # faster than the broker takes it, queued tens of MiB a task. Past the bound,
        # produce waits for room; it holds two of the largest records a client allows,
        # or one would wait for ever.
        self._producer_conf.setdefault("queue.buffering.max.kbytes", max(
            PRODUCER_QUEUE_KBYTES, 2 * _max_bytes(self._producer_conf) >> 10))
        self._consumer_conf: dict[str, Any] = {
            **self._base,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "error",
            # librdkafka pauses fetching for this long once its local queue passed
            # queued.min.messages (default 1 s): a stall each time it fills.
            "fetch.queue.backoff.ms": 20,
            # The prefetch holds a few polls' worth, not the backlog: librdkafka's defaults
            # (100 000 messages, 64 MB, 1 MB fetches, ~400 bytes of bookkeeping a message)
            # grew each task by 20-50 MB on a long backlog, as much as its state did.
            "queued.min.messages": 10_000,
            "queued.max.messages.kbytes": 8 << 10,
            "max.partition.fetch.bytes": 256 << 10,
            **(consumer_config or {}),
        }
        watch = _ConnectWatch()
        admin_conf = dict(self._base)
        admin_conf["error_cb"] = watch.on_error
        self._admin: _AdminClient | None = _make_client(_AdminClient, admin_conf, "admin client")
        self._lock = threading.Lock()
        self._query: dict[bool, _CkConsumer] = {}
        self._children: weakref.WeakSet[KafkaProducer | KafkaConsumer] = weakref.WeakSet()
        try:
            self._check_reachable(self._admin, watch, float(connect_timeout))
        except BaseException:
            if faults.in_zombie():   # a zombie riding through an outage: never destroyed
                _abandon(self._admin)
            self._admin = None
            raise
        _live.add(self)

    def _before_split(self) -> None:
        for child in list(self._children):
            if isinstance(child, KafkaProducer) and child._p is not None:
                child._p.flush(self.timeout)

    def _after_split(self) -> None:
        """In a zombie: every client of this transport made anew (``_rebuild_after_split``)."""
        if self._admin is None:
            return
        for handle in [self._admin, *self._query.values()]:
            _abandon(handle)
        self._lock = threading.Lock()   # another thread may have held it at the fork
        self._query = {}
        self._admin = _make_client(_AdminClient, dict(self._base, error_cb=_log_client_error),
                                   "admin client")
        for child in list(self._children):
            child._after_split()

    def _check_reachable(self, admin: _AdminClient, watch: _ConnectWatch, seconds: float) -> None:
        """Return once the brokers answer a metadata request; else fail within ``seconds``
        (an unreachable broker would otherwise show as a metadata time-out 30 s later)."""
        deadline = time.monotonic() + seconds
        while True:
            remaining = deadline - time.monotonic()
            try:
                # Short slices: the error callback that says "all brokers down" is only
                # served between calls.
                admin.list_topics(timeout=min(0.25, max(remaining, 0.01)))
                return
            except _KafkaException as exc:
                err = _kafka_error(exc)
                if err is not None and (err.code() in _AUTH_CODES or err.code() in _TLS_CODES):
                    raise _refusal(err, self.bootstrap_servers, self._base) from None
                if err is None or err.code() not in _CONNECT_CODES:
                    raise _map_exception(
                        exc, f"connecting to Kafka at {self.bootstrap_servers}") from None
            admin.poll(0)
            if watch.refused is not None:
                raise _refusal(watch.refused, self.bootstrap_servers, self._base)
            if watch.all_down or time.monotonic() >= deadline:
                why = watch.reason or ("the connection failed" if watch.all_down
                                       else f"no answer within {seconds:g} s")
                protocol = str(self._base.get("security.protocol", "plaintext")).upper()
                raise BrokerUnavailable(f"cannot reach Kafka at {self.bootstrap_servers} "
                                        f"({why}); is a broker running there (`eos kafka up` "
                                        f"starts one), and does it speak {protocol} "
                                        f"(security.protocol) there?")

    # -- helpers

    def _admin_client(self) -> _AdminClient:
        a = self._admin
        if a is None:
            raise TransportError("the Kafka transport is closed")
        a.poll(0)     # serve queued log lines and error callbacks
        return a

    def _consumer_config(self, read_committed: bool) -> dict[str, Any]:
        conf = dict(self._consumer_conf)
        conf.setdefault("group.id", f"eos-runtime-{uuid.uuid4().hex}")
        conf["isolation.level"] = "read_committed" if read_committed else "read_uncommitted"
        return conf

    def _query_consumer(self, read_committed: bool) -> _CkConsumer:
        self._admin_client()
        with self._lock:
            c = self._query.get(read_committed)
            if c is None:
                conf = self._consumer_config(read_committed)
                conf["error_cb"] = _log_client_error
                c = _make_client(_CkConsumer, conf, "offset look-up consumer")
                self._query[read_committed] = c
            return c

    def _retrying(self, context: str, call: Callable[[float], _T]) -> _T:
        """Run ``call(remaining_seconds)``, retrying retriable errors until the timeout."""
        deadline = time.monotonic() + self.timeout
        delay = 0.05
        while True:
            remaining = deadline - time.monotonic()
            try:
                return call(max(remaining, 0.1))
            except _KafkaException as exc:
                err = _kafka_error(exc)
                transient = err is not None and (err.retriable() or err.code() in _LEADERSHIP_CODES)
                if (not transient or err is None or err.code() in _NOT_FOUND_CODES
                        or time.monotonic() + delay >= deadline):
                    raise _map_exception(exc, context) from None
                log.debug("%s: %s; retrying", context, _describe(err))
            except TimeoutError:     # a concurrent.futures result() timed out
                raise TransportError(f"{context}: timed out after {self.timeout:g}s") from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _topic_metadata(self, topic: str, timeout: float | None = None) -> Any:
        """The topic's metadata; ``TopicNotFound`` if it does not exist."""
        md = self._retrying(f"metadata of topic {topic!r}",
                            lambda t: self._admin_client().list_topics(topic=topic,
                                                                       timeout=timeout or t))
        tmd = md.topics.get(topic)
        if tmd is None or (tmd.error is not None and tmd.error.code() in _NOT_FOUND_CODES):
            raise TopicNotFound(f"topic {topic!r} does not exist")
        return tmd

    # -- Transport API

    def create_topics(self, specs: Iterable[TopicSpec]) -> None:
        wanted: dict[str, TopicSpec] = {}
        for spec in specs:
            if not spec.name or spec.partitions < 1:
                raise ConfigError(f"invalid topic spec {spec!r}: needs a name and >= 1 partition")
            if wanted.get(spec.name, spec) != spec:
                raise ConfigError(f"topic {spec.name!r} is asked for twice with different layouts")
            wanted[spec.name] = spec
        if not wanted:
            return
        admin = self._admin_client()
        new = [_NewTopic(s.name, num_partitions=s.partitions, replication_factor=-1,
                         config=_topic_config(s)) for s in wanted.values()]
        try:
            futures = admin.create_topics(new, operation_timeout=self.timeout,
                                          request_timeout=self.timeout)
        except _KafkaException as exc:
            raise _map_exception(exc, "create_topics") from None
        existing: list[str] = []
        for name, fut in futures.items():
            try:
                fut.result(timeout=self.timeout + 5)
            except _KafkaException as exc:
                err = _kafka_error(exc)
                if err is not None and err.code() == _KafkaError.TOPIC_ALREADY_EXISTS:
                    existing.append(name)
                    continue
                raise _map_exception(exc, f"create topic {name!r}") from None
            except Exception as exc:   # the future timed out
                raise TransportError(f"create topic {name!r}: {exc!r}") from None
        for name in existing:
            have = len(self._topic_metadata(name).partitions)
            want = wanted[name].partitions
            if have != want:
                raise TopicExists(f"topic {name!r} exists with {have} partition(s), "
                                  f"not the {want} asked for")
        self._wait_until_ready(wanted.values())

    def _wait_until_ready(self, specs: Iterable[TopicSpec]) -> None:
        """Return once every topic's partitions all have a leader."""
        wanted = {s.name: s.partitions for s in specs}

        def ready(name: str) -> bool:
            try:
                parts = self._topic_metadata(name, timeout=min(self.timeout, 5.0)).partitions
            except TopicNotFound:
                return False
            return len(parts) >= wanted[name] and all(
                pm.leader >= 0 and pm.error is None for pm in parts.values())

        self._wait_for_each(wanted, ready, "not ready (no leader for every partition)")

    def _wait_for_each(self, names: Iterable[str], done: Callable[[str], bool],
                       failure: str) -> None:
        """Ask ``done`` of each name, backing off, until it holds for all of them; past
        ``topic_ready_timeout`` raise naming those still pending."""
        deadline = time.monotonic() + self.topic_ready_timeout
        pending = set(names)
        delay = 0.02
        while pending:
            pending = {name for name in pending if not done(name)}
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise TransportError(f"topic(s) {sorted(pending)} {failure} after "
                                     f"{self.topic_ready_timeout:g}s")
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def describe(self, topic: str) -> TopicSpec:
        partitions = len(self._topic_metadata(topic).partitions)
        resource = _ConfigResource(_ResourceType.TOPIC, topic)

        def fetch(remaining: float) -> Any:
            futures = self._admin_client().describe_configs([resource], request_timeout=remaining)
            return next(iter(futures.values())).result(timeout=remaining + 5)

        entries = self._retrying(f"configuration of topic {topic!r}", fetch)
        policy = entries.get("cleanup.policy")
        value = (policy.value or "") if policy is not None else ""
        compacted = "compact" in [v.strip() for v in value.split(",")]
        ahead_ms = _int_config(entries, "message.timestamp.after.max.ms")
        stamped = entries.get("message.timestamp.type")
        if (ahead_ms is not None and ahead_ms >= 2**63 - 1) or \
                (stamped is not None and stamped.value == "LogAppendTime"):
            ahead_ms = None   # Long.MAX_VALUE, or the broker stamps its own time: no bound
        return TopicSpec(topic, partitions, compacted, ahead_ms=ahead_ms,
                         max_bytes=_int_config(entries, "max.message.bytes"))

    def list_topics(self) -> list[str]:
        md = self._retrying("list topics",
                            lambda t: self._admin_client().list_topics(timeout=t))
        # Kafka's own (__consumer_offsets, __transaction_state, ...) are not a job's; the
        # project's (__eos_checkpoint_<job>_<id>) are, and eos topics, eos reset and the
        # retention helper must see them.
        return sorted(name for name in md.topics
                      if not name.startswith("__") or name.startswith("__eos"))

    def delete_records(self, tp: TopicPartition, before: int) -> int:
        low, high = self.watermarks(tp, read_committed=False)
        if before > high or before < 0:
            raise OffsetOutOfRange(f"{tp.topic}[{tp.partition}]: cannot delete records below "
                                   f"{before}: the partition holds {low}..{high}")
        if before <= low:
            return low
        admin = self._admin_client()
        try:
            futures = admin.delete_records([_CkTopicPartition(tp.topic, tp.partition, before)],
                                           request_timeout=self.timeout,
                                           operation_timeout=self.timeout)
        except _KafkaException as exc:
            raise _map_exception(exc, "delete_records") from None
        for fut in futures.values():
            try:
                done = fut.result(timeout=self.timeout + 5)
            except _KafkaException as exc:
                raise _map_exception(exc, f"delete records of {tp.topic}[{tp.partition}]") \
                    from None
            except Exception as exc:   # the future timed out
                raise TransportError(f"delete records of {tp.topic}[{tp.partition}]: "
                                     f"{exc!r}") from None
            low = max(low, int(getattr(done, "low_watermark", before)))
        return max(low, before)

    def delete_topics(self, names: Iterable[str]) -> list[str]:
        wanted = list(dict.fromkeys(names))
        if not wanted:
            return []
        admin = self._admin_client()
        try:
            futures = admin.delete_topics(wanted, operation_timeout=self.timeout,
                                          request_timeout=self.timeout)
        except _KafkaException as exc:
            raise _map_exception(exc, "delete_topics") from None
        deleted = []
        for name, fut in futures.items():
            try:
                fut.result(timeout=self.timeout + 5)
            except _KafkaException as exc:
                err = _kafka_error(exc)
                if err is not None and err.code() in _NOT_FOUND_CODES:
                    continue
                raise _map_exception(exc, f"delete topic {name!r}") from None
            except Exception as exc:   # the future timed out
                raise TransportError(f"delete topic {name!r}: {exc!r}") from None
            deleted.append(name)
        self._wait_until_gone(deleted)
        return [n for n in wanted if n in deleted]

    def _wait_until_gone(self, names: list[str]) -> None:
        """Return once the metadata no longer has these topics: the controller answers a
        deletion before every broker's metadata forgot the topic, and creating the name
        again meanwhile would find the old one."""
        def gone(name: str) -> bool:
            try:
                self._topic_metadata(name, timeout=min(self.timeout, 5.0))
            except TopicNotFound:
                return True
            return False

        self._wait_for_each(names, gone, "still listed since their deletion")

    def max_record_bytes(self) -> int | None:
        return _max_bytes(self._producer_conf)

    def producer(self, *, transactional_id: str | None = None) -> KafkaProducer:
        self._admin_client()
        p = KafkaProducer(self._producer_conf, transactional_id=transactional_id,
                          timeout=self.timeout)
        self._children.add(p)
        return p

    def fenced_producer(self, fence_id: str, generation: int) -> KafkaProducer:
        # init_transactions bumps the producer epoch of fence_id: older instances are fenced
        return self.producer(transactional_id=fence_id)

    def start_producer(self, fence_id: str | None = None) -> PendingProducer:
        if fence_id is None:
            return super().start_producer()
        self._admin_client()   # a closed transport refuses now, not in the thread
        made: list[KafkaProducer] = []
        failed: list[BaseException] = []

        def make() -> None:
            # librdkafka waits outside the GIL: the task's own start runs meanwhile.
            try:
                made.append(KafkaProducer(self._producer_conf, transactional_id=fence_id,
                                          timeout=self.timeout))
            except BaseException as exc:
                failed.append(exc)

        thread = threading.Thread(target=make, name=f"fence {fence_id}", daemon=True)
        thread.start()

        def take(generation: int) -> KafkaProducer:
            thread.join()
            if failed:
                raise failed[0]
            self._children.add(made[0])
            return made[0]

        def drop() -> None:
            thread.join()
            for p in made:
                p.close()

        return PendingProducer(take, drop)

    def consumer(self, *, read_committed: bool = True) -> KafkaConsumer:
        self._admin_client()
        c = KafkaConsumer(self._consumer_config(read_committed), read_committed=read_committed,
                          timeout=self.timeout)
        self._children.add(c)
        return c

    def watermarks(self, tp: TopicPartition, *, read_committed: bool = True) -> tuple[int, int]:
        topic, partition = tp
        if partition < 0:
            raise TopicNotFound(f"{topic}[{partition}]: no such partition")
        ck = _CkTopicPartition(topic, partition)

        def query(remaining: float) -> tuple[int, int]:
            res = self._ask(read_committed, lambda qc: qc.get_watermark_offsets(
                ck, timeout=remaining, cached=False))
            if res is None:
                raise TransportError(f"watermarks of {topic}[{partition}]: timed out")
            return res

        context = f"watermarks of {topic}[{partition}]"
        try:
            low, high = self._retrying(context, query)
        except TopicNotFound as exc:
            if not self._broker_has(tp, exc):
                raise
            # librdkafka's metadata cache of the look-up consumer can keep "unknown
            # partition" long after a broker restart (it never refreshes a topic nobody
            # subscribed to; seen after a SIGTERM, whose controlled shutdown leaves every
            # partition without a leader): ask once more through a new one.
            self._forget_query_consumers()
            try:
                low, high = self._retrying(context, query)
            except TopicNotFound:
                raise BrokerUnavailable(f"{exc}; the broker has it: its leader is not known "
                                        f"yet") from None
        return int(low), int(high)

    def _broker_has(self, tp: TopicPartition, exc: TopicNotFound) -> bool:
        """An offset look-up said "unknown partition": true, or only librdkafka's metadata
        cache speaking while the broker is down or restarting. Ask the broker itself:
        ``BrokerUnavailable`` if it does not answer, else whether it has the partition."""
        try:
            md = self._admin_client().list_topics(topic=tp.topic,
                                                  timeout=min(self.timeout, 5.0))
        except _KafkaException as probe:
            raise BrokerUnavailable(f"{exc}; the broker does not answer either: "
                                    f"{_map_exception(probe, 'metadata')}") from None
        tmd = md.topics.get(tp.topic)
        return tmd is not None and tmd.error is None and tp.partition in tmd.partitions

    def _ask(self, read_committed: bool, call: Callable[[Any], _T]) -> _T:
        """``call`` with a look-up consumer. One that lost its handle of a restarting broker
        (_DESTROY_BROKER) is dropped, so the caller's retry asks through a new one and the
        outage is ridden through."""
        try:
            return call(self._query_consumer(read_committed))
        except _KafkaException as exc:
            err = _kafka_error(exc)
            if err is not None and err.code() == _KafkaError._DESTROY_BROKER:
                self._forget_query_consumers()
            raise

    def _forget_query_consumers(self) -> None:
        with self._lock:
            query, self._query = self._query, {}
        for c in query.values():
            if faults.in_zombie():   # never destroyed there (close)
                _abandon(c)
                continue
            try:
                c.close()
            except (_KafkaException, RuntimeError):
                pass

    def offset_for_timestamp(self, tp: TopicPartition, timestamp: int) -> int:
        topic, partition = tp
        # The end first: a record appended after the look-up below gets an offset
        # >= this one, so returning it when nothing matched skips nothing.
        high = self.watermarks(tp, read_committed=True)[1]
        # Negative timestamps are ListOffsets' "latest"/"earliest" sentinels.
        ck = _CkTopicPartition(topic, partition, max(int(timestamp), 0))
        res = self._retrying(f"offset for timestamp {timestamp} in {topic}[{partition}]",
                             lambda t: self._ask(True, lambda qc: qc.offsets_for_times(
                                 [ck], timeout=t)))
        found = res[0]
        if found.error is not None:
            raise _map_error(found.error,
                             f"offset for timestamp {timestamp} in {topic}[{partition}]")
        return high if found.offset < 0 else int(found.offset)

    def close(self) -> None:
        if self._admin is None:
            return
        for child in list(self._children):
            try:
                child.close()
            except Exception as exc:  # closing must go on with the others
                log.debug("closing %r: %s", child, exc)
        self._children = weakref.WeakSet()
        self._forget_query_consumers()
        if faults.in_zombie():
            # As its consumers' and producers' (consumer.py): a zombie's admin client was
            # seen to block in rd_kafka_destroy for minutes (a fresh-clone CI run); the
            # zombie ends right after, and a look-up client holds nothing to give back.
            _abandon(self._admin)
        self._admin = None
