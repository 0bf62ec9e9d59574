"""The checkpoint tool's file format (Samza's checkpoint-tool.sh, as a properties file).

``show`` renders every task's latest checkpoint; ``parse`` reads the file back, edited,
and checks every line before anything is written:

    # job wordcount (job id 1) on kafka; edit the offsets, then: eos checkpoint write ...
    # task-2 (stage 1, reads wordcount.shuffle-1): version 1099511627775, generation 3
    tasknames.task-0.systems.kafka.streams.lines.partitions.0=1200

One line per source partition, keyed by task, system, stream and partition as Samza's
tool does. The exactly-once details (version, generation) and the positions of
internal channels are comments: shown, never editable (moving a channel task's
position behind its producers' markers would break alignment).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .errors import ConfigError
from .joblog.checkpoints import Checkpoint
from .joblog.layout import layout_checkpoints, layout_guarantee, layout_job_id, layout_stages
from .plan import JobPlan, OutputPlan, StagePlan, TaskPlan
from .protocol.positions import store_positions

__all__ = ["render", "parse", "ParsedCheckpoints", "plan_from_layout"]

_KEY = re.compile(r"^tasknames\.([^.]+)\.systems\.([^.]+)\.streams\.(.+)\.partitions\.(\d+)$")


def _task_name(task_id: int) -> str:
    return f"task-{task_id}"


def render(plan: JobPlan, system: str, checkpoints: Mapping[int, Checkpoint | None],
           job_id: str = "1", *, kept: Mapping[int, Checkpoint | None] | None = None,
           store: str | None = None,
           pending: Mapping[tuple[str, int], str] | None = None) -> str:
    """The properties file of ``checkpoints`` (task id -> its last change-log checkpoint
    or None). ``kept``: the source tasks' positions from the job's checkpoint store
    (``store`` names it), each held to the change log's commit as a task starting holds
    it (P3a), shown instead. ``pending``: the source partitions with a Startpoint waiting
    for the next run (described), whose lines are left empty: a write of the file, edited
    elsewhere, keeps that Startpoint."""
    lines = [f"# job {plan.name} (job id {job_id}) on {system}; edit the offsets of the "
             f"source partitions, then: eos checkpoint write {plan.name} FILE"]
    if store is not None:
        lines.append(f"# the source positions are the job's {store} (at-least-once)")
    for task in plan.tasks:
        stage = plan.stages[task.stage]
        cp = checkpoints.get(task.task_id)
        what = (f"version {cp.version}, generation {cp.generation}"
                if cp is not None and cp.version is not None else
                "no checkpoint yet" if cp is None else "")
        lines.append(f"# {_task_name(task.task_id)} (stage {stage.index}, reads "
                     f"{stage.input_topic}){': ' + what if what else ''}")
        offsets = cp.offsets if cp is not None else {}
        if kept is not None and task.task_id in kept:
            in_store = kept[task.task_id]
            offsets = store_positions(in_store.offsets if in_store is not None else {}, offsets)
        for p in task.partitions:
            offset = offsets.get((stage.input_topic, p))
            key = (f"tasknames.{_task_name(task.task_id)}.systems.{system}.streams."
                   f"{stage.input_topic}.partitions.{p}")
            if not stage.is_source:
                if offset is not None:
                    lines.append(f"#   {key}={offset}")
                continue
            waiting = (pending or {}).get((stage.input_topic, p))
            if waiting is not None:
                lines.append(f"# {stage.input_topic}[{p}]: a Startpoint is pending "
                             f"({waiting}): left empty, a write keeps it; give an offset to "
                             f"replace it (the checkpoint: {'none' if offset is None else offset})")
                offset = None
            lines.append(f"{key}={'' if offset is None else offset}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ParsedCheckpoints:
    """Per source task, the positions the file gives it."""

    offsets: Mapping[int, Mapping[tuple[str, int], int]]


def parse(text: str, plan: JobPlan, system: str,
          bounds: Callable[[str, int], tuple[int, int]]) -> ParsedCheckpoints:
    """Read an edited file; every line is checked (task, system, stream, partition, offset
    within ``bounds(stream, partition)`` = (low, high)) and any error names its line."""
    sources = {_task_name(t.task_id): t for t in plan.tasks if plan.stages[t.stage].is_source}
    out: dict[int, dict[tuple[str, int], int]] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        where = f"line {n}"
        key, sep, value = line.partition("=")
        if not sep:
            raise ConfigError(f"{where}: expected key=offset, got {line!r}")
        m = _KEY.match(key.strip())
        if m is None:
            raise ConfigError(f"{where}: {key.strip()!r} is not tasknames.<task>.systems."
                              f"<system>.streams.<stream>.partitions.<n>")
        task_name, sys_name, stream, part_s = m.groups()
        if task_name not in sources:
            raise ConfigError(f"{where}: {task_name!r} is not a source task of job "
                              f"{plan.name!r} (its source tasks: {', '.join(sources)}); the "
                              f"positions of internal channels cannot be edited")
        if sys_name != system:
            raise ConfigError(f"{where}: system {sys_name!r}, but the job runs on {system!r}")
        task = sources[task_name]
        topic = plan.stages[task.stage].input_topic
        partition = int(part_s)
        if stream != topic or partition not in task.partitions:
            raise ConfigError(f"{where}: {task_name} reads {topic} partitions "
                              f"{list(task.partitions)}, not {stream} partition {partition}")
        value = value.strip()
        if not value:
            continue   # left empty: this partition keeps its position
        try:
            offset = int(value)
        except ValueError:
            raise ConfigError(f"{where}: offset {value!r} is not an integer") from None
        low, high = bounds(topic, partition)
        if not low <= offset <= high:
            raise ConfigError(f"{where}: offset {offset} is outside {topic}[{partition}]'s "
                              f"offsets {low}..{high}")
        slot = out.setdefault(task.task_id, {})
        if (topic, partition) in slot:
            raise ConfigError(f"{where}: {topic}[{partition}] of {task_name} is given twice")
        slot[(topic, partition)] = offset
    if not out:
        raise ConfigError("the file sets no offset: nothing to write")
    return ParsedCheckpoints(out)


def plan_from_layout(job: str, layout: tuple[str, ...]) -> JobPlan:
    """The job's stages and tasks, rebuilt from the layout its last run recorded in the
    control topic (what the tool needs: topics, task ids, which partitions each task
    reads, as ``plan.plan_job`` assigns them: partition p to the stage's task p mod n).
    Steps, formats and resolvers are not known here: the tool does not run the job."""
    stages = []
    tasks = []
    layouts = layout_stages(layout)
    for st in layouts:
        n = len(st.task_ids)
        for i, task_id in enumerate(st.task_ids):
            tasks.append(TaskPlan(task_id, st.index,
                                  tuple(p for p in range(st.input_partitions) if p % n == i)))
        upstream = tuple(t for u in layouts if st.input_topic in {o for o, _ in u.outputs}
                         for t in u.task_ids)
        stages.append(StagePlan(index=st.index, input_topic=st.input_topic,
                                input_partitions=st.input_partitions, is_source=not upstream,
                                source=None, program=(),
                                outputs=tuple(OutputPlan(o, n, None, None) for o, n in st.outputs),
                                task_ids=st.task_ids, upstream_task_ids=upstream))
    if not stages:
        raise ConfigError(f"job {job!r}: its control topic holds no layout to read")
    tasks.sort(key=lambda t: t.task_id)
    return JobPlan(job, layout_guarantee(layout) or "exactly-once", 0.0, 0, tuple(stages),
                   tuple(tasks), f"{job}.changelog", checkpoints=layout_checkpoints(layout),
                   job_id=layout_job_id(layout))
