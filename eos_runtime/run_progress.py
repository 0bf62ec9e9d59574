"""The driver's figures of a run, from the counters its tasks write beside their pid files
(``runtime/progress.py``): each stage's totals, the records the sources read and
committed, the records committed to the sinks. Each counts what it says: positions for
the sources (a restarted task reads again from its last checkpoint, and "read" says so),
records for the sinks (a transaction's commit marker takes an offset but is no record).
Pure but for the files; ``runner.PipelineRun.progress`` shows them, ``RunSummary`` keeps
the last ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .plan import JobPlan
from .runtime.progress import read_task_progress
from .transport import TopicPartition

__all__ = ["STAGE_COUNTERS", "clear_task_progress", "read_task_counters", "sink_records",
           "source_figures", "stage_totals"]

#: Task counters a stage's figures add up (``RunSummary.stages``, ``PipelineRun.progress``).
STAGE_COUNTERS = ("processed", "emitted", "checkpoints", "rewinds", "buffered", "overflowed",
                  "dead_letters", "sink_records")


def stage_totals(stages: list[dict[str, Any]],
                 tasks: Mapping[int, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per stage of ``describe_plan``: its topics, its task count, how many of its tasks
    reported (``tasks`` holds counters by task id), the sums of ``STAGE_COUNTERS`` and the
    largest early-arrival buffer (``max_buffer_bytes``)."""
    out = []
    for st in stages:
        got = [tasks[i] for i in st["tasks"] if i in tasks]
        outputs = [o["topic"] for o in st.get("outputs", [])] or [st["output"]]
        row: dict[str, Any] = {"stage": st["stage"], "input": st["input"],
                               "output": ", ".join(outputs), "tasks": len(st["tasks"]),
                               "reporting": len(got)}
        for key in STAGE_COUNTERS:
            row[key] = sum(int(t.get(key, 0) or 0) for t in got)
        row["max_buffer_bytes"] = max((int(t.get("max_buffer_bytes", 0) or 0) for t in got),
                                      default=0)
        out.append(row)
    return out


def source_figures(tasks: Mapping[int, Mapping[str, Any]], plan: JobPlan,
                   begin: Mapping[TopicPartition, int]) -> tuple[int, int] | None:
    """(read, committed): the source records this run read and its checkpoints committed,
    from each source task's positions (``read_to``, ``committed_to``) less where the run
    began; None unless every source task reported them."""
    read = committed = 0
    for task in plan.tasks:
        stage = plan.stages[task.stage]
        if not stage.is_source:
            continue
        got = tasks.get(task.task_id)
        if got is None or not got.get("read_to"):
            return None
        for figure, key in ((0, "read_to"), (1, "committed_to")):
            for partition, offset in (got.get(key) or {}).items():
                tp = TopicPartition(stage.input_topic, int(partition))
                n = max(int(offset) - begin.get(tp, int(offset)), 0)
                if figure == 0:
                    read += n
                else:
                    committed += n
    return read, committed


def sink_records(tasks: Mapping[int, Mapping[str, Any]], plan: JobPlan) -> tuple[int, bool]:
    """The records this run's checkpoints committed to the sinks (the reporting tasks'),
    and whether every task with a sink reported."""
    writers = [t.task_id for t in plan.tasks
               if any(o.sink is not None for o in plan.stages[t.stage].outputs)]
    return (sum(int(tasks[i].get("sink_records", 0) or 0) for i in writers if i in tasks),
            all(i in tasks for i in writers))


def read_task_counters(task_dir: Path, plan: JobPlan, since: float) -> dict[int, dict[str, Any]]:
    """The counters each task last wrote in ``task_dir`` since ``since`` (epoch seconds)."""
    out = {}
    for task in plan.tasks:
        got = read_task_progress(task_dir / f"task-{task.task_id}.progress")
        if got is not None and float(got.get("time", 0)) >= since:
            out[task.task_id] = got
    return out


def clear_task_progress(task_dir: Path, plan: JobPlan) -> None:
    """An earlier run's progress files must not pass for this one's (nor carry its sink
    count into this run's retries)."""
    for task in plan.tasks:
        try:
            (task_dir / f"task-{task.task_id}.progress").unlink()
        except OSError:
            pass
