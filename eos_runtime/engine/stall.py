"""When a job that cannot make progress is given up: the no-progress rule. No I/O.

Every runtime task is long-running and holds a Spark slot for its whole life, and a
task without a running attempt stalls the others (they wait for its markers). Spark
itself waits forever for resources: a standalone cluster whose workers died, a YARN
queue that never grants executors, a cluster smaller than the plan. So the engine
watches ``JobStatus`` and applies:

S1  The job is *short* while fewer task attempts run than tasks remain unfinished
    (``running < tasks - finished``): some unfinished task has no running attempt.
S2  It *stalls* once it has been short, without a break, for ``timeout`` seconds; one
    look at which every unfinished task runs resets the clock. A retry that gets a slot
    within the timeout is a break, so crashes retried by Spark never count.
S3  A finished job (``finished >= tasks``) is never short.

Time comes in as numbers (monotonic seconds), so tests drive the rule directly.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_NO_PROGRESS_TIMEOUT", "StallWatch", "check_timeout"]

#: Seconds a job may go on with some task lacking a running attempt. Generous: a cluster
#: starts executors in seconds, a busy YARN queue may take minutes, and Spark retries a
#: crashed task at once; a dead cluster is what this catches.
DEFAULT_NO_PROGRESS_TIMEOUT = 300.0


def check_timeout(timeout: float | None) -> float | None:
    """``timeout`` as the engine takes it: seconds > 0, or None / 0 for never."""
    if timeout is None or timeout == 0:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"no-progress timeout {timeout!r}: give seconds > 0, or 0 for none")
    return float(timeout)


@dataclass
class StallWatch:
    timeout: float
    short_since: float | None = None

    def observe(self, now: float, tasks: int, running: int, finished: int) -> float | None:
        """Feed one look at the job; returns for how long it has been short once that is
        at least the timeout (S2), else None."""
        unfinished = tasks - finished
        if unfinished <= 0 or running >= unfinished:      # S3, S1
            self.short_since = None
            return None
        if self.short_since is None:
            self.short_since = now
        short = now - self.short_since
        return short if short >= self.timeout else None
