"""The raw dataflow: a workload written straight on confluent-kafka, with no guarantee.

One process per partition per stage, each reading one partition and producing per
record: what per-record Python costs on this machine, the floor a framework is measured
against. No checkpoints, no transactions, no state beyond a dict: a crash would lose or
repeat work, and nothing here pretends otherwise.

    python -m eos_runtime.bench.raw_dataflow STAGE --bootstrap-servers B \
        --input TOPIC --partition P --output TOPIC --output-partitions N [--table TOPIC]

Stages: ``split`` (a line into its words, keyed by word), ``count`` (a running count
per word, as eos_runtime's wordcount writes it), ``copy`` (the record as it came);
pageviews' ``by-user`` (a view keyed by its user), ``first-visit`` (per user, whether
the page is new to them, keyed by page) and ``page-total`` ("views:visitors" per page);
enrich's ``clicks-by-user`` (a click keyed by its user) and ``enrich`` ("click|name:tier"
from the user's row, "click|-" for a user without one). ``enrich`` first reads every
partition of ``--table`` to its end into a dict, every row in every process: the table's
partitioner (Kafka's murmur2) is not the shuffle's (crc32), and a few thousand rows cost
nothing worth sharing out; it does not follow the table after. The process prints
``ready`` once it is assigned and has polled once, and ends on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import uuid
import zlib
from collections.abc import Callable, Iterator

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

__all__ = ["STAGES", "LOOKS_UP", "main"]

Out = Iterator[tuple[bytes, bytes | None]]
Step = Callable[[bytes | None, bytes | None], Out]
#: A table topic's records (key, value), in the order read; a null value deletes the key.
TableRecords = list[tuple[bytes, bytes | None]]


def _split(key: bytes | None, value: bytes | None) -> Out:
    for word in (value or b"").split():
        yield word, word


def _counter() -> Callable[[bytes | None, bytes | None], Out]:
    counts: dict[bytes, int] = {}

    def count(key: bytes | None, value: bytes | None) -> Out:
        word = key or b""
        n = counts.get(word, 0) + 1
        counts[word] = n
        yield word, str(n).encode()
    return count


def _copy(key: bytes | None, value: bytes | None) -> Out:
    yield key or b"", value


def _by_user(key: bytes | None, value: bytes | None) -> Out:
    view = json.loads(value or b"{}")
    yield view["user"].encode(), view["page"].encode()


def _first_visits() -> Callable[[bytes | None, bytes | None], Out]:
    pages: dict[bytes, set[bytes]] = {}

    def first_visit(key: bytes | None, value: bytes | None) -> Out:
        seen = pages.setdefault(key or b"", set())
        page = value or b""
        new = page not in seen
        seen.add(page)
        yield page, b"1" if new else b"0"
    return first_visit


def _page_totals() -> Callable[[bytes | None, bytes | None], Out]:
    totals: dict[bytes, tuple[int, int]] = {}

    def page_total(key: bytes | None, value: bytes | None) -> Out:
        page = key or b""
        views, visitors = totals.get(page, (0, 0))
        views, visitors = views + 1, visitors + (value == b"1")
        totals[page] = (views, visitors)
        yield page, f"{views}:{visitors}".encode()
    return page_total


def _click_by_user(key: bytes | None, value: bytes | None) -> Out:
    yield json.loads(value or b"{}")["user"].encode(), value


def _enricher(table: TableRecords) -> Step:
    rows: dict[bytes, dict[str, str]] = {}
    for row_key, row in table:
        if row is None:
            rows.pop(row_key, None)
        else:
            rows[row_key] = json.loads(row)

    def enrich(key: bytes | None, value: bytes | None) -> Out:
        click = json.loads(value or b"{}")
        row = rows.get(key or b"")
        part = "-" if row is None else f"{row['name']}:{row['tier']}"
        yield key or b"", f"{click['click']}|{part}".encode()
    return enrich


#: Each stage's step, made from the records of the table it looks up (none for most).
STAGES: dict[str, Callable[[TableRecords], Step]] = {
    "split": lambda _: _split, "count": lambda _: _counter(), "copy": lambda _: _copy,
    "by-user": lambda _: _by_user, "first-visit": lambda _: _first_visits(),
    "page-total": lambda _: _page_totals(), "clicks-by-user": lambda _: _click_by_user,
    "enrich": _enricher,
}
#: The stages that look a table up, and need ``--table``.
LOOKS_UP = {"enrich"}


def _read_table(bootstrap: str, topic: str) -> TableRecords:
    """Every record of ``topic``, each partition read to its end as it is now."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    try:
        parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in parts}
        left = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in left])
        records: TableRecords = []
        deadline = time.monotonic() + 60
        while left:
            if time.monotonic() > deadline:
                raise SystemExit(f"table {topic!r}: partitions {sorted(left)} not read to "
                                 f"their end in 60 s")
            for m in consumer.consume(10_000, 1.0):
                if m.error() is not None:
                    continue
                records.append((m.key() or b"", m.value()))
                if (m.offset() or 0) + 1 >= ends[m.partition() or 0]:
                    left.discard(m.partition() or 0)
        return records
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=sorted(STAGES))
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--partition", type=int, required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--output-partitions", type=int, required=True)
    ap.add_argument("--table", default=None, help="the table topic the stage looks up")
    args = ap.parse_args(argv)
    if (args.stage in LOOKS_UP) != (args.table is not None):
        ap.error(f"stage {args.stage} {'needs' if args.stage in LOOKS_UP else 'takes no'} "
                 f"--table")

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    step = STAGES[args.stage](_read_table(args.bootstrap_servers, args.table)
                              if args.table else [])
    parts = args.output_partitions
    out_topic = args.output
    consumer = Consumer({"bootstrap.servers": args.bootstrap_servers,
                         "group.id": f"raw-{uuid.uuid4()}", "enable.auto.commit": False,
                         "enable.partition.eof": False})
    producer = Producer({"bootstrap.servers": args.bootstrap_servers, "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000})
    consumer.assign([TopicPartition(args.input, args.partition, OFFSET_BEGINNING)])
    consumer.consume(1, 0.5)
    print("ready", flush=True)
    produce = producer.produce
    consume = consumer.consume
    while not stopping:
        # consume(n, t) waits all of t unless n records come: take what is fetched, else
        # wait for the first record only
        batch = consume(10_000, 0) or consume(1, 0.2)
        for m in batch:
            if m.error() is not None:
                continue
            for key, value in step(m.key(), m.value()):
                # crc32, not hash(): the partition must be the same in every process
                part = zlib.crc32(key) % parts
                while True:
                    try:
                        # positional, as eos_runtime's producer calls it: the client
                        # parses keywords on every call
                        produce(out_topic, value, key, part)
                        break
                    except BufferError:
                        producer.poll(0.05)
        producer.poll(0)
    producer.flush(10)
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
