"""The task loop: carries out what the input policy, the source side and the committer decide.

One record, top to bottom: ``poll`` a batch -> decode the envelope -> the policy says
(process, keep, drop, checkpoint, rewind; ``runtime/policy.py`` over the pure rules of
``protocol/``) -> the record path runs the steps against staged state and emits
(``runtime/records.py``) -> at a checkpoint the committer runs its numbered steps
(``runtime/checkpoint.py``). Sources read through ``runtime/source.py``. This module
holds no protocol rule: every ``if`` here is about which component to call.

A run ends (``protocol/runs.py``) when the sources have read to their end offsets (a
bounded run) or a stop request names the run (``joblog/control.py``): each source takes
a last checkpoint of version ``run_end(run)``, whose markers let every downstream task
align, commit the same version and pass the markers on (at-least-once: end its lanes).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import cloudpickle

from .. import clock, faults
from ..api import Sink
from ..errors import (
    ConfigError,
    EosError,
    OutageBudgetExceeded,
    ProtocolViolation,
    TaskFailed,
    TransportError,
)
from ..joblog.control import ControlLog
from ..outage import DEFAULT_BUDGET, OutageClock, gone_too_long, is_transient, task_failed
from ..plan import JobPlan, StagePlan
from ..protocol import wire
from ..protocol.recovery import SNAPSHOT_MIN_RECORDS
from ..protocol.runs import finished_run, guarantee_named, run_end
from ..state import StateLocked, TaskStore
from ..transport import Consumer, PendingProducer, TopicPartition, Transport, open_transport
from ..user_code import tracebacks_wanted
from .checkpoint import TRANSACTION_CHUNK, Committer, start_writer_producer
from .outputs import BATCH_MESSAGES, ChannelWriter, SinkWriter, channels_of
from .policy import Action, Aligned, CommitTimer, InputPolicy, Unaligned
from .progress import TaskProgress, carried_counts, read_task_progress
from .records import RecordPath
from .source import SourceSide
from .stats import TaskStats

__all__ = ["TaskConfig", "TaskFailed", "run_task", "run_task_payload"]

log = logging.getLogger(__name__)


@dataclass
class TaskConfig:
    plan: JobPlan
    task_id: int
    transport: dict[str, Any]            # open_transport(**transport)
    state_dir: str
    run: int = 0                         # the run number (protocol/runs.py)
    run_started_ms: int | None = None    # when the driver started it (None: plain counting)
    control_offset: int | None = None    # of the run's start record (None: no stop watch)
    bounded: bool = True
    end_offsets: dict[int, int] = field(default_factory=dict)  # source partition -> end
    # source partition -> its end when the run started: where ``upcoming`` starts in every
    # attempt of the run (positions P5); empty: the end when the task starts (tests)
    run_start_ends: dict[int, int] = field(default_factory=dict)
    buffer_max_bytes: int = 64 << 20
    # fault injection: {"point", "task", "attempt", "hit", "action", "log"} or a list of them
    # (action: faults.ACTIONS; log: a file each firing fault appends a JSON line to;
    # "not_before": epoch seconds before which hits do not count; action "clock" takes
    # "step": seconds the attempt's wall clock steps, negative: back, and goes on)
    fault: dict[str, Any] | list[dict[str, Any]] | None = None
    poll_records: int = 5_000
    # most messages in one channel record (a data batch); 1 sends each on its own
    channel_batch: int = BATCH_MESSAGES
    # exactly-once sink output held before it goes into the open transaction
    transaction_chunk: int = TRANSACTION_CHUNK
    # source partition -> its Startpoint (joblog/startpoints.py), fanned out by the driver
    startpoints: dict[int, Any] = field(default_factory=dict)
    outage_budget: float = DEFAULT_BUDGET   # seconds a task rides through a broker outage
    # change-log offsets written before a snapshot lets the log below it go (recovery C8)
    snapshot_min_records: int = field(default_factory=lambda: snapshot_min_records())
    # a dead letter carries the user's frames of its error: EOS_TRACEBACK, read by the driver
    user_tracebacks: bool = field(default_factory=lambda: tracebacks_wanted())
    # how far past the wall clock an event time may be, which the sinks and dead-letter
    # topic take as their records' timestamps (run_start.output_bounds; None: no bound)
    timestamps_ahead_ms: int | None = None
    # the largest record the dead-letter topic takes (its max.message.bytes; None: none
    # known), which a letter must fit besides the producer's own limit
    letter_max_bytes: int | None = None


def _least(*bounds: int | None) -> int | None:
    """The tightest of some bounds (None: no bound)."""
    return min((b for b in bounds if b is not None), default=None)


#: Channel records a channel task takes per poll. Each is a batch of up to BATCH_MESSAGES
#: messages, so a source's poll_records would hold up to thousands of batches (tens of MB
#: on a backlog) in memory at once.
CHANNEL_POLL_RECORDS = 16


def snapshot_min_records() -> int:
    """C8's ``min_records`` for a run's tasks: ``EOS_CHANGELOG_SNAPSHOT_RECORDS``, read by
    the driver (``eos experiment`` sets it low, so that its faults meet snapshots and
    cut logs), or ``SNAPSHOT_MIN_RECORDS``."""
    raw = os.environ.get("EOS_CHANGELOG_SNAPSHOT_RECORDS")
    if raw is None:
        return SNAPSHOT_MIN_RECORDS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"EOS_CHANGELOG_SNAPSHOT_RECORDS must be a whole number >= 1, "
                          f"not {raw!r}")
    return value


def run_task_payload(payload: bytes, attempt: int) -> bytes:
    """Engine entry point: payload is a cloudpickled ``TaskConfig``."""
    config: TaskConfig = cloudpickle.loads(payload)
    out: bytes = cloudpickle.dumps(run_task(config, attempt).as_dict())
    return out


#: Set in a task's environment (``eos run``'s or ``eos bench``'s reaches its Spark workers),
#: each task attempt runs under cProfile and leaves ``task<id>-attempt<n>-<pid>.prof`` in
#: this directory when it ends: where a task really runs, with the rate and neighbours it
#: really has (``benchmarks/profile_task.py`` forks tasks on their own, on a burst).
PROFILE_DIR_ENV = "EOS_PROFILE_DIR"


def run_task(config: TaskConfig, attempt: int = 0) -> TaskStats:
    where = os.environ.get(PROFILE_DIR_ENV)
    if not where:
        return _run_task(config, attempt)
    import cProfile  # only when asked

    profile = cProfile.Profile()
    try:
        return profile.runcall(_run_task, config, attempt)
    finally:
        Path(where).mkdir(parents=True, exist_ok=True)
        profile.dump_stats(Path(where) / f"task{config.task_id}-attempt{attempt}-{os.getpid()}"
                                         f".prof")


def _run_task(config: TaskConfig, attempt: int) -> TaskStats:
    faults.disarm()  # a reused worker must not carry another task's faults
    clock.reset()    # nor its clock step (a step lasts for the attempt it fired in)
    wanted = (config.fault if isinstance(config.fault, list)
              else [config.fault] if config.fault else [])
    for f in wanted:
        if f.get("task") == config.task_id and f.get("attempt", 0) == attempt:
            action = f.get("action", "kill")
            if action == "lag":
                continue   # not a crash point: the record path sleeps (_lag_of)
            # lose-state: the task's own RocksDB directory, as on a host that lost its disk
            store = (str(Path(config.state_dir) / config.plan.name / f"task-{config.task_id}")
                     if action == "lose-state" else None)
            faults.arm(f["point"], f.get("hit", 1), action, path=store,
                       not_before=f.get("not_before"),
                       step=f.get("step") if action == "clock" else None)
            if f.get("log"):   # experiments learn when and where their faults fired
                faults.record_to(f["log"], task=config.task_id, attempt=attempt)
    try:
        stats = _ride_through(config, attempt)
    except BaseException as exc:
        faults.zombie_ended(exc)   # a zombie's end is news to its experiment
        raise
    faults.zombie_ended(None)
    return stats


def _ride_through(config: TaskConfig, attempt: int) -> TaskStats:
    """Run the task; on a transient transport error (a broker outage) start it again in
    this process, as after a crash: recovery takes a new generation, whose fence aborts
    the transaction the failure left open, so nothing is committed half. The outage
    clock (``eos_runtime.outage``) says when to stop trying: past the budget the task
    fails with ``OutageBudgetExceeded``, which the driver does not retry."""
    clock = OutageClock(config.outage_budget)
    restarts = 0
    while True:
        task: _Task | None = None
        try:
            with open_transport(**config.transport) as transport:
                task = _Task(config, transport, attempt)
                task.stats.outage_restarts = restarts
                try:
                    return task.run()
                finally:
                    task.close()
        except TransportError as exc:
            if not is_transient(exc):
                raise
            verdict = task_failed(clock, committed=task is not None
                                  and task.stats.checkpoints > 0)
            if not verdict.retry:
                servers = config.transport.get("bootstrap_servers")
                where = f"Kafka at {servers}" if servers else "the log"
                raise OutageBudgetExceeded(
                    f"task {config.task_id}: "
                    + gone_too_long(where, verdict.down_for, clock.budget, exc)) from None
            # Once per outage on the worker's log: a restart every second or two follows.
            log.log(logging.WARNING if clock.retries == 1 else logging.DEBUG,
                    "task %d: %s; restarting in place in %.2f s (failing for %.1f s; the "
                    "outage budget is %g s)", config.task_id, exc, verdict.delay,
                    verdict.down_for, clock.budget)
            time.sleep(verdict.delay)
            restarts += 1


class _Task:
    def __init__(self, config: TaskConfig, transport: Transport, attempt: int) -> None:
        self.config = config
        self.plan: JobPlan = config.plan
        self.stage: StagePlan = self.plan.stage_of(config.task_id)
        self.id = config.task_id
        self.transport = transport
        self.stats = TaskStats(config.task_id, attempt)
        self.dir = Path(config.state_dir) / self.plan.name
        self.dir.mkdir(parents=True, exist_ok=True)
        # Refused before anything is fenced: a superseded run's task must not fence the
        # task of the run that superseded it.
        ControlLog(transport, self.plan.name).refuse_if_superseded(config.run, self.id)
        # The change-log writer's producer first: it is on its way while the task opens
        # and recovers (Transport.start_producer).
        # What differs by guarantee, chosen here once (``runs.Guarantee``).
        self.guarantee = guarantee_named(self.plan.guarantee)
        pending = start_writer_producer(transport, self.plan, self.id, self.guarantee)
        try:
            self._open(config, transport, attempt, pending)
        except BaseException:
            pending.close()
            raise

    def _open(self, config: TaskConfig, transport: Transport, attempt: int,
              pending: PendingProducer) -> None:
        self.store, self._fallback_store = _open_store(self.dir, self.id, self.stage, attempt)
        # Where operators and experiments find the process running the task.
        (self.dir / f"task-{self.id}.pid").write_text(f"{os.getpid()} {attempt}\n")
        stage = self.stage
        # One writer per output of the stage; its channel writers share one producer.
        producer = transport.producer() if stage.shuffles else None
        writers: list[ChannelWriter | SinkWriter] = [
            ChannelWriter(producer, o.topic, o.partitions, self.id,
                          batch_messages=config.channel_batch)
            if o.shuffle is not None and producer is not None
            else SinkWriter(cast(Sink, o.sink), o.partitions) for o in stage.outputs]
        self.channels = channels_of([w for w in writers if isinstance(w, ChannelWriter)])
        dead = (SinkWriter(Sink(self.plan.dead_letter_topic, None, "json"),
                           self.plan.dead_letter_partitions)
                if self.plan.dead_letter_topic is not None else None)
        # The driver's live view reads this (runner.PipelineRun.progress). An earlier
        # attempt's, of this run, says what it committed to the sinks and dead letters.
        progress_file = self.dir / f"task-{self.id}.progress"
        self._earlier = read_task_progress(progress_file)
        self.progress = TaskProgress(progress_file, self.stats)
        if self._earlier is not None:   # kept in the file until this attempt recovered
            self.stats.sink_records = int(self._earlier.get("sink_records", 0) or 0)
            self.stats.dead_letters = int(self._earlier.get("dead_letters", 0) or 0)
            self.progress.pending = self._earlier.get("pending")
        self.committer = Committer(transport, self.plan, stage, self.id, config.run, self.store,
                                   self.channels,
                                   [w for w in writers if isinstance(w, SinkWriter)], dead,
                                   self.stats, pending, config.transaction_chunk,
                                   guarantee=self.guarantee,
                                   snapshot_min_records=config.snapshot_min_records,
                                   # the progress file notes each generation as it starts
                                   on_generation=self.progress.write,
                                   on_pending=self.progress.note_pending)
        self.records = RecordPath(self.plan.name, self.id, stage, writers, dead, self.stats,
                                  lag=_lag_of(config, attempt), store=self.store,
                                  max_record_bytes=_least(transport.max_record_bytes(),
                                                          config.letter_max_bytes),
                                  event_time=self.plan.event_time, plan=self.plan,
                                  tracebacks=config.user_tracebacks,
                                  timestamps_ahead_ms=config.timestamps_ahead_ms)
        self.consumer: Consumer | None = None
        self._closers: list[Any] = []

    def close(self) -> None:
        for thing in [*self._closers, self.consumer, self.committer,
                      self.channels and self.channels.producer]:
            if thing is not None:
                try:
                    thing.close()
                except EosError:
                    pass
        self.store.close()
        if self._fallback_store is not None:  # rebuilt from the change log: nothing to keep
            shutil.rmtree(self._fallback_store, ignore_errors=True)

    def run(self) -> TaskStats:
        started = time.monotonic()
        try:
            self._run()
        finally:
            self.stats.seconds = round(time.monotonic() - started, 3)
            self.stats.checkpoint_metrics = self.committer.metrics.summary()
            self.progress.write(done=True)
        return self.stats

    def _run(self) -> None:
        recovered = self.committer.recover()
        self.stats.sink_records, self.stats.dead_letters = carried_counts(self._earlier,
                                                                          recovered.version)
        try:
            finished = finished_run(recovered.version, self.config.run)
        except ProtocolViolation as exc:
            raise ProtocolViolation(f"task {self.id}: {exc}") from None
        self.committer.announce(recovered.version)
        self.records.set_watermark(self.committer.watermark)
        if finished:
            return  # a retry after this run's final checkpoint: announcing it was all
        self.consumer = self.transport.consumer(read_committed=True)
        if self.stage.is_source:
            self._run_source(recovered.commit, recovered.version)
        else:
            self._run_channels(recovered.commit, recovered.version)

    # ------------------------------------------------------------------ sources

    def _run_source(self, commit: wire.ChangeLogCommit | None, restored: int) -> None:
        assert self.consumer is not None
        src = SourceSide(self.transport, self.consumer, self.plan, self.stage, self.id,
                         self.config, commit, restored, guarantee=self.guarantee)
        self._closers.append(src)
        process = self.records.source_records
        highs = self.records.event_highs
        # the driver's "read" and "committed" figures: where the task is, and what its
        # last checkpoint committed (after a restart: where it resumed)
        self.stats.read_to = src.positions
        self.stats.committed_to = dict(src.positions)
        while not src.finished():
            batch = src.poll(self.config.poll_records, 0.2)
            self.progress.tick()
            process(batch, src.versions.open)
            self.stats.processed += len(batch)
            if highs:
                src.read_event_times(highs)
            if batch:
                self._send_output()
                faults.crash_point("task.mid_version")
            try:
                due = src.checkpoint_due()
            except ProtocolViolation as exc:
                raise ProtocolViolation(f"task {self.id}: {exc}") from None
            if due is not None:
                watermark = src.watermark()
                self._checkpoint(due, src.inputs(), watermark, recorded=src.recorded,
                                 idle=src.idle())
                src.committed(due)
                self.stats.committed_to = dict(src.positions)
        self.stats.stopped = src.stopped
        watermark = src.watermark()
        self.records.fire(watermark, run_end(self.config.run))
        self.committer.end_run(src.inputs(), recorded=src.recorded, watermark=watermark)
        self.stats.committed_to = dict(src.positions)

    def _checkpoint(self, version: int, inputs: tuple[wire.InputPosition, ...],
                    watermark: int | None, fences: tuple[wire.ProducerFence, ...] = (),
                    alignment: dict[str, float | None] | None = None,
                    recorded: Any = None, idle: bool = False) -> None:
        """Checkpoint ``version``: the windows its watermark closes first (W5), their
        results of this version; then the committer's steps (``idle``: W7)."""
        self.records.fire(watermark, version)
        faults.crash_point("task.window.fired")
        self.committer.checkpoint(version, inputs, fences, alignment=alignment,
                                  recorded=recorded, watermark=watermark, idle=idle)

    def _send_output(self) -> None:
        """What a poll batch made goes out (``Committer.send_output`` says which); each
        channel's output of a batch as one data batch (or a few)."""
        self.committer.send_output()

    # ------------------------------------------------------------------ channels

    def _run_channels(self, commit: wire.ChangeLogCommit | None, restored: int) -> None:
        assert self.consumer is not None
        topic = self.stage.input_topic
        channels = [(topic, p) for p in self.plan.tasks[self.id].partitions]
        producers = self.stage.upstream_task_ids
        policy: InputPolicy
        if self.guarantee.markers_each_checkpoint:   # G1: markers to align on
            for stale in self.dir.glob(f"buffer-{self.id}-*"):  # named per process before
                shutil.rmtree(stale, ignore_errors=True)
            # One directory per task, wiped at open: a zombie keeps writing to its unlinked
            # file, never to its successor's.
            policy = Aligned(channels, producers, run_end(self.config.run), commit,
                             self.dir / f"buffer-{self.id}", self.config.buffer_max_bytes,
                             self.stats)
        else:
            policy = Unaligned(channels, producers, run_end(self.config.run), commit,
                               CommitTimer(self.plan.commit_interval, self.plan.commit_every),
                               restored + 1)
        self._closers.append(policy)
        self._seek(policy.resume_offsets())
        self._take_checkpoints(policy)   # R9: a start may find every marker in already
        process = self.records.data
        channel_poll = min(self.config.poll_records, CHANNEL_POLL_RECORDS)
        while not policy.finished():
            batch = self.consumer.poll(channel_poll, 0.2)
            self.progress.tick()
            for r in batch:
                c = (r.topic, r.partition)
                msg = wire.decode_channel(r.value, topic=r.topic, partition=r.partition,
                                          offset=r.offset)
                action = policy.on_record(c, r.offset, msg, cast(bytes, r.value), r.timestamp)
                if action is Action.PROCESS:
                    assert type(msg) is wire.DataBatch or type(msg) is wire.Envelope
                    process(msg, r.topic, r.partition, r.offset, policy.version)
                elif action is Action.ALIGNING:
                    faults.crash_point("task.aligning")
                elif action is Action.CHECKPOINT:
                    if self._take_checkpoints(policy):
                        break  # channels are read again from where they overflowed (R8)
                elif action is Action.REWIND:
                    version = policy.rewind()
                    self.committer.rewind(version)
                    self.records.set_watermark(self.committer.watermark)
                    self._seek(policy.resume_offsets())
                    self._take_checkpoints(policy)   # R9
                    break  # the rest of the batch is read again from the checkpoint
            if batch:
                self._send_output()
                faults.crash_point("task.mid_version")
            self._take_checkpoints(policy)   # at-least-once: the timer
        end = policy.end_inputs()
        if end is not None:
            self.records.fire(policy.watermark, run_end(self.config.run))
            self.committer.end_run(end, watermark=policy.watermark)
        else:   # the aligned checkpoint of run_end was the last commit
            self.committer.await_readable()

    def _take_checkpoints(self, policy: InputPolicy) -> bool:
        """Take every checkpoint the policy says is due, processing what each releases;
        True if channels were re-positioned (the rest of a polled batch is then stale)."""
        process = self.records.data
        for version, inputs, fences, watermark in policy.checkpoints():
            self._checkpoint(version, inputs, watermark, fences,
                             policy.alignment(time.monotonic()), idle=policy.idle)
            for msg, topic, partition, offset in policy.released():
                process(msg, topic, partition, offset, policy.version)
        seeks = policy.seeks()
        if seeks is None:
            return False
        self._seek(seeks)
        return True

    def _seek(self, offsets: dict[Any, int | None]) -> None:
        assert self.consumer is not None
        self.consumer.assign({TopicPartition(*c): (0 if off is None else off)
                              for c, off in offsets.items()})


def _lag_of(config: TaskConfig, attempt: int) -> float:
    """Seconds per record this attempt sleeps: a lagging producer (fault ``lag``)."""
    wanted = (config.fault if isinstance(config.fault, list)
              else [config.fault] if config.fault else [])
    return sum(float(f.get("delay", 0)) for f in wanted
               if f.get("action") == "lag" and f.get("task") == config.task_id
               and f.get("attempt", 0) == attempt)


def _open_store(base_dir: Path, task_id: int, stage: StagePlan,
                attempt: int) -> tuple[TaskStore, Path | None]:
    """The task's RocksDB: the same directory across restarts on this host; if a zombie
    of an earlier attempt still holds it, a fresh one rebuilt from the change log, removed
    when the task ends. Returns the store and that fallback directory (or None)."""
    base = base_dir / f"task-{task_id}"
    _sweep_stale_stores(base)
    try:
        return TaskStore(base, stage.stores), None
    except StateLocked:
        fallback = base.with_name(f"task-{task_id}.attempt-{attempt}-{os.getpid()}")
        return TaskStore(fallback, stage.stores), fallback


def _sweep_stale_stores(base: Path) -> None:
    """Remove fallback stores of attempts that died before removing their own (a killed
    attempt beside a zombie): their LOCK is free once no process holds the store."""
    for stale in base.parent.glob(f"{base.name}.attempt-*"):
        try:
            with open(stale / "LOCK", "a+b") as lock:
                fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except FileNotFoundError:
            pass
        except OSError:
            continue  # still open in a live process
        shutil.rmtree(stale, ignore_errors=True)
