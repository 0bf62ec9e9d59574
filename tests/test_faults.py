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
