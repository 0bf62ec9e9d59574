"""The committer: the one owner of a task's checkpoint steps, generation, store and writers.

It recovers the task (``changelog.recover`` over the pure fold), makes each new
generation durable before anything is emitted (invariant 5), announces it downstream
(``runs.announcement``), takes checkpoints in their fixed order, and rewinds. It decides
nothing about *when*: the input policy or the source side says that, the loop asks.

Checkpoint steps (SEP-10 3.3-3.9; Quix Streams' numbered commit; docs/protocol.md):

    1. flush output: the channels, and the sink output as its output mode says
       (``output_modes``: into the open transaction, one held append whose ranges the
       commit record lists, or a flush of what streamed)
    2. change-log records of the staged state changes; or, where C8 says the log is
       long enough, a snapshot of the whole state (``protocol/recovery.py`` C7-C9),
       whose commit carries the output ranges forward
    3. the commit record, sealed (flush, or the Kafka transaction's commit): THE commit point
    4. the RocksDB batch: staged state + checkpoint data
    5. marker fan-out to every channel, where the guarantee sends markers at every
       checkpoint (G1; else ``end_run`` sends the run's end), handed on unacknowledged
       but for the run's end (``runs.markers_awaited``: a restart sends its last marker
       again; nothing restarts a task that ended its run); after a snapshot, the log
       below it deleted (C9)
    6. a source task's bookkeeping (its topic or file-system checkpoint store, its
       used-up Startpoints deleted), then the checkpoint listeners (``joblog/listeners.py``),
       after the commit point and not atomic with it: a crash before them skips the
       call, a retry may repeat positions
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from .. import faults
from ..joblog.changelog import (
    ChangeLogWriter,
    Recovered,
    catch_up,
    cut_below_snapshot,
    fence_id,
    own_ranges,
    recover,
)
from ..joblog.listeners import Listeners
from ..plan import JobPlan, StagePlan
from ..protocol import wire
from ..protocol.recovery import (
    SNAPSHOT_MIN_RECORDS,
    carried_ranges,
    next_generation,
    snapshot_due,
)
from ..protocol.runs import Guarantee, announcement, markers_awaited, run_end, step_markers
from ..state import TaskStore
from ..transport import PendingProducer, TopicPartition, Transport
from .metrics import CheckpointMetrics
from .output_modes import output_for
from .outputs import ChannelFanout, ChannelWriter, SinkWriter
from .stats import TaskStats

__all__ = ["Committer", "fence_id", "start_writer_producer", "TRANSACTION_CHUNK"]

#: Exactly-once sink output held per writer before it goes into the open transaction.
#: Below it the output waits for the checkpoint, so at a moderate rate a transaction is
#: open only while a checkpoint commits: a SIGKILL then leaves none for the broker to
#: abort (the successor's fence takes one round trip, not librdkafka's 500 ms retries),
#: and no task's open transaction holds back the last stable offset of the output
#: partitions it shares with the others (a restarted task's catch-up commits are read at
#: once, not at the others' next commit). Once a chunk has gone into the version's
#: transaction, those reasons are gone until its commit, and what follows joins it as it
#: is made: a burst's output is not held in memory, nor sent all at the checkpoint.
TRANSACTION_CHUNK = 32_768


def start_writer_producer(transport: Transport, plan: JobPlan, task_id: int,
                          guarantee: Guarantee) -> PendingProducer:
    """The change-log writer's producer, started: fenced or plain, as the guarantee says
    (``Guarantee.fenced_writer``, G3)."""
    return transport.start_producer(fence_id(plan.name, task_id) if guarantee.fenced_writer
                                    else None)


class Committer:
    def __init__(self, transport: Transport, plan: JobPlan, stage: StagePlan, task_id: int,
                 run: int, store: TaskStore, channels: ChannelWriter | ChannelFanout | None,
                 sinks: Sequence[SinkWriter], dead: SinkWriter | None, stats: TaskStats,
                 pending: PendingProducer | None = None,
                 transaction_chunk: int = TRANSACTION_CHUNK, *, guarantee: Guarantee,
                 snapshot_min_records: int = SNAPSHOT_MIN_RECORDS,
                 on_generation: Callable[[], None] | None = None,
                 on_pending: Callable[[int, int, int], None] | None = None) -> None:
        self.transport, self.plan, self.stage, self.run = transport, plan, stage, run
        self.store, self.channels, self.stats = store, channels, stats
        self.guarantee = guarantee
        # How sink output and dead letters leave: chosen here once (G4 x the log's kind).
        self.output = output_for(guarantee.output_mode(transport.supports_transactions),
                                 [*sinks, *([dead] if dead is not None else [])],
                                 transaction_chunk)
        # Who gets markers at step 5 (G1): the channels, or nobody until the run's end.
        self.step_markers = channels if step_markers(guarantee, plan.event_time) else None
        self.task_id = task_id
        self.changelog_tp = TopicPartition(plan.changelog_topic, task_id)
        self.fence_id = fence_id(plan.name, task_id)
        # The first generation's producer, on its way while the task opens and recovers
        # (``Transport.start_producer``); without one, a generation starts its own.
        self._pending = pending
        self.log: ChangeLogWriter | None = None
        self.generation = 0
        # Called once a new generation is registered and written (the task's progress
        # file notes it at once: experiments draw generations on their timelines).
        self.on_generation = on_generation
        self._sealed: dict[TopicPartition, int] = {}   # the last commit's offsets
        # The sinks' records committed (stats.sink_records), and the dead letters
        # (stats.dead_letters), alike: what the writers produced since the last commit or
        # rewind joins the count when the next commit succeeds (a rewound or retried
        # record is counted once). Before the commit, ``on_pending(version, sink, dead)``
        # notes the counts it would make (the progress file), so a retry knows them if
        # the commit happened.
        self._sinks = list(sinks)
        self._dead = [dead] if dead is not None else []
        self._sink_base = self._dead_base = 0
        self.on_pending = on_pending
        self.metrics = CheckpointMetrics()
        self.listeners = Listeners(plan.listeners, plan.name, task_id, plan, transport)
        # The change log's bound (C8): only a fenced writer cuts its log; a local-log
        # exactly-once sink's snapshot carries its output ranges forward (C9).
        self.snapshots = guarantee.fenced_writer
        self._carry_ranges = guarantee.output_ranges(transport.supports_transactions)
        self.snapshot_min_records = snapshot_min_records
        self._log_low = 0                  # the change log's first offset, as last known
        self._log_end = 0                  # and its end after this task's last write
        self._last_snapshot = 0            # changes in this task's last snapshot
        # C8 sizes the log in changes: a batch record counts as many as it holds. What
        # this generation's batches hold beyond one a record, since the last cut (the log
        # it inherited counts a record as one: its first snapshot comes after
        # ``min_records``, its last snapshot's size being unknown).
        self._batched = 0
        # The event-time watermark of the last commit (W2, W4): what a restart's marker
        # repeats, and the floor a rewind goes back to.
        self.watermark: int | None = None

    def send_output(self) -> None:
        """Output made so far goes out now. The channels' always: downstream may read it
        before the marker (what makes restores necessary). The sink's and the dead
        letters' as the output mode says (``output_modes``): streamed as made, joining
        the open transaction once a chunk is held, or held for the checkpoint."""
        if self.channels is not None:
            self.channels.send()
        if self.log is not None:
            self.output.after_batch(self.log)

    # ------------------------------------------------------------------ start

    def recover(self) -> Recovered:
        """Recover, register a new generation, read what a zombie committed meanwhile, and
        continue the output sequences from the last commit."""
        recovered = recover(self.transport, self.changelog_tp, self.store)
        generation = next_generation(recovered.generation,
                                     self.transport.fence_generation(self.fence_id))
        start = self._new_generation(generation, recovered.version)
        catch_up(self.transport, self.changelog_tp, self.store, recovered, recovered.read_to, start)
        self._log_low, self._log_end = self.transport.watermarks(self.changelog_tp)
        self.stats.replayed_changes = recovered.replayed
        self.stats.rebuilt_store = recovered.from_log
        self.stats.restored_version = recovered.version
        self.watermark = recovered.commit.watermark if recovered.commit is not None else None
        if self.channels is not None:
            self.channels.continue_from(recovered.commit)
        return recovered

    def _new_generation(self, generation: int, restored_version: int) -> int:
        """Register and write a new generation before anything else (invariant 5); from now
        on a zombie of an older one cannot write to the change log. Returns the offset of
        the generation-start record.

        A rewind's new generation (``self.log`` open) keeps a transactional producer: on
        Kafka the fence is that producer's epoch, and a new one's init_transactions would
        fence whatever instance registered since, so a zombie's rewind would take the task
        back from its successor. Kept, a fenced producer fails the generation's start
        (ProducerFenced) instead. Where each generation registers with the log (the local
        log), a new writer registers it, and is refused once a newer one registered."""
        if self.log is not None and self.log.transactional:
            self.log.generation = generation
        else:
            if self.log is not None:
                self.log.close()
            pending, self._pending = self._pending, None
            if pending is None:
                pending = start_writer_producer(self.transport, self.plan, self.task_id,
                                                self.guarantee)
            self.log = ChangeLogWriter(self.changelog_tp, pending.take(generation), generation,
                                       fenced=self.guarantee.fenced_writer)
        offset = self.log.start_generation(restored_version)
        self.generation = self.stats.generation = generation
        if self.channels is not None:
            self.channels.generation = generation
        if self.on_generation is not None:
            self.on_generation()
        return offset

    def announce(self, restored_version: int) -> None:
        """What a (re)started generation tells downstream, in order (``runs.announcement``)."""
        faults.crash_point("task.recovery")
        if self.channels is None:
            return
        for kind, version in announcement(self.guarantee, restored_version, self.run):
            if kind == "marker":
                self.channels.markers(self.generation, version, self.watermark)
            else:
                self.channels.restore(self.generation, version)

    # ------------------------------------------------------------------ checkpoint

    def checkpoint(self, version: int, inputs: tuple[wire.InputPosition, ...],
                   fences: tuple[wire.ProducerFence, ...] = (),
                   alignment: dict[str, float | None] | None = None,
                   recorded: Callable[[], None] | None = None,
                   watermark: int | None = None, idle: bool = False) -> None:
        """The five steps. ``alignment``: what the input policy measured of this
        checkpoint's alignment (``metrics.METRICS``), recorded with the steps' own times.
        ``watermark``: the task's event-time watermark at ``version`` (W2, W4), in the
        commit record and on the markers (W3); ``idle``: on the markers (W7).
        ``recorded``: a source task's after-commit bookkeeping (``SourceSide.recorded``:
        the topic or file-system store, used-up Startpoints), done before the listeners
        are told."""
        log = self.log
        assert log is not None
        cpu_started = time.thread_time()
        started = time.monotonic()
        # 1. flush output
        if self.channels is not None:
            self.channels.flush()
        ranges = self.output.at_checkpoint(log)
        flushed = time.monotonic()
        faults.crash_point("task.checkpoint.after_output_flush")
        # 2. change-log records of the staged state, or a snapshot (C7-C9)
        snapshot = self._snapshot_ranges(ranges)
        if snapshot is None:
            written, changes, changelog_bytes = log.changes(version, self.store.staged_by_store())
        else:
            ranges = snapshot
            written, changes, changelog_bytes = log.snapshot(version, self.store)
        self._batched += changes - written
        logged = time.monotonic()
        produced = sum(w.produced for w in self._sinks)
        sink_records = self.stats.sink_records + produced - self._sink_base
        lettered = sum(w.produced for w in self._dead)
        dead_letters = self.stats.dead_letters + lettered - self._dead_base
        if (self._sinks or self._dead) and self.on_pending is not None:
            self.on_pending(version, sink_records, dead_letters)
        faults.crash_point("task.checkpoint.before_commit")
        # 3. the commit record: the commit point
        outputs = self.channels.output_seqs() if self.channels is not None else ()
        record = wire.ChangeLogCommit(self.generation, version, outputs, inputs, fences, ranges,
                                      watermark)
        committing = time.monotonic()
        offset, self._sealed = log.commit(record)
        committed = time.monotonic()
        self.stats.sink_records, self._sink_base = sink_records, produced
        self.stats.dead_letters, self._dead_base = dead_letters, lettered
        # a transaction's commit marker takes an offset too
        self._log_end = offset + (2 if log.transactional else 1)
        faults.crash_point("task.checkpoint.after_commit")
        # 4. the RocksDB batch with the checkpoint data
        self.store.commit(wire.CheckpointData(offset, self.generation, version))
        stored = time.monotonic()
        self.watermark = watermark
        faults.crash_point("task.checkpoint.after_store")
        # 5. markers downstream (G1: else only the run's end, ``end_run``)
        if self.step_markers is not None:
            self.step_markers.markers(self.generation, version, watermark,
                                      wait=markers_awaited(version, self.run), idle=idle)
        if snapshot is not None:
            self._cut(offset - written - 1, version, written, changes)
        marked = time.monotonic()
        self.stats.checkpoints += 1
        # 6. listeners, once the source side recorded the commit (its store; its
        # Startpoints deleted): a listener sees the checkpoint's consequences.
        if recorded is not None:
            recorded()
        self.listeners.checkpointed({(i.topic, i.partition): i.offset for i in inputs})
        self.metrics.record(duration_ms=(time.monotonic() - started) * 1000,
                            flush_ms=(flushed - started) * 1000,
                            changelog_ms=(logged - flushed) * 1000,
                            commit_ms=(committed - committing) * 1000,
                            store_ms=(stored - committed) * 1000,
                            markers_ms=(marked - stored) * 1000,
                            cpu_ms=(time.thread_time() - cpu_started) * 1000,
                            changelog_bytes=changelog_bytes, **(alignment or {}))

    def _snapshot_ranges(self, ranges: tuple[wire.OutputRange, ...]
                         ) -> tuple[wire.OutputRange, ...] | None:
        """Whether this checkpoint writes a snapshot (C8), and if so the output ranges
        its commit record carries (C9); None: not now."""
        if not self.snapshots or not snapshot_due(self._log_end - self._log_low + self._batched,
                                                  self._last_snapshot,
                                                  self.snapshot_min_records):
            return None
        if not self._carry_ranges:
            return ranges
        carried = carried_ranges([*own_ranges(self.transport, self.changelog_tp, self._log_end),
                                  *ranges])
        if carried is None:   # too many to carry (C9): this task's log grows from now on
            self.snapshots = False
        return carried

    def _cut(self, base: int, version: int, written: int, changes: int) -> None:
        """C9: the snapshot's commit is sealed; the log below its base goes."""
        self._last_snapshot = changes
        expected = wire.ChangeLogBase(self.generation, version)
        if cut_below_snapshot(self.transport, self.changelog_tp, base, expected):
            self._log_low = base
            self._batched = changes - written
            self.stats.changelog_cuts += 1
        faults.crash_point("task.checkpoint.after_cut")

    def end_run(self, inputs: tuple[wire.InputPosition, ...],
                recorded: Callable[[], None] | None = None,
                watermark: int | None = None) -> None:
        """The run's last checkpoint, of version ``run_end``. Exactly-once sends its
        markers at step 5 like any checkpoint; at-least-once sends only these."""
        end = run_end(self.run)
        self.checkpoint(end, inputs, recorded=recorded, watermark=watermark)
        if self.channels is not None and self.step_markers is None:
            self.channels.markers(self.generation, end, watermark)
        self.await_readable()

    def await_readable(self) -> None:
        """Kafka writes a transaction's commit markers after commit_transaction returns; a
        read_committed reader sees the output once each partition's last stable offset has
        passed it. Waiting here at the run's end makes "the run ended" mean "its output
        is readable" (a reader started the moment eos run returns saw too little)."""
        if self.log is None or not self.log.transactional:
            return
        deadline = time.monotonic() + 30
        for tp, last in self._sealed.items():
            while self.transport.watermarks(tp)[1] <= last and time.monotonic() < deadline:
                time.sleep(0.01)

    # ------------------------------------------------------------------ rewind

    def rewind(self, version: int) -> None:
        """SEP-10 4.x: discard the open version, new generation, restore downstream."""
        assert self.log is not None
        self.stats.rewinds += 1
        # Everything the task holds of the open version goes: staged state, held sink
        # output and dead letters, the channels' pending batches (which the restore
        # commands would otherwise send first, or a later write under the new generation).
        self.store.discard()
        self.output.discard()
        self._sink_base = sum(w.produced for w in self._sinks)   # aborted: not counted
        self._dead_base = sum(w.produced for w in self._dead)
        if self.channels is not None:
            self.channels.discard()
        self.log.abort_open()
        faults.crash_point("task.rewind")
        self._new_generation(self.generation + 1, version)
        self.announce(version)

    def close(self) -> None:
        self.listeners.close()
        if self._pending is not None:
            self._pending.close()
        if self.log is not None:
            self.log.close()
