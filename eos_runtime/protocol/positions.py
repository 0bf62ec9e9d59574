"""Where a source task starts reading each input partition. No I/O.

Positions come from four places; the first that applies wins (Samza's checkpointing docs,
"reset.offset" and "offset.default", and the Startpoints proposal):

P1  A Startpoint for the partition (for this task, or for the partition alone) beats the
    checkpoint. It stays in force until the task's next checkpoint commit records where
    it led, so a restart before that commit applies it again (it is deleted then, by
    whoever owns the metadata store).
P2  ``reset_offset`` ignores the checkpoint, but only a checkpoint of an earlier run: a
    task retried inside a run resumes from its own run's checkpoint. Otherwise every
    crash would read the input again from the default and, under exactly-once, count it
    again in state that kept its earlier effect.
P3  The last checkpoint's offset.
P4  ``offset_default`` when nothing above applies: ``oldest`` (this project's default:
    bounded runs over input that already exists are the common use) or ``upcoming``
    (Samza's default: only what arrives after the start).

A position is a ``Start`` of one kind; the transport resolves it to an offset (oldest:
the low watermark; upcoming: the high watermark; timestamp: the first offset at or after
it; offset: checked against both watermarks). An offset outside the partition's range,
from a checkpoint or a Startpoint, is refused (``ValueError`` naming it), never guessed:
retention may have deleted input a job never read, and silently skipping it is data loss.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KINDS", "DEFAULTS", "Start", "choose_start", "resolve"]

KINDS = ("offset", "timestamp", "oldest", "upcoming")
DEFAULTS = ("oldest", "upcoming")


@dataclass(frozen=True, slots=True)
class Start:
    """A position to start from, before the transport resolves it (P1-P4)."""

    kind: str               # one of KINDS
    value: int | None       # the offset, or the timestamp in ms; None for oldest/upcoming
    why: str                # startpoint | reset | checkpoint | default

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown start kind {self.kind!r}; use one of {', '.join(KINDS)}")
        if (self.value is None) != (self.kind in ("oldest", "upcoming")):
            raise ValueError(f"a start of kind {self.kind!r} "
                             f"{'takes no' if self.value is not None else 'needs a'} value")


def choose_start(*, checkpoint: int | None, checkpoint_run: int | None, run: int,
                 reset: bool = False, default: str = "oldest",
                 startpoint: Start | None = None) -> Start:
    """P1-P4 for one partition. ``checkpoint_run``: the run whose commit holds
    ``checkpoint`` (None without one)."""
    if default not in DEFAULTS:
        raise ValueError(f"offset_default {default!r}: use oldest or upcoming")
    if startpoint is not None:
        return Start(startpoint.kind, startpoint.value, "startpoint")
    if checkpoint is not None and not (reset and checkpoint_run is not None
                                       and checkpoint_run < run):
        return Start("offset", checkpoint, "checkpoint")
    return Start(default, None, "reset" if reset and checkpoint is not None else "default")


def resolve(start: Start, low: int, high: int, at_timestamp: int | None = None) -> int:
    """The offset ``start`` means in a partition holding [low, high). ``at_timestamp``:
    the transport's answer for a timestamp start (the first offset at or after it)."""
    if start.kind == "oldest":
        return low
    if start.kind == "upcoming":
        return high
    if start.kind == "timestamp":
        return high if at_timestamp is None else at_timestamp
    assert start.value is not None
    if not low <= start.value <= high:
        raise ValueError(f"offset {start.value} ({start.why}) is outside the partition's "
                         f"offsets {low}..{high}")
    return start.value
