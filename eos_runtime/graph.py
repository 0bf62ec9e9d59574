"""A pipeline's graph cut into stages: what each stage's tasks run, and where its output goes.

A stage starts at a root, the source or a ``key_by`` (whose channels it reads), and runs
every node reachable from it without crossing another ``key_by``: steps, merges, and
its outputs, each a ``key_by`` into another stage's channels or a sink. A branch is a
node with several next nodes; a merge, a node with several inputs. After a merge of
streams of different stages, the nodes up to the next ``key_by`` or sink are in each of
those stages' programs (the API refuses a stateful one there, ``api.Stream._add``), and
a ``key_by`` there has every one of those stages as its upstream: their tasks are all
producers of its channels, which SEP-10's alignment handles as it handles one stage's.

Stages are numbered in the order their roots were written (the source is stage 0), which
is a topological order; a chain's stages, programs and store names are what they were
before graphs. Nothing here does I/O (``plan.py`` adds topics, partitions and tasks).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .api import Lookup, Pipeline, Shuffle, Sink, Source, Step, Table, _Node
from .api_windows import JoinOp, WindowOp
from .errors import ConfigError

__all__ = ["Op", "StageGraph", "StageOutput", "TableFeed", "is_chain", "stage_graph", "steps_of",
           "stores_of", "has_timers", "TIMERS"]

#: The store of a stage's event-time timers (``runtime/window_ops.py``), beside its others.
TIMERS = "timers"


@dataclass(frozen=True)
class Op:
    """One node of a stage's program. ``step`` None: it passes values on (the stage's
    entry, a merge), or, with ``lookup``, adds the row of table store ``store``, or, with
    ``window``, aggregates into windows kept in ``store``."""

    step: Step | None
    next: tuple[int, ...]       # program indices fed by this node's values
    outputs: tuple[int, ...]    # stage output indices fed by this node's values
    store: str | None = None    # a stateful step's store, or a lookup's table store
    lookup: Lookup | None = None
    window: WindowOp | JoinOp | None = None

    @property
    def stateful(self) -> bool:
        return self.store is not None and self.lookup is None and self.window is None


@dataclass(frozen=True)
class TableFeed:
    """Stage ``stage`` (a table's) writes the table's rows into table store ``store`` of
    the stage that looks them up, through that stage's channels."""

    stage: int
    store: str


@dataclass(frozen=True)
class StageOutput:
    """A ``key_by`` into stage ``to_stage``'s channels, or a sink."""

    shuffle: Shuffle | None
    sink: Sink | None
    to_stage: int | None


@dataclass(frozen=True)
class StageGraph:
    index: int
    source: Source | None          # the source a source stage reads
    shuffle_in: Shuffle | None     # the key_by whose channels a channel stage reads
    program: tuple[Op, ...]        # program[0] is the entry; each op feeds later ones only
    outputs: tuple[StageOutput, ...]
    upstream: tuple[int, ...]      # stages whose tasks write this stage's channels
    tables: tuple[TableFeed, ...] = ()   # which of them are tables, and into which store

    @property
    def steps(self) -> tuple[Step, ...]:
        return steps_of(self.program)

    @property
    def stores(self) -> tuple[str, ...]:
        return stores_of(self.program, (t.store for t in self.tables))

    @property
    def is_chain(self) -> bool:
        return is_chain(self.program, len(self.outputs))


def has_timers(op: Op) -> bool:
    """A window, a join, or a step with ``on_timer``: it keeps event-time timers."""
    return op.window is not None or (op.step is not None and op.step.on_timer is not None)


def steps_of(program: tuple[Op, ...]) -> tuple[Step, ...]:
    return tuple(op.step for op in program if op.step is not None)


def stores_of(program: tuple[Op, ...], tables: Iterable[str] = ()) -> tuple[str, ...]:
    """The stage's stores: its stateful steps', its windows' and its table stores, and
    the timers' store if it has windows."""
    timers = [TIMERS] if any(has_timers(op) for op in program) else []
    return tuple(dict.fromkeys([*(op.store for op in program if op.store is not None),
                                *tables, *timers]))


def is_chain(program: tuple[Op, ...], outputs: int) -> bool:
    """One path from the entry through steps to one output: the record path's fast path."""
    last = len(program) - 1
    return outputs == 1 and all(
        op.next == (() if i == last else (i + 1,)) and len(op.outputs) == (i == last)
        and op.lookup is None and not has_timers(op) for i, op in enumerate(program))


def stage_graph(pipeline: Pipeline) -> tuple[StageGraph, ...]:
    """The stages of ``pipeline``; a ``ConfigError`` names what cannot run."""
    nodes = pipeline.nodes
    if not any(n.kind == "source" for n in nodes):
        raise ConfigError(f"pipeline {pipeline.name!r} has no source: call pipeline.source(...)")
    if not any(n.kind == "sink" for n in nodes):
        raise ConfigError(f"pipeline {pipeline.name!r} has no sink: end it with .sink(topic)")
    lookups = [n for n in nodes if n.kind == "lookup"]
    for n in nodes:
        if n.kind == "table":
            if not any(lk.payload.table == n.payload for lk in lookups):
                raise ConfigError(f"pipeline {pipeline.name!r}: table {n.payload.topic!r} is "
                                  f"looked up by no stream: stream.lookup(table, on=...), or "
                                  f"drop it")
        elif not n.nexts and n.kind != "sink":
            where = f"from {n.describe()}" if n.kind == "source" else f"after {n.describe()}"
            raise ConfigError(f"pipeline {pipeline.name!r}: the stream {where} goes nowhere: "
                              f"end it with .sink(topic), or drop it")
    roots = [n for n in nodes if n.kind in ("source", "table", "key_by")]
    stage_of = {r.id: i for i, r in enumerate(roots)}
    table_stage = {r.payload: stage_of[r.id] for r in roots if r.kind == "table"}
    stages: list[StageGraph] = []
    upstream: dict[int, list[int]] = {i: [] for i in range(len(roots))}
    bodies = [_body(r) for r in roots]
    # Per stage, the tables it looks up (table stage, store), in the order first looked up.
    feeds: dict[int, dict[int, str]] = {i: {} for i in range(len(roots))}
    for i, body in enumerate(bodies):
        for n in body:
            for nxt in n.nexts:
                if nxt.kind == "key_by" and i not in upstream[stage_of[nxt.id]]:
                    upstream[stage_of[nxt.id]].append(i)
            if n.kind == "lookup":
                t = table_stage[n.payload.table]
                feeds[i].setdefault(t, f"table{len(feeds[i])}")
                if t not in upstream[i]:
                    upstream[i].append(t)
    for i, (root, body) in enumerate(zip(roots, bodies, strict=True)):
        index = {n.id: k for k, n in enumerate(body)}
        outs: list[_Node] = []
        for n in body:
            outs += [x for x in n.nexts if x.kind in ("key_by", "sink") and x not in outs]
        out_index = {n.id: k for k, n in enumerate(outs)}
        outputs = [StageOutput(o.payload if o.kind == "key_by" else None,
                               o.payload if o.kind == "sink" else None,
                               stage_of[o.id] if o.kind == "key_by" else None) for o in outs]
        if root.kind == "table":   # into the channels of every stage that looks it up
            outputs = [StageOutput(Shuffle(None, None, None), None, s)
                       for s in range(len(roots)) if i in feeds[s]]
        program = []
        steps = windows = 0
        for n in body:
            step = n.payload if n.kind == "step" else None
            store = None
            if step is not None:
                store = f"step{steps}" if step.stateful else None
                steps += 1
            lookup = n.payload if n.kind == "lookup" else None
            if lookup is not None:
                store = feeds[i][table_stage[lookup.table]]
            window = n.payload if n.kind == "window" else None
            if window is not None:
                store = f"window{windows}"
                windows += 1
            program.append(Op(step, tuple(index[x.id] for x in n.nexts if x.id in index),
                              tuple(out_index[x.id] for x in n.nexts if x.id in out_index),
                              store, lookup, window))
        if root.kind == "table":
            program = [Op(None, (), tuple(range(len(outputs))))]
        stages.append(StageGraph(
            index=i, source=_source_of(root), shuffle_in=root.payload if root.kind == "key_by"
            else None, program=tuple(program), outputs=tuple(outputs),
            upstream=tuple(sorted(upstream[i])),
            tables=tuple(TableFeed(t, store) for t, store in feeds[i].items())))
    return tuple(stages)


def _source_of(root: _Node) -> Source | None:
    """What a source stage reads: a source, or a table's topic as a source of rows."""
    if root.kind == "source":
        source: Source = root.payload
        return source
    if root.kind == "table":
        table: Table = root.payload
        return Source(table.topic, table.key_format, table.value_format, table.parallelism,
                      table=True)
    return None


def _body(root: _Node) -> list[_Node]:
    """The root and every step or merge reachable from it without crossing a key_by or a
    sink, in the order they were written (a topological order)."""
    seen = {root.id: root}
    todo = [root]
    while todo:
        for nxt in todo.pop().nexts:
            if nxt.kind in ("step", "merge", "lookup", "window") and nxt.id not in seen:
                seen[nxt.id] = nxt
                todo.append(nxt)
    return [seen[k] for k in sorted(seen)]
