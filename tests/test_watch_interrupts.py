"""Ctrl-C while ``eos run`` watches a run (run_watch.watch_run): the press is taken between
the driver's looks, never inside one. A KeyboardInterrupt raised inside a py4j call to
Spark's JVM (the progress look asks Spark for the job's status) left that connection
half read, and the run then failed with "Answer from Java side is empty" instead of
stopping gracefully (seen once in a fresh-clone suite, test_unbounded_runs_stop_with_
eos_stop_and_with_ctrl_c)."""

from __future__ import annotations

import os
import signal

from eos_runtime.runner import watch_run


class FakeRun:
    """A run whose progress look is a call that must not be cut: Ctrl-C is pressed in
    the middle of it (as a person may at any moment)."""

    def __init__(self, presses_at: set[int], sig: int = signal.SIGINT) -> None:
        self.presses_at = presses_at
        self.sig = sig
        self.looks = 0
        self.whole_looks = 0
        self.stopped: list[str] = []
        self.cancelled = False
        self.closed = False

    def wait(self, timeout: float | None = None) -> bool:
        return bool(self.stopped) and self.looks >= 4 and not self.cancelled

    def progress(self) -> dict:
        self.looks += 1
        if self.looks in self.presses_at:
            # SIGTERM's default would end the test process: nobody took it, then
            assert signal.getsignal(self.sig) not in (signal.SIG_DFL, None), \
                f"nobody handles signal {self.sig} while the run is watched"
            os.kill(os.getpid(), self.sig)   # the handler runs at once, in this thread
        self.whole_looks += 1                     # the rest of the call
        return {}

    def stop(self, reason: str) -> None:
        self.stopped.append(reason)

    def _stop_at_dead_letter_limit(self, progress: dict) -> None:
        return None   # no max_dead_letters

    def cancel(self) -> None:
        self.cancelled = True

    def summary(self) -> str:
        return "summary"

    def close(self) -> None:
        self.closed = True


def test_a_ctrl_c_inside_a_look_stops_the_run_gracefully_after_the_look():
    run = FakeRun({2})
    told: list[tuple[str, str]] = []
    summary = watch_run(run, on_interrupt=lambda *said: told.append(said), progress_interval=0.0)
    assert summary == "summary"
    assert run.whole_looks == run.looks, "a look was cut by the Ctrl-C"
    assert run.stopped == ["interrupted (Ctrl-C)"] and told == [("stop", "Ctrl-C")]
    assert not run.cancelled and run.closed


def test_a_second_ctrl_c_cancels_and_raises_keyboard_interrupt():
    import pytest

    run = FakeRun({1, 2})
    told: list[tuple[str, str]] = []
    with pytest.raises(KeyboardInterrupt):
        watch_run(run, on_interrupt=lambda *said: told.append(said), progress_interval=0.0)
    assert run.whole_looks == run.looks
    assert told == [("stop", "Ctrl-C"), ("cancel", "Ctrl-C")] and run.cancelled and run.closed


def test_the_callers_sigint_handler_is_back_afterwards():
    before = signal.getsignal(signal.SIGINT)
    watch_run(FakeRun({2}), progress_interval=0.0)
    assert signal.getsignal(signal.SIGINT) is before


def test_sigterm_stops_the_run_gracefully_as_the_first_ctrl_c_does():
    """Issue 27: SIGTERM (kill, timeout, systemd, containers) ended the driver with no
    final checkpoint and the lease held. It is the first Ctrl-C now: a graceful stop;
    the caller's handler is back afterwards."""
    before = signal.getsignal(signal.SIGTERM)
    run = FakeRun({2}, signal.SIGTERM)
    told: list[tuple[str, str]] = []
    summary = watch_run(run, on_interrupt=lambda *said: told.append(said), progress_interval=0.0)
    assert summary == "summary"
    assert run.whole_looks == run.looks
    assert run.stopped == ["terminated (SIGTERM)"] and told == [("stop", "SIGTERM")]
    assert not run.cancelled and run.closed
    assert signal.getsignal(signal.SIGTERM) is before
