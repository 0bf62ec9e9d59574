"""Where a source task starts reading each input partition. No I/O.

Positions come from four places; the first that applies wins (Samza's checkpointing docs,
"reset.offset" and "offset.default", and the Startpoints proposal):

P1  A Startpoint for the partition (for this task, or for the partition alone) beats the
    checkpoint. It stays in force until the task's next checkpoint commit records where
    it led, so a restart before that commit applies it again (it is deleted then, by
    whoever owns the metadata store). Which commit is "next" is decided without the
    deletion (which a crash may cut off): the driver tags each Startpoint with the run
    it is fanned out for (P1a) and it applies only while the task's checkpoint is of an
    earlier run (P1b). A task that committed in that run has recorded where the
    Startpoint led; applying it again would read the input twice.
P1a Fan-out at a run's start: a Startpoint keyed by stream-partition goes to the task
    that reads that partition; one keyed by stream-partition + task beats it for that
    task (the more specific key wins, as in Samza).
P2  ``reset_offset`` ignores the checkpoint, but only a checkpoint of an earlier run: a
    task retried inside a run resumes from its own run's checkpoint. Otherwise every
    crash would read the input again from the default and, under exactly-once, count it
    again in state that kept its earlier effect.
P3  The last checkpoint's offset.
P3a With a checkpoint topic or file-system store (at-least-once), the store's offset, but
    never past the offset of the task's last commit in the change log, where its state
    comes from. The store is written after each commit, not atomically with it, and
    nothing fences it: a zombie of the task writes positions there after its successor
    started, while the change log's recovery ignores the zombie's commits. Starting past
    them would drop those records' effect on state: loss. Behind it replays, which
    at-least-once allows. A partition the store has no offset for has no checkpoint.
P4  ``offset_default`` when nothing above applies: ``oldest`` (this project's default:
    bounded runs over input that already exists are the common use), ``upcoming``
    (Samza's default: only what arrives after the start), or ``none``: no fallback, the
    partition must have a checkpoint or a Startpoint (Samza 0.7: "if it's undefined, the
    TaskRunner will fail"); ``choose_start`` raises ``NoFallback`` and the driver refuses
    the run before it is recorded, naming the partition.

A position is a ``Start`` of one kind; the transport resolves it to an offset (oldest:
the low watermark; upcoming: the high watermark when the run started, P5; timestamp: the
first offset at or after it; offset: checked against both watermarks). An offset outside
the partition's range, from a checkpoint or a Startpoint, is refused (``ValueError``
naming it), never guessed:
retention may have deleted input a job never read, and silently skipping it is data loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from ..errors import NoFallback

K = TypeVar("K")
V = TypeVar("V")

__all__ = ["KINDS", "DEFAULTS", "NoFallback", "Start", "choose_start", "fan_out", "resolve",
           "startpoint_applies", "store_positions"]

KINDS = ("offset", "timestamp", "oldest", "upcoming")
DEFAULTS = ("oldest", "upcoming", "none")


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


def store_positions(kept: Mapping[K, int], committed: Mapping[K, int]) -> dict[K, int]:
    """P3a: the positions of a checkpoint topic or file-system store (``kept``), each held
    to the change log's last commit (``committed``) where that has the partition; a
    partition the store lacks (empty, or not where this run looks: another --state-dir,
    another host) starts from the commit, never past it."""
    out = dict(committed)
    for p, off in kept.items():
        out[p] = min(off, committed[p]) if p in committed else off
    return out


def startpoint_applies(startpoint_run: int | None, checkpoint_run: int | None) -> bool:
    """P1b: a Startpoint fanned out for run ``startpoint_run`` (None: not yet fanned out,
    the run starting now) applies while the task has no checkpoint of that run or later."""
    return startpoint_run is None or checkpoint_run is None or checkpoint_run < startpoint_run


def fan_out(partition_keys: Mapping[K, V], task_keys: Mapping[tuple[int, K], V],
            readers: Mapping[K, int]) -> tuple[dict[tuple[int, K], V], list[K]]:
    """P1a: per (task, partition) the Startpoint in force. ``partition_keys``: Startpoints
    keyed by stream-partition; ``task_keys``: by (task, stream-partition); ``readers``: the
    task reading each source partition. Returns those Startpoints and the partition keys
    no task reads (the caller refuses them: a Startpoint must not be dropped silently)."""
    out: dict[tuple[int, K], V] = {}
    unread = []
    for key, sp in partition_keys.items():
        if key not in readers:
            unread.append(key)
            continue
        out[(readers[key], key)] = sp
    for (task, key), sp in task_keys.items():
        if readers.get(key) != task:
            unread.append(key)
            continue
        out[(task, key)] = sp
    return out, unread


def choose_start(*, checkpoint: int | None, checkpoint_run: int | None, run: int,
                 reset: bool = False, default: str = "oldest",
                 startpoint: Start | None = None, startpoint_run: int | None = None) -> Start:
    """P1-P4 for one partition. ``checkpoint_run``: the run whose commit holds
    ``checkpoint`` (None without one); ``startpoint_run``: the run the Startpoint was
    fanned out for (P1b)."""
    if default not in DEFAULTS:
        raise ValueError(f"offset_default {default!r}: use oldest, upcoming or none")
    if startpoint is not None and startpoint_applies(startpoint_run, checkpoint_run):
        return Start(startpoint.kind, startpoint.value, "startpoint")
    if checkpoint is not None and not (reset and checkpoint_run is not None
                                       and checkpoint_run < run):
        return Start("offset", checkpoint, "checkpoint")
    if default == "none":
        raise NoFallback(reset and checkpoint is not None)
    return Start(default, None, "reset" if reset and checkpoint is not None else "default")


def resolve(start: Start, low: int, high: int, at_timestamp: int | None = None, *,
            upcoming: int | None = None) -> int:
    """The offset ``start`` means in a partition holding [low, high). ``at_timestamp``:
    the transport's answer for a timestamp start (the first offset at or after it).

    P5  ``upcoming`` is the partition's end when the run started (the driver takes it
        once, before any task reads, and every attempt of the run gets the same), not
        its end now: a task that starts again inside the run (a retry after a crash
        before its first commit, a restart after a broker outage) must start where the
        run's first attempt did, or what arrived meanwhile is never read. A timestamp
        start is held to it as well: the first record at or after the timestamp that
        arrived after the start is where the start was (no record reached it then).
        None: the end now (tools, tests)."""
    if upcoming is None:
        upcoming = high
    if start.kind == "oldest":
        return low
    if start.kind == "upcoming":
        return upcoming
    if start.kind == "timestamp":
        return upcoming if at_timestamp is None else min(at_timestamp, upcoming)
    assert start.value is not None
    if not low <= start.value <= high:
        raise ValueError(f"offset {start.value} ({start.why}) is outside the partition's "
                         f"offsets {low}..{high}")
    return start.value
