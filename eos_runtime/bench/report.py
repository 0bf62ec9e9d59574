"""The bench's results: medians with their spread, ratios side by side, in three files.

``results.json`` holds every run and the summary; ``throughput.png`` the bars (and
``latency_cdf.png``, ``recovery.png``, ``memory.png`` when those were measured:
``more_measures.py``); ``report.md`` the tables. A system is ranked only if every one
of its rounds was verified: a fast wrong answer gets a mark, never a median or a ratio.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import more_measures as more
from . import targets, windows

__all__ = ["summarize", "RATIOS", "THROUGHPUT_PLOT", "write_report"]

#: The ratios the report shows: (numerator, denominator), systems by name.
RATIOS = [
    ("eos-exactly-once", "eos-at-least-once"),
    ("eos-exactly-once", targets.EO_AT_INTERVAL),
    ("eos-exactly-once", "raw-kafka"),
    ("eos-at-least-once", "raw-kafka"),
    ("eos-exactly-once", "quix-exactly-once"),
    ("eos-at-least-once", "quix-at-least-once"),
    ("eos-exactly-once", "spark-structured-streaming"),
    ("eos-exactly-once", "kafka-streams-exactly-once-100ms"),
    ("eos-exactly-once", "kafka-streams-exactly-once-1s"),
    ("eos-exactly-once", "pyflink-exactly-once"),
    ("eos-exactly-once", "faust-exactly-once"),
]


def _system_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    failed = [r for r in rows if r.get("error") and "throughput" not in r]
    wrong = [r for r in rows if not r["verified"] and r not in failed]
    xs = [r["throughput"] for r in rows if r["verified"] and "throughput" in r]
    out: dict[str, Any] = {
        "guarantee": rows[0]["guarantee"], "rounds": len(rows),
        "verified_rounds": sum(1 for r in rows if r["verified"]),
        "duplicates": sum(int(r.get("duplicated", 0)) for r in rows),
        "status": "failed" if failed else "wrong" if wrong else "ok",
        "errors": sorted({r["error"] for r in rows if r.get("error")}),
        "throughputs": [r.get("throughput") for r in rows],
    }
    out.update(more.cpu_medians(rows))
    if out["status"] == "ok" and xs:
        med = statistics.median(xs)
        out.update(median=round(med, 1), min=min(xs), max=max(xs),
                   spread=round((max(xs) - min(xs)) / med, 3) if med else None)
    return out


def _paired(rows: list[dict[str, Any]], num: str, den: str) -> dict[str, Any]:
    """The ratio round by round: both sides of a round ran next to each other, so drift
    between rounds cancels; its range says how sure the median ratio is."""
    return _by_round(rows, num, den, lambda r: r.get("throughput"), "paired")


def _by_round(rows: list[dict[str, Any]], num: str, den: str,
              value: Callable[[dict[str, Any]], float | None], name: str) -> dict[str, Any]:
    """``num``'s ``value`` over ``den``'s, round by round: ``<name>_median`` and its range,
    over the rounds where both sides have a value."""
    by_round: dict[int, dict[str, float]] = {}
    for r in rows:
        v = value(r) if r["system"] in (num, den) else None
        if v is not None:
            by_round.setdefault(r["round"], {})[r["system"]] = v
    xs = [round(t[num] / t[den], 3) for t in by_round.values() if num in t and den in t and t[den]]
    if not xs:
        return {}
    per_round = "per_round" if name == "paired" else f"{name}_per_round"
    return {per_round: xs, f"{name}_median": round(statistics.median(xs), 3),
            f"{name}_min": min(xs), f"{name}_max": max(xs)}


def summarize(runs: list[dict[str, Any]], skipped: dict[str, str]) -> dict[str, Any]:
    """Per workload: each system's summary, and the ratios of ranked systems' medians
    (throughput runs only)."""
    runs = [r for r in runs if r.get("measure", "throughput") == "throughput"]
    out: dict[str, Any] = {}
    for workload in dict.fromkeys(r["workload"] for r in runs):
        mine = [r for r in runs if r["workload"] == workload]
        systems = {s: _system_summary([r for r in mine if r["system"] == s])
                   for s in dict.fromkeys(r["system"] for r in mine)}
        ratios = []
        for num, den in RATIOS:
            if num in skipped or den in skipped or num not in systems or den not in systems:
                continue
            a, b = systems[num].get("median"), systems[den].get("median")
            ratios.append({"numerator": num, "denominator": den,
                           "ratio": round(a / b, 3) if a and b else None,
                           "why_none": None if a and b else "a side is not ranked "
                                                            "(failed or wrong)",
                           **(_paired(mine, num, den) if a and b else {}),
                           **(_by_round(mine, num, den, more.cpu_per_result, "cpu")
                              if a and b else {})})
        out[workload] = {"unit": mine[0]["unit"], "systems": systems, "ratios": ratios}
    return out


#: The throughput bars' file, beside the report.
THROUGHPUT_PLOT = "throughput.png"


def summarized(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with every summary and the targets' verdicts worked out from its runs
    (and skips) again: what ``eos bench`` writes, and ``--report-from`` rewrites."""
    runs, skipped = result["runs"], result.get("skipped", {})
    result.update(summary=summarize(runs, skipped), latency=more.summarize_latency(runs),
                  recovery=more.summarize_recovery(runs), memory=more.summarize_memory(runs),
                  checkpoints=more.summarize_checkpoints(runs))
    result["targets"] = targets.judge(result)
    return result


def load_results(path: Path) -> dict[str, Any]:
    """A bench's results.json (``path``, or the directory holding it), checked enough to
    say what is wrong with one that is not."""
    file = path / "results.json" if path.is_dir() else path
    try:
        result = json.loads(file.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {file}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{file} is not JSON ({exc})") from None
    missing = [k for k in ("benchmark", "settings", "runs", "machine", "command", "started")
               if not isinstance(result, dict) or k not in result]
    if missing or result.get("benchmark") != "eos bench":
        raise ValueError(f"{file} is not an eos bench results.json"
                         + (f" (no {', '.join(missing)})" if missing else ""))
    return result


def write_report(result: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """results.json, report.md and a plot per measure that ran (``png``: throughput)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "results.json", "markdown": out_dir / "report.md"}
    paths["json"].write_text(json.dumps(result, indent=2) + "\n")
    if result["summary"]:
        paths["png"] = out_dir / THROUGHPUT_PLOT
        _plot(result, paths["png"])
    for key, name, plot in (("latency", "latency_cdf.png", more.plot_latency),
                            ("recovery", "recovery.png", more.plot_recovery),
                            ("memory", "memory.png", more.plot_memory)):
        if result.get(key):
            paths[key] = out_dir / name
            plot(result[key], paths[key])
    paths["markdown"].write_text(markdown(result, THROUGHPUT_PLOT))
    return paths


def _fmt(x: float | None, digits: int = 0) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def rounds_text(rounds: int | dict[str, int]) -> str:
    """"3 rounds", "1 round", or per measure: "rounds: throughput 5, latency 3"."""
    if isinstance(rounds, dict) and len(set(rounds.values())) == 1:
        rounds = next(iter(rounds.values()))
    if isinstance(rounds, int):
        return f"{rounds} round{'s' * (rounds != 1)}"
    return "rounds: " + ", ".join(f"{m} {n}" for m, n in rounds.items())


def bursts_text(settings: dict[str, Any]) -> str:
    """A throughput burst's input records: --records, or each workload's own (a results
    file of a bench before the per-workload default has only ``records``)."""
    if settings.get("records") is not None:
        return f"{settings['records']:,} input records per run"
    per = ", ".join(f"{w} {n:,}" for w, n in settings.get("bursts", {}).items())
    return f"input records per burst: {per}"


def markdown(result: dict[str, Any], plot_name: str) -> str:
    s = result["settings"]
    lines = [
        "# eos bench", "",
        f"`{result['command']}`", "",
        f"{result['started']}; {result['machine']['cpus']} cores, Python "
        f"{result['machine']['python']}; Kafka at {s['bootstrap_servers']}; "
        f"{bursts_text(s)}, {rounds_text(s['rounds'])}, "
        f"{s['partitions']} partitions, commit interval {s['commit_interval']:g} s. "
        + ", ".join(f"{k} {v}" for k, v in result.get("versions", {}).items()) + ".", "",
        "Throughput: the oracle's results per second, from the first input record's broker "
        "append to the moment the complete answer was visible to a read_committed reader. "
        "Median over rounds; spread = (max − min) / median. A system is ranked only if "
        "every round's output matched the oracle. CPU per result: the CPU time of the "
        "system's processes (not the broker's) from the burst until the answer was "
        "complete, over the results; median over rounds.", "",
        f"![throughput]({plot_name})", ""]
    if not result["summary"]:
        lines = lines[:6]   # nothing measured for throughput: no such section
    if not result.get("complete", True):
        lines += [f"**Incomplete**: the bench stopped after {len(result['runs'])} run(s); "
                  f"this report holds what they measured.", ""]
    if result.get("targets"):
        lines += targets.markdown_section(result["targets"])
    for workload, w in result["summary"].items():
        unit = w["unit"]
        lines += [f"## {workload}", ""]
        if workload == "wordcount" and s.get("vocabulary"):
            lines += [f"Input: {s['vocabulary']['text']}.", ""]
        one = unit[:-1] if unit.endswith('s') else unit
        lines += [f"| system | guarantee | median {unit}/s | min – max | spread | CPU µs per "
                  f"{one} | the broker's CPU µs per {one} | verified rounds | "
                  f"duplicates | status |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for name, st in w["systems"].items():
            rng = (f"{_fmt(st.get('min'))} – {_fmt(st.get('max'))}" if "median" in st else "–")
            spread = f"{st['spread']:.0%}" if st.get("spread") is not None else "–"
            status = st["status"] if st["status"] == "ok" else \
                f"**{st['status']}**: {'; '.join(st['errors'])[:200]}"
            lines.append(f"| {name} | {st['guarantee']} | {_fmt(st.get('median'))} | {rng} | "
                         f"{spread} | {_fmt(st.get('cpu_us_per_result'), 1)} | "
                         f"{_fmt(st.get('broker_cpu_us_per_result'), 1)} | "
                         f"{st['verified_rounds']}/{st['rounds']} | "
                         f"{st['duplicates']:,} | {status} |")
        if w["ratios"]:
            lines += ["", "| ratio | of medians | per round: median (min – max) |",
                      "|---|---|---|"]
            for r in w["ratios"]:
                if r["ratio"] is None:
                    lines.append(f"| {r['numerator']} / {r['denominator']} | – | "
                                 f"{r['why_none']} |")
                    continue
                paired = (f"{r['paired_median']:.2f} ({r['paired_min']:.2f} – "
                          f"{r['paired_max']:.2f})" if "paired_median" in r else "–")
                lines.append(f"| {r['numerator']} / {r['denominator']} | {r['ratio']:.2f} | "
                             f"{paired} |")
        lines.append("")
    lines += more.markdown_sections(result)
    lines += windows.markdown_section(result.get("runs", []))
    if result["skipped"]:
        lines += ["## Skipped", ""]
        lines += [f"- {name}: {why}" for name, why in result["skipped"].items()]
        lines.append("")
    return "\n".join(lines)


def _plot(result: dict[str, Any], path: Path) -> None:
    plt = more.pyplot()
    summary = result["summary"]
    # wide enough per system that its two-line label does not run into the next one's
    each = max([4.5] + [1.0 * len(w["systems"]) for w in summary.values()])
    fig, axes = plt.subplots(1, max(len(summary), 1), figsize=(each * max(len(summary), 1), 3.6),
                             squeeze=False)
    for ax, (workload, w) in zip(axes[0], summary.items(), strict=False):
        names = list(w["systems"])
        for i, name in enumerate(names):
            st = w["systems"][name]
            if "median" in st:
                ax.bar(i, st["median"], width=0.6, alpha=0.5,
                       yerr=[[st["median"] - st["min"]], [st["max"] - st["median"]]], capsize=4)
                ys = [x for x in st["throughputs"] if x is not None]
                ax.scatter([i] * len(ys), ys, s=12, color="black", zorder=3)
            else:
                ax.text(i, 0, st["status"], ha="center", va="bottom", color="red", rotation=90)
        ax.set_xticks(range(len(names)), [n.replace("-", "\n", 1) for n in names], fontsize=7)
        ax.set_ylabel(f"{w['unit']} / s")
        ax.set_title(workload, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
