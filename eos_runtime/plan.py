"""From a ``Pipeline`` to a job plan: stages, tasks, channels, topics.

A stage runs from a source or a shuffle (``key_by``) to the next shuffles and sinks: its
program (``graph.py``) may branch and merge, and write several outputs. Its tasks each
own some of the stage's input partitions; task ids are global across the job and serve
as SEP-10 producer ids. Every task of a stage may write every channel of a next stage
(SEP-10's shared channels), so a downstream task's producer set is every task of every
stage that writes its channels (one stage in a chain; several after a merge).

Topics a job creates (``<job>`` is the pipeline name):

    <job>.shuffle-<stage>   one per shuffle, partitions = the next stage's channel count
    <job>.changelog         one partition per task: its state changes, commits and aborts

Planning checks everything it can before anything starts: the source topic exists, the
sink topic exists or can be created and is none the job reads, parallelism fits the input
and the engine's slots.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from typing import Any

from .api import Pipeline, Shuffle, Sink, Source, Step
from .errors import ConfigError, TopicNotFound
from .graph import Op, StageOutput, has_timers, is_chain, stage_graph, steps_of, stores_of
from .topic_rules import check_inputs_not_kept, check_outputs_not_kept, check_sinks_not_read
from .transport import TopicSpec, Transport

__all__ = ["OutputPlan", "StagePlan", "TaskPlan", "JobPlan", "plan_job"]


@dataclass(frozen=True)
class OutputPlan:
    """Where some of a stage's output goes: a shuffle's channels, or a sink topic."""

    topic: str
    partitions: int
    shuffle: Shuffle | None
    sink: Sink | None


@dataclass(frozen=True)
class StagePlan:
    index: int
    input_topic: str
    input_partitions: int
    is_source: bool
    source: Source | None          # formats, for the source stage
    program: tuple[Op, ...]        # what the stage runs on each record (graph.py)
    outputs: tuple[OutputPlan, ...]
    task_ids: tuple[int, ...]
    upstream_task_ids: tuple[int, ...]   # producers of this stage's channels (empty for a source)
    # producers of table rows among them, and the table store each one's rows go to
    table_rows: tuple[tuple[int, str], ...] = ()

    @property
    def steps(self) -> tuple[Step, ...]:
        return steps_of(self.program)

    @property
    def stores(self) -> tuple[str, ...]:
        return stores_of(self.program, (store for _, store in self.table_rows))

    @property
    def is_chain(self) -> bool:
        """One path from the entry to one output (the record path's fast path)."""
        return is_chain(self.program, len(self.outputs))

    @property
    def sinks(self) -> tuple[OutputPlan, ...]:
        return tuple(o for o in self.outputs if o.sink is not None)

    @property
    def shuffles(self) -> tuple[OutputPlan, ...]:
        return tuple(o for o in self.outputs if o.shuffle is not None)

    @property
    def is_sink(self) -> bool:
        return bool(self.sinks)

    @property
    def sink(self) -> Sink | None:
        """The stage's one sink (None: none, or several: ``sinks``)."""
        sinks = self.sinks
        return sinks[0].sink if len(sinks) == 1 else None

    @property
    def shuffle(self) -> Shuffle | None:
        """The stage's one shuffle (None: none, or several: ``shuffles``)."""
        shuffles = self.shuffles
        return shuffles[0].shuffle if len(shuffles) == 1 else None

    @property
    def output_topic(self) -> str:
        """The first output's topic (a chain's stage has one)."""
        return self.outputs[0].topic

    @property
    def output_partitions(self) -> int:
        return self.outputs[0].partitions


@dataclass(frozen=True)
class TaskPlan:
    task_id: int
    stage: int
    partitions: tuple[int, ...]    # of the stage's input topic


@dataclass(frozen=True)
class JobPlan:
    name: str
    guarantee: str
    commit_interval: float
    commit_every: int
    stages: tuple[StagePlan, ...]
    tasks: tuple[TaskPlan, ...]
    changelog_topic: str
    dead_letter_topic: str | None = None   # None: a raising function stops its task
    dead_letter_partitions: int = 1
    checkpoints: str = "changelog"         # where source positions are kept (joblog/checkpoints.py)
    job_id: str = "1"                      # with the name, the job (Samza's job.id)
    # checkpoint listeners (joblog/listeners.py): each task gets its own copy
    listeners: tuple[Any, ...] = field(default=(), compare=False)

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == "exactly-once"

    @property
    def event_time(self) -> bool:
        """Whether the job keeps watermarks: some stage has a window (W2-W4; a job
        without pays nothing for them)."""
        return any(has_timers(op) for st in self.stages for op in st.program)

    def topics_to_create(self) -> list[TopicSpec]:
        specs = [TopicSpec(self.changelog_topic, len(self.tasks), keep_forever=True)]
        channels = {o.topic: o.partitions for st in self.stages for o in st.shuffles}
        specs += [TopicSpec(topic, n) for topic, n in channels.items()]
        if self.dead_letter_topic is not None:
            specs.append(TopicSpec(self.dead_letter_topic, self.dead_letter_partitions))
        return specs

    def stage_of(self, task_id: int) -> StagePlan:
        return self.stages[self.tasks[task_id].stage]

    @property
    def source_stages(self) -> tuple[StagePlan, ...]:
        return tuple(st for st in self.stages if st.is_source)

    @property
    def source_topics(self) -> tuple[str, ...]:
        return tuple(st.input_topic for st in self.source_stages)

    @property
    def sinks(self) -> tuple[OutputPlan, ...]:
        """Every sink of the job, once each (several stages may write one after a merge)."""
        seen: dict[str, OutputPlan] = {}
        for st in self.stages:
            for o in st.sinks:
                seen.setdefault(o.topic, o)
        return tuple(seen.values())

    @property
    def channel_topics(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(o.topic for st in self.stages for o in st.shuffles))


#: A compacted topic keeps the last record of each key, and Kafka refuses one without a
#: key: every commit holding such a record would fail, on every attempt.
_COMPACTED = ("{what} is compacted, and {records}: Kafka refuses a record without a key "
              "on a compacted topic, so every commit would fail; give it a topic with "
              "cleanup.policy=delete")


def plan_job(pipeline: Pipeline, transport: Transport, *, guarantee: str | None = None,
             commit_interval: float | None = None, commit_every: int | None = None,
             parallelism: int | None = None, sink_partitions: int | None = None,
             dead_letters: bool | str | None = None, checkpoints: str | None = None,
             reset_offset: bool | None = None, offset_default: str | None = None,
             job_id: str | None = None) -> JobPlan:
    """Plan ``pipeline`` against the topics ``transport`` holds; options override the
    pipeline's own settings. Raises ``ConfigError`` saying what to change."""
    check_sinks_not_read([s.topic for s in pipeline.sources], [t.topic for t in pipeline.tables],
                         [s.topic for s in pipeline.sinks])
    dead_topic = pipeline.dead_letter_topic if dead_letters is None else (
        f"{pipeline.name}.dead-letters" if dead_letters is True else dead_letters or None)
    check_outputs_not_kept(pipeline.name, [s.topic for s in pipeline.sinks], dead_topic,
                           [*(s.topic for s in pipeline.sources),
                            *(t.topic for t in pipeline.tables)])
    check_inputs_not_kept(pipeline.name, [s.topic for s in pipeline.sources],
                          [t.topic for t in pipeline.tables])
    graph = stage_graph(pipeline)
    guarantee = guarantee or pipeline.processing_guarantee
    if guarantee not in ("exactly-once", "at-least-once"):
        raise ConfigError(f"guarantee {guarantee!r}: use exactly-once or at-least-once")
    default_par = parallelism or pipeline.parallelism
    checkpoints = checkpoints or pipeline.checkpoints
    if job_id is not None and (not job_id or not job_id.replace("-", "").replace("_", "")
                               .replace(".", "").isalnum()):
        raise ConfigError(f"job id {job_id!r}: use letters, digits, '.', - and _")
    if checkpoints not in ("changelog", "kafka", "filesystem"):
        raise ConfigError(f"checkpoints {checkpoints!r}: use changelog, kafka or filesystem")
    if checkpoints != "changelog" and guarantee == "exactly-once":
        raise ConfigError(f"checkpoints {checkpoints!r} is for at-least-once jobs: an "
                          f"exactly-once job's checkpoint is its change-log commit, atomic "
                          f"with its state and output; use --guarantee at-least-once or the "
                          f"change log")

    if offset_default is not None and offset_default not in ("oldest", "upcoming", "none"):
        raise ConfigError(f"offset_default {offset_default!r}: use oldest, upcoming or none")
    # Run options beat each source's own settings, for this run only.
    sources: dict[int, Source] = {}
    source_parts: dict[int, int] = {}
    for g in graph:
        if g.source is None:
            continue
        source = g.source
        if reset_offset is not None or offset_default is not None:
            source = replace(source, reset_offset=source.reset_offset if reset_offset is None
                             else reset_offset,
                             offset_default=offset_default or source.offset_default)
        try:
            source_parts[g.index] = transport.describe(source.topic).partitions
        except TopicNotFound:
            close = difflib.get_close_matches(source.topic, transport.list_topics(), n=1)
            raise ConfigError(f"{'table' if source.table else 'source'} topic "
                              f"{source.topic!r} does not exist on {transport.location}"
                              f"{f' (did you mean {close[0]!r}?)' if close else ''}: create "
                              f"it (eos produce creates it) or fix the name") from None
        sources[g.index] = source
    sink_parts: dict[str, int] = {}
    for sink in pipeline.sinks:
        try:
            spec = transport.describe(sink.topic)
        except TopicNotFound:
            sink_parts[sink.topic] = sink_partitions or 1
        else:
            sink_parts[sink.topic] = spec.partitions
            if spec.compacted and sink.key_format is None:
                raise ConfigError(_COMPACTED.format(what=f"sink topic {sink.topic!r}",
                                                    records="its records have no key "
                                                    "(the sink has no key format)"))
        if sink_partitions is not None and sink_partitions != sink_parts[sink.topic]:
            raise ConfigError(f"sink topic {sink.topic!r} exists with {sink_parts[sink.topic]} "
                              f"partitions; --sink-partitions {sink_partitions} contradicts "
                              f"it: drop the option or give the sink another topic")
    # Each stage's task count and channel count (its input's partitions).
    pars: list[int] = []
    in_parts: list[int] = []
    for g in graph:
        if g.source is not None:
            source, parts = sources[g.index], source_parts[g.index]
            # A run's parallelism is at most each source's and table's partitions (a graph
            # of a 4-partition stream and a 1-partition table runs at 4); a source's own
            # parallelism asks for exactly that many tasks.
            par = source.parallelism or min(parallelism or parts, parts)
            if par > parts:
                kind = "table" if source.table else "source"
                raise ConfigError(f"{kind} {source.topic!r} has {parts} partitions; its "
                                  f"{kind}(parallelism={par}) asks for more tasks than that: "
                                  f"lower it")
        else:
            shuffle = g.shuffle_in
            assert shuffle is not None
            par = shuffle.parallelism or default_par
            parts = shuffle.partitions or par
            if par > parts:
                raise ConfigError(f"stage {g.index} has {parts} channels but parallelism "
                                  f"{par}: give key_by(partitions=>= {par})")
        pars.append(par)
        in_parts.append(parts)
    stages: list[StagePlan] = []
    tasks: list[TaskPlan] = []
    ids_of: list[tuple[int, ...]] = []
    for g, par, parts in zip(graph, pars, in_parts, strict=True):
        ids = tuple(range(len(tasks), len(tasks) + par))
        ids_of.append(ids)
        for i, task_id in enumerate(ids):
            tasks.append(TaskPlan(task_id, g.index, tuple(p for p in range(parts)
                                                          if p % par == i)))
    for g, parts, ids in zip(graph, in_parts, ids_of, strict=True):
        outputs = tuple(_output(pipeline.name, o, in_parts, sink_parts) for o in g.outputs)
        src = sources.get(g.index)
        stages.append(StagePlan(
            index=g.index,
            input_topic=src.topic if src is not None else f"{pipeline.name}.shuffle-{g.index}",
            input_partitions=parts, is_source=src is not None, source=src, program=g.program,
            outputs=outputs, task_ids=ids,
            upstream_task_ids=tuple(t for u in g.upstream for t in ids_of[u]),
            table_rows=tuple((t, feed.store) for feed in g.tables for t in ids_of[feed.stage])))
    dead_parts = 1
    if dead_topic is not None:
        try:
            dead = transport.describe(dead_topic)
        except TopicNotFound:
            pass
        else:
            dead_parts = dead.partitions
            if dead.compacted:
                raise ConfigError(_COMPACTED.format(what=f"dead-letter topic {dead_topic!r}",
                                                    records="a dead letter has no key"))
    return JobPlan(pipeline.name, guarantee,
                   commit_interval if commit_interval is not None else pipeline.commit_interval,
                   commit_every if commit_every is not None else pipeline.commit_every,
                   tuple(stages), tuple(tasks), f"{pipeline.name}.changelog",
                   dead_topic, dead_parts, checkpoints,
                   job_id if job_id is not None else getattr(pipeline, "job_id", "1"),
                   tuple(pipeline.listeners))


def _output(job: str, out: StageOutput, in_parts: list[int],
            sink_parts: dict[str, int]) -> OutputPlan:
    if out.to_stage is not None:
        return OutputPlan(f"{job}.shuffle-{out.to_stage}", in_parts[out.to_stage],
                          out.shuffle, None)
    assert out.sink is not None
    return OutputPlan(out.sink.topic, sink_parts[out.sink.topic], None, out.sink)


def describe_plan(plan: JobPlan) -> list[dict[str, Any]]:
    """A plain description of the plan (for --json output and logs)."""
    return [{"stage": s.index, "input": s.input_topic, "tasks": list(s.task_ids),
             "steps": [f"{st.kind}{'(stateful)' if st.stateful else ''}:{st.name}"
                       for st in s.steps]
             + [f"window:{op.window.name}.{getattr(op.window, 'emit', 'pairs')}"
                for op in s.program if op.window is not None],
             "output": s.output_topic, "output_partitions": s.output_partitions,
             "outputs": [{"topic": o.topic, "partitions": o.partitions,
                          "kind": "sink" if o.sink is not None else "channel"}
                         for o in s.outputs]}
            for s in plan.stages]
