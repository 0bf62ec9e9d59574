"""Crash points: armed ones kill the process with SIGKILL at the chosen hit, others do nothing."""

import os
import signal
import subprocess
import sys

import pytest

from eos_runtime import faults
from eos_runtime.errors import ConfigError

PROBE = ("from eos_runtime.faults import crash_point\n"
         "for i in range(5):\n"
         "    print(i, flush=True)\n"
         "    crash_point('locallog.append.after_data')\n")


def run_probe(env_value):
    env = dict(os.environ)
    env.pop("EOS_CRASH_AT", None)
    if env_value is not None:
        env["EOS_CRASH_AT"] = env_value
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env)


def test_unarmed_points_do_nothing():
    proc = run_probe(None)
    assert proc.returncode == 0 and proc.stdout.split() == ["0", "1", "2", "3", "4"]


def test_armed_point_kills_at_the_nth_hit():
    proc = run_probe("locallog.append.after_data@3")
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout.split() == ["0", "1", "2"]


def test_unknown_crash_point_in_the_environment_is_a_clear_error():
    proc = run_probe("no.such.point")
    assert proc.returncode != 0
    assert "unknown crash point 'no.such.point'" in proc.stderr


def test_arm_validates():
    with pytest.raises(ConfigError, match="unknown crash point"):
        faults.arm("nope")
    with pytest.raises(ConfigError, match="hit must be >= 1"):
        faults.arm("locallog.append.after_data", 0)
    faults.disarm()
    assert not faults.is_armed("locallog.append.after_data")


NOT_BEFORE = ("import sys, time\n"
              "from eos_runtime import faults\n"
              "faults.arm('task.mid_version', 2, not_before=time.time() + float(sys.argv[1]))\n"
              "for i in range(5):\n"
              "    print(i, flush=True)\n"
              "    faults.crash_point('task.mid_version')\n")


@pytest.mark.parametrize("offset,printed", [(-3600, 2), (3600, 5)])
def test_hits_count_only_from_not_before(offset, printed):
    """A soak's fault is armed from the start of the attempt but fires only after its
    moment: hits before ``not_before`` are not counted (an hour off either way)."""
    proc = subprocess.run([sys.executable, "-c", NOT_BEFORE, str(offset)], capture_output=True,
                          text=True)
    assert len(proc.stdout.split()) == printed
    assert proc.returncode == (-signal.SIGKILL if printed == 2 else 0)


@pytest.fixture
def true_clock():
    from eos_runtime import clock
    yield clock
    faults.disarm()
    clock.reset()


def test_a_clock_fault_steps_the_wall_clock_at_its_hit_and_the_process_goes_on(true_clock,
                                                                                tmp_path):
    log = tmp_path / "faults.jsonl"
    faults.arm("task.checkpoint.after_store", 2, "clock", step=-600.0)
    faults.record_to(str(log), task=3)
    faults.crash_point("task.checkpoint.after_store")
    assert true_clock.offset() == 0.0
    mono = true_clock.monotonic()
    faults.crash_point("task.checkpoint.after_store")
    assert true_clock.offset() == -600.0
    assert true_clock.wall() < __import__("time").time() - 599   # the wall clock went back
    assert true_clock.monotonic() >= mono                          # the monotonic one did not
    faults.crash_point("task.checkpoint.after_store")              # fired once, not again
    assert true_clock.offset() == -600.0
    assert '"action": "clock"' in log.read_text() and '"step": -600.0' in log.read_text()


@pytest.mark.parametrize("step,message", [(None, "a step goes with action 'clock'"),
                                          (float("nan"), "finite number other than 0"),
                                          (float("inf"), "finite number other than 0"),
                                          (0, "finite number other than 0"),
                                          ("600", "finite number other than 0")])
def test_a_clock_fault_needs_a_finite_step(step, message, true_clock):
    with pytest.raises(ConfigError, match=message):
        faults.arm("task.mid_version", 1, "clock", step=step)


def test_a_step_goes_only_with_a_clock_fault(true_clock):
    with pytest.raises(ConfigError, match="a step goes with action 'clock'"):
        faults.arm("task.mid_version", 1, "kill", step=5.0)


def test_a_task_config_arms_a_clock_fault_for_its_task_and_attempt_only(true_clock,
                                                                        monkeypatch):
    """The interface experiments use: a TaskConfig.fault entry with action "clock" and a
    step arms the point in that task's attempt, and a new task starts on the true clock."""
    from types import SimpleNamespace

    from eos_runtime.runtime import task

    seen = {}

    def ride_through(config, attempt):
        seen[attempt] = faults.is_armed("task.mid_version")
        faults.crash_point("task.mid_version")
        seen[f"offset-{attempt}"] = true_clock.offset()
        return "stats"

    monkeypatch.setattr(task, "_ride_through", ride_through)
    config = SimpleNamespace(task_id=2, fault=[{"point": "task.mid_version", "task": 2,
                                                "attempt": 0, "action": "clock",
                                                "step": -600.0}])
    assert task.run_task(config, 0) == "stats"          # type: ignore[arg-type]
    assert seen == {0: True, "offset-0": -600.0}
    task.run_task(config, 1)                            # type: ignore[arg-type]
    assert seen[1] is False and seen["offset-1"] == 0.0
