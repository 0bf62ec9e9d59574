"""An experiment's pictures: a run's timeline and the recovery histogram across runs.

Each fault kind has a mark of its own (``MARKS``), on the output line above and on its
task's bar below, and a legend names the kinds drawn. Only the kinds that end their
attempt cut its bar at the fault: a lag slows its attempt down for the whole of it, a
zombie's parent goes on as a zombie, a clock step or an operator's pause lets it go on.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from .schedule import PAUSES
from .setup import RunResult, verdict_word

__all__ = ["timeline_png", "recovery_png", "MARKS", "mark_of"]


class Mark(NamedTuple):
    marker: str          # matplotlib's marker on the task's bar
    color: str
    ends_attempt: bool   # the attempt's bar ends at the fault


# colours apart from the attempts' bars (green, orange, purple, brown, pink, gray)
_DIES = "tab:red"
_OPERATORS = "darkgoldenrod"
MARKS: dict[str, Mark] = {
    "crash": Mark("x", _DIES, True),
    "torn": Mark("+", _DIES, True),
    "kill": Mark("X", _DIES, True),
    "lose-state": Mark("D", _DIES, True),
    "zombie": Mark("s", "tab:cyan", False),
    "lag": Mark(">", "tab:olive", False),
    "clock": Mark("^", "navy", False),
    "buffer": Mark("v", "black", False),
    "broker": Mark("*", "tab:blue", False),
    **{k: Mark("o", _OPERATORS, False) for k in PAUSES},
}
#: Between runs, a task's attempt is not there to mark: the line above only.
_OPERATOR = Mark("p", _OPERATORS, False)


def mark_of(kind: str) -> Mark:
    return MARKS.get(kind, _OPERATOR)


def timeline_png(r: RunResult, path: Path) -> None:
    """Sink records per second over the run, task attempts and their generations below
    it, faults marked by kind."""
    # matplotlib loads when a picture is drawn, not with the experiments; a Figure of its
    # own: no pyplot, no GUI backend
    from matplotlib.figure import Figure

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
        color = mark_of(f["kind"]).color
        top.axvline(f["time"], color=color, linestyle="--", linewidth=1)
        if f.get("back") is not None:   # a broker outage: shade until the broker answered
            top.axvspan(f["time"], f["back"], color=color, alpha=0.08, linewidth=0)
        target = f" t{f['task']}" if f.get("task") is not None else ""
        # staggered: faults a few milliseconds apart would print over each other
        top.annotate(f"{i} {f['kind']}{target}", (f["time"], 0.97 - 0.11 * (k % 5)),
                     xycoords=("data", "axes fraction"), va="top", ha="left", fontsize=7,
                     color=color, xytext=(2, 0), textcoords="offset points")
    word = verdict_word(r)
    v = r.verdict
    detail = ("" if v is None else f": {v.lost} lost, {v.duplicated} dup, {v.unexpected} "
              f"unexpected, {v.out_of_order} out of order")
    top.set_title(f"{r.job} ({r.guarantee}, {r.transport}) {word}{detail}", fontsize=9)

    by_task = _attempt_bars(r, fired, end, bottom)
    # each generation's start on its task's bar: a tick and "g<n>" (a retry, a restart in
    # place or a rewind takes a new one)
    for g in r.generations:
        bottom.vlines(g["started"], g["task"] - 0.35, g["task"] + 0.35, color="black",
                      linewidth=0.8)
        bottom.annotate(f"g{g['generation']}", (g["started"], g["task"] + 0.35), fontsize=6,
                        va="bottom", ha="left", xytext=(1, 0), textcoords="offset points")
    labelled: set[str] = set()
    for i, f in fired:
        m = mark_of(f["kind"])
        if f.get("task") is not None:
            # one labelled mark a kind: the legend's entry
            label = f["kind"] if f["kind"] not in labelled else "_"
            labelled.add(f["kind"])
            bottom.plot([f["time"]], [f["task"]], marker=m.marker, color=m.color,
                        markersize=7, linestyle="none", label=label)
            bottom.annotate(str(i), (f["time"], f["task"]), fontsize=7, color=m.color,
                            xytext=(3, 3), textcoords="offset points")
    for kind in dict.fromkeys(f["kind"] for _, f in fired):
        if kind not in labelled:   # no task to mark it on: an entry of its own
            m = mark_of(kind)
            bottom.plot([], [], marker=m.marker, color=m.color, linestyle="none", label=kind)
    if fired:
        top.legend(*bottom.get_legend_handles_labels(), loc="upper right", fontsize=7,
                   title="faults", title_fontsize=7, framealpha=0.8)
    starts = [a["started"] for a in r.attempts if a["started"] is not None]
    if starts:   # from just before the first task started: Spark's start-up is not the run
        bottom.set_xlim(left=max(0.0, min(starts) - 0.5), right=end + 0.1)
    bottom.set_yticks(sorted(by_task) or [0])
    bottom.set_ylabel("task")
    bottom.set_xlabel("seconds since the run started (attempts: green first, orange second, "
                      "...; |gN: generation N starts)")
    fig.savefig(path)


def _attempt_bars(r: RunResult, fired: list[tuple[int, dict[str, Any]]], end: float,
                  ax: Any) -> dict[int, list[dict[str, Any]]]:
    """Each task attempt as a bar from its start to its end: the fault that ended it,
    the next attempt's start, or its own seconds."""
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
                         and f.get("attempt") == a["attempt"]
                         and mark_of(f["kind"]).ends_attempt), None)
            if died is not None:   # the retry starts later: Spark waits before it retries
                stop = died
            elif stop is None:   # the last attempt: it ran for its task's own seconds
                stats = next((t for t in r.tasks if t.get("task_id") == task), None)
                stop = (start + stats["seconds"] if stats and stats.get("attempt") == a["attempt"]
                        and stats.get("seconds") else end)
            ax.broken_barh([(start, max(stop - start, 0.01))], (task - 0.35, 0.7),
                           color=colors[a["attempt"] % len(colors)])
    return by_task


def recovery_png(results: Sequence[RunResult], path: Path) -> bool:
    times = [f["restarted_after"] for r in results for f in r.faults if "restarted_after" in f]
    if not times:
        return False
    from matplotlib.figure import Figure  # as in timeline_png
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(6, 2.8), dpi=80, layout="constrained")
    ax = fig.subplots()
    ax.hist(times, bins=min(20, max(5, len(times))), color="tab:blue")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))   # a count of faults
    ax.set_xlabel("seconds from a fault to the task's next attempt")
    ax.set_ylabel("faults")
    ax.set_title(f"recovery of {len(times)} fault{'s' * (len(times) != 1)} over "
                 f"{len(results)} run{'s' * (len(results) != 1)}", fontsize=9)
    fig.savefig(path)
    return True
