"""Fault schedules: which faults an experiment injects, where and when.

A schedule is a list of faults, from a small file (TOML or JSON) or drawn at random
from a seed. Every fault but ``buffer`` targets one attempt of one task:

- ``crash`` (task, attempt, point, hit): the attempt SIGKILLs itself at the hit-th time
  it reaches the named crash point;
- ``torn`` (task, attempt, point, hit): the same at a local-log append point, a torn
  write (local log only);
- ``lose-state`` (task, attempt, point, hit): at the point the attempt deletes its
  RocksDB directory, then dies: the retry has no local state;
- ``zombie`` (task, attempt, point, hit, release): at the point the attempt splits; one
  half dies (the engine retries the task), the other stops and, ``release`` seconds
  after the retry started, goes on beside its successor (both transports; on Kafka the
  zombie's clients are made anew after the split, and the broker fences its producer);
- ``kill`` (task, attempt, after): the experiment SIGKILLs the attempt's worker
  ``after`` seconds after the attempt started;
- ``buffer`` (max_bytes): every channel task's early-arrival buffer holds at most
  max_bytes, so the overflow path runs (exactly-once only);
- ``broker`` (after, down, signal): the experiment stops the Kafka broker ``after``
  seconds after the first task started (SIGKILL, or SIGTERM with ``signal = "term"``) and
  starts it again
  on the same ports ``down`` seconds after it is gone; the run must ride through it
  (Kafka, the project's own broker only; drawn only when ``--kinds`` names it);
- ``lag`` (task, attempt, delay): the attempt sleeps ``delay`` seconds per record it
  processes: a lagging producer, so versions skew and downstream buffers fill. It does
  not end the attempt, so it may share one with another fault.

``attempt`` is 0 for a task's first attempt and n for the one after n failures, so a
schedule can crash one task many times: attempt 1 runs only if attempt 0 died.

    # schedule.toml
    [[fault]]
    kind = "crash"
    task = 2
    point = "task.checkpoint.before_commit"
    hit = 2

    [[fault]]
    kind = "kill"
    task = 2
    attempt = 1
    after = 0.5
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import faults
from ..errors import ConfigError
from ..faults import CRASH_POINTS

__all__ = ["KINDS", "Fault", "Schedule", "TaskRole", "parse_schedule", "load_schedule",
           "kinds_for", "check_schedule"]

KINDS = ("crash", "torn", "lose-state", "zombie", "kill", "buffer", "broker", "lag",
         "startpoint", "checkpoint", "reset", "start", "stop", "cancel", "take-over", "append",
         "clock")
#: Kinds the issue names that this slice does not build yet (refused with a clear line).
NOT_BUILT: dict[str, str] = {}
#: An operator's actions between two runs of the job (field ``run``: the run they come
#: before) and the start options of a run: they make an experiment of several runs.
BETWEEN_RUNS = ("startpoint", "checkpoint", "reset", "start")
#: Actions the experiment takes while a task is held at a crash point (SIGSTOP), before
#: it lets the task go on: the driver's (stop, cancel, a take-over) and input arriving.
PAUSES = ("stop", "cancel", "take-over", "append")
#: Kinds that need the experiment to run the job several times.
OPERATOR = BETWEEN_RUNS + PAUSES
#: Kinds a random schedule draws only when --kinds names them: a broker outage stops the
#: broker for everyone else who uses it too; an operator's action makes a run several
#: runs of the job (each a Spark start); a clock step moves the workers' wall clock.
EXPLICIT_ONLY = ("broker", *OPERATOR, "clock")
BROKER_SIGNALS = ("kill", "term")
START_TO = ("offset", "oldest", "upcoming", "timestamp")   # a Startpoint's kinds
DEFAULT_TO = ("oldest", "upcoming")                        # offset_default's
START_VIA = ("offset-default", "reset-offset")
CLOCK_STEP = (30.0, 900.0)     # seconds a random clock step moves, back or forward
MAX_CLOCK_STEP = 7 * 86400.0   # a schedule file's bound: a week either way
APPEND_RECORDS = (20, 200)     # records a random append adds

TORN_POINTS = ("locallog.append.mid_data", "locallog.append.after_data")
TASK_POINTS = tuple(p for p in CRASH_POINTS if p.startswith("task."))
# Points a random schedule aims at, with the highest hit it draws: each is reached at
# least that often by an attempt of the experiment's size (see ``run.Settings``).
RANDOM_HITS = {
    "task.mid_version": 3,
    "task.aligning": 1,
    "task.checkpoint.after_output_flush": 2,
    "task.checkpoint.before_commit": 2,
    "task.checkpoint.after_commit": 2,
    "task.checkpoint.after_store": 2,
    "task.checkpoint.mid_marker_fanout": 1,
    "task.recovery": 1,
}
# A channel task reaches ``task.mid_version`` once per poll that read something, and its
# producers send one data batch per channel and poll of theirs: all of it may be in
# before its first poll. So only its first hit is sure.
CHANNEL_HITS = {"task.mid_version": 1}
# A task with windows passes ``task.window.fired`` at every checkpoint; from its second on,
# the watermark has closed windows (the first may come before any closes): hits drawn here.
WINDOW_FIRED_HITS = (2, 3)
RANDOM_TORN_HITS = 4
KILL_AFTER = (0.0, 0.6)        # seconds after the attempt started: tasks run about 1 s
ZOMBIE_RELEASE = (0.2, 1.5)    # seconds after its successor started
BUFFER_BYTES = (1, 64, 512)
BROKER_AFTER = (0.5, 3.0)      # seconds after the first task started
BROKER_DOWN = (2.0, 8.0)       # seconds the broker stays down
LAG_DELAY = (0.0002, 0.002)    # seconds per record
SOAK_SPAN = (0.1, 0.8)         # a soak's faults fall in this part of its duration
# A zombie must never write the RocksDB store its successor has open: the split does not
# keep the store's lock, which a same-host zombie would hold. Split after the commit, its
# next step is exactly that write.
ZOMBIE_NEVER = {"task.checkpoint.after_commit": "a zombie split here would write the RocksDB "
                "store its successor has open (its next step); choose another point"}

_NUMBER = (int, float)
_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "crash": {"task": int, "attempt": int, "point": str, "hit": int, "at": _NUMBER},
    "torn": {"task": int, "attempt": int, "point": str, "hit": int, "at": _NUMBER},
    "lose-state": {"task": int, "attempt": int, "point": str, "hit": int, "at": _NUMBER},
    "zombie": {"task": int, "attempt": int, "point": str, "hit": int, "release": _NUMBER,
               "at": _NUMBER},
    "kill": {"task": int, "attempt": int, "after": _NUMBER, "at": _NUMBER},
    "buffer": {"max_bytes": int},
    "broker": {"after": (int, float), "down": (int, float), "signal": str},
    "lag": {"task": int, "attempt": int, "delay": (int, float)},
    "startpoint": {"run": int, "partition": int, "to": str, "offset": int},
    "checkpoint": {"run": int, "partition": int, "offset": int},
    "reset": {"run": int},
    "start": {"run": int, "via": str, "to": str},
    "stop": {"task": int, "attempt": int, "point": str, "hit": int},
    "cancel": {"task": int, "attempt": int, "point": str, "hit": int},
    "take-over": {"task": int, "attempt": int, "point": str, "hit": int},
    "append": {"task": int, "attempt": int, "point": str, "hit": int, "records": int},
    "clock": {"task": int, "attempt": int, "point": str, "hit": int, "step": _NUMBER},
}
# Every kind that acts inside a run may name the run (default 1, the first), and, in a
# chained workload, the job (1: job A, 2: job B, which reads A's sink).
for _kind in ("crash", "torn", "lose-state", "zombie", "kill", "lag", *PAUSES, "clock"):
    _FIELDS[_kind]["run"] = int
for _kind in ("crash", "torn", "lose-state", "zombie", "kill", "lag", "clock"):
    _FIELDS[_kind]["job"] = int
_REQUIRED = {"crash": ("task", "point"), "torn": ("task",), "lose-state": ("task", "point"),
             "zombie": ("task", "point"), "kill": ("task",), "buffer": ("max_bytes",),
             "broker": (), "lag": ("task", "delay"),
             "startpoint": ("run", "partition"), "checkpoint": ("run", "partition", "offset"),
             "reset": ("run",), "start": ("to",),
             "stop": ("task",), "cancel": ("task",), "take-over": ("task",),
             "append": ("task", "records"), "clock": ("task", "point", "step")}


@dataclass(frozen=True)
class TaskRole:
    """What a task of the plan does: which crash points it can reach."""

    task: int
    stage: int
    source: bool        # reads the source topic (never aligns or rewinds)
    channels_out: bool  # writes channels (sends markers); False for sink tasks
    partitions: tuple[int, ...] = ()   # of its stage's input topic
    topic: str = ""                    # that topic, as the workload names it
    table: bool = False                # it reads a table's topic (pipeline.table)
    windows: bool = False              # its stage has windows or a windowed join


@dataclass
class Fault:
    kind: str
    task: int | None = None
    attempt: int = 0
    point: str | None = None
    hit: int = 1
    after: float | None = None        # kill
    release: float | None = None      # zombie
    max_bytes: int | None = None      # buffer
    down: float | None = None         # broker: seconds it stays down
    signal: str | None = None         # broker: "kill" (SIGKILL) or "term" (SIGTERM)
    delay: float | None = None        # lag: seconds per record
    # not before this many seconds since the run started (a soak spreads its faults so)
    at: float | None = None
    run: int = 1                      # the experiment's run it acts in (or, between runs,
    #                                   the run it comes before)
    partition: int | None = None      # startpoint, checkpoint: the source partition
    to: str | None = None             # startpoint: START_TO; start: DEFAULT_TO
    offset: int | None = None         # startpoint (offset, timestamp), checkpoint
    via: str | None = None            # start: offset-default or reset-offset
    records: int | None = None        # append: input records that arrive
    step: float | None = None         # clock: seconds the wall clock jumps (< 0: back)
    job: int = 1                      # a chained workload's job: 1 (A) or 2 (B)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind}
        for name in _FIELDS[self.kind]:
            value = getattr(self, name)
            if (name == "at" and value is None) or (name in ("run", "job") and value == 1
                                                    and self.kind not in BETWEEN_RUNS):
                continue
            if value is not None:
                d[name] = value
        return d

    def describe(self) -> str:
        if self.kind == "buffer":
            return f"buffer {self.max_bytes} B"
        if self.kind == "broker":
            return (f"broker {self.signal} after {self.after:.2f} s, down {self.down:.1f} s")
        if self.kind in BETWEEN_RUNS:
            before = f"before run {self.run}"
            if self.kind == "reset":
                return f"eos reset {before}"
            if self.kind == "start":
                return f"start run {self.run} at {self.to} ({self.via})"
            if self.kind == "checkpoint":
                return f"eos checkpoint write partition {self.partition} at {self.offset} {before}"
            at = (f" {self.offset}" if self.to == "offset" else
                  f" of offset {self.offset}" if self.to == "timestamp" else "")
            return f"startpoint partition {self.partition} {self.to}{at} {before}"
        run = (f"run {self.run} " if self.run != 1 else "") + ("job B " if self.job == 2 else "")
        where = f"{run}task {self.task} attempt {self.attempt}"
        when = "" if self.at is None else f", from {self.at:.1f} s"
        if self.kind == "kill":
            return f"kill {where} after {self.after:.2f} s{when}"
        if self.kind == "lag":
            return f"lag {where} {(self.delay or 0) * 1000:g} ms per record"
        if self.kind == "append":
            return f"append {self.records} records while {where} is at {self.point}@{self.hit}"
        if self.kind in PAUSES:
            return f"{self.kind} while {where} is at {self.point}@{self.hit}"
        if self.kind == "clock":
            return f"clock {self.step:+g} s {where} at {self.point}@{self.hit}"
        return f"{self.kind} {where} at {self.point}@{self.hit}{when}"

    def ends_attempt(self) -> bool:
        """Whether the fault ends its attempt (a lag, a clock step or a pause does not)."""
        return self.task is not None and self.kind not in ("lag", "clock", *PAUSES)


@dataclass
class Schedule:
    faults: list[Fault] = field(default_factory=list)
    source: str = "random"            # "random" or the file it came from

    def buffer_max_bytes(self) -> int | None:
        sizes = [f.max_bytes for f in self.faults if f.kind == "buffer" and f.max_bytes]
        return min(sizes) if sizes else None

    def task_faults(self, run: int | None = None) -> list[Fault]:
        """Faults that end an attempt of a task (a lag slows one down, it ends nothing), of
        ``run`` when given."""
        return [f for f in self.faults if f.ends_attempt() and run in (None, f.run)]

    def multi_run(self) -> bool:
        """Whether the experiment runs the job several times (an operator's action)."""
        return any(f.kind in OPERATOR or f.run != 1 for f in self.faults)

    def runs(self) -> int:
        """The runs the schedule names (a run that ends early gets one more to finish)."""
        return max([1, *(f.run for f in self.faults)])

    def of_job(self, job: int) -> Schedule:
        """A chained workload's faults of job 1 (A) or 2 (B), run-wide ones with A's."""
        return Schedule([f for f in self.faults if f.job == job], self.source)

    def of_run(self, run: int) -> Schedule:
        """The faults acting inside ``run`` (their attempts count within it)."""
        return Schedule([f for f in self.faults
                         if f.run == run and f.kind not in BETWEEN_RUNS], self.source)

    def as_dict(self) -> dict[str, Any]:
        return {"fault": [f.as_dict() for f in self.faults]}


# --------------------------------------------------------------------------- files

def load_schedule(path: str | Path) -> Schedule:
    """A schedule file: TOML (``[[fault]]`` tables) or JSON (``{"fault": [...]}`` or a list)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"schedule {str(path)!r}: {exc.strerror or exc}") from None
    if path.suffix == ".json" or text.lstrip().startswith(("[{", "{", "[\n", "[]")):
        try:
            data: Any = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"schedule {path}, line {exc.lineno}: not valid JSON "
                              f"({exc.msg})") from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"schedule {path}: not valid TOML ({exc})") from None
    return parse_schedule(data, str(path))


def parse_schedule(data: Any, where: str = "schedule") -> Schedule:
    """Check every field of every fault; a mistake names the fault and the field."""
    if isinstance(data, dict):
        unknown = sorted(set(data) - {"fault"})
        if unknown:
            raise ConfigError(f"{where}: unknown top-level field {unknown[0]!r}; a schedule holds "
                              f"only `fault` entries")
        data = data.get("fault", [])
    if not isinstance(data, list):
        raise ConfigError(f"{where}: `fault` must be a list of faults, not {type(data).__name__}")
    faults = []
    for i, entry in enumerate(data, 1):
        faults.append(_parse_fault(entry, f"{where}: fault {i}"))
    return Schedule(faults, where)


def _parse_fault(entry: Any, at: str) -> Fault:
    if not isinstance(entry, dict):
        raise ConfigError(f"{at}: must be a table of fields, not {entry!r}")
    kind = entry.get("kind")
    if kind in NOT_BUILT:
        raise ConfigError(f"{at}: kind {kind!r}: {NOT_BUILT[kind]}")
    if kind not in _FIELDS:
        raise ConfigError(f"{at}: field 'kind' must be one of {', '.join(KINDS)}, not {kind!r}")
    fields = _FIELDS[kind]
    for name in entry:
        if name != "kind" and name not in fields:
            raise ConfigError(f"{at} ({kind}): unknown field {name!r}; a {kind} fault has "
                              f"{', '.join(fields)}")
    for name in _REQUIRED[kind]:
        if name not in entry:
            raise ConfigError(f"{at} ({kind}): field {name!r} is missing")
    values: dict[str, Any] = {}
    for name, want in fields.items():
        if name not in entry:
            continue
        value = entry[name]
        types = want if isinstance(want, tuple) else (want,)
        if type(value) is bool or not isinstance(value, types):
            kind_name = "a number" if float in types else types[0].__name__
            raise ConfigError(f"{at} ({kind}): field {name!r} must be {kind_name}, not {value!r}")
        values[name] = value
    if "job" in values and values["job"] not in (1, 2):
        raise ConfigError(f"{at} ({kind}): field 'job' must be 1 (job A) or 2 (job B, which "
                          f"reads A's sink; a chained workload's), not {values['job']}")
    for name, low in (("task", 0), ("attempt", 0), ("hit", 1), ("max_bytes", 1), ("run", 1),
                      ("partition", 0), ("offset", 0), ("records", 1)):
        if name in values and values[name] < low:
            raise ConfigError(f"{at} ({kind}): field {name!r} must be >= {low}, not "
                              f"{values[name]}")
    for name in ("after", "release", "down", "at"):
        if name in values and not values[name] >= 0:
            raise ConfigError(f"{at} ({kind}): field {name!r} must be >= 0 seconds, not "
                              f"{values[name]}")
    if "delay" in values and not 0 < values["delay"] <= 1:
        raise ConfigError(f"{at} ({kind}): field 'delay' must be > 0 and <= 1 second per "
                          f"record, not {values['delay']}")
    if "signal" in values and values["signal"] not in BROKER_SIGNALS:
        raise ConfigError(f"{at} ({kind}): field 'signal' must be one of "
                          f"{', '.join(BROKER_SIGNALS)}, not {values['signal']!r}")
    _check_operator(kind, values, at)
    point = values.get("point")
    if kind == "torn":
        point = values.setdefault("point", TORN_POINTS[0])
        if point not in TORN_POINTS:
            raise ConfigError(f"{at} (torn): field 'point' must be one of "
                              f"{', '.join(TORN_POINTS)}, not {point!r}")
    elif point is not None and point not in TASK_POINTS:
        hint = " (local-log appends are kind 'torn')" if point in TORN_POINTS else ""
        raise ConfigError(f"{at} ({kind}): field 'point': unknown crash point {point!r}{hint}; "
                          f"known: {', '.join(TASK_POINTS)}")
    if kind == "kill":
        values.setdefault("after", 0.0)
    if kind == "broker":
        values.setdefault("after", 2.0)
        values.setdefault("down", 5.0)
        values.setdefault("signal", "kill")
    if kind == "zombie":
        values.setdefault("release", 1.0)
    if kind in PAUSES:
        values.setdefault("point", "task.recovery")
    return Fault(kind, **values)


def _check_operator(kind: str, values: dict[str, Any], at: str) -> None:
    """The fields of the operator's actions and of clock steps."""
    if kind in ("checkpoint", "reset") and values.get("run", 1) < 2:
        what = "a checkpoint to write" if kind == "checkpoint" else "anything to reset"
        raise ConfigError(f"{at} ({kind}): field 'run' must be >= 2 (it happens before that "
                          f"run, and before run 1 the job has not {what}), not "
                          f"{values.get('run', 1)}")
    if kind == "startpoint":
        to = values.setdefault("to", "offset")
        if to not in START_TO:
            raise ConfigError(f"{at} (startpoint): field 'to' must be one of "
                              f"{', '.join(START_TO)}, not {to!r}")
        if (to in ("offset", "timestamp")) != ("offset" in values):
            raise ConfigError(f"{at} (startpoint): a Startpoint to {to} "
                              f"{'needs' if 'offset' not in values else 'takes no'} field "
                              f"'offset'" + (" (for timestamp: the offset of the record whose "
                                             "timestamp it names)" if to == "timestamp" else ""))
    if kind == "start":
        if values["to"] not in DEFAULT_TO:
            raise ConfigError(f"{at} (start): field 'to' must be one of {', '.join(DEFAULT_TO)} "
                              f"(a timestamp or an offset is a startpoint's), not "
                              f"{values['to']!r}")
        via = values.setdefault("via", "offset-default")
        if via not in START_VIA:
            raise ConfigError(f"{at} (start): field 'via' must be one of "
                              f"{', '.join(START_VIA)}, not {via!r}")
    if kind == "clock":
        step = values["step"]
        if not (step != 0 and abs(step) <= MAX_CLOCK_STEP):
            raise ConfigError(f"{at} (clock): field 'step' must be a number of seconds other "
                              f"than 0, at most {MAX_CLOCK_STEP:g} either way (< 0: a step "
                              f"back), not {step}")


# --------------------------------------------------------------------------- checks

def kinds_for(transport: str, guarantee: str) -> tuple[str, ...]:
    """The fault kinds a random schedule on ``transport`` ("local" or "kafka") draws from
    by default: every one it can inject but those only named kinds get (``broker``)."""
    return tuple(k for k in KINDS
                 if k not in EXPLICIT_ONLY and _refusal(k, transport, guarantee) is None)


def _refusal(kind: str, transport: str, guarantee: str) -> str | None:
    if kind in NOT_BUILT:
        return NOT_BUILT[kind]
    if kind == "clock" and not clock_hook():
        return ("fault kind 'clock' needs the runtime's clock hook (a fault action 'clock' "
                "that steps a worker's wall clock, eos_runtime/clock.py), which this build "
                "does not have yet")
    if transport == "local" and kind == "broker":
        return ("fault kind 'broker' needs Kafka: it stops and restarts the broker, and the "
                "local log has none (give --bootstrap-servers)")
    if transport == "kafka" and kind == "torn":
        return ("fault kind 'torn' needs the local log (a torn write is a local-log append "
                "cut short)")
    if guarantee == "at-least-once" and kind == "buffer":
        return "fault kind 'buffer': an at-least-once job has no early-arrival buffer"
    if guarantee == "at-least-once" and kind == "zombie":
        return ("fault kind 'zombie' needs exactly-once: an at-least-once change log is not "
                "fenced, so a zombie's late commits would write the RocksDB store its "
                "successor has open (the split does not keep the store's lock)")
    return None


def clock_hook() -> bool:
    """Whether the tasks can step their wall clock (the runtime's ``clock`` action)."""
    return "clock" in faults.ACTIONS


def check_kinds(kinds: list[str], transport: str, guarantee: str) -> None:
    for kind in kinds:
        if kind not in KINDS and kind not in NOT_BUILT:
            raise ConfigError(f"--kinds: unknown fault kind {kind!r}; known: {', '.join(KINDS)}")
        why = _refusal(kind, transport, guarantee)
        if why is not None:
            raise ConfigError(f"--kinds: {why}")


def unreachable(point: str, role: TaskRole) -> str | None:
    """Why ``role``'s task never reaches ``point`` (None if it can)."""
    if role.source and point in ("task.aligning", "task.rewind"):
        return f"task {role.task} reads the source: it never aligns or rewinds"
    if not role.channels_out and point == "task.checkpoint.mid_marker_fanout":
        return f"task {role.task} writes the sink: it sends no markers"
    if point == "task.window.fired" and not role.windows:
        return f"task {role.task} has no windows: none fires"
    return None


def check_schedule(schedule: Schedule, roles: list[TaskRole], transport: str,
                   guarantee: str, partitions: int = 2,
                   then_roles: list[TaskRole] | None = None) -> None:
    """Refuse what cannot happen: a task the job lacks, a point it never reaches, a kind
    the transport or guarantee cannot do, a partition the source lacks; faults of a
    chained workload's job B (``job = 2``) against B's tasks (``then_roles``)."""
    where = schedule.source
    for i, f in enumerate(schedule.faults, 1):
        if f.job == 2 and then_roles is None:
            raise ConfigError(f"{where}: fault {i} ({f.kind}): field 'job': 2 is a chained "
                              f"workload's second job, and this workload has one job")
        if f.job == 2 and (f.run != 1 or schedule.multi_run()):
            raise ConfigError(f"{where}: fault {i} ({f.kind}): a chained workload runs each "
                              f"job once: an operator's action or a run is not for it yet")
    if then_roles is not None:
        check_schedule(Schedule([replace(f, job=1) for f in schedule.faults if f.job == 2],
                                f"{where} (job B)"), then_roles, transport, guarantee, partitions)
        schedule = Schedule([f for f in schedule.faults if f.job == 1], where)
    for i, f in enumerate(schedule.faults, 1):
        at = f"{where}: fault {i} ({f.kind})"
        why = _refusal(f.kind, transport, guarantee)
        if why is not None:
            raise ConfigError(f"{at}: {why}")
        if f.partition is not None and f.partition >= partitions:
            raise ConfigError(f"{at}: field 'partition': the source has partitions "
                              f"0..{partitions - 1}, not {f.partition}")
        if f.task is None:
            continue
        if f.task >= len(roles):
            raise ConfigError(f"{at}: field 'task': the job has tasks 0..{len(roles) - 1}, "
                              f"not {f.task}")
        if f.point is not None:
            why = unreachable(f.point, roles[f.task])
            if why is not None:
                raise ConfigError(f"{at}: field 'point' {f.point!r}: {why}")
        if f.kind == "zombie" and f.point in ZOMBIE_NEVER:
            raise ConfigError(f"{at}: field 'point' {f.point!r}: {ZOMBIE_NEVER[f.point]}")
        if f.kind == "append" and not roles[f.task].source:
            raise ConfigError(f"{at}: field 'task': task {f.task} reads a channel; input "
                              f"arrives at the partitions of a task that reads the source")
    seen: dict[tuple[int, int, int], int] = {}
    points: dict[tuple[int, int, int, str], int] = {}
    for i, f in enumerate(schedule.faults, 1):
        if f.task is None or f.kind == "lag":
            continue
        if f.point is not None:
            first = points.setdefault((f.run, f.task, f.attempt, f.point), i)
            if first != i:
                raise ConfigError(f"{where}: faults {first} and {i} both wait for task "
                                  f"{f.task} attempt {f.attempt} at {f.point}; give one of "
                                  f"them another point or attempt")
        if not f.ends_attempt():   # a lag, a step of the clock, a pause: they share
            continue
        first = seen.setdefault((f.run, f.task, f.attempt), i)
        if first != i:
            raise ConfigError(f"{where}: faults {first} and {i} both target task {f.task} "
                              f"attempt {f.attempt}; give one of them another attempt")
    ends: dict[int, int] = {}
    starts: dict[int, int] = {}
    for i, f in enumerate(schedule.faults, 1):
        if f.kind in ("stop", "cancel", "take-over"):
            first = ends.setdefault(f.run, i)
            if first != i:
                raise ConfigError(f"{where}: faults {first} and {i} both end run {f.run}; a "
                                  f"run ends once: give one of them another run")
        if f.kind == "start":
            first = starts.setdefault(f.run, i)
            if first != i:
                raise ConfigError(f"{where}: faults {first} and {i} both set how run {f.run} "
                                  f"starts; give one of them another run")
