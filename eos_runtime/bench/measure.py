"""One measured run of one system on one workload: the method, in order.

1. Fresh topics for the run, keeping the broker's append time.
2. The system starts on the empty input and warms up until it says it is ready, so
   start-up (a JVM, a Spark context, a consumer group) is outside the measurement.
3. The burst is produced, by a process of its own, loaded and connected beforehand.
4. The output is read as a read_committed reader reads it, until every result the
   oracle expects is there, or until nothing new came for ``idle_timeout`` seconds. A
   steady run (latency, recovery) reads none of it until its input has ended and the
   output's committed end has held still for two commit intervals: its latency is
   timed by the offsets' clock (``visibility.py``), and reading along took cores from
   the system under test.
5. A settle period (two commit intervals) lets late duplicates show, then the system
   is stopped and the output is read to its end.
6. The whole output is compared with the oracle; a run that fails is marked, and its
   throughput is not ranked (``report.py``).

Throughput is the oracle's results over the time from the first input record's broker
append to the moment the complete answer became visible to a read_committed reader:
start-up is excluded and commit latency included, alike for every system. Both ends
are one clock when the broker runs on this host (the project's broker does); where the
bench's clock runs behind the broker's, the end falls back to the append time of the
record that completed the answer. ``append_seconds`` keeps the append-to-append time.

The other measurements are the same run with another load (``Load``): a steady input
with probe records for latency (bench/latency.py), the same with one task killed a third
into it for recovery, and a burst with every process of the system sampled for memory
(bench/memory.py).
"""

from __future__ import annotations

import select
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgpack

from ..experiments.verify import compare
from ..experiments.workloads import Expected
from .kafka import BenchKafka, OutputWatch
from .latency import SteadyInput, probe_latencies, recovery
from .memory import BrokerCPU, TreeSampler
from .percentiles import percentiles
from .systems import Setup, System, remove_scratch, scratch_dir
from .visibility import VisibilityClock
from .workloads import BenchWorkload, InputRecord, expected_pairs

__all__ = ["Settings", "Load", "measure"]

Say = Callable[[str], None]


@dataclass(frozen=True)
class Settings:
    bootstrap: str
    partitions: int = 2
    commit_interval: float = 1.0
    ready_timeout: float = 180.0
    #: None: the system's own (``idle_timeout_of``)
    idle_timeout: float | None = None
    work_root: Path = Path(".eos/bench-work")
    progress_every: float = 2.0


@dataclass(frozen=True)
class Load:
    """What one run measures, and the input it gets for it."""

    measure: str = "throughput"           # throughput, latency, recovery, memory
    steady: SteadyInput | None = None     # latency, recovery: paced input with probes
    kill_after: float | None = None       # recovery: seconds after the input starts
    memory: bool = False                  # sample the system's resident memory


def _utf8(b: bytes) -> str:
    return b.decode("utf-8")


#: Seconds without new output before a run is given up, for a system that names none
DEFAULT_IDLE_TIMEOUT = 60.0


def idle_timeout_of(system: System, settings: Settings) -> float:
    """``--idle-timeout`` when given, else the system's own: faust and PyFlink pause their
    output for over a minute at 10⁵ keys (``FaustSystem.idle_timeout``), the others
    DEFAULT_IDLE_TIMEOUT."""
    if settings.idle_timeout is not None:
        return settings.idle_timeout
    return float(getattr(system, "idle_timeout", DEFAULT_IDLE_TIMEOUT))


def measure(system: System, workload: BenchWorkload, inputs: list[InputRecord],
            expected: Expected, settings: Settings, *, round_no: int, tag: str,
            say: Say, load: Load = Load()) -> dict[str, Any]:
    """Run ``system`` on ``inputs`` once; return the run's row for the report."""
    settings = replace(settings, idle_timeout=idle_timeout_of(system, settings))
    kafka = BenchKafka(settings.bootstrap)
    # unique, and no run's name inside another's: cleanup finds a run's topics by it
    name = f"bench-{tag}-{workload.name}-{system.name}-r{round_no}-{uuid.uuid4().hex[:6]}"
    tables = workload.tables()
    setup = Setup(bootstrap=settings.bootstrap, workload=workload, name=name,
                  source=f"{name}.in", sink=f"{name}.out", partitions=settings.partitions,
                  commit_interval=settings.commit_interval,
                  work_dir=scratch_dir(settings.work_root, name),
                  tables={t: f"{name}.{t}" for t in tables})
    wanted = expected_pairs(expected)
    row: dict[str, Any] = {
        "measure": load.measure, "workload": workload.name, "system": system.name,
        "guarantee": system.guarantee, "round": round_no, "input_records": len(inputs),
        "unit": workload.unit,
        "results_expected": sum(wanted.values()), "verified": False, "error": None}
    running = None
    watch = None
    burst = None
    sampler = None
    try:
        kafka.create_topics([setup.source, setup.sink, *setup.tables.values()],
                            settings.partitions)
        for topic, rows in tables.items():   # untimed: the table is there before the system
            kafka.write_table(setup.tables[topic], rows, settings.partitions)
        # The reader warms up with the system (connections, offset look-ups), so it sees
        # the answer when it is there, not after its own start-up.
        watch = OutputWatch(settings.bootstrap, setup.sink, settings.partitions, dict(wanted),
                            workload.value_part)
        burst = _Burst(setup, inputs, load.steady.rate if load.steady else None)
        started = time.monotonic()
        running = system.start(setup)
        if load.memory:   # its peak from the start; its CPU from the burst on
            sampler = TreeSampler(running.pids)
        while not (running.ready() and burst.is_ready()):
            why = running.failure()
            if why is not None:
                raise _RunFailed(f"died while starting: {why}")
            if burst.error is not None:
                raise _RunFailed(f"the burst producer died: {burst.error}")
            if time.monotonic() - started > settings.ready_timeout:
                raise _RunFailed(f"not ready after {settings.ready_timeout:g} s")
            watch.poll(0.2)
        row["ready_seconds"] = round(time.monotonic() - started, 2)
        # When the answer became readable comes from the clock's offset samples: the watch
        # reads record by record and may lag behind a fast system.
        clock = VisibilityClock(settings.bootstrap, setup.sink, settings.partitions)
        killed: list[int] = []
        # a burst's CPU per result: the throughput runs', and the memory runs' as state grows
        cpu = None
        broker = None
        if load.steady is None:
            if sampler is None:
                sampler = TreeSampler(running.pids, cpu=True)
            else:
                sampler.count_cpu()
            cpu = sampler
            broker = BrokerCPU(settings.bootstrap)
            broker.start()
        try:
            burst.go()
            went = time.monotonic()
            kill_at = None if load.kill_after is None else time.monotonic() + load.kill_after

            def tick() -> None:
                if kill_at is not None and not killed and time.monotonic() >= kill_at:
                    assert running is not None
                    killed.append(int(time.time() * 1000))
                    row["killed"] = running.kill_one()
                    say(f"  killed {row['killed']}")
            label = f"{workload.name} {system.name} round {round_no}"
            if load.steady is not None:
                watch.pause()
                _wait_out_steady_input(watch, burst, settings, say, label, tick,
                                       len(inputs) / load.steady.rate)
                watch.resume()
            incomplete = _watch(watch, running, burst, settings, say, label, tick)
            if cpu is not None:   # the system's CPU until the answer was complete
                spent = cpu.cpu_seconds()
                if spent is not None and incomplete is None:
                    row["cpu_seconds"] = round(spent, 2)
                    row["cpu_seconds_by_process"] = {
                        kind: round(seconds, 2) for kind, seconds in cpu.cpu_by_kind().items()}
                    broker_spent = broker.spent() if broker is not None else None
                    if broker_spent is not None:
                        row["broker_cpu_seconds"] = round(broker_spent, 2)
            row["produce_seconds"] = burst.finish()
            if watch.first_read_at is not None:
                row["output_read_after_seconds"] = round(watch.first_read_at - went, 3)
            settle_until = time.monotonic() + (0 if incomplete else 2 * settings.commit_interval)
            while time.monotonic() < settle_until:
                watch.poll(0.2)
        finally:
            clock.close()
        visible = clock.visible_at(watch.needed) if incomplete is None else None
        if visible is not None:
            watch.visible_ms = min(visible, watch.visible_ms or visible)
        if sampler is not None:
            peak = sampler.close()
            if load.memory:
                row["peak_rss_bytes"] = peak
                row["peak_rss_by_kind_bytes"] = sampler.peak_by_kind
            sampler = None
        details = running
        running.stop()
        running = None
        row.update(details.details())
        watch.drain()
        first_ms = kafka.first_append_ms(setup.source, settings.partitions)
        if load.steady is not None:
            _latency(row, kafka, setup, load.steady, watch, clock, killed)
        elif incomplete is None:
            _timing(row, first_ms, watch, workload)
        if workload.measure_output is not None:
            row.update(workload.measure_output(settings.bootstrap, setup.source,
                                               settings.partitions, watch.records,
                                               clock.samples))
        verdict = compare(expected, watch.records, system.verify_as, key_decode=_utf8,
                          value_decode=_utf8)
        row.update(verdict.counts())
        row["output_records"] = verdict.committed
        row["verified"] = verdict.passed and incomplete is None
        if incomplete is not None:
            row["error"] = f"{incomplete} ({', '.join(verdict.reasons()) or 'nothing wrong'} " \
                           f"in what arrived)"
        elif not verdict.passed:
            row["error"] = "wrong answer: " + ", ".join(verdict.reasons())
    except _RunFailed as exc:
        row["error"] = str(exc)
    except Exception as exc:   # one system's failure is a row of the report, not the bench's end
        row["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if sampler is not None:
            sampler.close()
        if running is not None:
            try:
                running.stop()
            except Exception as exc:   # a failed system's stop may fail too; report the first
                row["error"] = row["error"] or f"stopping failed: {exc}"
        if watch is not None:
            watch.close()
        if burst is not None:
            burst.close()
        kafka.delete_topics_of(name)
        remove_scratch(setup.work_dir)
    return row


class _RunFailed(Exception):
    """One bench run of one system failed: measured as a failed row with its reason, never
    raised past ``measure`` (a bench goes on with the other systems)."""


class _Burst:
    """The burst producer process (``burst.py``): loaded and connected while the system
    warms up, producing on ``go``."""

    def __init__(self, setup: Setup, inputs: list[InputRecord], rate: float | None) -> None:
        data = setup.work_dir / "burst.msgpack"
        where = setup.workload.partition
        data.write_bytes(msgpack.packb(
            [list(r) if where is None else [*r, where(r, setup.partitions)] for r in inputs],
            use_bin_type=True))
        self.log = setup.work_dir / "burst.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "eos_runtime.bench.burst", str(data),
             "--bootstrap-servers", setup.bootstrap, "--topic", setup.source,
             "--partitions", str(setup.partitions),
             *(["--rate", str(rate)] if rate else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log.open("w"), text=True)
        self.ready = False
        self.answer: str | None = None

    def _line(self) -> str | None:
        out = self.proc.stdout
        if out is not None and select.select([out], [], [], 0)[0]:
            return out.readline().strip()
        return None

    def is_ready(self) -> bool:
        if not self.ready:
            self.ready = self._line() == "ready"
        return self.ready

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    @property
    def error(self) -> str | None:
        if self.answer is None and self.proc.poll() is not None:
            self.answer = self._line() or ""
        if self.proc.poll() not in (None, 0):
            tail = self.log.read_text(errors="replace").strip().splitlines()[-2:]
            return f"{self.answer or ''} {' | '.join(tail)}".strip() or "it died"
        return None

    def done(self) -> bool:
        return self.proc.poll() is not None

    def finish(self) -> float:
        """The burst's seconds, once it is all delivered."""
        self.proc.wait(600)
        if self.error is not None:
            raise _RunFailed(f"producing the burst failed: {self.error}")
        answer = self.answer or ""
        return float(answer.split()[1]) if answer.startswith("done ") else 0.0

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _watch(watch: OutputWatch, running: Any, burst: _Burst, settings: Settings, say: Say,
           label: str, tick: Callable[[], None]) -> str | None:
    """Read output until the answer is complete; after ``idle_timeout`` s of nothing new,
    say why it is not (the run is then verified as far as it got)."""
    last_new = time.monotonic()
    next_say = time.monotonic() + settings.progress_every
    total = watch.missing
    while watch.missing:
        tick()
        if watch.poll(0.2):
            last_new = time.monotonic()
        if burst.error is not None:
            raise _RunFailed(f"producing the burst failed: {burst.error}")
        now = time.monotonic()
        if now >= next_say:
            next_say = now + settings.progress_every
            say(f"  {label}: {total - watch.missing:,} / {total:,} results")
        if now - last_new > (settings.idle_timeout or DEFAULT_IDLE_TIMEOUT):
            why = running.failure()
            return (f"incomplete: {watch.missing:,} of {total:,} results missing after "
                    f"{settings.idle_timeout:g} s without new output"
                    + (f"; the system died: {why}" if why else ""))
    return None


def _wait_out_steady_input(watch: OutputWatch, burst: _Burst, settings: Settings, say: Say,
                           label: str, tick: Callable[[], None], seconds: float) -> None:
    """Until a steady input has ended and the output's committed end has held still for
    two commit intervals (2 s at least), reading none of it: the cores are the system's
    while its latency is timed. Read along, the output of wordcount at 21 000 lines/s took
    the bench a third of a core."""
    went = time.monotonic()
    next_say = went + settings.progress_every
    while not burst.done():
        tick()
        time.sleep(0.05)
        now = time.monotonic()
        if now >= next_say:
            next_say = now + settings.progress_every
            say(f"  {label}: {min(now - went, seconds):.0f} of {seconds:.0f} s of steady input")
    if burst.error is not None:
        raise _RunFailed(f"producing the input failed: {burst.error}")
    quiet = max(2.0, 2 * settings.commit_interval)
    last, since = None, time.monotonic()
    give_up = since + (settings.idle_timeout or DEFAULT_IDLE_TIMEOUT)
    while time.monotonic() < give_up:
        ends = watch.ends()
        now = time.monotonic()
        if ends != last:
            last, since = ends, now
        elif now - since >= quiet:
            return
        time.sleep(0.2)


def _timing(row: dict[str, Any], first_ms: int, watch: OutputWatch,
            workload: BenchWorkload) -> None:
    if watch.complete_ms is None or watch.visible_ms is None:
        return
    # The end is when the answer became visible to a read_committed reader. The append
    # time of its last record alone would favour a system that writes into an open
    # transaction early and commits later: its records are appended before they count.
    end_ms = watch.visible_ms
    if end_ms < watch.complete_ms - 50:   # this host's clock is not the broker's
        end_ms = watch.complete_ms
        row["clock"] = "broker append time only (the bench's clock disagrees with the broker's)"
    seconds = max(end_ms - first_ms, 1) / 1000
    row["seconds"] = round(seconds, 3)
    row["append_seconds"] = round(max(watch.complete_ms - first_ms, 1) / 1000, 3)
    row["throughput"] = round(row["results_expected"] / seconds, 1)
    row["input_per_second"] = round(row["input_records"] / seconds, 1)


def _latency(row: dict[str, Any], kafka: BenchKafka, setup: Setup, steady: SteadyInput,
             watch: OutputWatch, clock: VisibilityClock, killed: list[int]) -> None:
    appended = kafka.append_times(setup.source, setup.partitions, set(steady.probes))
    probes = probe_latencies(steady.probes, appended, watch.records, clock.samples)
    row["rate"] = steady.rate
    row["probes"] = len(steady.probes)
    row["latency_ms"] = percentiles([p["visible_ms"] for p in probes])
    row["append_latency_ms"] = {k: v for k, v in percentiles(
        [p["append_ms"] for p in probes]).items() if k != "cdf"}
    if killed:
        row["recovery"] = recovery(probes, killed[0], setup.commit_interval)
