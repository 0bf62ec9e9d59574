"""Marker alignment and the version / generation rules of a downstream task (SEP-10).

This module does no I/O. A task feeds it what it reads from its input channels and
acts on the decisions it returns; tests drive it directly (``tests/test_aligner.py``).

Words: a *channel* is one input partition of the task, named by a ``(topic, partition)``
key; a *producer* is an upstream task, named by its producer id; the task knows the
full producer set from the job model. The *open version* is the checkpoint version the
task is building: last committed version + 1.

The rules, each with the SEP-10 section or protocol-notes invariant it implements:

R1  (SEP-10 "Get Messages 2.2") A data message of the open version is processed now; one
    of a later version is buffered until that version opens; one of an earlier version
    is stale (already inside a committed checkpoint) and dropped.
R2  (SEP-10 "Checkpoint Process 3.1-3.2") The task may take checkpoint V once it has seen
    a marker of version >= V from every producer on every channel.
R2a (not in SEP-10) Versions nobody wrote are skipped: once checkpoint V is taken and every
    marker is at M > V, the next open version is the lowest buffered version up to M, or
    M itself. Versions are not consecutive across runs (``protocol/runs.py``), and a run's
    end-of-run marker must close every version below it in one step, not one by one.
R2b (not in SEP-10) A checkpoint of the open version V is named M, the markers' floor,
    when no message waits in a version in (V, M]: taking V and then an empty M at once
    are one checkpoint. Sources send a version's data under their open version and close
    it under the commit grid's line, so without R2b every interval costs a channel task
    two commits. A buffered message a restore voided stays void when released, even once
    a checkpoint past its version pruned that fence (F3).
R3  (invariant 6) A restore command (P, g, V) is remembered as a *fence*: from then on
    every message and marker of P from a generation below g with a version above V is
    dropped. Every fence a producer's restarts caused applies, not only the newest
    (``protocol/fences.py``: a staircase per producer). Fences are part of the checkpoint,
    so they survive the task's own restart.
R4  (SEP-10 "Restoring Checkpoint Process 4.x") If the open version already processed a
    message the new fence invalidates, the task must rewind: discard its staged state and
    buffers, bump its own generation, forward a restore downstream and re-read its
    channels from the last checkpoint. Otherwise the fence alone suffices: the invalid
    messages are still unread or buffered, and are dropped when they come up.
R5  (invariant 7) Markers and restores are idempotent: seeing one again changes nothing.
R6  (SEP-10 "Checkpoint Process 3.5.1", ParentCheckpointMetadata) A checkpoint records,
    per channel and producer, where reading must resume (the first message not yet in
    the checkpoint: the earliest one still buffered, else the read position) and the
    highest marker read *below* that point; markers read past it are read again after a
    restart, so counting them in the checkpoint could close a version before messages
    preceding them were processed.
R7  A restore to a version below the task's last checkpoint is impossible while producers
    only send marker V after committing V; it is reported as a ``ProtocolViolation``
    instead of being guessed around (unless a newer fence makes it redundant: a restore
    read again after the task's own restart, fences F3).
R8  (invariant 8; SEP-10 solution 2 as the overflow of solution 3) The buffer is bounded.
    An early arrival that does not fit (the caller says ``room=False``) is not kept: its
    channel *overflows* from that offset, and every early arrival after it on that
    channel is skipped too (OVERFLOW), while the channel is still read for markers and
    for messages of the open version. A checkpoint's resume point on the channel is at
    most the overflow offset, R2a stops at the lowest skipped version, and once that
    version opens the channel is read again from the overflow offset (``rereads``):
    what was processed meanwhile is then stale, what was skipped is read again. Nothing
    is paused, so a lagging producer's marker always gets through; nothing is lost.
W4  (event time, ``protocol/watermarks.py``) A marker may carry its producer's watermark.
    A checkpoint of V takes the task's watermark: the minimum over lanes of the
    watermark on each lane's latest marker of a version up to V, never lower than the
    last; it is part of the snapshot, and a restore or rewind starts every lane from it.
    W7: a lane whose latest marker up to V is idle is passed over; every lane idle, the
    watermark is the highest they read and the task is idle (``idle``). Idleness is not in
    the snapshot: a restored lane is busy, at the snapshot's watermark, until its next
    marker.
R9  A restored or rewound task may already be aligned (every marker it needs was read
    before its checkpoint's resume point, e.g. the run's last markers): the caller checks
    ``aligned()`` before it waits for input, or no marker will ever come to trigger it.
    R2a applies on restore too: the open version is the markers' floor.

Illegal input (an unknown channel or producer, a checkpoint before alignment) raises
``ProtocolViolation`` and leaves the state unchanged.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import cast

from ..errors import ProtocolViolation
from . import watermarks as wm
from .fences import Fences
from .runs import run_end, run_of
from .wire import InputPosition, ParentCheckpoint, ProducerFence

__all__ = [
    "Decision",
    "RestoreOutcome",
    "ProtocolViolation",
    "Snapshot",
    "Aligner",
]

Channel = Hashable  # in the runtime: a (topic, partition) tuple


class Decision(enum.IntEnum):
    PROCESS = 1   # run the operator on it now (R1)
    BUFFER = 2    # keep it on disk until its version opens (R1)
    STALE = 3     # already inside a committed checkpoint: drop (R1)
    FENCED = 4    # from a generation a restore invalidated: drop (R3)
    OVERFLOW = 5  # early, and the buffer is full: skip, it is read again later (R8)


class RestoreOutcome(enum.IntEnum):
    DUPLICATE = 1  # already known (R5)
    FENCE = 2      # remembered; nothing processed is invalid (R3)
    REWIND = 3     # the open version holds invalid work: rewind (R4)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a checkpoint records about the inputs; restores an ``Aligner`` exactly."""

    version: int
    inputs: tuple[InputPosition, ...]
    fences: tuple[ProducerFence, ...]
    watermark: int | None = None       # the task's event-time watermark at ``version`` (W4)


@dataclass(slots=True)
class _Lane:
    """One producer's messages within one channel."""

    marker: int = 0            # highest marker version read (alignment)
    committed_marker: int = 0  # highest marker version below the resume point (R6)
    committed_watermark: int | None = None   # what that marker said (W4)
    generation: int = 0        # highest generation read
    seq: int = -1              # last sequence number read
    # (offset, version, generation) of this lane's messages waiting in the buffer, in
    # offset order
    buffered: deque[tuple[int, int, int]] = field(default_factory=deque)
    # (offset, version) of markers read since the last checkpoint, to fold in at snapshot
    # and the watermark each carried (W4)
    markers_read: list[tuple[int, int, int | None]] = field(default_factory=list)
    watermark: wm.LaneWatermark = field(default_factory=wm.LaneWatermark)   # W4


class Aligner:
    """The exactly-once alignment policy of one downstream task."""

    def __init__(self, channels: Iterable[Channel], producers: Iterable[int], *,
                 snapshot: Snapshot | None = None) -> None:
        self._channels = list(dict.fromkeys(channels))
        self._producers = sorted(set(producers))
        if not self._channels or not self._producers:
            raise ProtocolViolation("an aligned task needs at least one channel and one producer")
        self._restore(snapshot or Snapshot(0, (), ()))

    # ------------------------------------------------------------------ state

    def _restore(self, snap: Snapshot) -> None:
        self.committed_version = snap.version
        self._open = snap.version + 1
        self._fences = Fences(snap.fences)
        # channel -> [first offset not kept, lowest version not kept] (R8)
        self._overflow: dict[Channel, list[int]] = {}
        self._rereads: dict[Channel, int] = {}
        self.watermark = snap.watermark
        self.idle = False   # W7: every lane was idle at the last checkpoint
        self._lanes: dict[Channel, dict[int, _Lane]] = {
            c: {p: _Lane(watermark=wm.LaneWatermark(snap.watermark)) for p in self._producers}
            for c in self._channels}
        self._read_pos: dict[Channel, int | None] = {c: None for c in self._channels}
        self._resume: dict[Channel, int | None] = {c: None for c in self._channels}
        for pos in snap.inputs:
            c = (pos.topic, pos.partition)
            if c not in self._lanes:
                raise ProtocolViolation(f"snapshot names channel {c}, not an input of this task")
            self._read_pos[c] = self._resume[c] = pos.offset
            for parent in pos.parents:
                lane = self._lane(c, parent.producer_id)
                lane.marker = lane.committed_marker = parent.version
                lane.generation = parent.generation
                lane.seq = parent.seq
                # W4: a marker before the resume point is not read again; what it said is
                # kept with it (it may be of a version above the snapshot's: R2a, R6)
                lane.committed_watermark = parent.watermark
                lane.watermark.marker(parent.version, parent.watermark)
        # lowest generation of each producer whose messages the open version processed (R4)
        self._open_generations: dict[int, int] = {}
        self._open = self._next_open(snap.version)   # R2a, R9
        self._snapshot = snap

    @property
    def version(self) -> int:
        """The open version: the one being built."""
        return self._open

    @property
    def snapshot(self) -> Snapshot:
        """The last checkpoint's snapshot (what a restart or a rewind goes back to)."""
        return self._snapshot

    def resume_offsets(self) -> dict[Channel, int | None]:
        """Where to read each channel from after a restart or rewind (None: from the start
        position the job chose for a fresh task)."""
        return {c: self._resume[c] for c in self._channels}

    def read_positions(self) -> dict[Channel, int | None]:
        """Where reading each channel goes on (what the caller fed so far)."""
        return dict(self._read_pos)

    def fence_of(self, producer: int) -> tuple[int, int] | None:
        """The newest fence of ``producer`` (``fences_of`` gives them all)."""
        stairs = self._fences.of(producer)
        return stairs[-1] if stairs else None

    def fences_of(self, producer: int) -> tuple[tuple[int, int], ...]:
        return self._fences.of(producer)

    def rereads(self) -> dict[Channel, int]:
        """Channels to read again from the given offset, now that the lowest version they
        skipped is open (R8); asking clears them, the caller must seek."""
        out, self._rereads = self._rereads, {}
        return out

    def _lane(self, channel: Channel, producer: int) -> _Lane:
        try:
            return self._lanes[channel][producer]
        except KeyError:
            if channel not in self._lanes:
                raise ProtocolViolation(
                    f"channel {channel!r} is not an input of this task") from None
            raise ProtocolViolation(f"producer {producer} is not upstream of this task "
                                    f"(known: {self._producers})") from None

    def _fenced(self, producer: int, generation: int, version: int) -> bool:
        return self._fences.fenced(producer, generation, version)

    # ------------------------------------------------------------------ events

    def on_data(self, channel: Channel, offset: int, producer: int, generation: int,
                version: int, seq: int, room: bool = True) -> Decision:
        """A data message was read (R1, R3, R8). ``room``: the buffer can keep it."""
        lane = self._lane(channel, producer)
        self._read_pos[channel] = offset + 1
        if self._fenced(producer, generation, version):
            return Decision.FENCED
        if generation > lane.generation:
            lane.generation = generation
        lane.seq = seq
        if version < self.version:
            return Decision.STALE
        if version > self.version:
            skipped = self._overflow.get(channel)
            if skipped is None and room:
                lane.buffered.append((offset, version, generation))
                return Decision.BUFFER
            if skipped is None:
                self._overflow[channel] = [offset, version]
            elif version < skipped[1]:
                skipped[1] = version
            return Decision.OVERFLOW
        self._note_processed(producer, generation)
        return Decision.PROCESS

    def on_release(self, channel: Channel, offset: int, producer: int, generation: int,
                   version: int) -> Decision:
        """A buffered message comes out of the buffer now that its version is open."""
        lane = self._lane(channel, producer)
        dropped = False
        if lane.buffered and lane.buffered[0][0] == offset:
            lane.buffered.popleft()
        else:
            try:
                lane.buffered.remove((offset, version, generation))
            except ValueError:
                # Dropped from the lane at a restore whose fence voided it. That fence may
                # be pruned since (a checkpoint past its versions, R2b): it is void still.
                dropped = True
        if dropped or self._fenced(producer, generation, version):
            return Decision.FENCED
        if version != self.version:
            raise ProtocolViolation(f"released a message of version {version} while version "
                                    f"{self.version} is open")
        self._note_processed(producer, generation)
        return Decision.PROCESS

    def _note_processed(self, producer: int, generation: int) -> None:
        low = self._open_generations.get(producer)
        if low is None or generation < low:
            self._open_generations[producer] = generation

    def on_marker(self, channel: Channel, offset: int, producer: int, generation: int,
                  version: int, watermark: int | None = None, idle: bool = False) -> bool:
        """A marker was read (R2, R3, R5, W4, W7). Returns whether the open version is now
        aligned."""
        lane = self._lane(channel, producer)
        self._read_pos[channel] = offset + 1
        if self._fenced(producer, generation, version):
            return self.aligned()
        if generation > lane.generation:
            lane.generation = generation
        if version > lane.marker:
            lane.marker = version
        lane.markers_read.append((offset, version, watermark))
        lane.watermark.marker(version, watermark, idle)
        return self.aligned()

    def on_restore(self, channel: Channel, offset: int, producer: int, generation: int,
                   version: int) -> RestoreOutcome:
        """A restore command was read (R3, R4, R5, R7)."""
        self._lane(channel, producer)
        probe = self._fences.copy()
        if not probe.add(producer, generation, version, self.committed_version):
            self._read_pos[channel] = offset + 1
            return RestoreOutcome.DUPLICATE
        if version < self.committed_version:
            raise ProtocolViolation(
                f"producer {producer} restored to version {version} but this task already "
                f"committed version {self.committed_version} with that producer's markers")
        self._read_pos[channel] = offset + 1
        self._fences = probe
        for lanes in self._lanes.values():  # buffered messages the fence voids never count
            lane = lanes[producer]
            if lane.buffered:
                lane.buffered = deque(e for e in lane.buffered
                                      if not self._fenced(producer, e[2], e[1]))
            if lane.marker > version and lane.generation < generation:
                lane.marker = max(version, lane.committed_marker)
                lane.watermark.drop_above(lane.marker)
        low = self._open_generations.get(producer)
        if version < self.version and low is not None and low < generation:
            return RestoreOutcome.REWIND
        return RestoreOutcome.FENCE

    # ------------------------------------------------------------------ checkpoints

    def aligned(self) -> bool:
        """Every producer's marker for the open version is in, on every channel (R2)."""
        v = self.version
        return all(lane.marker >= v for lanes in self._lanes.values() for lane in lanes.values())

    def reached(self, version: int) -> bool:
        """A checkpoint of ``version`` or later is taken (a run's end: ``protocol/runs.py``)."""
        return self.committed_version >= version

    def checkpoint(self) -> Snapshot:
        """Close the open version: returns its snapshot and opens the next version.

        The caller then releases the buffered messages of the new open version through
        ``on_release``.
        """
        if not self.aligned():
            missing = sorted(
                (str(c), p) for c, lanes in self._lanes.items()
                for p, lane in lanes.items() if lane.marker < self.version)
            raise ProtocolViolation(f"checkpoint {self.version} taken before alignment; "
                                    f"markers missing from (channel, producer) {missing[:5]}")
        version = self._closing(self.version)
        # W4. Never lower than before: every lane starts from the snapshot's and only grows;
        # W7: idle lanes are passed over (then the floor is kept explicitly).
        lanes_w = [lane.watermark for lanes in self._lanes.values() for lane in lanes.values()]
        marks = [lane.settle(version) for lane in lanes_w]
        if version == run_end(run_of(version)):
            self.watermark, self.idle = wm.highest(self.watermark, wm.lowest_at_end(marks)), False
        else:
            self.watermark, self.idle = wm.across_lanes(
                self.watermark, [(lane.settled, lane.idle) for lane in lanes_w])
        inputs = []
        for c in self._channels:
            parents = []
            resume_c = self._read_pos[c]
            skipped = self._overflow.get(c)
            for p, lane in self._lanes[c].items():
                resume = lane.buffered[0][0] if lane.buffered else self._read_pos[c]
                if resume is None:
                    continue
                if skipped is not None:
                    resume = min(resume, skipped[0])
                if lane.markers_read:
                    below = [(v, w) for o, v, w in lane.markers_read if o < resume]
                    top = max(below, default=None, key=lambda m: m[0])
                    if top is not None and top[0] >= lane.committed_marker:
                        lane.committed_marker, lane.committed_watermark = top
                    lane.markers_read = [m for m in lane.markers_read if m[0] >= resume]
                parents.append(ParentCheckpoint(p, lane.generation, lane.committed_marker,
                                                lane.seq, resume, lane.committed_watermark))
                resume_c = resume if resume_c is None else min(resume_c, resume)
            self._resume[c] = resume_c
            if resume_c is not None:
                topic, partition = cast(tuple[str, int], c)
                inputs.append(InputPosition(topic, partition, resume_c, tuple(parents)))
        self.committed_version = version
        self._fences.prune(version)
        self._open = self._next_open(version)
        self._open_generations = {}
        for c, (from_offset, lowest) in list(self._overflow.items()):
            if lowest <= self._open:   # R8: the first version it skipped is open now
                del self._overflow[c]
                self._rereads[c] = self._read_pos[c] = from_offset
                for lane in self._lanes[c].values():   # markers past it are read again
                    lane.markers_read = [m for m in lane.markers_read if m[0] < from_offset]
                    lane.marker = max([lane.committed_marker]
                                      + [v for _, v, _ in lane.markers_read])
        self._snapshot = Snapshot(version, tuple(inputs), self._fences.as_wire(), self.watermark)
        return self._snapshot

    def _floor(self) -> int:
        """The lowest marker of any producer on any channel."""
        return min(lane.marker for lanes in self._lanes.values() for lane in lanes.values())

    def _waiting(self, above: int, upto: int) -> list[int]:
        """Versions in (above, upto] that messages wait in: buffered, or skipped by an
        overflow and to be read again."""
        waiting = [e[1] for lanes in self._lanes.values() for lane in lanes.values()
                   for e in lane.buffered if above < e[1] <= upto]
        waiting += [o[1] for o in self._overflow.values() if above < o[1] <= upto]
        return waiting

    def _closing(self, open_version: int) -> int:
        """R2b: the name of the open version's checkpoint: the markers' floor when no
        message waits in a version between them. The checkpoint of the open version and an
        empty one of the floor at once are one checkpoint (sources send a version's data
        under their open version V+1 and close it under the commit grid's line)."""
        floor = self._floor()
        if floor <= open_version or self._waiting(open_version, floor):
            return open_version
        return floor

    def _next_open(self, committed: int) -> int:
        """R2a: the version after ``committed`` that can hold work, or the markers' floor."""
        floor = self._floor()
        if floor <= committed + 1:
            return committed + 1
        return min(self._waiting(committed, floor), default=floor)

    def rewind(self) -> Snapshot:
        """Go back to the last checkpoint, keeping every fence learnt since (R4).

        Returns the snapshot whose resume offsets the caller re-reads from."""
        fences = self._fences
        self._restore(self._snapshot)
        self._fences = fences
        self._snapshot = Snapshot(self._snapshot.version, self._snapshot.inputs, fences.as_wire(),
                                  self._snapshot.watermark)
        return self._snapshot

    def lanes_behind(self) -> list[tuple[Channel, int]]:
        """(channel, producer) pairs whose marker for the open version is still missing."""
        v = self.version
        return [(c, p) for c, lanes in self._lanes.items() for p, lane in lanes.items()
                if lane.marker < v]
