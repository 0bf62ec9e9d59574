"""A bench workload as a Quix Streams application: one process of its consumer group.

    python -m eos_runtime.bench.quix_app WORKLOAD --bootstrap-servers B --group G \
        --source TOPIC --sink TOPIC --guarantee exactly-once --commit-interval 1 \
        --state-dir DIR [--table TOPIC]

It runs on Quix's own interpreter (``--quix-python``), so it imports nothing of
eos_runtime. Written with Quix's own public API the way its documentation shows a user to, so the
peer is measured as its users run it: wordcount splits, regroups by word through
Quix's repartition topic and counts in its RocksDB state with change logs on;
aggregate is wordcount on one-word lines; pageviews regroups twice (by user, then by
page) with state after each; passthrough writes each record to the sink unchanged;
enrich regroups clicks by user and joins them with the users table (``--table``) by
``join_asof``, Quix's stream-table join, left: each click meets the user's latest row
appended before it, from the join's RocksDB store of the table. The table must be
co-partitioned with the regrouped clicks, and is: both by Kafka's default partitioner.
windows takes each view's event time from its ``ts`` (a timestamp extractor on the
topic) and counts the views of each page (the topic's key) in a tumbling window
(``--window-ms``, ``--grace-ms``) with ``.final()``: each window's count once, when it
closes (Quix's default closing strategy, per key: a page's later view closes its windows).
Ends on SIGTERM (Quix's own graceful stop).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["main"]


def _count(word: str, state: Any) -> str:
    n = state.get("count", 0) + 1
    state.set("count", n)
    return str(n)


def _word(word: str) -> str:
    return word


def _user(view: dict[str, str]) -> str:
    return view["user"]


def _page(visit: dict[str, Any]) -> str:
    return str(visit["page"])


def _first_visit(view: dict[str, str], state: Any) -> dict[str, Any]:
    pages = state.get("pages", [])
    new = view["page"] not in pages
    if new:
        state.set("pages", [*pages, view["page"]])
    return {"page": view["page"], "new_visitor": new}


def _page_total(visit: dict[str, Any], state: Any) -> str:
    views = state.get("views", 0) + 1
    visitors = state.get("visitors", 0) + (1 if visit["new_visitor"] else 0)
    state.set("views", views)
    state.set("visitors", visitors)
    return f"{views}:{visitors}"


def _view_time(value: Any, headers: Any, timestamp: int, timestamp_type: Any) -> int:
    return int(value["ts"])


def _click_user(click: dict[str, Any]) -> str:
    return str(click["user"])


def _enriched(click: dict[str, Any], row: dict[str, Any] | None) -> str:
    part = "-" if row is None else f"{row['name']}:{row['tier']}"
    return f"{click['click']}|{part}"


def main(argv: list[str] | None = None) -> int:
    # quixstreams is in the peer's own venv only: imported when the app runs, so this module
    # imports anywhere else (the project's venv, mypy)
    from quixstreams import Application

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=["wordcount", "pageviews", "passthrough", "aggregate",
                                         "enrich", "windows"])
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--guarantee", choices=["exactly-once", "at-least-once"], required=True)
    ap.add_argument("--commit-interval", type=float, required=True)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--table", default=None, help="enrich: the users table's topic")
    ap.add_argument("--window-ms", type=int, default=1000, help="windows: the window's size")
    ap.add_argument("--grace-ms", type=int, default=0, help="windows: its grace")
    args = ap.parse_args(argv)
    if (args.workload == "enrich") != (args.table is not None):
        ap.error("--table goes with the enrich workload, and only with it")

    app = Application(broker_address=args.bootstrap_servers, consumer_group=args.group,
                      auto_offset_reset="earliest", processing_guarantee=args.guarantee,
                      commit_interval=args.commit_interval, state_dir=args.state_dir,
                      loglevel="WARNING")
    sink = app.topic(args.sink, key_serializer="str", value_serializer="str")
    if args.workload in ("wordcount", "aggregate"):   # aggregate: one word per line
        source = app.topic(args.source, key_deserializer="bytes", value_deserializer="str")
        sdf = app.dataframe(source)
        sdf = sdf.apply(str.split, expand=True)
        sdf = sdf.group_by(_word, name="word")
        sdf = sdf.apply(_count, stateful=True)
    elif args.workload == "pageviews":
        source = app.topic(args.source, key_deserializer="bytes", value_deserializer="json")
        sdf = app.dataframe(source)
        sdf = sdf.group_by(_user, name="user")
        sdf = sdf.apply(_first_visit, stateful=True)
        sdf = sdf.group_by(_page, name="page")
        sdf = sdf.apply(_page_total, stateful=True)
    elif args.workload == "enrich":
        source = app.topic(args.source, key_deserializer="bytes", value_deserializer="json")
        users = app.dataframe(app.topic(args.table, key_deserializer="str",
                                        value_deserializer="json"))
        # str keys: the regrouped clicks land where the table's rows of their user are
        sdf = app.dataframe(source).group_by(_click_user, name="user", key_serializer="str",
                                             key_deserializer="str")
        sdf = sdf.join_asof(users, how="left", on_merge=_enriched)
    elif args.workload == "windows":
        source = app.topic(args.source, key_deserializer="str", value_deserializer="json",
                           timestamp_extractor=_view_time)
        sink = app.topic(args.sink, key_serializer="str", value_serializer="json")
        sdf = app.dataframe(source).tumbling_window(args.window_ms, grace_ms=args.grace_ms)
        sdf = sdf.count().final()
    else:
        source = app.topic(args.source, key_deserializer="str", value_deserializer="str")
        sdf = app.dataframe(source)
    sdf.to_topic(sink)
    app.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
