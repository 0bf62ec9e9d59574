"""Ctrl-C during `eos experiment --runs N` (issue 27, Small): the runs that finished keep
their summary, the interrupted run is marked in it and its data removed (unless
--keep-data), and the command exits 130 with one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_experiments import USER_FILE

pytestmark = pytest.mark.slow

#: test_experiments' parity workload, slow for even seeds: their numbers are negative,
#: and each takes the counting task 0.2 s, so the second run is still running when the
#: test interrupts it; odd seeds are quick.
SLOW_EVEN = (USER_FILE
             .replace("def count(n, state):\n",
                      "def count(n, state):\n    if n < 0:\n        import time\n"
                      "        time.sleep(0.2)\n")
             .replace("return [rng.randint(0, 100) for _ in range(n)]",
                      "return [(-1 if seed % 2 == 0 else 1) * rng.randint(1, 100) "
                      "for _ in range(n)]"))


def _wait_for(what: str, found: object, p: subprocess.Popen, deadline: float) -> None:
    while not found():   # type: ignore[operator]
        assert p.poll() is None, f"eos experiment ended before {what}: {p.communicate()}"
        assert time.monotonic() < deadline, f"no {what} in time"
        time.sleep(0.1)


def test_ctrl_c_keeps_the_finished_runs_summary_and_removes_the_interrupted_runs_data(
        tmp_path):
    (tmp_path / "parity.py").write_text(SLOW_EVEN)
    report = tmp_path / "report"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EOS_")}
    p = subprocess.Popen(
        [sys.executable, "-c", "from eos_runtime.cli import run; run()", "experiment",
         "parity.py", "--seed", "1", "--runs", "3", "--lines", "100", "--faults", "0",
         "--report", str(report)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        data = report / "data"
        # seed 2's tasks are running: its job's state directory holds a task's pid file
        _wait_for("running task of seed 2",
                  lambda: any(data.glob("parity-s2-*/state/parity-s2-*/task-*.pid")), p,
                  time.monotonic() + 240)
        os.killpg(p.pid, signal.SIGINT)   # as a terminal's Ctrl-C: the whole process group
        out, err = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    assert p.returncode == 130, (out, err)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: interrupted during run 2 of 3 (seed 2); its data was removed; the summary of "
        f"the 1 finished run is in {report / 'summary.md'}"], err
    summary = json.loads((report / "summary.json").read_text())
    assert summary["runs"] == 1 and summary["passed"] == 1
    assert [r["seed"] for r in summary["results"]] == [1]
    assert summary["interrupted"] == {"run": 2, "of": 3, "seed": 2, "kept_data": None,
                                      "kept_topics": []}
    assert "Interrupted (Ctrl-C) during run 2 of 3, seed 2" in (report / "summary.md").read_text()
    assert (report / "seed-1" / "run.json").is_file()
    assert list(Path(data).iterdir()) == []   # seed 1 passed, seed 2 was interrupted
