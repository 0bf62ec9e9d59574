"""A task's in-place restart after a transient transport error (runtime/task.py,
``_ride_through``), on the local log without Spark: the failure is injected (the local
log has no outages of its own); the recovery, the channels and the output are real."""

from __future__ import annotations

import pytest

from eos_runtime.errors import BrokerUnavailable, OutageBudgetExceeded
from eos_runtime.runner import task_configs
from eos_runtime.runtime import task as task_module
from eos_runtime.runtime.checkpoint import Committer

from scripted import ScriptedJob


@pytest.fixture
def job(tmp_path):
    j = ScriptedJob(tmp_path, {"data_dir": str(tmp_path / "data")}, commit_every=2)
    yield j
    j.close()


def _config(job: ScriptedJob, task_id: int, **options):
    cfg = task_configs(job.plan, job.t, job.transport_opts, str(job.tmp / "state"))[task_id]
    for k, v in options.items():
        setattr(cfg, k, v)
    return cfg


def test_a_task_restarts_in_place_and_the_output_stays_exact(job, monkeypatch):
    values = [f"v{i}" for i in range(12)]
    job.feed_source(0, *values[:6])
    job.feed_source(1, *values[6:])
    real = Committer.checkpoint
    calls = {"n": 0}

    def broker_gone_at_the_second_checkpoint(self, version, inputs, fences=(), **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:   # output of the open version is downstream already
            raise BrokerUnavailable("injected: the broker went away")
        return real(self, version, inputs, fences, **kwargs)

    monkeypatch.setattr(Committer, "checkpoint", broker_gone_at_the_second_checkpoint)
    stats = task_module.run_task(_config(job, 0), attempt=0)
    assert stats.outage_restarts == 1
    assert stats.generation >= 2          # the restart took a new generation
    monkeypatch.setattr(Committer, "checkpoint", real)
    job.attempts[0] = 1
    job.run_task(task_id=1, timeout=60)
    job.run_task(timeout=60)              # the sink task, in a process of its own
    assert job.output() == sorted(values)


def test_past_the_budget_a_task_fails_naming_the_log_and_how_long(job, monkeypatch):
    def unreachable(**opts):
        raise BrokerUnavailable("cannot reach Kafka at 127.0.0.1:1 (Connection refused)")

    monkeypatch.setattr(task_module, "open_transport", unreachable)
    with pytest.raises(OutageBudgetExceeded) as info:
        task_module.run_task(_config(job, 0, outage_budget=0.0), attempt=0)
    assert str(info.value).startswith("task 0: the log was unreachable for 0 s, longer than "
                                      "the outage budget of 0 s (--outage-budget); last error: "
                                      "cannot reach Kafka at 127.0.0.1:1")


def test_a_permanent_error_is_not_ridden_through(job, monkeypatch):
    from eos_runtime.errors import TransportError

    opened = {"n": 0}

    def broken(**opts):
        opened["n"] += 1
        raise TransportError("a permanent failure")

    monkeypatch.setattr(task_module, "open_transport", broken)
    with pytest.raises(TransportError, match="a permanent failure"):
        task_module.run_task(_config(job, 0, outage_budget=60.0), attempt=0)
    assert opened["n"] == 1


def test_a_log_that_serves_reads_but_refuses_every_commit_fails_the_task_within_budget(
        job, monkeypatch):
    # Each restart recovers (reads, a new generation), then its first checkpoint fails:
    # recovery is no proof that the outage ended, or the task restarts for ever (a half
    # shut-down broker kept a run going, neither ending nor failing, for 13 minutes).
    job.feed_source(0, *[f"v{i}" for i in range(40)])
    refused = {"n": 0}

    def refuse_every_commit(self, version, inputs, fences=(), **kwargs):
        refused["n"] += 1
        if refused["n"] > 50:
            raise RuntimeError("still restarting after 50 refused commits: the budget of 1 s "
                               "never ran out")
        raise BrokerUnavailable("injected: the broker refused the commit")

    monkeypatch.setattr(Committer, "checkpoint", refuse_every_commit)
    with pytest.raises(OutageBudgetExceeded) as info:
        task_module.run_task(_config(job, 0, outage_budget=1.0), attempt=0)
    assert "longer than the outage budget of 1 s" in str(info.value)
    assert "injected: the broker refused the commit" in str(info.value)
    assert 2 <= refused["n"] <= 10, refused
