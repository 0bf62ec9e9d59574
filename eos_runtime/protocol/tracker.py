"""The at-least-once input policy of a downstream task: positions and end of run. No I/O.

At-least-once does not align (Flink's barrier *tracker*, beside the aligner's barrier
*handler*): every message is processed as it is read, and a timer checkpoint records
where each channel's reading goes on. Only the end of a run needs markers: the task
ends its run once every producer's end-of-run marker came in on every channel.

Rules:

T1  A data message is processed when read; its channel's resume offset moves past it.
T2  A marker of version >= ``run_end`` from producer P on channel C ends lane (C, P);
    the run ends when every lane has ended.
T3  End-of-run knowledge is part of the checkpoint: a checkpoint records each ended lane
    as a parent of its channel's position (``ParentCheckpoint.version`` = the marker's
    version), since its resume offset may lie past the marker, which a restarted task
    then never reads again. A later run has a higher ``run_end``, so a parent from an
    earlier run ends nothing.
T4  (event time, docs/design/event-time.md) A marker may carry its producer's watermark;
    a lane's watermark is the one on its latest marker read (a task reads each channel in
    log order, and a marker's promise is about what follows it there), and the task's is
    the minimum over lanes. Lanes start from the checkpoint's watermark, or from what
    their parent in the checkpoint kept (a marker before the resume point is not read
    again), and only grow: the task's watermark never goes back.
    W7: a lane whose latest marker was idle is passed over (the task's watermark then
    kept from going back explicitly); every lane idle, the task is idle and its watermark
    the highest they read. A lane's idleness is in the checkpoint (its parent's ``idle``):
    an idle at-least-once source takes no checkpoint, so sends no marker, until it reads
    again, and a restarted task that forgot it held every window open.

Illegal input (an unknown channel or producer) raises ``ProtocolViolation``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import cast

from ..errors import ProtocolViolation
from .watermarks import across_lanes, highest, lowest_at_end
from .wire import InputPosition, ParentCheckpoint

__all__ = ["Tracker"]

Channel = Hashable


class Tracker:
    def __init__(self, channels: Iterable[Channel], producers: Iterable[int], run_end: int, *,
                 inputs: Iterable[InputPosition] = (), watermark: int | None = None) -> None:
        self._channels = list(dict.fromkeys(channels))
        self._producers = sorted(set(producers))
        if not self._channels or not self._producers:
            raise ProtocolViolation("a tracked task needs at least one channel and one producer")
        self.run_end = run_end
        self._positions: dict[Channel, int] = {c: 0 for c in self._channels}
        self._ended: dict[tuple[Channel, int], int] = {}
        self._watermarks: dict[tuple[Channel, int], int | None] = {   # T4
            (c, p): watermark for c in self._channels for p in self._producers}
        self._idle: set[tuple[Channel, int]] = set()   # W7: lanes whose last marker was
        self._floor = watermark                         # the watermark so far (W7)
        for pos in inputs:
            c = (pos.topic, pos.partition)
            self._check(c, None)
            self._positions[c] = pos.offset
            for parent in pos.parents:
                self._check(c, parent.producer_id)
                if parent.version >= run_end:   # T3
                    self._ended[(c, parent.producer_id)] = parent.version
                lane = (c, parent.producer_id)
                self._watermarks[lane] = highest(self._watermarks[lane], parent.watermark)
                if parent.idle:   # W7: its producer may send no marker until it reads again
                    self._idle.add(lane)

    def _check(self, channel: Channel, producer: int | None) -> None:
        if channel not in self._positions:
            raise ProtocolViolation(f"channel {channel!r} is not an input of this task")
        if producer is not None and producer not in self._producers:
            raise ProtocolViolation(f"producer {producer} is not upstream of this task "
                                    f"(known: {self._producers})")

    def resume_offsets(self) -> dict[Channel, int]:
        return dict(self._positions)

    def on_data(self, channel: Channel, offset: int) -> None:
        """T1."""
        self._check(channel, None)
        self._positions[channel] = offset + 1

    def on_marker(self, channel: Channel, offset: int, producer: int, version: int,
                  watermark: int | None = None, idle: bool = False) -> None:
        """T2, T4, W7."""
        self._check(channel, producer)
        self._positions[channel] = offset + 1
        lane = (channel, producer)
        if version >= self.run_end:
            self._ended[lane] = max(version, self._ended.get(lane, 0))
        self._watermarks[lane] = highest(self._watermarks[lane], watermark)
        if idle:
            self._idle.add(lane)
        else:
            self._idle.discard(lane)

    @property
    def watermark(self) -> int | None:
        """T4: the task's watermark, the lowest of its lanes' (at the run's end, of those
        known: ``watermarks.lowest_at_end``); W7: of the lanes not idle."""
        if self.finished():
            self._floor = highest(self._floor, lowest_at_end(self._watermarks.values()))
        else:
            self._floor, _ = across_lanes(self._floor, self._lane_states())
        return self._floor

    @property
    def idle(self) -> bool:
        """W7: every lane's latest marker was idle (never at the run's end)."""
        return not self.finished() and across_lanes(self._floor, self._lane_states())[1]

    def _lane_states(self) -> list[tuple[int | None, bool]]:
        return [(w, lane in self._idle) for lane, w in self._watermarks.items()]

    def on_other(self, channel: Channel, offset: int) -> None:
        """A restore command: nothing to do under at-least-once but move on."""
        self.on_data(channel, offset)

    def finished(self) -> bool:
        return len(self._ended) == len(self._channels) * len(self._producers)

    def lanes_behind(self) -> list[tuple[Channel, int]]:
        return [(c, p) for c in self._channels for p in self._producers
                if (c, p) not in self._ended]

    def inputs(self) -> tuple[InputPosition, ...]:
        """T3: the checkpoint's positions, with the ended lanes as parents; T4: and every
        lane whose watermark is known, with it (as a parent of version 0, which ends
        nothing)."""
        out = []
        for c in self._channels:
            topic, partition = cast(tuple[str, int], c)  # a channel is (topic, partition)
            parents = tuple(ParentCheckpoint(p, 0, self._ended.get((c, p), 0), 0,
                                             self._positions[c], self._watermarks[(c, p)],
                                             (c, p) in self._idle)
                            for p in self._producers
                            if (c, p) in self._ended or self._watermarks[(c, p)] is not None
                            or (c, p) in self._idle)
            out.append(InputPosition(topic, partition, self._positions[c], parents))
        return tuple(out)
