"""The source side of a task: input positions, end offsets, the stop watch, versions.

A source reads its input partitions from its last checkpoint (or the oldest offset of a
fresh job) up to the end offsets the driver took at the run's start (a bounded run), or
until a stop request names the run (``joblog/control.py``). Its open version is owned by
``protocol/runs.SourceVersions``; its checkpoints are due on the commit timer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import clock
from ..errors import ConfigError, EosError, StartOutOfRange, TopicNotFound
from ..joblog.changelog import last_commit
from ..joblog.checkpoints import Checkpoint, FileSystemCheckpoints, TopicCheckpoints
from ..joblog.live_run import StopWatcher
from ..joblog.startpoints import delete_applied, resolve_startpoint
from ..plan import JobPlan, StagePlan
from ..protocol import wire
from ..protocol.positions import (
    NoFallback,
    Start,
    choose_start,
    resolve,
    startpoint_applies,
    store_positions,
)
from ..protocol.runs import Guarantee, SourceVersions, checkpoint_needed, run_of
from ..protocol.watermarks import SourceWatermark, TableWatermark
from ..transport import Consumer, Record, TopicPartition, Transport
from .policy import CommitTimer

__all__ = ["SourceSide", "check_fallback", "no_fallback_text", "start_positions"]


def no_fallback_text(job: str, topic: str, partition: int, exc: NoFallback) -> str:
    """The refusal of a partition that has nowhere to start (P4, offset_default none)."""
    return (f"source {topic}[{partition}]: {exc}: give the source offset_default='oldest' or "
            f"'upcoming' (eos run --offset-default oldest|upcoming), or the partition a "
            f"Startpoint (eos startpoint set {job} {topic} {partition} --oldest)")


def start_positions(transport: Transport, stage: StagePlan, parts: tuple[int, ...],
                    commit: wire.ChangeLogCommit | None, run: int,
                    startpoints: dict[int, Any] | None = None,
                    kept: dict[int, int] | None = None, *,
                    job: str = "JOB",
                    run_start_ends: dict[int, int] | None = None) -> dict[int, tuple[int, str]]:
    """Per input partition: the offset to start from and why (``protocol/positions.py``).
    ``startpoints``: the driver's fan-out for this task (``startpoints.Startpoint`` by
    partition); ``kept``: the positions a topic or file-system checkpoint store holds
    (at-least-once), instead of the commit's; ``run_start_ends``: each partition's end
    when the run started, where ``upcoming`` starts (P5; missing: the end now)."""
    src = stage.source
    assert src is not None
    topic = stage.input_topic
    checkpoint = ({pos.partition: pos.offset for pos in commit.inputs if pos.topic == topic}
                  if commit is not None else {})
    if kept is not None:
        checkpoint = store_positions(kept, checkpoint)
    checkpoint_run = run_of(commit.version) if commit is not None else None
    out = {}
    for p in parts:
        sp = (startpoints or {}).get(p)
        given = None
        if sp is not None and startpoint_applies(sp.run, checkpoint_run):
            kind, value = resolve_startpoint(sp, transport, topic, p, src.startpoint_resolvers,
                                             run_start_end=(run_start_ends or {}).get(p))
            given = Start(kind, value, "startpoint")
        try:
            start = choose_start(checkpoint=checkpoint.get(p), checkpoint_run=checkpoint_run,
                                 run=run, reset=src.reset_offset, default=src.offset_default,
                                 startpoint=given, startpoint_run=None if sp is None else sp.run)
        except NoFallback as exc:   # check_fallback refused it before the run: not expected
            raise EosError(no_fallback_text(job, topic, p, exc)) from None
        tp = TopicPartition(topic, p)
        low, high = transport.watermarks(tp)
        at = (transport.offset_for_timestamp(tp, start.value)
              if start.kind == "timestamp" and start.value is not None else None)
        try:
            out[p] = (resolve(start, low, high, at,
                              upcoming=(run_start_ends or {}).get(p)), start.why)
        except ValueError as exc:
            past_end = start.value is not None and start.value > high
            fix = (f"clear its Startpoint: eos startpoint clear {job} --stream {topic} "
                   f"--partition {p} (or set another)" if start.why == "startpoint" else
                   "the topic ends before it: it was deleted and made again, or cut (an "
                   "unclean leader election); start the job afresh (eos reset) or give "
                   "the partition a Startpoint" if past_end else
                   "retention may have deleted input this job never read: start it "
                   "elsewhere with reset_offset=True or a checkpoint written with eos "
                   "checkpoint")
            raise StartOutOfRange(f"source {topic}[{p}]: {exc}; {fix}") from None
    return out


def check_fallback(transport: Transport, plan: JobPlan, state_dir: str,
                   startpoints: dict[int, dict[int, Any]]) -> None:
    """Before a run is recorded: with ``offset_default`` ``none`` every source partition
    needs a checkpoint (not reset) or a Startpoint (P4); ``ConfigError`` naming the first
    that has neither, so the run fails before anything is read."""
    if all(st.source is None or st.source.offset_default != "none"
           for st in plan.source_stages):
        return
    store = position_store(transport, plan, state_dir)
    try:
        for task in plan.tasks:
            stage = plan.stages[task.stage]
            src = stage.source
            if src is None or src.offset_default != "none":
                continue
            try:
                commit = last_commit(transport, TopicPartition(plan.changelog_topic,
                                                               task.task_id))
            except TopicNotFound:
                commit = None
            checkpoint = ({pos.partition: pos.offset for pos in commit.inputs
                           if pos.topic == stage.input_topic} if commit is not None else {})
            if store is not None:
                store.register(task.task_id)
                cp = store.read_last_checkpoint(task.task_id)
                checkpoint = store_positions(
                    {p: off for (t, p), off in cp.offsets.items() if t == stage.input_topic}
                    if cp is not None else {}, checkpoint)
            checkpoint_run = run_of(commit.version) if commit is not None else None
            for p in task.partitions:
                sp = startpoints.get(task.task_id, {}).get(p)
                try:
                    choose_start(checkpoint=checkpoint.get(p), checkpoint_run=checkpoint_run,
                                 run=(checkpoint_run or 0) + 1, reset=src.reset_offset,
                                 default="none",
                                 startpoint=None if sp is None else Start("oldest", None,
                                                                          "startpoint"),
                                 startpoint_run=None if sp is None else sp.run)
                except NoFallback as exc:
                    raise ConfigError(no_fallback_text(plan.name, stage.input_topic, p,
                                                       exc)) from None
    finally:
        if store is not None:
            store.stop()


def position_store(transport: Transport, plan: JobPlan, state_dir: str, *,
                   create: bool = True) -> Any:
    """The started checkpoint manager of an at-least-once job that keeps its source
    positions in the checkpoint topic or on the file system; None for the change log.
    ``create=False``: a reader's, which makes no missing checkpoint topic."""
    if plan.checkpoints == "kafka":
        store: Any = TopicCheckpoints(transport, plan.name, len(plan.tasks), plan.job_id,
                                      create=create)
    elif plan.checkpoints == "filesystem":
        store = FileSystemCheckpoints(Path(state_dir) / "checkpoints", plan.name, plan.job_id)
    else:
        return None
    store.start()
    return store


class SourceSide:
    def __init__(self, transport: Transport, consumer: Consumer, plan: JobPlan,
                 stage: StagePlan, task_id: int, config: Any,
                 commit: wire.ChangeLogCommit | None, restored_version: int, *,
                 guarantee: Guarantee) -> None:
        self.topic = stage.input_topic
        parts = plan.tasks[task_id].partitions
        self.store = position_store(transport, plan, config.state_dir)
        kept = None
        if self.store is not None:
            self.store.register(task_id)
            cp = self.store.read_last_checkpoint(task_id)
            kept = ({p: off for (t, p), off in cp.offsets.items() if t == stage.input_topic}
                    if cp is not None else {})
        self.starts = start_positions(transport, stage, parts, commit, config.run,
                                      config.startpoints, kept, job=plan.name,
                                      run_start_ends=config.run_start_ends)
        # Deleted from the metadata store after the next commit records where they led.
        self._startpoints_due = sorted(config.startpoints)
        self._t, self._job, self._task = transport, plan.name, task_id
        start = {p: offset for p, (offset, _) in self.starts.items()}
        self.positions = dict(start)
        self.ends = {p: config.end_offsets.get(p) for p in parts}
        self.tps = {p: TopicPartition(self.topic, p) for p in parts}
        self.consumer = consumer
        consumer.assign({self.tps[p]: start[p] for p in parts})
        self.done = {p for p in parts if self.ends[p] is not None and start[p] >= self.ends[p]}
        consumer.pause([self.tps[p] for p in self.done])
        self.parts = parts
        self.bounded = config.bounded
        self.stop: StopWatcher | None = None
        if config.control_offset is not None:
            self.stop = StopWatcher(transport, plan.name, config.run, config.control_offset)
        self.versions = SourceVersions(restored_version, config.run, config.run_started_ms)
        self.guarantee = guarantee
        # the positions the last commit recorded (S6), as ``inputs`` gives them
        self._recorded = (tuple(pos for pos in commit.inputs if pos.topic == self.topic)
                          if commit is not None else None)
        self.timer = CommitTimer(plan.commit_interval, plan.commit_every)
        self.stopped = False
        # W2, for a job with event time: from the last commit's watermark on
        self.event_time: SourceWatermark | TableWatermark | None = None
        self._said_idle = False   # W7: its last checkpoint's markers said idle
        if plan.event_time and stage.source is not None and stage.source.table:
            self.event_time = TableWatermark()
        elif plan.event_time:
            src = stage.source
            self.event_time = SourceWatermark(
                parts, restored=commit.watermark if commit is not None else None,
                idle_after_ms=round((src.idle_after if src is not None else 0) * 1000))

    def finished(self) -> bool:
        """The run is over: input read to its end (bounded), or a stop request."""
        if self.bounded and len(self.done) == len(self.parts):
            return True
        if self.stop is not None and self.stop.requested():
            self.stopped = True
            return True
        return False

    def poll(self, max_records: int, timeout: float) -> list[Record]:
        """The next records below the end offsets; the positions move past them."""
        batch = self.consumer.poll(max_records, timeout)
        out = []
        for r in batch:
            end = self.ends[r.partition]
            if end is not None and r.offset >= end:
                # Past the end: all below it is read (an end past a commit marker is
                # reached by no record, and behind a busy writer no poll is empty).
                if r.partition not in self.done:
                    self.done.add(r.partition)
                    self.consumer.pause([self.tps[r.partition]])
                continue
            out.append(r)
            self.positions[r.partition] = r.offset + 1
            if end is not None and r.offset + 1 >= end:
                self.done.add(r.partition)
                self.consumer.pause([self.tps[r.partition]])
        if not batch and self.bounded:
            self._past_markers()
        self.timer.count(len(out))
        return out

    def _past_markers(self) -> None:
        """A partition written in transactions ends in a commit marker, which takes an
        offset but is never returned: the end is reached by the consumer's position, not
        by a record (the Kafka consumer moves it past markers when a poll brings none)."""
        for p in self.parts:
            end = self.ends[p]
            if p not in self.done and end is not None and \
                    self.consumer.position(self.tps[p]) >= end:
                self.done.add(p)
                self.consumer.pause([self.tps[p]])

    def checkpoint_due(self) -> int | None:
        """The version of the checkpoint due now, or None (runs S2, S4, S5, S6)."""
        timer = self.timer
        if not timer.due():
            return None
        # W7: a source that may turn idle and has not said so on a marker
        unannounced = (not self._said_idle and isinstance(self.event_time, SourceWatermark)
                       and self.event_time.idle_after_ms > 0)
        if not checkpoint_needed(self.guarantee, self.inputs(), self._recorded,
                                 unannounced_idleness=unannounced):
            timer.reset()
            return None
        return self.versions.for_checkpoint(timer.line_ms(),
                                            timer.interval_ms if timer.fired() else None)

    def committed(self, version: int) -> None:
        self.versions.committed(version)
        self.timer.reset()
        self._recorded = self.inputs()
        self._said_idle = self.idle()   # on this checkpoint's markers (W7)

    def recorded(self) -> None:
        """A commit recorded this task's positions (the committer calls this after the
        commit point, before the checkpoint listeners): a topic or file-system store gets
        them too (after the commit, not atomic with it: at-least-once replays what lies
        between); the task's Startpoints are used up (P1)."""
        if self.store is not None:
            self.store.write_checkpoint(self._task, Checkpoint(
                {(self.topic, p): off for p, off in self.positions.items()}))
        if self._startpoints_due:
            delete_applied(self._t, self._job, self.topic, self._task, self._startpoints_due)
            self._startpoints_due = []

    def read_event_times(self, highs: dict[int, int]) -> None:
        """The highest event time read per partition since the last call (the record
        path's ``event_highs``, emptied here)."""
        if self.event_time is not None:
            now = round(clock.wall() * 1000)
            for p, high in highs.items():
                self.event_time.read(p, high, now)
        highs.clear()

    def watermark(self) -> int | None:
        """W2: the watermark of a checkpoint taken now (None: the job keeps none). A
        partition has something left to read until its end (a bounded run), or while the
        consumer is behind the partition's end as the log says now."""
        if self.event_time is None:
            return None
        if self.bounded:
            behind = [p for p in self.parts if p not in self.done]
        else:
            # The consumer's position, not the last record's: on transactional input the
            # end is one past a commit marker, which no record reaches (_past_markers).
            behind = [p for p in self.parts
                      if max(self.positions[p], self.consumer.position(self.tps[p]))
                      < self._t.watermarks(self.tps[p])[1]]
        return self.event_time.at_checkpoint(behind, round(clock.wall() * 1000))

    def idle(self) -> bool:
        """W7: the source is idle as of its last ``watermark()``."""
        return self.event_time is not None and self.event_time.idle

    def inputs(self) -> tuple[wire.InputPosition, ...]:
        return tuple(wire.InputPosition(self.topic, p, off)
                     for p, off in sorted(self.positions.items()))

    def close(self) -> None:
        if self.stop is not None:
            self.stop.close()
