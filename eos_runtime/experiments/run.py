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

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..errors import EosError
from ..runner import start_pipeline
from ..transport import TopicSpec, open_transport
from .chained import run_then
from .injector import Injector
from .multirun import run_scenario
from .scenario_plan import input_stamp0
from .schedule import Schedule
from .setup import (
    SAMPLE_EVERY,
    NewJob,
    RunResult,
    Settings,
    fault_dicts,
    interrupted,
    keep_or_remove,
    max_attempts_for,
    new_job,
    recovery_times,
    task_roles,
)
from .soak import Batch, Feeder, graph_inputs, soak_phase, source_inputs
from .verify import check_dead_letters, merge, verify_output, verify_sinks
from .workloads import sink_formats

__all__ = ["run_experiment"]


def _fed(settings: Settings, job: str, feed: dict[str, Any]) -> dict[str, Any]:
    """A graph workload's input by the topics of the run's job (on Kafka: named after it)."""
    if settings.transport_name == "local":
        return feed
    return {f"{job}-{topic}": records for topic, records in feed.items()}


def _batches(settings: Settings, job: str, values: list[Any], payloads: list[bytes],
             pipeline: Any) -> list[Batch]:
    """A soak's input value by value: a graph's records by its feed, each to its topic
    and partition; a one-source workload's round robin into its source."""
    w = settings.workload
    if w.feed is None:
        parts = w.source_partitions
        return [[(pipeline.source_topic, i % parts, None, b)] for i, b in enumerate(payloads)]
    return [[(topic, p, key, value) for topic, records in _fed(settings, job, w.feed([v])).items()
             for p, key, value in records] for v in values]


def feed_graph(t: Any, feed: dict[str, Any], partitions: int) -> None:
    """Create each input topic and write its records, each (partition, key, value) to the
    partition it names."""
    t.create_topics([TopicSpec(topic, partitions) for topic in feed])
    with t.producer() as producer:
        for topic, records in feed.items():
            for partition, key, value in records:
                producer.produce(topic, partition, value, key=key)
        producer.flush()


def run_experiment(settings: Settings, seed: int, schedule: Schedule, *,
                   on_progress: Callable[[dict[str, Any]], None] | None = None) -> RunResult:
    """Run ``settings.workload`` once under ``schedule`` and judge its committed output
    (several runs of the job when the schedule has an operator's actions: multirun.py).
    A Ctrl-C cancels the run, removes its data (unless ``keep_data``) and raises
    ``RunInterrupted`` saying what is left."""
    made = new_job(settings, seed)
    try:
        if schedule.multi_run():
            return run_scenario(settings, seed, schedule, made, on_progress=on_progress)
        return _one_run(settings, seed, schedule, made, on_progress)
    except KeyboardInterrupt:
        raise interrupted(settings, made) from None


def _one_run(settings: Settings, seed: int, schedule: Schedule, made: NewJob,
             on_progress: Callable[[dict[str, Any]], None] | None) -> RunResult:
    w = settings.workload
    job, pipeline, opts, root, topics = made
    state = root / "state"
    job_dir = state / job
    log = job_dir / "faults.log"

    values = w.generate(seed, settings.records())
    payloads: list[bytes] = []
    if w.feed is not None:   # a graph: input into each source and table topic
        feed = _fed(settings, job, w.feed(values))
    else:   # round robin into the one source
        payloads = w.input_bytes(values, pipeline)
        parts = w.source_partitions
        feed = {pipeline.source_topic: [(i % parts, None, v) for i, v in enumerate(payloads)]}
    # a soak's feeder writes the input as it goes, value by value, each stamped with its
    # index (how a graph's records are known again)
    batches = _batches(settings, job, values, payloads, pipeline) if settings.soak else []
    stamp0 = input_stamp0(int(time.time() * 1000), len(values))
    with open_transport(**opts) as t:
        feed_graph(t, {topic: [] if settings.soak else records
                       for topic, records in feed.items()}, w.source_partitions)

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
    feeder = (Feeder(opts, batches, settings.rate, stamp0 if w.feed is not None else None)
              if settings.soak else None)
    if feeder is not None:
        feeder.start()   # from the run's start: it feeds for the whole duration
    try:
        run = start_pipeline(pipeline, guarantee=settings.guarantee,
                             commit_every=settings.commit_every,
                             commit_interval=settings.commit_interval,
                             poll_records=settings.poll_records, state_dir=str(state),
                             max_attempts=max_attempts_for(schedule), bounded=not settings.soak,
                             fault=fault_dicts(schedule, log, wall0), **options)
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
        fed = values
        if feeder is not None:
            # Exactly what reached the input, not what was meant to: an outage may have
            # cost the feeder records, and the run can only be judged on what it was given.
            fed = (source_inputs(t, pipeline.source_topic, payloads, values) if w.feed is None
                   else graph_inputs(t, batches, values, stamp0))
            soak = {"duration": settings.duration, "rate": settings.rate,
                    "generated": len(values), "handed_to_producer": feeder.sent,
                    "fed": len(fed), "failed_flushes": feeder.failed_flushes,
                    "feeder_error": feeder.error,
                    "drain_seconds": (None if drain_started is None
                                      else round(seconds - drain_started, 3))}
            if feeder.error is not None and error is None:
                error = f"the soak's feeder stopped: {feeder.error}"
        if w.sinks_oracle is not None:   # a graph: every sink against its oracle
            verdict = verify_sinks(t, pipeline, w.sinks_oracle(fed), settings.guarantee, job,
                                   settings.transport_name)
        else:
            key_decode, value_decode = sink_formats(pipeline)
            verdict = verify_output(t, pipeline.sink_topic, job, w.oracle(fed),
                                    settings.guarantee, key_decode=key_decode,
                                    value_decode=value_decode)
        if w.judge is not None:   # its own judgment beside the oracle's
            verdict = merge([verdict, w.judge(t, pipeline, job, fed, settings.guarantee)],
                            settings.guarantee)
        if w.then is not None and error is None and feeder is None:

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
    recovery_times(faults, attempts, timeline)
    result = RunResult(seed, job, settings.guarantee, settings.transport_name, whole, faults,
                       attempts, timeline, tasks, verdict, error, seconds, settings.replay(seed),
                       soak=soak, generations=sorted(
                           injector.generations.values(),
                           key=lambda g: (g["task"], g["attempt"], g["generation"])))
    keep_or_remove(settings, result, root, topics)
    return result
