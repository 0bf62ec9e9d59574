"""The exception tree of eos_runtime, in one place.

Every error the runtime raises on purpose is an ``EosError``. Backend errors
(librdkafka, msgpack, OS errors of the local log) are mapped to these classes at
the boundary where they occur, so callers never need to import a backend to
catch a failure.

    EosError
    ├── ConfigError              bad user input: options, pipeline definitions
    │   └── PipelineFileError    a pipeline file that does not compile or raises when run
    ├── SetupError               the machine lacks something (Java, Maven, jars)
    ├── BrokerError              the project's own Kafka broker would not start/stop
    ├── WireFormatError          a record that does not decode (names topic/partition/offset)
    └── TransportError           anything that went wrong talking to a log
        ├── TopicNotFound
        ├── TopicExists
        ├── OffsetOutOfRange
        ├── DeliveryFailed       produced records were not acknowledged
        ├── LogCorrupted         the local log's files do not hold what they must
        └── TransactionError     carries retriable / requires_abort / fatal
            └── ProducerFenced   a newer producer with the same transactional id exists
"""

from __future__ import annotations

__all__ = [
    "EosError",
    "ConfigError",
    "PipelineFileError",
    "SetupError",
    "BrokerError",
    "WireFormatError",
    "TransportError",
    "TopicNotFound",
    "TopicExists",
    "OffsetOutOfRange",
    "DeliveryFailed",
    "LogCorrupted",
    "TransactionError",
    "ProducerFenced",
]


class EosError(Exception):
    """Base class of every error eos_runtime raises on purpose."""


class ConfigError(EosError):
    """User input that cannot work; the message says what to change."""


class PipelineFileError(ConfigError):
    """A pipeline file failed to load: a syntax error, or an exception while it ran.

    ``path`` and ``line`` locate the problem in the user's own file (``line`` is None
    when unknown); the exception itself, if any, is the ``__cause__``.
    """

    def __init__(self, message: str, *, path: str, line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


class SetupError(EosError):
    """A tool or file the runtime needs is missing from this machine."""


class BrokerError(EosError):
    """The project's own Kafka broker could not be started, found or stopped."""


class WireFormatError(EosError):
    """A record's bytes are not a valid eos_runtime wire record.

    ``topic``, ``partition`` and ``offset`` locate the record when the caller
    knows them (they are ``None`` for bytes that came from elsewhere).
    """

    def __init__(self, reason: str, *, topic: str | None = None,
                 partition: int | None = None, offset: int | None = None) -> None:
        self.reason = reason
        self.topic = topic
        self.partition = partition
        self.offset = offset
        where = ""
        if topic is not None or partition is not None or offset is not None:
            where = f" at topic={topic!r} partition={partition} offset={offset}"
        super().__init__(f"malformed record{where}: {reason}")


class TransportError(EosError):
    """A log (Kafka or the embedded local log) failed an operation."""


class TopicNotFound(TransportError):
    """The topic (or partition) does not exist."""


class TopicExists(TransportError):
    """A topic with that name exists already, with a different layout."""


class OffsetOutOfRange(TransportError):
    """An offset outside the partition's [low, high] range was asked for."""


class DeliveryFailed(TransportError):
    """Records handed to a producer were not acknowledged by the log."""


class LogCorrupted(TransportError):
    """The local log's files are damaged beyond the torn tail it repairs itself."""


class TransactionError(TransportError):
    """A transactional operation failed.

    The flags follow librdkafka's classification: ``retriable`` (call again),
    ``requires_abort`` (abort the transaction, then go on), ``fatal`` (the
    producer is unusable; make a new one).
    """

    def __init__(self, message: str, *, retriable: bool = False,
                 requires_abort: bool = False, fatal: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable
        self.requires_abort = requires_abort
        self.fatal = fatal


class ProducerFenced(TransactionError):
    """Another producer with the same transactional id took over (zombie fencing)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, fatal=True)
