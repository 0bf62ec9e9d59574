"""Retention of consumed input: how far a topic partition may be deleted. No I/O.

A job's tasks checkpoint input positions (the offset of the first record not processed;
recovery resumes there). Records below every reader's committed position are never
read again by those readers, so they may go. The rules:

R1  Only the job's source topic and its own channels (``<job>.shuffle-N``) are ever
    cut: never a sink, a change log, a control, heartbeat or metadata topic, the dead
    letters, or any topic the job does not read.
R2  A partition is cut below the lowest position any reader committed for it: this
    task's own (just committed) and every other reader's (other jobs reading the same
    source topic). A reader that has not committed a position for the partition
    (``None``) blocks the cut: it would start at ``offset_default``, perhaps the oldest.
R3  A cut never moves back (the transport keeps the higher low watermark).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["retention_cuts"]

StreamPartition = tuple[str, int]


def retention_cuts(committed: Mapping[StreamPartition, int], eligible: Iterable[str],
                   other_readers: Mapping[StreamPartition, Iterable[int | None]]
                   ) -> dict[StreamPartition, int]:
    """Per partition of ``committed`` (a task's committed input positions) whose topic is
    ``eligible`` (R1), the offset below which it may be deleted (R2): the lowest of the
    task's position and every position in ``other_readers`` for it; left out when some
    other reader has none."""
    allowed = set(eligible)
    cuts: dict[StreamPartition, int] = {}
    for sp, offset in committed.items():
        if sp[0] not in allowed:
            continue
        others = list(other_readers.get(sp, ()))
        if any(o is None for o in others):
            continue
        cuts[sp] = min([offset, *(o for o in others if o is not None)])
    return cuts
