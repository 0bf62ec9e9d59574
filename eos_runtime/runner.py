"""The driver: load a pipeline, plan it, create its topics, run its tasks on Spark.

    summary = run_pipeline(pipeline, data_dir=".eos/data")            # embedded local log
    summary = run_pipeline(pipeline, bootstrap_servers="127.0.0.1:9092")

A bounded run (the default) reads what the source holds when the run starts, takes a
final checkpoint everywhere and ends. An unbounded run goes on until the source's
``stop`` control record (``eos stop``) or Ctrl-C.
"""

from __future__ import annotations

import runpy
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import cloudpickle

from .api import Pipeline
from .errors import ConfigError, TopicNotFound
from .plan import JobPlan, describe_plan, plan_job
from .transport import TopicPartition, TopicSpec, Transport, open_transport

__all__ = ["RunSummary", "create_job_topics", "load_pipeline", "run_pipeline", "task_configs"]


@dataclass
class RunSummary:
    job: str
    guarantee: str
    transport: str
    seconds: float
    input_records: int
    tasks: list[dict[str, Any]] = field(default_factory=list)
    plan: list[dict[str, Any]] = field(default_factory=list)

    @property
    def records_per_second(self) -> float:
        return self.input_records / self.seconds if self.seconds > 0 else 0.0

    @property
    def task_seconds(self) -> float:
        """The longest task's own run time: the run without Spark's start-up."""
        return max((t.get("seconds", 0.0) for t in self.tasks), default=0.0)

    def as_dict(self) -> dict[str, Any]:
        return {"job": self.job, "guarantee": self.guarantee, "transport": self.transport,
                "seconds": round(self.seconds, 3), "input_records": self.input_records,
                "records_per_second": round(self.records_per_second, 1),
                "task_seconds": self.task_seconds,
                "plan": self.plan, "tasks": self.tasks}


def load_pipeline(path: str | Path) -> Pipeline:
    """Run a pipeline file and return the ``Pipeline`` it defines (``pipeline`` or the only one)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"pipeline file {str(path)!r} does not exist")
    namespace = runpy.run_path(str(path), run_name="eos_pipeline")
    found = [v for v in namespace.values() if isinstance(v, Pipeline)]
    chosen = namespace.get("pipeline")
    if isinstance(chosen, Pipeline):
        return chosen
    if len(found) == 1:
        return found[0]
    raise ConfigError(f"{path} defines {len(found)} Pipeline objects; name the one to run "
                      f"`pipeline`")


def _task_entry(attempt) -> bytes:  # runs on a Spark worker
    from .runtime.task import run_task_payload
    return run_task_payload(attempt.payload, attempt.attempt)


def run_pipeline(pipeline: Pipeline, *, bootstrap_servers: str | None = None,
                 data_dir: str | None = None, state_dir: str | None = None,
                 guarantee: str | None = None, commit_interval: float | None = None,
                 commit_every: int | None = None, parallelism: int | None = None,
                 sink_partitions: int | None = None, master: str | None = None,
                 max_attempts: int = 4,
                 fault: dict[str, Any] | list[dict[str, Any]] | None = None,
                 buffer_max_bytes: int = 64 << 20, poll_records: int = 5_000,
                 on_progress: Callable[[dict[str, Any]], None] | None = None) -> RunSummary:
    """Plan and run ``pipeline`` to the end of its input (a bounded run)."""
    from .engine import EngineConfig, run_tasks

    if not bootstrap_servers and not data_dir:
        data_dir = ".eos/data"
    transport_opts: dict[str, Any] = (
        {"bootstrap_servers": bootstrap_servers} if bootstrap_servers
        else {"data_dir": str(Path(data_dir).absolute())})
    state_dir = str(Path(state_dir or (Path(data_dir or ".eos") / "state")).absolute())
    with open_transport(**transport_opts) as transport:
        plan = plan_job(pipeline, transport, guarantee=guarantee, commit_interval=commit_interval,
                        commit_every=commit_every, parallelism=parallelism,
                        sink_partitions=sink_partitions)
        _refuse_a_second_run(transport, plan)
        create_job_topics(transport, plan)
        src = plan.stages[0]
        configs = task_configs(plan, transport, transport_opts, state_dir, fault=fault,
                               buffer_max_bytes=buffer_max_bytes, poll_records=poll_records)
        payloads = [cloudpickle.dumps(c) for c in configs]
        ends = {p: e for c in configs for p, e in c.end_offsets.items()}
        starts = {p: transport.watermarks(TopicPartition(src.input_topic, p))[0] for p in ends}
        sink_tp = [TopicPartition(plan.stages[-1].output_topic, p)
                   for p in range(plan.stages[-1].output_partitions)]
        started = time.monotonic()

        def poll() -> None:
            if on_progress is not None:
                out = sum(transport.watermarks(tp, read_committed=False)[1] for tp in sink_tp)
                on_progress({"seconds": time.monotonic() - started, "sink_offsets": out})

        engine = EngineConfig(master=master, max_attempts=max_attempts,
                              app_name=f"eos:{plan.name}")
        results = run_tasks(_task_entry, payloads, engine, poll=poll)
        seconds = time.monotonic() - started
    tasks = [cloudpickle.loads(r) for r in results]
    return RunSummary(plan.name, plan.guarantee, "kafka" if bootstrap_servers else "local",
                      seconds, sum(ends[p] - starts[p] for p in ends), tasks, describe_plan(plan))


def task_configs(plan: JobPlan, transport: Transport, transport_opts: dict[str, Any],
                 state_dir: str, **options: Any) -> list:
    """One ``TaskConfig`` per task of a bounded run: sources get the end offsets of now."""
    from .runtime.task import TaskConfig

    src = plan.stages[0]
    ends = {p: transport.watermarks(TopicPartition(src.input_topic, p))[1]
            for p in range(src.input_partitions)}
    return [TaskConfig(plan=plan, task_id=t.task_id, transport=transport_opts,
                       state_dir=state_dir, bounded=True,
                       end_offsets={p: ends[p] for p in t.partitions} if t.stage == 0 else {},
                       **options)
            for t in plan.tasks]


def _refuse_a_second_run(transport: Transport, plan: JobPlan) -> None:
    """Each run is bounded and ends with end-of-stream markers; continuing a job that
    ended needs unbounded runs (versions and stream ends across runs), not built yet."""
    try:
        transport.describe(plan.changelog_topic)
    except TopicNotFound:
        return
    if any(transport.watermarks(TopicPartition(plan.changelog_topic, t.task_id))[1] > 0
           for t in plan.tasks):
        raise ConfigError(
            f"job {plan.name!r} already ran on this {transport.name} transport (its change log "
            f"{plan.changelog_topic!r} holds records): continuing a job across runs is not "
            f"supported yet; give the pipeline another name or use another data dir")


def create_job_topics(transport: Transport, plan: JobPlan) -> None:
    specs = plan.topics_to_create()
    sink = plan.stages[-1]
    try:
        transport.describe(sink.output_topic)
    except TopicNotFound:
        specs.append(TopicSpec(sink.output_topic, sink.output_partitions))
    transport.create_topics(specs)
