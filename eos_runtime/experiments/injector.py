"""Faults from outside a task: the ``Injector`` watches the pid file every task writes
(``<state dir>/<job>/task-N.pid``: pid, attempt) and the progress file beside it, SIGKILLs
an attempt at a moment, releases a zombie, holds and lets go a task at a crash point for
an operator's action, and stops and restarts the project's broker from its run dir (its
pid in the run dir's state file)."""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..broker import KafkaBroker, find_running
from ..errors import ConfigError
from ..faults import stack_file
from ..processes import alive
from ..processes import state as process_state
from ..runtime.progress import read_task_progress
from .schedule import PAUSES, Fault, Schedule

__all__ = ["Injector", "resume", "alive", "broker_may_stop", "zombie_linger", "BROKER_REST",
           "ZOMBIE_LINGER", "ZOMBIE_LINGER_ENV"]

# Seconds a released zombie may go on after the run before it is killed. A bound, not a
# wait: it costs time only for a zombie that has not ended. 5 s, then 20 s, were each
# outlasted once in a fresh-clone suite run on a busy machine (the output exact, where
# the zombie was unknown); a zombie killed now leaves its stack in the report.
ZOMBIE_LINGER = 60.0
#: Overrides ZOMBIE_LINGER (seconds, a positive number): a slower machine, or a test that
#: must see its zombies end on their own, gives them longer.
ZOMBIE_LINGER_ENV = "EOS_ZOMBIE_LINGER"
BROKER_REST = 15.0    # seconds the broker stays up between two outages, at least


def zombie_linger() -> float:
    """Seconds a released zombie may go on after the run: ``$EOS_ZOMBIE_LINGER`` when set
    (and not blank), else ``ZOMBIE_LINGER``. A value that is not a positive, finite
    number is a ``ConfigError`` naming the variable."""
    raw = os.environ.get(ZOMBIE_LINGER_ENV, "").strip()
    if not raw:
        return ZOMBIE_LINGER
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{ZOMBIE_LINGER_ENV} must be a positive number of seconds, "
                          f"not {raw!r}")
    return value


def broker_may_stop(now: float, due: float, outage_running: bool,
                    last_back: float | None) -> bool:
    """Whether a broker outage due at ``due`` starts now: one outage at a time, and the
    broker up for BROKER_REST seconds since the last came back. Outages that fell due
    while another lasted (a broker's restart can take half a minute on a loaded machine)
    would otherwise follow it at once, and the run see one outage longer than its budget
    where the schedule meant two."""
    if now < due or outage_running:
        return False
    return last_back is None or now >= last_back + BROKER_REST


class Injector:
    """Watches the tasks' attempts, notes faults as they fire, does the outside ones."""

    def __init__(self, schedule: Schedule, job_dir: Path, log: Path, tasks: int,
                 broker_dir: Path | None = None,
                 on_pause: Callable[[Fault, dict[str, Any], dict[str, Any]], None] | None = None
                 ) -> None:
        # A pause (stop, cancel, take-over, append) holds its task at its point (SIGSTOP):
        # ``on_pause(fault, record, note)`` acts, then lets the task go on (note["pid"]).
        self.on_pause = on_pause
        zombie_linger()   # a bad EOS_ZOMBIE_LINGER fails before the run, not after it
        self.job_dir = job_dir
        self.broker_dir = broker_dir
        self._outages: list[threading.Thread] = []
        self.log = log
        self.tasks = tasks
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self._log_pos = 0
        self._last_note: dict[int, str] = {}   # pid -> the action of its latest note
        self.attempts: dict[tuple[int, int], dict[str, Any]] = {}
        # (task, attempt, generation) -> when it started (the task's progress file)
        self.generations: dict[tuple[int, int, int], dict[str, Any]] = {}
        self.records: list[dict[str, Any]] = []
        for f in schedule.faults:
            rec = {**f.as_dict(), "describe": f.describe(), "fired": False, "time": None}
            if f.kind == "buffer":
                rec.update(fired=True, time=0.0, note="a run-wide setting, from the start")
            self.records.append(rec)
        self._faults = list(zip(schedule.faults, self.records, strict=True))
        self.events: list[dict[str, Any]] = []   # fired since the last drain (for progress)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def tick(self) -> None:
        now = self.now()
        self._read_pids(now)
        self._read_generations()
        self._read_log()
        for f, rec in self._faults:
            if rec["fired"] or rec.get("missed"):
                if f.kind == "zombie" and rec["fired"]:
                    if rec.get("released"):
                        self._wake(rec)
                    else:
                        self._release(f, rec, now)
                continue
            if f.kind == "kill":
                self._kill(f, rec, now)
            elif f.kind == "lag":
                self._lag(f, rec)
            elif f.kind == "broker":
                self._broker(f, rec, now)

    def _lag(self, f: Fault, rec: dict[str, Any]) -> None:
        """A lag is the attempt's condition from its start: it fires when that starts."""
        mine = self.attempts.get((f.task, f.attempt)) if f.task is not None else None
        if mine is not None and mine["started"] is not None:
            rec.update(fired=True, time=mine["started"], pid=mine["pid"])
            self.events.append(rec)

    def _broker(self, f: Fault, rec: dict[str, Any], now: float) -> None:
        assert f.after is not None
        # From the first task's start, as a kill counts from its attempt's: Spark's own
        # start-up takes seconds that vary from machine to machine.
        started = [a["started"] for a in self.attempts.values() if a["started"] is not None]
        if not started or rec.get("started"):
            return
        backs = [r["back"] for r in self.records if r.get("back") is not None]
        if not broker_may_stop(now, min(started) + f.after,
                               any(t.is_alive() for t in self._outages), max(backs, default=None)):
            return
        rec["started"] = True
        thread = threading.Thread(target=self._outage, args=(f, rec), daemon=True,
                                  name="eos-experiment-broker-outage")
        self._outages.append(thread)
        thread.start()

    def _outage(self, f: Fault, rec: dict[str, Any]) -> None:
        """Stop the broker (its pid from the run dir's state file), wait until it is gone,
        ``down`` seconds later start it again on the same ports. In a thread: the JVM's
        start takes seconds that the injector's other faults and samples must not wait."""
        try:
            assert self.broker_dir is not None and f.down is not None
            state = find_running(self.broker_dir)
            if state is None:
                rec.update(missed=True, note=f"no broker was running from {self.broker_dir}")
                return
            os.kill(state.pid, signal.SIGKILL if f.signal == "kill" else signal.SIGTERM)
            rec.update(fired=True, time=round(self.now(), 3), pid=state.pid)
            self.events.append(rec)
            deadline = time.monotonic() + 60
            while find_running(self.broker_dir) is not None:
                if time.monotonic() > deadline:   # SIGTERM's controlled shutdown hung
                    os.kill(state.pid, signal.SIGKILL)
                    deadline = time.monotonic() + 60
                time.sleep(0.05)
            rec["gone"] = round(self.now(), 3)
            time.sleep(f.down)
            # Not die_with_parent: the broker outlives the experiment, as before the fault.
            KafkaBroker(self.broker_dir, port=state.port,
                        controller_port=state.controller_port).start()
            rec["back"] = round(self.now(), 3)
            rec["restarted_after"] = round(rec["back"] - rec["time"], 3)
        except Exception as exc:   # noted in the report; the run's verdict says the rest
            rec["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"

    def drain(self) -> list[dict[str, Any]]:
        out, self.events = self.events, []
        return out

    def _read_pids(self, now: float) -> None:
        for task in range(self.tasks):
            path = self.job_dir / f"task-{task}.pid"
            try:
                pid, attempt = map(int, path.read_text().split())
                # when the attempt wrote it, not when this tick saw it
                started = min(now, path.stat().st_mtime - self.wall0)
            except (OSError, ValueError):   # not there yet, or caught half written
                continue
            known = self.attempts.get((task, attempt))
            if known is None or known["pid"] is None:
                self.attempts[(task, attempt)] = {"task": task, "attempt": attempt, "pid": pid,
                                                  "started": round(max(0.0, started), 3)}

    def _read_generations(self) -> None:
        """The generations each attempt took (a restart in place or a rewind takes a new
        one in the same attempt), from the progress file its task writes at each
        generation's start (``runtime/progress.py``)."""
        for task in range(self.tasks):
            got = read_task_progress(self.job_dir / f"task-{task}.progress")
            if got is None or not isinstance(got.get("attempt"), int):
                continue
            for generation, when in got.get("generations") or ():
                key = (task, got["attempt"], int(generation))
                if key not in self.generations:
                    self.generations[key] = {
                        "task": task, "attempt": got["attempt"], "generation": int(generation),
                        "started": round(max(0.0, float(when) - self.wall0), 3)}

    def _read_log(self) -> None:
        try:
            with open(self.log) as log:
                log.seek(self._log_pos)
                text = log.read()
        except OSError:
            return
        end = text.rfind("\n") + 1   # a line being written is read on the next tick
        self._log_pos += len(text[:end].encode())
        for line in text[:end].splitlines():
            try:
                note = json.loads(line)
            except ValueError:
                continue
            t = round(note["time"] - self.wall0, 3)
            self._last_note[note["pid"]] = str(note.get("action"))
            if note.get("action") == "zombie-end":
                for f, rec in self._faults:
                    if f.kind == "zombie" and rec.get("zombie_pid") == note["pid"]:
                        rec.update(zombie_end=f"ended at {t:.2f} s",
                                   zombie_said=note.get("error") or "finished its task")
                continue
            self.attempts.setdefault((note["task"], note["attempt"]), {
                "task": note["task"], "attempt": note["attempt"], "pid": None, "started": None})
            for f, rec in self._faults:
                if (not rec["fired"] and f.task == note["task"] and f.attempt == note["attempt"]
                        and f.point == note["point"]):
                    rec.update(fired=True, time=t)
                    if f.kind == "zombie":
                        rec["zombie_pid"] = note["pid"]
                    self.events.append(rec)
                    if f.kind in PAUSES:
                        rec["pid"] = note["pid"]
                        if self.on_pause is not None:
                            self.on_pause(f, rec, note)
                        else:   # nobody to act: the task must not stay stopped
                            resume(note["pid"])

    def _kill(self, f: Fault, rec: dict[str, Any], now: float) -> None:
        assert f.task is not None and f.after is not None
        later = [a for (task, a) in self.attempts if task == f.task and a > f.attempt]
        mine = self.attempts.get((f.task, f.attempt))
        if later:
            rec.update(missed=True, note="a later attempt had started")
            return
        if (mine is None or mine["started"] is None
                or now < max(mine["started"] + f.after, f.at or 0.0)):
            return
        try:
            os.kill(mine["pid"], signal.SIGKILL)
        except ProcessLookupError:
            rec.update(missed=True, note="the attempt had ended")
            return
        rec.update(fired=True, time=round(now, 3), pid=mine["pid"])
        self.events.append(rec)

    def _release(self, f: Fault, rec: dict[str, Any], now: float, force: bool = False) -> None:
        assert f.task is not None and f.release is not None
        successor = self.attempts.get((f.task, f.attempt + 1))
        due = (successor is not None and successor["started"] is not None
               and now >= successor["started"] + f.release)
        if not (due or force):
            return
        pid = rec.get("zombie_pid")
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGCONT)
        rec["released"] = round(now, 3)

    def _wake(self, rec: dict[str, Any]) -> None:
        """Release again a released zombie still stopped at its split: the SIGCONT came
        between its note and its SIGSTOP (a busy machine can hold a process there), and
        was lost. Only while its latest note is the split's: a zombie held at a pause
        later is its pause's to let go."""
        pid = rec.get("zombie_pid")
        if (pid is not None and self._last_note.get(pid) == "zombie"
                and process_state(pid) in ("T", "t")):
            rec["released_again"] = rec.get("released_again", 0) + 1
            os.kill(pid, signal.SIGCONT)

    def finish(self) -> None:
        """After the run: release zombies still stopped, give them a moment to write late,
        then kill what is left of them; wait for broker outages to end (the broker must be
        back for the verification); mark every fault that never fired. No outside fault
        starts now: an outage or a kill after the run tests nothing."""
        self._read_pids(self.now())
        self._read_generations()
        self._read_log()
        for f, rec in self._faults:
            if f.kind == "broker" and not rec.get("started") and not rec.get("missed"):
                rec.update(missed=True, note="the run had ended")
        for thread in self._outages:
            thread.join(300)
        zombies = [(f, rec) for f, rec in self._faults if f.kind == "zombie" and rec["fired"]]
        for f, rec in zombies:
            if not rec.get("released"):
                self._release(f, rec, self.now(), force=True)
        linger = zombie_linger()
        deadline = time.monotonic() + linger
        for _, rec in zombies:
            pid = rec.get("zombie_pid")
            while pid is not None and alive(pid) and time.monotonic() < deadline:
                self._read_log()
                self._wake(rec)
                time.sleep(0.05)
            if pid is not None and alive(pid):
                rec.update(_last_words(pid, self.log))
                os.kill(pid, signal.SIGKILL)
                # its task may have ended (noted) while the process hung on its way out
                rec["zombie_end"] = "; ".join(
                    [*([rec["zombie_end"]] if rec.get("zombie_end") else []),
                     f"process killed {linger:.0f} s after the run ended"])
        self._read_log()   # how the zombies ended
        for _, rec in zombies:
            rec.setdefault("zombie_end", "gone without a word (killed, or died outside its task)")
            if rec.get("zombie_pid") is not None:   # never asked for: no file left behind
                stack_file(self.log, rec["zombie_pid"]).unlink(missing_ok=True)
        for rec in self.records:
            if not rec["fired"] and not rec.get("missed"):
                rec.update(missed=True, note=rec.get("note") or "never reached")


# --------------------------------------------------------------------------- one run


def resume(pid: int) -> None:
    """Let a task held at a pause go on, once it is held: it notes the fault, then stops
    itself, and a SIGCONT that came between the two would be lost and leave it stopped
    for good (a busy machine did that)."""
    deadline = time.monotonic() + STOP_WAIT
    while time.monotonic() < deadline and process_state(pid) not in ("T", "t", "Z", "X", None):
        time.sleep(0.01)
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


#: Seconds a pause waits for its task to stop itself before letting it go anyway.
STOP_WAIT = 60.0


def _last_words(pid: int, log: Path) -> dict[str, Any]:
    """Where a zombie that would not end was: its state letter, what it waits in, and
    the Python stack it writes when asked (``faults.stack_file``): a report's clue."""
    out: dict[str, Any] = {"zombie_state": process_state(pid)}
    try:
        out["zombie_wchan"] = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        pass
    stack = stack_file(log, pid)
    if out["zombie_state"] not in ("T", "t") and stack.exists():
        os.kill(pid, signal.SIGUSR2)   # faulthandler writes every thread's stack
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not stack.stat().st_size:
            time.sleep(0.05)
        time.sleep(0.2)   # the other threads' stacks follow the first
        out["zombie_stack"] = stack.read_text()[-4000:]
    return out
