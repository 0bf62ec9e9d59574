"""Checkpoint listeners (Samza's checkpoint callbacks): code told after each checkpoint.

    @pipeline.on_checkpoint
    def log_positions(task, offsets):          # {(topic, partition): offset}
        print(task, offsets)

    pipeline.on_checkpoint(DeleteConsumedInput())   # the retention helper (opt-in)

A listener is a function ``fn(task, offsets)`` or an object with ``on_checkpoint(task,
offsets)`` and, optionally, ``open(context)`` (once per task attempt, before its first
call, with the job, the task and the task's transport) and ``close()``. Each task of the
job gets its own copy (the pipeline travels to the tasks pickled), called in the task's
process after each of its checkpoints committed, with the input positions that commit
recorded: per input partition, the offset of the first record not processed, which is
where the task resumes after a crash.

**Not atomic with the checkpoint.** The call comes after the commit point: a task that
dies between its commit and the call never makes it (the retry resumes after that
checkpoint and calls for the next one), and a task retried may report positions it
reported before. A listener must tolerate both. One that raises is logged and skipped:
the checkpoint is committed either way, and the job goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import TopicNotFound
from ..protocol.retention import retention_cuts
from ..transport import TopicPartition, Transport
from .changelog import last_commit
from .checkpoints import TopicCheckpoints
from .control import ControlLog, jobs_on
from .layout import job_layout, layout_job_id, layout_sources, layout_stages

__all__ = ["ListenerContext", "DeleteConsumedInput", "Listeners"]

log = logging.getLogger(__name__)

Offsets = Mapping[tuple[str, int], int]


@dataclass(frozen=True)
class ListenerContext:
    """What ``open`` gets: the job's name and plan, the task, the task's transport."""

    job: str
    task: int
    plan: Any
    transport: Transport


def _name(listener: Any) -> str:
    fn = getattr(listener, "fn", listener)
    return getattr(fn, "__qualname__", None) or type(fn).__name__


class Listeners:
    """A task's listeners: opened at the first checkpoint, called after each, closed with
    the task. The committer's one call; failures are logged, never raised."""

    def __init__(self, listeners: tuple[Any, ...], job: str, task: int, plan: Any,
                 transport: Transport) -> None:
        self.listeners = listeners
        self.context = ListenerContext(job, task, plan, transport)
        self._opened = False

    def checkpointed(self, offsets: Offsets) -> None:
        if not self.listeners:
            return
        if not self._opened:
            self._opened = True
            self._each("open", self.context)
        self._each("on_checkpoint", self.context.task, dict(offsets))

    def _each(self, method: str, *args: Any) -> None:
        for listener in self.listeners:
            fn = getattr(listener, method, None)
            if fn is None:
                continue
            try:
                fn(*args)
            except Exception as exc:   # the checkpoint is committed: a listener cannot undo it
                log.warning("job %r task %d: checkpoint listener %s.%s raised %s: %s; the "
                            "job goes on", self.context.job, self.context.task,
                            _name(listener), method, type(exc).__name__, exc)

    def close(self) -> None:
        if self._opened:
            self._each("close")


class DeleteConsumedInput:
    """The retention helper: after a checkpoint, delete the input its task consumed, below
    the position every reader of the partition committed (``protocol/retention.py``).

    It cuts the job's source topic and its own channels (``<job>.shuffle-N``), never a
    sink, change log or other internal topic. A source partition is cut below the lowest
    committed position of every job on the transport that reads the topic (read from
    their control topics and change logs); one of them without a checkpoint for it
    blocks the cut. ``every``: seconds between two cuts by one task (the look-up of the
    other readers reads their change logs; 0: after every checkpoint). Opt-in: deleted
    input is gone for good, also for readers outside eos_runtime."""

    def __init__(self, every: float = 60.0) -> None:
        self.every = every
        self._next = 0.0
        self.context: ListenerContext | None = None
        #: the cuts made, (topic, partition, offset): for tests and logs
        self.cuts: list[tuple[str, int, int]] = []

    def open(self, context: ListenerContext) -> None:
        self.context = context

    def on_checkpoint(self, task: int, offsets: Offsets) -> None:
        now = time.monotonic()
        if self.context is None or now < self._next:
            return
        self._next = now + self.every
        plan, t = self.context.plan, self.context.transport
        # A table's topic is its rows' home (often compacted, read by others): never cut.
        sources = [st.input_topic for st in plan.source_stages
                   if st.source is None or not st.source.table]
        channels = list(plan.channel_topics)
        own_store = [line for line in _layout_lines(plan) if line.startswith("checkpoints ")]
        others = {sp: _other_readers(t, plan.name, sp)
                  + _store_positions(t, plan.name, own_store, task, sp, len(plan.tasks))
                  for sp in offsets if sp[0] in sources}
        for (topic, partition), cut in retention_cuts(offsets, [*sources, *channels],
                                                      others).items():
            tp = TopicPartition(topic, partition)
            if cut > t.watermarks(tp, read_committed=False)[0]:
                t.delete_records(tp, cut)
                self.cuts.append((topic, partition, cut))


def _layout_lines(plan: Any) -> tuple[str, ...]:
    return job_layout(plan)


def _store_positions(transport: Transport, job: str, layout: Any, task: int,
                     sp: tuple[str, int], tasks: int) -> list[int | None]:
    """Where a source task with a topic or file-system checkpoint store restarts, besides
    its commit: the store is written after the commit, so a crash in between restarts it
    from the store's older position. A file-system store lives on the job's hosts, out
    of sight here: None (no cut)."""
    store = next((line[len("checkpoints "):] for line in layout
                  if line.startswith("checkpoints ")), "changelog")
    if store == "changelog":
        return []
    if store != "kafka":
        return [None]
    manager = TopicCheckpoints(transport, job, tasks, layout_job_id(layout))
    try:
        manager.start()
        manager.register(task)
        cp = manager.read_last_checkpoint(task)
    except TopicNotFound:
        return [None]
    return [None if cp is None else cp.offsets.get(sp)]


def _other_readers(transport: Transport, job: str, sp: tuple[str, int]) -> list[int | None]:
    """Where every other job whose source is ``sp``'s topic restarts reading it (None: the
    reading task has no checkpoint of it, or one out of sight)."""
    topic, partition = sp
    found: list[int | None] = []
    for other in jobs_on(transport):
        if other == job:
            continue
        last = ControlLog(transport, other).last_run()
        layout = last.start.layout if last is not None else ()
        stages = layout_stages(layout)
        reading = [st for st in layout_sources(stages) if st.input_topic == topic]
        if not reading:
            continue
        readers = reading[0].task_ids
        task = readers[partition % len(readers)]
        try:
            commit = last_commit(transport, TopicPartition(f"{other}.changelog", task))
        except TopicNotFound:
            commit = None
        positions = {(i.topic, i.partition): i.offset for i in commit.inputs} if commit else {}
        found.append(positions.get(sp))
        tasks = sum(len(s.task_ids) for s in stages)
        found += _store_positions(transport, other, layout, task, sp, tasks)
    return found
