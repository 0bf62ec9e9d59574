"""Recovery time of an idle job's task against the job's age (issue 22, "idle jobs grow").

Under exactly-once an idle source task still takes a checkpoint every commit interval
(a channel task needs every producer's marker to commit, docs/protocol.md "Idle jobs"),
and each writes a commit record to its change-log partition, which nothing trims. A task
that recovers without a local store (a new host, lost state) folds the whole partition.
This writes the change log such a task leaves after an idle age (one commit record per
interval, shaped as a source task's: its input position, its output sequence numbers,
one fence) and times the fold of it, as recovery does.

    .venv/bin/python benchmarks/recovery_vs_age.py                       # local log
    .venv/bin/python benchmarks/recovery_vs_age.py --bootstrap-servers 127.0.0.1:9092

Writes ``<out>/results.json`` and ``<out>/recovery-vs-age.png``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path

from eos_runtime.joblog.changelog import fold_log
from eos_runtime.protocol import wire
from eos_runtime.protocol.runs import first_version
from eos_runtime.transport import TopicPartition, TopicSpec, open_transport

HOURS = (1, 6, 24, 72, 168)


def idle_log(transport, topic: str, commits: int, interval_ms: int) -> int:
    """``commits`` commit records of an idle source task; returns the log's bytes."""
    transport.create_topics([TopicSpec(topic, 1, keep_forever=True)])
    size = 0
    with transport.producer() as p:
        for i in range(commits):
            rec = wire.ChangeLogCommit(
                1, first_version(0) + i * interval_ms,
                outputs=(wire.OutputSeq("job.shuffle-1", 0, 1000),
                         wire.OutputSeq("job.shuffle-1", 1, 1000)),
                inputs=(wire.InputPosition("lines", 0, 50_000),),
                fences=(wire.ProducerFence(0, 1, 0),))
            raw = wire.encode(rec)
            size += len(raw)
            p.produce(topic, 0, raw)
            if i % 50_000 == 49_999:
                p.flush()
        p.flush()
    return size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap-servers", default=None)
    ap.add_argument("--interval", type=float, default=1.0, help="commit interval, seconds")
    ap.add_argument("--hours", default=",".join(map(str, HOURS)))
    ap.add_argument("--out", default="docs/bench/recovery-vs-age")
    args = ap.parse_args()
    opts = ({"bootstrap_servers": args.bootstrap_servers} if args.bootstrap_servers
            else {"data_dir": tempfile.mkdtemp(prefix="eos-age-")})
    rows = []
    with open_transport(**opts) as t:
        for hours in (float(h) for h in args.hours.split(",")):
            commits = int(hours * 3600 / args.interval)
            topic = f"age-{uuid.uuid4().hex[:6]}.changelog"
            size = idle_log(t, topic, commits, round(args.interval * 1000))
            t0 = time.perf_counter()
            fold = fold_log(t, TopicPartition(topic, 0))
            seconds = time.perf_counter() - t0
            assert fold.commit is not None
            rows.append({"hours": hours, "commit_records": commits, "bytes": size,
                         "fold_seconds": round(seconds, 3)})
            print(f"{hours:7.1f} h  {commits:9,d} commits  {size / 1e6:8.1f} MB  "
                  f"recovery fold {seconds:7.2f} s", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    transport = "kafka" if args.bootstrap_servers else "local"
    (out / "results.json").write_text(json.dumps(
        {"transport": transport, "interval_s": args.interval, "rows": rows}, indent=1) + "\n")
    import matplotlib  # lazy on purpose: only this report draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["hours"] for r in rows], [r["fold_seconds"] for r in rows], "o-")
    ax.set_xlabel("idle age of the job (hours, one commit per interval)")
    ax.set_ylabel("recovery fold without a local store (s)")
    ax.set_title(f"An idle task's change log, {transport}, {args.interval:g} s interval")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "recovery-vs-age.png", dpi=110)


if __name__ == "__main__":
    main()
