"""From a ``Pipeline`` to a job plan: stages, tasks, channels, topics.

A stage runs from a source or a shuffle to the next shuffle or the sink. Its tasks each
own some of the stage's input partitions; task ids are global across the job and serve
as SEP-10 producer ids. Every task of a stage may write every channel of the next stage
(SEP-10's shared channels), so a downstream task's producer set is the whole upstream
stage.

Topics a job creates (``<job>`` is the pipeline name):

    <job>.shuffle-<stage>   one per shuffle, partitions = the next stage's channel count
    <job>.changelog         one partition per task: its state changes, commits and aborts

Planning checks everything it can before anything starts: the source topic exists, the
sink topic exists or can be created, parallelism fits the input and the engine's slots.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .api import Pipeline, Shuffle, Sink, Source, Step
from .errors import ConfigError, TopicNotFound
from .transport import TopicSpec, Transport

__all__ = ["StagePlan", "TaskPlan", "JobPlan", "plan_job"]


@dataclass(frozen=True)
class StagePlan:
    index: int
    input_topic: str
    input_partitions: int
    is_source: bool
    source: Source | None          # formats, for the source stage
    steps: tuple[Step, ...]
    shuffle: Shuffle | None        # where the stage's output goes: a shuffle...
    output_topic: str              # ...its topic, or the sink topic
    output_partitions: int
    sink: Sink | None
    task_ids: tuple[int, ...]
    upstream_task_ids: tuple[int, ...]   # producers of this stage's channels (empty for a source)

    @property
    def is_sink(self) -> bool:
        return self.sink is not None

    @property
    def stores(self) -> tuple[str, ...]:
        return tuple(f"step{i}" for i, s in enumerate(self.steps) if s.stateful)


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

    def topics_to_create(self) -> list[TopicSpec]:
        specs = [TopicSpec(self.changelog_topic, len(self.tasks), keep_forever=True)]
        for st in self.stages:
            if st.shuffle is not None:
                specs.append(TopicSpec(st.output_topic, st.output_partitions))
        if self.dead_letter_topic is not None:
            specs.append(TopicSpec(self.dead_letter_topic, self.dead_letter_partitions))
        return specs

    def stage_of(self, task_id: int) -> StagePlan:
        return self.stages[self.tasks[task_id].stage]


def plan_job(pipeline: Pipeline, transport: Transport, *, guarantee: str | None = None,
             commit_interval: float | None = None, commit_every: int | None = None,
             parallelism: int | None = None, sink_partitions: int | None = None,
             dead_letters: bool | str | None = None, checkpoints: str | None = None,
             reset_offset: bool | None = None, offset_default: str | None = None,
             job_id: str | None = None) -> JobPlan:
    """Plan ``pipeline`` against the topics ``transport`` holds; options override the
    pipeline's own settings. Raises ``ConfigError`` saying what to change."""
    segments = pipeline.segments
    if not segments:
        raise ConfigError(f"pipeline {pipeline.name!r} has no source: call pipeline.source(...)")
    if not isinstance(segments[-1].end, Sink):
        raise ConfigError(f"pipeline {pipeline.name!r} has no sink: end it with .sink(topic)")
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

    source = segments[0].start
    assert isinstance(source, Source)
    if offset_default is not None and offset_default not in ("oldest", "upcoming", "none"):
        raise ConfigError(f"offset_default {offset_default!r}: use oldest, upcoming or none")
    if reset_offset is not None or offset_default is not None:
        # Run options beat the source's own settings, for this run only.
        source = replace(source, reset_offset=source.reset_offset if reset_offset is None
                         else reset_offset,
                         offset_default=offset_default or source.offset_default)
    try:
        src_spec = transport.describe(source.topic)
    except TopicNotFound:
        raise ConfigError(f"source topic {source.topic!r} does not exist on the {transport.name} "
                          f"transport: create it (eos produce creates it) "
                          f"or fix the name") from None
    sink = segments[-1].end
    try:
        sink_parts = transport.describe(sink.topic).partitions
    except TopicNotFound:
        sink_parts = sink_partitions or 1
    if sink_partitions is not None and sink_partitions != sink_parts:
        raise ConfigError(f"sink topic {sink.topic!r} exists with {sink_parts} partitions; "
                          f"--sink-partitions {sink_partitions} contradicts it: drop the "
                          f"option or give the sink another topic")
    stages: list[StagePlan] = []
    tasks: list[TaskPlan] = []
    input_topic, input_parts = source.topic, src_spec.partitions
    upstream: tuple[int, ...] = ()
    for index, seg in enumerate(segments):
        if index == 0:
            par = source.parallelism or parallelism or input_parts
            if par > input_parts:
                raise ConfigError(f"source {source.topic!r} has {input_parts} partitions; a source "
                                  f"stage cannot run {par} tasks: lower its parallelism")
        else:
            shuffle = seg.start
            assert isinstance(shuffle, Shuffle)
            par = shuffle.parallelism or default_par
            if par > input_parts:
                raise ConfigError(f"stage {index} has {input_parts} channels but parallelism "
                                  f"{par}: give key_by(partitions=>= {par})")
        ids = tuple(range(len(tasks), len(tasks) + par))
        for i, task_id in enumerate(ids):
            channels = tuple(p for p in range(input_parts) if p % par == i)
            tasks.append(TaskPlan(task_id, index, channels))
        end = seg.end
        if isinstance(end, Shuffle):
            nxt_par = end.parallelism or default_par
            out_parts = end.partitions or nxt_par
            out_topic = f"{pipeline.name}.shuffle-{index + 1}"
        else:
            assert isinstance(end, Sink)  # the last segment's end, checked above
            out_parts = sink_parts
            out_topic = end.topic
        stages.append(StagePlan(
            index=index, input_topic=input_topic, input_partitions=input_parts,
            is_source=index == 0, source=source if index == 0 else None,
            steps=tuple(seg.steps), shuffle=end if isinstance(end, Shuffle) else None,
            output_topic=out_topic, output_partitions=out_parts,
            sink=end if isinstance(end, Sink) else None, task_ids=ids,
            upstream_task_ids=upstream))
        upstream = ids
        input_topic, input_parts = out_topic, out_parts
    dead_topic = pipeline.dead_letter_topic if dead_letters is None else (
        f"{pipeline.name}.dead-letters" if dead_letters is True else dead_letters or None)
    dead_parts = 1
    if dead_topic is not None:
        if dead_topic in {s.output_topic for s in stages} | {source.topic}:
            raise ConfigError(f"dead-letter topic {dead_topic!r} is also an input or output of "
                              f"the job: give it a topic of its own")
        try:
            dead_parts = transport.describe(dead_topic).partitions
        except TopicNotFound:
            pass
    return JobPlan(pipeline.name, guarantee,
                   commit_interval if commit_interval is not None else pipeline.commit_interval,
                   commit_every if commit_every is not None else pipeline.commit_every,
                   tuple(stages), tuple(tasks), f"{pipeline.name}.changelog",
                   dead_topic, dead_parts, checkpoints,
                   job_id if job_id is not None else getattr(pipeline, "job_id", "1"),
                   tuple(pipeline.listeners))


def describe_plan(plan: JobPlan) -> list[dict[str, Any]]:
    """A plain description of the plan (for --json output and logs)."""
    return [{"stage": s.index, "input": s.input_topic, "tasks": list(s.task_ids),
             "steps": [f"{st.kind}{'(stateful)' if st.stateful else ''}:{st.name}"
                       for st in s.steps],
             "output": s.output_topic, "output_partitions": s.output_partitions}
            for s in plan.stages]
