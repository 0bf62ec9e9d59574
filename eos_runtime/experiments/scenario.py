"""What a job run several times under an operator's actions must have processed.

An experiment with operator kinds (``startpoint``, ``checkpoint``, ``reset``, ``start``,
``stop``, ``cancel``, ``take-over``, ``append``) runs its job several times. This model
follows each source partition as docs/operations.md says the actions move it, from the
documented rules alone, never from what the job did:

- where a run starts a partition (protocol/positions.py's precedence, P1): a pending
  Startpoint (``eos startpoint set``, or ``eos checkpoint write``'s, keyed by task: the
  one set last wins), then ``reset_offset`` (the run's ``offset_default``), then the
  committed position, then ``offset_default``; ``oldest`` is offset 0, ``upcoming`` the
  partition's end when the run started (input that arrives while it runs is not read by
  a bounded run, and is read by the next), a timestamp the first record at or after it;
- a bounded run that ends reads every partition from its start to its end at the start,
  and commits there: its Startpoints are used up;
- a run ended early (``stop``, ``cancel``, a take-over of it) read each partition up to
  what its source task last committed in that run, read from the change log: no action
  promises where a stop lands, only that the next run goes on from there; a partition
  whose task committed nothing in the run keeps its Startpoint and position;
- a take-over run goes on from wherever the run it took over committed, to its own end;
- ``eos reset`` starts an epoch: no position, no Startpoint (a reset leaves nothing a
  later run could take for its own), empty state: the oracle of what follows is computed
  over the input processed after it alone.

A graph reads several topics (sources and tables): ``Inputs`` holds one model per topic
and starts an epoch on each at a reset. An operator's action names one source stream
(``eos run --reset-offset STREAM``, ``eos startpoint set JOB STREAM ...``); a table is
never moved by one: its rows are read in order, from where the job left them, and from
its start again after a reset (the table store went with the job's state).

The processed input is a list of ``(partition, offset)`` per epoch, a record read twice
(a Startpoint back to input already read) there twice: the workload's oracle over those
values says what the sink must hold. Within a run the order is partition-interleaved by
offset (a built-in oracle is order-free across partitions).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

__all__ = ["InputModel", "Epoch", "Inputs"]


@dataclass
class Epoch:
    """The runs between two resets: what they processed, and whether it can be judged."""

    processed: list[tuple[int, int]] = field(default_factory=list)
    # False when the output of input committed before a reset may be missing for a
    # reason the model cannot know (a run cancelled: its downstream tasks had not yet
    # written all its sources had committed, and the reset deleted the channels)
    judged: bool = True
    why_not: str | None = None
    runs: list[int] = field(default_factory=list)


@dataclass
class InputModel:
    partitions: int
    contents: list[list[Any]] = field(default_factory=list)      # value per offset
    stamps: list[list[int]] = field(default_factory=list)        # timestamp per offset (ms)
    pos: list[int | None] = field(default_factory=list)          # committed position
    pending: dict[int, tuple[str, int | None]] = field(default_factory=dict)
    epochs: list[Epoch] = field(default_factory=lambda: [Epoch()])

    def __post_init__(self) -> None:
        self.contents = self.contents or [[] for _ in range(self.partitions)]
        self.stamps = self.stamps or [[] for _ in range(self.partitions)]
        self.pos = self.pos or [None] * self.partitions

    # ------------------------------------------------------------------ input

    def append(self, partition: int, value: Any, timestamp: int) -> int:
        """A record written to the source; returns its offset."""
        self.contents[partition].append(value)
        self.stamps[partition].append(timestamp)
        return len(self.contents[partition]) - 1

    def ends(self) -> list[int]:
        return [len(c) for c in self.contents]

    # ------------------------------------------------------------------ actions

    def set_startpoint(self, partition: int, to: str, offset: int | None) -> tuple[str, int | None]:
        """``eos startpoint set`` (or a checkpoint write's, ``to='offset'``); returns the
        Startpoint as the CLI takes it: (kind, offset or timestamp in ms)."""
        end = len(self.contents[partition])
        if to in ("offset", "timestamp"):
            assert offset is not None
            if not 0 <= offset <= end - (to == "timestamp"):
                raise ConfigError(f"partition {partition} holds offsets 0..{end - 1}: a "
                                  f"Startpoint to {to} cannot name offset {offset}")
        value = self.stamps[partition][offset] if to == "timestamp" and offset is not None \
            else offset
        self.pending[partition] = (to, value)
        return to, value

    def reset(self) -> None:
        """``eos reset``: no positions, no Startpoints, a new epoch."""
        self.pos = [None] * self.partitions
        self.pending = {}
        self.epochs.append(Epoch())

    def starts(self, ends: list[int], offset_default: str = "oldest",
               reset_offset: bool = False) -> list[int]:
        """Where a run that starts now, with the partitions' ``ends``, starts each one."""
        out = []
        for p in range(self.partitions):
            sp = self.pending.get(p)
            if sp is not None:
                out.append(self._resolve(p, *sp, end=ends[p]))
            elif reset_offset or self.pos[p] is None:
                out.append(0 if offset_default == "oldest" else ends[p])
            else:
                pos = self.pos[p]
                assert pos is not None
                out.append(pos)
        return out

    def _resolve(self, p: int, kind: str, value: int | None, end: int) -> int:
        if kind == "oldest":
            return 0
        if kind == "upcoming":
            return end
        if kind == "offset":
            assert value is not None
            return value
        assert value is not None   # a timestamp: the first record at or after it
        return min(bisect.bisect_left(self.stamps[p][:end], value), end)

    def ran(self, run: int, starts: Sequence[int], reached: Sequence[int | None]) -> None:
        """A run read each partition from ``starts`` up to ``reached`` (None: its task
        committed nothing in the run: the partition keeps its position and Startpoint)."""
        epoch = self.epochs[-1]
        epoch.runs.append(run)
        taken = []
        for p in range(self.partitions):
            end = reached[p]
            if end is None:
                continue
            taken += [(o, p) for o in range(starts[p], end)]
            self.pos[p] = max(end, starts[p])
            self.pending.pop(p, None)
        epoch.processed += [(p, o) for o, p in sorted(taken)]

    def unjudged(self, why: str) -> None:
        self.epochs[-1].judged = False
        self.epochs[-1].why_not = why

    def values(self, epoch: Epoch) -> list[Any]:
        return [self.contents[p][o] for p, o in epoch.processed]


@dataclass
class Inputs:
    """The model of every topic a job reads, by topic; ``stream`` is the source stream
    that an operator's action names (the first one), tables are never named."""

    models: dict[str, InputModel]
    stream: str

    @property
    def main(self) -> InputModel:
        return self.models[self.stream]

    def ends(self) -> dict[str, list[int]]:
        return {topic: m.ends() for topic, m in self.models.items()}

    def starts(self, ends: dict[str, list[int]], offset_default: str = "oldest",
               reset_stream: bool = False) -> dict[str, list[int]]:
        """Where a run starts each topic's partitions: ``reset_stream`` resets the stream
        alone (as ``eos run --reset-offset STREAM``); ``offset_default`` goes for every
        partition without a position, a table's too (as ``--offset-default``)."""
        return {topic: m.starts(ends[topic], offset_default, reset_stream and topic == self.stream)
                for topic, m in self.models.items()}

    def ran(self, run: int, starts: dict[str, list[int]],
            reached: Mapping[str, Sequence[int | None]]) -> None:
        for topic, m in self.models.items():
            m.ran(run, starts[topic], reached[topic])

    def reset(self) -> None:
        for m in self.models.values():
            m.reset()

    def unjudged(self, why: str) -> None:
        for m in self.models.values():
            m.unjudged(why)

    def epoch(self) -> Epoch:
        """The current epoch (of the stream: every topic's has the same runs)."""
        return self.main.epochs[-1]

    def values(self) -> list[Any]:
        """What the current epoch processed, topic after topic (a workload's oracle is
        order-free across topics; within one, each partition's records stay in order)."""
        return [v for m in self.models.values() for v in m.values(m.epochs[-1])]
