"""A channel task's input policy: exactly-once (``Aligned``) or at-least-once (``Unaligned``).

Two policies behind one interface (``InputPolicy``), as Flink's barrier handler and
barrier tracker. The loop hands every record it reads to ``on_record`` and carries out
the ``Action`` it gets back; a policy never calls the committer or the consumer. The
rules themselves are pure, in ``protocol/aligner.py`` and ``protocol/tracker.py``; a
policy adds what needs I/O or a clock: the early-arrival buffer (exactly-once) and the
commit timer (at-least-once).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol, cast

from .. import clock
from ..clock import SYSTEM, Clock
from ..protocol import wire
from ..protocol.aligner import Aligner, Channel, Decision, RestoreOutcome, Snapshot
from ..protocol.runs import AT_LEAST_ONCE, checkpoint_needed, grid_line
from ..protocol.tracker import Tracker
from .buffer import EarlyArrivalBuffer
from .stats import TaskStats

__all__ = ["Action", "Aligned", "InputPolicy", "Unaligned", "CommitTimer", "Checkpoint"]

#: A checkpoint to take: its version, input positions, producer fences and watermark (W4)
Checkpoint = tuple[int, tuple[wire.InputPosition, ...], tuple[wire.ProducerFence, ...],
                   int | None]
Data = wire.Envelope | wire.DataBatch
Released = tuple[Data, str, int, int]


class Action(enum.Enum):
    """What the loop does with a record ``on_record`` was given."""
    PROCESS = 1     # run the record through the stage's steps now
    NOTHING = 2     # kept, dropped or noted: read on
    ALIGNING = 3    # a marker came in, not every producer's yet (a crash point)
    CHECKPOINT = 4  # checkpoints are due: ask ``checkpoints``
    REWIND = 5      # the open version holds invalid work: rewind, re-read


class CommitTimer:
    """When a timer checkpoint is due: at each line of the commit grid (the multiples of
    ``interval`` on the wall clock, ``protocol/runs.grid_line``), or once ``every``
    records came since the last checkpoint.

    On a grid, not an interval after the last checkpoint: every task of a job keeps the
    same schedule, so the markers of one version leave all sources at about the same
    moment, and how long a checkpoint takes does not push the next one back.

    The grid gives the *phase*; *when* is timed on the monotonic clock: at each reset the
    time to the grid's next line is read off the wall clock and the deadline set that far
    ahead on the monotonic one. A step of the wall clock (NTP) after a reset therefore
    moves no deadline, and at the next reset it moves the phase by less than an interval:
    one checkpoint comes early or late. Timed on the wall clock, a step back of 600 s
    left the next line 600 s away (issue 22). ``clock``: the clocks read
    (``eos_runtime.clock``; tests pass their own)."""

    def __init__(self, interval: float, every: int, *, clock: Clock = SYSTEM) -> None:
        self.every = every
        self.interval_ms = max(1, round(interval * 1000))
        self.clock = clock
        self.since = 0
        self.line = 0           # the grid's line (wall-clock ms) the timer is due for
        self.deadline = 0       # when, on the monotonic clock (ms, as the grid)
        self.reset()

    def count(self, n: int) -> None:
        self.since += n

    def fired(self) -> bool:
        """The timer (not the count) made a checkpoint due."""
        return self._reached(_ms(self.clock.monotonic()))

    def _reached(self, mono_ms: int) -> bool:
        # A millisecond early counts: the deadline is the wall clock's and the monotonic
        # clock's readings each rounded to whole ms, which can put it one ms past the
        # line (a hypothesis example: a loop looking exactly at the line found nothing
        # due).
        return mono_ms >= self.deadline - 1

    def due(self) -> bool:
        if self.every and self.since >= self.every:
            return True
        return self.fired()

    def line_ms(self) -> int:
        """The grid's line a checkpoint taken now takes its version's time from (S4): the
        wall clock's latest line, or the line the timer was due for once the monotonic
        clock reached it, if the wall clock is not there yet (NTP slewing it, or a step
        back: S5 in ``protocol/runs.SourceVersions`` then keeps the version on course)."""
        line = grid_line(_ms(self.clock.wall()), self.interval_ms)
        return max(line, self.line) if self.fired() else line

    def reset(self) -> None:
        """A checkpoint was taken: the next is due at the grid's next line after now."""
        wall, mono = _ms(self.clock.wall()), _ms(self.clock.monotonic())
        line = grid_line(wall, self.interval_ms) + self.interval_ms
        if line == self.line and self._reached(mono):
            # the monotonic clock reached this line before the wall clock did: it is the
            # line just checkpointed, not the next one
            line += self.interval_ms
        self.since = 0
        self.line = line
        self.deadline = mono + line - wall


def _ms(now: float) -> int:
    return round(now * 1000)


class InputPolicy(Protocol):
    """What the channel loop asks of an input policy; ``Aligned`` and ``Unaligned`` both
    implement all of it."""

    @property
    def version(self) -> int:
        """The open version: what the records processed now belong to."""

    def resume_offsets(self) -> dict[Channel, int | None]:
        """Where to read each channel from now (after a start or a rewind)."""

    def on_record(self, c: Channel, offset: int, msg: wire.ChannelRecord, raw: bytes,
                  timestamp: int = 0) -> Action:
        """Take one channel record in; what the loop does with it."""

    def checkpoints(self) -> Iterator[Checkpoint]:
        """The checkpoints due now, each as ``(version, inputs, fences, watermark)``; after
        each one is taken, ``released()`` yields the messages it let through."""

    @property
    def watermark(self) -> int | None:
        """The task's event-time watermark as of its latest checkpoint (W4, T4)."""

    @property
    def idle(self) -> bool:
        """Every input lane idle as of its latest checkpoint (W7): its markers say so."""

    def alignment(self, now: float) -> dict[str, float | None]:
        """What the checkpoint about to be taken waited for (its metrics)."""

    def released(self) -> Iterator[Released]:
        """Messages the last checkpoint let through, to process (or drop)."""

    def seeks(self) -> dict[Channel, int | None] | None:
        """Where every channel must be read from, if some must be read again (R8)."""

    def rewind(self) -> int:
        """Back to the last checkpoint; returns its version."""

    def finished(self) -> bool:
        """The run is over for this task."""

    def end_inputs(self) -> tuple[wire.InputPosition, ...] | None:
        """The inputs of the run-end checkpoint the loop takes itself, or None when the
        policy's own checkpoints ended the run."""

    def close(self) -> None:
        """Let go of what the policy holds open."""


class Aligned:
    """Exactly-once: the aligner and its early-arrival buffer."""

    def __init__(self, channels: Sequence[Channel], producers: tuple[int, ...], run_end: int,
                 commit: wire.ChangeLogCommit | None, buffer_dir: Path, buffer_max_bytes: int,
                 stats: TaskStats) -> None:
        snapshot = (Snapshot(commit.version, commit.inputs, commit.fences, commit.watermark)
                    if commit is not None else None)
        self.aligner = Aligner(channels, producers, snapshot=snapshot)
        self.buffer = EarlyArrivalBuffer(buffer_dir, buffer_max_bytes)
        self.channels = list(channels)
        self.index = {c: i for i, c in enumerate(channels)}
        self.run_end = run_end
        self.stats = stats
        self._seeks: dict[Channel, int] = {}
        # (when, how late) the first marker since the last checkpoint was read
        self._first_marker: tuple[float, float | None] | None = None

    @property
    def version(self) -> int:
        return self.aligner.version

    @property
    def watermark(self) -> int | None:
        return self.aligner.watermark

    @property
    def idle(self) -> bool:
        return self.aligner.idle

    def resume_offsets(self) -> dict[Channel, int | None]:
        return self.aligner.resume_offsets()

    def on_record(self, c: Channel, offset: int, msg: wire.ChannelRecord, raw: bytes,
                  timestamp: int = 0) -> Action:
        al = self.aligner
        # A batch is one message to the aligner: its messages share producer, generation
        # and version, all the rules look at; its sequence number is its last message's.
        if type(msg) is wire.DataBatch:
            return self._data(c, offset, msg.producer_id, msg.generation, msg.version,
                              msg.last_seq, raw)
        if type(msg) is wire.Envelope:
            return self._data(c, offset, msg.producer_id, msg.generation, msg.version,
                              msg.seq, raw)
        if type(msg) is wire.Marker:
            if self._first_marker is None:
                late = (max(0.0, clock.wall() * 1000 - timestamp) if timestamp > 0
                        else None)
                self._first_marker = (time.monotonic(), late)
            if al.on_marker(c, offset, msg.producer_id, msg.generation, msg.version,
                            msg.watermark, msg.idle):
                return Action.CHECKPOINT
            return Action.ALIGNING
        assert type(msg) is wire.Restore
        outcome = al.on_restore(c, offset, msg.producer_id, msg.generation, msg.version)
        return Action.REWIND if outcome == RestoreOutcome.REWIND else Action.NOTHING

    def _data(self, c: Channel, offset: int, producer: int, generation: int, version: int,
              seq: int, raw: bytes) -> Action:
        d = self.aligner.on_data(c, offset, producer, generation, version, seq,
                                 room=self.buffer.fits(len(raw)))
        if d == Decision.PROCESS:
            return Action.PROCESS
        if d == Decision.BUFFER:
            self.buffer.append(version, self.index[c], offset, raw)
            self.stats.buffered += 1
            self.stats.max_buffer_bytes = max(self.stats.max_buffer_bytes,
                                              self.buffer.high_water)
        elif d == Decision.OVERFLOW:
            self.stats.overflowed += 1
        elif d == Decision.STALE:
            self.stats.stale += 1
        else:
            self.stats.fenced += 1
        return Action.NOTHING

    def checkpoints(self) -> Iterator[Checkpoint]:
        """Every checkpoint alignment allows now (R2, R2a, R9): the caller takes each one,
        then processes ``released()`` before asking for the next."""
        al = self.aligner
        while al.aligned():
            snap = al.checkpoint()
            yield snap.version, snap.inputs, snap.fences, snap.watermark
            self._seeks.update(al.rereads())

    def alignment(self, now: float) -> dict[str, float | None]:
        """The metrics of the checkpoint about to be taken; the next one starts afresh (a
        checkpoint that follows another with no marker between waited for nothing)."""
        first, self._first_marker = self._first_marker, None
        return {"alignment_ms": (now - first[0]) * 1000 if first else None,
                "start_delay_ms": first[1] if first else None,
                "buffered_bytes": self.buffer.size}

    def released(self) -> Iterator[Released]:
        """Buffered messages of the versions now open, to process (or drop: fenced)."""
        al = self.aligner
        for ci, offset, raw in self.buffer.drain_through(al.version):
            msg = wire.decode_channel(raw)
            assert type(msg) is wire.DataBatch or type(msg) is wire.Envelope
            topic, partition = cast(tuple[str, int], self.channels[ci])
            d = al.on_release((topic, partition), offset, msg.producer_id, msg.generation,
                              msg.version)
            if d == Decision.PROCESS:
                yield msg, topic, partition, offset
            else:
                self.stats.fenced += 1

    def seeks(self) -> dict[Channel, int | None] | None:
        """R8: where every channel must be read from, if some must be read again."""
        if not self._seeks:
            return None
        self.stats.rereads += len(self._seeks)
        out: dict[Channel, int | None] = {**self.aligner.read_positions(), **self._seeks}
        self._seeks = {}
        return out

    def rewind(self) -> int:
        self.buffer.clear()
        self._seeks = {}
        return self.aligner.rewind().version

    def finished(self) -> bool:
        return self.aligner.reached(self.run_end)

    def end_inputs(self) -> tuple[wire.InputPosition, ...] | None:
        return None   # the aligned checkpoint of run_end ended the run already

    def close(self) -> None:
        self.buffer.close()


class Unaligned:
    """At-least-once: the tracker and the commit timer."""

    def __init__(self, channels: Sequence[Channel], producers: tuple[int, ...], run_end: int,
                 commit: wire.ChangeLogCommit | None, timer: CommitTimer,
                 first_version: int) -> None:
        self._lanes = (list(channels), producers, run_end)
        self.tracker = Tracker(channels, producers, run_end,
                               inputs=commit.inputs if commit is not None else (),
                               watermark=commit.watermark if commit is not None else None)
        self.timer = timer
        self.version = first_version
        self._recorded = commit.inputs if commit is not None else None   # S6
        self._recorded_watermark = commit.watermark if commit is not None else None

    @property
    def watermark(self) -> int | None:
        return self.tracker.watermark

    @property
    def idle(self) -> bool:
        return self.tracker.idle

    def resume_offsets(self) -> dict[Channel, int | None]:
        return dict(self.tracker.resume_offsets())

    def on_record(self, c: Channel, offset: int, msg: wire.ChannelRecord, raw: bytes,
                  timestamp: int = 0) -> Action:
        if type(msg) is wire.DataBatch:
            self.timer.count(len(msg.keys))   # commit_every counts messages, not records
            self.tracker.on_data(c, offset)
            return Action.PROCESS
        self.timer.count(1)
        if type(msg) is wire.Envelope:
            self.tracker.on_data(c, offset)
            return Action.PROCESS
        if type(msg) is wire.Marker:
            self.tracker.on_marker(c, offset, msg.producer_id, msg.version, msg.watermark,
                                   msg.idle)
        else:
            self.tracker.on_other(c, offset)
        return Action.NOTHING

    def checkpoints(self) -> Iterator[Checkpoint]:
        if self.timer.due() and not self.tracker.finished():
            self.timer.reset()
            inputs = self.tracker.inputs()
            if not checkpoint_needed(AT_LEAST_ONCE, inputs, self._recorded):
                return
            version = self.version
            watermark = self.tracker.watermark
            yield version, inputs, (), watermark
            self.version = version + 1
            self._recorded, self._recorded_watermark = inputs, watermark

    def alignment(self, now: float) -> dict[str, float | None]:
        return {}   # no alignment: a timer checkpoint waits for nothing

    def released(self) -> Iterator[Released]:
        return iter(())   # nothing is held back: every message is processed as read

    def seeks(self) -> dict[Channel, int | None] | None:
        return None   # nothing is skipped, so nothing is read again

    def rewind(self) -> int:
        """Back to the last checkpoint's positions (ended lanes included, T3), as a
        restart goes: what came after is read again, duplicating (no action of this
        policy asks for a rewind: nothing it reads invalidates its work)."""
        channels, producers, run_end = self._lanes
        self.tracker = Tracker(channels, producers, run_end, inputs=self._recorded or (),
                               watermark=self._recorded_watermark)   # never going back
        return self.version - 1

    def finished(self) -> bool:
        return self.tracker.finished()

    def end_inputs(self) -> tuple[wire.InputPosition, ...] | None:
        return self.tracker.inputs()

    def close(self) -> None:
        pass   # it holds no file: the tracker and the timer are memory
