"""What every experiment run shares: its settings, its result, its job (a fresh one, named
after the workload and seed) and its tasks' roles, and the fault list its tasks arm."""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EosError
from ..plan import plan_job
from ..scratch_topics import ScratchTopics
from ..transport import TopicSpec, open_transport
from .schedule import PAUSES, Schedule, TaskRole
from .verify import Verdict
from .workloads import Workload

__all__ = ["Settings", "RunResult", "task_roles", "new_job", "job_pipeline", "job_topic",
           "input_topics", "fault_dicts", "verdict_word", "keep_or_remove", "NewJob",
           "RunInterrupted", "interrupted",
           "max_attempts_for", "recovery_times", "NO_TIMER", "SAMPLE_EVERY", "SOAK_COMMIT",
           "DRAIN_LIMIT"]

NO_TIMER = 3600.0     # commit_interval: checkpoints come from commit_every alone
SAMPLE_EVERY = 0.25   # seconds between timeline samples
# A soak's sources idle between records at a low rate: a timer checkpoints them, or
# every downstream task would wait for markers that a record count never brings.
SOAK_COMMIT = 1.0
DRAIN_LIMIT = 120.0   # seconds a soak waits, after feeding, for its input to be committed

logger = logging.getLogger(__name__)


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
    kept_topics: list[str] = field(default_factory=list)   # on Kafka: what the run made
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
                "kept_data": self.kept_data, "kept_topics": self.kept_topics,
                "soak": self.soak,
                "verdict": self.verdict.as_dict() if self.verdict is not None else None,
                "schedule": self.schedule.as_dict(), "faults": self.faults,
                "attempts": self.attempts, "generations": self.generations,
                "runs": self.runs,
                "tasks": self.tasks, "timeline": self.timeline}


def verdict_word(r: RunResult) -> str:
    if r.error is not None:
        return "ERROR"
    return "pass" if r.passed else "FAIL"


def task_roles(workload: Workload, guarantee: str, *, then: bool = False) -> list[TaskRole]:
    """The job's tasks and what each does, planned on a scratch local log (no run, no
    topic of the real transport), so a schedule is checked before anything starts; with
    ``then``, a chained workload's job B's."""
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
                     plan.stages[task.stage].shuffle is not None, tuple(task.partitions),
                     plan.stages[task.stage].input_topic, _reads_table(plan, task.stage),
                     any(op.window is not None for op in plan.stages[task.stage].program))
            for task in plan.tasks]


def _reads_table(plan: Any, stage: int) -> bool:
    source = plan.stages[stage].source
    return source is not None and source.table


# --------------------------------------------------------------------------- the injector


def fault_dicts(schedule: Schedule, log: Path, wall0: float) -> list[dict[str, Any]]:
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


def recovery_times(faults: list[dict[str, Any]], attempts: list[dict[str, Any]],
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


#: What ``new_job`` makes: the job's name, its pipeline, the transport's options, the
#: run's root directory, and the topics' list before the run.
NewJob = tuple[str, Any, dict[str, Any], Path, ScratchTopics]


def new_job(settings: Settings, seed: int) -> NewJob:
    """A job of the run's own: its name, its pipeline renamed to it (on Kafka with topics
    named after it), the transport's options, the run's root directory, whose
    ``state/<job>`` (the tasks' state, pid and progress files) is made, and what will tell
    the topics the run made (on Kafka; the local log's are in the root)."""
    w = settings.workload
    job = f"{w.name}-s{seed}-{uuid.uuid4().hex[:6]}"
    pipeline = job_pipeline(w, job, settings.transport_name)
    if settings.transport_name == "local":
        root = Path(settings.transport["data_dir"]).absolute() / job
        opts: dict[str, Any] = {"data_dir": str(root)}
    else:
        root = Path(settings.report_dir).absolute() / "state" / job
        opts = dict(settings.transport)
    topics = ScratchTopics(opts, job)   # before anything of the job exists
    (root / "state" / job).mkdir(parents=True, exist_ok=True)
    return job, pipeline, opts, root, topics


def keep_or_remove(settings: Settings, result: RunResult, root: Path,
                   topics: ScratchTopics) -> None:
    """A passing run's data goes, unless ``--keep-data``: its directory (the local log,
    the tasks' state) and on Kafka the topics it made. Any other run's is kept, and its
    result names it."""
    if result.passed and not settings.keep_data:
        _discard(result.job, root, topics)
        return
    result.kept_data = str(root)
    result.kept_topics = topics.made()


class RunInterrupted(KeyboardInterrupt):
    """A Ctrl-C cancelled an experiment run; what is left of its data, if anything."""

    def __init__(self, job: str, kept_data: str | None, kept_topics: list[str]) -> None:
        super().__init__(job)
        self.job, self.kept_data, self.kept_topics = job, kept_data, kept_topics


def interrupted(settings: Settings, made: NewJob) -> RunInterrupted:
    """The data of a run a Ctrl-C cancelled goes as a passing run's would (its result
    would judge nothing), unless ``--keep-data``."""
    job, _, _, root, topics = made
    if settings.keep_data:
        try:
            kept = topics.made()
        except EosError:
            kept = []
        return RunInterrupted(job, str(root), kept)
    _discard(job, root, topics)
    return RunInterrupted(job, None, [])


def _discard(job: str, root: Path, topics: ScratchTopics) -> None:
    shutil.rmtree(root, ignore_errors=True)   # a directory this run made, nothing else
    try:
        topics.remove()
    except EosError as exc:   # the run is over: what is left is said, not failed on
        logger.warning("the topics of job %s were left on the broker (%s): eos topics lists "
                       "them", job, " ".join(str(exc).split()))


def job_pipeline(w: Workload, job: str, transport_name: str) -> Any:
    """A fresh pipeline of ``w`` renamed to ``job``: on Kafka its topics too, named after
    the job (each run's own); the local log keeps a job's topics in a directory of its own."""
    pipeline = w.make_pipeline()
    if transport_name == "local":
        pipeline.rename(job)
    else:
        pipeline.rename(job, sources={t: f"{job}-{t}" for t in input_topics(pipeline)},
                        sinks={s.topic: f"{job}-{s.topic}" for s in pipeline.sinks})
    return pipeline


def job_topic(topic: str, job: str, transport_name: str) -> str:
    """A workload's topic as ``job_pipeline`` renames it."""
    return topic if transport_name == "local" else f"{job}-{topic}"


def input_topics(pipeline: Any) -> list[str]:
    """Every topic the pipeline reads: its sources' and its tables'."""
    return [s.topic for s in pipeline.sources] + [t.topic for t in pipeline.tables]
