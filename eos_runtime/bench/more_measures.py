"""The report's latency, recovery, memory and checkpoint sections: summaries, tables, plots.

Like throughput, a run whose output failed the oracle is shown with its mark and never
ranked: its latency, recovery time or memory gets no median.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

__all__ = ["cpu_per_result", "cpu_medians", "summarize_latency", "summarize_recovery",
           "summarize_memory",
           "summarize_checkpoints", "markdown_sections", "plot_latency", "plot_recovery",
           "plot_memory"]


def _status(rows: list[dict[str, Any]]) -> tuple[str, list[str]]:
    errors = sorted({r["error"] for r in rows if r.get("error")})
    if all(r["verified"] for r in rows):
        return "ok", errors
    return ("wrong" if any(str(e).startswith("wrong answer") for e in errors) else "failed"), errors


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 1) if xs else None


def cpu_per_result(run: dict[str, Any], field: str = "cpu_seconds") -> float | None:
    """A verified run's CPU µs per result: its system's processes (the broker's not), or
    the broker's (``broker_cpu_seconds``, where the bench found it on this machine)."""
    cpu, results = run.get(field), run.get("results_expected")
    if not run.get("verified") or cpu is None or not results:
        return None
    return float(cpu) / results * 1e6


def cpu_medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    """The median over verified runs of the system's CPU µs per result
    (``cpu_us_per_result``) and the broker's (``broker_cpu_us_per_result``), each where
    some run measured it."""
    out = {}
    for field, name in (("cpu_seconds", "cpu_us_per_result"),
                        ("broker_cpu_seconds", "broker_cpu_us_per_result")):
        median = _median([c for c in (cpu_per_result(r, field) for r in runs) if c is not None])
        if median is not None:
            out[name] = median
    return out


def _groups(runs: list[dict[str, Any]], measure: str) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        if r.get("measure", "throughput") == measure:
            out.setdefault((r["workload"], r["system"]), []).append(r)
    return out


def summarize_latency(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for (workload, system), mine in _groups(runs, "latency").items():
        status, errors = _status(mine)
        row: dict[str, Any] = {"workload": workload, "system": system,
                               "guarantee": mine[0]["guarantee"], "rate": mine[0].get("rate"),
                               "rounds": len(mine), "status": status, "errors": errors,
                               "p50_per_round": [r.get("latency_ms", {}).get("p50")
                                                 for r in mine],
                               "p99_per_round": [r.get("latency_ms", {}).get("p99")
                                                 for r in mine]}
        if status == "ok":
            p50 = [x for x in row["p50_per_round"] if x is not None]
            p99 = [x for x in row["p99_per_round"] if x is not None]
            row.update(p50_ms=_median(p50), p99_ms=_median(p99),
                       p99_min=min(p99, default=None), p99_max=max(p99, default=None),
                       cdf=sorted(x for r in mine for x in r.get("latency_ms", {}).get("cdf", [])))
        rows.append(row)
    return rows


def summarize_recovery(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for (workload, system), mine in _groups(runs, "recovery").items():
        status, errors = _status(mine)
        rec = [r.get("recovery", {}) for r in mine]
        row: dict[str, Any] = {"workload": workload, "system": system,
                               "guarantee": mine[0]["guarantee"], "rounds": len(mine),
                               "status": status, "errors": errors,
                               "killed": mine[0].get("killed"),
                               "recovery_ms_per_round": [x.get("recovery_ms") for x in rec]}
        if status == "ok":
            got = [x for x in row["recovery_ms_per_round"] if x is not None]
            row.update(recovery_ms=_median(got), min_ms=min(got, default=None),
                       max_ms=max(got, default=None),
                       baseline_p50_ms=_median([x["baseline_p50_ms"] for x in rec
                                                if x.get("baseline_p50_ms") is not None]))
        rows.append(row)
    return rows


def summarize_memory(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per system, a point per state size: the median peak memory, throughput and CPU per
    result over its rounds; ``growth`` the peak memory of the most keys over the fewest,
    ``throughput_kept`` their throughputs' ratio."""
    rows = []
    for (workload, system), mine in _groups(runs, "memory").items():
        status, errors = _status(mine)
        sizes: dict[int, list[dict[str, Any]]] = {}
        for r in mine:
            if r.get("peak_rss_bytes"):
                sizes.setdefault(int(r["state_keys"]), []).append(r)
        row: dict[str, Any] = {"workload": workload, "system": system,
                               "guarantee": mine[0]["guarantee"], "rounds": len(mine),
                               "status": status, "errors": errors}
        if status == "ok" and sizes:
            points = [_memory_point(k, got) for k, got in sorted(sizes.items())]
            row["points"] = points
            first, last = points[0], points[-1]
            if len(points) > 1 and first["peak_rss_mb"]:
                row["growth"] = round(last["peak_rss_mb"] / first["peak_rss_mb"], 3)
            if len(points) > 1 and first.get("throughput") and last.get("throughput"):
                row["throughput_kept"] = round(last["throughput"] / first["throughput"], 3)
        rows.append(row)
    return rows


def _memory_point(keys: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    mb = [r["peak_rss_bytes"] / 2**20 for r in runs]
    point: dict[str, Any] = {"state_keys": keys, "peak_rss_mb": round(statistics.median(mb), 1),
                             "per_round_mb": [round(x, 1) for x in mb]}
    # each round's peak by kind of process, for which of them a round's peak moved
    # (aligned with per_round_mb: a run measured before the split has none)
    if any(r.get("peak_rss_by_kind_bytes") for r in runs):
        point["per_round_mb_by_kind"] = [
            {k: round(v / 2**20, 1) for k, v in sorted((r.get("peak_rss_by_kind_bytes")
                                                         or {}).items())} for r in runs]
    for name in ("key_space", "input_records"):
        if runs[0].get(name):
            point[name] = runs[0][name]
    speed = [r["throughput"] for r in runs if r.get("throughput")]
    if speed:
        point["throughput"] = _median(speed)
    point.update(cpu_medians(runs))
    return point


_METRICS = ("duration_ms", "flush_ms", "changelog_ms", "commit_ms", "store_ms", "markers_ms",
            "cpu_ms", "alignment_ms", "start_delay_ms", "buffered_bytes", "changelog_bytes")


def summarize_checkpoints(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workload and eos_runtime system, each per-checkpoint metric over all its
    tasks and throughput rounds: checkpoints counted, their mean, the median of the
    tasks' p50s, the largest p99 and the largest value."""
    rows = []
    for (workload, system), mine in _groups(runs, "throughput").items():
        per_task = [m for r in mine for m in r.get("checkpoint_metrics", {}).values()]
        if not per_task:
            continue
        metrics = {}
        for name in _METRICS:
            got = [t[name] for t in per_task if t.get(name, {}).get("count")]
            if not got:
                continue
            n = sum(g["count"] for g in got)
            metrics[name] = {"count": n,
                             "mean": round(sum(g["mean"] * g["count"] for g in got) / n, 1),
                             "p50": _median([g["p50"] for g in got]),
                             "p99": max(g["p99"] for g in got), "max": max(g["max"] for g in got)}
        rows.append({"workload": workload, "system": system, "tasks": len(per_task),
                     "metrics": metrics})
    return rows


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f} ms"


def _mark(row: dict[str, Any]) -> str:
    return row["status"] if row["status"] == "ok" else \
        f"**{row['status']}**: {'; '.join(row['errors'])[:200]}"


def _section(title: str, intro: str, picture: str | None, columns: list[str],
             rows: list[str]) -> list[str]:
    """A report section: heading, what was measured, its plot, its table."""
    return [f"## {title}", "", intro, "", *([picture, ""] if picture else []),
            "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns), *rows, ""]


#: How the report names each kind of process (``TreeSampler.cpu_by_kind``'s kinds).
_KIND_COLUMNS = (("java", "JVMs"), ("python under java", "Python under them"),
                 ("other", "other processes"))


def _peaks_by_kind(mem: list[dict[str, Any]]) -> list[str]:
    """Each round's peak of each state size, split by kind of process: which processes a
    round's peak moved in (runs measured before the split have none)."""
    rows = []
    for r in mem:
        for p in r.get("points") or []:
            kinds_of = p.get("per_round_mb_by_kind")
            if not kinds_of:
                continue
            for n, (total, kinds) in enumerate(zip(p["per_round_mb"], kinds_of, strict=True),
                                               1):
                if not kinds:
                    continue
                rows.append(f"| {r['system']} | {_fmt_int(p.get('state_keys'))} | {n} | "
                            f"{_fmt_int(total)} | "
                            + " | ".join(_fmt_int(kinds.get(k, 0)) for k, _ in _KIND_COLUMNS)
                            + " |")
    if not rows:
        return []
    return _section(
        "Each round's peak memory, by process",
        "The peak above, round by round, split by the processes the peak sample found: "
        "the JVMs (eos_runtime and Spark: Spark's; Kafka Streams, PyFlink: theirs), the "
        "Python processes under them (eos_runtime's tasks, Spark's and PyFlink's Python "
        "workers) and the others (a Python peer's processes, the raw dataflow's). MiB.",
        None, ["system", "keys in state", "round", "peak", *(c for _, c in _KIND_COLUMNS)],
        rows)


def markdown_sections(result: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    lat = result.get("latency") or []
    if lat:
        s = result["settings"]
        rows = []
        for r in lat:
            rng = f"{_ms(r.get('p99_min'))} – {_ms(r.get('p99_max'))}" if "p99_ms" in r else "–"
            rows.append(f"| {r['workload']} | {r['system']} | {r['guarantee']} | "
                        f"{_ms(r.get('p50_ms'))} | {_ms(r.get('p99_ms'))} | {rng} | "
                        f"{_mark(r)} |")
        lines += _section(
            "Latency",
            f"A steady {s.get('rate', 0):,.0f} input records/s for "
            f"{s.get('steady_seconds', 0):g} s, a probe every "
            f"{s.get('probe_every_ms', 0):g} ms: from the probe's input append to its "
            "result readable by a read_committed reader. Median over rounds.",
            "![latency](latency_cdf.png)",
            ["workload", "system", "guarantee", "p50", "p99", "p99 min – max", "status"], rows)
    rec = result.get("recovery") or []
    if rec:
        rows = []
        for r in rec:
            rng = f"{_ms(r.get('min_ms'))} – {_ms(r.get('max_ms'))}" if "recovery_ms" in r \
                else "–"
            rows.append(f"| {r['workload']} | {r['system']} | {r['guarantee']} | "
                        f"{_ms(r.get('recovery_ms'))} | {rng} | {_ms(r.get('baseline_p50_ms'))}"
                        f" | {r.get('killed') or '–'} | {_mark(r)} |")
        lines += _section(
            "Recovery",
            "The same steady load; a third into the run one task of the system "
            "SIGKILLed (its last stage's; Spark's whole application, the column "
            "*killed* says) and restarted as its supervisor restarts it. The longest a "
            "probe appended in the window after the kill (2 s, or two commit intervals if "
            "longer) waited for its result to be readable: for one appended at the kill, "
            "the time until output resumed. The latency before the kill beside it.",
            "![recovery](recovery.png)",
            ["workload", "system", "guarantee", "longest wait after the kill", "min – max",
             "p50 before the kill", "killed", "status"], rows)
    mem = result.get("memory") or []
    if mem:
        rows = []
        for r in mem:
            for i, p in enumerate(r.get("points") or [{}]):
                first = i == 0
                rows.append(
                    f"| {r['system'] if first else ''} | {r['guarantee'] if first else ''} | "
                    f"{_fmt_int(p.get('state_keys'))} | {_fmt_int(p.get('input_records'))} | "
                    f"{_fmt_int(p.get('peak_rss_mb'))} | {_fmt_int(p.get('throughput'))} | "
                    f"{_fmt_1(p.get('cpu_us_per_result'))} | "
                    f"{_fmt_1(p.get('broker_cpu_us_per_result'))} | "
                    f"{_mark(r) if first else ''} |")
        lines += _section(
            "Memory as state grows",
            "The aggregate workload (a count per key) at each state size: peak resident "
            "memory of every process of a system (eos_runtime: the Spark JVM and its Python "
            "workers; the driver shares the bench's process), its throughput and its CPU "
            "per result over the same burst, and the broker's beside it (where the bench "
            "found the broker's process on this machine). Each burst has two records a key "
            "of its key space, at least --records; the keys column counts the distinct keys "
            "drawn.",
            "![memory](memory.png)",
            ["system", "guarantee", "keys in state", "input records", "peak RSS, MiB",
             "events/s", "CPU µs per result", "the broker's CPU µs per result", "status"],
            rows)
        lines += _peaks_by_kind(mem)
    cps = result.get("checkpoints") or []
    if cps:
        rows = [f"| {r['workload']} | {r['system']} | `{name}` | {m['count']:,} | "
                f"{m['mean']:,.1f} | {m['p50']:,.1f} | {m['p99']:,.1f} | {m['max']:,.1f} |"
                for r in cps for name, m in r["metrics"].items()]
        lines += _section(
            "eos_runtime checkpoints",
            "Per-checkpoint metrics of the throughput runs (`eos run --json`'s "
            "`checkpoint_metrics`), over all tasks and rounds: the median of the "
            "tasks' p50s, the largest p99 and the largest value.",
            None,
            ["workload", "system", "metric", "checkpoints", "mean", "p50", "p99", "max"], rows)
    return lines


def _fmt_int(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f}"


def _fmt_1(x: float | None) -> str:
    return "–" if x is None else f"{x:,.1f}"


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (files only, no display), for every plot
    of the report."""
    # matplotlib loads with the report's first plot, not with the bench
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_latency(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.5 * len(workloads), 3.4),
                             squeeze=False)
    for ax, workload in zip(axes[0], workloads, strict=True):
        for r in rows:
            if r["workload"] == workload and r.get("cdf"):
                xs = r["cdf"]
                ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post",
                        label=r["system"])
        ax.set_xlabel("ms, input append to readable result")
        ax.set_ylabel("fraction of probes")
        ax.set_title(workload, fontsize=10)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_recovery(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(rows)), 3.4))
    for i, r in enumerate(rows):
        if "recovery_ms" in r:
            ax.bar(i, r["recovery_ms"], width=0.6, alpha=0.5)
            got = [x for x in r["recovery_ms_per_round"] if x is not None]
            ax.scatter([i] * len(got), got, s=12, color="black", zorder=3)
        else:
            ax.text(i, 0, r["status"], ha="center", va="bottom", color="red", rotation=90)
    ax.set_xticks(range(len(rows)), [f"{r['workload']}\n{r['system']}" for r in rows],
                  fontsize=6)
    ax.set_ylabel("longest wait after the SIGKILL, ms")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_memory(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, (field, label) in zip(axes, (("peak_rss_mb", "peak RSS, MiB"),
                                         ("throughput", "events/s"),
                                         ("cpu_us_per_result", "CPU µs per result")),
                                  strict=True):
        for r in rows:
            got = [p for p in r.get("points") or [] if p.get(field) is not None]
            if got:
                ax.plot([p["state_keys"] for p in got], [p[field] for p in got], marker="o",
                        label=r["system"])
        ax.set_xscale("log")
        ax.set_xlabel("keys in state")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
