"""A soak: an unbounded run fed at a rate for its duration, drained, then stopped; what
it was fed is read back from the source, so it is judged on what it was given."""

from __future__ import annotations

import threading
import time
from typing import Any

from ..errors import EosError
from ..joblog.committed import read_topic
from ..outage import is_transient
from ..transport import open_transport
from .setup import DRAIN_LIMIT

__all__ = ["Feeder", "soak_phase", "source_inputs", "graph_inputs", "Batch"]

#: One value's records as fed: (topic, partition, key, value) each.
Batch = list[tuple[str, int, bytes | None, bytes | None]]



def soak_phase(now: float, duration: float, arrived: int, committed: int,
               drain_started: float | None) -> str:
    """What a soak does next: ``feed`` until its duration is over; then ``drain`` until
    the sources' checkpoints committed every record that arrived (or DRAIN_LIMIT seconds
    went by: the verdict then shows what was not read); then ``stop``, a graceful stop,
    after which every record fed must be in the committed output."""
    if now < duration:
        return "feed"
    if committed >= arrived:
        return "stop"
    if drain_started is not None and now - drain_started >= DRAIN_LIMIT:
        return "stop"
    return "drain"


class Feeder:
    """Feeds a soak's input from a thread of its own at a steady rate: value i is due
    i / rate seconds after the start, until ``stop()`` or the values run out. A failed
    flush (a broker outage) is noted and fed on: librdkafka keeps the queued records and
    retries them, and a record it gave up on is simply not in the input, which is what the
    oracle is computed from (``source_inputs``, ``graph_inputs``).

    ``batches``: value i's records; with ``stamp0`` each is stamped stamp0 + i, which is
    how ``graph_inputs`` knows a graph's records again (a table's deletes are all alike)."""

    def __init__(self, opts: dict[str, Any], batches: list[Batch], rate: float,
                 stamp0: int | None = None) -> None:
        self.opts, self.batches, self.rate, self.stamp0 = opts, batches, rate, stamp0
        self.sent = 0                    # handed to the producer
        self.failed_flushes = 0
        self.error: str | None = None    # why it stopped early, if it did
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="eos-soak-feeder")

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = DRAIN_LIMIT) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            with open_transport(**self.opts) as t, t.producer() as producer:
                t0 = time.monotonic()
                while not self._stop.is_set() and self.sent < len(self.batches):
                    due = min(len(self.batches), int((time.monotonic() - t0) * self.rate) + 1)
                    for i in range(self.sent, due):
                        stamp = {} if self.stamp0 is None else {"timestamp": self.stamp0 + i}
                        for topic, partition, key, value in self.batches[i]:
                            producer.produce(topic, partition, value, key=key, **stamp)
                    self.sent = due
                    self._flush(producer, 10.0)
                    self._stop.wait(0.1)
                deadline = time.monotonic() + DRAIN_LIMIT
                while not self._flush(producer, 10.0) and time.monotonic() < deadline:
                    pass
        except EosError as exc:
            self.error = " ".join(str(exc).split())[:300]

    def _flush(self, producer: Any, timeout: float) -> bool:
        try:
            producer.flush(timeout)
            return True
        except EosError as exc:
            if not is_transient(exc):
                raise
            self.failed_flushes += 1
            return False


def source_inputs(transport: Any, topic: str, payloads: list[bytes],
                  values: list[Any]) -> list[Any]:
    """The values the source holds, in the order they were fed (partition by partition
    interleaved by offset): the input the soak's oracle is computed over, whatever an
    outage let through."""
    index = {payload: i for i, payload in reversed(list(enumerate(payloads)))}
    records = sorted(read_topic(transport, topic, read_committed=False),
                     key=lambda r: (r.offset, r.partition))
    out = []
    for r in records:
        i = index.get(r.value or b"")
        if i is None:
            raise EosError(f"{topic}[{r.partition}] offset {r.offset} holds a record the soak "
                           f"did not feed")
        out.append(values[i])
    return out


def graph_inputs(transport: Any, batches: list[Batch], values: list[Any],
                 stamp0: int) -> list[Any]:
    """The values whose records all reached their topics, in the order fed: a graph
    soak's input, which its sinks' oracles are computed over. Each record is known by its
    stamp (stamp0 + the value's index)."""
    arrived: dict[int, int] = {}
    for topic in dict.fromkeys(topic for batch in batches for topic, *_ in batch):
        for r in read_topic(transport, topic, read_committed=False):
            i = r.timestamp - stamp0
            if not 0 <= i < len(batches):
                raise EosError(f"{topic}[{r.partition}] offset {r.offset} holds a record the "
                               f"soak did not feed")
            arrived[i] = arrived.get(i, 0) + 1
    torn = [i for i, n in arrived.items() if n != len(batches[i])]
    if torn:
        raise EosError(f"value {torn[0]} of the soak's input reached its topics in part: "
                       f"{arrived[torn[0]]} of its {len(batches[torn[0]])} records")
    return [values[i] for i in sorted(arrived)]
