"""Event-time watermarks: a source's (W2) and what a marker's promises add up to (W4). No I/O.

A watermark is an event time, in ms, below which a task's inputs are not expected to
bring more records: a window that ends (plus its grace) at or below it is closed. None
is *no watermark yet*: lower than every time, so it closes nothing and, in a minimum,
holds the others back. The rules (docs/design/event-time.md):

W2  A source's watermark at a checkpoint is the minimum of the highest event time read
    (``high``) over its *active* partitions, and never lower than its watermark before.
    A partition is active while it has something left to read, or was read from within
    the last ``idle_after_ms``; an active partition that has no ``high`` yet holds the
    watermark where it is. With no active partition the watermark is the highest
    ``high``: what was read, never beyond it.
W4  A channel task's watermark at checkpoint V is the minimum over its lanes (every
    producer of every input) of the watermark on the lane's latest marker of a version
    up to V, and never lower than its watermark before. A marker of a later version says
    nothing about the messages in front of it: they are of that later version, still
    buffered (R1), and taking its watermark now would make them late.

W7  Idleness, across tasks, where a source asks for it (``idle_after`` > 0): a source task
    is *idle* at a checkpoint when none of its partitions is active (W2) and it has run
    ``idle_after_ms`` since its first checkpoint; its markers say so. A channel task's W4
    then passes over the lanes whose latest marker up to V is idle (its watermark never
    going back), and is itself idle when every lane is: its watermark is then the highest
    its lanes read (as W2's over partitions none of which is active), and its markers say
    idle. Without W7 one empty partition, or one source gone
    quiet, held every window of the job open for the whole of an unbounded run, since
    W4 takes the minimum over every producer. The price, as Flink's ``withIdleness``: a
    record of a source back from idle, below the watermark the others moved on to, is
    late (W6 holds for a source that is never idle). With ``idle_after`` 0 (the default)
    no task is ever idle.

W2 and W4 are monotonic, and neither passes what a source has read: a record within
``grace`` of the highest event time of its partition at the time it is read is never
late anywhere downstream (W6), whatever the versions, crashes and restarts.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

__all__ = ["SourceWatermark", "TableWatermark", "LaneWatermark", "NO_BOUND", "lowest",
           "lowest_at_end", "highest", "across_lanes"]

#: The watermark of a lane that holds no event time back: a table's (its rows carry no
#: event time). The largest time a record may carry, so W4's lowest passes over it.
NO_BOUND = 2**63 - 1


def lowest(values: Iterable[int | None]) -> int | None:
    """The minimum, None (no watermark yet) below every time; None for no values."""
    known = list(values)
    if not known or None in known:
        return None
    return min(v for v in known if v is not None)


def lowest_at_end(values: Iterable[int | None]) -> int | None:
    """W4 at a run's end (every producer's run-end marker in): the minimum of the
    watermarks known. A producer that ended its run with none read nothing in it, and
    will bring nothing more in this run: it holds nothing back (else one source task
    whose partitions were all empty would keep every window of the job open). A table's
    ``NO_BOUND`` counts only where there is nothing else: a lookup whose streams read
    nothing committed it, and every record of the next run was late."""
    given = list(values)
    streams = [v for v in given if v != NO_BOUND]
    if streams or not given:
        return min((v for v in streams if v is not None), default=None)
    return NO_BOUND


def highest(a: int | None, b: int | None) -> int | None:
    """The later of two watermarks (None below every time)."""
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b


class SourceWatermark:
    """W2 for one source task over its partitions."""

    def __init__(self, partitions: Iterable[int], restored: int | None = None,
                 idle_after_ms: int = 0) -> None:
        if idle_after_ms < 0:
            raise ValueError(f"idle_after_ms {idle_after_ms!r} is negative")
        self.highs: dict[int, int | None] = {p: None for p in partitions}
        self._last_read: dict[int, int] = {}
        self.idle_after_ms = idle_after_ms
        self.value = restored
        self.idle = False                   # W7, as of the last checkpoint
        self._first_ms: int | None = None   # the first checkpoint's time (W7)

    def read(self, partition: int, high: int, now_ms: int) -> None:
        """Records of ``partition`` were read; ``high`` is the highest event time among them."""
        current = self.highs[partition]
        if current is None or high > current:
            self.highs[partition] = high
        self._last_read[partition] = now_ms

    def active(self, behind: Collection[int], now_ms: int) -> list[int]:
        """The partitions that count: those with something left to read (``behind``) and
        those read from within the last ``idle_after_ms``."""
        return [p for p in self.highs
                if p in behind or (p in self._last_read
                                   and now_ms - self._last_read[p] < self.idle_after_ms)]

    def at_checkpoint(self, behind: Collection[int], now_ms: int) -> int | None:
        """The watermark of a checkpoint taken now (W2); it stays the floor from here on."""
        active = self.active(behind, now_ms)
        if self._first_ms is None:
            self._first_ms = now_ms
        if active:
            candidate = lowest(self.highs[p] for p in active)
        else:
            candidate = max((h for h in self.highs.values() if h is not None), default=None)
        self.value = highest(self.value, candidate)
        self.idle = (self.idle_after_ms > 0 and not active
                     and now_ms - self._first_ms >= self.idle_after_ms)   # W7
        return self.value


class TableWatermark:
    """W2 for a table's source task: ``NO_BOUND`` at every checkpoint. A table's rows
    carry no event time; were its markers to carry none (None, "not yet"), W4's lowest
    over the lookup's lanes would be None for good, and no window after a lookup would
    close until the run ended. Never idle (W7): it holds nothing back as it is."""

    idle = False

    def read(self, partition: int, high: int, now_ms: int) -> None:
        pass

    def at_checkpoint(self, behind: Collection[int], now_ms: int) -> int | None:
        return NO_BOUND


class LaneWatermark:
    """W4's part for one lane (a producer on a channel): the watermarks of its markers,
    and whether the latest up to the last checkpoint was idle (W7)."""

    __slots__ = ("settled", "idle", "_pending")

    def __init__(self, settled: int | None = None) -> None:
        self.settled = settled                          # its watermark up to the last checkpoint
        self.idle = False                               # its latest marker up to it was (W7)
        # (version, watermark, idle) read since
        self._pending: list[tuple[int, int | None, bool]] = []

    def marker(self, version: int, watermark: int | None, idle: bool = False) -> None:
        self._pending.append((version, watermark, idle))

    def settle(self, version: int) -> int | None:
        """The lane's watermark at checkpoint ``version``: its latest marker's up to it. A
        producer's watermark grows with its versions (W2 and W4 are monotonic), so the
        highest of them is the latest one's, and a marker read twice (R6, R8) is no harm: what
        it says is as true the second time. ``idle``: the latest one's (by version; a
        marker read again is the same marker)."""
        up_to = [(v, w, i) for v, w, i in self._pending if v <= version]
        if up_to:
            for _, w, _ in up_to:   # a marker without a watermark (None) leaves it as it is
                self.settled = highest(self.settled, w)
            self.idle = max(up_to, key=lambda m: m[0])[2]
            self._pending = [m for m in self._pending if m[0] > version]
        return self.settled

    def drop_above(self, version: int) -> None:
        """Forget markers above ``version``: a restore voided them (R3)."""
        self._pending = [m for m in self._pending if m[0] <= version]


def across_lanes(before: int | None, lanes: Iterable[tuple[int | None, bool]]
                 ) -> tuple[int | None, bool]:
    """W4 with W7, inside a run: the task's watermark from its lanes' (settled watermark,
    idle), never below ``before``, and whether the task is idle. The idle lanes are passed
    over. With every lane idle it is the highest they read, as W2 takes over a source's
    partitions when none is active: the lowest would depend on which went quiet first,
    and sources that all went quiet together would keep the watermark where it was."""
    known = list(lanes)
    # A table's lanes (NO_BOUND, never idle) bound nothing: with every stream lane idle,
    # they were the only busy ones, and took the watermark to NO_BOUND for good.
    streams = [(w, idle) for w, idle in known if w != NO_BOUND] or known
    busy = [w for w, idle in streams if not idle]
    if not busy:
        return highest(before, max((w for w, _ in streams if w is not None and w != NO_BOUND),
                                   default=None)), bool(streams)
    return highest(before, lowest(busy)), False
