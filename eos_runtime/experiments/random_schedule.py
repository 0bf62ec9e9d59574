"""Drawing a fault schedule from a seed: which kinds, which tasks and attempts, which
crash points and hits, when (a soak's faults spread over its duration), and the operator's
actions as bundles that make each one bite (docs/experiments.md, Random schedules). The
same seed draws the same schedule; ``schedule.py`` holds what a schedule is and checks it.
"""

from __future__ import annotations

import random

from .schedule import (
    APPEND_RECORDS,
    BROKER_AFTER,
    BROKER_DOWN,
    BROKER_SIGNALS,
    BUFFER_BYTES,
    CHANNEL_HITS,
    CLOCK_STEP,
    DEFAULT_TO,
    KILL_AFTER,
    LAG_DELAY,
    OPERATOR,
    RANDOM_HITS,
    RANDOM_TORN_HITS,
    SOAK_SPAN,
    START_TO,
    TORN_POINTS,
    WINDOW_FIRED_HITS,
    ZOMBIE_NEVER,
    ZOMBIE_RELEASE,
    Fault,
    Schedule,
    TaskRole,
    unreachable,
)

__all__ = ["random_schedule", "soak_times"]


def soak_times(rng: random.Random, count: int, duration: float) -> list[float]:
    """``count`` moments spread over a soak of ``duration`` seconds, in order: one drawn in
    each of ``count`` equal slices of the middle (SOAK_SPAN), so faults come all along the
    run, none before its tasks have started working and none so late that its recovery
    would be cut short by the stop."""
    low, high = SOAK_SPAN
    width = (high - low) * duration / max(count, 1)
    return [round(low * duration + width * (i + rng.random()), 2) for i in range(count)]


def random_schedule(seed: int, count: int, kinds: list[str], roles: list[TaskRole],
                    transport: str, duration: float | None = None,
                    then_roles: list[TaskRole] | None = None) -> Schedule:
    """``count`` faults of ``kinds`` drawn from ``seed``: the same seed, the same schedule.

    Each task's faults take its attempts in turn (0, 1, 2, ...), so every fault after a
    task's first one targets the retry its predecessor caused. With ``duration`` (a soak)
    every fault but a buffer bound and a lag gets a moment (``soak_times``): a task's
    fault counts its hits, a kill waits, from then; a broker outage starts then."""
    rng = random.Random(f"faults:{seed}")
    faults = _distinct(_draw(rng, count, kinds, roles, soak=duration is not None,
                             then_roles=then_roles or []))
    if duration is not None:
        timed = [f for f in faults if f.kind not in ("buffer", "lag")]
        for f, t in zip(timed, soak_times(rng, len(timed), duration), strict=True):
            if f.kind == "broker":
                f.after = t
            else:
                f.at = t
                if f.kind == "kill":
                    f.after = 0.0
    return Schedule(faults, "random")


def _distinct(faults: list[Fault]) -> list[Fault]:
    """Without the faults that would share an attempt (or a point of one) with an earlier
    one: an operator bundle's crash may fall on an attempt the in-task draws took."""
    out: list[Fault] = []
    ends: set[tuple[int, int, int]] = set()
    points: set[tuple[int, int, int, str | None]] = set()
    for f in faults:
        if f.task is not None and f.kind != "lag":
            where = (f.run * 10 + f.job, f.task, f.attempt)
            if (f.ends_attempt() and where in ends) or (*where, f.point) in points:
                continue
            if f.ends_attempt():
                ends.add(where)
            points.add((*where, f.point))
        out.append(f)
    return out


def _draw(rng: random.Random, count: int, kinds: list[str], roles: list[TaskRole],
          soak: bool, then_roles: list[TaskRole]) -> list[Fault]:
    faults: list[Fault] = []
    attempts: dict[int, int] = {}
    task_kinds = [k for k in kinds if k not in ("buffer", "broker", *OPERATOR, "clock")]
    runs = [1]   # the experiment's last run so far: operator bundles add runs
    for _ in range(count):
        kind = rng.choice(kinds)
        if kind in OPERATOR or kind == "clock":
            faults += _bundle(rng, kind, roles, runs, faults)
            continue
        if kind in ("buffer", "broker"):
            # one bound per run; one outage per run, but a soak's come all along it
            if not any(f.kind == kind for f in faults) or (soak and kind == "broker"):
                faults.append(
                    Fault("buffer", max_bytes=rng.choice(BUFFER_BYTES)) if kind == "buffer"
                    else Fault("broker", after=round(rng.uniform(*BROKER_AFTER), 2),
                               down=round(rng.uniform(*BROKER_DOWN), 1),
                               signal=rng.choice(BROKER_SIGNALS)))
                continue
            if not task_kinds:
                continue   # one bound and one outage per run is all a run can have
            kind = rng.choice(task_kinds)
        if not task_kinds:
            continue
        role = rng.choice(roles)
        job = 1
        if then_roles and rng.random() < 0.5:   # a chained workload: a fault of job B
            role, job = rng.choice(then_roles), 2
        attempt = attempts.get(role.task + 1000 * (job - 1), 0)
        if kind == "lag":   # it does not end the attempt: the next fault takes it too
            faults.append(Fault("lag", task=role.task, attempt=attempt, job=job,
                                delay=round(rng.uniform(*LAG_DELAY), 4)))
            continue
        attempts[role.task + 1000 * (job - 1)] = attempt + 1
        f = Fault(kind, task=role.task, attempt=attempt, job=job)
        if kind == "kill":
            f.after = round(rng.uniform(*KILL_AFTER), 2)
        elif kind == "torn":
            f.point = rng.choice(TORN_POINTS)
            f.hit = rng.randint(1, RANDOM_TORN_HITS)
        else:
            points = [p for p in RANDOM_HITS if unreachable(p, role) is None]
            if role.windows:   # between its windows' firing and the commit (T2)
                points.append("task.window.fired")
            if soak:   # an attempt recovers at its start, before the fault's moment
                points = [p for p in points if p != "task.recovery"]
            if kind == "zombie":
                # one split during recovery has sent nothing yet: nothing to write late
                points = [p for p in points if p != "task.recovery" and p not in ZOMBIE_NEVER]
            f.point = rng.choice(points)
            if f.point == "task.window.fired":
                f.hit = rng.randint(*WINDOW_FIRED_HITS)
            else:
                most = RANDOM_HITS[f.point] if role.source else CHANNEL_HITS.get(
                    f.point, RANDOM_HITS[f.point])
                f.hit = rng.randint(1, most)
            if kind == "zombie":
                f.release = round(rng.uniform(*ZOMBIE_RELEASE), 2)
        faults.append(f)
    return faults


# --------------------------------------------------------------------------- operator bundles

def _source_task(rng: random.Random, roles: list[TaskRole], partition: int | None = None
                 ) -> TaskRole:
    """A task reading the source (any, for input to arrive at) or, given ``partition``,
    the one reading that partition of the stream an operator's action names (the first
    source stream: a table's task reads a partition of that number too)."""
    sources = [r for r in roles if r.source]
    if partition is not None:
        stream = next(r.topic for r in sources if not r.table)
        sources = [r for r in sources if r.topic == stream]
        return next(r for r in sources if partition in r.partitions)
    return rng.choice(sources)


def _first_commit_crash(rng: random.Random, task: int, run: int) -> list[Fault]:
    """A crash of a source task of ``run`` just before or just after its first commit, or
    none: a start position is applied again after the first (and only then)."""
    point = rng.choice(("task.checkpoint.before_commit", "task.checkpoint.after_commit", None))
    return [] if point is None else [Fault("crash", task=task, point=point, run=run)]


def _bundle(rng: random.Random, kind: str, roles: list[TaskRole], runs: list[int],
            drawn: list[Fault]) -> list[Fault]:
    """One operator's action (or a clock step) in a run of its own, with what makes it
    bite: a crash around the first commit after a new start position, input arriving while
    a retry that starts at ``upcoming`` is held before it resolves its start, a retry
    recovering when ``eos stop`` comes.

    Offsets that a Startpoint or a checkpoint names are drawn later, once the input
    written before that run is known (``offset = -1`` here; ``run.fill_offsets``)."""
    partitions = sorted({p for r in roles if r.source and not r.table for p in r.partitions})
    if kind == "start" and runs == [1] and not any(f.kind == "start" for f in drawn) \
            and rng.random() < 0.5:
        run = 1   # the job's first run: no checkpoint, so offset_default decides
    else:
        run = runs[-1] + 1
        runs.append(run)
    out: list[Fault] = []
    if kind == "clock":
        role = rng.choice(roles)
        points = [p for p in RANDOM_HITS if unreachable(p, role) is None]
        step = round(rng.uniform(*CLOCK_STEP), 1) * rng.choice((-1, 1))
        return [Fault("clock", task=role.task, point=rng.choice(points), step=step, run=run)]
    if kind in ("stop", "cancel", "take-over"):
        role = rng.choice(roles)
        if kind != "take-over" and rng.random() < 0.5:
            # while a retry recovers: its predecessor crashed first
            out.append(Fault("crash", task=role.task, point=rng.choice(
                [p for p in RANDOM_HITS if unreachable(p, role) is None
                 and p != "task.recovery"]), run=run))
            out.append(Fault(kind, task=role.task, attempt=1, point="task.recovery", run=run))
            return out
        points = ["task.recovery", "task.mid_version", "task.checkpoint.before_commit",
                  "task.checkpoint.after_commit"]
        return [Fault(kind, task=role.task, point=rng.choice(points), run=run)]
    if kind == "append":
        role = _source_task(rng, roles)
        return [Fault("append", task=role.task, point=rng.choice(
            ("task.recovery", "task.mid_version", "task.checkpoint.after_commit")),
            records=rng.randint(*APPEND_RECORDS), run=run)]
    partition = rng.choice(partitions)
    role = _source_task(rng, roles, partition)
    if kind == "reset":
        if rng.random() < 0.5:   # this run is cancelled before its first commit; then reset
            out.append(Fault("cancel", task=role.task, point="task.checkpoint.before_commit",
                             run=run))
            run += 1
            runs.append(run)
        out.append(Fault("reset", run=run))
        return out + _first_commit_crash(rng, role.task, run)
    if kind == "start":
        to = rng.choice(DEFAULT_TO)
        out.append(Fault("start", run=run, to=to,
                         via="offset-default" if run == 1 else "reset-offset"))
    else:
        to = rng.choice(START_TO) if kind == "startpoint" else "offset"
        fault = Fault(kind, run=run, partition=partition, to=to)
        if to in ("offset", "timestamp"):
            fault.offset = -1
        out.append(fault)
    crash = _first_commit_crash(rng, role.task, run)
    out += crash
    if to == "upcoming" and crash and crash[0].point == "task.checkpoint.before_commit":
        # input arrives while the retry is held before it resolves `upcoming` again
        out.append(Fault("append", task=role.task, attempt=1, point="task.recovery",
                         records=rng.randint(*APPEND_RECORDS), run=run))
    return out
