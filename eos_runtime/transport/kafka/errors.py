"""librdkafka's errors as ``eos_runtime.errors`` classes, and the watch over connecting.

Every librdkafka error is turned into an ``eos_runtime.errors`` class here (``_map_error``);
no confluent type leaves the package, not even as ``__cause__``. ``_transient`` is the one
place that says which errors a run rides through (a broker outage). Opening a transport
watches the admin client's error callback (``_ConnectWatch``) so that an unreachable
broker or refused credentials fail at once, not as a metadata time-out.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from confluent_kafka import KafkaError as _KafkaError
from confluent_kafka import KafkaException as _KafkaException

from ...errors import (
    AuthenticationFailed,
    BrokerUnavailable,
    ConfigError,
    OffsetOutOfRange,
    ProducerFenced,
    TopicExists,
    TopicNotFound,
    TransactionError,
    TransportError,
)
from ...redact import redact

#: The package's own name: one logger for all its modules, whose filter redacts every line
#: (a logger's filters see only the records logged to it, not those of its children).
log = logging.getLogger("eos_runtime.transport.kafka")
#: librdkafka's own log lines are routed here (instead of stderr).
rdkafka_log = logging.getLogger(log.name + ".librdkafka")
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

