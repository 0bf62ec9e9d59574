"""Watching a started run to its end: its progress at an interval, Ctrl-C and SIGTERM
taken as a graceful stop (a second as a cancel), the run closed whatever happens.

    summary = watch_run(start_pipeline(pipeline, data_dir=".eos/data"))

``runner.run_pipeline`` is ``start_pipeline`` then this; ``eos run`` watches its run
here too, with its live view as ``on_progress``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from .errors import EosError, OutageBudgetExceeded
from .outage import OutageClock

__all__ = ["watch_run", "WatchedRun"]

Summary = TypeVar("Summary", covariant=True)


class WatchedRun(Protocol[Summary]):
    """What the watch needs of a started run (``runner.PipelineRun`` is one; typed by
    this so that the watch imports nothing of the runner that calls it). The underscored
    three are the run's own, used by its watch alone."""

    outage: OutageClock

    def progress(self) -> dict[str, Any]: ...
    def stop(self, reason: str = ...) -> None: ...
    def cancel(self) -> None: ...
    def wait(self, timeout: float | None = None) -> bool: ...
    def close(self) -> None: ...
    def summary(self) -> Summary: ...
    def _stop_at_dead_letter_limit(self, progress: Mapping[str, Any]) -> str | None: ...
    def _end(self, outcome: str, error: BaseException | None = None) -> None: ...
    def _outage_error(self) -> OutageBudgetExceeded: ...


S = TypeVar("S")


def watch_run(run: WatchedRun[S], *,
              on_progress: Callable[[dict[str, Any]], None] | None = None,
              on_interrupt: Callable[[str, str], None] | None = None,
              progress_interval: float = 0.5) -> S:
    """Wait for a started run to end and return its summary (``close()``-ing it).

    ``on_progress(run.progress())`` every ``progress_interval`` seconds; the progress is
    looked at even without ``on_progress``: that look is what notices a broker outage
    that outlasts the run's budget while every task waits quietly. A first Ctrl-C or
    SIGTERM asks the run to stop gracefully (``on_interrupt("stop", "Ctrl-C" or
    "SIGTERM")``, at once); a second of either cancels it (``on_interrupt("cancel", ...)``,
    at once), waits until its tasks are gone and raises ``KeyboardInterrupt``. A run
    whose committed dead letters pass its ``max_dead_letters`` count is asked to stop
    gracefully too (``on_interrupt("stop", the reason)``; a Ctrl-C then cancels), and
    fails once stopped (``DeadLetterLimitExceeded``, from ``summary()``)."""
    # A Ctrl-C is counted, and acted on between the driver's looks: a KeyboardInterrupt
    # raised inside one (a py4j call to Spark's JVM) left that connection half read, and
    # the run failed ("Answer from Java side is empty") instead of stopping.
    # SIGTERM (kill, timeout, systemd, a container's stop) is a first Ctrl-C: a graceful
    # stop, the final checkpoints and the lease released; a second signal of either kind
    # cancels.
    presses: list[str] = []   # one entry per Ctrl-C or SIGTERM: which it was
    reasons = {"Ctrl-C": "interrupted (Ctrl-C)", "SIGTERM": "terminated (SIGTERM)"}
    own = threading.current_thread() is threading.main_thread()
    previous: dict[int, Any] = {}
    if own:
        for sig, by in ((signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")):
            previous[sig] = signal.signal(sig, lambda *_, by=by: presses.append(by))

    def give_back() -> None:   # once the run is over, or a later Ctrl-C must interrupt
        nonlocal own
        if own:
            own = False
            for sig, handler in previous.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    try:
        taken = 0
        while True:
            if len(presses) > taken:
                taken = len(presses)
                if taken > 1:
                    if on_interrupt is not None:
                        on_interrupt("cancel", presses[-1])
                    raise KeyboardInterrupt
                run.stop(reasons[presses[0]])
                if on_interrupt is not None:
                    on_interrupt("stop", presses[0])
                continue   # a second press may have come meanwhile
            if run.wait(progress_interval):
                if on_progress is not None:   # the last figures: every task's final ones
                    with contextlib.suppress(EosError):
                        on_progress({**run.progress(), "final": True})
                break
            progress = run.progress()
            if on_progress is not None:
                on_progress(progress)
            # Past a count of dead letters: a graceful stop, taken as a first press (a
            # Ctrl-C then cancels); summary() fails the run once it has stopped.
            limit_stop = run._stop_at_dead_letter_limit(progress)
            if limit_stop is not None and not presses:
                presses.append(limit_stop)
                taken = 1
                if on_interrupt is not None:
                    on_interrupt("stop", limit_stop)
        return run.summary()
    except BaseException as exc:
        give_back()   # waiting for the cancelled tasks: a third Ctrl-C interrupts that
        if not isinstance(exc, KeyboardInterrupt):
            run._end("failed", exc)
        run.cancel()
        run.wait()
        if isinstance(exc, OutageBudgetExceeded) and run.outage.began is not None:
            # The outage went on while the run went down: its length as the error is seen
            # (a task's line counts from its own first failure, later than the driver's).
            run.close()
            raise run._outage_error() from None
        raise
    finally:
        give_back()
        run.close()
