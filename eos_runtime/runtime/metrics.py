"""Per-checkpoint metrics of a task, as Flink shows them: how long each checkpoint took,
how long its alignment waited, how late its first marker arrived, what it buffered and
wrote. They go to the task's stats (``eos run --json``) as distributions.

A run can take a checkpoint a second for days, so a distribution keeps a bounded sample:
past ``KEEP`` values it keeps every other one and samples at half the rate from then on.
Count, mean and max stay exact; the percentiles come from the sample.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["Distribution", "CheckpointMetrics", "METRICS"]

#: name -> what it measures (docs/cli.md lists the same).
METRICS = {
    "duration_ms": "the five checkpoint steps, from output flush to markers sent",
    "flush_ms": "step 1 alone: the channels flushed, the sink output handed on",
    "changelog_ms": "step 2 alone: the state's changes (or a snapshot) produced",
    "commit_ms": "step 3 alone: the commit record written and sealed (a transaction commit "
                 "on Kafka)",
    "store_ms": "step 4 alone: the RocksDB batch written",
    "markers_ms": "step 5 alone: the markers handed to the producer, waited for at the run's "
                  "end (a snapshot's cut included)",
    "cpu_ms": "the task thread's CPU over the steps (librdkafka's threads and the broker's "
              "not counted)",
    "alignment_ms": "from the first marker of the checkpoint read to the checkpoint taken "
                    "(exactly-once tasks with input channels)",
    "start_delay_ms": "from that first marker's timestamp (its producer's commit) to it being "
                      "read",
    "buffered_bytes": "early arrivals held in the buffer when the checkpoint was taken",
    "changelog_bytes": "state changes the checkpoint wrote to the change log",
}

KEEP = 2048


class Distribution:
    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.max = -math.inf
        self._sample: list[float] = []
        self._stride = 1

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.max = max(self.max, value)
        if (self.count - 1) % self._stride == 0:
            self._sample.append(value)
            if len(self._sample) >= KEEP:
                self._sample = self._sample[::2]
                self._stride *= 2

    def percentile(self, q: float) -> float:
        ordered = sorted(self._sample)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def summary(self) -> dict[str, float]:
        return {"count": self.count, "mean": round(self.total / self.count, 3),
                "p50": round(self.percentile(0.50), 3), "p90": round(self.percentile(0.90), 3),
                "p99": round(self.percentile(0.99), 3), "max": round(self.max, 3)}


class CheckpointMetrics:
    def __init__(self) -> None:
        self._by_name = {name: Distribution() for name in METRICS}

    def record(self, **values: float | None) -> None:
        for name, value in values.items():
            if value is not None:
                self._by_name[name].add(value)

    def summary(self) -> dict[str, Any]:
        """Only the metrics the task measured (a source has no alignment)."""
        return {name: d.summary() for name, d in self._by_name.items() if d.count}
