"""The pipeline API: declare sources, steps, key shuffles, stateful steps and sinks.

    from eos_runtime import Pipeline

    pipeline = Pipeline("wordcount", processing_guarantee="exactly-once", commit_interval=1.0)

    def count(word, state):
        n = state.get("n", 0) + 1
        state.set("n", n)
        return str(n)

    (pipeline.source("lines", value="utf8")
        .flat_map(str.split)
        .key_by(lambda word: word, parallelism=2)     # a shuffle: the next stage starts here
        .map(count, stateful=True)                    # keyed state, backed by RocksDB
        .sink("counts", key="utf8", value="utf8"))

Stateless functions take the value; stateful ones take ``(value, state)``, where
``state`` is scoped to the record's key (``get`` / ``set`` / ``delete``). A stream is
keyed after ``key_by`` or when its source declares a key format. Every step returns a
new stream, and a stream takes one next step: a second one (a branch) is refused, naming
the step that already continues it. A function whose parameters do not fit how its step
calls it is refused here, not at run time.

Nothing runs here: the pipeline is a description that ``eos run PIPELINE.py`` or
``eos_runtime.run_pipeline(pipeline, ...)`` plans and executes on Spark, and that
``eos_runtime.testing.TestRun`` runs in-process for unit tests. docs/api.md is the
reference, by example.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import msgpack

from .errors import ConfigError, UserFunctionError
from .kafka_settings import check_settings
from .limits import check
from .outage import DEFAULT_BUDGET, check_budget

__all__ = ["Pipeline", "Stream", "State", "GUARANTEES", "FORMATS"]

GUARANTEES = ("exactly-once", "at-least-once")

# Record formats for the edges of a pipeline: user topics hold bytes.
FORMATS: dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]] = {
    "bytes": (lambda v: v, lambda b: b),
    "utf8": (lambda v: v.encode("utf-8"), lambda b: b.decode("utf-8")),
    "json": (lambda v: json.dumps(v, separators=(",", ":")).encode(), json.loads),
    "msgpack": (lambda v: msgpack.packb(v, use_bin_type=True),
                lambda b: msgpack.unpackb(b, raw=False)),
}


def _format(name: str, what: str) -> str:
    if name not in FORMATS:
        raise ConfigError(f"{what}: unknown format {name!r}; use one of {', '.join(FORMATS)}")
    return name


def _key_format(name: str | None, what: str) -> str | None:
    """No key format (None): an unkeyed stream."""
    return None if name is None else _format(name, what)


class State:
    """Keyed state seen by a stateful step: the values of the current record's key.

    Values are stored as msgpack, so they may be None, bool, numbers, str, bytes, lists
    and dicts of those (a tuple comes back as a list). A record without a key (a keyed
    source's record whose key is null) has no state: touching it raises
    ``UserFunctionError``, where it would otherwise share one state with every other
    keyless record.
    """

    __slots__ = ("_get", "_put", "_delete", "_prefix")

    def __init__(self, get: Callable[[bytes], bytes | None], put: Callable[[bytes, bytes], None],
                 delete: Callable[[bytes], None]) -> None:
        self._get, self._put, self._delete = get, put, delete
        # The current record's encoded key, set by the runtime's chain before each call.
        # An encoded key is never empty (msgpack), so b"" means the record has no key.
        self._prefix = b""

    def _key(self, name: str) -> bytes:
        prefix = self._prefix
        if not prefix:
            raise UserFunctionError(
                "this record has no key, and a stateful step keeps its state per key (keyless "
                "records would all share one state): key_by(...) before the stateful step, or "
                "give every record of the source topic a key")
        return prefix + name.encode("utf-8")

    def get(self, name: str, default: Any = None) -> Any:
        raw = self._get(self._key(name))
        return default if raw is None else _unpackb(raw, raw=False)

    def set(self, name: str, value: Any) -> None:
        self._put(self._key(name), _pack(value))

    def delete(self, name: str) -> None:
        self._delete(self._key(name))


# Bound once: msgpack.packb builds a Packer per call, a cost paid per state write.
_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack
_unpackb = msgpack.unpackb


@dataclass(frozen=True)
class Step:
    kind: str                  # map | flat_map | filter
    fn: Callable[..., Any]
    stateful: bool = False
    name: str = ""


@dataclass(frozen=True)
class Source:
    topic: str
    key_format: str | None
    value_format: str
    parallelism: int | None
    reset_offset: bool = False       # ignore an earlier run's checkpoint (protocol/positions.py)
    # where to start without a checkpoint: oldest | upcoming | none (no fallback: fail)
    offset_default: str = "oldest"
    # custom Startpoints' resolvers by name (eos_runtime/joblog/startpoints.py)
    startpoint_resolvers: Mapping[str, Callable[..., int]] = field(default_factory=dict,
                                                                   compare=False)


@dataclass(frozen=True)
class Shuffle:
    key_fn: Callable[[Any], Any]
    parallelism: int | None
    partitions: int | None


@dataclass(frozen=True)
class Sink:
    topic: str
    key_format: str | None
    value_format: str


@dataclass
class _Segment:
    """Steps between two boundaries (source or shuffle, then shuffle or sink)."""

    start: Source | Shuffle
    keyed: bool
    steps: list[Step] = field(default_factory=list)
    end: Shuffle | Sink | None = None


class Stream:
    """A stream of values inside a pipeline. Each method adds a step and returns a new
    stream; a stream takes one next step (a second one, a branch, is a ``ConfigError``)."""

    def __init__(self, pipeline: Pipeline, segment: _Segment, position: int = 0) -> None:
        self._pipeline = pipeline
        self._segment = segment
        self._position = position     # the segment's steps before this stream's next one

    def _describe(self) -> str:
        """Where this stream is, for messages: "after .map(parse)", "from source 'in'"."""
        seg, pos = self._segment, self._position
        if pos:
            step = seg.steps[pos - 1]
            return f"after .{step.kind}({step.name})"
        if isinstance(seg.start, Source):
            return f"from source {seg.start.topic!r}"
        return f"after .key_by({_name(seg.start.key_fn, 'key_by')})"

    def _check_open(self, adding: str) -> None:
        """Refuse a second next step: steps and sinks extend the one chain of the pipeline."""
        seg, pos = self._segment, self._position
        if pos < len(seg.steps):
            step = seg.steps[pos]
            nxt = f".{step.kind}({step.name})"
        elif isinstance(seg.end, Shuffle):
            nxt = f".key_by({_name(seg.end.key_fn, 'key_by')})"
        elif isinstance(seg.end, Sink):
            raise ConfigError(f"cannot add {adding} to the stream {self._describe()}: it already "
                              f"ends in .sink({seg.end.topic!r}), and a pipeline has one sink")
        else:
            return
        raise ConfigError(f"cannot add {adding} to the stream {self._describe()}: it already "
                          f"continues with {nxt}, and a stream takes one next step (branches "
                          f"are not supported): chain from the stream {nxt} returned")

    def _add(self, kind: str, fn: Callable[..., Any], stateful: bool) -> Stream:
        if not callable(fn):
            raise ConfigError(f"{kind}: expected a function, got {fn!r}")
        name = _name(fn, kind)
        self._check_open(f".{kind}({name})")
        if stateful and not self._segment.keyed:
            raise ConfigError(f"stateful step {name!r} has no key: add .key_by(...) before it "
                              f"(or, only if the source topic's records carry keys, give the "
                              f"source a key format, e.g. source(topic, key=\"utf8\"))")
        _check_arity(fn, f"{kind}({name})", name, stateful)
        self._segment.steps.append(Step(kind, fn, stateful, name))
        return Stream(self._pipeline, self._segment, len(self._segment.steps))

    def map(self, fn: Callable[..., Any], *, stateful: bool = False) -> Stream:
        """Replace each value by ``fn(value)`` (or ``fn(value, state)``)."""
        return self._add("map", fn, stateful)

    def flat_map(self, fn: Callable[..., Any], *, stateful: bool = False) -> Stream:
        """Replace each value by every item of ``fn(value)`` (or ``fn(value, state)``)."""
        return self._add("flat_map", fn, stateful)

    def filter(self, fn: Callable[..., Any], *, stateful: bool = False) -> Stream:
        """Keep the values for which ``fn(value)`` (or ``fn(value, state)``) is true."""
        return self._add("filter", fn, stateful)

    def key_by(self, key_fn: Callable[[Any], Any], *, parallelism: int | None = None,
               partitions: int | None = None) -> Stream:
        """Repartition by ``key_fn(value)``: a new stage whose tasks each own some keys.

        Keys must be str, bytes or int. ``parallelism`` is the new stage's task count
        (default: the pipeline's), ``partitions`` its channel count (default: parallelism).
        """
        if not callable(key_fn):
            raise ConfigError(f"key_by: expected a function, got {key_fn!r}")
        name = _name(key_fn, "key_by")
        self._check_open(f".key_by({name})")
        for what, n in (("parallelism", parallelism), ("partitions", partitions)):
            if n is not None:
                check(what, n, what=f"key_by {what}")
        _check_arity(key_fn, f"key_by({name})", name, False, role="a key function")
        shuffle = Shuffle(key_fn, parallelism, partitions)
        self._segment.end = shuffle
        nxt = _Segment(start=shuffle, keyed=True)
        self._pipeline._segments.append(nxt)
        return Stream(self._pipeline, nxt)

    def sink(self, topic: str, *, key: str | None = None, value: str = "utf8") -> None:
        """Write the values to ``topic`` (key and value formats from ``FORMATS``)."""
        self._check_open(f".sink({topic!r})")
        if not isinstance(topic, str) or not topic:
            raise ConfigError(f"sink: topic must be a non-empty string, not {topic!r}")
        if key is not None and not self._segment.keyed:
            raise ConfigError(f"sink {topic!r}: a key format needs a keyed stream (key_by first)")
        self._segment.end = Sink(topic, _key_format(key, f"sink {topic!r} key"),
                                 _format(value, f"sink {topic!r} value"))


def _name(fn: Callable[..., Any], default: str) -> str:
    return getattr(fn, "__name__", None) or default


def _check_arity(fn: Callable[..., Any], step: str, name: str, stateful: bool, *,
                 role: str = "") -> None:
    """Refuse a function its step could not call: stateful steps call ``fn(value, state)``,
    the others (and key_by) ``fn(value)``. Callables without a signature (some builtins)
    and ``*args`` functions are accepted."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    args = ("value", "state") if stateful else ("value",)
    if _binds(sig, len(args)):
        return
    role = role or ("a stateful function" if stateful else "a function")
    called = f"{name if name.isidentifier() else 'fn'}({', '.join(args)})"
    if stateful:
        fix = "give it two parameters, (value, state)"
        if _binds(sig, 1):
            fix += ", or drop stateful=True"
    elif not role.startswith("a key") and _binds(sig, 2):
        fix = "a function of (value, state) needs stateful=True"
    else:
        fix = "give it one parameter, (value)"
    raise ConfigError(f"{step}: {role} is called as {called}, but its parameters are {sig}: "
                      f"{fix}")


def _binds(sig: inspect.Signature, n: int) -> bool:
    try:
        sig.bind(*range(n))
    except TypeError:
        return False
    return True


#: Where a source partition without a checkpoint starts (protocol/positions.py, P4);
#: ``none``: nowhere, the run is refused (Samza 0.7: no fallback and no checkpoint fails).
OFFSET_DEFAULTS = ("oldest", "upcoming", "none")

#: Where a job's source tasks keep their checkpoints: the change log (the default, and the
#: only store exactly-once may use), the checkpoint topic, the file system.
CHECKPOINT_STORES = ("changelog", "kafka", "filesystem")


class _FunctionListener:
    def __init__(self, fn: Callable[[int, Mapping[tuple[str, int], int]], Any]) -> None:
        self.fn = fn

    def on_checkpoint(self, task: int, offsets: Mapping[tuple[str, int], int]) -> None:
        self.fn(task, offsets)


def as_listener(listener: Any) -> Any:
    """A checkpoint listener object from a function or an object with ``on_checkpoint``."""
    if hasattr(listener, "on_checkpoint"):
        return listener
    if callable(listener):
        return _FunctionListener(listener)
    raise ConfigError(f"on_checkpoint: expected a function (task, offsets) or an object with "
                      f"on_checkpoint(task, offsets), got {listener!r}")


class Pipeline:
    """A job: one source, steps, key shuffles and one sink."""

    def __init__(self, name: str, *, processing_guarantee: str = "exactly-once",
                 commit_interval: float = 5.0, commit_every: int = 0,
                 parallelism: int = 1, dead_letters: bool | str = False,
                 kafka_config: Mapping[str, Any] | None = None,
                 checkpoints: str = "changelog", job_id: str = "1",
                 outage_budget: float = DEFAULT_BUDGET) -> None:
        _check_name(name)
        if not isinstance(job_id, str) or not job_id.replace("-", "").replace("_", "") \
                .replace(".", "").isalnum():
            raise ConfigError(f"job_id {job_id!r}: use letters, digits, '.', - and _")
        if checkpoints not in CHECKPOINT_STORES:
            raise ConfigError(f"checkpoints {checkpoints!r}: use one of "
                              f"{', '.join(CHECKPOINT_STORES)}")
        if processing_guarantee not in GUARANTEES:
            raise ConfigError(f"processing_guarantee {processing_guarantee!r}: use one of "
                              f"{', '.join(GUARANTEES)}")
        check("commit_interval", commit_interval)
        check("commit_every", commit_every)
        check("parallelism", parallelism)
        check("outage_budget", outage_budget)
        if not (type(dead_letters) is bool or (isinstance(dead_letters, str) and dead_letters)):
            raise ConfigError(f"dead_letters must be True, False or a topic name, not "
                              f"{dead_letters!r}")
        try:
            # Seconds a run rides through a broker outage (eos_runtime.outage).
            self.outage_budget = check_budget(outage_budget)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.name = name
        self.processing_guarantee = processing_guarantee
        self.commit_interval = float(commit_interval)
        self.commit_every = commit_every
        self.parallelism = parallelism
        # A record whose function raises goes to this topic instead of stopping the task.
        self.dead_letters = dead_letters
        # librdkafka settings for every Kafka client of a run (SASL, TLS, ...), under the
        # command line's --kafka-config and -X; ignored on the local log.
        self.kafka_config = check_settings(kafka_config or {}, f"pipeline {name!r} kafka_config")
        # Where source tasks keep their input positions (joblog/checkpoints.py); at-least-once only
        # for the topic and file-system stores (plan.py refuses them under exactly-once).
        self.checkpoints = checkpoints
        # A job has a name and an id, as in Samza: the id names the checkpoint topic
        # (__eos_checkpoint_<name>_<id>) and the file-system store's directory.
        self.job_id = job_id
        self._segments: list[_Segment] = []
        # Told after each committed checkpoint of every task (joblog/listeners.py).
        self.listeners: list[Any] = []

    def on_checkpoint(self, listener: Any) -> Any:
        """Register a checkpoint listener: a function ``fn(task, offsets)`` or an object
        with ``on_checkpoint(task, offsets)`` (and optionally ``open(context)``,
        ``close()``), called in each task after each checkpoint it committed, with the
        input positions committed (``{(topic, partition): offset}``). Not atomic with the
        checkpoint: it may be called again for positions after a restart, or not at all if
        the task dies right after its commit (docs/operations.md). Returns ``listener``,
        so it also works as a decorator. ``eos_runtime.joblog.listeners.DeleteConsumedInput()``
        is the retention helper."""
        self.listeners.append(as_listener(listener))
        return listener

    def source(self, topic: str, *, key: str | None = None, value: str = "utf8",
               parallelism: int | None = None, reset_offset: bool = False,
               offset_default: str = "oldest",
               startpoint_resolvers: Mapping[str, Callable[..., int]] | None = None) -> Stream:
        """Read ``topic``; ``key``/``value`` are formats from ``FORMATS`` (no key format:
        an unkeyed stream). ``parallelism`` defaults to the topic's partition count.

        Where each partition is read from (docs/operations.md): the last checkpoint; with
        ``reset_offset=True`` a run ignores the checkpoint an earlier run left (a retry
        inside the run still resumes from its own) and starts at ``offset_default``, which
        also applies when there is no checkpoint: ``"oldest"`` (the default: what the
        topic holds), ``"upcoming"`` (only what arrives after the run's start) or ``"none"`` (no
        fallback: a run refuses to start while a partition has neither a checkpoint nor a
        Startpoint, naming it). Under exactly-once a reset moves the input positions and
        keeps the job's state.

        ``startpoint_resolvers`` names the functions a custom Startpoint may use:
        ``resolver(topic, partition, argument, low, high) -> offset`` (docs/operations.md)."""
        resolvers = dict(startpoint_resolvers or {})
        for rname, fn in resolvers.items():
            if not isinstance(rname, str) or not rname or not callable(fn):
                raise ConfigError(f"source {topic!r}: startpoint_resolvers maps names to "
                                  f"functions, not {rname!r} to {fn!r}")
        if type(reset_offset) is not bool:
            raise ConfigError(f"source {topic!r}: reset_offset must be True or False, "
                              f"not {reset_offset!r}")
        if offset_default not in OFFSET_DEFAULTS:
            raise ConfigError(f"source {topic!r}: offset_default {offset_default!r}: use "
                              f"'oldest', 'upcoming' or 'none'")
        if self._segments:
            raise ConfigError("a pipeline has one source (joins of several sources come later)")
        if not isinstance(topic, str) or not topic:
            raise ConfigError(f"source: topic must be a non-empty string, not {topic!r}")
        seg = _Segment(start=Source(topic, _key_format(key, f"source {topic!r} key"),
                                    _format(value, f"source {topic!r} value"), parallelism,
                                    reset_offset, offset_default, resolvers),
                       keyed=key is not None)
        self._segments.append(seg)
        return Stream(self, seg)

    @property
    def segments(self) -> list[_Segment]:
        return list(self._segments)

    @property
    def dead_letter_topic(self) -> str | None:
        """Where records whose functions raised go: ``<name>.dead-letters`` for
        ``dead_letters=True``, the given topic for a string, None (stop the task) for False."""
        if self.dead_letters is True:
            return f"{self.name}.dead-letters"
        return self.dead_letters or None

    @property
    def source_topic(self) -> str:
        start = self._segments[0].start if self._segments else None
        if not isinstance(start, Source):
            raise ConfigError(f"pipeline {self.name!r} has no source: call pipeline.source(...)")
        return start.topic

    @property
    def sink_topic(self) -> str:
        end = self._segments[-1].end if self._segments else None
        if not isinstance(end, Sink):
            raise ConfigError(f"pipeline {self.name!r} has no sink: end it with .sink(topic)")
        return end.topic

    def rename(self, name: str, *, source: str | None = None, sink: str | None = None) -> None:
        """Another job name and, optionally, other source and sink topics: the same
        definition can then run several times side by side (on one broker, say)."""
        _check_name(name)
        start = self._segments[0].start if self._segments else None
        end = self._segments[-1].end if self._segments else None
        if not isinstance(start, Source) or not isinstance(end, Sink):
            raise ConfigError(f"pipeline {self.name!r} needs a source and a sink to be renamed")
        self.name = name
        if source is not None:
            self._segments[0].start = replace(start, topic=source)
        if sink is not None:
            self._segments[-1].end = replace(end, topic=sink)


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"pipeline name {name!r}: use letters, digits, - and _")
