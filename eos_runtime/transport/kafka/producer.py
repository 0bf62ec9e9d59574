"""The Kafka producer: its delivery state, its flush and its transactions.

``KafkaProducer`` registers ONE delivery callback (a bound method of a small state object
that holds no reference to the producer, so dropping the producer destroys the librdkafka
handle at once). Successful reports overwrite the last offset per ``(topic, partition)``;
failures are counted and the first few kept. ``flush`` drains the queue, raises
``DeliveryFailed`` if anything failed or is still in flight, and otherwise returns (and
forgets) the offsets delivered since the previous successful flush.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from operator import itemgetter
from typing import Any, TypeVar

from confluent_kafka import KafkaError as _KafkaError
from confluent_kafka import KafkaException as _KafkaException
from confluent_kafka import Producer as _CkProducer

from ... import faults
from ...errors import ConfigError, DeliveryFailed, TransactionError, TransportError
from ..base import Producer, TopicPartition
from .errors import (
    _FENCED_CODES,
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

__all__ = ["KafkaProducer"]

_T = TypeVar("_T")

# produce() errors that concern one record only: they are reported by the next
# flush like any failed delivery, instead of being raised by produce().
_RECORD_CODES = _NOT_FOUND_CODES | {
    _KafkaError.MSG_SIZE_TOO_LARGE, _KafkaError.INVALID_MSG_SIZE, _KafkaError.INVALID_RECORD,
    _KafkaError.RECORD_LIST_TOO_LARGE, _KafkaError._MSG_TIMED_OUT,
}

_MAX_FAILURES_KEPT = 20        # failures remembered per flush (all are counted)
_MAX_FAILURES_SHOWN = 10       # failures listed in a DeliveryFailed message
_MAX_REASON_CHARS = 400
_MAX_MESSAGE_CHARS = 2000
_POLL_EVERY = 1000             # serve delivery reports every this many produce() calls

#: librdkafka's default of ``message.max.bytes`` (the largest record a producer sends).
_DEFAULT_MAX_BYTES = 1_000_000


def _max_bytes(conf: Mapping[str, Any]) -> int:
    """The largest record a producer of settings ``conf`` sends."""
    try:
        return int(conf.get("message.max.bytes", _DEFAULT_MAX_BYTES))
    except (TypeError, ValueError):
        return _DEFAULT_MAX_BYTES


def _too_large(size: int, limit: int | None) -> str:
    """Why a record of ``size`` bytes (key and value) was refused, and which setting to
    raise: the producer's own limit (``limit``, it never sent the record) or the broker's."""
    if limit is not None:
        return (f"a record of {size:,} bytes is larger than the producer's message.max.bytes "
                f"({limit:,}): raise message.max.bytes (max.request.size in Java clients) and "
                f"the broker's message.max.bytes (or the topic's max.message.bytes), or make the "
                f"record smaller [MSG_SIZE_TOO_LARGE]")
    return (f"the broker refused a record of {size:,} bytes as too large: raise the broker's "
            f"message.max.bytes (or the topic's max.message.bytes), or make the record smaller "
            f"[MSG_SIZE_TOO_LARGE]")


def _record_size(msg: Any) -> int:
    try:
        return len(msg.value() or b"") + len(msg.key() or b"")
    except Exception:
        return 0


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _DeliveryState:
    """What the delivery callback collects between two flushes.

    It holds no reference to the producer (no cycle), so the librdkafka handle is
    destroyed as soon as the ``KafkaProducer`` lets go of it.
    """

    __slots__ = ("offsets", "failures", "failure_count", "permanent_count", "fatal")

    def __init__(self) -> None:
        self.offsets: dict[tuple[str, int], int] = {}
        self.failures: list[tuple[str, int, str]] = []
        self.failure_count = 0
        self.permanent_count = 0     # failures that are not transient (a broker outage's)
        self.fatal: _KafkaError | None = None

    def on_delivery(self, err: _KafkaError | None, msg: Any) -> None:
        if err is None:
            # librdkafka reports deliveries of one partition in order.
            self.offsets[(msg.topic(), msg.partition())] = msg.offset()
        elif err.code() == _KafkaError.MSG_SIZE_TOO_LARGE:
            self.fail(msg.topic(), msg.partition(), _too_large(_record_size(msg), None))
        else:
            if err.code() in _FENCED_CODES and self.fatal is None:
                self.fatal = err   # a fenced producer: its flush must say so, not "delivery"
            self.fail(msg.topic(), msg.partition(), _describe(err), transient=_transient(err))

    def fail(self, topic: str, partition: int, reason: str, *, transient: bool = False) -> None:
        self.failure_count += 1
        if not transient:
            self.permanent_count += 1
        if len(self.failures) < _MAX_FAILURES_KEPT:
            self.failures.append((topic, partition, reason))

    def on_error(self, err: _KafkaError) -> None:
        if err.fatal():
            if self.fatal is None:
                self.fatal = err
            log.error("Kafka producer fatal error: %s", _describe(err))
        else:
            log.debug("Kafka producer error (librdkafka retries): %s", _describe(err))

    def reset_failures(self) -> None:
        self.failures = []
        self.failure_count = 0
        self.permanent_count = 0


#: librdkafka asks for an idempotent producer's id when the producer starts, before any
#: broker connection is up, then again on a timer of this many seconds (its
#: rdkafka_idempotence.c; confluentinc/librdkafka#5032). A producer's first flush or a
#: transactional producer's init_transactions waited for it: half a second for each
#: control record a driver appends, for every idempotent producer's first record.
_PID_RETRY = 0.5


def _ask_for_producer_id(p: _CkProducer) -> None:
    """Have librdkafka ask for the producer id now. It asks again whenever a metadata
    answer comes, and a metadata request waits until a broker is up: about 60 ms against
    the timer's 500 (measured on the project's broker). A failure is left to the call
    that needs the id, which names it; after ``_PID_RETRY`` the timer has asked anyway."""
    try:
        p.list_topics(timeout=_PID_RETRY)
    except (_KafkaException, RuntimeError):
        pass


class KafkaProducer(Producer):
    """A librdkafka producer: idempotent, ``acks=all``, optionally transactional."""

    def __init__(self, conf: Mapping[str, Any], *, transactional_id: str | None = None,
                 timeout: float = 30.0) -> None:
        self._state = _DeliveryState()
        self._timeout = timeout
        self._since_poll = 0
        self._in_transaction = False
        self.transactional = transactional_id is not None
        self.transactional_id = transactional_id
        full = dict(conf)
        self._max_bytes = _max_bytes(full)
        # A transactional producer asks for a delivery report record by record: the
        # output it produces unreported (``produce_many(reported=False)``) then costs no
        # Python callback each, about 0.5 µs a record (a global callback cannot be
        # turned off for one record). Its failures fail the commit instead.
        self._on_delivery = self._state.on_delivery if self.transactional else None
        if not self.transactional:
            full["on_delivery"] = self._state.on_delivery
        full["error_cb"] = self._state.on_error
        # Topics the open transaction holds unreported records of: a failed commit names
        # them, since no report of those records said which failed.
        self._unreported: set[str] = set()
        if transactional_id is not None:
            if not transactional_id:
                raise ConfigError("transactional_id must be a non-empty string")
            full["transactional.id"] = transactional_id
        self._conf = full
        # What the open transaction holds, kept only where a zombie may split off: it
        # must produce it again into the transaction it opens anew (_after_split).
        self._journal: list[tuple[str, int, bytes | None, bytes | None, int]] | None = (
            [] if self.transactional and faults.zombie_armed() else None)
        self._p: _CkProducer | None = _make_client(_CkProducer, full, "producer")
        # An idempotent producer's id is asked for again at its first flush (a
        # transactional one's here): when librdkafka first asked, or None once done.
        self._asked_for_id: float | None = None if self.transactional else time.monotonic()
        if self.transactional:
            try:
                _ask_for_producer_id(self._p)
                # Fences every older producer with the same transactional id and
                # aborts a transaction it left open.
                self._p.init_transactions(timeout)
            except _KafkaException as exc:
                mapped = _map_exception(exc, f"init_transactions({transactional_id!r})",
                                        transactional=True)
                self._discard()
                raise mapped from None

    def _after_split(self) -> None:
        """In a zombie: a new handle in place of the one whose threads the fork lost
        (see ``_rebuild_after_split``); a transaction that was open is open again."""
        if self._p is None:
            return
        _abandon(self._p)
        self._state = _DeliveryState()
        self._conf.update(error_cb=self._state.on_error)
        if self.transactional:
            self._on_delivery = self._state.on_delivery
        else:
            self._conf.update(on_delivery=self._state.on_delivery)
        self._since_poll = 0
        self._p = _make_client(_CkProducer, self._conf, "producer")
        self._asked_for_id = None if self.transactional else time.monotonic()
        if self.transactional:
            _ask_for_producer_id(self._p)
            self._p.init_transactions(self._timeout)
            if self._in_transaction:
                self._p.begin_transaction()
                for topic, partition, value, key, timestamp in self._journal or ():
                    self._p.produce(topic, value, key, partition, self._on_delivery, None,
                                    timestamp)

    # -- helpers

    def _handle(self) -> _CkProducer:
        p = self._p
        if p is None:
            raise TransportError("the Kafka producer is closed")
        return p

    def _discard(self) -> None:
        p, self._p = self._p, None
        if p is None:
            return
        if faults.in_zombie():
            # As a zombie's consumer close (consumer.py): a fenced zombie's purge and poll
            # were seen to block in librdkafka for over a minute (a fresh-clone CI run);
            # the zombie ends right after, and nothing it holds is needed (fenced, or
            # committed: a commit flushes).
            _abandon(p)
            return
        try:
            p.purge(in_queue=True, in_flight=True, blocking=False)
            p.poll(0)
        except (_KafkaException, SystemError, RuntimeError):
            pass
        # Dropping the last reference destroys the handle (rd_kafka_destroy).
        del p

    def _serve(self, context: str, call: Callable[..., _T], *args: Any) -> _T:
        """Run a librdkafka call that serves callbacks (poll, flush), mapping errors."""
        try:
            return call(*args)
        except (_KafkaException, SystemError) as exc:
            err = _kafka_error(exc)
            if err is None and isinstance(exc, SystemError):
                # A fatal error's KafkaException can be lost inside the call (seen with a
                # fenced producer while librdkafka's log lines went through Python
                # logging), so ask the state librdkafka keeps instead of guessing.
                known = self._known_error(context)
                if known is not None:
                    raise known from None
                raise TransportError(f"{context}: the Kafka client failed without saying "
                                     f"why ({exc})") from None
            if err is None:
                raise _map_exception(exc, context, transactional=self.transactional) from None
            if err.fatal() and self._state.fatal is None:
                self._state.fatal = err
            if not self.transactional and err.code() not in _FENCED_CODES:
                failed = DeliveryFailed(f"{context}: producer failed: {_describe(err)}")
                failed.transient = _transient(err)
                raise failed from None
            raise _map_error(err, context, transactional=self.transactional) from None

    def _txn_state_error(self, context: str) -> TransportError | None:
        """The error librdkafka's transaction state holds, if it is fatal or abortable.

        A fence purges the queue and reaches ``error_cb`` on its own schedule, so a flush
        can report only "purged" records, or nothing at all. ``begin_transaction`` inside
        an open transaction opens nothing: it answers with the state's error (fatal,
        abortable, or "not valid in state InTransaction" when all is well).
        """
        p = self._p
        if p is None or not (self.transactional and self._in_transaction):
            return None
        try:
            p.begin_transaction()
        except _KafkaException as exc:
            err = _kafka_error(exc)
            if err is None or not (err.fatal() or err.txn_requires_abort()):
                return None
            if err.fatal():
                self._state.fatal = err
            return _map_error(err, context, transactional=True)
        return None

    def _known_error(self, context: str) -> TransportError | None:
        """What librdkafka's own state says went wrong (a report the call lost, or
        "Local: Fatal error" that names nothing): the transaction's, else the fatal error
        ``error_cb`` saw."""
        return self._txn_state_error(context) or self._fatal_error()

    def _txn_error(self, exc: BaseException, context: str) -> TransportError:
        err = _kafka_error(exc)
        if err is not None and err.fatal() and self._state.fatal is None:
            self._state.fatal = err
        return _map_exception(exc, context, transactional=True)

    def _fatal_error(self) -> TransportError | None:
        fatal = self._state.fatal
        if fatal is None:
            return None
        if fatal.code() in _FENCED_CODES or self.transactional:
            return _map_error(fatal, "producer", transactional=self.transactional)
        return None

    def _wait(self, timeout: float) -> dict[TopicPartition, int]:
        """Flush; raise for failures or records still in flight; report offsets.

        The offsets are not forgotten here: callers do that once they succeed.
        """
        p = self._handle()
        if self._asked_for_id is not None:
            if time.monotonic() - self._asked_for_id < _PID_RETRY:
                _ask_for_producer_id(p)
            self._asked_for_id = None
        outstanding = self._serve("flush", p.flush, timeout)
        st = self._state
        if st.failure_count or outstanding or st.fatal is not None:
            known = self._known_error("flush")
            if known is not None:
                raise known
        if st.failure_count or outstanding:
            failures = [(TopicPartition(t, part), reason) for t, part, reason in st.failures]
            count = st.failure_count
            # Records still unacknowledged, or failed for an outage only: the broker did
            # not answer in time, and a retry once it is back may well succeed.
            transient = st.permanent_count == 0
            st.reset_failures()
            parts = []
            if count:
                shown = "; ".join(
                    f"{tp.topic}[{tp.partition}]: {_truncate(reason, _MAX_REASON_CHARS)}"
                    for tp, reason in failures[:_MAX_FAILURES_SHOWN])
                more = count - min(len(failures), _MAX_FAILURES_SHOWN)
                parts.append(f"{count} record(s) failed: {shown}"
                             + (f"; and {more} more" if more > 0 else ""))
            if outstanding:
                parts.append(f"{outstanding} record(s) still outstanding after {timeout:g}s")
            exc = DeliveryFailed(_truncate("delivery failed: " + "; ".join(parts),
                                           _MAX_MESSAGE_CHARS))
            exc.transient = transient
            exc.failures = failures          # type: ignore[attr-defined]
            exc.failure_count = count        # type: ignore[attr-defined]
            exc.outstanding = outstanding    # type: ignore[attr-defined]
            raise exc
        return {TopicPartition(t, part): off for (t, part), off in st.offsets.items()}

    # -- Producer API

    def produce(self, topic: str, partition: int, value: bytes | None,
                key: bytes | None = None, timestamp: int | None = None) -> None:
        p = self._p
        if p is None:
            raise TransportError("the Kafka producer is closed")
        while True:
            try:
                # timestamp 0 means "now" to librdkafka. Positional: see _produce_each.
                p.produce(topic, value, key, partition, self._on_delivery, None, timestamp or 0)
                if self._journal is not None:
                    self._journal.append((topic, partition, value, key, timestamp or 0))
                break
            except BufferError:
                # The local queue is full: serve delivery reports until there is
                # room. Never drop the record.
                self._serve(f"produce to {topic}[{partition}]", p.poll, 0.05)
            except _KafkaException as exc:
                err = _kafka_error(exc)
                if err is not None and err.code() in _RECORD_CODES:
                    # Reported by the next flush, like a failed delivery.
                    reason = _describe(err)
                    if err.code() == _KafkaError.MSG_SIZE_TOO_LARGE:
                        reason = _too_large(len(value or b"") + len(key or b""), self._max_bytes)
                    self._state.fail(topic, partition, reason, transient=_transient(err))
                    return
                if err is not None and err.code() == _KafkaError._FATAL:
                    # "Local: Fatal error" says only that one happened before (a fence
                    # racing this call): the state librdkafka keeps names it.
                    known = self._known_error(f"produce to {topic}[{partition}]")
                    if known is not None:
                        raise known from None
                raise _map_exception(exc, f"produce to {topic}[{partition}]",
                                     transactional=self.transactional) from None
        self._since_poll += 1
        if self._since_poll >= _POLL_EVERY:
            self._since_poll = 0
            self._serve(f"produce to {topic}[{partition}]", p.poll, 0)

    def produce_many(self, topic: str,
                     records: Iterable[tuple[int, bytes | None, bytes | None, int]], *,
                     reported: bool = True) -> None:
        p = self._p
        if p is None or self._journal is not None:
            super().produce_many(topic, records)
            return
        if reported or not self._in_transaction:
            self._produce_each(p, topic, records, self._on_delivery)
            return
        # Only each partition's last record of the call is reported: the flush and commit
        # reports (the last offset of each partition) come out the same, and the others
        # cost no delivery callback each. A failed one fails the commit (librdkafka makes
        # the transaction abortable), which then names the topics written this way.
        records = records if isinstance(records, list) else list(records)
        last = _last_of_each_partition(records)
        self._unreported.add(topic)
        start = 0
        for end in sorted(last.values()):
            self._produce_each(p, topic, records[start:end], None)
            self._produce_each(p, topic, records[end:end + 1], self._on_delivery)
            start = end + 1

    def _produce_each(self, p: _CkProducer, topic: str,
                      records: Iterable[tuple[int, bytes | None, bytes | None, int]],
                      on_delivery: Any) -> None:
        produce = p.produce
        for partition, key, value, timestamp in records:
            try:
                # All positional: the client parses keywords on every call, 0.3-0.7 us a
                # record here. Its order is Producer.c's keyword list: topic, value, key,
                # partition, callback, on_delivery (the same, an alias), timestamp
                # (test_kafka_transport checks every field lands in its place).
                produce(topic, value, key, partition, on_delivery, None, timestamp or 0)
            except (BufferError, _KafkaException):
                # A full queue or a record error: the one-record path waits for room, or
                # reports the record's failure with the next flush, as for any record.
                self.produce(topic, partition, value, key, timestamp)
                continue
            self._since_poll += 1
            if self._since_poll >= _POLL_EVERY:
                self._since_poll = 0
                self._serve(f"produce to {topic}[{partition}]", p.poll, 0)

    def flush(self, timeout: float = 30.0) -> dict[TopicPartition, int]:
        report = self._wait(timeout)
        self._state.offsets = {}
        return report

    def begin_transaction(self) -> None:
        self._require_transactional()
        try:
            self._handle().begin_transaction()
        except _KafkaException as exc:
            raise self._txn_error(exc, "begin_transaction") from None
        self._in_transaction = True
        if self._journal is not None:
            self._journal.clear()

    def commit_transaction(self, timeout: float = 30.0) -> dict[TopicPartition, int]:
        self._require_transactional()
        deadline = time.monotonic() + timeout
        try:
            report = self._wait(timeout)
        except DeliveryFailed as exc:
            outstanding = getattr(exc, "outstanding", 0)
            failed = getattr(exc, "failure_count", 0)
            txn = TransactionError(f"commit_transaction: {exc}",
                                   retriable=not failed and outstanding > 0,
                                   requires_abort=failed > 0)
            txn.transient = exc.transient
            raise txn from exc
        try:
            self._handle().commit_transaction(max(deadline - time.monotonic(), 0.1))
        except _KafkaException as exc:
            unreported = sorted(self._unreported)
            raise self._txn_error(exc, "commit_transaction" + (
                f" (of records to {', '.join(unreported)} without delivery reports: what "
                f"failed may be one of them)" if unreported else "")) from None
        self._in_transaction = False
        self._state.offsets = {}
        self._unreported = set()
        return report

    def abort_transaction(self, timeout: float = 30.0) -> None:
        self._require_transactional()
        p = self._handle()
        deadline = time.monotonic() + timeout
        try:
            p.abort_transaction(timeout)
        except _KafkaException as exc:
            raise self._txn_error(exc, "abort_transaction") from None
        self._in_transaction = False
        # Serve the delivery reports of the purged records, then forget them.
        try:
            p.flush(max(deadline - time.monotonic(), 0.0))
        except (_KafkaException, SystemError):
            pass
        self._state.offsets = {}
        self._state.reset_failures()
        self._unreported = set()

    def close(self) -> None:
        p = self._p
        if p is None:
            return
        try:
            if self._in_transaction and self._state.fatal is None:
                # Leaving a transaction open would hold back the last stable offset
                # until the broker times it out (transaction.timeout.ms).
                try:
                    p.abort_transaction(min(self._timeout, 10.0))
                except _KafkaException as exc:
                    log.warning("could not abort the open transaction on close: %s",
                                _map_exception(exc, "abort_transaction"))
        finally:   # whatever the abort raised: the handle is given back (or up, a zombie's)
            self._in_transaction = False
            self._discard()

    def _require_transactional(self) -> None:
        if not self.transactional:
            raise NotImplementedError("this producer is not transactional "
                                      "(create it with transactional_id=...)")

    def outstanding(self) -> int:
        """Records enqueued and not yet reported (librdkafka's queue length)."""
        p = self._p
        return 0 if p is None else len(p)


def _last_of_each_partition(records: list[tuple[int, bytes | None, bytes | None, int]]
                            ) -> dict[int, int]:
    """Each partition's last record's index: its partitions in one pass in C, then a walk
    back from the end that stops once it saw them all (a few records, not all of them)."""
    partitions = set(map(itemgetter(0), records))
    last: dict[int, int] = {}
    i = len(records)
    while len(last) < len(partitions):
        i -= 1
        last.setdefault(records[i][0], i)
    return last
