"""The Kafka transport, on confluent-kafka (librdkafka).

This module and the broker launcher are the only places that import
``confluent_kafka``. Every librdkafka error is turned into an
``eos_runtime.errors`` class here (see ``_map_error``); no confluent type leaves
this module, not even as ``__cause__``.

Design notes (``docs/transports-kafka.md`` has the user-facing version):

* ``KafkaProducer`` registers ONE delivery callback (a bound method of a small
  state object that holds no reference to the producer, so dropping the producer
  destroys the librdkafka handle at once). Successful reports overwrite the last
  offset per ``(topic, partition)``; failures are counted and the first few kept.
  ``flush`` drains the queue, raises ``DeliveryFailed`` if anything failed or is
  still in flight, and otherwise returns (and forgets) the offsets delivered since
  the previous successful flush.
* ``KafkaConsumer`` never joins a group: ``assign`` with explicit offsets, no
  offset commits, ``auto.offset.reset=error`` (an offset outside the log raises
  ``OffsetOutOfRange`` instead of silently jumping). ``position`` is tracked here
  from the records returned and from ``assign``/``seek``.
* ``watermarks`` asks a consumer handle of the wanted isolation level
  (``get_watermark_offsets``); with ``read_committed`` the broker answers with the
  last stable offset, so an open transaction's records are not counted.
"""

from __future__ import annotations

import ctypes
import logging
import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import Consumer as _CkConsumer
from confluent_kafka import KafkaError as _KafkaError
from confluent_kafka import KafkaException as _KafkaException
from confluent_kafka import Producer as _CkProducer
from confluent_kafka import TopicPartition as _CkTopicPartition
from confluent_kafka.admin import AdminClient as _AdminClient
from confluent_kafka.admin import ConfigResource as _ConfigResource
from confluent_kafka.admin import NewTopic as _NewTopic
from confluent_kafka.admin import ResourceType as _ResourceType

from .. import faults
from ..errors import (
    AuthenticationFailed,
    BrokerUnavailable,
    ConfigError,
    DeliveryFailed,
    OffsetOutOfRange,
    ProducerFenced,
    TopicExists,
    TopicNotFound,
    TransactionError,
    TransportError,
)
from ..redact import redact, remember
from .base import (
    Consumer,
    PendingProducer,
    Producer,
    Record,
    TopicPartition,
    TopicSpec,
    Transport,
)

__all__ = ["KafkaTransport", "KafkaProducer", "KafkaConsumer", "check_bootstrap_servers"]

log = logging.getLogger(__name__)
#: librdkafka's own log lines are routed here (instead of stderr).
rdkafka_log = logging.getLogger(__name__ + ".librdkafka")
# Without a handler anywhere, Python's last-resort handler would print librdkafka's
# ERROR lines (a FAIL per refused connection) on the terminal next to our own error.
# An application that configures logging still gets them through propagation.
rdkafka_log.addHandler(logging.NullHandler())


class _Redacting(logging.Filter):
    """librdkafka's lines (a ``debug=conf`` dump, say) and ours pass ``redact`` first."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = None
        return True


rdkafka_log.addFilter(_Redacting())
log.addFilter(_Redacting())

_T = TypeVar("_T")

# --------------------------------------------------------------------------- errors

_FENCED_CODES = frozenset({
    _KafkaError._FENCED, _KafkaError.PRODUCER_FENCED, _KafkaError.INVALID_PRODUCER_EPOCH,
})
_NOT_FOUND_CODES = frozenset({
    _KafkaError.UNKNOWN_TOPIC_OR_PART, _KafkaError._UNKNOWN_TOPIC, _KafkaError._UNKNOWN_PARTITION,
})
# Leadership moving (a topic just created, a broker restarting): librdkafka's offset
# look-ups report these without the retriable flag, but they pass on their own.
_LEADERSHIP_CODES = frozenset({
    _KafkaError.NOT_LEADER_FOR_PARTITION, _KafkaError.LEADER_NOT_AVAILABLE,
    _KafkaError.FENCED_LEADER_EPOCH, _KafkaError.UNKNOWN_LEADER_EPOCH,
    _KafkaError.REPLICA_NOT_AVAILABLE,
})
_OUT_OF_RANGE_CODES = frozenset({_KafkaError.OFFSET_OUT_OF_RANGE, _KafkaError._AUTO_OFFSET_RESET})
# A broker down, restarting or not answering, a coordinator or leader moving: the same
# call succeeds once the broker is back. The one list of what a run rides through within
# its outage budget (eos_runtime.outage); _transient() is the one place that reads it.
_TRANSIENT_CODES = _LEADERSHIP_CODES | {
    _KafkaError._TRANSPORT, _KafkaError._ALL_BROKERS_DOWN, _KafkaError._TIMED_OUT,
    _KafkaError._MSG_TIMED_OUT, _KafkaError._TIMED_OUT_QUEUE, _KafkaError._RESOLVE,
    _KafkaError._WAIT_COORD, _KafkaError._OUTDATED, _KafkaError.REQUEST_TIMED_OUT,
    _KafkaError.NETWORK_EXCEPTION, _KafkaError.BROKER_NOT_AVAILABLE,
    _KafkaError.NOT_COORDINATOR, _KafkaError.COORDINATOR_NOT_AVAILABLE,
    _KafkaError.COORDINATOR_LOAD_IN_PROGRESS, _KafkaError.CONCURRENT_TRANSACTIONS,
    _KafkaError.NOT_ENOUGH_REPLICAS, _KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    _KafkaError.KAFKA_STORAGE_ERROR, _KafkaError.NOT_CONTROLLER,
    # A broker handle dropped while the broker restarted: a new look-up finds it again.
    _KafkaError._DESTROY_BROKER,
}
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


def _kafka_error(exc: BaseException | None) -> _KafkaError | None:
    """The ``KafkaError`` an exception carries, looking through its chain.

    confluent-kafka 2.16 sets a ``KafkaException`` for a fatal error and then still
    calls the delivery callback, whose first C call fails with a ``SystemError``
    whose cause is that ``KafkaException``; so the chain is searched too.
    """
    for _ in range(8):
        if exc is None:
            return None
        arg = exc.args[0] if exc.args else None
        if isinstance(arg, _KafkaError):
            return arg
        exc = exc.__cause__ or exc.__context__
    return None


def _transient(err: _KafkaError | None) -> bool:
    """Whether ``err`` is one a run rides through (a broker outage), not a reason to fail.

    A fatal error never is (the client is unusable; a fence is a verdict, not an outage),
    nor a missing topic or an offset out of range, which librdkafka may flag retriable."""
    if err is None or err.fatal():
        return False
    code = err.code()
    if code in _FENCED_CODES or code in _NOT_FOUND_CODES or code in _OUT_OF_RANGE_CODES:
        return False
    return code in _TRANSIENT_CODES or bool(err.retriable())


def _describe(err: _KafkaError) -> str:
    return f"{err.str()} [{err.name()}]"


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


def _map_error(err: _KafkaError | None, context: str, *, transactional: bool = False,
               fallback: str = "unknown error") -> TransportError:
    """The ``eos_runtime.errors`` exception for a librdkafka error."""
    if err is None:
        return TransportError(f"{context}: {fallback}")
    code = err.code()
    text = f"{context}: {_describe(err)}"
    if code in _FENCED_CODES:
        return ProducerFenced(text)
    if transactional:
        exc = TransactionError(text, retriable=bool(err.retriable()),
                               requires_abort=bool(err.txn_requires_abort()),
                               fatal=bool(err.fatal()))
        exc.transient = _transient(err)
        return exc
    if code in _NOT_FOUND_CODES:
        return TopicNotFound(text)
    if code == _KafkaError.TOPIC_ALREADY_EXISTS:
        return TopicExists(text)
    if code in _OUT_OF_RANGE_CODES:
        return OffsetOutOfRange(text)
    if _transient(err):
        return BrokerUnavailable(text)
    return TransportError(text)


def _map_exception(exc: BaseException, context: str, *,
                   transactional: bool = False) -> TransportError:
    return _map_error(_kafka_error(exc), context, transactional=transactional,
                      fallback=str(exc) or type(exc).__name__)


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _make_client(factory: Callable[[dict], _T], conf: dict, what: str) -> _T:
    try:
        return factory(conf)
    except _KafkaException as exc:
        err = _kafka_error(exc)
        if err is not None and err.code() == _KafkaError._INVALID_ARG:
            raise ConfigError(f"invalid Kafka client setting for the {what}: "
                              f"{redact(err.str())}") from None
        raise _map_exception(exc, f"creating the Kafka {what}") from None
    except (TypeError, ValueError) as exc:   # confluent's own config checks
        raise ConfigError(f"invalid Kafka client setting for the {what}: "
                          f"{redact(str(exc))}") from None


_SERVER = re.compile(
    r"^(?:[A-Za-z_]+://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})$")


def check_bootstrap_servers(servers: str) -> None:
    """``ConfigError`` unless ``servers`` is ``HOST:PORT[,HOST:PORT...]``: a typo is
    named at once instead of surfacing as a connection failure."""
    if not isinstance(servers, str) or not servers.strip():
        raise ConfigError("bootstrap servers must be HOST:PORT[,HOST:PORT...], "
                          "e.g. 127.0.0.1:9092")
    for entry in servers.strip().split(","):
        m = _SERVER.match(entry.strip())
        if m is None or not 1 <= int(m["port"]) <= 65535:
            raise ConfigError(f"bootstrap servers {servers!r}: {entry.strip()!r} is not "
                              f"HOST:PORT (give HOST:PORT[,HOST:PORT...], e.g. 127.0.0.1:9092)")


_CONNECT_CODES = frozenset({
    _KafkaError._TRANSPORT, _KafkaError._TIMED_OUT, _KafkaError._ALL_BROKERS_DOWN,
    _KafkaError._RESOLVE,
})


def _connect_reason(text: str) -> str:
    """'Connection refused' out of librdkafka's '<broker>/bootstrap: Connect to ipv4#...
    failed: Connection refused (after 0ms in state CONNECT)'."""
    text = re.sub(r"\s*\(after [^)]*\)\s*$", "", text)
    if "Invalid response size" in text:   # e.g. an HTTP server on that port
        return "it answered, but not as a Kafka broker"
    if "failed: " in text:
        return text.rsplit("failed: ", 1)[1]
    head, sep, rest = text.partition(": ")
    return rest if sep and "/" in head else text


#: The broker refused the client's credentials, or the TLS handshake failed: librdkafka
#: would try again and again until a metadata call timed out (30 s), so opening fails at once.
_AUTH_CODES = frozenset({_KafkaError._AUTHENTICATION, _KafkaError.SASL_AUTHENTICATION_FAILED})
_TLS_CODES = frozenset({_KafkaError._SSL})


class _ConnectWatch:
    """The admin client's error callback, watched while the transport opens.

    librdkafka reports ``_ALL_BROKERS_DOWN`` as soon as every bootstrap address has
    refused or failed to resolve, and an authentication or TLS failure at once, while its
    metadata calls would only time out (30 s)."""

    __slots__ = ("all_down", "reason", "refused")

    def __init__(self) -> None:
        self.all_down = False
        self.reason: str | None = None
        self.refused: _KafkaError | None = None   # credentials or TLS: trying again is futile

    def on_error(self, err: _KafkaError) -> None:
        code = err.code()
        if code == _KafkaError._ALL_BROKERS_DOWN:
            self.all_down = True
        elif code in _AUTH_CODES or code in _TLS_CODES:
            if self.refused is None:
                self.refused = err
        else:
            self.reason = _connect_reason(err.str())
        _log_client_error(err)


def _refusal(err: _KafkaError, servers: str, conf: Mapping[str, Any]) -> AuthenticationFailed:
    """One line for a broker that refused the client's credentials or TLS handshake."""
    detail = redact(_connect_reason(err.str()))
    if err.code() in _TLS_CODES:
        return AuthenticationFailed(
            f"Kafka at {servers} failed the TLS handshake ({detail}); check ssl.ca.location "
            f"and the client certificate settings, and that the listener speaks TLS")
    user = conf.get("sasl.username")
    mechanism = conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "GSSAPI"
    who = f"of user {str(user)!r}" if user else "of this client"
    return AuthenticationFailed(
        f"Kafka at {servers} refused the credentials {who} (SASL {mechanism} authentication "
        f"failed: {detail}); check sasl.username and sasl.password")


def _log_client_error(err: _KafkaError) -> None:
    """``error_cb`` for handles that keep no error state of their own."""
    if err.fatal():
        log.error("Kafka client fatal error: %s", _describe(err))
    else:
        log.debug("Kafka client error (librdkafka retries): %s", _describe(err))


# ------------------------------------------------------------------------- zombies

# A fault-injection zombie (faults.py) is a fork of a task's process, and librdkafka's
# threads do not survive a fork: the zombie's clients would never send or fetch again.
# So just before the split every producer flushes (its queue empty, nothing is lost or
# sent twice by the split), and in the zombie, before it stops, every client of every
# open transport is made anew from its settings: a transactional producer with the same
# transactional id, whose init_transactions fences the dying parent's and aborts its
# open transaction, so the zombie opens it again and produces into it what the parent's
# held (its journal); the successor's init_transactions, later, fences the zombie's, and
# the broker refuses the zombie's late transactions as it would a real zombie's.
# Consumers are assigned at the positions the old ones had reached. The old handles are
# kept, never destroyed: destroying one joins threads that are gone.
_live: weakref.WeakSet[KafkaTransport] = weakref.WeakSet()


def _abandon(handle: Any) -> None:
    """Never destroy ``handle``, not even when the interpreter exits: a reference that is
    never given back (a list would be emptied at shutdown, and the zombie hang there)."""
    if handle is not None:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(handle))


def _settle_before_split() -> None:
    for transport in list(_live):
        transport._before_split()


def _rebuild_after_split() -> None:
    for transport in list(_live):
        transport._after_split()


faults.on_split(_settle_before_split, _rebuild_after_split)


# ------------------------------------------------------------------------- producer

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
        full["on_delivery"] = self._state.on_delivery
        full["error_cb"] = self._state.on_error
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
        if self.transactional:
            try:
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
        self._conf.update(on_delivery=self._state.on_delivery, error_cb=self._state.on_error)
        self._since_poll = 0
        self._p = _make_client(_CkProducer, self._conf, "producer")
        if self.transactional:
            self._p.init_transactions(self._timeout)
            if self._in_transaction:
                self._p.begin_transaction()
                for topic, partition, value, key, timestamp in self._journal or ():
                    self._p.produce(topic, value, key, partition, timestamp=timestamp)

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
                known = self._txn_state_error(context) or self._fatal_error()
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
        outstanding = self._serve("flush", p.flush, timeout)
        st = self._state
        if st.failure_count or outstanding or st.fatal is not None:
            known = self._txn_state_error("flush") or self._fatal_error()
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
                # timestamp 0 means "now" to librdkafka.
                p.produce(topic, value, key, partition, timestamp=timestamp or 0)
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
                raise _map_exception(exc, f"produce to {topic}[{partition}]",
                                     transactional=self.transactional) from None
        self._since_poll += 1
        if self._since_poll >= _POLL_EVERY:
            self._since_poll = 0
            self._serve(f"produce to {topic}[{partition}]", p.poll, 0)

    def produce_many(self, topic: str,
                     records: Iterable[tuple[int, bytes | None, bytes | None, int]]) -> None:
        p = self._p
        if p is None or self._journal is not None:
            super().produce_many(topic, records)
            return
        produce, count = p.produce, 0
        for partition, key, value, timestamp in records:
            try:
                produce(topic, value, key, partition, timestamp=timestamp or 0)
            except (BufferError, _KafkaException):
                # A full queue or a record error: the one-record path waits for room, or
                # reports the record's failure with the next flush, as for any record.
                self.produce(topic, partition, value, key, timestamp)
            count += 1
            if count >= _POLL_EVERY:
                count = 0
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
            raise self._txn_error(exc, "commit_transaction") from None
        self._in_transaction = False
        self._state.offsets = {}
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

    def close(self) -> None:
        p = self._p
        if p is None:
            return
        if self._in_transaction and self._state.fatal is None:
            # Leaving a transaction open would hold back the last stable offset
            # until the broker times it out (transaction.timeout.ms).
            try:
                p.abort_transaction(min(self._timeout, 10.0))
            except _KafkaException as exc:
                log.warning("could not abort the open transaction on close: %s",
                            _map_exception(exc, "abort_transaction"))
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


# ------------------------------------------------------------------------- consumer

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
        try:
            c.close()
        except (_KafkaException, RuntimeError) as exc:
            log.debug("closing the Kafka consumer: %s", exc)


# ------------------------------------------------------------------------ transport

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
        return TopicSpec(topic, partitions, compacted)

    def list_topics(self) -> list[str]:
        md = self._retrying("list topics",
                            lambda t: self._admin_client().list_topics(timeout=t))
        return sorted(name for name in md.topics if not name.startswith("__"))

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
        self._admin = None
