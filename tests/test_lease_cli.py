"""One driver per job, through the CLI: a run refused while another driver holds the job's
lease, a lease that expired taken, ``--take-over``. No timing: the other driver is a lease
record written into the job's control topic, live (a fresh heartbeat and an hour's
timeout) or long dead (a heartbeat two hours old)."""

from __future__ import annotations

import os
import re
import socket
import time
import uuid
from pathlib import Path

import pytest

from eos_runtime.joblog.control import ControlLog
from eos_runtime.protocol import wire
from eos_runtime.protocol.lease import FREE
from eos_runtime.transport import open_transport

from test_cli import WORDCOUNT, error_line, here, ok_here

HOUR_MS = 3_600_000


def other_driver(opts, job: str, *, run: int = 0, age_ms: int = 0,
                 timeout_ms: int = HOUR_MS) -> wire.Lease:
    """Write the lease of another driver of ``job`` (this test process stands in for it),
    whose last heartbeat was ``age_ms`` ago."""
    rec = wire.Lease(run, "acquire", uuid.uuid4().hex, os.getpid(), socket.gethostname(),
                     int(time.time() * 1000) - age_ms, timeout_ms)
    with open_transport(**opts) as t:
        log = ControlLog(t, job)
        log.create()
        log.append_lease(rec)
    return rec


def control(opts, job: str) -> tuple[list[wire.ControlRecord], str]:
    with open_transport(**opts) as t:
        log = ControlLog(t, job)
        return [r for _, r in log.records()], log.lease()[0]


def refusal_re(job: str, run: int) -> str:
    return (rf"^error: job '{job}' is running \(run {run}, started \d{{4}}-\d\d-\d\d "
            rf"\d\d:\d\d:\d\d by pid {os.getpid()} on host {re.escape(socket.gethostname())}, "
            rf"last heard from \d+ s ago\); wait for it, `eos stop {job}`, or take it over "
            rf"with --take-over$")


@pytest.fixture
def data(tmp_path) -> Path:
    d = tmp_path / "data"
    ok_here("produce", "lines", "--generate", "words", "--count", "300", "--data-dir", str(d))
    return d


def test_a_second_run_is_refused_while_a_live_driver_holds_the_lease(data):
    opts = {"data_dir": str(data)}
    other_driver(opts, "wordcount")
    p = here("run", WORDCOUNT, "--data-dir", str(data))
    assert re.match(refusal_re("wordcount", 0), error_line(p)), p.stderr
    records, status = control(opts, "wordcount")
    assert not any(isinstance(r, wire.RunStart) for r in records), "a run was recorded"
    assert status != FREE


def test_take_over_runs_asks_the_holder_to_stop_and_releases_at_the_end(data):
    opts = {"data_dir": str(data)}
    held = other_driver(opts, "wordcount", run=0)
    p = ok_here("run", WORDCOUNT, "--data-dir", str(data), "--take-over")
    assert p.stdout.startswith("wordcount run 0 (bounded): 300 input records"), p.stdout
    assert "warning: took job 'wordcount' over from run 0 (pid" in p.stderr, p.stderr
    records, status = control(opts, "wordcount")
    stops = [r for r in records if isinstance(r, wire.StopRequest)]
    assert [s.run for s in stops] == [held.run]
    assert stops[0].reason.startswith("taken over by run 0")
    assert status == FREE, "the run's lease was not released at its end"


def test_an_expired_lease_is_taken_with_a_warning(data):
    opts = {"data_dir": str(data)}
    other_driver(opts, "wordcount", age_ms=2 * HOUR_MS, timeout_ms=60_000)
    p = ok_here("run", WORDCOUNT, "--data-dir", str(data), "--lease-timeout", "30")
    assert p.stdout.startswith("wordcount run 0 (bounded): 300 input records"), p.stdout
    assert re.search(r"warning: job 'wordcount': run 0's driver \(pid \d+ on host .*\) was "
                     r"last heard from \d+ s ago, longer than its lease timeout; this run "
                     r"takes the job over", p.stderr), p.stderr
    records, status = control(opts, "wordcount")
    mine = [r for r in records if isinstance(r, wire.Lease) and r.action == "acquire"][-1]
    assert mine.timeout_ms == 30_000 and status == FREE


def dead_driver(opts, job: str, *, run: int = 0) -> wire.Lease:
    """The lease of a driver of ``job`` on this host that was killed (SIGKILL: nothing
    released), its acquire fresh and its timeout an hour: only its pid tells it is gone."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        rec = wire.Lease(run, "acquire", uuid.uuid4().hex, child.pid, socket.gethostname(),
                         int(time.time() * 1000), HOUR_MS)
        with open_transport(**opts) as t:
            log = ControlLog(t, job)
            log.create()
            log.append_lease(rec)
    finally:
        child.kill()
        child.wait()
    return rec


def test_a_lease_of_a_dead_driver_on_this_host_is_no_run_and_the_next_run_takes_it(data):
    """Issue 27 item 4: the lease of a killed `eos run` kept the job "running" for an hour
    (its timeout): `eos jobs` said running, `eos stop` said it asked and exited 0, the
    next run was refused naming a pid that this very host says is dead."""
    import json

    opts = {"data_dir": str(data)}
    dead = dead_driver(opts, "wordcount")
    text = ok_here("jobs", "--data-dir", str(data)).stdout
    assert "running:" not in text, text
    assert re.search(rf"^  driver gone: run 0, pid {dead.pid} on this host \(.*\) is no longer "
                     rf"running; the next run takes the job over$", text, re.M), text
    lease = json.loads(ok_here("jobs", "--json", "--data-dir", str(data)).stdout)[0]["lease"]
    assert (lease["status"], lease["pid"]) == ("dead", dead.pid)
    assert error_line(here("stop", "wordcount", "--data-dir", str(data))) == (
        f"error: job 'wordcount' has no live run (run 0's driver, pid {dead.pid} on this "
        f"host, is gone without releasing its lease): nothing to stop")
    p = ok_here("run", WORDCOUNT, "--data-dir", str(data))
    assert p.stdout.startswith("wordcount run 0 (bounded): 300 input records"), p.stdout
    assert (f"warning: job 'wordcount': run 0's driver (pid {dead.pid} on this host) is gone "
            f"without releasing its lease; this run takes the job over") in p.stderr, p.stderr
    records, status = control(opts, "wordcount")
    assert not any(isinstance(r, wire.StopRequest) for r in records), "asked a dead run to stop"
    assert status == FREE


def test_a_bad_lease_timeout_is_a_usage_error(data):
    p = here("run", WORDCOUNT, "--data-dir", str(data), "--lease-timeout", "0")
    assert p.returncode == 2 and "--lease-timeout" in p.stderr


@pytest.mark.kafka
def test_a_second_run_is_refused_on_kafka(kafka_bootstrap):
    tag = uuid.uuid4().hex[:8]
    job, source = f"lease-{tag}", f"lease-in-{tag}"
    kafka = ("--bootstrap-servers", kafka_bootstrap)
    ok_here("produce", source, "--generate", "words", "--count", "10", *kafka)
    other_driver({"bootstrap_servers": kafka_bootstrap}, job, run=0)
    p = here("run", WORDCOUNT, "--name", job, "--source", source, "--sink", f"lease-out-{tag}",
             *kafka)
    assert re.match(refusal_re(job, 0), error_line(p)), p.stderr


@pytest.mark.kafka
def test_on_kafka_a_lapsed_lease_is_taken_a_live_one_refuses_the_tools_and_take_over_takes_it(
        kafka_bootstrap, tmp_path):
    """The lease on Kafka, end to end with two small runs: a dead driver's lease is taken
    with a warning; while a live driver holds the job, the checkpoint tool (show, write)
    and Startpoint writes (CLI and Python) are refused naming its run; --take-over runs
    anyway, asks that run to stop and releases at its end."""
    from eos_runtime.errors import JobRunning
    from eos_runtime.joblog.startpoints import Startpoint, clear_startpoints, set_startpoint

    tag = uuid.uuid4().hex[:8]
    job, source, sink = f"klease-{tag}", f"klease-in-{tag}", f"klease-out-{tag}"
    k = ("--bootstrap-servers", kafka_bootstrap)
    named = ("--name", job, "--source", source, "--sink", sink)
    opts = {"bootstrap_servers": kafka_bootstrap}
    ok_here("produce", source, "--generate", "words", "--count", "10", *k)

    other_driver(opts, job, age_ms=2 * HOUR_MS, timeout_ms=60_000)
    p = ok_here("run", WORDCOUNT, *named, "--lease-timeout", "30", *k)
    assert p.stdout.startswith(f"{job} run 0 (bounded): 10 input records"), p.stdout
    assert re.search(rf"warning: job '{job}': run 0's driver \(pid \d+ on host .*\) was last "
                     rf"heard from \d+ s ago, longer than its lease timeout; this run takes "
                     rf"the job over", p.stderr), p.stderr
    assert control(opts, job)[1] == FREE

    held = other_driver(opts, job, run=5)
    key0 = f"tasknames.task-0.systems.kafka.streams.{source}.partitions.0"
    edited = tmp_path / "edited.properties"
    edited.write_text(f"{key0}=0\n")
    running = (rf"^error: job '{job}' is running \(run 5, started .* by pid {os.getpid()} on "
               rf"host .*\): ")
    stopped = rf" only while the job is stopped; wait for the run to end or `eos stop {job}` first$"
    for args, what in ((("checkpoint", "show", job), "the checkpoint tool shows positions"),
                       (("checkpoint", "write", job, str(edited)),
                        "the checkpoint tool writes positions"),
                       (("startpoint", "set", job, source, "0", "--oldest"),
                        "Startpoints can be set"),
                       (("startpoint", "clear", job), "Startpoints can be cleared")):
        line = error_line(here(*args, *k))
        assert re.match(running + what + stopped, line), (args, line)
    with pytest.raises(JobRunning, match="Startpoints can be set only while"):
        set_startpoint(job, source, 0, Startpoint.oldest(), **opts)
    with pytest.raises(JobRunning, match="Startpoints can be cleared only while"):
        clear_startpoints(job, **opts)
    assert ok_here("startpoint", "list", job, *k).stdout.startswith("no startpoints")

    p = ok_here("run", WORDCOUNT, *named, "--take-over", *k)
    assert p.stdout.startswith(f"{job} run 1 (bounded): no new input records"), p.stdout
    assert f"warning: took job '{job}' over from run 5 (pid" in p.stderr, p.stderr
    records, status = control(opts, job)
    stops = [r for r in records if isinstance(r, wire.StopRequest)]
    assert [s.run for s in stops] == [held.run] and status == FREE


@pytest.mark.parametrize("kind", ["local", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_the_change_log_manager_refuses_to_write_while_a_run_holds_the_job(kind, tmp_path,
                                                                           request):
    from eos_runtime.errors import JobRunning
    from eos_runtime.joblog.checkpoints import ChangeLogCheckpoints, Checkpoint

    opts = ({"data_dir": str(tmp_path / "data")} if kind == "local"
            else {"bootstrap_servers": request.getfixturevalue("kafka_bootstrap")})
    job = f"held-{uuid.uuid4().hex[:6]}"
    other_driver(opts, job, run=2)
    with open_transport(**opts) as t:
        m = ChangeLogCheckpoints(t, job)
        m.start()
        m.register(0)
        with pytest.raises(JobRunning, match=rf"job '{job}' is running \(run 2, .*checkpoints "
                                             r"can be written only while the job is stopped"):
            m.write_checkpoint(0, Checkpoint({("in", 0): 0}))


def test_eos_jobs_shows_who_holds_the_lease(tmp_path):
    import json

    data = tmp_path / "data"
    other_driver({"data_dir": str(data)}, "wordcount", run=4)
    jobs = json.loads(ok_here("jobs", "--json", "--data-dir", str(data)).stdout)
    lease = jobs[0]["lease"]
    assert (lease["status"], lease["run"], lease["pid"]) == ("held", 4, os.getpid())
    text = ok_here("jobs", "--data-dir", str(data)).stdout
    assert re.search(rf"^  running: run 4, driver pid {os.getpid()} on host .*, last heard from "
                     rf"\d+ s ago$", text, re.M), text


def test_a_keepers_heartbeat_moves_the_expiry_and_close_releases(tmp_path):
    from eos_runtime.joblog.control import LeaseRequest
    from eos_runtime.joblog.live_run import LeaseKeeper
    from eos_runtime.protocol.lease import HELD

    opts = {"data_dir": str(tmp_path / "data")}
    with open_transport(**opts) as t:
        log = ControlLog(t, "beat")
        log.create()
        lease = LeaseRequest(timeout=3600.0)
        log._acquire(lease, 0)
        keeper = LeaseKeeper(opts, "beat", 0, lease)   # beats every 10 s: not in this test
        _, holder, first = log.lease()
        assert holder is not None and holder.owner == lease.owner
        keeper.renew(t)
        status, _, last = log.lease()
        assert status == HELD and last >= first
        assert log.lease(last + 3_600_001)[0] == "expired"
        keeper.close()
        assert log.lease()[0] == FREE
        actions = [r.action for r in log.leases()]
        assert actions == ["acquire", "release"]       # heartbeats have their own topic
        assert [r.action for r in log.heartbeats()] == ["renew"]


def test_a_task_of_a_run_taken_over_stops_before_it_recovers(tmp_path):
    """A retry of an old run's task after --take-over must not register a generation: it
    would fence the new run's task (and that one's retry it, back and forth)."""
    from eos_runtime import Pipeline
    from eos_runtime.errors import JobRunning
    from eos_runtime.plan import plan_job
    from eos_runtime.runner import create_job_topics, task_configs
    from eos_runtime.runtime.task import run_task
    from eos_runtime.transport import TopicPartition, TopicSpec

    opts = {"data_dir": str(tmp_path / "data")}
    p = Pipeline("old")
    p.source("in").map(str.upper).sink("out")
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec("in", 1)])
        plan = plan_job(p, t)
        create_job_topics(t, plan)
        log = ControlLog(t, "old")
        log.start_run(plan, bounded=True)          # run 0 ...
        log.start_run(plan, bounded=True)          # ... taken over by run 1
        config = task_configs(plan, t, opts, str(tmp_path / "state"), run=0)[0]
        with pytest.raises(JobRunning, match="task 0 of run 0 of job 'old' stops: run 1 took "
                                             "the job over"):
            run_task(config)
        assert t.watermarks(TopicPartition("old.changelog", 0)) == (0, 0), \
            "the old run's task registered a generation"


def test_lease_and_run_queries_read_few_records_however_many_heartbeats(tmp_path):
    """A job that ran for a day beats ~8600 times: each task's start, the lease check and
    `eos jobs` must not read them all. Counted in records read, not time."""
    from eos_runtime.joblog.control import LeaseRequest, heartbeat_topic
    from eos_runtime.joblog.live_run import LeaseKeeper
    from eos_runtime.protocol.lease import HELD

    opts = {"data_dir": str(tmp_path / "data")}
    with open_transport(**opts) as t:
        log = ControlLog(t, "busy")
        log.create()
        old, new = LeaseRequest(timeout=3600.0), LeaseRequest(timeout=3600.0)
        log._acquire(old, 0)
        log._append(wire.RunStart(0, int(time.time() * 1000), False, ("guarantee x",)))
        now = int(time.time() * 1000)
        with t.producer() as p:
            for i in range(6000):      # run 0's driver beats, then run 1's, both at once
                owner, run = (old.owner, 0) if i < 4000 or i % 2 else (new.owner, 1)
                if i == 4000:
                    p.flush()
                    log._acquire(LeaseRequest(timeout=3600.0, take_over=True, owner=new.owner),
                                 1)
                    log._append(wire.RunStart(1, now, False, ("guarantee x",)))
                p.produce(heartbeat_topic("busy"), 0, wire.encode(wire.Lease(
                    run, "renew", owner, os.getpid(), socket.gethostname(), now + i, 3_600_000)),
                    key=owner.encode())
            p.flush()
        LeaseKeeper(opts, "busy", 1, new).renew(t)    # the keeper's way: not the control topic
        assert not [r for r in log.leases() if r.action == "renew"]

        for query in (lambda q: q.last_run(), lambda q: q.lease(), lambda q: q.runs(),
                      lambda q: q.refuse_if_superseded(1, 0)):
            q = ControlLog(t, "busy")
            query(q)
            assert q.records_read <= 100, q.records_read
        q = ControlLog(t, "busy")
        last = q.last_run()
        assert last is not None and last.start.run == 1
        status, holder, last_ms = q.lease()
        assert (status, holder.owner if holder else None) == (HELD, new.owner)
        assert last_ms >= now + 5998                    # its latest heartbeat counts
        assert [r.start.run for r in q.runs()] == [0, 1]
        assert len(q.heartbeats()) == 6001


def test_a_holder_without_heartbeats_is_found_without_reading_older_ones(tmp_path):
    from eos_runtime.joblog.control import LeaseRequest, heartbeat_topic

    opts = {"data_dir": str(tmp_path / "data")}
    with open_transport(**opts) as t:
        log = ControlLog(t, "quiet")
        log.create()
        long_ago = int(time.time() * 1000) - 2 * HOUR_MS
        with t.producer() as p:
            for i in range(5000):      # an earlier run's heartbeats, two hours old
                p.produce(heartbeat_topic("quiet"), 0, wire.encode(wire.Lease(
                    0, "renew", "gone", 1, "h", long_ago + i, 60_000)), key=b"gone")
            p.flush()
        lease = LeaseRequest(timeout=3600.0)
        log._acquire(lease, 1)          # and no heartbeat yet
        q = ControlLog(t, "quiet")
        status, holder, _ = q.lease()
        assert status == "held" and holder is not None and holder.owner == lease.owner
        assert q.records_read <= 100, q.records_read


# --------------------------------------------------------------------------- eos stop: which run

def _upper(opts, job: str):
    """A one-stage job's plan, its input topic made."""
    from eos_runtime import Pipeline
    from eos_runtime.plan import plan_job
    from eos_runtime.transport import TopicSpec

    p = Pipeline(job)
    p.source("in").map(str.upper).sink("out")
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec("in", 1)])
        return plan_job(p, t)


def test_a_stop_before_a_runs_start_record_stops_that_run_and_none_is_no_live_run(tmp_path):
    """Issue 22, found by reading: `eos stop` between a new run's lease acquire and its
    start record named the previous run (the latest start record), and the new run went
    on. A stop names the run holding the lease; that run's sources see it although it
    came before their start record. With no live run, stop says so and appends nothing."""
    from eos_runtime.joblog.control import LeaseRequest
    from eos_runtime.joblog.live_run import StopWatcher

    data = tmp_path / "data"
    opts = {"data_dir": str(data)}
    plan = _upper(opts, "st")
    with open_transport(**opts) as t:
        ControlLog(t, "st").start_run(plan, bounded=True)          # run 0, over
        before = ControlLog(t, "st").records()
    line = error_line(here("stop", "st", "--data-dir", str(data)))
    assert line.startswith("error: job 'st' has no live run"), line
    with open_transport(**opts) as t:
        assert ControlLog(t, "st").records() == before              # nothing appended

    said = []

    class Racing(ControlLog):
        def _acquire(self, lease, run):
            acquired = super()._acquire(lease, run)
            said.append(ok_here("stop", "st", "--data-dir", str(data)).stdout)   # lands here
            return acquired

    with open_transport(**opts) as t:
        info = Racing(t, "st").start_run(plan, bounded=False, lease=LeaseRequest())
        assert info.start.run == 1
        assert said == [f"asked run 1 of job 'st' on the local log in {data} to stop\n"]
        watcher = StopWatcher(t, "st", 1, info.offset)    # where its sources watch from
        try:
            assert watcher.requested()
        finally:
            watcher.close()
        runs = ControlLog(t, "st").runs()
    assert [(r.start.run, r.stopped is not None) for r in runs] == [(0, False), (1, True)]


def test_a_drivers_own_stop_names_its_run_after_a_take_over(tmp_path):
    """Ctrl-C on a driver whose run was taken over must not stop the run that took it."""
    from eos_runtime.joblog.control import LeaseRequest
    from eos_runtime.runner import PipelineRun

    opts = {"data_dir": str(tmp_path / "data")}
    plan = _upper(opts, "to")
    with open_transport(**opts) as t:
        old = ControlLog(t, "to").start_run(plan, bounded=False, lease=LeaseRequest())
        ControlLog(t, "to").start_run(plan, bounded=False,
                                      lease=LeaseRequest(take_over=True))       # run 1
        run = PipelineRun.__new__(PipelineRun)    # only what stop() uses of a run
        run.t, run.plan, run.info, run.stop_requested = t, plan, old, None
        run.stop("interrupted (Ctrl-C)")
        runs = ControlLog(t, "to").runs()
    assert runs[1].stopped is None, runs[1].stopped
    assert runs[0].stopped is not None
