"""A bench workload as a Spark Structured Streaming query: the Spark peer's one process.

    python -m eos_runtime.bench.spark_app WORKLOAD --bootstrap-servers B --source TOPIC \
        --sink TOPIC --partitions N --commit-interval S --checkpoint DIR --jars J1,J2

Written with Spark's public API as its documentation shows a user to: the Kafka source,
a micro-batch every commit interval, the Kafka sink. Wordcount (and aggregate, one word
per line) splits lines, groups by word and counts with ``applyInPandasWithState``, the
state in Spark's RocksDB state store with change-log checkpointing on; it emits every
running count, as the other systems do (a streaming ``count()`` would emit only the last
per micro-batch). Passthrough writes each record to the sink unchanged. Windows takes
each view's event time from its ``ts``, ``withWatermark`` (the delay: ``--grace-ms``) and
counts per page per tumbling ``window`` (``--window-ms``) in output mode append: each
window once, after the watermark passes its end; written as JSON ``{"start", "end",
"value"}`` (ms) keyed by page, as the other systems write it. Spark's Kafka sink
is at-least-once, even in Spark 4.

Runs on ``local[*, 4]``: the machine's cores, and up to four attempts per task (Spark's
own retry, as on a cluster). Prints ``ready`` once its first micro-batch is done; ends
on SIGTERM (the query stopped, then Spark).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["main"]

# pyspark and pandas load when the application runs, not when the bench imports its
# modules


def _count(key: tuple[str], batches: Iterator[Any], state: Any) -> Iterator[Any]:
    import pandas as pd

    n = state.get[0] if state.exists else 0
    for batch in batches:
        size = len(batch)
        yield pd.DataFrame({"key": [key[0]] * size,
                            "value": [str(i) for i in range(n + 1, n + size + 1)]})
        n += size
    state.update((n,))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=["wordcount", "aggregate", "passthrough", "windows"])
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--commit-interval", type=float, required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--jars", required=True)
    ap.add_argument("--window-ms", type=int, default=1000, help="windows: the window's size")
    ap.add_argument("--grace-ms", type=int, default=0, help="windows: the watermark's delay")
    args = ap.parse_args(argv)

    # Spark's Python workers: this interpreter (pandas and pyarrow are in its venv), also
    # when a supervisor restarts the application with an environment of its own
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    spark = (SparkSession.builder.master("local[*, 4]").appName("eos-bench-spark")
             .config("spark.jars", args.jars)
             .config("spark.sql.shuffle.partitions", str(args.partitions))
             .config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
             .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
                     "true")
             .config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    source = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap_servers)
              .option("subscribe", args.source).option("startingOffsets", "earliest")
              .load())
    if args.workload == "passthrough":
        out = source.select("key", "value")
    elif args.workload == "windows":
        views = (source.select(F.from_json(F.col("value").cast("string"),
                                           "page string, ts long").alias("v"))
                 .select(F.col("v.page").alias("page"),
                         F.timestamp_millis(F.col("v.ts")).alias("t")))
        counts = (views.withWatermark("t", f"{args.grace_ms} milliseconds")
                  .groupBy(F.window("t", f"{args.window_ms} milliseconds"), "page").count())
        out = counts.select(F.col("page").alias("key"), F.to_json(F.struct(
            F.unix_millis(F.col("window.start")).alias("start"),
            F.unix_millis(F.col("window.end")).alias("end"),
            F.col("count").alias("value"))).alias("value"))
    else:
        words = source.select(F.explode(F.split(F.col("value").cast("string"), " "))
                              .alias("word")).where(F.col("word") != "")
        out = words.groupBy("word").applyInPandasWithState(
            _count, outputStructType="key string, value string",
            stateStructType="count long", outputMode="append",
            timeoutConf=GroupStateTimeout.NoTimeout)
    query = (out.writeStream.format("kafka")
             .option("kafka.bootstrap.servers", args.bootstrap_servers)
             .option("topic", args.sink).option("checkpointLocation", args.checkpoint)
             .trigger(processingTime=f"{args.commit_interval} seconds")
             .outputMode("append").start())
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    said = False
    while query.isActive and not stopping:
        if not said and query.lastProgress is not None:
            print("ready", flush=True)
            said = True
        time.sleep(0.1)
    failed = query.exception()
    query.stop()
    spark.stop()
    if failed is not None:
        print(f"query failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
