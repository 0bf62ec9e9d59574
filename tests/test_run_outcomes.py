"""How each run of a job ended, kept where ``eos jobs`` reads its runs (issue 27 item 12):
finished, stopped, failed (with the error's one line) or cancelled. Real Spark, the real
local log, runs in this process (``run_here``) and ``eos jobs`` as a user runs it."""

from __future__ import annotations

import json

import pytest

from eos_runtime.errors import EosError
from eos_runtime.runner import load_pipeline, start_pipeline, watch_run

from test_cli import eos, ok, run_here

PIPELINE = '''from eos_runtime import Pipeline

def check(line):
    if line == "boom":
        raise ValueError("no booms here")
    return line.upper()

pipeline = Pipeline("outcomes")
pipeline.source("words").map(check).sink("upper")
'''


def test_eos_jobs_says_how_each_run_ended(tmp_path):
    path = tmp_path / "outcomes.py"
    path.write_text(PIPELINE)
    data = str(tmp_path / "data")
    ok("produce", "words", "--lines-from", "-", "--partitions", "1", "--data-dir", data,
       stdin="a\nb\n")
    run_here(path, data_dir=data)                                         # run 0: finished

    def cancel(progress):                         # run 1: a second Ctrl-C, as watch_run takes it
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        watch_run(start_pipeline(load_pipeline(str(path)), data_dir=data, bounded=False),
                  on_progress=cancel)

    ok("produce", "words", "--lines-from", "-", "--data-dir", data, stdin="boom\n")
    with pytest.raises(EosError) as failed:                             # run 2: failed
        run_here(path, data_dir=data)
    error = str(failed.value).splitlines()[0]

    jobs = json.loads(ok("jobs", "--json", "--no-commits", "--data-dir", data).stdout)
    runs = jobs[0]["runs"]
    assert [(r["run"], r["outcome"]) for r in runs] == [(0, "finished"), (1, "cancelled"),
                                                        (2, "failed")]
    assert runs[2]["error"] == error and "no booms here" in error
    assert all(r["ended_ms"] >= r["started_ms"] for r in runs)
    text = ok("jobs", "--no-commits", "--data-dir", data).stdout.splitlines()
    assert text[1].startswith("  run 0: bounded, started ") and text[1].endswith(", finished")
    assert text[2].endswith(", cancelled")
    assert text[3].endswith(f", failed: {error}")
    assert eos("jobs", "--data-dir", data).returncode == 0
