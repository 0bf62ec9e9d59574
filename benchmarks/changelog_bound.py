"""The change log's bound, measured (issue 22, "idle jobs grow"; recovery C7-C9).

A real committer (``runtime/checkpoint.py``) of a stateful sink task on the local log or
Kafka, with its RocksDB store holding ``--keys`` keys, takes one idle checkpoint per
commit interval, as an idle exactly-once task does. Every ``--every`` checkpoints this
notes the change log's length and times the fold a recovery without a local store does
(``fold_log``). It runs twice in one go: with the bound (the default ``min_records``) and
without it (no snapshot ever: the log before the bound was built), side by side.

    .venv/bin/python benchmarks/changelog_bound.py                         # local log
    .venv/bin/python benchmarks/changelog_bound.py --bootstrap-servers 127.0.0.1:9092

Writes ``<out>/results.json`` and ``<out>/changelog-bound.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

from eos_runtime.api import Pipeline
from eos_runtime.joblog.changelog import fold_log
from eos_runtime.joblog.control import ControlLog
from eos_runtime.plan import plan_job
from eos_runtime.protocol.recovery import SNAPSHOT_MIN_RECORDS
from eos_runtime.protocol.runs import EXACTLY_ONCE, first_version
from eos_runtime.runner import create_job_topics
from eos_runtime.runtime.checkpoint import Committer
from eos_runtime.runtime.outputs import SinkWriter
from eos_runtime.runtime.task import TaskStats
from eos_runtime.state import TaskStore
from eos_runtime.transport import TopicPartition, TopicSpec, open_transport


def _identity(value):
    return value


def idle_task(opts: dict, work: Path, checkpoints: int, every: int, keys: int,
              min_records: int, say) -> list[dict]:
    name = f"bound-{uuid.uuid4().hex[:8]}"
    rows = []
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec(f"{name}.in", 1), TopicSpec(f"{name}.out", 1)])
        pipeline = Pipeline(name, processing_guarantee="exactly-once")
        (pipeline.source(f"{name}.in", value="utf8").key_by(_identity, partitions=1)
         .map(str).sink(f"{name}.out", value="utf8"))
        plan = plan_job(pipeline, t)
        create_job_topics(t, plan)
        ControlLog(t, name).start_run(plan, bounded=False)
        task = plan.stages[1].task_ids[0]
        stage = plan.stage_of(task)
        assert stage.sink is not None
        store = TaskStore(work / name, ["s"])
        c = Committer(t, plan, stage, task, 0, store, None,
                      [SinkWriter(stage.sink, stage.output_partitions)], None, TaskStats(task),
                      guarantee=EXACTLY_ONCE, snapshot_min_records=min_records)
        tp = TopicPartition(plan.changelog_topic, task)
        try:
            c.recover()
            for k in range(keys):
                store.put("s", b"key-%06d" % k, b"x" * 20)
            v0 = first_version(0)
            for i in range(1, checkpoints + 1):
                c.checkpoint(v0 + i * 1000, ())
                if i % every == 0:
                    low, high = t.watermarks(tp)
                    t0 = time.perf_counter()
                    fold = fold_log(t, tp)
                    seconds = time.perf_counter() - t0
                    assert fold.version == v0 + i * 1000
                    rows.append({"checkpoints": i, "log_records": high - low,
                                 "fold_seconds": round(seconds, 4),
                                 "cuts": c.stats.changelog_cuts})
                    say(f"  {i:8,d} checkpoints  log {high - low:8,d} records  "
                        f"fold {seconds:6.3f} s  cuts {c.stats.changelog_cuts}")
        finally:
            c.close()
            store.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap-servers", default=None)
    ap.add_argument("--checkpoints", type=int, default=86_400,
                    help="idle checkpoints (one a second: 86 400 is a day)")
    ap.add_argument("--every", type=int, default=4_320, help="sample every N checkpoints")
    ap.add_argument("--keys", type=int, default=1_000, help="keys in the task's state")
    ap.add_argument("--out", default="docs/bench/changelog-bound")
    args = ap.parse_args()

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    results = {}
    for label, min_records in (("with the bound", SNAPSHOT_MIN_RECORDS),
                               ("without (no snapshot)", 10**15)):
        say(label)
        work = Path(tempfile.mkdtemp(prefix="eos-bound-"))
        opts = ({"bootstrap_servers": args.bootstrap_servers} if args.bootstrap_servers
                else {"data_dir": str(work / "data")})
        results[label] = idle_task(opts, work, args.checkpoints, args.every, args.keys,
                                   min_records, say)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    transport = "kafka" if args.bootstrap_servers else "local"
    (out / "results.json").write_text(json.dumps(
        {"transport": transport, "keys": args.keys, "min_records": SNAPSHOT_MIN_RECORDS,
         "series": results}, indent=1) + "\n")
    import matplotlib  # lazy on purpose: only this report draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.5, 6), sharex=True)
    for label, rows in results.items():
        hours = [r["checkpoints"] / 3600 for r in rows]
        top.plot(hours, [r["log_records"] for r in rows], "o-", label=label, markersize=3)
        bottom.plot(hours, [r["fold_seconds"] for r in rows], "o-", label=label, markersize=3)
    top.set_ylabel("change-log records")
    bottom.set_ylabel("recovery fold without\na local store (s)")
    bottom.set_xlabel("idle age (hours at one checkpoint a second)")
    top.set_title(f"An idle exactly-once task, {transport}, {args.keys:,} keys of state")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "changelog-bound.png", dpi=110)


if __name__ == "__main__":
    main()
