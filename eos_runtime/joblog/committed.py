"""Reading a sink's output as committed: what each result looks like to a reader.

On Kafka this is a read_committed consumer: the sink's transactions decide. On the local
log, which has no transactions, an exactly-once sink's commit records list the offset
ranges each checkpoint made visible (``ChangeLogCommit.output_ranges``); the committed
reader shows exactly the records inside those ranges, so output of a crashed or fenced
attempt stays invisible, as aborted transactions do on Kafka. An at-least-once job's
output is every record its sink wrote, on both transports: on Kafka it is not written in
transactions either, so a read_committed reader sees all of it.
"""

from __future__ import annotations

import bisect
import time

from ..errors import EosError, OffsetOutOfRange
from ..protocol import wire
from ..protocol.recovery import merged_ranges
from ..protocol.runs import guarantee_named
from ..transport import OLDEST, Record, TopicPartition, Transport
from .control import ControlLog

__all__ = ["read_topic", "committed_ranges", "read_output"]


def read_topic(transport: Transport, topic: str, *, read_committed: bool = True,
               timeout: float = 60.0) -> list[Record]:
    """Every record of ``topic`` up to its current end, partition by partition."""
    parts = transport.describe(topic).partitions
    tps = [TopicPartition(topic, p) for p in range(parts)]
    ends = {tp: transport.watermarks(tp, read_committed=read_committed)[1] for tp in tps}
    out: list[Record] = []
    with transport.consumer(read_committed=read_committed) as c:
        c.assign({tp: transport.resolve(tp, OLDEST) for tp in tps})
        deadline = time.monotonic() + timeout
        while any(c.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise EosError(f"reading {topic!r} timed out before its end offsets {ends}")
            for r in c.poll(50_000, 0.5):
                if r.offset < ends[TopicPartition(r.topic, r.partition)]:
                    out.append(r)
    out.sort(key=lambda r: (r.partition, r.offset))
    return out


def committed_ranges(transport: Transport, changelog_topic: str,
                     topic: str) -> dict[int, list[tuple[int, int]]]:
    """Per partition of ``topic``: the [first, last] offset ranges sink commits made visible,
    sorted and disjoint. A snapshot's commit repeats the ranges of the commits before it
    (recovery C9), which may be deleted while this reads: then it reads again."""
    try:
        records = read_topic(transport, changelog_topic)
    except OffsetOutOfRange:
        records = read_topic(transport, changelog_topic)
    found: list[wire.OutputRange] = []
    for r in records:
        rec = wire.decode_changelog(r.value, topic=r.topic, partition=r.partition, offset=r.offset)
        if isinstance(rec, wire.ChangeLogCommit):
            found.extend(rng for rng in rec.output_ranges if rng.topic == topic)
    ranges: dict[int, list[tuple[int, int]]] = {}
    for rng in merged_ranges(found):
        ranges.setdefault(rng.partition, []).append((rng.first, rng.last))
    return ranges


def read_output(transport: Transport, topic: str, *, job: str | None = None,
                committed: bool = True) -> list[Record]:
    """The sink output of ``topic`` as a reader sees it.

    ``committed`` on Kafka: read_committed. On the local log (``job`` required): for an
    exactly-once job only records inside the committed ranges of its sink; for an
    at-least-once job every record. ``committed=False``: everything.
    """
    if not committed:
        return read_topic(transport, topic, read_committed=False)
    if transport.supports_transactions:
        return read_topic(transport, topic, read_committed=True)
    if job is None:
        raise EosError(f"the local log has no transactions: reading {topic!r} as committed needs "
                       f"the job whose sink wrote it (--job)")
    guarantee = ControlLog(transport, job).guarantee()
    if guarantee is not None and not guarantee_named(guarantee).output_ranges(False):
        # Its change-log producer is unfenced and appends on its own once a batch is
        # full, and several sink tasks share a partition: a checkpoint's output is not
        # one run of offsets, so its commit record's ranges miss some and cover others'.
        # Nothing of it was ever meant to be hidden: a replay duplicates, it never aborts.
        return read_topic(transport, topic)
    ranges = committed_ranges(transport, f"{job}.changelog", topic)
    firsts = {p: [f for f, _ in rs] for p, rs in ranges.items()}
    keep = []
    for r in read_topic(transport, topic):
        i = bisect.bisect_right(firsts.get(r.partition, ()), r.offset) - 1
        if i >= 0 and r.offset <= ranges[r.partition][i][1]:
            keep.append(r)
    return keep
