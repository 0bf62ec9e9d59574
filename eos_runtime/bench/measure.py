"""One measured run of one system on one workload: the method, in order.

1. Fresh topics for the run, keeping the broker's append time.
2. The system starts on the empty input and warms up until it says it is ready, so
   start-up (a JVM, a Spark context, a consumer group) is outside the measurement.
3. The burst is produced.
4. The output is read as a read_committed reader reads it, until every result the
   oracle expects is there, or until nothing new came for ``idle_timeout`` seconds.
5. A settle period (two commit intervals) lets late duplicates show, then the system
   is stopped and the output is read to its end.
6. The whole output is compared with the oracle; a run that fails is marked, and its
   throughput is not ranked (``report.py``).

Throughput is the oracle's results over the time from the first input record's append
to the append of the output record that completed the answer: the broker's clock at
both ends, so start-up is excluded and commit latency included, alike for every system.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..experiments.verify import compare
from ..experiments.workloads import Expected
from .kafka import BenchKafka, OutputWatch
from .systems import Setup, System, remove_scratch, scratch_dir
from .workloads import BenchWorkload, InputRecord, expected_pairs

__all__ = ["Settings", "measure"]

Say = Callable[[str], None]


@dataclass(frozen=True)
class Settings:
    bootstrap: str
    partitions: int = 2
    commit_interval: float = 1.0
    ready_timeout: float = 180.0
    idle_timeout: float = 60.0
    work_root: Path = Path(".eos/bench-work")
    progress_every: float = 2.0


def _utf8(b: bytes) -> str:
    return b.decode("utf-8")


def measure(system: System, workload: BenchWorkload, inputs: list[InputRecord],
            expected: Expected, settings: Settings, *, round_no: int, tag: str,
            say: Say) -> dict[str, Any]:
    """Run ``system`` on ``inputs`` once; return the run's row for the report."""
    kafka = BenchKafka(settings.bootstrap)
    name = f"bench-{tag}-{workload.name}-{system.name}-r{round_no}"
    setup = Setup(bootstrap=settings.bootstrap, workload=workload, name=name,
                  source=f"{name}.in", sink=f"{name}.out", partitions=settings.partitions,
                  commit_interval=settings.commit_interval,
                  work_dir=scratch_dir(settings.work_root, name))
    wanted = expected_pairs(expected)
    row: dict[str, Any] = {
        "workload": workload.name, "system": system.name, "guarantee": system.guarantee,
        "round": round_no, "input_records": len(inputs), "unit": workload.unit,
        "results_expected": sum(wanted.values()), "verified": False, "error": None}
    running = None
    watch = None
    try:
        kafka.create_topics([setup.source, setup.sink], settings.partitions)
        started = time.monotonic()
        running = system.start(setup)
        while not running.ready():
            why = running.failure()
            if why is not None:
                raise _RunFailed(f"died while starting: {why}")
            if time.monotonic() - started > settings.ready_timeout:
                raise _RunFailed(f"not ready after {settings.ready_timeout:g} s")
            time.sleep(0.2)
        row["ready_seconds"] = round(time.monotonic() - started, 2)
        watch = OutputWatch(settings.bootstrap, setup.sink, settings.partitions, dict(wanted))
        produced = time.monotonic()
        kafka.produce(setup.source, inputs, settings.partitions)
        row["produce_seconds"] = round(time.monotonic() - produced, 2)
        _watch(watch, running, settings, say, f"{workload.name} {system.name} round {round_no}")
        settle_until = time.monotonic() + 2 * settings.commit_interval
        while time.monotonic() < settle_until:
            watch.poll(0.2)
        running.stop()
        running = None
        watch.drain()
        first_ms = kafka.first_append_ms(setup.source, settings.partitions)
        _timing(row, first_ms, watch, workload)
        verdict = compare(expected, watch.records, system.verify_as, key_decode=_utf8,
                          value_decode=_utf8)
        row.update(verdict.counts())
        row["output_records"] = verdict.committed
        row["verified"] = verdict.passed
        if not verdict.passed:
            row["error"] = "wrong answer: " + ", ".join(verdict.reasons())
    except _RunFailed as exc:
        row["error"] = str(exc)
    except Exception as exc:   # one system's failure is a row of the report, not the bench's end
        row["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if running is not None:
            try:
                running.stop()
            except Exception as exc:   # a failed system's stop may fail too; report the first
                row["error"] = row["error"] or f"stopping failed: {exc}"
        if watch is not None:
            watch.close()
        kafka.delete_topics_with_prefix(f"{name}.")
        remove_scratch(setup.work_dir)
    return row


class _RunFailed(Exception):
    pass


def _watch(watch: OutputWatch, running: Any, settings: Settings, say: Say, label: str) -> None:
    """Read output until the answer is complete; give up after ``idle_timeout`` s of nothing."""
    last_new = time.monotonic()
    next_say = time.monotonic() + settings.progress_every
    total = watch.missing
    while watch.missing:
        if watch.poll(0.5):
            last_new = time.monotonic()
        now = time.monotonic()
        if now >= next_say:
            next_say = now + settings.progress_every
            say(f"  {label}: {total - watch.missing:,} / {total:,} results")
        if now - last_new > settings.idle_timeout:
            why = running.failure()
            raise _RunFailed(f"incomplete: {watch.missing:,} of {total:,} results missing after "
                             f"{settings.idle_timeout:g} s without new output"
                             + (f"; the system died: {why}" if why else ""))


def _timing(row: dict[str, Any], first_ms: int, watch: OutputWatch,
            workload: BenchWorkload) -> None:
    end_ms = watch.complete_ms if watch.complete_ms is not None else watch.last_ms
    if end_ms is None:
        return
    seconds = max(end_ms - first_ms, 1) / 1000
    row["seconds"] = round(seconds, 3)
    row["throughput"] = round(row["results_expected"] / seconds, 1)
    row["input_per_second"] = round(row["input_records"] / seconds, 1)
    row["last_output_lag_ms"] = (watch.last_ms or end_ms) - end_ms
