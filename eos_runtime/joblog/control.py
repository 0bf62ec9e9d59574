"""A job's control topic, ``<job>.control`` (one partition, kept forever).

The driver appends a ``RunStart`` when it starts a run: the record numbers the run
(``protocol/runs.py``) and stores the job's layout (``layout.py``), so a later run of a
changed job is refused before anything starts. ``eos stop``, or Ctrl-C on the driver,
appends a ``StopRequest``; source tasks watch the topic from their run's start record
(``StopWatcher``, ``live_run.py``) and end the run with a final checkpoint when one names
their run. ``eos stop`` names the run holding the lease (none: it refuses), which may not
have recorded its start yet: its driver then repeats the request after its start record
(``start_run``).

One driver per job: before its ``RunStart`` a driver appends a ``Lease`` acquire and reads
the log back to learn whether it won (``protocol/lease.py`` decides); ``LeaseKeeper``
(``live_run.py``) renews it from a thread while the run goes on and releases it at the
end. The checkpoint tool and Startpoint writes refuse while the lease is held
(``ControlLog.refuse_if_running``).

Heartbeats (``renew``) go to their own topic, ``<job>.heartbeats``, not to the control
topic: a running job writes one every few seconds, and every reader of the control topic
(each task's start, the lease check, ``eos jobs``) would otherwise read all of them. The
control topic then grows by a few records per run, and a lease check reads the heartbeat
topic backwards from its end only until the holder's latest heartbeat. Acquires stay in
the control topic, in one order with the runs: a driver appends one only after its check
with the heartbeats found the lease free or lapsed, so the fold over the control topic
alone (where a holder's last record is its acquire) decides races exactly as before.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace

from .. import clock
from ..errors import ConfigError, JobRunning, TopicNotFound, WireFormatError
from ..plan import JobPlan
from ..processes import process_gone
from ..protocol import wire
from ..protocol.lease import DEAD, EXPIRED, FREE, HELD, LeaseState, fold_lease, release_for
from ..protocol.runs import MAX_RUN
from ..transport import Record, TopicPartition, TopicSpec, Transport
from .layout import (
    job_layout,
    layout_changes,
    layout_guarantee,
    layout_sinks,
    layout_stages,
    layouts_differ,
)
from .tail import backwards, read_range

__all__ = ["DEFAULT_LEASE_TIMEOUT", "ControlLog", "JobScan", "LeaseRequest", "RunInfo",
           "control_topic", "fold_runs", "heartbeat_topic", "jobs_on", "jobs_with_sink",
           "scan_jobs"]

log = logging.getLogger(__name__)

#: Seconds after a driver's last heartbeat before its lease lapses. A driver renews every
#: third of it (at most every 10 s), so a lease survives two lost heartbeats; a minute
#: also keeps clock skew between hosts (milliseconds under NTP) irrelevant.
DEFAULT_LEASE_TIMEOUT = 60.0


def control_topic(job: str) -> str:
    return f"{job}.control"


def heartbeat_topic(job: str) -> str:
    return f"{job}.heartbeats"


#: Records of the first window read backwards from a topic's end; each next window is
#: twice as large, so finding a record n back reads at most about 2n + this.
FIRST_WINDOW = 32

#: How far a heartbeat's clock may run behind its holder's acquire (other drivers' hosts)
#: before a backwards search for the holder's heartbeats stops: older ones cannot be the
#: holder's (a driver beats only after its acquire).
CLOCK_MARGIN_MS = 60_000


@dataclass(frozen=True)
class JobScan:
    """What ``scan_jobs`` found: each job with its last run (None: its control topic
    holds only lease records, a driver that stopped before its run's start record), and
    each topic named like a control topic that is no job's, with why."""

    jobs: dict[str, RunInfo | None]
    not_jobs: dict[str, str]


def scan_jobs(transport: Transport) -> JobScan:
    """The jobs on ``transport``, known by their records: a topic ``<job>.control`` is a
    job's control topic when it holds records and those read back to its last run's start
    (all of them, without a run) are control records. A user's topic that only shares the
    name (text, JSON, nothing at all) is skipped, never an error."""
    suffix = control_topic("")
    jobs: dict[str, RunInfo | None] = {}
    not_jobs: dict[str, str] = {}
    for topic in sorted(transport.list_topics()):
        if not topic.endswith(suffix) or len(topic) == len(suffix):
            continue
        log = ControlLog(transport, topic[:-len(suffix)])
        try:
            last = log.last_run()
        except WireFormatError as exc:
            not_jobs[topic] = f"it holds other records ({exc})"
            continue
        if last is None and log.records_read == 0:
            not_jobs[topic] = "it holds no records"
            continue
        jobs[log.job] = last
    return JobScan(jobs, not_jobs)


def jobs_on(transport: Transport) -> list[str]:
    """The jobs on ``transport`` (``scan_jobs``), by name."""
    return sorted(scan_jobs(transport).jobs)


def jobs_with_sink(transport: Transport, topic: str) -> list[str]:
    """The jobs whose last run's layout has ``topic`` as a sink."""
    found = []
    for job, last in scan_jobs(transport).jobs.items():
        stages = layout_stages(last.start.layout) if last is not None else []
        if topic in layout_sinks(stages):
            found.append(job)
    return found


@dataclass(frozen=True)
class RunInfo:
    start: wire.RunStart
    offset: int                    # of the RunStart record: where its stop watchers read from
    stopped: wire.StopRequest | None = None
    ended: wire.RunEnd | None = None   # how it ended, as its driver recorded (none: killed)


class ControlLog:
    """Read and append a job's control records. ``records_read`` counts the records this
    object read, so tests can bound what a query costs."""

    def __init__(self, transport: Transport, job: str) -> None:
        self.t = transport
        self.job = job
        self.tp = TopicPartition(control_topic(job), 0)
        self.beats = TopicPartition(heartbeat_topic(job), 0)
        self.records_read = 0

    def exists(self) -> bool:
        try:
            self.t.describe(self.tp.topic)
            return True
        except TopicNotFound:
            return False

    def create(self) -> None:
        # Heartbeats only matter for a lease timeout after they were written: the topic is
        # compacted by driver (Kafka keeps each driver's latest) and needs no keep-forever.
        self.t.create_topics([TopicSpec(self.tp.topic, 1, keep_forever=True),
                              TopicSpec(self.beats.topic, 1, compacted=True)])

    def _read(self, tp: TopicPartition, start: int, end: int) -> list[Record]:
        """The records of ``tp`` at offsets ``start``..``end - 1``, oldest first."""
        out = read_range(self.t, tp, start, end)
        self.records_read += len(out)
        return out

    def _backwards(self, tp: TopicPartition) -> Iterator[list[Record]]:
        """Windows of ``tp``'s records from its end towards its start (``tail.backwards``)."""
        for window in backwards(self.t, tp, first=FIRST_WINDOW):
            self.records_read += len(window)
            yield window

    def _decode(self, r: Record) -> wire.ControlRecord:
        return wire.decode_control(r.value, topic=r.topic, partition=r.partition,
                                   offset=r.offset)

    def records(self) -> list[tuple[int, wire.ControlRecord]]:
        """Every control record with its offset, oldest first (heartbeats are apart)."""
        if not self.exists():
            return []
        low, high = self.t.watermarks(self.tp, read_committed=False)
        return [(r.offset, self._decode(r)) for r in self._read(self.tp, low, high)]

    def runs(self) -> list[RunInfo]:
        """Every run of the job, oldest first, each with its stop request if it had one."""
        return fold_runs(self.records())

    def last_run(self) -> RunInfo | None:
        """The latest run and whether a stop was asked for it: read backwards from the
        topic's end only as far as the latest run's start."""
        newer: list[tuple[int, wire.ControlRecord]] = []
        for window in self._backwards(self.tp):
            newer = [(r.offset, self._decode(r)) for r in window] + newer
            runs = fold_runs(newer)
            if runs:
                return runs[-1]
        return None

    def latest_run(self) -> int | None:
        """The number of the job's newest run (None: it never ran)."""
        last = self.last_run()
        return None if last is None else last.start.run

    def refuse_if_superseded(self, run: int, task: int) -> None:
        """A task of run ``run`` started (or retried) after a newer run of the job began (a
        ``--take-over``): ``JobRunning`` before it recovers. Recovering would register a new
        generation and fence the newer run's task, whose retry would fence it back."""
        newer = self.latest_run()
        if newer is not None and newer > run:
            raise JobRunning(f"task {task} of run {run} of job {self.job!r} stops: run {newer} "
                             f"took the job over")

    def guarantee(self) -> str | None:
        """The job's processing guarantee, from its last run's layout (None: it never ran
        on this transport). A run with another guarantee is refused, so the last run's is
        the job's."""
        last = self.last_run()
        return None if last is None else layout_guarantee(last.start.layout)

    def leases(self) -> list[wire.Lease]:
        """The control topic's lease records (acquires and releases; older jobs' renews)."""
        return [rec for _, rec in self.records() if isinstance(rec, wire.Lease)]

    def heartbeats(self) -> list[wire.Lease]:
        """Every heartbeat in ``<job>.heartbeats``, oldest first (tests, diagnosis)."""
        out: list[wire.Lease] = []
        for window in self._backwards(self.beats):
            out = [rec for rec in map(self._decode, window) if isinstance(rec, wire.Lease)] + out
        return out

    def _last_heartbeat(self, holder: wire.Lease) -> int | None:
        """The time of ``holder``'s latest heartbeat: the heartbeat topic read backwards
        until one of the holder's, or until heartbeats older than its acquire (less the
        clock margin), which cannot be its own."""
        for window in self._backwards(self.beats):
            beats = [rec for rec in map(self._decode, window) if isinstance(rec, wire.Lease)]
            mine = [b.at_ms for b in beats if b.owner == holder.owner and b.run == holder.run]
            if mine:
                return max(mine)
            if beats and beats[0].at_ms < holder.at_ms - CLOCK_MARGIN_MS:
                return None
        return None

    def lease(self, now_ms: int | None = None) -> tuple[str, wire.Lease | None, int]:
        """``(free | held | expired | dead, the acquire holding it, its last record's ms)``."""
        state = fold_lease(self.leases())
        if state.holder is not None and not state.released:
            beat = self._last_heartbeat(state.holder)
            if beat is not None and beat > state.last_ms:
                state = LeaseState(state.holder, beat, False)
        now = clock.stamp_ms() if now_ms is None else now_ms
        status = state.status(now)
        holder = state.holder
        if status == HELD and holder is not None and holder.host == socket.gethostname() \
                and process_gone(holder.pid, holder.at_ms):
            status = state.status(now, gone=True)
        return status, holder, state.last_ms

    def running_text(self, holder: wire.Lease, last_ms: int, now_ms: int | None = None) -> str:
        now = clock.stamp_ms() if now_ms is None else now_ms
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.at_ms / 1000))
        return (f"job {self.job!r} is running (run {holder.run}, started {started} by pid "
                f"{holder.pid} on host {holder.host}, last heard from "
                f"{max(now - last_ms, 0) / 1000:.0f} s ago)")

    def refuse_if_running(self, what: str) -> None:
        """``JobRunning`` naming the run while a driver holds the job's lease: ``what``
        (the checkpoint tool, a Startpoint write) must not change a running job's
        positions behind its tasks' backs."""
        status, holder, last_ms = self.lease()
        if status == HELD and holder is not None:
            raise JobRunning(f"{self.running_text(holder, last_ms)}: {what} only while the "
                             f"job is stopped; wait for the run to end or `eos stop "
                             f"{self.job}` first")

    def check_layout(self, plan: JobPlan) -> RunInfo | None:
        """Refuse ``plan`` for a job whose last run had another layout, naming what
        changed; returns that run (None: the job never ran). Before anything else about
        the run is checked: a changed layout explains the rest (a partition then without
        a checkpoint, say)."""
        try:
            last = self.last_run()
        except TopicNotFound:
            return None
        layout = job_layout(plan)
        if last is not None and layouts_differ(last.start.layout, layout):
            was = "\n    ".join(last.start.layout)
            now = "\n    ".join(layout)
            raise ConfigError(
                f"job {self.job!r} ran before (run {last.start.run}) with another layout: "
                f"{layout_changes(last.start.layout, layout)}\n"
                f"was:\n    {was}\nnow:\n    {now}\nits checkpoints are per task and channel, so "
                f"parallelism, stages, stores, topics, guarantee and checkpoint store (with "
                f"its job id) cannot change between runs; "
                f"run it under a new name (eos run --name NEW) or start the job afresh "
                f"(eos reset {self.job})")
        return last

    def start_run(self, plan: JobPlan, *, bounded: bool,
                  lease: LeaseRequest | None = None) -> RunInfo:
        """Append the next run's start record; refuse a job whose layout changed, or one
        whose lease another driver holds. With ``lease``, take the lease first (and
        check, by reading the log back, that this driver won it)."""
        self.create()
        if lease is None:
            status, holder, last_ms = self.lease()
            if status == HELD and holder is not None:
                raise JobRunning(f"{self.running_text(holder, last_ms)}; wait for it or "
                                 f"`eos stop {self.job}`")
        last = self.check_layout(plan)
        layout = job_layout(plan)
        run = 0 if last is None else last.start.run + 1
        if run > MAX_RUN:
            raise ConfigError(f"job {self.job!r} used up its {MAX_RUN + 1} runs")
        acquired = self._acquire(lease, run) if lease is not None else None
        start = wire.RunStart(run, clock.stamp_ms(), bounded, layout)
        offset = self._append(start)
        early = None if acquired is None else self._early_stop(run, *acquired, offset)
        if early is not None:
            # `eos stop` named this run from its lease, before its start record; the
            # sources watch from the start record on, so the request is made again there.
            self._append(early)
        return RunInfo(start, offset, early)

    def _early_stop(self, run: int, acquire: int, own: int | None,
                    start: int) -> wire.StopRequest | None:
        """A stop request naming ``run`` between its lease acquire and its start record,
        other than this driver's own (``own``: its take-over's, which may name the same
        number when the holder it took over had not recorded its start)."""
        for r in self._read(self.tp, acquire + 1, start):
            rec = self._decode(r)
            if isinstance(rec, wire.StopRequest) and rec.run == run and r.offset != own:
                return rec
        return None

    def _acquire(self, lease: LeaseRequest, run: int) -> tuple[int, int | None]:
        """Take the lease for ``run``: the offsets of the acquire and of the stop request
        asking the holder it took over to stop (None: none)."""
        now = clock.stamp_ms()
        status, holder, last_ms = self.lease(now)
        if status == HELD and holder is not None and not lease.take_over:
            raise JobRunning(f"{self.running_text(holder, last_ms, now)}; wait for it, "
                             f"`eos stop {self.job}`, or take it over with --take-over")
        if status == DEAD and holder is not None:
            self._append(release_for(holder, now, pid=os.getpid(), host=socket.gethostname()))
        mine = wire.Lease(run, "acquire", lease.owner, os.getpid(), socket.gethostname(), now,
                          int(lease.timeout * 1000), lease.take_over)
        acquired = self._append(mine)
        # Two drivers may both have seen the lease free: the first acquire in the log wins (L1).
        _, won, won_ms = self.lease()
        if won != mine:
            assert won is not None
            raise JobRunning(f"{self.running_text(won, won_ms)}: it started at the same time "
                             f"as this one and took the lease first")
        if holder is not None and status == HELD:
            log.warning("took job %r over from run %d (pid %d on host %s); asked that run to "
                        "stop", self.job, holder.run, holder.pid, holder.host)
            return acquired, self._append(wire.StopRequest(
                holder.run, now, f"taken over by run {run} (pid {os.getpid()})"))
        if holder is not None and status == DEAD:
            log.warning("job %r: %s; this run takes the job over", self.job, _gone_text(holder))
        if holder is not None and status == EXPIRED:
            log.warning("job %r: run %d's driver (pid %d on host %s) was last heard from %.0f s "
                        "ago, longer than its lease timeout; this run takes the job over",
                        self.job, holder.run, holder.pid, holder.host, (now - last_ms) / 1000)
        return acquired, None

    def record_end(self, end: wire.RunEnd) -> None:
        """How a run ended (its driver, as the run ends: ``LeaseKeeper.close``)."""
        self._append(end)

    def append_lease(self, record: wire.Lease, *, make_topic: bool = True) -> None:
        """A lease record; a renewal to the heartbeat topic (made first, unless the caller
        knows it is there: ``make_topic``), the others to the control topic."""
        if record.action == "renew":
            if make_topic:
                self.t.create_topics([TopicSpec(self.beats.topic, 1, compacted=True)])
            with self.t.producer() as p:
                p.produce(self.beats.topic, 0, wire.encode(record), key=record.owner.encode())
                p.flush()
        else:
            self._append(record)

    def request_stop(self, reason: str, run: int | None = None,
                     ) -> tuple[wire.StopRequest, wire.StopRequest | None]:
        """Ask run ``run`` to stop gracefully (None: the live run, the one holding the
        job's lease, which may not have recorded its start yet); returns the request and
        the run's earlier one, if it had been asked before. ``ConfigError`` when no run
        is live: a stop must never wait in the log for a run that starts later, nor go
        to a run that is over."""
        records = self.records()
        target = self.live_run(records) if run is None else run
        # This run's records begin at its lease acquire (an earlier attempt at the same
        # run number, a driver that failed before its start, has its own).
        begin = max((o for o, rec in records if isinstance(rec, wire.Lease)
                     and rec.action == "acquire" and rec.run == target), default=-1)
        earlier = next((rec for o, rec in records if o > begin
                        and isinstance(rec, wire.StopRequest) and rec.run == target), None)
        stop = wire.StopRequest(target, clock.stamp_ms(), reason)
        self._append(stop)
        return stop, earlier

    def live_run(self, records: list[tuple[int, wire.ControlRecord]] | None = None) -> int:
        """The number of the run holding the job's lease; ``ConfigError`` saying why there
        is none (the job never ran, its last run's driver ended, or it stopped renewing)."""
        try:
            records = self.records() if records is None else records
        except WireFormatError:     # a user's topic of that name: no job
            records = []
        runs = fold_runs(records)
        status, holder, last_ms = self.lease() if records else (FREE, None, 0)
        if status == HELD and holder is not None:
            return holder.run
        if not runs and holder is None:
            raise ConfigError(f"job {self.job!r} has never run on this transport: nothing to stop")
        if status == DEAD and holder is not None:
            why = (f"run {holder.run}'s driver, pid {holder.pid} on this host, is gone "
                   f"without releasing its lease")
        elif status == EXPIRED and holder is not None:
            why = (f"run {holder.run}'s driver (pid {holder.pid} on host {holder.host}) was "
                   f"last heard from {max(clock.stamp_ms() - last_ms, 0) / 1000:.0f} s ago, "
                   f"longer than its lease timeout")
        else:
            why = (f"no driver holds its lease; its last run was run {runs[-1].start.run}"
                   if runs else "no driver holds its lease")
        raise ConfigError(f"job {self.job!r} has no live run ({why}): nothing to stop")

    def _append(self, record: wire.ControlRecord) -> int:
        with self.t.producer() as p:
            p.produce(self.tp.topic, 0, wire.encode(record))
            return p.flush()[self.tp]


def _gone_text(holder: wire.Lease) -> str:
    return (f"run {holder.run}'s driver (pid {holder.pid} on this host) is gone without "
            f"releasing its lease")


def fold_runs(records: list[tuple[int, wire.ControlRecord]]) -> list[RunInfo]:
    """The runs in ``records`` (control records with offsets, oldest first), each with the
    first stop request naming it and the record of how it ended."""
    runs: list[RunInfo] = []
    for offset, rec in records:
        if isinstance(rec, wire.RunStart):
            runs.append(RunInfo(rec, offset))
        elif isinstance(rec, wire.StopRequest) and runs and rec.run == runs[-1].start.run \
                and runs[-1].stopped is None:
            runs[-1] = replace(runs[-1], stopped=rec)
        elif isinstance(rec, wire.RunEnd) and runs and rec.run == runs[-1].start.run \
                and runs[-1].ended is None:
            runs[-1] = replace(runs[-1], ended=rec)
    return runs


# Here, not beside LeaseKeeper in live_run.py: start_run takes it, and live_run.py
# imports this module.
@dataclass(frozen=True)
class LeaseRequest:
    """What a driver asks for: ``timeout`` seconds without a heartbeat before its lease
    lapses; ``take_over`` from a live holder. ``owner`` tells this driver's records apart."""

    timeout: float = DEFAULT_LEASE_TIMEOUT
    take_over: bool = False
    owner: str = ""

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ConfigError(f"lease timeout {self.timeout!r}: give a number of seconds > 0")
        if not self.owner:
            object.__setattr__(self, "owner", uuid.uuid4().hex)
