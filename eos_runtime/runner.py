"""The driver: load a pipeline, plan it, create its topics, run its tasks on Spark.

    summary = run_pipeline(pipeline, data_dir=".eos/data")            # embedded local log
    summary = run_pipeline(pipeline, bootstrap_servers="127.0.0.1:9092")

A bounded run (the default) reads what the source holds when the run starts, takes a
final checkpoint everywhere and ends. An unbounded run goes on until a stop request in
the job's control topic (``eos stop``, ``PipelineRun.stop``, or Ctrl-C on the driver).
Each run of a job continues from the last one's checkpoints (``protocol/runs.py``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cloudpickle

from .api import Pipeline
from .dead_letter_limit import DeadLetterLimit, parse_limit
from .engine import EngineConfig, check_slots, start_tasks
from .engine.stall import DEFAULT_NO_PROGRESS_TIMEOUT
from .errors import (
    ConfigError,
    DeadLetterLimitExceeded,
    EngineError,
    EosError,
    JobRunning,
    OutageBudgetExceeded,
    StartOutOfRange,
    TaskFailed,
    TransportError,
)
from .joblog.control import DEFAULT_LEASE_TIMEOUT, ControlLog, LeaseRequest
from .joblog.live_run import LeaseKeeper
from .kafka_settings import merge
from .limits import check
from .outage import DEFAULT_BUDGET, OutageClock, check_budget, gone_too_long, is_transient
from .pipeline_file import load_pipeline
from .plan import JobPlan, describe_plan, plan_job
from .run_progress import (
    STAGE_COUNTERS,
    clear_task_progress,
    read_task_counters,
    sink_records,
    source_figures,
    stage_totals,
)
from .run_start import (
    check_topics,
    create_job_topics,
    fan_out,
    run_begin,
    run_start_ends,
    source_positions,
    task_configs,
)
from .run_watch import watch_run
from .runtime.source import check_fallback
from .runtime.task import run_task_payload
from .transport import TopicPartition, Transport, open_transport
from .user_code import dumps, tracebacks_wanted

__all__ = ["PipelineRun", "RunSummary", "check_writable_dir", "create_job_topics", "load_pipeline",
           "run_pipeline", "start_pipeline", "task_configs", "watch_run", "STAGE_COUNTERS"]

@dataclass
class RunSummary:
    job: str
    guarantee: str
    transport: str
    seconds: float
    input_records: int
    tasks: list[dict[str, Any]] = field(default_factory=list)
    plan: list[dict[str, Any]] = field(default_factory=list)
    run: int = 0                   # the job's run number (0 for its first run)
    bounded: bool = True
    stopped: bool = False          # a stop request ended the run early
    input_read: int | None = None  # source records read (= input_records once it ended)
    sink_records: int | None = None   # records its checkpoints committed to the sinks
    dead_letter_topic: str | None = None   # where failing records went (None: nowhere)

    @property
    def records_per_second(self) -> float:
        return self.input_records / self.seconds if self.seconds > 0 else 0.0

    @property
    def dead_letters(self) -> int:
        """The records the run's checkpoints committed to its dead-letter topic."""
        return sum(int(t.get("dead_letters", 0) or 0) for t in self.tasks)

    @property
    def task_seconds(self) -> float:
        """The longest task's own run time: the run without Spark's start-up."""
        return max((t.get("seconds", 0.0) for t in self.tasks), default=0.0)

    @property
    def stages(self) -> list[dict[str, Any]]:
        """The work of each stage: its tasks' counters added up (``stage_totals``)."""
        return [{k: v for k, v in row.items() if k != "reporting"}
                for row in stage_totals(self.plan, {int(t["task_id"]): t for t in self.tasks
                                                    if "task_id" in t})]

    def as_dict(self) -> dict[str, Any]:
        return {"job": self.job, "guarantee": self.guarantee, "transport": self.transport,
                "run": self.run, "bounded": self.bounded, "stopped": self.stopped,
                "seconds": round(self.seconds, 3), "input_records": self.input_records,
                "input_read": self.input_read, "sink_records": self.sink_records,
                "dead_letters": self.dead_letters,
                "dead_letter_topic": self.dead_letter_topic,
                "records_per_second": round(self.records_per_second, 1),
                "task_seconds": self.task_seconds, "stages": self.stages,
                "plan": self.plan, "tasks": self.tasks}


def check_writable_dir(path: str | Path, what: str, option: str) -> None:
    """``ConfigError`` naming ``path`` unless this process can write in it (or, if it
    does not exist yet, make it). ``what`` names the directory for the user ("data
    directory"), ``option`` the option that chooses another."""
    path = Path(path).absolute()
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        problem = ("is not a directory" if existing == path else
                   f"cannot be made: {str(existing)!r} is not a directory")
        raise ConfigError(f"{what} {str(path)!r} {problem}; choose another with {option}")
    # os.access also answers for root, for whom it reports read-only mounts (EROFS)
    # but not permission bits: exactly what stops root's writes.
    if os.access(existing, os.W_OK | os.X_OK):
        return
    try:
        read_only = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    reason = "a read-only file system" if read_only else "permission denied"
    where = "" if existing == path else f"; it would be made in {str(existing)!r}"
    raise ConfigError(f"{what} {str(path)!r} is not writable ({reason}{where}); "
                      f"choose another with {option}")


def _check_run_dirs(pipeline: Pipeline, transport_opts: dict[str, Any], state_dir: str) -> None:
    """Refuse a run that could not write its topics or its tasks' state, before Spark starts
    and before a run is recorded (else every task fails its attempts over a traceback)."""
    if "data_dir" in transport_opts:
        root = Path(transport_opts["data_dir"])
        for d in (root, root / "topics"):
            check_writable_dir(d, "data directory", "--data-dir")
    for d in (Path(state_dir), Path(state_dir) / pipeline.name):
        check_writable_dir(d, "state directory", "--state-dir")


def _task_entry(attempt) -> bytes:  # runs on a Spark worker
    return run_task_payload(attempt.payload, attempt.attempt)


class PipelineRun:
    """A started run of a job: watch it, stop it gracefully, wait for its summary.

    ``run_pipeline`` is ``start_pipeline(...).summary()`` with progress and Ctrl-C
    handling. ``close()`` releases the driver's transport once the run is over."""

    def __init__(self, plan: JobPlan, transport: Transport, info: Any, job: Any, bounded: bool,
                 begin: dict[TopicPartition, int], state_dir: str | None = None,
                 ends: dict[TopicPartition, int] | None = None,
                 lease: LeaseKeeper | None = None,
                 outage_budget: float | None = None,
                 dead_letter_limit: DeadLetterLimit | None = None) -> None:
        self.plan = plan
        # max_dead_letters: the watch stops the run past a count, summary() fails it
        self.dead_letter_limit = dead_letter_limit
        self._stopped_at_limit = False
        self.lease = lease
        self.t = transport
        # The driver rides through a broker outage like its tasks do (eos_runtime.outage).
        self.outage = OutageClock(plan_budget(outage_budget))
        self._outage_cause: TransportError | None = None   # the failing look's error
        self._closed = False
        self._last_progress: dict[str, Any] | None = None
        self.info = info
        self.job = job
        self.bounded = bounded
        self.begin = begin
        self.started = time.monotonic()
        self.stop_requested: str | None = None
        # How the run ended (outcome, detail), recorded in the control topic at close()
        self.ended: tuple[str, str] | None = None
        self._stages = describe_plan(plan)
        # Where the tasks write their counters (TaskProgress), when the driver can see it.
        self._task_dir = Path(state_dir) / plan.name if state_dir is not None else None
        self._ends = ends if bounded else None
        self._committed = dict(begin)           # the sources' committed positions, refreshed
        self._committed_next = 0.0
        self._committed_every = 2.0 if transport.name == "local" else 5.0
        self._source_tps = [TopicPartition(st.input_topic, p) for st in plan.source_stages
                            for p in range(st.input_partitions)]
        self._source_high0 = {tp: transport.watermarks(tp)[1] for tp in self._source_tps}

    @property
    def run(self) -> int:
        return self.info.start.run

    def progress(self) -> dict[str, Any]:
        """Where the run is. ``seconds`` so far; ``source_new_records`` (arrived at the source
        since the start); ``input_read`` (source records the run read: where its source
        tasks are, less where the run began; None while some source task has not
        reported) and ``input_committed`` (what its checkpoints committed: from the source
        tasks' counters, else the change log's commit records, refreshed every few
        seconds) of ``input_total`` (what a bounded run reads; None when unbounded);
        ``sink_records`` (records the run's checkpoints committed to its sinks, as its
        tasks count them: no transaction markers) and ``sink_known`` (every sink task
        reported); ``final``: the look after the run ended (``watch_run``);
        ``stages`` (per stage: topics, ``tasks``, ``reporting`` (tasks whose counters the
        driver sees: those that write them where it can read), the counters of
        ``STAGE_COUNTERS`` added up, ``max_buffer_bytes``) and ``in_flight`` (per stage,
        records sent to it by the stage before and not processed yet; None where not
        known); ``state`` (Spark's job: starting, running, ...), ``tasks``, and task
        attempts running, finished and failed; ``outage_seconds``: how long the broker has
        not answered (0 when it does; the other figures are then the last ones seen).
        Past the outage budget it raises ``OutageBudgetExceeded``."""
        began = time.monotonic()
        try:
            out = self._progress()
        except TransportError as exc:
            down = self._outage(exc, since=began)
            status = self.job.status()
            last = dict(self._last_progress or self._blank_progress())
            last.update({"seconds": time.monotonic() - self.started, "state": status.state,
                         "tasks_running": status.running, "tasks_finished": status.finished,
                         "failed_attempts": status.failed_attempts, "outage_seconds": down})
            return last
        self.outage.ok()
        self._last_progress = out
        return out

    def _blank_progress(self) -> dict[str, Any]:
        """Progress before the log was ever seen: nothing read, nothing written."""
        stages = stage_totals(self._stages, {})
        return {"run": self.run, "bounded": self.bounded,
                "stopping": self.stop_requested is not None, "source_new_records": 0,
                "sink_records": 0, "sink_known": False, "input_read": None,
                "input_committed": 0, "input_total": None, "final": False,
                "stages": stages, "in_flight": [None] * len(stages),
                "tasks": len(self.plan.tasks), "outage_budget": self.outage.budget}

    def _outage(self, exc: TransportError, since: float | None = None) -> float:
        """A failed look at the log (begun at ``since``, monotonic): re-raise it unless it
        is transient; past the outage budget raise ``OutageBudgetExceeded``; else the
        seconds the outage lasts so far."""
        if not is_transient(exc):
            raise exc
        self._outage_cause = exc
        verdict = self.outage.failed(since)
        if not verdict.retry:
            raise self._outage_error() from None
        return verdict.down_for

    def _outage_error(self) -> OutageBudgetExceeded:
        """The line of a run that gave up on a broker outage, with how long the outage has
        lasted by now: ``watch_run`` asks again once the run is cancelled and closed."""
        return OutageBudgetExceeded(gone_too_long(self.broker, self.outage.down_for,
                                                  self.outage.budget, self._outage_cause))

    @property
    def broker(self) -> str:
        """The log, as the driver's outage errors name it."""
        servers = getattr(self.t, "bootstrap_servers", None)
        return f"Kafka at {servers}" if servers else f"the {self.t.name} log"

    def _progress(self) -> dict[str, Any]:
        status = self.job.status()
        arrived = sum(self.t.watermarks(tp)[1] - self._source_high0[tp] for tp in self._source_tps)
        now = time.monotonic()
        counters = self._task_counters()
        figures = source_figures(counters, self.plan, self.begin)
        if figures is not None:
            read, committed = figures
        else:   # the tasks' counters are elsewhere (or not yet): the change log's commits
            read = None
            if now >= self._committed_next:
                self._committed_next = now + self._committed_every
                try:
                    self._committed = source_positions(self.t, self.plan)
                except EosError:
                    pass   # the next look
            committed = sum(max(self._committed.get(tp, b) - b, 0)
                            for tp, b in self.begin.items())
        written, sink_known = sink_records(counters, self.plan)
        total = (sum(max(self._ends.get(tp, b) - b, 0) for tp, b in self.begin.items())
                 if self._ends is not None else None)
        stages = stage_totals(self._stages, counters)
        in_flight: list[int | None] = [None]
        for before, st in zip(stages, stages[1:], strict=False):
            known = before["reporting"] == before["tasks"] and st["reporting"] == st["tasks"]
            in_flight.append(max(before["emitted"] - st["processed"], 0) if known else None)
        return {"seconds": now - self.started, "run": self.run,
                "bounded": self.bounded, "stopping": self.stop_requested is not None,
                "source_new_records": arrived, "sink_records": written,
                "sink_known": sink_known, "input_read": read, "final": False,
                "input_committed": committed, "input_total": total,
                "stages": stages, "in_flight": in_flight, "state": status.state,
                "tasks": len(self.plan.tasks), "tasks_running": status.running,
                "tasks_finished": status.finished,
                "failed_attempts": status.failed_attempts, "outage_seconds": 0.0,
                "outage_budget": self.outage.budget}

    def _task_counters(self) -> dict[int, dict[str, Any]]:
        """The counters each task last wrote beside its pid file during this run."""
        if self._task_dir is None:
            return {}
        return read_task_counters(self._task_dir, self.plan,
                                  self.info.start.started_ms / 1000 - 1.0)

    def stop(self, reason: str = "requested") -> None:
        """Ask the run to stop gracefully: every task takes a final checkpoint and ends."""
        if self.stop_requested is None:
            ControlLog(self.t, self.plan.name).request_stop(reason, self.info.start.run)
            self.stop_requested = reason

    def _stop_at_dead_letter_limit(self, progress: Mapping[str, Any]) -> str | None:
        """A look (``progress()``) whose committed dead letters pass a count limit: ask
        the run to stop gracefully (``dead_letter_limit.py`` says why) and return the
        reason; None otherwise, and once the run was asked to stop."""
        limit = self.dead_letter_limit
        if limit is None or self.stop_requested is not None:
            return None
        dead = limit.passed_live(progress.get("stages") or [])
        if dead is None:
            return None
        reason = limit.live_reason(dead)
        self.stop(reason)
        self._stopped_at_limit = True
        return reason

    def cancel(self) -> None:
        """Stop now, without final checkpoints (the next run recovers as from a crash)."""
        self._end("cancelled")
        self.job.cancel()

    def _end(self, outcome: str, error: BaseException | None = None) -> None:
        """How the run ended (the first call counts): ``close()`` records it where ``eos
        jobs`` reads the runs; a failure with its error's first line."""
        if self.ended is None:
            detail = (str(error).strip().splitlines() or [type(error).__name__])[0] \
                if error is not None else ""
            self.ended = (outcome, detail)

    def wait(self, timeout: float | None = None) -> bool:
        return self.job.wait(timeout)

    def close(self) -> None:
        """Release the job's lease and the driver's transport. Call it once the run is
        over: a run closed early leaves its tasks without a driver that holds the job."""
        if self._closed:
            return
        self._closed = True
        if self.lease is not None:   # in an outage, a renewal stuck in it is not waited for
            self.lease.close(self.ended, unreachable=self.outage.began is not None)
        self.t.close()

    def summary(self) -> RunSummary:
        """Blocks until the run ends; raises what ended it if a task failed for good."""
        try:
            results = self.job.result()
        except EngineError as exc:
            # A task gave up on an outage: the same one line the driver's own look gives.
            prefix = f"{OutageBudgetExceeded.__name__}: "
            if exc.reason.startswith(prefix):
                outage = OutageBudgetExceeded(exc.reason[len(prefix):])
                self._end("failed", outage)
                raise outage from None
            if exc.user_traceback and tracebacks_wanted():
                exc.add_note(exc.user_traceback.rstrip())   # printed under the traceback
            self._end("failed", exc)
            raise
        except BaseException as exc:
            self._end("failed", exc)
            raise
        seconds = time.monotonic() - self.started
        tasks = [cloudpickle.loads(r) for r in results]
        while True:
            began = time.monotonic()
            try:
                end = source_positions(self.t, self.plan)   # the partitions of ``begin``
                self.outage.ok()
                break
            except TransportError as exc:
                self._outage(exc, since=began)
                time.sleep(1.0)
        consumed = sum(end[tp] - self.begin[tp] for tp in self.begin)
        by_id = {int(t["task_id"]): t for t in tasks}
        figures = source_figures(by_id, self.plan, self.begin)
        summary = RunSummary(self.plan.name, self.plan.guarantee, self.t.name, seconds,
                             consumed, tasks, describe_plan(self.plan), run=self.run,
                             bounded=self.bounded, stopped=any(t.get("stopped") for t in tasks),
                             input_read=figures[0] if figures is not None else None,
                             sink_records=sink_records(by_id, self.plan)[0],
                             dead_letter_topic=self.plan.dead_letter_topic)
        limit = self.dead_letter_limit
        if limit is not None and limit.passed(summary.dead_letters, consumed):
            failed = DeadLetterLimitExceeded(limit.failure(
                summary.dead_letters, consumed, str(self.plan.dead_letter_topic),
                stopped=self._stopped_at_limit), summary)
            self._end("failed", failed)
            raise failed
        self._end("stopped" if summary.stopped else "finished")
        return summary


def state_root(data_dir: str | None, state_dir: str | None) -> str:
    """Where a run's tasks keep their state: ``state_dir``, else ``<data dir>/state``
    (``.eos/state`` on Kafka, with no data dir); absolute."""
    return str(Path(state_dir or Path(data_dir or ".eos") / "state").absolute())


def start_pipeline(pipeline: Pipeline, *, bootstrap_servers: str | None = None,
                   client_config: Mapping[str, Any] | None = None,
                   data_dir: str | None = None, state_dir: str | None = None,
                   guarantee: str | None = None, commit_interval: float | None = None,
                   commit_every: int | None = None, parallelism: int | None = None,
                   sink_partitions: int | None = None, master: str | None = None,
                   max_attempts: int = 4, bounded: bool = True,
                   dead_letters: bool | str | None = None,
                   max_dead_letters: int | str | None = None,
                   fault: dict[str, Any] | list[dict[str, Any]] | None = None,
                   buffer_max_bytes: int = 64 << 20, poll_records: int = 5_000,
                   channel_batch: int | None = None,
                   take_over: bool = False,
                   lease_timeout: float = DEFAULT_LEASE_TIMEOUT,
                   reset_offset: bool | None = None, offset_default: str | None = None,
                   checkpoints: str | None = None, job_id: str | None = None,
                   outage_budget: float | None = None,
                   no_progress_timeout: float | None = DEFAULT_NO_PROGRESS_TIMEOUT
                   ) -> PipelineRun:
    """Plan ``pipeline``, record a new run of its job, start its tasks on Spark; return at
    once. Bounded: the sources read what their input holds now. Unbounded: they read on
    until ``PipelineRun.stop`` (or ``eos stop``). A job continues where its last run
    left off: state, input positions and output carry over. ``dead_letters`` overrides
    the pipeline's own setting (True: ``<job>.dead-letters``; a topic; False: off);
    ``max_dead_letters``: the most dead letters the run may leave, a count (``10``,
    ``"10"``) or a share of the records it reads (``"1%"``), past which it fails with
    ``DeadLetterLimitExceeded`` (``dead_letter_limit.py``: when each is checked);
    ``reset_offset``, ``offset_default``, ``checkpoints`` and ``job_id`` the source's and
    the pipeline's. ``client_config``: librdkafka settings for every Kafka client of the run,
    the tasks' included, over the pipeline's ``kafka_config``. ``outage_budget``: seconds
    the driver and each task ride through a broker outage (default: the pipeline's, 60);
    past it the run fails with ``OutageBudgetExceeded``. ``no_progress_timeout``: seconds
    some task may have no running attempt (a dead or too small cluster) before the run
    fails with ``JobStalled`` (None or 0: never). ``channel_batch``: the most messages a
    task sends to a channel in one record (a data batch; default 4096, 1: one record per
    message).

    The run holds the job's lease until ``PipelineRun.close()``: another driver's run of
    the job is refused meanwhile (``JobRunning``), unless it asks to ``take_over``. A
    driver that dies stops holding it ``lease_timeout`` seconds after its last renewal."""
    for setting, value in (("commit_interval", commit_interval),
                           ("commit_every", commit_every), ("parallelism", parallelism),
                           ("sink_partitions", sink_partitions), ("channel_batch", channel_batch),
                           ("outage_budget", outage_budget),
                           ("no_progress_timeout", no_progress_timeout),
                           ("max_attempts", max_attempts), ("buffer_max_bytes", buffer_max_bytes),
                           ("poll_records", poll_records), ("lease_timeout", lease_timeout)):
        if value is not None:   # None: the pipeline's, or the default
            check(setting, value)
    limit = parse_limit(max_dead_letters) if max_dead_letters is not None else None
    transport_opts: dict[str, Any]
    if bootstrap_servers:
        transport_opts = {"bootstrap_servers": bootstrap_servers}
        settings = merge(getattr(pipeline, "kafka_config", None), client_config)
        if settings:   # reaches every task through TaskConfig.transport
            transport_opts["client_config"] = settings
    else:
        data_dir = data_dir or ".eos/data"
        transport_opts = {"data_dir": str(Path(data_dir).absolute())}
    state_dir = state_root(data_dir, state_dir)
    budget = plan_budget(pipeline.outage_budget if outage_budget is None else outage_budget)
    _check_run_dirs(pipeline, transport_opts, state_dir)
    transport = open_transport(**transport_opts)
    try:
        plan = plan_job(pipeline, transport, guarantee=guarantee, commit_interval=commit_interval,
                        commit_every=commit_every, parallelism=parallelism,
                        sink_partitions=sink_partitions, dead_letters=dead_letters,
                        checkpoints=checkpoints, reset_offset=reset_offset,
                        offset_default=offset_default, job_id=job_id)
        check_topics(transport, plan)
        if limit is not None and plan.dead_letter_topic is None:
            raise ConfigError(f"--max-dead-letters {limit}: job {plan.name!r} has no dead "
                              f"letters (a record whose function raises stops the run): "
                              f"turn them on with --dead-letters or --dead-letter-topic "
                              f"(Pipeline(dead_letters=True))")
        # A user function raising on a record fails every retry the same way: the run
        # ends at the first one (TaskFailed names the record and suggests dead letters);
        # so does a task whose run was taken over (JobRunning: a retry would fence the
        # newer run's task), and a task that outlived the outage budget (its retry would
        # wait for another).
        engine = EngineConfig(master=master, max_attempts=max_attempts,
                              app_name=f"eos:{plan.name}",
                              no_progress_timeout=no_progress_timeout,
                              python_path=tuple(pipeline.python_path),
                              fail_fast=(TaskFailed, JobRunning, OutageBudgetExceeded,
                                         StartOutOfRange))
        check_slots(engine, len(plan.tasks))   # before the run is recorded
        # A changed layout first: it explains a partition without a checkpoint, say.
        ControlLog(transport, plan.name).check_layout(plan)
        # A bad Startpoint, or a partition with nowhere to start: before the run is recorded.
        check_fallback(transport, plan, state_dir, fan_out(transport, plan, -1, write=False))
        lease = LeaseRequest(lease_timeout, take_over)
        info = ControlLog(transport, plan.name).start_run(plan, bounded=bounded, lease=lease)
        keeper = LeaseKeeper(transport_opts, plan.name, info.start.run, lease)
    except BaseException:
        transport.close()
        raise
    try:
        create_job_topics(transport, plan)
        startpoints = fan_out(transport, plan, info.start.run)
        ends0 = run_start_ends(transport, plan)   # before any task reads: P5
        begin = run_begin(transport, plan, info.start.run, state_dir, startpoints, ends0)
        configs = task_configs(plan, transport, transport_opts, state_dir, bounded=bounded,
                               startpoints=startpoints, ends=ends0,
                               run=info.start.run, run_started_ms=info.start.started_ms,
                               control_offset=info.offset, fault=fault,
                               buffer_max_bytes=buffer_max_bytes, poll_records=poll_records,
                               outage_budget=budget,
                               **({"channel_batch": channel_batch} if channel_batch else {}))
        ends = {TopicPartition(plan.stage_of(c.task_id).input_topic, p): end
                for c in configs for p, end in c.end_offsets.items()}
        clear_task_progress(Path(state_dir) / plan.name, plan)
        job = start_tasks(_task_entry, [dumps(c) for c in configs], engine)
        return PipelineRun(plan, transport, info, job, bounded, begin, state_dir, ends, keeper,
                           outage_budget=budget, dead_letter_limit=limit)
    except BaseException:
        keeper.close()
        transport.close()
        raise


def plan_budget(budget: float | None) -> float:
    """The outage budget of a run (None: the default); ``ConfigError`` for a bad one."""
    try:
        return check_budget(DEFAULT_BUDGET if budget is None else budget)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def run_pipeline(pipeline: Pipeline, *,
                 on_progress: Callable[[dict[str, Any]], None] | None = None,
                 progress_interval: float = 0.5, **options: Any) -> RunSummary:
    """Run ``pipeline`` until its run ends (see ``start_pipeline`` for the options).

    Ctrl-C once asks for a graceful stop (final checkpoints, then the summary); a second
    Ctrl-C cancels the tasks where they are."""
    check("progress_interval", progress_interval)
    return watch_run(start_pipeline(pipeline, **options), on_progress=on_progress,
                     progress_interval=progress_interval)
