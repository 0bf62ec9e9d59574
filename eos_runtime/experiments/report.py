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

from .setup import RunResult

__all__ = ["write_run", "write_summary", "table_lines", "verdict_word", "REPORT_MARKER"]

#: The file that marks a directory as an experiment report (so a later run may add to it).
REPORT_MARKER = ".eos-experiment"


def verdict_word(r: RunResult) -> str:
    if r.error is not None:
        return "ERROR"
    return "pass" if r.passed else "FAIL"


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


def timeline_png(r: RunResult, path: Path) -> None:
    """Sink records per second over the run, task attempts and their generations below
    it, faults marked."""
    from matplotlib.figure import Figure  # a Figure of its own: no pyplot, no GUI backend

    fig = Figure(figsize=(8, 4.2), dpi=80, layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[2, 1.4])
    ts = [s["t"] for s in r.timeline]
    rates = [0.0] + [max(0.0, (b["sink"] - a["sink"]) / (b["t"] - a["t"]))
                     if b["t"] > a["t"] else 0.0
                     for a, b in zip(r.timeline, r.timeline[1:], strict=False)]
    top.step(ts, rates, where="post", color="tab:blue", linewidth=1.2)
    top.set_ylabel("sink records/s")
    end = max(ts + [r.seconds])
    fired = [(i, f) for i, f in enumerate(r.faults, 1) if f.get("fired") and f.get("time")]
    for k, (i, f) in enumerate(fired):
        top.axvline(f["time"], color="tab:red", linestyle="--", linewidth=1)
        if f.get("back") is not None:   # a broker outage: shade until the broker answered
            top.axvspan(f["time"], f["back"], color="tab:red", alpha=0.08, linewidth=0)
        target = f" t{f['task']}" if f.get("task") is not None else ""
        # staggered: faults a few milliseconds apart would print over each other
        top.annotate(f"{i} {f['kind']}{target}", (f["time"], 0.97 - 0.11 * (k % 5)),
                     xycoords=("data", "axes fraction"), va="top", ha="left", fontsize=7,
                     color="tab:red", xytext=(2, 0), textcoords="offset points")
    word = verdict_word(r)
    v = r.verdict
    detail = ("" if v is None else f": {v.lost} lost, {v.duplicated} dup, {v.unexpected} "
              f"unexpected, {v.out_of_order} out of order")
    top.set_title(f"{r.job} ({r.guarantee}, {r.transport}) {word}{detail}", fontsize=9)

    by_task: dict[int, list[dict[str, Any]]] = {}
    for a in r.attempts:
        by_task.setdefault(a["task"], []).append(a)
    colors = ["tab:green", "tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:gray"]
    for task, attempts in by_task.items():
        attempts.sort(key=lambda a: a["attempt"])
        for k, a in enumerate(attempts):
            start = a["started"]
            if start is None:
                continue
            stop = next((b["started"] for b in attempts[k + 1:] if b["started"] is not None),
                        None)
            died = next((f["time"] for _, f in fired if f.get("task") == task
                         and f.get("attempt") == a["attempt"] and f.get("kind") != "zombie"),
                        None)
            if died is not None:   # the retry starts later: Spark waits before it retries
                stop = died
            elif stop is None:   # the last attempt: it ran for its task's own seconds
                stats = next((t for t in r.tasks if t.get("task_id") == task), None)
                stop = (start + stats["seconds"] if stats and stats.get("attempt") == a["attempt"]
                        and stats.get("seconds") else end)
            bottom.broken_barh([(start, max(stop - start, 0.01))], (task - 0.35, 0.7),
                               color=colors[a["attempt"] % len(colors)])
    # each generation's start on its task's bar: a tick and "g<n>" (a retry, a restart in
    # place or a rewind takes a new one)
    for g in r.generations:
        bottom.vlines(g["started"], g["task"] - 0.35, g["task"] + 0.35, color="black",
                      linewidth=0.8)
        bottom.annotate(f"g{g['generation']}", (g["started"], g["task"] + 0.35), fontsize=6,
                        va="bottom", ha="left", xytext=(1, 0), textcoords="offset points")
    for i, f in fired:
        if f.get("task") is not None:
            bottom.plot([f["time"]], [f["task"]], marker="x", color="tab:red", markersize=7)
            bottom.annotate(str(i), (f["time"], f["task"]), fontsize=7, color="tab:red",
                            xytext=(3, 3), textcoords="offset points")
    starts = [a["started"] for a in r.attempts if a["started"] is not None]
    if starts:   # from just before the first task started: Spark's start-up is not the run
        bottom.set_xlim(left=max(0.0, min(starts) - 0.5), right=end + 0.1)
    bottom.set_yticks(sorted(by_task) or [0])
    bottom.set_ylabel("task")
    bottom.set_xlabel("seconds since the run started (attempts: green first, orange second, "
                      "...; |gN: generation N starts)")
    fig.savefig(path)


def recovery_png(results: Sequence[RunResult], path: Path) -> bool:
    times = [f["restarted_after"] for r in results for f in r.faults if "restarted_after" in f]
    if not times:
        return False
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 2.8), dpi=80, layout="constrained")
    ax = fig.subplots()
    ax.hist(times, bins=min(20, max(5, len(times))), color="tab:blue")
    ax.set_xlabel("seconds from a fault to the task's next attempt")
    ax.set_ylabel("faults")
    ax.set_title(f"recovery of {len(times)} faults over {len(results)} runs", fontsize=9)
    fig.savefig(path)
    return True


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
