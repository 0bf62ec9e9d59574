"""Run a pipeline's steps in-process, without Spark or a log: unit tests of user functions.

    from eos_runtime.testing import TestRun, run_steps

    assert run_steps(pipeline, ["a b a"]) == [("a", "1"), ("b", "1"), ("a", "2")]

    with TestRun(pipeline) as test:
        assert test.send(["a b"]) == [("a", "1"), ("b", "1")]
        assert test.send(["a"]) == [("a", "2")]     # state carries over between sends

Each stage's steps run in the runtime's own program (``runtime/operators.Program``), and
stateful steps keep their state in a real RocksDB task store in a temporary directory,
one per stage, as a task's are. What happens to a record on its way is what happens in
a task: the source's formats decode it, a ``key_by`` encodes its key (str, bytes or int)
and sends the value to the next stage as msgpack (a tuple arrives as a list), and the
sink's formats encode it. ``send`` returns the sink's records read back with the sink's
formats: ``(key, value)``, the key None when the sink has no key format.

What it leaves out: the log, Spark, parallelism (one task per stage, so the output is in
the order one task per stage would write it; on a cluster only the order per key is
kept), checkpoints, restarts and dead letters. A function that raises makes ``send``
raise ``UserFunctionError`` naming the step (the function's exception is its
``__cause__``), and that whole ``send`` changes no state, as a task that stops on a
record commits nothing past it.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from .api import FORMATS, Pipeline, Sink, Source
from .errors import ConfigError, UserFunctionError
from .graph import StageGraph, stage_graph
from .protocol.wire import CheckpointData
from .runtime.operators import Program, decode_key, encode_key, event_time_of
from .state import TaskStore
from .user_code import MSGPACK_TAKES, cannot_cross, crossing_text, function_error, value_origin

__all__ = ["TestRun", "run_steps"]

_pack, _unpack = FORMATS["msgpack"]

# What each format can write, for messages.
_TAKES = {
    "bytes": "bytes",
    "utf8": "a str",
    "json": "a JSON-serializable value",
    "msgpack": MSGPACK_TAKES,
}


def run_steps(pipeline: Pipeline, records: Iterable[Any]) -> Any:
    """``records`` through every step of ``pipeline`` with fresh state; the sink's records
    as ``(key, value)`` (a pipeline with several sinks: a dict of them per sink topic).
    ``TestRun`` keeps the state across several calls."""
    with TestRun(pipeline) as test:
        return test.send(records)


class _Stage:
    def __init__(self, graph: StageGraph, directory: Path) -> None:
        self.graph = graph
        stores = graph.stores   # as plan.py names them
        self.store = TaskStore(directory / f"stage-{graph.index}", stores) if stores else None
        self.program = Program(graph.program, len(graph.outputs), self.store)


class TestRun:
    """A pipeline's steps, in this process, with state that lasts until ``close()``.

    ``send(records)`` runs records through every stage and returns the sink's records (a
    dict of them per sink topic when the pipeline has several sinks). Records are the
    source's decoded values (what its value format gives: a str for ``utf8``, any JSON
    value for ``json``, ...); for a source with a key format, each record is a ``(key,
    value)`` pair, the key None for a record without one.
    """

    __test__ = False    # not a pytest test class, whatever the name says

    def __init__(self, pipeline: Pipeline) -> None:
        graph = stage_graph(pipeline)
        self.pipeline = pipeline
        # Each source's (or table's) stage, by topic.
        self._source_stages = {g.source.topic: g for g in graph if g.source is not None}
        self._sinks = [s.topic for s in pipeline.sinks]
        self.directory = tempfile.mkdtemp(prefix=f"eos-testrun-{pipeline.name}-")
        self._stages: list[_Stage] = []
        self._finalizer = weakref.finalize(self, _clean_up, self._stages, self.directory)
        for g in graph:
            self._stages.append(_Stage(g, Path(self.directory)))
        self._sends = 0
        self.watermark: int | None = None   # event time: what ``advance`` moved it to
        self.late = 0                       # records in no open window (W6)

    # ------------------------------------------------------------------ the public side

    def send(self, records: Iterable[Any], *, times: Iterable[int] | None = None) -> Any:
        """Run ``records`` through the pipeline, in order; returns the sink's records as
        ``(key, value)`` (several sinks: ``{topic: records}``). State persists to the next
        ``send``; a ``send`` that raises keeps none of its own changes.

        Event time: each record's is its source's ``timestamp(value)``, or the one at its
        place in ``times`` (ms), else 0. A record in no window still open at the run's
        watermark (``advance``) is late: counted in ``late``, in no window."""
        if not self._finalizer.alive:
            raise ConfigError("this TestRun is closed: make a new one")
        if isinstance(records, dict):
            by_topic = dict(records)
            for topic in by_topic:
                if topic not in self._source_stages:
                    raise ConfigError(f"TestRun.send: {topic!r} is not a source or table of "
                                      f"pipeline {self.pipeline.name!r} (it reads "
                                      f"{', '.join(self._source_stages)})")
        elif isinstance(records, (str, bytes, bytearray, tuple)):
            raise ConfigError(f"TestRun.send takes a list of records, not a single "
                              f"{type(records).__name__}: send([record])")
        elif len(self._source_stages) > 1:
            raise ConfigError(f"pipeline {self.pipeline.name!r} reads "
                              f"{', '.join(self._source_stages)}: send records per topic, "
                              f"send({{topic: [records], ...}}), the topics in turn")
        else:
            by_topic = {next(iter(self._source_stages)): records}
        given = iter(times) if times is not None else None
        return self._step(lambda out: self._send(by_topic, given, out))

    def advance(self, watermark: int) -> Any:
        """The watermark moves to ``watermark`` (ms; it never goes back): every window it
        closes emits its final result, as a task's checkpoint would (W5). Returns the
        sink's records, as ``send``."""
        if not self._finalizer.alive:
            raise ConfigError("this TestRun is closed: make a new one")
        if isinstance(watermark, bool) or not isinstance(watermark, int):
            raise ConfigError(f"TestRun.advance: a watermark is whole ms, not {watermark!r}")
        before = self.watermark
        self.watermark = watermark if before is None else max(before, watermark)
        try:
            return self._step(self._fire)
        except BaseException:
            self.watermark = before   # all or nothing, as the state
            raise

    def _send(self, by_topic: dict[str, Any], times: Any,
              out: dict[str, list[tuple[Any, Any]]]) -> None:
        for topic, topic_records in by_topic.items():
            graph = self._source_stages[topic]
            src = graph.source
            assert src is not None
            for record in topic_records:
                key, value = self._decode_input(src, record)
                kb = encode_key(key) if key is not None else None
                t = next(times, 0) if times is not None else 0
                if src.timestamp is not None:
                    t = event_time_of(src.timestamp, src.topic, value)
                self._through(graph.index, key, kb, value, out, t)

    def _fire(self, out: dict[str, list[tuple[Any, Any]]]) -> None:
        for stage in self._stages:   # in stage order: a result fired here may feed a later one
            def emit(kb: bytes, outs: list[list[Any]], t: int, stage: Any = stage) -> None:
                self._route(stage, decode_key(kb), kb, outs, out, t)

            def late(kb: bytes, values: list[Any], t: int) -> None:
                self.late += len(values)

            stage.program.fire(self.watermark, emit, late=late)
            # As a task's checkpoint does (records.fire): late against it from here on,
            # not the results it fired (a later window of the stage takes them).
            stage.program.watermark = self.watermark

    def _step(self, work: Callable[[dict[str, list[tuple[Any, Any]]]], None]) -> Any:
        """``work`` against the state, all or nothing; the sink's records it made."""
        out: dict[str, list[tuple[Any, Any]]] = {topic: [] for topic in self._sinks}
        # What a failed task would restart from: its counts and watermarks too, not only
        # its state (a task restarts from its last commit's watermark).
        late, watermarks = self.late, [stage.program.watermark for stage in self._stages]
        try:
            work(out)
        except BaseException:
            self.late = late
            for stage, watermark in zip(self._stages, watermarks, strict=True):
                if stage.store is not None:
                    stage.store.discard()
                stage.program.late = []
                stage.program.watermark = watermark
            raise
        self._sends += 1
        for stage in self._stages:
            if stage.store is not None:
                stage.store.commit(CheckpointData(self._sends, 0, self._sends))
        return out[self._sinks[0]] if len(self._sinks) == 1 else out

    def close(self) -> None:
        """Close the state stores and remove their temporary directory."""
        self._finalizer()

    def __enter__(self) -> TestRun:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------------------------ the record path

    def _decode_input(self, src: Source, record: Any) -> tuple[Any, Any]:
        """A test record as a task would see it: through the source's formats (a table's
        record: a ``(key, value)`` pair, the value None to delete the key)."""
        if src.table and isinstance(record, tuple) and len(record) == 2 and record[0] is None:
            # as a task says it of a table's record without a key (records._table_record)
            raise ConfigError(f"table {src.topic!r}: a record without a key cannot be a row, "
                              f"not {record!r}")
        if src.table and isinstance(record, tuple) and len(record) == 2 and record[1] is None:
            table_kf = src.key_format or "utf8"   # a table always has a key format
            return _round_trip(table_kf, record[0], lambda why: ConfigError(
                f"record {record!r}: its key cannot be a key of table {src.topic!r} (key "
                f"format {table_kf!r} takes {_TAKES[table_kf]}): {why}")), None
        if src.key_format is None:
            key, value = None, record
        else:
            if not (isinstance(record, tuple) and len(record) == 2):
                raise ConfigError(f"source {src.topic!r} has a key format: send (key, value) "
                                  f"pairs, not {record!r}")
            key, value = record
            kf = src.key_format
            if key is not None:
                key = _round_trip(kf, key, lambda why: ConfigError(
                    f"record {record!r}: its key cannot be a key of source {src.topic!r} (key "
                    f"format {kf!r} takes {_TAKES[kf]}): {why}"))
        value = _round_trip(src.value_format, value, lambda why: ConfigError(
            f"record {record!r} cannot be a record of source {src.topic!r} (value format "
            f"{src.value_format!r} takes {_TAKES[src.value_format]}): {why}"))
        return key, value

    def _through(self, index: int, key: Any, kb: bytes | None, value: Any,
                 out: dict[str, list[tuple[Any, Any]]], t: int) -> None:
        stage = self._stages[index]
        stage.program.event_time = t
        outs = stage.program.run(kb, value)
        if stage.program.late:
            self.late += len(stage.program.late)
            stage.program.late = []
        self._route(stage, key, kb, outs, out, t)

    def _route(self, stage: _Stage, key: Any, kb: bytes | None, outs: list[list[Any]],
               out: dict[str, list[tuple[Any, Any]]], t: int) -> None:
        index = stage.graph.index
        for k, (spec, values) in enumerate(zip(stage.graph.outputs, outs, strict=True)):
            if not values:
                continue
            origin = value_origin(stage.graph.program, k, stage.graph.source)
            if spec.shuffle is not None:
                assert spec.to_stage is not None
                key_fn = spec.shuffle.key_fn
                if key_fn is None:   # a table's rows, into the table store of the stage
                    assert kb is not None
                    self._row(spec.to_stage, index, kb, values[-1])
                    continue
                name = getattr(key_fn, "__name__", None) or "key_by"
                try:  # every key first, as the runtime: a record whose key_by raises sends nothing
                    raw_keys = [key_fn(v) for v in values]
                except Exception as exc:
                    raise function_error(f"key_by({name})", key_fn, exc) from exc
                try:
                    keys = [encode_key(k) for k in raw_keys]
                except UserFunctionError as exc:
                    raise UserFunctionError(f"key_by({name}) returned a bad key: {exc}") from exc
                crossing = crossing_text(key_fn, spec.to_stage)
                for next_kb, v in zip(keys, values, strict=True):
                    carried = _round_trip("msgpack", v, _channel_error(v, origin, crossing))
                    self._through(spec.to_stage, decode_key(next_kb), next_kb, carried, out, t)
            else:
                assert spec.sink is not None
                for v in values:
                    out[spec.sink.topic].append(_sink_record(spec.sink, key, v, origin))


    def _row(self, index: int, table_stage: int, kb: bytes, value: Any) -> None:
        """A table's row for stage ``index``'s table store (None: the key is deleted)."""
        stage = self._stages[index]
        store = next(f.store for f in stage.graph.tables if f.stage == table_stage)
        assert stage.store is not None
        _, put, delete = stage.store.accessors(store)
        if value is None:
            delete(kb)
        else:
            put(kb, _pack(_round_trip("msgpack", value, _channel_error(
                value, f"a row of table stage {table_stage}", crossing_text(None, index)))))


def _channel_error(value: Any, origin: str, crossing: str) -> Callable[[str], Exception]:
    def error(why: str) -> Exception:
        return cannot_cross(value, why, origin, crossing)
    return error


def _sink_record(sink: Sink, key: Any, value: Any, origin: str) -> tuple[Any, Any]:
    """What the sink topic would hold, read back with the sink's formats."""
    if sink.key_format is not None and key is not None:
        fmt = sink.key_format
        key = _round_trip(fmt, key, lambda why: UserFunctionError(
            f"sink {sink.topic!r}: the key {key!r} does not fit the key format {fmt!r}, which "
            f"takes {_TAKES[fmt]}: key the stream by one, or choose another format ({why})"))
    else:
        key = None
    fmt = sink.value_format
    value = _round_trip(fmt, value, lambda why: UserFunctionError(
        f"sink {sink.topic!r}: the value {value!r} ({origin}) does not fit the value format "
        f"{fmt!r}, which takes {_TAKES[fmt]}: make that step return one, or choose another "
        f"format ({why})"))
    return key, value


def _round_trip(fmt: str, obj: Any, error: Callable[[str], Exception]) -> Any:
    encode, decode = FORMATS[fmt]
    try:
        raw = encode(obj)
        if not isinstance(raw, (bytes, bytearray)):
            raise TypeError(f"{type(obj).__name__} is not bytes")
        return decode(bytes(raw))
    except Exception as exc:
        raise error(f"{type(exc).__name__}: {exc}") from exc


def _clean_up(stages: list[_Stage], directory: str) -> None:
    for stage in stages:
        if stage.store is not None:
            stage.store.close()
    shutil.rmtree(directory, ignore_errors=True)
