"""The burst producer: a process of its own, so the bench's reading threads cannot slow it.

    python -m eos_runtime.bench.burst --bootstrap-servers B --topic T --partitions N FILE

FILE holds the records (msgpack: a list of [key, value]). The process loads them,
connects, prints ``ready``; on a line ``go`` on stdin it produces record i into partition
i mod N as fast as the client goes, waits for every acknowledgement and prints
``done SECONDS`` (or ``failed REASON``). A producer much faster than the systems under
test keeps the burst a burst: the systems then work through a backlog, not at the
producer's pace.

With ``--rate R`` it is the steady input of a latency run instead: record i is produced
at R records per second from ``go`` (i / R seconds after it), each sent at once
(``linger.ms`` 0), so a record's append time is when the load generator meant it.
"""

from __future__ import annotations

import sys
import time

import msgpack
from confluent_kafka import Producer

from .kafka import topic_process_arguments

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    ap = topic_process_arguments(__doc__)
    ap.add_argument("--rate", type=float, default=None,
                    help="records per second, steadily (default: as fast as it goes)")
    args = ap.parse_args(argv)

    with open(args.file, "rb") as f:
        records = msgpack.unpackb(f.read(), raw=False)
    failed: list[str] = []

    def report(err: object, _msg: object) -> None:
        if err is not None and len(failed) < 5:
            failed.append(str(err))

    p = Producer({"bootstrap.servers": args.bootstrap_servers,
                  "linger.ms": 0 if args.rate else 5,
                  "queue.buffering.max.messages": 2_000_000, "on_delivery": report})
    p.list_topics(args.topic, timeout=30)   # metadata before the clock starts
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1
    started = time.monotonic()
    produce, parts, topic = p.produce, args.partitions, args.topic
    rate = args.rate
    for i, (key, value) in enumerate(records):
        if rate:
            due = started + i / rate
            while (ahead := due - time.monotonic()) > 0:
                p.poll(ahead)   # serves delivery reports while it waits
        while True:
            try:
                produce(topic, value, key, i % parts)
                break
            except BufferError:   # the client's queue is full: let it send
                p.poll(0.05)
    left = p.flush(60)
    if left or failed:
        print(f"failed {left} records undelivered, errors: {failed}", flush=True)
        return 1
    print(f"done {time.monotonic() - started:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
