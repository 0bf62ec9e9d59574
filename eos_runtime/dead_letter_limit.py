"""The most dead letters a run may leave: ``max_dead_letters`` (``eos run
--max-dead-letters N|P%``). Pure: the driver asks, and acts on the answers.

A run past its limit fails with ``DeadLetterLimitExceeded``, which carries its summary.
The count is of the records the run's checkpoints committed to the dead-letter topic
(``TaskStats.dead_letters``: over every attempt, once per record), so what the error
says is what ``eos consume <job>.dead-letters`` shows of the run.

When each kind is checked, and why:

- ``N``, a count: as soon as the run passes it. The driver's watch
  (``run_watch.watch_run``) sees the tasks' committed counts at each look and asks the
  run to stop gracefully: every task takes a final checkpoint, so what the run committed
  (output, state, input positions, dead letters) stays consistent and the next run goes
  on from there. The run then fails. Checked again at the run's end, which the watch may
  not have seen coming (a bounded run that ended between two looks, a driver that cannot
  read the tasks' counters).
- ``P%``, a share of the source records the run read: at the run's end only. Early in a
  run a share is noise (one bad record among the first ten is 10 %), and stopping on it
  would fail runs that end well under the limit.

"More than" passes a limit: ``0`` allows none, ``10`` ten, ``1%`` one in a hundred.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

__all__ = ["DeadLetterLimit", "parse_limit"]

_SPEC = ("give a count of records (0 or more, such as 100) or a share of the records read "
         "(0% to 100%, such as 1% or 0.5%)")


@dataclass(frozen=True)
class DeadLetterLimit:
    """A run's limit: ``count`` records, or ``percent`` of the source records it read."""

    count: int | None = None
    percent: float | None = None

    def __str__(self) -> str:
        return str(self.count) if self.count is not None else f"{self.percent:g}%"

    def passed_live(self, stages: list[Mapping[str, Any]]) -> int | None:
        """A look at a running run (its progress's ``stages``): the dead letters it
        committed so far when they pass a count limit; None otherwise, and always for a
        share (checked at the end only)."""
        if self.count is None:
            return None
        dead = sum(int(st.get("dead_letters", 0) or 0) for st in stages)
        return dead if dead > self.count else None

    def passed(self, dead: int, read: int) -> bool:
        """At the run's end: ``dead`` letters of ``read`` source records pass the limit."""
        if self.count is not None:
            return dead > self.count
        assert self.percent is not None
        return dead * 100 > self.percent * read

    def live_reason(self, dead: int) -> str:
        """Why the watch stopped the run (its stop request's reason)."""
        return (f"{dead:,} records went to dead letters, more than --max-dead-letters "
                f"{self} allows")

    def failure(self, dead: int, read: int, topic: str, *, stopped: bool) -> str:
        """The one line of a run that failed on the limit. ``stopped``: the watch stopped
        it when it passed the limit (else it ended on its own first)."""
        share = (f", {100 * dead / read:.3g}% of the {read:,} records read"
                 if self.percent is not None and read else "")
        ended = ("the run was stopped there (final checkpoints)" if stopped else
                 "the run ended")
        return (f"{dead:,} records went to dead letters (topic {topic}){share}, more than "
                f"--max-dead-letters {self} allows: {ended}, and what it committed stands "
                f"(the next run goes on from there); eos consume {topic} shows them")


def parse_limit(spec: int | str | DeadLetterLimit) -> DeadLetterLimit:
    """``N`` (a count, >= 0) or ``P%`` (0 to 100, decimals allowed) as a limit;
    ``ConfigError`` naming what was given otherwise."""
    if isinstance(spec, DeadLetterLimit):
        return spec
    text = str(spec).strip() if isinstance(spec, (int, str)) else ""
    try:
        if isinstance(spec, bool) or not text:
            raise ValueError
        if text.endswith("%"):
            percent = float(text[:-1])
            if not math.isfinite(percent) or not 0 <= percent <= 100:
                raise ValueError
            return DeadLetterLimit(percent=percent)
        count = int(text)
        if count < 0:
            raise ValueError
        return DeadLetterLimit(count=count)
    except ValueError:
        raise ConfigError(f"--max-dead-letters {spec!r}: {_SPEC}") from None
