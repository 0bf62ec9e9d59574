"""One experiment run: a fresh job, its generated input, a fault schedule, the verdict.

    settings = Settings(load_workload("wordcount"), report_dir=Path("report"),
                        transport={"data_dir": "report/data"})
    result = run_experiment(settings, seed=7, schedule=random_schedule(...))

Each run is a job of its own (``<workload>-s<seed>-<random>``, on the local log in a new
directory of its own), so runs never continue one another and nothing a user made is
touched. Faults that fire inside a task (crash points, lost state, zombies) are armed
through the tasks' fault list and note when they fire in a log file; a lagging attempt
sleeps per record from its start. Faults from outside (SIGKILL at a moment, a zombie's
SIGCONT, a broker outage) are done by the ``Injector``, which watches the pid file every
task writes (``<state dir>/<job>/task-N.pid``: pid, attempt), and stops and restarts the
project's broker from its run dir (its pid in the run dir's state file). Checkpoints
come by record count only, never by timer, so a crash point's hit
count means the same thing on a slow machine as on a fast one.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..api import FORMATS
from ..errors import EosError
from ..outage import is_transient
from ..transport import TopicSpec, open_transport
from .schedule import PAUSES, Fault, Schedule, TaskRole
from .verify import Verdict, check_dead_letters, verify_output
from .workloads import Workload, sink_formats

__all__ = ["Settings", "RunResult", "Injector", "run_experiment", "task_roles"]

NO_TIMER = 3600.0     # commit_interval: checkpoints come from commit_every alone
SAMPLE_EVERY = 0.25   # seconds between timeline samples
ZOMBIE_LINGER = 5.0   # seconds a released zombie may go on after the run before it is killed
# A soak's sources idle between records at a low rate: a timer checkpoints them, or
# every downstream task would wait for markers that a record count never brings.
SOAK_COMMIT = 1.0
DRAIN_LIMIT = 120.0   # seconds a soak waits, after feeding, for its input to be committed
BROKER_REST = 15.0    # seconds the broker stays up between two outages, at least


@dataclass
class Settings:
    workload: Workload
    report_dir: Path
    transport: dict[str, Any]           # {"data_dir": root of the runs' logs} or Kafka's
    guarantee: str = "exactly-once"
    lines: int = 10_000
    commit_every: int = 200
    poll_records: int = 100
    timeout: float = 600.0
    keep_data: bool = False             # keep a passing run's log and state too
    broker_dir: Path | None = None      # run dir of the broker that broker faults stop
    replay: Callable[[int], str] = field(default=lambda seed: f"--seed {seed}")
    duration: float | None = None       # a soak: seconds of an unbounded run fed at `rate`
    rate: float = 100.0                 # a soak's input records per second
    commit_interval: float = NO_TIMER   # a soak's checkpoints come by timer too (SOAK_COMMIT)

    def __post_init__(self) -> None:
        if self.duration is not None:
            self.commit_interval = SOAK_COMMIT
            self.timeout = max(self.timeout, self.duration + DRAIN_LIMIT + 300.0)

    @property
    def soak(self) -> bool:
        return self.duration is not None

    def records(self) -> int:
        """Input records a run generates: ``lines``, or what a soak feeds at most."""
        if self.duration is None:
            return self.lines
        return max(1, math.ceil(self.rate * self.duration))

    @property
    def transport_name(self) -> str:
        return "kafka" if "bootstrap_servers" in self.transport else "local"


@dataclass
class RunResult:
    seed: int
    job: str
    guarantee: str
    transport: str
    schedule: Schedule
    faults: list[dict[str, Any]]
    attempts: list[dict[str, Any]]
    timeline: list[dict[str, Any]]
    tasks: list[dict[str, Any]]
    verdict: Verdict | None
    error: str | None
    seconds: float
    replay: str
    kept_data: str | None = None
    soak: dict[str, Any] | None = None   # a soak's duration, rate, input fed and committed
    # each generation an attempt took, with when it started: {task, attempt, generation,
    # started}
    generations: list[dict[str, Any]] = field(default_factory=list)
    # an experiment of several runs of the job: each run, how it started and ended
    runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.error is None and self.verdict is not None and self.verdict.passed

    def fired(self) -> int:
        return sum(1 for f in self.faults if f.get("fired"))

    def as_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "job": self.job, "guarantee": self.guarantee,
                "transport": self.transport, "passed": self.passed, "error": self.error,
                "seconds": round(self.seconds, 2), "replay": self.replay,
                "kept_data": self.kept_data, "soak": self.soak,
                "verdict": self.verdict.as_dict() if self.verdict is not None else None,
                "schedule": self.schedule.as_dict(), "faults": self.faults,
                "attempts": self.attempts, "generations": self.generations,
                "runs": self.runs,
                "tasks": self.tasks, "timeline": self.timeline}


def task_roles(workload: Workload, guarantee: str, *, then: bool = False) -> list[TaskRole]:
    """The job's tasks and what each does, planned on a scratch local log (no run, no
    topic of the real transport), so a schedule is checked before anything starts; with
    ``then``, a chained workload's job B's."""
    from ..plan import plan_job

    pipeline = workload.make_pipeline()
    with tempfile.TemporaryDirectory(prefix="eos-plan-") as scratch:
        with open_transport(data_dir=scratch) as t:
            t.create_topics([TopicSpec(topic, workload.source_partitions)
                             for topic in input_topics(pipeline)])
            plan = plan_job(pipeline, t, guarantee=guarantee)
            if then and workload.then is not None:   # B reads A's sink, as A makes it
                pipeline = workload.then()
                t.create_topics([TopicSpec(pipeline.source_topic,
                                           plan.stages[-1].output_partitions)])
                plan = plan_job(pipeline, t, guarantee=guarantee)
    return [TaskRole(task.task_id, task.stage, plan.stages[task.stage].is_source,
                     plan.stages[task.stage].shuffle is not None, tuple(task.partitions))
            for task in plan.tasks]


# --------------------------------------------------------------------------- the injector

def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


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
        self.job_dir = job_dir
        self.broker_dir = broker_dir
        self._outages: list[threading.Thread] = []
        self.log = log
        self.tasks = tasks
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self._log_pos = 0
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
                if f.kind == "zombie" and rec["fired"] and not rec.get("released"):
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
        from ..broker import KafkaBroker, find_running

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
        from ..runtime.progress import read_task_progress

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
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGCONT)
        rec["released"] = round(now, 3)

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
        deadline = time.monotonic() + ZOMBIE_LINGER
        for _, rec in zombies:
            pid = rec.get("zombie_pid")
            while pid is not None and _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if pid is not None and _alive(pid):
                os.kill(pid, signal.SIGKILL)
                # its task may have ended (noted) while the process hung on its way out
                rec["zombie_end"] = "; ".join(
                    [*([rec["zombie_end"]] if rec.get("zombie_end") else []),
                     f"process killed {ZOMBIE_LINGER:.0f} s after the run ended"])
        self._read_log()   # how the zombies ended
        for _, rec in zombies:
            rec.setdefault("zombie_end", "gone without a word (killed, or died outside its task)")
        for rec in self.records:
            if not rec["fired"] and not rec.get("missed"):
                rec.update(missed=True, note=rec.get("note") or "never reached")


# --------------------------------------------------------------------------- one run

def resume(pid: int) -> None:
    """Let a task held at a pause go on, once it is held: it notes the fault, then stops
    itself, and a SIGCONT that came between the two would be lost and leave it stopped
    for good (a busy machine did that)."""
    deadline = time.monotonic() + STOP_WAIT
    while time.monotonic() < deadline and _state(pid) not in ("T", "t", "Z", "X", None):
        time.sleep(0.01)
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


#: Seconds a pause waits for its task to stop itself before letting it go anyway.
STOP_WAIT = 60.0


def _state(pid: int) -> str | None:
    """The process's state letter (``/proc/<pid>/stat``; T: stopped), None once gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _fault_dicts(schedule: Schedule, log: Path, wall0: float) -> list[dict[str, Any]]:
    """The in-task faults as the tasks take them; a moment (``at``, seconds since the run
    started at ``wall0``) becomes the epoch time from which the point counts its hits. A
    pause is the point's ``stop`` action (SIGSTOP; the experiment acts, then SIGCONT); a
    clock step the runtime's ``clock`` action with its ``step``."""
    action = {"crash": "kill", "torn": "kill", "lose-state": "lose-state", "zombie": "zombie",
              "lag": "lag", "clock": "clock", **{k: "stop" for k in PAUSES}}
    return [{"point": f.point, "task": f.task, "attempt": f.attempt, "hit": f.hit,
             "action": action[f.kind], "log": str(log),
             **({"delay": f.delay} if f.kind == "lag" else {}),
             **({"step": f.step} if f.kind == "clock" else {}),
             **({"not_before": wall0 + f.at} if f.at is not None else {})}
            for f in schedule.faults if f.kind in action]


def max_attempts_for(schedule: Schedule) -> int:
    """Room for every scheduled failure of the most-faulted task, plus one attempt that
    must succeed, and one spare: a failure beyond that is a finding, not bad luck."""
    per_task: dict[int, int] = {}
    for f in schedule.task_faults():
        assert f.task is not None
        per_task[f.task] = per_task.get(f.task, 0) + 1
    return max(4, max(per_task.values(), default=0) + 2)


def _recovery(faults: list[dict[str, Any]], attempts: list[dict[str, Any]],
              timeline: list[dict[str, Any]]) -> None:
    """Per fired fault: seconds until the task's next attempt started, and until sink
    output grew again after that."""
    starts = {(a["task"], a["attempt"]): a["started"] for a in attempts}
    for rec in faults:
        if rec.get("kind") == "broker" and rec.get("back") is not None:
            _resumed(rec, rec["back"], timeline)
            continue
        if not rec.get("fired") or rec.get("task") is None or rec.get("time") is None:
            continue
        nxt = starts.get((rec["task"], rec["attempt"] + 1))
        if nxt is None:
            continue
        rec["restarted_after"] = round(max(0.0, nxt - rec["time"]), 3)
        _resumed(rec, nxt, timeline)


def _resumed(rec: dict[str, Any], since: float, timeline: list[dict[str, Any]]) -> None:
    """Seconds from the fault until sink output grew again after ``since``."""
    before = None
    for s in timeline:
        if s["t"] < since:
            before = s["sink"]
            continue
        if before is not None and s["sink"] > before:
            rec["output_resumed_after"] = round(s["t"] - rec["time"], 3)
            break
        before = s["sink"]


# --------------------------------------------------------------------------- soaks

def soak_phase(now: float, duration: float, arrived: int, committed: int,
               drain_started: float | None) -> str:
    """What a soak does next: ``feed`` until its duration is over; then ``drain`` until
    the sources' checkpoints committed every record that arrived (or DRAIN_LIMIT seconds
    went by: the verdict then shows what was not read); then ``stop``, a graceful stop,
    after which every record fed must be in the committed output."""
    if now < duration:
        return "feed"
    if committed >= arrived:
        return "stop"
    if drain_started is not None and now - drain_started >= DRAIN_LIMIT:
        return "stop"
    return "drain"


class Feeder:
    """Feeds a soak's source from a thread of its own at a steady rate: payload i is due
    i / rate seconds after the start, round-robin over the partitions, until ``stop()`` or
    the payloads run out. A failed flush (a broker outage) is noted and fed on: librdkafka
    keeps the queued records and retries them, and a record it gave up on is simply not
    in the source, which is what the oracle is computed from (``source_inputs``)."""

    def __init__(self, opts: dict[str, Any], topic: str, partitions: int,
                 payloads: list[bytes], rate: float) -> None:
        self.opts, self.topic, self.partitions = opts, topic, partitions
        self.payloads, self.rate = payloads, rate
        self.sent = 0                    # handed to the producer
        self.failed_flushes = 0
        self.error: str | None = None    # why it stopped early, if it did
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="eos-soak-feeder")

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = DRAIN_LIMIT) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            with open_transport(**self.opts) as t, t.producer() as producer:
                t0 = time.monotonic()
                while not self._stop.is_set() and self.sent < len(self.payloads):
                    due = min(len(self.payloads), int((time.monotonic() - t0) * self.rate) + 1)
                    for i in range(self.sent, due):
                        producer.produce(self.topic, i % self.partitions, self.payloads[i])
                    self.sent = due
                    self._flush(producer, 10.0)
                    self._stop.wait(0.1)
                deadline = time.monotonic() + DRAIN_LIMIT
                while not self._flush(producer, 10.0) and time.monotonic() < deadline:
                    pass
        except EosError as exc:
            self.error = " ".join(str(exc).split())[:300]

    def _flush(self, producer: Any, timeout: float) -> bool:
        try:
            producer.flush(timeout)
            return True
        except EosError as exc:
            if not is_transient(exc):
                raise
            self.failed_flushes += 1
            return False


def source_inputs(transport: Any, topic: str, payloads: list[bytes],
                  values: list[Any]) -> list[Any]:
    """The values the source holds, in the order they were fed (partition by partition
    interleaved by offset): the input the soak's oracle is computed over, whatever an
    outage let through."""
    from ..joblog.committed import read_topic

    index = {payload: i for i, payload in reversed(list(enumerate(payloads)))}
    records = sorted(read_topic(transport, topic, read_committed=False),
                     key=lambda r: (r.offset, r.partition))
    out = []
    for r in records:
        i = index.get(r.value or b"")
        if i is None:
            raise EosError(f"{topic}[{r.partition}] offset {r.offset} holds a record the soak "
                           f"did not feed")
        out.append(values[i])
    return out


def new_job(settings: Settings, seed: int) -> tuple[str, Any, dict[str, Any], Path]:
    """A job of the run's own: its name, its pipeline renamed to it (on Kafka with topics
    named after it), the transport's options and the run's root directory, whose
    ``state/<job>`` (the tasks' state, pid and progress files) is made."""
    w = settings.workload
    job = f"{w.name}-s{seed}-{uuid.uuid4().hex[:6]}"
    pipeline = w.make_pipeline()
    if settings.transport_name == "local":
        pipeline.rename(job)
    else:
        pipeline.rename(job, sources={t: f"{job}-{t}" for t in input_topics(pipeline)},
                        sinks={s.topic: f"{job}-{s.topic}" for s in pipeline.sinks})
    if settings.transport_name == "local":
        root = Path(settings.transport["data_dir"]).absolute() / job
        opts: dict[str, Any] = {"data_dir": str(root)}
    else:
        root = Path(settings.report_dir).absolute() / "state" / job
        opts = dict(settings.transport)
    (root / "state" / job).mkdir(parents=True, exist_ok=True)
    return job, pipeline, opts, root


def input_topics(pipeline: Any) -> list[str]:
    """Every topic the pipeline reads: its sources' and its tables'."""
    return [s.topic for s in pipeline.sources] + [t.topic for t in pipeline.tables]


def _fed(settings: Settings, job: str, feed: dict[str, Any]) -> dict[str, Any]:
    """A graph workload's input by the topics of the run's job (on Kafka: named after it)."""
    if settings.transport_name == "local":
        return feed
    return {f"{job}-{topic}": records for topic, records in feed.items()}


def feed_graph(t: Any, feed: dict[str, Any], partitions: int) -> None:
    """Create each input topic and write its records, each to the partition it names."""
    t.create_topics([TopicSpec(topic, partitions) for topic in feed])
    with t.producer() as producer:
        for topic, records in feed.items():
            for partition, key, value in records:
                producer.produce(topic, partition, value, key=key)
        producer.flush()


def verify_sinks(t: Any, settings: Settings, job: str, pipeline: Any,
                 expected: dict[str, Any]) -> Any:
    """A graph workload's verdict: every sink against its oracle, one verdict of them."""
    from .verify import merge

    verdicts = []
    for sink, name in zip(pipeline.sinks, _original_sinks(settings, job, pipeline),
                          strict=True):
        key = FORMATS[sink.key_format][1] if sink.key_format else None
        verdicts.append(verify_output(t, sink.topic, job, expected[name], settings.guarantee,
                                      key_decode=key, value_decode=FORMATS[sink.value_format][1]))
    return merge(verdicts, settings.guarantee)


def _original_sinks(settings: Settings, job: str, pipeline: Any) -> list[str]:
    prefix = "" if settings.transport_name == "local" else f"{job}-"
    return [s.topic[len(prefix):] for s in pipeline.sinks]


def run_experiment(settings: Settings, seed: int, schedule: Schedule, *,
                   on_progress: Callable[[dict[str, Any]], None] | None = None) -> RunResult:
    """Run ``settings.workload`` once under ``schedule`` and judge its committed output
    (several runs of the job when the schedule has an operator's actions: multirun.py)."""
    from ..runner import start_pipeline

    if schedule.multi_run():
        from .multirun import run_scenario

        return run_scenario(settings, seed, schedule, on_progress=on_progress)

    w = settings.workload
    job, pipeline, opts, root = new_job(settings, seed)
    state = root / "state"
    job_dir = state / job
    log = job_dir / "faults.log"

    values = w.generate(seed, settings.records())
    if w.feed is not None:   # a graph: input into each source and table topic
        fed_topics = _fed(settings, job, w.feed(values))
        with open_transport(**opts) as t:
            feed_graph(t, fed_topics, w.source_partitions)
        payloads: list[bytes] = []
    else:
        payloads = w.input_bytes(values, pipeline)
    with open_transport(**opts) as t:
        if w.feed is None:
            t.create_topics([TopicSpec(pipeline.source_topic, w.source_partitions)])
        if not settings.soak and w.feed is None:
            with t.producer() as producer:
                for i, v in enumerate(payloads):
                    producer.produce(pipeline.source_topic, i % w.source_partitions, v)
                producer.flush()

    roles = task_roles(w, settings.guarantee)
    whole, schedule = schedule, schedule.of_job(1)   # job B's faults: chained.run_then
    injector = Injector(schedule, job_dir, log, len(roles), settings.broker_dir)
    timeline: list[dict[str, Any]] = []
    error: str | None = None
    tasks: list[dict[str, Any]] = []
    options: dict[str, Any] = dict(opts)
    buffer = schedule.buffer_max_bytes()
    if buffer is not None:
        options["buffer_max_bytes"] = buffer
    # The moment every fault's time counts from: taken before the start, so the tasks'
    # not_before and the injector's clock agree.
    t0, wall0 = time.monotonic(), time.time()
    feeder = (Feeder(opts, pipeline.source_topic, w.source_partitions, payloads, settings.rate)
              if settings.soak else None)
    if feeder is not None:
        feeder.start()   # from the run's start: it feeds for the whole duration
    try:
        run = start_pipeline(pipeline, guarantee=settings.guarantee,
                             commit_every=settings.commit_every,
                             commit_interval=settings.commit_interval,
                             poll_records=settings.poll_records, state_dir=str(state),
                             max_attempts=max_attempts_for(schedule), bounded=not settings.soak,
                             fault=_fault_dicts(schedule, log, wall0), **options)
    except BaseException:
        if feeder is not None:
            feeder.stop()
        raise
    injector.t0, injector.wall0 = t0, wall0
    phase = "feed" if settings.soak else "run"
    drain_started: float | None = None
    try:
        next_sample = 0.0
        while not run.wait(0.05):
            injector.tick()
            now = injector.now()
            if now >= next_sample:
                next_sample = now + SAMPLE_EVERY
                try:
                    p = run.progress()
                except EosError as exc:   # an outage past the run's budget: the run failed
                    error = " ".join(str(exc).split())[:500]
                    run.cancel()
                    run.wait()
                    break
                timeline.append({"t": round(now, 3), "sink": p["sink_records"],
                                 "source": p["source_new_records"],
                                 "running": p["tasks_running"], "finished": p["tasks_finished"],
                                 "failed": p["failed_attempts"]})
                if feeder is not None and settings.duration is not None and phase != "stop":
                    if phase == "feed" and now >= settings.duration:
                        feeder.stop()   # every record fed is in the source before the drain
                        drain_started = injector.now()
                        p = run.progress()
                    phase = soak_phase(now, settings.duration, p["source_new_records"],
                                       p["input_committed"], drain_started)
                    if phase == "stop":
                        run.stop("the soak's duration is over")
                if on_progress is not None:
                    on_progress({"seed": seed, "seconds": now, "sink_records": p["sink_records"],
                                 "tasks_running": p["tasks_running"],
                                 "tasks_finished": p["tasks_finished"],
                                 "failed_attempts": p["failed_attempts"],
                                 "faults_fired": sum(1 for r in injector.records if r["fired"]),
                                 "faults": len(injector.records), "events": injector.drain(),
                                 "phase": phase, "duration": settings.duration,
                                 "fed": p["source_new_records"],
                                 "input_committed": p["input_committed"]})
            if now > settings.timeout:
                error = f"timed out after {settings.timeout:.0f} s; the run was cancelled"
                run.cancel()
                run.wait()
                break
        if error is None:
            try:
                tasks = run.summary().tasks
            except EosError as exc:
                error = " ".join(str(exc).split())[:500]
    except BaseException:
        run.cancel()
        run.wait()
        raise
    finally:
        if feeder is not None:
            feeder.stop()
        seconds = injector.now()
        try:
            p = run.progress()
            timeline.append({"t": round(seconds, 3), "sink": p["sink_records"],
                             "source": p["source_new_records"], "running": p["tasks_running"],
                             "finished": p["tasks_finished"], "failed": p["failed_attempts"]})
        except EosError:
            pass   # the last sample is a nicety; the run's own error is what counts
        run.close()
        injector.finish()

    soak: dict[str, Any] | None = None
    then: dict[str, Any] | None = None
    with open_transport(**opts) as t:
        if w.sinks_oracle is not None:   # a graph: every sink against its oracle
            verdict = verify_sinks(t, settings, job, pipeline, w.sinks_oracle(values))
        else:
            key_decode, value_decode = sink_formats(pipeline)
            if feeder is None:
                expected = w.oracle(values)
            else:
                # Exactly what reached the source, not what was meant to: an outage may
                # have cost the feeder records, and the run can only be judged on what it
                # was given.
                fed = source_inputs(t, pipeline.source_topic, payloads, values)
                expected = w.oracle(fed)
                soak = {"duration": settings.duration, "rate": settings.rate,
                        "generated": len(values), "handed_to_producer": feeder.sent,
                        "fed": len(fed), "failed_flushes": feeder.failed_flushes,
                        "feeder_error": feeder.error,
                        "drain_seconds": (None if drain_started is None
                                          else round(seconds - drain_started, 3))}
                if feeder.error is not None and error is None:
                    error = f"the soak's feeder stopped: {feeder.error}"
            verdict = verify_output(t, pipeline.sink_topic, job, expected, settings.guarantee,
                                    key_decode=key_decode, value_decode=value_decode)
        if w.then is not None and error is None and feeder is None:
            from .chained import run_then
            from .verify import merge

            verdict_b, error, then = run_then(settings, job, pipeline.sink_topic, values,
                                              whole.of_job(2), opts, state, t0, wall0)
            if verdict_b is not None:
                verdict = merge([verdict, verdict_b], settings.guarantee)
        if w.dead_letters is not None and pipeline.dead_letter_topic and feeder is None:
            # input i went to partition i % partitions, at offset i // partitions
            bad = Counter((i % w.source_partitions, i // w.source_partitions)
                          for i, b in enumerate(w.dead_letters(values)) if b)
            check_dead_letters(verdict, t, pipeline.dead_letter_topic, job,
                               pipeline.source_topic, bad)
    attempts = sorted(injector.attempts.values(), key=lambda a: (a["task"], a["attempt"]))
    faults = injector.records
    if then is not None:   # job B's faults and attempts, marked job 2
        faults = faults + then["faults"]
        attempts = attempts + then["attempts"]
    _recovery(faults, attempts, timeline)
    result = RunResult(seed, job, settings.guarantee, settings.transport_name, whole, faults,
                       attempts, timeline, tasks, verdict, error, seconds, settings.replay(seed),
                       soak=soak, generations=sorted(
                           injector.generations.values(),
                           key=lambda g: (g["task"], g["attempt"], g["generation"])))
    if result.passed and not settings.keep_data:
        shutil.rmtree(root, ignore_errors=True)   # a directory this run made, nothing else
    else:
        result.kept_data = str(root)
    return result
