"""Reports of experiment runs: JSON and a PNG timeline per run, a table and a markdown
summary across runs.

    <report>/seed-<S>/run.json        everything about the run (schedule, faults as they
                                      fired, attempts, timeline, per-task stats, verdict)
    <report>/seed-<S>/schedule.json   its schedule, replayable with --schedule
    <report>/seed-<S>/timeline.png    sink output per second, task attempts and generations,
                                      faults marked
    <report>/summary.json, summary.md, recovery.png (time from a fault to the task's restart)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .setup import RunResult, verdict_word
from .timeline import recovery_png, timeline_png

__all__ = ["write_run", "write_summary", "table_lines", "verdict_word", "REPORT_MARKER",
           "timeline_png", "recovery_png"]

#: The file that marks a directory as an experiment report (so a later run may add to it).
REPORT_MARKER = ".eos-experiment"


def _failed_attempts(r: RunResult) -> int:
    tasks = {a["task"] for a in r.attempts}
    return len(r.attempts) - len(tasks)


def table_rows(results: Sequence[RunResult]) -> list[list[str]]:
    rows = [["seed", "verdict", "faults", "lost", "dup", "unexpected", "out-of-order",
             "hidden", "retries", "seconds"]]
    for r in results:
        v = r.verdict
        rows.append([str(r.seed), verdict_word(r), f"{r.fired()}/{len(r.faults)}",
                     *(f"{n:,}" if v is not None else "-" for n in (
                         (v.lost, v.duplicated, v.unexpected, v.out_of_order,
                          (v.raw or {}).get("hidden", 0)) if v is not None else (0,) * 5)),
                     str(_failed_attempts(r)), f"{r.seconds:.1f}"])
    return rows


def table_lines(results: Sequence[RunResult]) -> list[str]:
    rows = table_rows(results)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.rjust(w) if i else cell.ljust(w)
                      for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()
            for row in rows]


def write_run(r: RunResult, report_dir: Path) -> Path:
    d = report_dir / f"seed-{r.seed}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps(r.as_dict(), indent=1, default=str) + "\n")
    (d / "schedule.json").write_text(json.dumps(r.schedule.as_dict(), indent=1) + "\n")
    timeline_png(r, d / "timeline.png")
    return d


def write_summary(results: Sequence[RunResult], report_dir: Path, *, command: str,
                  settings: dict[str, Any], interrupted: dict[str, Any] | None = None) -> Path:
    """``interrupted``: the run a Ctrl-C cancelled (run, of, seed, kept_data, kept_topics);
    ``results`` are the runs that finished before it."""
    report_dir.mkdir(parents=True, exist_ok=True)
    passed = sum(r.passed for r in results)
    doc = {"command": command, "settings": settings, "runs": len(results), "passed": passed,
           "failed": len(results) - passed, "interrupted": interrupted,
           "results": [{"seed": r.seed, "verdict": verdict_word(r), "passed": r.passed,
                        "error": r.error, "faults_fired": r.fired(), "faults": len(r.faults),
                        "counts": r.verdict.counts() if r.verdict else None,
                        "raw": r.verdict.raw if r.verdict else None,
                        "seconds": round(r.seconds, 2), "replay": r.replay, "soak": r.soak,
                        "report": f"seed-{r.seed}/run.json"} for r in results]}
    (report_dir / "summary.json").write_text(json.dumps(doc, indent=1) + "\n")
    has_hist = recovery_png(results, report_dir / "recovery.png")
    soak = settings.get("soak")
    size = (f"{settings.get('lines'):,} input records per run" if not soak else
            f"soaks of {soak['duration']:g} s fed at {soak['rate']:g} records per second")
    md = [f"# Experiment: {settings.get('workload')}", "", f"    {command}", "",
          f"{len(results)} run{'s' * (len(results) != 1)}, {passed} passed, "
          f"{len(results) - passed} failed; "
          f"{settings.get('guarantee')} on {settings.get('transport')}, {size}.", ""]
    if interrupted is not None:
        left = (f"its data is kept in `{interrupted['kept_data']}`"
                + "".join(f", topic `{t}`" for t in interrupted.get("kept_topics") or ())
                if interrupted.get("kept_data") else "its data was removed")
        md += [f"Interrupted (Ctrl-C) during run {interrupted['run']} of {interrupted['of']}, "
               f"seed {interrupted['seed']}: {left}. The table holds the runs that "
               f"finished before it.", ""]
    rows = table_rows(results)
    md.append("| " + " | ".join(rows[0]) + " | timeline |")
    md.append("|" + "---|" * (len(rows[0]) + 1))
    for r, row in zip(results, rows[1:], strict=True):
        md.append("| " + " | ".join(row) + f" | [png](seed-{r.seed}/timeline.png) |")
    md.append("")
    md.append("`hidden`: records of the sink topic a reader does not see (output of crashed or "
              "fenced attempts). `retries`: task attempts after a first one.")
    for r in results:
        if r.soak is not None:
            md.append(f"\nSeed {r.seed}: {r.soak['fed']:,} records fed over "
                      f"{r.soak['duration']:g} s ({r.soak['failed_flushes']} failed flushes), "
                      f"the oracle's input; the run was stopped {r.soak['drain_seconds']} s "
                      f"after the feeding ended.")
    failing = [r for r in results if not r.passed]
    if failing:
        md += ["", "## Failing runs", ""]
        for r in failing:
            why = r.error or ", ".join(r.verdict.reasons() if r.verdict else [])
            md += [f"- seed {r.seed}: {why}", f"  replay: `{r.replay}`"]
            if r.kept_data:
                md.append(f"  data kept in `{r.kept_data}`")
            if r.kept_topics:
                md.append("  topics kept on the broker: "
                          + ", ".join(f"`{t}`" for t in r.kept_topics))
    md += ["", "## Faults", ""]
    for r in results:
        md.append(f"- seed {r.seed}: " + ("; ".join(
            f"{f['describe']} ({_fate(f)})" for f in r.faults) or "none"))
    if has_hist:
        md += ["", "## Recovery", "", "![recovery times](recovery.png)"]
    (report_dir / "summary.md").write_text("\n".join(md) + "\n")
    return report_dir / "summary.md"


def _fate(f: dict[str, Any]) -> str:
    if not f.get("fired"):
        return f"not fired: {f.get('note', 'never reached')}"
    if f.get("kind") == "buffer":
        return "set"
    out = f"fired at {f['time']:.2f} s"
    if "restarted_after" in f:
        out += f", restarted after {f['restarted_after']:.2f} s"
    return out
