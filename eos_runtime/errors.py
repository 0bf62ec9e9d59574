"""The exception tree of eos_runtime, in one place.

Every error the runtime raises on purpose is an ``EosError``. Backend errors
(librdkafka, msgpack, OS errors of the local log) are mapped to these classes at
the boundary where they occur, so callers never need to import a backend to
catch a failure.

Every subclass of ``EosError`` is defined here and nowhere else (the public-API test
walks the subclasses to check it). The modules that raise them import them from here,
and re-export the ones they always exported (``eos_runtime.state.StateLocked``,
``eos_runtime.engine.EngineError``, ``eos_runtime.protocol.aligner.ProtocolViolation``, ...).

    EosError                     raised as itself for a task's own fatal condition
    ├── ConfigError              bad user input: options, pipeline definitions
    │   ├── PipelineFileError    a pipeline file that does not compile or raises when run
    │   └── NoFallback           a partition has no position to start from (P4, no default)
    ├── SetupError               the machine lacks something (Java, Maven, jars)
    ├── BrokerError              the project's own Kafka broker would not start/stop
    ├── PortTaken                a port picked free was bound by another before our daemon
    ├── WireFormatError          a record that does not decode (names topic/partition/offset)
    ├── TransportError           anything that went wrong talking to a log; ``transient``: the
    │   │                        same call may succeed once the log is back (a broker outage)
    │   ├── BrokerUnavailable    the log did not answer (transient): down, restarting, moving
    │   ├── OutageBudgetExceeded an outage lasted longer than the run's outage budget
    │   ├── TopicNotFound        a topic or partition that does not exist was used
    │   ├── TopicExists          a topic was created again with a different layout
    │   ├── OffsetOutOfRange     an offset outside a partition's [low, high] was asked for
    │   ├── DeliveryFailed       produced records were not acknowledged
    │   ├── LogCorrupted         the local log's files do not hold what they must
    │   ├── AuthenticationFailed Kafka refused the client's credentials or TLS handshake
    │   └── TransactionError     carries retriable / requires_abort / fatal
    │       └── ProducerFenced   a newer producer with the same transactional id exists
    ├── StateError               a task's RocksDB state could not be opened, read or written
    │   └── StateLocked          the state directory is open already (RocksDB LOCK held)
    ├── ProtocolViolation        input the protocol rules forbid (the aligner's, the fences',
    │                            a version past its run's end): a bug or a broken job model
    ├── RecoveryError            the change log does not hold what a task's recovery needs
    ├── UserFunctionError        a user function (step or key_by) raised, or returned a bad key
    ├── TaskFailed               a task stopped on a record (names topic/partition/offset)
    ├── StartOutOfRange          a source's start lies outside its partition: not retried
    ├── DeadLetterLimitExceeded  a run left more dead letters than max_dead_letters allows
    ├── EngineError              the Spark job failed: a task's last attempt, or Spark itself
    │   ├── JobCancelled         the Spark job was cancelled (RunningJob.cancel, Ctrl-C)
    │   └── JobStalled           some task had no running attempt for the no-progress timeout
    ├── JobRunning               another driver holds the job's lease (names its run)
    ├── SmokeFailed              ``eos smoke`` read back something other than it wrote
    └── DemoFailed               ``eos demo``'s committed output differs from its oracle
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "EosError",
    "ConfigError",
    "PipelineFileError",
    "NoFallback",
    "PortTaken",
    "SetupError",
    "BrokerError",
    "WireFormatError",
    "TransportError",
    "BrokerUnavailable",
    "OutageBudgetExceeded",
    "TopicNotFound",
    "TopicExists",
    "OffsetOutOfRange",
    "DeliveryFailed",
    "LogCorrupted",
    "AuthenticationFailed",
    "TransactionError",
    "ProducerFenced",
    "StateError",
    "StateLocked",
    "ProtocolViolation",
    "RecoveryError",
    "UserFunctionError",
    "TaskFailed",
    "StartOutOfRange",
    "DeadLetterLimitExceeded",
    "EngineError",
    "JobCancelled",
    "JobStalled",
    "SmokeFailed",
    "DemoFailed",
    "JobRunning",
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


class NoFallback(ConfigError):
    """P4 with ``offset_default`` ``none``: the partition has no position to start from.
    ``reset``: it has a checkpoint, ignored by ``reset_offset``."""

    def __init__(self, reset: bool) -> None:
        self.reset = reset
        what = ("its checkpoint is ignored (reset_offset) and it has no Startpoint" if reset
                else "it has no checkpoint and no Startpoint")
        super().__init__(f"{what}, and offset_default is 'none' (no fallback)")


class SetupError(EosError):
    """A tool or file the runtime needs is missing from this machine."""


class BrokerError(EosError):
    """The project's own Kafka broker could not be started, found or stopped."""


class PortTaken(EosError):
    """A port picked free was bound by another process before our daemon (a Kafka broker,
    a Spark master or worker) bound it: the caller retries with other ports."""


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
    """A log (Kafka or the embedded local log) failed an operation.

    ``transient`` is True when the transport classified the failure as one the same call
    may not hit once the log is back (a broker down or restarting, a leader moving): a
    run rides through those within its outage budget (``eos_runtime.outage``). The
    transport sets it on the instance (a ``DeliveryFailed`` or ``TransactionError`` can be
    either); ``BrokerUnavailable`` always is.
    """

    transient: bool = False


class BrokerUnavailable(TransportError):
    """The log did not answer: a broker down, restarting, or without a leader for a while."""

    transient = True


class OutageBudgetExceeded(TransportError):
    """The log was unreachable for longer than the run's outage budget; the message names
    the broker and how long it was gone."""


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


class AuthenticationFailed(TransportError):
    """Kafka refused the client's credentials (SASL) or its TLS handshake failed."""


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


class StateError(EosError):
    """The task's local state (RocksDB) could not be opened, read or written."""


class StateLocked(StateError):
    """The state directory is open already, by another process or another ``TaskStore``."""

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        super().__init__(f"task state at {path} is in use by another process or another open "
                         f"TaskStore (RocksDB LOCK held): {detail}")


class ProtocolViolation(EosError):
    """Input the protocol rules say cannot happen: a bug or a broken job model."""


class RecoveryError(EosError):
    """The change log does not hold what recovery needs."""


class UserFunctionError(EosError):
    """A user function raised on a record. ``user_traceback``: the frames of the user's
    own files, as Python prints them (None: not a function's exception)."""

    user_traceback: str | None = None


class TaskFailed(EosError):
    """A task stopped on a record: names topic, partition, offset and the cause;
    ``user_traceback`` as its cause's (``UserFunctionError``)."""

    user_traceback: str | None = None


class StartOutOfRange(EosError):
    """A source partition's start lies outside the offsets it holds: every retry would
    start there again, so none is made (runner's fail_fast)."""


class DeadLetterLimitExceeded(EosError):
    """A run left more dead letters than its ``max_dead_letters`` allows (``eos run
    --max-dead-letters``; ``dead_letter_limit.py`` says when each kind is checked). The
    run was stopped gracefully or had ended: what it committed stands. ``summary``: its
    ``RunSummary``."""

    def __init__(self, message: str, summary: Any = None) -> None:
        super().__init__(message)
        self.summary = summary


class EngineError(EosError):
    """The Spark job failed: a task failed on its last attempt, or Spark itself failed.

    ``task_index`` is the failing task (``None`` when Spark failed as a whole),
    ``attempts`` how many attempts that task had, ``reason`` the Python exception text
    from the worker (``"ValueError: boom"``) or Spark's one-line reason (``"Python
    worker exited unexpectedly (crashed)"``), ``python_traceback`` the worker's
    traceback when there was one, ``user_traceback`` its frames of the user's own files
    when a user function raised (``eos run --traceback`` shows them).
    """

    def __init__(self, message: str, *, task_index: int | None = None,
                 attempts: int | None = None, reason: str | None = None,
                 python_traceback: str | None = None,
                 user_traceback: str | None = None) -> None:
        super().__init__(message)
        self.task_index = task_index
        self.attempts = attempts
        self.reason = reason if reason is not None else message
        self.python_traceback = python_traceback
        self.user_traceback = user_traceback


class JobCancelled(EngineError):
    """The job was cancelled (``RunningJob.cancel``, Ctrl-C in ``run_tasks``)."""


class JobStalled(EngineError):
    """Some unfinished task of the job had no running attempt for the engine's no-progress
    timeout (the cluster lost its workers, or has fewer slots than tasks): the job was
    cancelled rather than left waiting forever."""


class JobRunning(EosError):
    """Another driver holds the job's lease: a second ``eos run``, the checkpoint tool or a
    Startpoint write is refused, naming the running run."""


class SmokeFailed(EosError):
    """The smoke run read back something other than what it wrote."""


class DemoFailed(EosError):
    """The committed output differs from the oracle."""
