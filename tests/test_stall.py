"""The engine gives up on a job that cannot make progress (engine/stall.py, S1-S3): the
rule driven directly with numbers for time, then on a real Spark standalone master
whose worker is gone (and one whose worker is too small), where Spark alone would wait
forever. No wall-clock asserts: the cluster tests only check the error."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from eos_runtime.engine import EngineConfig, TaskAttempt, start_tasks
from eos_runtime.engine.stall import StallWatch, check_timeout
from eos_runtime.errors import ConfigError, JobStalled


def test_short_for_the_whole_timeout_stalls_and_any_full_look_resets_the_clock():
    w = StallWatch(10.0)
    assert w.observe(0.0, 4, 0, 0) is None          # short from 0 (S1)
    assert w.observe(9.9, 4, 3, 0) is None
    assert w.observe(10.0, 4, 3, 0) == 10.0         # S2
    assert w.observe(11.0, 4, 4, 0) is None         # every task runs: the clock resets
    assert w.observe(12.0, 4, 2, 2) is None         # two finished, two running: not short
    assert w.observe(13.0, 4, 1, 2) is None         # a retry waiting for its slot ...
    assert w.observe(14.0, 4, 2, 2) is None         # ... got it: a break
    assert w.observe(23.9, 4, 1, 2) is None
    assert w.observe(100.0, 4, 0, 4) is None        # finished is never short (S3)


def test_the_timeout_takes_seconds_or_none():
    assert check_timeout(None) is None and check_timeout(0) is None
    assert check_timeout(5) == 5.0
    for bad in (-1, True, "5"):
        with pytest.raises(ValueError, match="no-progress timeout"):
            check_timeout(bad)
    with pytest.raises(ConfigError, match="no-progress timeout -1"):
        start_tasks(_forever, [b""], EngineConfig(no_progress_timeout=-1))


def _forever(t: TaskAttempt) -> bytes:
    time.sleep(3600)   # the job is cancelled long before
    return b""


TESTS = Path(__file__).resolve().parent


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_job_on_a_cluster_that_cannot_run_its_tasks_fails_with_a_clear_error(tmp_path):
    from eos_runtime.engine.standalone import StandaloneCluster

    config = dict(max_attempts=1, no_progress_timeout=3, env={"PYTHONPATH": str(TESTS)})
    with StandaloneCluster(tmp_path / "spark", cores=1, startup_timeout=120) as cluster:
        # One core for two long-running tasks: one runs, the other never gets a slot. On a
        # busy machine the executor may take longer than the timeout to start the first
        # one too; then both count as stalled, which is as right (the rule test above pins
        # the counting).
        job = start_tasks(_forever, [b"", b""], EngineConfig(master=cluster.master_url,
                                                              **config))
        with pytest.raises(JobStalled, match=r"^(1 of 2 tasks had no running attempt for \d+ s "
                                             r"\(no-progress timeout 3 s; 1 running"
                                             r"|2 of 2 tasks had no running attempt for \d+ s "
                                             r"\(no-progress timeout 3 s; 0 running)"):
            job.result(240)
        assert job.status().state == "failed"
        # The worker dies: the master takes the application and never runs anything.
        cluster.stop_worker()
        job = start_tasks(_forever, [b""], EngineConfig(master=cluster.master_url, **config))
        with pytest.raises(JobStalled, match=r"^1 of 1 tasks had no running attempt .* on "
                                             r"master spark://127\.0\.0\.1:\d+: the cluster "
                                             r"lost its workers"):
            job.result(240)
