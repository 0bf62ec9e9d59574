"""A bench workload as a PyFlink job: the PyFlink peer of ``eos bench``.

    python pyflink_app.py WORKLOAD --bootstrap-servers B --name RUN --source TOPIC \
        --sink TOPIC --parallelism N --checkpoint-interval-ms MS --checkpoint-dir DIR \
        --connector JAR

It runs on PyFlink's own interpreter (bench/pyflink_peer.py installs it on first use), so
it imports nothing of eos_runtime. One local Flink (the MiniCluster PyFlink starts in its
JVM), every operator at ``--parallelism``, written with PyFlink's DataStream API the way
its documentation shows a user to: a ``KafkaSource`` from the earliest offset, Python
functions (Flink's default process mode: Python workers beside the JVM), keyed state in
Flink's default state backend (on the heap), checkpoints ``EXACTLY_ONCE`` every
``--checkpoint-interval-ms`` into files under ``--checkpoint-dir``.

The sink is Flink's Kafka connector with ``sink.delivery-guarantee = exactly-once`` and
the run's name as its transactional id prefix: it builds a ``KafkaSink`` with
``DeliveryGuarantee.EXACTLY_ONCE``, writing in a transaction committed when a checkpoint
completes. It is declared through the Table API because PyFlink's DataStream
``KafkaRecordSerializationSchema`` serializes a record's key from the whole element (only
Java code could make the key one field of it); the table connector's ``key.fields``
does, so the counts land keyed by word as every other system's do.

    wordcount, aggregate  split each line on spaces, key by word, a running count in a
                          ValueState, each count out keyed by its word
    pageviews             key by user, a MapState of the pages each user has seen marks a
                          view a page's new visitor or not, key by page, "views:visitors"

Prints "ready" once Flink's REST API (on a free loopback port) shows every task of the job
RUNNING; ends on SIGTERM, cancelling the job; exits 1 when the job fails.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["main"]

WORKLOADS = ("wordcount", "aggregate", "pageviews")
# Flink's default for an exactly-once Kafka sink is an hour, more than a broker allows by
# default (transaction.max.timeout.ms, 15 min): its producers would not start.
TRANSACTION_TIMEOUT_MS = 600_000

# pyflink is in the peer's own venv only: imported when the job runs, so this module
# imports anywhere else (the project's venv, mypy)


def _functions() -> dict[str, Any]:
    from pyflink.common import Row, Types
    from pyflink.datastream import FlatMapFunction, KeyedProcessFunction, RuntimeContext
    from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

    class Split(FlatMapFunction):
        def flat_map(self, line: str) -> Any:
            yield from line.split()

    class Count(KeyedProcessFunction):
        def open(self, ctx: RuntimeContext) -> None:
            self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

        def process_element(self, word: str, ctx: Any) -> Any:
            n = (self.count.value() or 0) + 1
            self.count.update(n)
            yield Row(word, str(n))

    class FirstVisit(KeyedProcessFunction):
        """Per view, keyed by user: (page, 1) the first time the user views the page, else
        (page, 0)."""

        def open(self, ctx: RuntimeContext) -> None:
            self.seen = ctx.get_map_state(MapStateDescriptor("seen", Types.STRING(),
                                                             Types.BOOLEAN()))

        def process_element(self, view: Any, ctx: Any) -> Any:
            page = view[1]
            fresh = 0 if self.seen.contains(page) else 1
            if fresh:
                self.seen.put(page, True)
            yield Row(page, fresh)

    class PageTotal(KeyedProcessFunction):
        def open(self, ctx: RuntimeContext) -> None:
            self.total = ctx.get_state(ValueStateDescriptor(
                "total", Types.TUPLE([Types.LONG(), Types.LONG()])))

        def process_element(self, first: Any, ctx: Any) -> Any:
            views, visitors = self.total.value() or (0, 0)
            views, visitors = views + 1, visitors + first[1]
            self.total.update((views, visitors))
            yield Row(first[0], f"{views}:{visitors}")

    return {"split": Split, "count": Count, "first-visit": FirstVisit,
            "page-total": PageTotal}


def _user_page(value: str) -> Any:
    from pyflink.common import Row

    view = json.loads(value)
    return Row(view["user"], view["page"])


def _job(args: argparse.Namespace, rest_port: int) -> tuple[Any, Any]:
    """The job's environment and its result rows (key, value)."""
    from pyflink.common import Configuration, Types, WatermarkStrategy
    from pyflink.common.serialization import SimpleStringSchema
    from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
    from pyflink.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource

    config = Configuration()
    config.set_string("pipeline.jars", Path(args.connector).absolute().as_uri())
    # the Python workers run this interpreter (Flink's default is "python" on PATH)
    config.set_string("python.executable", sys.executable)
    config.set_string("python.client.executable", sys.executable)
    # the local Flink's REST API on a port of our own, on loopback: the driver reads the
    # job's tasks' states there
    config.set_string("rest.address", "127.0.0.1")
    config.set_string("rest.bind-address", "127.0.0.1")
    config.set_string("rest.port", str(rest_port))
    # Checkpoints in files, as Flink's documentation asks of any job with real state: the
    # default keeps them in the JobManager's memory, at most 5 MiB of state a task, and
    # past that (about 10^6 keys of the aggregate) every checkpoint failed, so the
    # transactional sink never committed again.
    config.set_string("execution.checkpointing.storage", "filesystem")
    config.set_string("execution.checkpointing.dir", Path(args.checkpoint_dir).absolute().as_uri())
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(args.parallelism)
    env.enable_checkpointing(args.checkpoint_interval_ms, CheckpointingMode.EXACTLY_ONCE)
    source = (KafkaSource.builder().set_bootstrap_servers(args.bootstrap_servers)
              .set_topics(args.source).set_group_id(args.name)
              .set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_value_only_deserializer(SimpleStringSchema()).build())
    lines = env.from_source(source, WatermarkStrategy.no_watermarks(), "source")
    fns = _functions()
    row = Types.ROW_NAMED(["k", "v"], [Types.STRING(), Types.STRING()])
    if args.workload in ("wordcount", "aggregate"):
        out = (lines.flat_map(fns["split"](), output_type=Types.STRING())
               .key_by(lambda word: word, key_type=Types.STRING())
               .process(fns["count"](), output_type=row))
    else:
        out = (lines.map(_user_page, output_type=Types.ROW([Types.STRING(), Types.STRING()]))
               .key_by(lambda view: view[0], key_type=Types.STRING())
               .process(fns["first-visit"](),
                        output_type=Types.ROW([Types.STRING(), Types.INT()]))
               .key_by(lambda first: first[0], key_type=Types.STRING())
               .process(fns["page-total"](), output_type=row))
    return env, out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tasks_running(port: int, job: str) -> bool:
    """Every task of the job is RUNNING (deployed, its operators open, the sources reading),
    as Flink's REST API says."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/jobs/{job}", timeout=5) as r:
            vertices = json.load(r)["vertices"]
    except (OSError, ValueError, KeyError):
        return False   # not up yet
    return bool(vertices) and all(v["status"] == "RUNNING" for v in vertices)


_SINK = """CREATE TABLE sink (k STRING, v STRING) WITH (
  'connector' = 'kafka', 'topic' = '{sink}', 'properties.bootstrap.servers' = '{servers}',
  'key.format' = 'raw', 'key.fields' = 'k', 'value.format' = 'raw',
  'value.fields-include' = 'EXCEPT_KEY',
  'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = '{name}',
  'properties.transaction.timeout.ms' = '{timeout}')"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=WORKLOADS)
    for name, kind in (("bootstrap-servers", str), ("name", str), ("source", str),
                       ("sink", str), ("parallelism", int), ("checkpoint-interval-ms", int),
                       ("checkpoint-dir", str), ("connector", str)):
        ap.add_argument(f"--{name}", type=kind, required=True)
    args = ap.parse_args(argv)
    from pyflink.table import StreamTableEnvironment

    rest_port = _free_port()
    env, out = _job(args, rest_port)
    t_env = StreamTableEnvironment.create(env)
    t_env.execute_sql(_SINK.format(sink=args.sink, servers=args.bootstrap_servers,
                                   name=args.name, timeout=TRANSACTION_TIMEOUT_MS))
    client = t_env.from_data_stream(out).execute_insert("sink").get_job_client()

    def cancel(_sig: int, _frame: Any) -> None:
        # a user's stop: cancel the job (its open transactions are aborted), then leave
        try:
            client.cancel().result()
        finally:
            sys.exit(0)

    signal.signal(signal.SIGTERM, cancel)
    said = False
    while True:
        status = str(client.get_job_status().result())
        if status in ("FAILED", "CANCELED", "FINISHED"):
            print(f"the job ended: {status}", file=sys.stderr)
            return 1
        if not said and _tasks_running(rest_port, str(client.get_job_id())):
            print("ready", flush=True)
            said = True
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
