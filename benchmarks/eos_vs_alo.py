"""Word count, exactly-once against at-least-once, side by side on the same transport.

Runs alternate (EOS, ALO, EOS, ALO, ...) so drift of the machine hits both modes alike.
Each run is a fresh job over the same generated input. Throughput is input lines per
second of the slowest task's own run time (Spark start-up excluded; the wall time with
start-up is recorded too). Writes ``benchmarks/results/eos_vs_alo.json`` and a plot
``benchmarks/results/eos_vs_alo.png``. Measured, never asserted.

    .venv/bin/python benchmarks/eos_vs_alo.py --lines 100000 --rounds 3
    .venv/bin/python benchmarks/eos_vs_alo.py --bootstrap-servers 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from eos_runtime.demo import generate_words
from eos_runtime.joblog.committed import read_output
from eos_runtime.runner import load_pipeline, run_pipeline
from eos_runtime.transport import TopicSpec, open_transport

ROOT = Path(__file__).resolve().parent
EXAMPLE = ROOT.parent / "examples" / "wordcount.py"


def one_run(opts: dict, lines: list[bytes], guarantee: str, commit_interval: float) -> dict:
    suffix = uuid.uuid4().hex[:8]
    pipeline = load_pipeline(EXAMPLE)
    pipeline.rename(f"bench-{suffix}", source=f"bench-lines-{suffix}",
                    sink=f"bench-counts-{suffix}")
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec(pipeline.source_topic, 2)])
        with t.producer() as p:
            for i, line in enumerate(lines):
                p.produce(pipeline.source_topic, i % 2, line)
            p.flush()
    started = time.monotonic()
    summary = run_pipeline(pipeline, guarantee=guarantee, commit_interval=commit_interval, **opts)
    wall = time.monotonic() - started
    with open_transport(**opts) as t:
        out = read_output(t, pipeline.sink_topic, job=pipeline.name)
    words = sum(len(line.split()) for line in lines)
    return {"guarantee": guarantee, "lines": len(lines), "task_seconds": summary.task_seconds,
            "wall_seconds": round(wall, 3),
            "lines_per_second": round(len(lines) / summary.task_seconds, 1),
            "output_records": len(out), "duplicates": len(out) - words,
            "checkpoints": sum(t["checkpoints"] for t in summary.tasks)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--commit-interval", type=float, default=1.0)
    ap.add_argument("--bootstrap-servers", default=None, help="Kafka; default: the local log")
    ap.add_argument("--out", default=str(ROOT / "results" / "eos_vs_alo"))
    args = ap.parse_args()
    opts = ({"bootstrap_servers": args.bootstrap_servers} if args.bootstrap_servers
            else {"data_dir": tempfile.mkdtemp(prefix="eos-bench-")})
    lines = [line.encode() for line in generate_words(args.lines, seed=1)]
    runs = []
    for r in range(args.rounds):
        for guarantee in ("exactly-once", "at-least-once"):
            res = one_run(opts, lines, guarantee, args.commit_interval)
            res["round"] = r
            runs.append(res)
            print(f"round {r} {guarantee:14s} {res['lines_per_second']:>10.0f} lines/s "
                  f"({res['task_seconds']:.2f}s in tasks, {res['wall_seconds']:.1f}s wall) "
                  f"duplicates={res['duplicates']}", file=sys.stderr)
    med = {g: statistics.median(x["lines_per_second"] for x in runs if x["guarantee"] == g)
           for g in ("exactly-once", "at-least-once")}
    result = {
        "benchmark": "wordcount exactly-once vs at-least-once",
        "transport": "kafka" if args.bootstrap_servers else "local",
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "lines": args.lines, "rounds": args.rounds, "commit_interval": args.commit_interval,
        "median_lines_per_second": med,
        "eos_to_alo_ratio": round(med["exactly-once"] / med["at-least-once"], 3),
        "runs": runs,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    plot(result, out.with_suffix(".png"))
    print(json.dumps({k: result[k] for k in ("transport", "median_lines_per_second",
                                              "eos_to_alo_ratio")}))
    return 0


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, g in enumerate(("exactly-once", "at-least-once")):
        ys = [r["lines_per_second"] for r in result["runs"] if r["guarantee"] == g]
        ax.scatter([i] * len(ys), ys, alpha=0.6)
        ax.bar(i, result["median_lines_per_second"][g], alpha=0.3, width=0.5)
    ax.set_xticks([0, 1], ["exactly-once", "at-least-once"])
    ax.set_ylabel("input lines / s (task time)")
    ax.set_title(f"wordcount on {result['transport']}: EOS/ALO = {result['eos_to_alo_ratio']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
