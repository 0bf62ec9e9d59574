"""The burst producer: a process of its own, so the bench's reading threads cannot slow it.

    python -m eos_runtime.bench.burst --bootstrap-servers B --topic T --partitions N FILE

FILE holds the records (msgpack: a list of [key, value], or of [key, value, partition]).
The process loads them, connects, prints ``ready``; on a line ``go`` on stdin it produces
record i into its partition (i mod N where the record names none) as fast as the client
goes, waits for every acknowledgement and prints
``done SECONDS`` (or ``failed REASON``). A producer much faster than the systems under
test keeps the burst a burst: the systems then work through a backlog, not at the
producer's pace.

With ``--rate R`` it is the steady input of a latency run instead: record i is due
i / R seconds after ``go``. The process wakes at most every ``SLICE`` seconds and
produces what is due, and the client batches as any client does by default
(``linger.ms`` 5): a record is appended a few milliseconds after it was due, and a
latency is timed from the append. Waking and sending for each record (``linger.ms`` 0)
cost this process a third of a core at 21 000 records/s and the broker a produce request
per record, on the cores the systems under test share.
"""

from __future__ import annotations

import sys
import time

import msgpack
from confluent_kafka import Producer

from .kafka import topic_process_arguments

__all__ = ["main", "SLICE"]

#: The steady input's pacing step: what fell due meanwhile goes out together.
SLICE = 0.001


def main(argv: list[str] | None = None) -> int:
    ap = topic_process_arguments(__doc__)
    ap.add_argument("--rate", type=float, default=None,
                    help="records per second, steadily (default: as fast as it goes)")
    args = ap.parse_args(argv)

    with open(args.file, "rb") as f:
        records = msgpack.unpackb(f.read(), raw=False)
    places = [r[2] if len(r) > 2 else j % args.partitions for j, r in enumerate(records)]
    failed: list[str] = []

    def report(err: object, _msg: object) -> None:
        if err is not None and len(failed) < 5:
            failed.append(str(err))

    p = Producer({"bootstrap.servers": args.bootstrap_servers, "linger.ms": 5,
                  "queue.buffering.max.messages": 2_000_000, "on_delivery": report})
    p.list_topics(args.topic, timeout=30)   # metadata before the clock starts
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1
    started = time.monotonic()
    produce, topic = p.produce, args.topic
    rate, total, i = args.rate, len(records), 0
    while i < total:
        upto = total
        if rate:
            ahead = started + i / rate - time.monotonic()
            if ahead > 0:
                p.poll(max(ahead, SLICE))   # serves delivery reports while it waits
            upto = min(total, int((time.monotonic() - started) * rate) + 1)
        for j in range(i, upto):
            key, value = records[j][0], records[j][1]
            while True:
                try:
                    produce(topic, value, key, places[j])
                    break
                except BufferError:   # the client's queue is full: let it send
                    p.poll(0.05)
        i = upto
    left = p.flush(60)
    if left or failed:
        print(f"failed {left} records undelivered, errors: {failed}", flush=True)
        return 1
    print(f"done {time.monotonic() - started:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
