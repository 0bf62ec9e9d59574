"""A bench workload as a faust-streaming worker: one process of its consumer group.

    python faust_app.py WORKLOAD --bootstrap-servers B --group G --source TOPIC \
        --sink TOPIC --partitions N --commit-interval S --data-dir DIR

It runs on faust's own interpreter (bench/faust_peer.py installs it on first use), so it
imports nothing of eos_runtime. Written with faust's public API the way its documentation
shows a user to, with ``processing_guarantee="exactly_once"`` (transactional producers,
``read_committed`` consumers) and faust's default table store (in memory, backed by a
change-log topic). Wordcount (and aggregate: one word a line) is two agents, as faust
regroups: one splits lines and sends each word keyed by itself to a topic of the app's
own, the other counts words in a table (its partitions those of that topic) and sends each
running count to the sink. Passthrough sends each record to the sink unchanged. Offsets,
and with them the transactions, are committed every ``--commit-interval`` seconds
(faust's ``broker_commit_interval``). Ends on SIGTERM (faust's own graceful stop).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["main"]

# faust is in the peer's own venv only: imported when the worker runs, so this module
# imports anywhere else (the project's venv, mypy)


def _app(args: argparse.Namespace) -> Any:
    import faust

    app = faust.App(args.group, broker=f"kafka://{args.bootstrap_servers}",
                    processing_guarantee="exactly_once",
                    broker_commit_interval=args.commit_interval,
                    topic_partitions=args.partitions, datadir=args.data_dir,
                    web_enabled=False, consumer_auto_offset_reset="earliest")
    source = app.topic(args.source, key_serializer="raw", value_serializer="raw")
    sink = app.topic(args.sink, key_serializer="raw", value_serializer="raw")
    if args.workload == "passthrough":
        @app.agent(source, sink=None)
        async def copy(stream: Any) -> None:
            async for key, value in stream.items():
                await sink.send(key=key, value=value)
        return app
    words = app.topic(f"{args.group}-words", key_serializer="raw", value_serializer="raw",
                      partitions=args.partitions, internal=True)
    counts = app.Table("counts", default=int, partitions=args.partitions)

    @app.agent(source)
    async def split(lines: Any) -> None:
        async for line in lines:
            for word in line.split():
                await words.send(key=word, value=word)

    @app.agent(words)
    async def count(stream: Any) -> None:
        async for word in stream:
            # str keys: the table's change log is JSON, faust's default for tables
            key = word.decode()
            counts[key] += 1
            await sink.send(key=word, value=str(counts[key]).encode())
    return app


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=["wordcount", "aggregate", "passthrough"])
    for name, kind in (("bootstrap-servers", str), ("group", str), ("source", str),
                       ("sink", str), ("partitions", int), ("commit-interval", float),
                       ("data-dir", str)):
        ap.add_argument(f"--{name}", type=kind, required=True)
    args = ap.parse_args(argv)
    from faust import Worker

    Worker(_app(args), loglevel="warning", quiet=True).execute_from_commandline()
    return 0


if __name__ == "__main__":
    sys.exit(main())
