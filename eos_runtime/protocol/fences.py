"""Restore knowledge as a history: every fence a producer's restarts caused. No I/O.

A restore command (P, g, V) says: producer P restarted as generation g from its
checkpoint V, so P's messages of a generation below g and a version above V never count
(invariant 6). A producer that restarts twice, (P, 2, V1) then (P, 3, V2), leaves two
such rules, and both apply: generation 1's messages of versions in (V1, V2] are void by
the first one alone. Keeping only the newest fence per producer lets them count again
while they are still unread on a lagging channel or held in a buffer.

Rules:

F1  A message (P, gen, ver) is fenced iff some fence (P, g, V) has gen < g and ver > V.
F2  A fence another one dominates adds nothing: (g, V) is dominated by (g', V') when
    g <= g' and V >= V' (whatever the first fences, the second fences too). Adding a
    dominated fence is a duplicate (invariant 7); adding one drops those it dominates.
    So each producer keeps a staircase: generations and versions both strictly rising.
F3  Once the task committed version C, a fence (g, V) matters only for versions above C
    (lower ones are stale anyway, aligner R1). If the next fence up the staircase has
    V' <= C, it fences everything above C that (g, V) does: (g, V) can go. The history
    then holds the restarts since the last commit, not every restart ever.

The history is part of the checkpoint (``ChangeLogCommit.fences``, several per producer).
"""

from __future__ import annotations

from collections.abc import Iterable

from .wire import ProducerFence

__all__ = ["Fences"]


class Fences:
    """Per producer, the staircase of fences (F1-F3)."""

    def __init__(self, fences: Iterable[ProducerFence] = ()) -> None:
        self._by_producer: dict[int, list[tuple[int, int]]] = {}
        for f in fences:
            self.add(f.producer_id, f.generation, f.version)

    def add(self, producer: int, generation: int, version: int, committed: int = 0) -> bool:
        """Remember restore (producer, generation, version); False if it adds nothing: a
        fence dominates it (F2), or a newer one makes it redundant above ``committed`` (F3),
        as when a restore is read again after the task's own restart."""
        stairs = self._by_producer.setdefault(producer, [])
        if any(generation <= g and version >= v for g, v in stairs):
            return False
        if any(g > generation and v <= committed for g, v in stairs):
            return False
        stairs[:] = sorted([(g, v) for g, v in stairs if not (g <= generation and v >= version)]
                           + [(generation, version)])
        return True

    def fenced(self, producer: int, generation: int, version: int) -> bool:
        """F1."""
        stairs = self._by_producer.get(producer)
        if not stairs:
            return False
        return any(generation < g and version > v for g, v in stairs)

    def prune(self, committed: int) -> None:
        """F3: drop fences whose work the next one up the staircase does above ``committed``."""
        for stairs in self._by_producer.values():
            stairs[:] = [s for i, s in enumerate(stairs)
                         if i + 1 == len(stairs) or stairs[i + 1][1] > committed]

    def of(self, producer: int) -> tuple[tuple[int, int], ...]:
        """The producer's (generation, version) staircase, oldest first."""
        return tuple(self._by_producer.get(producer, ()))

    def as_wire(self) -> tuple[ProducerFence, ...]:
        return tuple(ProducerFence(p, g, v) for p, stairs in sorted(self._by_producer.items())
                     for g, v in stairs)

    def copy(self) -> Fences:
        other = Fences()
        other._by_producer = {p: list(s) for p, s in self._by_producer.items()}
        return other
