"""An experiment's pictures and live lines say what happened (issue 27, Small): each fault
kind has its own mark and a legend entry (a lag is no crash: its attempt goes on), the
recovery histogram counts in whole faults, and a fault's time on the live line is the
one the report gives it."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.figure import Figure

from eos_runtime.experiments.report import recovery_png, timeline_png
from eos_runtime.experiments.schedule import Schedule
from eos_runtime.experiments.setup import RunResult


def _result(faults: list[dict], attempts: list[dict], tasks: list[dict]) -> RunResult:
    timeline = [{"t": t, "sink": 100 * t, "source": 0, "running": 2, "finished": 0,
                 "failed": 0} for t in range(10)]
    return RunResult(7, "wordcount-s7-abc", "exactly-once", "local", Schedule(), faults,
                     attempts, timeline, tasks, None, None, 10.0, "eos experiment ...")


@pytest.fixture
def drawn(monkeypatch):
    """The figures the report draws, instead of their files."""
    figures: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: figures.append(self))
    return figures


def _bars(ax) -> list[tuple[float, float, float]]:
    """(y middle, x start, x end) of each attempt's bar."""
    out = []
    for c in ax.collections:
        for path in c.get_paths():
            v = path.vertices
            if len(v) >= 4:
                out.append((round((v[:, 1].min() + v[:, 1].max()) / 2, 2),
                            round(v[:, 0].min(), 2), round(v[:, 0].max(), 2)))
    return sorted(out)


def test_a_lag_is_drawn_as_a_lag_not_as_a_crash(drawn):
    faults = [{"kind": "lag", "task": 0, "attempt": 0, "fired": True, "time": 1.0,
               "describe": "lag task 0 attempt 0 0.01 s a record"},
              {"kind": "crash", "task": 1, "attempt": 0, "fired": True, "time": 4.0,
               "describe": "crash task 1 attempt 0 at task.mid_version@1"}]
    attempts = [{"task": 0, "attempt": 0, "started": 1.0},
                {"task": 1, "attempt": 0, "started": 1.0},
                {"task": 1, "attempt": 1, "started": 5.0}]
    tasks = [{"task_id": 0, "attempt": 0, "seconds": 8.0},
             {"task_id": 1, "attempt": 1, "seconds": 3.0}]
    timeline_png(_result(faults, attempts, tasks), Path("unused.png"))
    [fig] = drawn
    top, bottom = fig.axes
    bars = _bars(bottom)
    # the lagging attempt runs on to its end; the crashed one ends at its crash
    assert (0.0, 1.0, 9.0) in bars
    assert (1.0, 1.0, 4.0) in bars and (1.0, 5.0, 8.0) in bars
    marks = {line.get_label(): line.get_marker() for line in bottom.get_lines()
             if not line.get_label().startswith("_")}
    assert marks["lag"] != marks["crash"]
    legend = top.get_legend() or bottom.get_legend()
    assert legend is not None
    assert sorted(t.get_text() for t in legend.get_texts()) == ["crash", "lag"]


def test_the_recovery_histogram_counts_whole_faults(drawn):
    faults = [{"kind": "crash", "task": 0, "attempt": 0, "fired": True, "time": 1.0,
               "restarted_after": s} for s in (0.4, 0.9, 1.3)]
    assert recovery_png([_result(faults, [], [])], Path("unused.png"))
    [fig] = drawn
    ticks = [t for t in fig.axes[0].get_yticks() if t >= 0]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_the_live_line_gives_a_fault_the_time_the_report_gives_it(capsys):
    from eos_runtime.cli.experiment import _Progress

    show = _Progress(False, 1)
    rec = {"describe": "crash task 0 attempt 0 at task.recovery@1", "time": 24.61,
           "fired": True}
    show.progress({"seed": 7, "seconds": 24.79, "sink_records": 0, "tasks_running": 2,
                   "tasks_finished": 0, "failed_attempts": 0, "faults_fired": 1, "faults": 1,
                   "events": [rec], "phase": "run", "duration": None, "fed": 0,
                   "input_committed": 0})
    err = capsys.readouterr().err
    assert "24.61 s  fault: crash task 0" in err and "24.79" not in err
