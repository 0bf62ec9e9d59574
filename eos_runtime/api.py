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
new stream; a stream may take several next steps (branches, each seeing every value),
and ``merge`` makes one stream of several. A function whose parameters do not fit how
its step calls it is refused here, not at run time; so is a graph that cannot run
(``graph.py``).

Nothing runs here: the pipeline is a description that ``eos run PIPELINE.py`` or
``eos_runtime.run_pipeline(pipeline, ...)`` plans and executes on Spark, and that
``eos_runtime.testing.TestRun`` runs in-process for unit tests. docs/api.md is the
reference, by example.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .aggregates import RunningAggregate, aggregating, count, reducing, summing
from .api_windows import JoinOp, Windowed, WindowOp, check_window, join_streams
from .errors import ConfigError
from .kafka_settings import check_settings
from .limits import check
from .outage import DEFAULT_BUDGET, check_budget
from .topic_rules import check_moves, check_name, check_sinks_not_read
from .user_functions import as_listener, check_arity, check_call, function_name
from .values import FORMATS, State, _format, _key_format
from .windows import Hopping, Session, Tumbling

__all__ = ["Pipeline", "Stream", "State", "Table", "GUARANTEES", "FORMATS"]

GUARANTEES = ("exactly-once", "at-least-once")


@dataclass(frozen=True)
class Step:
    kind: str                  # map | flat_map | filter
    fn: Callable[..., Any]
    stateful: bool = False
    name: str = ""
    # on_timer(at, state): an event-time timer this step's state.timer(at) set has fired
    on_timer: Callable[[int, Any], Any] | None = None


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
    # a table's topic (Pipeline.table): a null value deletes its key, a null key is an error
    table: bool = False
    # event time (W1): a record's time is timestamp(value), else its log record's (ms)
    timestamp: Callable[[Any], int] | None = field(default=None, compare=False)
    idle_after: float = 0.0          # seconds a caught-up partition still counts (W2)


@dataclass(frozen=True)
class Shuffle:
    key_fn: Callable[[Any], Any] | None   # None: each record's own key (a table's rows)
    parallelism: int | None
    partitions: int | None


@dataclass(frozen=True)
class Sink:
    topic: str
    key_format: str | None
    value_format: str


@dataclass(frozen=True, eq=False)   # a table is its pipeline's: equal only to itself
class Table:
    """A keyed topic read as a table: the latest value per key (a None value deletes it).
    Returned by ``Pipeline.table``; a stream enriches its values from it with ``lookup``."""

    topic: str
    key_format: str
    value_format: str
    parallelism: int | None = None


@dataclass(frozen=True)
class Lookup:
    """A lookup step: each value with the table's current row for its key."""

    table: Table
    how: str                                   # inner | left
    join: Callable[[Any, Any], Any] | None     # None: the pair (value, row)
    name: str = ""


class _Node:
    """One node of a pipeline's graph: a source, a step, a key shuffle, a merge or a sink.

    ``roots`` are the ids of the stage roots (sources and key shuffles) whose stages run
    this node: one, except after a merge of streams of different stages, whose steps up to
    the next shuffle or sink then run in each of those stages (``graph.py``)."""

    __slots__ = ("id", "kind", "payload", "inputs", "nexts", "keyed", "roots")

    def __init__(self, id: int, kind: str, payload: Any, inputs: tuple[_Node, ...],
                 keyed: bool, roots: frozenset[int]) -> None:
        self.id, self.kind, self.payload, self.inputs = id, kind, payload, inputs
        self.keyed, self.roots = keyed, roots
        self.nexts: list[_Node] = []

    def describe(self) -> str:
        """How messages name this node: ".map(parse)", "source 'in'", ".merge(...)"."""
        p = self.payload
        if self.kind == "source":
            return f"source {p.topic!r}"
        if self.kind == "step":
            return f".{p.name}" if isinstance(p.fn, RunningAggregate) else f".{p.kind}({p.name})"
        if self.kind == "key_by":
            return f".key_by({function_name(p.key_fn, 'key_by')})"
        if self.kind == "sink":
            return f".sink({p.topic!r})"
        if self.kind == "table":
            return f"table {p.topic!r}"
        if self.kind == "lookup":
            return f".lookup({p.table.topic!r})"
        if self.kind == "window":
            return (".join(...)" if isinstance(p, JoinOp)
                    else f".window(...).{p.name}.{p.emit}()")
        return ".merge(...)"


class Stream:
    """A stream of values inside a pipeline. Each method adds a step and returns a new
    stream. A stream may take several next steps (branches): each sees every value."""

    def __init__(self, pipeline: Pipeline, node: _Node) -> None:
        self._pipeline = pipeline
        self._node = node

    def _describe(self) -> str:
        """Where this stream is, for messages: "after .map(parse)", "from source 'in'"."""
        node = self._node
        return f"from {node.describe()}" if node.kind == "source" else f"after {node.describe()}"

    def _add(self, kind: str, fn: Callable[..., Any], stateful: bool,
             on_timer: Callable[[int, Any], Any] | None = None) -> Stream:
        if not callable(fn):
            raise ConfigError(f"{kind}: expected a function, got {fn!r}")
        name = function_name(fn, kind)
        if on_timer is not None:
            if not stateful:
                raise ConfigError(f"{kind}({name}): on_timer needs stateful=True (a timer is "
                                  f"set with state.timer(at), for the record's key)")
            check_arity(on_timer, f"{kind}({name}) on_timer", function_name(on_timer, "on_timer"),
                        True, role="an on_timer function (at, state)")
        if stateful and not self._node.keyed:
            raise ConfigError(f"stateful step {name!r} has no key: add .key_by(...) before it "
                              f"(or, only if the source topic's records carry keys, give the "
                              f"source a key format, e.g. source(topic, key=\"utf8\"))")
        if stateful and len(self._node.roots) > 1:
            raise ConfigError(f"stateful step {name!r} follows a merge of streams of different "
                              f"stages ({self._pipeline._roots_named(self._node.roots)}), whose "
                              f"values of one key are in different tasks: add .key_by(...) "
                              f"after the merge, so that each key's values meet in one task")
        check_arity(fn, f"{kind}({name})", name, stateful)
        return self._pipeline._stream("step", Step(kind, fn, stateful, name, on_timer),
                                      (self._node,),
                                      self._node.keyed, self._node.roots)

    def map(self, fn: Callable[..., Any], *, stateful: bool = False,
            on_timer: Callable[[int, Any], Any] | None = None) -> Stream:
        """Replace each value by ``fn(value)`` (or ``fn(value, state)``). ``on_timer(at,
        state)``: called when the watermark passes a time ``state.timer(at)`` set for a
        key, its return value (None: nothing) going on as the step's output."""
        return self._add("map", fn, stateful, on_timer)

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
        name = function_name(key_fn, "key_by")
        for what, n in (("parallelism", parallelism), ("partitions", partitions)):
            if n is not None:
                check(what, n, what=f"key_by {what}")
        check_arity(key_fn, f"key_by({name})", name, False, role="a key function")
        node_id = self._pipeline._next_id()
        return self._pipeline._stream("key_by", Shuffle(key_fn, parallelism, partitions),
                                      (self._node,), True, frozenset({node_id}))

    def lookup(self, table: Table, *, on: Callable[[Any], Any] | None = None,
               how: str = "inner", join: Callable[[Any, Any], Any] | None = None) -> Stream:
        """Each value with ``table``'s current row for its key: ``join(value, row)``, or the
        pair ``(value, row)`` without ``join``. ``on(value)`` is the key to look up, and the
        stream is shuffled by it to the tasks that hold those keys of the table (a
        ``key_by(on)``); without ``on`` the stream must be keyed by a ``key_by`` already,
        whose key is the one looked up. ``how="inner"`` drops a value whose key the table
        does not hold; ``"left"`` passes it on with the row None."""
        if not isinstance(table, Table) or table not in self._pipeline._tables():
            raise ConfigError(f"lookup: expected a table of this pipeline "
                              f"(pipeline.table(topic, ...)), got {table!r}")
        if how not in ("inner", "left"):
            raise ConfigError(f"lookup {table.topic!r}: how={how!r}: use 'inner' or 'left'")
        if join is not None:
            if not callable(join):
                raise ConfigError(f"lookup {table.topic!r}: join must be a function "
                                  f"(value, row), not {join!r}")
            check_arity(join, f"lookup({table.topic!r})", function_name(join, "join"), True,
                        role="a join function")
        stream = self
        if on is not None:
            stream = self.key_by(on)
        else:
            roots = [self._pipeline._nodes[r] for r in self._node.roots]
            if len(roots) != 1 or roots[0].kind != "key_by":
                raise ConfigError(f"lookup {table.topic!r}: the stream {self._describe()} is not "
                                  f"keyed by a key_by: give on=key_fn, the key of each value "
                                  f"to look up in the table")
        node = stream._node
        return self._pipeline._stream("lookup", Lookup(table, how, join, table.topic),
                                      (node,), node.keyed, node.roots)

    def count(self) -> Stream:
        """Each value's key's running count: 1, 2, 3, ... (``aggregates.py``)."""
        return self._aggregate(count())

    def sum(self, fn: Callable[[Any], Any] | None = None) -> Stream:
        """Each value's key's running sum of its values, or of ``fn(value)``."""
        if fn is None:
            return self._aggregate(summing(None, ""))
        return self._aggregate(summing(fn, self._aggregate_fn(fn, "sum", ("value",))))

    def reduce(self, fn: Callable[[Any, Any], Any]) -> Stream:
        """Each value's key's running ``fn(acc, value)``; the key's first value starts it."""
        return self._aggregate(reducing(fn, self._aggregate_fn(fn, "reduce",
                                                              ("acc", "value"))))

    def aggregate(self, initial: Callable[[], Any], add: Callable[[Any, Any], Any]) -> Stream:
        """Each value's key's running ``add(acc, value)``, from ``initial()``."""
        self._aggregate_fn(initial, "aggregate initial", ())
        return self._aggregate(aggregating(initial, add, self._aggregate_fn(
            add, "aggregate add", ("acc", "value"))))

    def _aggregate_fn(self, fn: object, what: str, args: tuple[str, ...]) -> str:
        """A running aggregate's function, refused unless it takes ``args``; its name."""
        if not callable(fn):
            raise ConfigError(f"{what}: expected a function, got {fn!r}")
        name = function_name(fn, what)
        check_call(fn, f"{what}({name})", name, args)
        return name

    def _aggregate(self, aggregate: RunningAggregate) -> Stream:
        self._keyed_here(aggregate.name)
        return self._pipeline._stream("step", Step("map", aggregate, True, aggregate.name),
                                      (self._node,), True, self._node.roots)

    def window(self, spec: Tumbling | Hopping | Session, *, grace: int = 0
               ) -> Windowed[Stream]:
        """Cut this keyed stream into event-time windows (``eos_runtime.windows``:
        ``tumbling``, ``hopping``, ``session``); ``grace`` ms after a window's end its
        result is final and later records of it are late. Then an aggregation (``count``, ``sum``,
        ``reduce``, ``aggregate``) and ``final()`` or ``current()``."""
        grace = check_window(spec, grace)
        self._keyed_here("window")
        return Windowed(self, spec, grace)

    def join(self, other: Stream, *, within: int, on: tuple[Callable[[Any], Any],
                                                           Callable[[Any], Any]],
             how: str = "inner", join: Callable[[Any, Any], Any] | None = None,
             grace: int = 0, parallelism: int | None = None) -> Stream:
        """Pair each value of this stream with each value of ``other`` whose join key is
        the same (``on``: this side's key function, the other's) and whose event time is
        at most ``within`` ms from its own: ``join(left, right)``, or the pair ``[left,
        right]``. Each pair is emitted once; ``how="left"`` also emits each value of this
        stream that found no partner, with None, once none can come any more. A new
        stage (``parallelism`` tasks) holds both sides by key."""
        return join_streams(self, other, within=within, on=on, how=how, join=join,
                            grace=grace, parallelism=parallelism)

    def _window(self, op: WindowOp | JoinOp) -> Stream:
        return self._pipeline._stream("window", op, (self._node,), True, self._node.roots)

    def _keyed_here(self, what: str) -> None:
        """Refuse a keyed operator where the stream has no key, or where a key's values
        are in several tasks (after a merge of streams of different stages)."""
        if not self._node.keyed:
            raise ConfigError(f"{what} {self._describe()}: the stream has no key: add "
                              f".key_by(...) before it")
        if len(self._node.roots) > 1:
            raise ConfigError(f"{what} {self._describe()} follows a merge of streams of "
                              f"different stages, whose values of one key are in different "
                              f"tasks: add .key_by(...) after the merge")

    def merge(self, *others: Stream) -> Stream:
        """One stream of this one and ``others``: every value of each, in the order each
        delivers them. Keyed if every one of them is. Streams of different stages merge
        too: the steps after the merge run in each of those stages, up to the next
        ``key_by`` (where their values meet) or sink."""
        if not others:
            raise ConfigError("merge: give the streams to merge with this one, "
                              "e.g. a.merge(b)")
        nodes = [self._node]
        for other in others:
            if not isinstance(other, Stream):
                raise ConfigError(f"merge: expected streams of this pipeline, got {other!r}")
            if other._pipeline is not self._pipeline:
                raise ConfigError(f"merge: the stream {other._describe()} belongs to pipeline "
                                  f"{other._pipeline.name!r}, not {self._pipeline.name!r}")
            if other._node in nodes:
                raise ConfigError(f"merge: the stream {other._describe()} is given twice, "
                                  f"which would repeat each of its values")
            nodes.append(other._node)
        return self._pipeline._stream("merge", None, tuple(nodes),
                                      all(n.keyed for n in nodes),
                                      frozenset().union(*(n.roots for n in nodes)))

    def sink(self, topic: str, *, key: str | None = None, value: str = "utf8") -> None:
        """Write the values to ``topic`` (key and value formats from ``FORMATS``)."""
        if not isinstance(topic, str) or not topic:
            raise ConfigError(f"sink: topic must be a non-empty string, not {topic!r}")
        if key is not None and not self._node.keyed:
            raise ConfigError(f"sink {topic!r}: a key format needs a keyed stream (key_by first)")
        for other in self._pipeline._nodes:
            if other.kind == "sink" and other.payload.topic == topic:
                raise ConfigError(f"sink {topic!r}: the pipeline already writes it (from the "
                                  f"stream {Stream(self._pipeline, other.inputs[0])._describe()}"
                                  f"): merge the streams, then sink the merged one")
        self._pipeline._stream("sink", Sink(topic, _key_format(key, f"sink {topic!r} key"),
                                            _format(value, f"sink {topic!r} value")),
                               (self._node,), self._node.keyed, self._node.roots)


#: Where a source partition without a checkpoint starts (protocol/positions.py, P4);
#: ``none``: nowhere, the run is refused (Samza 0.7: no fallback and no checkpoint fails).
OFFSET_DEFAULTS = ("oldest", "upcoming", "none")

#: Where a job's source tasks keep their checkpoints: the change log (the default, and the
#: only store exactly-once may use), the checkpoint topic, the file system.
CHECKPOINT_STORES = ("changelog", "kafka", "filesystem")


class Pipeline:
    """A job: a source, steps, key shuffles, branches, merges and sinks."""

    def __init__(self, name: str, *, processing_guarantee: str = "exactly-once",
                 commit_interval: float = 5.0, commit_every: int = 0,
                 parallelism: int = 1, dead_letters: bool | str = False,
                 kafka_config: Mapping[str, Any] | None = None,
                 checkpoints: str = "changelog", job_id: str = "1",
                 outage_budget: float = DEFAULT_BUDGET) -> None:
        check_name(name)
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
        # The pipeline's graph, in the order it was written (so in topological order).
        self._nodes: list[_Node] = []
        # Told after each committed checkpoint of every task (joblog/listeners.py).
        self.listeners: list[Any] = []
        # Directories every worker of a run puts first on sys.path: load_pipeline sets the
        # pipeline file's, as `python file.py` does, so a module beside it imports there.
        self.python_path: tuple[str, ...] = ()

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
               startpoint_resolvers: Mapping[str, Callable[..., int]] | None = None,
               timestamp: Callable[[Any], int] | None = None,
               idle_after: float = 0.0) -> Stream:
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
        ``resolver(topic, partition, argument, low, high) -> offset`` (docs/operations.md).

        Event time (windows): ``timestamp(value)`` is a record's time in ms (default: its
        log record's timestamp); ``idle_after`` seconds after a partition was last read
        from, while it has nothing to read, it stops holding the watermark back."""
        if timestamp is not None and not callable(timestamp):
            raise ConfigError(f"source {topic!r}: timestamp must be a function of the value, "
                              f"not {timestamp!r}")
        if timestamp is not None:
            check_arity(timestamp, f"source {topic!r} timestamp",
                        function_name(timestamp, "timestamp"), False, role="a timestamp function")
        if isinstance(idle_after, bool) or not isinstance(idle_after, (int, float)) \
                or idle_after < 0:
            raise ConfigError(f"source {topic!r}: idle_after is seconds >= 0, not {idle_after!r}")
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
        if not isinstance(topic, str) or not topic:
            raise ConfigError(f"source: topic must be a non-empty string, not {topic!r}")
        if topic in {s.topic for s in self.sources} | {t.topic for t in self._tables()}:
            raise ConfigError(f"source {topic!r}: the pipeline already reads it: use the "
                              f"stream the first source() returned (a stream may branch)")
        return self._stream("source", Source(topic, _key_format(key, f"source {topic!r} key"),
                                             _format(value, f"source {topic!r} value"),
                                             parallelism, reset_offset, offset_default,
                                             resolvers, timestamp=timestamp,
                                             idle_after=float(idle_after)),
                            (), key is not None, frozenset({self._next_id()}))

    def table(self, topic: str, *, key: str = "utf8", value: str = "json",
              parallelism: int | None = None) -> Table:
        """Read ``topic`` as a table: its records' keys (``key`` format) map to their latest
        values (``value`` format); a record whose value is null deletes its key. Streams
        enrich their values from it with ``stream.lookup(table, ...)``. The table is task
        state of the tasks that look it up, so exactly-once covers it. ``parallelism``:
        the tasks that read the topic (default: one per partition)."""
        if not isinstance(topic, str) or not topic:
            raise ConfigError(f"table: topic must be a non-empty string, not {topic!r}")
        if key is None:
            raise ConfigError(f"table {topic!r}: a table needs a key format (its records' "
                              f"keys are the table's keys)")
        if topic in {s.topic for s in self.sources} | {t.topic for t in self._tables()}:
            raise ConfigError(f"table {topic!r}: the pipeline already reads it")
        if parallelism is not None:
            check("parallelism", parallelism, what=f"table {topic!r} parallelism")
        table = Table(topic, _format(key, f"table {topic!r} key"),
                      _format(value, f"table {topic!r} value"), parallelism)
        self._stream("table", table, (), True, frozenset({self._next_id()}))
        return table

    def _tables(self) -> tuple[Table, ...]:
        return tuple(n.payload for n in self._nodes if n.kind == "table")

    # ------------------------------------------------------------------ the graph

    def _next_id(self) -> int:
        return len(self._nodes)

    def _stream(self, kind: str, payload: Any, inputs: tuple[_Node, ...], keyed: bool,
                roots: frozenset[int]) -> Stream:
        node = _Node(self._next_id(), kind, payload, inputs, keyed, roots)
        self._nodes.append(node)
        for parent in inputs:
            parent.nexts.append(node)
        return Stream(self, node)

    def _roots_named(self, roots: frozenset[int]) -> str:
        return ", ".join(self._nodes[r].describe() for r in sorted(roots))

    @property
    def nodes(self) -> tuple[_Node, ...]:
        """The graph, in the order it was written (``graph.py`` plans its stages)."""
        return tuple(self._nodes)

    @property
    def sources(self) -> tuple[Source, ...]:
        return tuple(n.payload for n in self._nodes if n.kind == "source")

    @property
    def tables(self) -> tuple[Table, ...]:
        return self._tables()

    @property
    def sinks(self) -> tuple[Sink, ...]:
        return tuple(n.payload for n in self._nodes if n.kind == "sink")

    @property
    def dead_letter_topic(self) -> str | None:
        """Where records whose functions raised go: ``<name>.dead-letters`` for
        ``dead_letters=True``, the given topic for a string, None (stop the task) for False."""
        if self.dead_letters is True:
            return f"{self.name}.dead-letters"
        return self.dead_letters or None

    @property
    def source_topic(self) -> str:
        """The source's topic (a pipeline with several sources: ``sources``)."""
        sources = self.sources
        if not sources:
            raise ConfigError(f"pipeline {self.name!r} has no source: call pipeline.source(...)")
        if len(sources) > 1:
            raise ConfigError(f"pipeline {self.name!r} has {len(sources)} sources "
                              f"({', '.join(s.topic for s in sources)}): name the one meant")
        return sources[0].topic

    @property
    def sink_topic(self) -> str:
        """The sink's topic (a pipeline with several sinks: ``sinks``)."""
        sinks = self.sinks
        if not sinks:
            raise ConfigError(f"pipeline {self.name!r} has no sink: end it with .sink(topic)")
        if len(sinks) > 1:
            raise ConfigError(f"pipeline {self.name!r} has {len(sinks)} sinks "
                              f"({', '.join(s.topic for s in sinks)}): name the one meant")
        return sinks[0].topic

    def reset_source(self, topic: str) -> None:
        """Set ``reset_offset=True`` on source ``topic`` (``eos run --reset-offset STREAM``
        of a pipeline with several sources: only that stream is read again)."""
        for node in self._nodes:
            if node.kind == "source" and node.payload.topic == topic:
                node.payload = replace(node.payload, reset_offset=True)
                return
        raise ConfigError(f"pipeline {self.name!r} has no source {topic!r}")

    def rename(self, name: str, *, source: str | None = None, sink: str | None = None,
               sources: Mapping[str, str] | None = None,
               sinks: Mapping[str, str] | None = None) -> None:
        """Another job name and, optionally, other source and sink topics: the same
        definition can then run several times side by side (on one broker, say).
        ``source`` and ``sink`` move the one source and sink; ``sources`` and ``sinks``
        map topics to new ones (a pipeline with several names the ones it moves)."""
        check_name(name)
        if not self.sources or not self.sinks:
            raise ConfigError(f"pipeline {self.name!r} needs a source and a sink to be renamed")
        source_moves = dict(sources or {})
        if source is not None:
            source_moves[self.source_topic] = source
        sink_moves = dict(sinks or {})
        if sink is not None:
            sink_moves[self.sink_topic] = sink
        check_moves(self.name, "source", source_moves,
                     [s.topic for s in self.sources] + [t.topic for t in self._tables()])
        check_moves(self.name, "sink", sink_moves, [s.topic for s in self.sinks])
        check_sinks_not_read([source_moves.get(s.topic, s.topic) for s in self.sources],
                             [source_moves.get(t.topic, t.topic) for t in self._tables()],
                             [sink_moves.get(s.topic, s.topic) for s in self.sinks])
        self.name = name
        moved = {t: replace(t, topic=source_moves[t.topic]) for t in self._tables()
                 if t.topic in source_moves}
        for node in self._nodes:
            moves = (source_moves if node.kind == "source" else
                     sink_moves if node.kind == "sink" else {})
            if node.kind == "table" and node.payload in moved:
                node.payload = moved[node.payload]
            elif node.kind == "lookup" and node.payload.table in moved:
                node.payload = replace(node.payload, table=moved[node.payload.table])
            elif node.payload is not None and getattr(node.payload, "topic", None) in moves:
                node.payload = replace(node.payload, topic=moves[node.payload.topic])
