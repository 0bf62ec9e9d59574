"""Reading a partition's newest records first: the control topic's last run, a task's last
checkpoint. These logs only grow (the local log never compacts, nor does Kafka's active
segment), so a query about the newest record reads from the tail backwards, in windows
that double, and stops at the first window that answers it."""

from __future__ import annotations

import time
from collections.abc import Iterator

from ..errors import TopicNotFound, TransportError
from ..transport import Record, TopicPartition, Transport


def read_range(transport: Transport, tp: TopicPartition, start: int, end: int, *,
               read_committed: bool = False, timeout: float = 60.0) -> list[Record]:
    """The records of ``tp`` at offsets ``start``..``end - 1``, oldest first."""
    out: list[Record] = []
    if end <= start:
        return out
    with transport.consumer(read_committed=read_committed) as c:
        c.assign({tp: start})
        deadline = time.monotonic() + timeout
        while c.position(tp) < end:
            if time.monotonic() > deadline:
                raise TransportError(f"reading {tp.topic!r} timed out at "
                                     f"{c.position(tp)} of {end}")
            for r in c.poll(10_000, 0.5):
                if r.offset < end:
                    out.append(r)
    return out


def backwards(transport: Transport, tp: TopicPartition, *, first: int,
              read_committed: bool = False) -> Iterator[list[Record]]:
    """Windows of ``tp``'s records from its end towards its start, each window oldest
    first and twice the size of the one before (nothing if the topic does not exist)."""
    try:
        # describe first: a look-up of a missing topic's watermarks may wait on Kafka
        transport.describe(tp.topic)
        low, high = transport.watermarks(tp, read_committed=read_committed)
    except TopicNotFound:
        return
    size, end = first, high
    while end > low:
        start = max(low, end - size)
        yield read_range(transport, tp, start, end, read_committed=read_committed)
        end, size = start, size * 2
