"""A run's start, as the driver works it out before any task reads: each source
partition's end offset (where ``upcoming`` starts, P5), the Startpoints fanned out to the
tasks of every source, where each source partition starts (for the run's count of input),
the tasks' configs, the job's topics, and the refusals of topics a run cannot take."""

from __future__ import annotations

from typing import Any

from .errors import (
    ConfigError,
    EosError,
    TopicNotFound,
)
from .joblog.changelog import last_commit
from .joblog.checkpoints import checkpoint_topic
from .joblog.control import (
    ControlLog,
    jobs_with_sink,
)
from .joblog.startpoints import fan_out_sources
from .plan import JobPlan
from .runtime.source import position_store, start_positions
from .runtime.task import TaskConfig
from .transport import TopicPartition, TopicSpec, Transport

__all__ = ["fan_out", "source_positions", "run_begin", "task_configs", "run_start_ends",
           "create_job_topics", "check_topics"]


def fan_out(transport: Transport, plan: JobPlan, run: int, *,
             write: bool = True) -> dict[int, dict[int, Any]]:
    """The job's Startpoints for this run, per source task (``joblog/startpoints.py``); a custom
    one must name a resolver the source has, before any task starts."""
    readers = {src.input_topic: {p: t.task_id for t in plan.tasks if t.stage == src.index
                                 for p in t.partitions} for src in plan.source_stages}
    found = fan_out_sources(transport, plan.name, readers, run, write=write)
    for task, by_part in found.items():   # task ids are the job's: each reads one source
        src = plan.stage_of(task)
        resolvers = src.source.startpoint_resolvers if src.source is not None else {}
        for p, sp in by_part.items():
            if sp.kind == "custom" and sp.resolver not in resolvers:
                raise ConfigError(
                    f"the custom startpoint of {src.input_topic}[{p}] names resolver "
                    f"{sp.resolver!r}, which source {src.input_topic!r} does not have (it "
                    f"has: {', '.join(resolvers) or 'none'}): pass it in source(..., "
                    f"startpoint_resolvers=...) or clear the startpoint")
    return found


def source_positions(transport: Transport, plan: JobPlan) -> dict[TopicPartition, int]:
    """Where each source partition's last committed checkpoint resumes (low watermark if
    none)."""
    out: dict[TopicPartition, int] = {}
    for t in plan.tasks:
        if plan.stages[t.stage].is_source:
            out.update(_committed_or_low(transport, plan, t.task_id,
                                         _last_commit(transport, plan, t.task_id)))
    return out


def _committed_or_low(transport: Transport, plan: JobPlan, task: int,
                      commit: Any) -> dict[TopicPartition, int]:
    topic, parts = plan.stage_of(task).input_topic, plan.tasks[task].partitions
    committed = {(i.topic, i.partition): i.offset for i in commit.inputs} if commit else {}
    return {TopicPartition(topic, p): committed.get((topic, p),
                                                    transport.watermarks(
                                                        TopicPartition(topic, p))[0])
            for p in parts}


def _last_commit(transport: Transport, plan: JobPlan, task: int) -> Any:
    try:
        return last_commit(transport, TopicPartition(plan.changelog_topic, task))
    except TopicNotFound:
        return None


def run_begin(transport: Transport, plan: JobPlan, run: int, state_dir: str,
              startpoints: dict[int, dict[int, Any]], ends: dict[str, dict[int, int]],
              ) -> dict[TopicPartition, int]:
    """Where each source partition starts in run ``run``: the tasks' own rule
    (``start_positions``: Startpoints, reset, checkpoint, default, the run's ends), so the
    summary counts the input from there. A custom Startpoint's resolver runs in its task,
    so its partition counts from the checkpoint; a position its task will refuse counts
    from there too (the run fails, naming it)."""
    out: dict[TopicPartition, int] = {}
    store = position_store(transport, plan, state_dir, create=False)
    try:
        for t in plan.tasks:
            stage = plan.stages[t.stage]
            if not stage.is_source:
                continue
            kept = None
            if store is not None:
                store.register(t.task_id)
                cp = store.read_last_checkpoint(t.task_id)
                kept = ({p: off for (topic, p), off in cp.offsets.items()
                         if topic == stage.input_topic} if cp is not None else {})
            given = {p: sp for p, sp in startpoints.get(t.task_id, {}).items()
                     if sp.kind != "custom"}
            commit = _last_commit(transport, plan, t.task_id)   # read once per task
            try:
                starts = start_positions(transport, stage, t.partitions, commit, run, given,
                                         kept, job=plan.name,
                                         run_start_ends=ends.get(stage.input_topic, {}))
            except EosError:
                out.update(_committed_or_low(transport, plan, t.task_id, commit))
                continue
            for p, (offset, _) in starts.items():
                out[TopicPartition(stage.input_topic, p)] = offset
    finally:
        if store is not None:
            store.stop()
    return out


def task_configs(plan: JobPlan, transport: Transport, transport_opts: dict[str, Any],
                 state_dir: str, *, bounded: bool = True,
                 startpoints: dict[int, dict[int, Any]] | None = None,
                 ends: dict[str, dict[int, int]] | None = None, **options: Any) -> list:
    """One ``TaskConfig`` per task. Sources get the end offsets the run started with
    (``ends``, or now), the same in every attempt of the run: where ``upcoming`` starts
    (P5) and, in a bounded run, where the input ends."""
    if ends is None:
        ends = run_start_ends(transport, plan)
    options = {**output_bounds(transport, plan), **options}
    found = startpoints or {}
    configs = []
    for t in plan.tasks:
        stage = plan.stages[t.stage]
        own = ({p: ends[stage.input_topic][p] for p in t.partitions} if stage.is_source
               else {})
        configs.append(TaskConfig(plan=plan, task_id=t.task_id, transport=transport_opts,
                                  state_dir=state_dir, bounded=bounded,
                                  startpoints=dict(found.get(t.task_id, {})),
                                  end_offsets=dict(own) if bounded else {},
                                  run_start_ends=own, **options))
    return configs


def output_bounds(transport: Transport, plan: JobPlan) -> dict[str, int | None]:
    """What the job's output topics take, as ``TaskConfig`` options, each topic described
    once; asked after the topics exist (a topic the job made has the broker's defaults):
    - ``timestamps_ahead_ms``: how far past the wall clock an event time may be, the least
      any sink or the dead-letter topic accepts in a record's timestamp
      (``TopicSpec.ahead_ms``), for a job whose sources give event times (None: no bound);
    - ``letter_max_bytes``: the largest record the dead-letter topic takes, which a letter
      must fit as well as the producer's limit (None: none known)."""
    timed = any(st.source is not None and st.source.timestamp is not None
                for st in plan.source_stages)
    topics = ([s.topic for s in plan.sinks] if timed else []) + (
        [plan.dead_letter_topic] if plan.dead_letter_topic else [])
    specs = {}
    for topic in dict.fromkeys(topics):
        try:
            specs[topic] = transport.describe(topic)
        except TopicNotFound:
            continue
    dead = specs.get(plan.dead_letter_topic) if plan.dead_letter_topic else None
    return {"timestamps_ahead_ms": min((s.ahead_ms for s in specs.values()
                                        if s.ahead_ms is not None), default=None)
            if timed else None,
            "letter_max_bytes": dead.max_bytes if dead is not None else None}


def run_start_ends(transport: Transport, plan: JobPlan) -> dict[str, dict[int, int]]:
    """Per source topic and partition, its end offset now (read_committed: the last stable
    offset)."""
    return {src.input_topic: {p: transport.watermarks(TopicPartition(src.input_topic, p))[1]
                              for p in range(src.input_partitions)}
            for src in plan.source_stages}


def create_job_topics(transport: Transport, plan: JobPlan) -> None:
    specs = plan.topics_to_create()
    if plan.checkpoints == "kafka":   # before the tasks, which would race to create it
        specs.append(TopicSpec(checkpoint_topic(plan.name, plan.job_id), len(plan.tasks),
                               compacted=True, keep_forever=True))
    for sink in plan.sinks:
        try:
            transport.describe(sink.topic)
        except TopicNotFound:
            specs.append(TopicSpec(sink.topic, sink.partitions))
    transport.create_topics(specs)


def check_topics(transport: Transport, plan: JobPlan) -> None:
    """Before a run is recorded, on a log without transactions (the local log):
    ``ConfigError`` for a source that is the sink of an exactly-once job: its uncommitted
    output (of crashed or fenced attempts) lies in the topic beside the committed, and
    only that job's commit records tell them apart, which a source does not read. (A sink
    that is the job's own source or table is refused by plan_job.)"""
    if transport.supports_transactions:
        return
    for source in plan.source_topics:
        _check_source_not_uncommitted(transport, plan, source)


def _check_source_not_uncommitted(transport: Transport, plan: JobPlan, source: str) -> None:
    for job in jobs_with_sink(transport, source):
        if job != plan.name and ControlLog(transport, job).guarantee() == "exactly-once":
            raise ConfigError(
                f"source {source!r} is the sink of exactly-once job {job!r}, and the local "
                f"log has no transactions: this job would read {job}'s uncommitted output "
                f"too (of crashed attempts), which {job}'s committed readers never see; "
                f"run both jobs on Kafka (--bootstrap-servers), whose read_committed "
                f"consumers read only committed output")

