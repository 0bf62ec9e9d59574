"""The task loop: wires transport, aligner, operators, state and outputs together.

One record, top to bottom: ``poll`` a batch -> decode the envelope -> the aligner decides
(process, buffer, drop, or: all markers in, checkpoint) -> the step chain runs against
staged state -> output goes to the channel or sink writer -> at a checkpoint, the commit
steps below run in their fixed order. The protocol rules live in
``protocol/aligner.py``; this module only carries out its decisions.

Checkpoint steps (exactly-once; SEP-10 3.3-3.9, numbered as in docs/protocol.md):

    1. flush output (channels), or write held sink output (local log) / keep it in the
       open transaction (Kafka)
    2. change-log records of the staged state changes
    3. the commit record, sealed (flush, or the Kafka transaction's commit): THE commit point
    4. the RocksDB batch: staged state + checkpoint data
    5. marker fan-out to every channel (not for sinks)

At-least-once runs the same steps on a timer (no alignment, no markers but the final
end-of-run ones): what was read is committed after it was processed, so a crash
replays, and duplicates, what came after the last commit.

A run ends (``protocol/runs.py``) when the sources have read to their end offsets (a
bounded run) or a stop request names the run (``runtime/control.py``): each source takes
a last checkpoint of version ``run_end(run)``, whose markers let every downstream task
align, commit the same version and pass the markers on.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cloudpickle

from .. import faults
from ..api import FORMATS, Sink
from ..errors import EosError
from ..plan import JobPlan, StagePlan
from ..protocol import wire
from ..protocol.aligner import Aligner, Decision, RestoreOutcome, Snapshot
from ..protocol.runs import (
    announcement, finished_run, run_end, source_start_version, time_version,
)
from ..protocol.tracker import Tracker
from ..state import StateLocked, TaskStore
from ..transport import TopicPartition, Transport, open_transport
from .buffer import EarlyArrivalBuffer
from .changelog import ChangeLogWriter, catch_up, recover
from .control import StopWatcher
from .operators import Chain, UserFunctionError, decode_key, encode_key
from .outputs import ChannelWriter, SinkWriter

__all__ = ["TaskConfig", "TaskFailed", "run_task", "run_task_payload"]


from ..errors import TaskFailed


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
    buffer_max_bytes: int = 64 << 20
    # fault injection: {"point", "task", "attempt", "hit", "action"} or a list of them
    fault: dict[str, Any] | list[dict[str, Any]] | None = None
    poll_records: int = 5_000


@dataclass
class TaskStats:
    task_id: int
    attempt: int = 0
    generation: int = 0
    restored_version: int = 0
    checkpoints: int = 0
    processed: int = 0
    emitted: int = 0
    buffered: int = 0
    max_buffer_bytes: int = 0
    overflowed: int = 0                  # early arrivals skipped past the buffer's bound (R8)
    rereads: int = 0                     # channels read again from an overflow offset
    stale: int = 0
    fenced: int = 0
    dead_letters: int = 0                # records whose function raised, sent to dead letters
    rewinds: int = 0
    replayed_changes: int = 0
    rebuilt_store: bool = False
    stopped: bool = False                # a stop request ended the run (sources)
    seconds: float = 0.0                 # from recovery start to the task's end

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run_task_payload(payload: bytes, attempt: int) -> bytes:
    """Engine entry point: payload is a cloudpickled ``TaskConfig``."""
    config: TaskConfig = cloudpickle.loads(payload)
    return cloudpickle.dumps(run_task(config, attempt).as_dict())


def run_task(config: TaskConfig, attempt: int = 0) -> TaskStats:
    faults.disarm()  # a reused worker must not carry another task's faults
    wanted = config.fault if isinstance(config.fault, list) else [config.fault] if config.fault else []
    for f in wanted:
        if f.get("task") == config.task_id and f.get("attempt", 0) == attempt:
            faults.arm(f["point"], f.get("hit", 1), f.get("action", "kill"))
    with open_transport(**config.transport) as transport:
        task = _Task(config, transport, attempt)
        try:
            return task.run()
        finally:
            task.close()


class _Task:
    def __init__(self, config: TaskConfig, transport: Transport, attempt: int) -> None:
        self.c = config
        self.plan: JobPlan = config.plan
        self.stage: StagePlan = self.plan.stage_of(config.task_id)
        self.id = config.task_id
        self.t = transport
        self.eos = self.plan.exactly_once
        self.stats = TaskStats(config.task_id, attempt)
        self.store = self._open_store(attempt)
        # Where operators and experiments find the process running the task.
        pid_file = Path(config.state_dir) / self.plan.name / f"task-{self.id}.pid"
        pid_file.write_text(f"{os.getpid()} {attempt}\n")
        self.chain = Chain(self.stage.steps, self.store)
        self.changelog_tp = TopicPartition(self.plan.changelog_topic, self.id)
        self.fence_id = f"{self.plan.name}.task-{self.id}"
        self.log: ChangeLogWriter | None = None
        self.channels: ChannelWriter | None = None
        self.sink: SinkWriter | None = None
        self.consumer = None
        self.stop: StopWatcher | None = None
        self.version = 1
        self.run_end = run_end(config.run)
        self._since_commit = 0
        self._last_commit = time.monotonic()
        if self.stage.sink is not None:
            self.sink = SinkWriter(self.stage.sink, self.stage.output_partitions)
        self.dead: SinkWriter | None = None
        if self.plan.dead_letter_topic is not None:
            self.dead = SinkWriter(Sink(self.plan.dead_letter_topic, None, "json"),
                                   self.plan.dead_letter_partitions)
        if self.stage.source is not None:
            src = self.stage.source
            self._src_key = FORMATS[src.key_format][1] if src.key_format else None
            self._src_value = FORMATS[src.value_format][1]

    # ------------------------------------------------------------------ set-up

    def _open_store(self, attempt: int) -> TaskStore:
        """The task's RocksDB: the same directory across restarts on this host; if a zombie
        of an earlier attempt still holds it, a fresh one rebuilt from the change log."""
        base = Path(self.c.state_dir) / self.plan.name / f"task-{self.id}"
        base.parent.mkdir(parents=True, exist_ok=True)
        _sweep_stale_stores(base)
        self._fallback_store: Path | None = None
        try:
            return TaskStore(base, self.stage.stores)
        except StateLocked:
            self._fallback_store = base.with_name(f"task-{self.id}.attempt-{attempt}-{os.getpid()}")
            return TaskStore(self._fallback_store, self.stage.stores)

    def close(self) -> None:
        for thing in (self.consumer, self.stop, self.log, self.channels and self.channels.producer,
                      getattr(self, "buffer", None)):
            if thing is not None:
                try:
                    thing.close()
                except EosError:
                    pass
        self.store.close()
        if self._fallback_store is not None:  # rebuilt from the change log: nothing to keep
            shutil.rmtree(self._fallback_store, ignore_errors=True)

    def _new_generation(self, generation: int, restored_version: int) -> int:
        """Register and write a new generation before anything else (invariant 5); from now
        on a zombie of an older one cannot write to the change log. Returns the offset of
        the generation-start record."""
        if self.log is not None:
            self.log.close()
        self.log = ChangeLogWriter(self.t, self.changelog_tp, self.fence_id, generation,
                                   fenced=self.eos)
        offset = self.log.start_generation(restored_version)
        self.stats.generation = generation
        return offset

    def _announce(self, restored_version: int) -> None:
        """SEP-10 1.3-1.4: re-send the last marker, then the restore command, downstream."""
        faults.crash_point("task.recovery")
        if self.channels is None:
            return
        gen = self.stats.generation
        for kind, version in announcement(self.eos, restored_version, self.c.run):
            if kind == "marker":
                self.channels.markers(gen, version)
            else:
                self.channels.restore(gen, version)

    # ------------------------------------------------------------------ run

    def run(self) -> TaskStats:
        started = time.monotonic()
        try:
            self._run()
        finally:
            self.stats.seconds = round(time.monotonic() - started, 3)
        return self.stats

    def _run(self) -> None:
        recovered = recover(self.t, self.changelog_tp, self.store)
        self.stats.replayed_changes = recovered.replayed
        self.stats.rebuilt_store = recovered.rebuilt
        self.stats.restored_version = recovered.version
        if self.stage.shuffle is not None:
            self.channels = ChannelWriter(self.t.producer(), self.stage.output_topic,
                                          self.stage.output_partitions, self.id)
        start = self._new_generation(recovered.generation + 1, recovered.version)
        # A zombie may have committed between our read and our registration: read on.
        catch_up(self.t, self.changelog_tp, self.store, recovered, recovered.read_to, start)
        self.stats.restored_version = recovered.version
        commit = recovered.commit
        if commit is not None and self.channels is not None:
            for o in commit.outputs:  # sequence numbers continue from the checkpoint
                if o.topic == self.stage.output_topic and o.partition < len(self.channels.seq):
                    self.channels.seq[o.partition] = o.seq
        try:
            finished = finished_run(recovered.version, self.c.run)
        except ValueError as exc:
            raise EosError(f"task {self.id}: {exc}") from None
        self._announce(recovered.version)
        if finished:
            return  # a retry after this run's final checkpoint: announcing it was all
        self.version = recovered.version + 1
        self.consumer = self.t.consumer(read_committed=True)
        if self.stage.is_source:
            self._run_source(commit)
        else:
            self._run_channels(commit)

    # ------------------------------------------------------------------ sources

    def _run_source(self, commit: wire.ChangeLogCommit | None) -> None:
        topic = self.stage.input_topic
        parts = self.plan.tasks[self.id].partitions
        start = {p: 0 for p in parts}
        if commit is not None:
            for pos in commit.inputs:
                if pos.topic == topic and pos.partition in start:
                    start[pos.partition] = pos.offset
        else:
            for p in parts:
                start[p] = self.t.watermarks(TopicPartition(topic, p))[0]
        self.positions = dict(start)
        ends = {p: self.c.end_offsets.get(p) for p in parts}
        tps = {p: TopicPartition(topic, p) for p in parts}
        self.consumer.assign({tps[p]: start[p] for p in parts})
        done = {p for p in parts if ends[p] is not None and start[p] >= ends[p]}
        self.consumer.pause([tps[p] for p in done])
        if self.c.control_offset is not None:
            self.stop = StopWatcher(self.t, self.plan.name, self.c.run, self.c.control_offset)
        self.version = source_start_version(self.stats.restored_version, self.c.run)
        key_de, value_de, chain = self._src_key, self._src_value, self.chain
        while True:
            if self.c.bounded and len(done) == len(parts):
                break
            if self.stop is not None and self.stop.requested():
                self.stats.stopped = True
                break
            batch = self.consumer.poll(self.c.poll_records, 0.2)
            for r in batch:
                end = ends[r.partition]
                if end is not None and r.offset >= end:
                    continue
                try:
                    key = key_de(r.key) if key_de is not None and r.key is not None else None
                    kb = encode_key(key) if key is not None else None
                    outs = chain.run(kb, value_de(r.value))
                    self._emit(key, kb, outs, r.timestamp)
                except Exception as exc:
                    if not isinstance(exc, UserFunctionError) and isinstance(exc, EosError):
                        raise  # the runtime's own failure, not the user's function
                    self._user_error(exc, r.topic, r.partition, r.offset, _text(r.key),
                                     _text(r.value), r.timestamp)
                self.positions[r.partition] = r.offset + 1
                if end is not None and r.offset + 1 >= end:
                    done.add(r.partition)
                    self.consumer.pause([tps[r.partition]])
            self.stats.processed += len(batch)
            self._since_commit += len(batch)
            if batch:
                self._send_output()
                faults.crash_point("task.mid_version")
            if self._commit_due():
                self._source_checkpoint()
        self._end_run(self._source_inputs())

    def _source_checkpoint(self) -> None:
        """A checkpoint inside the run: at a time-derived version where the run's start time
        is known (protocol/runs.py), never at the run's last version, which ends it."""
        if self.c.run_started_ms is not None:
            self.version = max(self.version, time_version(
                self.c.run, self.c.run_started_ms, int(time.time() * 1000)))
        if self.version >= self.run_end:
            raise EosError(f"task {self.id} used up the versions of run {self.c.run}")
        self._checkpoint(self._source_inputs(), ())

    def _send_output(self) -> None:
        """Output of the open version goes out as it is made, not only at checkpoints:
        downstream may read it before the marker (what makes restores necessary)."""
        if self.channels is not None:
            self.channels.producer.send()

    def _source_inputs(self) -> tuple[wire.InputPosition, ...]:
        return tuple(wire.InputPosition(self.stage.input_topic, p, off)
                     for p, off in sorted(self.positions.items()))

    def _commit_due(self) -> bool:
        every = self.plan.commit_every
        if every and self._since_commit >= every:
            return True
        return time.monotonic() - self._last_commit >= self.plan.commit_interval

    # ------------------------------------------------------------------ channels

    def _run_channels(self, commit: wire.ChangeLogCommit | None) -> None:
        topic = self.stage.input_topic
        parts = self.plan.tasks[self.id].partitions
        channels = [(topic, p) for p in parts]
        self.channel_list = channels
        self.channel_index = {c: i for i, c in enumerate(channels)}
        snapshot = Snapshot(commit.version, commit.inputs, commit.fences) if commit else None
        producers = self.stage.upstream_task_ids
        if self.eos:
            self.aligner = Aligner(channels, producers, snapshot=snapshot)
            base = Path(self.c.state_dir) / self.plan.name
            for stale in base.glob(f"buffer-{self.id}-*"):  # named per process before
                shutil.rmtree(stale, ignore_errors=True)
            # One directory per task, wiped at open: a zombie keeps writing to its unlinked
            # file, never to its successor's.
            self.buffer = EarlyArrivalBuffer(base / f"buffer-{self.id}", self.c.buffer_max_bytes)
            self._seek_all(self.aligner.resume_offsets())
            self.version = self.aligner.version
            self._run_aligned(channels)
        else:
            self.tracker = Tracker(channels, producers, self.run_end,
                                   inputs=commit.inputs if commit is not None else ())
            self._seek_all(self.tracker.resume_offsets())
            self._run_unaligned()

    def _seek_all(self, offsets: dict) -> None:
        self.positions = {c: (0 if off is None else off) for c, off in offsets.items()}
        self.consumer.assign({TopicPartition(*c): off for c, off in self.positions.items()})

    def _run_aligned(self, channels: list) -> None:
        al, buf = self.aligner, self.buffer
        self._take_aligned_checkpoints()   # R9: a restart may find every marker in already
        while not al.reached(self.run_end):
            batch = self.consumer.poll(self.c.poll_records, 0.2)
            for r in batch:
                c = (r.topic, r.partition)
                msg = wire.decode_channel(r.value, topic=r.topic, partition=r.partition,
                                          offset=r.offset)
                if type(msg) is wire.Envelope:
                    d = al.on_data(c, r.offset, msg.producer_id, msg.generation, msg.version,
                                   msg.seq, room=buf.fits(len(r.value)))
                    if d == Decision.PROCESS:
                        self._process(msg, r.topic, r.partition, r.offset)
                    elif d == Decision.BUFFER:
                        buf.append(msg.version, self.channel_index[c], r.offset, r.value)
                        self.stats.buffered += 1
                    elif d == Decision.OVERFLOW:
                        self.stats.overflowed += 1
                    elif d == Decision.STALE:
                        self.stats.stale += 1
                    else:
                        self.stats.fenced += 1
                elif type(msg) is wire.Marker:
                    if al.on_marker(c, r.offset, msg.producer_id, msg.generation, msg.version):
                        if self._take_aligned_checkpoints():
                            break  # channels are read again from where they overflowed (R8)
                    else:  # markers from some producers only; early arrivals may be buffered
                        faults.crash_point("task.aligning")
                else:
                    outcome = al.on_restore(c, r.offset, msg.producer_id, msg.generation, msg.version)
                    if outcome == RestoreOutcome.REWIND:
                        self._rewind()
                        break  # the rest of the batch is read again from the checkpoint
            if batch:
                self._send_output()
                faults.crash_point("task.mid_version")
            self.stats.max_buffer_bytes = max(self.stats.max_buffer_bytes, buf.high_water)

    def _take_aligned_checkpoints(self) -> bool:
        """Checkpoint while aligned; True if channels were re-positioned (R8), which makes
        the rest of a polled batch stale reading."""
        al = self.aligner
        reread: dict = {}
        while al.aligned():
            snap = al.checkpoint()
            self.version = snap.version
            self._checkpoint(snap.inputs, snap.fences)
            self.version = al.version   # R2a: the next version may skip unused ones
            reread.update(al.rereads())
            for ci, offset, raw in self.buffer.drain_through(al.version):
                msg = wire.decode_channel(raw)
                topic, partition = self.channel_list[ci]
                d = al.on_release((topic, partition), offset, msg.producer_id, msg.generation,
                                  msg.version)
                if d == Decision.PROCESS:
                    self._process(msg, topic, partition, offset)
                else:
                    self.stats.fenced += 1
        if not reread:
            return False
        self.stats.rereads += len(reread)
        self._seek_all({**al.read_positions(), **reread})
        return True

    def _rewind(self) -> None:
        """SEP-10 4.x: discard the open version, new generation, restore downstream, re-read."""
        self.stats.rewinds += 1
        self.store.discard()
        self.buffer.clear()
        for held in (self.sink, self.dead):
            if held is not None:
                held.discard()
        self.log.abort_open()
        snap = self.aligner.rewind()
        faults.crash_point("task.rewind")
        self._new_generation(self.stats.generation + 1, snap.version)
        self._announce(snap.version)
        self._seek_all(self.aligner.resume_offsets())
        self.version = self.aligner.version
        self._take_aligned_checkpoints()   # R9

    def _run_unaligned(self) -> None:
        tracker = self.tracker
        while not tracker.finished():
            batch = self.consumer.poll(self.c.poll_records, 0.2)
            for r in batch:
                msg = wire.decode_channel(r.value, topic=r.topic, partition=r.partition,
                                          offset=r.offset)
                c = (r.topic, r.partition)
                if type(msg) is wire.Envelope:
                    self._process(msg, r.topic, r.partition, r.offset)
                    tracker.on_data(c, r.offset)
                elif type(msg) is wire.Marker:
                    tracker.on_marker(c, r.offset, msg.producer_id, msg.version)
                else:
                    tracker.on_other(c, r.offset)
            self._since_commit += len(batch)
            if batch:
                self._send_output()
                faults.crash_point("task.mid_version")
            if self._commit_due():
                self._checkpoint(tracker.inputs(), ())
        self._end_run(tracker.inputs())

    # ------------------------------------------------------------------ processing

    def _process(self, msg: wire.Envelope, topic: str, partition: int, offset: int) -> None:
        try:
            value = FORMATS["msgpack"][1](msg.value)
            outs = self.chain.run(msg.key, value)
            if outs:
                key = decode_key(msg.key) if self.sink is not None else None  # only sinks need it
                self._emit(key, msg.key, outs, msg.timestamp)
        except Exception as exc:
            if not isinstance(exc, UserFunctionError) and isinstance(exc, EosError):
                raise  # the runtime's own failure, not the user's function
            self._user_error(exc, topic, partition, offset,
                             None if msg.key is None else repr(decode_key(msg.key)),
                             _safe_repr(msg.value), msg.timestamp)
        self.stats.processed += 1

    def _emit(self, key: Any, key_bytes: bytes | None, outs: list[Any], timestamp: int) -> None:
        if not outs:
            return
        self.stats.emitted += len(outs)
        if self.channels is not None:
            self._shuffle(outs, timestamp)
        else:
            self.sink.write(key, key_bytes, outs, timestamp)

    def _shuffle(self, outs: list[Any], timestamp: int) -> None:
        key_fn = self.stage.shuffle.key_fn
        gen, version, write = self.stats.generation, self.version, self.channels.write
        try:  # every key first: a record whose key_by raises sends nothing downstream
            keys = [encode_key(key_fn(value)) for value in outs]
        except Exception as exc:
            raise UserFunctionError(f"key_by function raised {type(exc).__name__}: {exc}") from exc
        for kb, value in zip(keys, outs):
            write(gen, version, kb, [value], timestamp)

    def _user_error(self, exc: Exception, topic: str, partition: int, offset: int,
                    key: str | None, value: str | None, timestamp: int) -> None:
        """A user function raised on a record: stop the task there, or with dead letters
        on, record the record and the error as output of the open version and go on."""
        if self.dead is None:
            raise self._failed(topic, partition, offset, exc) from exc
        cause = exc.__cause__ if isinstance(exc, UserFunctionError) and exc.__cause__ else exc
        self.dead.write(None, None, [{
            "job": self.plan.name, "task": self.id, "topic": topic, "partition": partition,
            "offset": offset, "error": f"{type(cause).__name__}: {cause}", "key": key,
            "value": value}], timestamp)
        self.stats.dead_letters += 1

    def _failed(self, topic: str, partition: int, offset: int, exc: Exception) -> TaskFailed:
        cause = exc if isinstance(exc, UserFunctionError) else UserFunctionError(
            f"{type(exc).__name__}: {exc}")
        return TaskFailed(f"task {self.id} stopped at topic={topic!r} partition={partition} "
                          f"offset={offset}: {cause}; nothing past this record was committed")

    # ------------------------------------------------------------------ checkpoint

    def _checkpoint(self, inputs: tuple[wire.InputPosition, ...],
                    fences: tuple[wire.ProducerFence, ...]) -> None:
        gen, version, log = self.stats.generation, self.version, self.log
        ranges: tuple[wire.OutputRange, ...] = ()
        # 1. flush output
        if self.channels is not None:
            self.channels.flush()
        held = [w for w in (self.sink, self.dead) if w is not None]
        if held:  # into the change log's transaction (Kafka), or appended now (local log)
            counts = [(w.topic, w.produce_into(log.producer)) for w in held]
            if not log.transactional and any(c for _, c in counts):
                report = log.producer.flush()
                ranges = tuple(wire.OutputRange(topic, p, report[tp] - n + 1, report[tp])
                               for topic, c in counts for p, n in sorted(c.items())
                               for tp in [TopicPartition(topic, p)])
        faults.crash_point("task.checkpoint.after_output_flush")
        # 2. change-log records of the staged state
        staged = self.store.staged()
        log.changes(version, staged)
        faults.crash_point("task.checkpoint.before_commit")
        # 3. the commit record: the commit point
        outputs = self.channels.output_seqs() if self.channels is not None else ()
        offset, _ = log.commit(wire.ChangeLogCommit(gen, version, outputs, inputs, fences, ranges))
        faults.crash_point("task.checkpoint.after_commit")
        # 4. the RocksDB batch with the checkpoint data
        self.store.commit(wire.CheckpointData(offset, gen, version))
        faults.crash_point("task.checkpoint.after_store")
        # 5. markers downstream
        if self.channels is not None and self.eos:
            self.channels.markers(gen, version)
        self.stats.checkpoints += 1
        self.version = version + 1
        self._since_commit = 0
        self._last_commit = time.monotonic()

    def _end_run(self, inputs: tuple[wire.InputPosition, ...]) -> None:
        """The run's last checkpoint, of version ``run_end``. Exactly-once sends its
        markers at step 5 like any checkpoint; at-least-once sends only these."""
        self.version = self.run_end
        self._checkpoint(inputs, ())
        if self.channels is not None and not self.eos:
            self.channels.markers(self.stats.generation, self.run_end)


def _text(data: bytes | None) -> str | None:
    """Raw bytes for a dead letter: UTF-8 where they are, escapes where not."""
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def _safe_repr(raw: bytes | None) -> str | None:
    """A channel value as Python shows it (it was msgpack between stages)."""
    if raw is None:
        return None
    try:
        return repr(FORMATS["msgpack"][1](raw))
    except Exception:
        return repr(raw)


def _sweep_stale_stores(base: Path) -> None:
    """Remove fallback stores of attempts that died before removing their own (a killed
    attempt beside a zombie): their LOCK is free once no process holds the store."""
    import fcntl

    for stale in base.parent.glob(f"{base.name}.attempt-*"):
        try:
            with open(stale / "LOCK", "a+b") as lock:
                fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except FileNotFoundError:
            pass
        except OSError:
            continue  # still open in a live process
        shutil.rmtree(stale, ignore_errors=True)
