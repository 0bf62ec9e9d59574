"""Job B of a chained workload: after job A's run, a bounded run of B over A's sink.

A's sink is exactly-once: on Kafka a topic written with transactions, whose partitions end
one past a commit marker, as a topic Kafka Streams or Flink wrote with exactly-once does.
B runs under the schedule's faults of ``job = 2``; its sink is judged against the
workload's ``then_oracle`` over A's input, so a record lost or doubled by either job shows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import EosError
from ..runner import start_pipeline
from ..transport import open_transport
from .injector import Injector
from .schedule import Schedule
from .setup import Settings, fault_dicts, max_attempts_for, task_roles
from .verify import Verdict, verify_output
from .workloads import sink_formats

__all__ = ["run_then", "THEN_TIMEOUT"]

#: Seconds job B's bounded run may take: its input is all there when it starts, so a run
#: that goes on past this is a run that does not end.
THEN_TIMEOUT = 240.0


def run_then(settings: Settings, job: str, source: str, values: list[Any], schedule: Schedule,
             opts: dict[str, Any], state: Path, t0: float, wall0: float
             ) -> tuple[Verdict | None, str | None, dict[str, Any]]:
    """Run job B once over ``source`` (A's sink) and judge its sink; (verdict, error, what
    happened: its job, fault records and attempts)."""
    w = settings.workload
    assert w.then is not None and w.then_oracle is not None
    name = f"{job}-b"
    pipeline = w.then()
    sink = None if "data_dir" in opts else f"{name}-{pipeline.sink_topic}"
    pipeline.rename(name, source=source, sink=sink)
    job_dir = state / name
    job_dir.mkdir(parents=True, exist_ok=True)
    log = job_dir.parent / f"{name}-faults.log"
    tasks = len(task_roles(w, settings.guarantee, then=True))
    injector = Injector(schedule, job_dir, log, tasks, settings.broker_dir)
    injector.t0, injector.wall0 = t0, wall0
    error: str | None = None
    limit = injector.now() + min(settings.timeout, THEN_TIMEOUT)
    run = start_pipeline(pipeline, guarantee=settings.guarantee,
                         commit_every=settings.commit_every,
                         commit_interval=settings.commit_interval,
                         poll_records=settings.poll_records, state_dir=str(state),
                         max_attempts=max_attempts_for(schedule), bounded=True,
                         fault=fault_dicts(schedule, log, wall0), **opts)
    try:
        while not run.wait(0.05):
            injector.tick()
            if injector.now() > limit:
                p = run.progress()
                error = (f"job B (reading job A's sink) did not end: its bounded run was "
                         f"cancelled after {min(settings.timeout, THEN_TIMEOUT):.0f} s, "
                         f"{p['input_committed']} of {p['input_total']} input records "
                         f"committed")
                run.cancel()
                run.wait()
                break
        if error is None:
            try:
                run.summary()
            except EosError as exc:
                error = "job B: " + " ".join(f"{type(exc).__name__}: {exc}".split())[:400]
    finally:
        run.close()
        injector.finish()
    key_decode, value_decode = sink_formats(pipeline)
    with open_transport(**opts) as t:
        verdict = verify_output(t, pipeline.sink_topic, name, w.then_oracle(values),
                                settings.guarantee, key_decode=key_decode,
                                value_decode=value_decode)
    info = {"job": name, "faults": [{**r, "job": 2} for r in injector.records],
            "attempts": [{**a, "job": 2} for a in injector.attempts.values()]}
    return verdict, error, info
