"""Runs of a job and the checkpoint versions each may use. No I/O.

A job is run many times: bounded runs one after another, an unbounded run stopped and
started again, a run whose driver died. Checkpoint versions must keep growing across
all of them, for every task, or a downstream task that committed version V in one run
would take the next run's messages for stale ones (R1) or its restores for impossible
ones (R7).

So every run owns a block of versions: run ``r`` (0, 1, 2, ... as recorded in the job's
control topic) uses ``first_version(r) .. run_end(r)``. A source task starts a run at
``max(its restored version + 1, first_version(r))`` and counts up. It ends the run
(input exhausted in a bounded run, or a stop request) with one last checkpoint of
version exactly ``run_end(r)``: its marker is the run's end-of-stream marker, and since
a downstream task jumps over versions nobody wrote (``Aligner``), that marker lets it
align and commit ``run_end(r)`` too, and forward the same marker. Every task then ends
the run having committed ``run_end(r)``, which is below every version of run ``r + 1``.

A run that ended without its final checkpoints (a killed driver) leaves tasks at some
version inside run ``r``'s block; the next run's versions are still above it, and the
restore rules of the protocol handle the rest.

Inside a run, a source checkpoints at ``max(its open version, time_version(...))``: the
milliseconds since the run started, on top of the run's first version. Sources of one
job then keep close versions without talking to each other, however differently their
``commit_every`` fires, so a downstream task waiting for every producer's marker waits
about one commit interval, not for a slow source to count up to a fast one. A version
per millisecond gives a run 2**40 ms, about 34 years. Close is not enough: a timer
checkpoint takes its time from the commit grid's line (``grid_line``, S4), so sources
close *equal* versions, and no producer's messages wait for another's next marker.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..errors import ProtocolViolation

__all__ = ["RUN_BITS", "MAX_RUN", "AT_LEAST_ONCE", "EXACTLY_ONCE", "Guarantee", "OutputMode",
           "SourceVersions", "announcement", "checkpoint_needed", "finished_run",
           "guarantee_named",
           "first_version", "markers_awaited", "grid_ceiling", "grid_line", "run_end", "run_of",
           "source_start_version", "step_markers", "time_version"]

#: Versions per run: 2**40, a millisecond each (``time_version``).
RUN_BITS = 40
#: The highest run number whose versions still fit the wire format's INT64.
MAX_RUN = 2 ** (63 - RUN_BITS) - 2


def _check_run(run: int) -> int:
    if type(run) is not int or not 0 <= run <= MAX_RUN:
        raise ValueError(f"run number {run!r} is outside 0..{MAX_RUN}")
    return run


def first_version(run: int) -> int:
    """The lowest version run ``run`` may use (run 0 starts at 1, like a fresh task)."""
    return max(1, _check_run(run) << RUN_BITS)


def run_end(run: int) -> int:
    """The version of every task's last checkpoint of run ``run`` (its end-of-run marker)."""
    return ((_check_run(run) + 1) << RUN_BITS) - 1


def run_of(version: int) -> int:
    """The run whose block holds ``version``."""
    if version < 0:
        raise ValueError(f"version {version} is negative")
    return version >> RUN_BITS


def source_start_version(restored: int, run: int) -> int:
    """The first version a source task opens in run ``run`` after restoring ``restored``.

    A restored version at or past ``run_end(run)`` means the task already finished this
    run (a retry after its final checkpoint) or the control topic went backwards: both
    are refused by the caller, which is why this raises instead of wrapping round."""
    if restored >= run_end(run):
        raise ProtocolViolation(f"restored version {restored} is not below the end of run "
                                f"{run} ({run_end(run)})")
    return max(restored + 1, first_version(run))


def time_version(run: int, started_ms: int, now_ms: int) -> int:
    """The version a checkpoint taken at ``now_ms`` may use at least: one per millisecond
    since the run started, kept below the run's end (a clock running backwards gives the
    run's first version; the caller's ``max`` with its open version keeps order)."""
    return min(first_version(run) + max(0, now_ms - started_ms), run_end(run) - 1)


def grid_line(now_ms: int, interval_ms: int) -> int:
    """S4: the commit grid's latest line at or before ``now_ms``: timer checkpoints are due
    at the multiples of the commit interval on the wall clock (``CommitTimer``), and a
    source's timer checkpoint takes its time version from that line, not from the moment
    it runs (``time_version(..., grid_line(...))``). So every source of a job closes the
    same version at the same line, and a channel task's aligner, which holds back a
    producer's messages of a version above its open one (R1), holds nothing back in
    steady state. Before, sources a few milliseconds apart closed different versions,
    and the data of the one ahead waited a whole interval for the other's next marker.
    Whole milliseconds, so that every task draws the same lines."""
    return now_ms - now_ms % interval_ms


def grid_ceiling(version: int, run: int, started_ms: int, interval_ms: int) -> int:
    """S5: the time version of the commit grid's first line at or after ``version``'s own
    time (``time_version`` read backwards): the version a timer checkpoint of a source
    whose open version is ``version`` takes at least."""
    at_ms = started_ms + version - first_version(run)
    return time_version(run, started_ms, -(-at_ms // interval_ms) * interval_ms)


class OutputMode(enum.Enum):
    """How sink output leaves a task (``Guarantee.output_mode``; ``runtime/output_modes``)."""
    JOIN = "join"       # into the change log's open transaction
    HOLD = "hold"       # held for one append at the checkpoint; ranges in the commit record
    STREAM = "stream"   # sent as made, flushed at the checkpoint


@dataclass(frozen=True)
class Guarantee:
    """What differs by processing guarantee, as rules a task asks, chosen once where it
    opens (``guarantee_named``). There are two values, ``EXACTLY_ONCE`` and
    ``AT_LEAST_ONCE``; nothing else compares a guarantee's name.

    G1  ``markers_each_checkpoint``: a task with channels sends its markers at every
        checkpoint (exactly-once: a channel task aligns on them, R2), or only at the
        run's end (at-least-once: nothing downstream waits for a marker before it).
    G2  ``restores``: a (re)started generation sends the restore command that fences its
        older generations downstream (SEP-10 1.4); at-least-once never rewinds.
    G3  ``fenced_writer``: the change-log writer's producer is fenced against zombies (on
        Kafka: transactional); at-least-once writes through a plain producer.
    G4  ``output_at_commit``: sink output becomes readable with its checkpoint's commit,
        not before: it joins the open transaction, or, on a log without transactions,
        it is appended at the checkpoint and the commit record lists its offset ranges
        (a committed reader shows only those). At-least-once output is readable as it
        is made: a replay duplicates it, nothing ever hides it.
    """

    name: str
    markers_each_checkpoint: bool
    restores: bool
    fenced_writer: bool
    output_at_commit: bool

    def output_mode(self, transactions: bool) -> OutputMode:
        """G4 on a log that has ``transactions`` (Kafka) or not (the local log): output
        readable at the commit joins the open transaction of the fenced writer (G3), or
        without one is held for the checkpoint's one append per partition; output
        readable as made streams."""
        if not self.output_at_commit:
            return OutputMode.STREAM
        return OutputMode.JOIN if transactions else OutputMode.HOLD

    def output_ranges(self, transactions: bool) -> bool:
        """G4: whether a commit record lists the output ranges its checkpoint appended."""
        return self.output_mode(transactions) is OutputMode.HOLD


EXACTLY_ONCE = Guarantee("exactly-once", markers_each_checkpoint=True, restores=True,
                         fenced_writer=True, output_at_commit=True)
AT_LEAST_ONCE = Guarantee("at-least-once", markers_each_checkpoint=False, restores=False,
                          fenced_writer=False, output_at_commit=False)


def guarantee_named(name: str) -> Guarantee:
    """The guarantee a plan or a run's layout names."""
    for g in (EXACTLY_ONCE, AT_LEAST_ONCE):
        if g.name == name:
            return g
    raise ValueError(f"guarantee {name!r}: use exactly-once or at-least-once")


def step_markers(guarantee: Guarantee, event_time: bool) -> bool:
    """G1, widened for event time: whether a task with channels sends its markers at every
    checkpoint. Exactly-once always (they are what a channel task aligns on); at-least-
    once only when the job keeps watermarks, which ride on the markers (W3): its channel
    tasks do not align on them, a lane's watermark is its latest marker's (T4)."""
    return guarantee.markers_each_checkpoint or event_time


def checkpoint_needed(guarantee: Guarantee, inputs: object, recorded: object, *,
                      unannounced_idleness: bool = False) -> bool:
    """S6: whether a task takes a timer checkpoint whose input positions are ``inputs``
    when its last checkpoint recorded ``recorded``.

    At-least-once skips a checkpoint that moved no input: nothing was read, so its state
    and output are those the last one recorded, and no task waits for an at-least-once
    marker before the run's end (G1). An idle job then writes nothing (before, one commit
    record per task per interval, which nothing trims: issue 22). A start that moved
    (``upcoming``, a Startpoint, a reset) is a moved input and is recorded. Exactly-once
    takes it: a channel task commits version V only once every producer's marker of V or
    later came (R2), and a marker says its producer committed V (R7), so a source that
    skipped would hold back every channel task its peers feed (docs/protocol.md, "Idle
    jobs"). ``unannounced_idleness``: a source that may turn idle (W7) and has not said so
    on a marker yet takes it under at-least-once too, since its markers are how
    downstream learns it: else a source with nothing to read, never checkpointing, held
    every window downstream open."""
    return guarantee.markers_each_checkpoint or inputs != recorded or unannounced_idleness


def announcement(guarantee: Guarantee, restored: int, run: int) -> tuple[tuple[str, int], ...]:
    """What a task with channels sends downstream when it (re)starts, in order.

    Its last marker again: a crash may have cut the fan-out short. Under exactly-once
    that is the marker of the version it restored (G1), then the restore command that
    fences its older generations (G2; SEP-10 1.3-1.4). At-least-once sent markers only
    at its run's end: a task restored at or past its run's end already finished the
    run, and may have died before its end-of-run markers went out; it sends them
    again, or downstream waits for them forever. It sends no restore."""
    sent_marker = (restored > 0 if guarantee.markers_each_checkpoint
                   else restored >= run_end(run))
    return ((("marker", restored),) if sent_marker else ()) + \
        ((("restore", restored),) if guarantee.restores else ())


def markers_awaited(version: int, run: int) -> bool:
    """Whether a checkpoint's markers must be acknowledged before the task goes on.

    Not inside a run: a task that dies before they are sent is restarted and sends its
    last marker again (``announcement``), and its producer keeps each channel's order.
    At the run's end, yes: the task exits after that checkpoint, its producer's close
    drops what is not yet sent, and nothing restarts it, so downstream would wait for
    them for ever."""
    return version >= run_end(run)


def finished_run(restored: int, run: int) -> bool:
    """A task restored at or past ``run_end(run)`` has nothing more to do in run ``run``
    than its announcement. Raises if the restored version belongs to a later run: the
    job's control topic lost records."""
    if run_of(restored) > run:
        raise ProtocolViolation(f"restored version {restored} is of run {run_of(restored)}, "
                                f"but this is run {run}: the job's control topic lost records")
    return restored >= run_end(run)


class SourceVersions:
    """The open version of a source task: the one owner of it (no I/O; ``now_ms`` is given).

    S1  The first open version of run ``run`` after restoring ``restored`` is
        ``source_start_version`` (above anything committed, at least the run's first).
    S2  A checkpoint inside the run takes ``max(open, time_version(...))`` where the run's
        start time is known, else the open version; never ``run_end(run)`` or later,
        which only the run's last checkpoint uses (it ends the run for every task).
    S3  After checkpoint V the open version is V + 1.
    S4  A timer checkpoint's ``now_ms`` is the commit grid's line it is due for
        (``grid_line``), so that every source closes the same version at a line.
    S5  A timer checkpoint takes at least the grid's first line at or above its open
        version (``grid_ceiling``): one line further than the last, whatever the wall
        clock says. A wall clock stepped back names lines already passed, and S2 alone
        then counted up by one per checkpoint, while sources whose clocks did not step
        went on a line (interval_ms versions) at a time: a channel task held their data
        back (R1) until the stepped clock caught up. With S5 a source whose clock stepped
        back closes the versions of the lines it would have seen, the same as its peers.
        A step forward names the lines ahead at once (S2): versions only ever grow.
    """

    def __init__(self, restored: int, run: int, started_ms: int | None) -> None:
        self.run = run
        self.started_ms = started_ms
        self.open = source_start_version(restored, run)   # S1
        self.end = run_end(run)

    def for_checkpoint(self, now_ms: int, grid_ms: int | None = None) -> int:
        """S2: the version of a checkpoint taken now; ``grid_ms``: the commit interval, for
        a timer checkpoint (S5). Raises once the run's versions are used up (2**40 of
        them: a millisecond each for 34 years, or a bug)."""
        version = self.open
        if self.started_ms is not None:
            version = max(version, time_version(self.run, self.started_ms, now_ms))
            if grid_ms is not None:
                version = max(version, grid_ceiling(self.open, self.run, self.started_ms,
                                                    grid_ms))
        if version >= self.end:
            raise ProtocolViolation(f"the versions of run {self.run} are used up")
        return version

    def committed(self, version: int) -> None:
        """S3."""
        self.open = version + 1
