"""The input of a multi-run experiment, per topic it goes to: each run's share, what an
``append`` adds, and the writing of both into the topics and into the model.

A one-source workload's values go round robin into its source (value i to partition
i % partitions), as ever. A graph workload's ``feed`` says, value by value, which topic
and partition each record goes to (clickstream: a user's table rows and clicks each in
one partition, so in the order made); every topic's records are split over the runs in
that order. An append takes the next records meant for the held task's partitions and
leaves the others for later, so each partition still receives its records in order:
timestamps grow along every partition (a timestamp Startpoint names one), and the ends a
schedule's offsets are checked against stay lower bounds of what each run finds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..transport import open_transport
from .scenario import InputModel, Inputs
from .scenario_plan import segment_sizes
from .setup import job_topic
from .workloads import Workload

__all__ = ["PlannedInput"]


@dataclass(frozen=True)
class _Record:
    index: int              # of the generated value: its timestamp is stamp0 + index
    partition: int | None   # None: round robin (a one-source workload's values)
    key: bytes | None
    value: bytes | None


class PlannedInput:
    """The records still to write, per topic (as the run's job names it), in order."""

    def __init__(self, w: Workload, pipeline: Any, values: list[Any], lines: int,
                 job: str, transport_name: str) -> None:
        self.values, self.lines = values, lines
        self.partitions = w.source_partitions
        self.stream = pipeline.sources[0].topic   # the one an operator's action names
        self.queues: dict[str, list[_Record]] = {}
        if w.feed is None:
            payloads = w.input_bytes(values, pipeline)
            self.queues[self.stream] = [_Record(i, None, None, b)
                                        for i, b in enumerate(payloads)]
            return
        for t in [s.topic for s in pipeline.sources] + [t.topic for t in pipeline.tables]:
            self.queues[t] = []
        for i, v in enumerate(values):   # value by value: which record of a topic it made
            for topic, records in w.feed([v]).items():
                queue = self.queues[job_topic(topic, job, transport_name)]
                queue += [_Record(i, p, k, b) for p, k, b in records]

    def model(self) -> Inputs:
        return Inputs({t: InputModel(self.partitions) for t in self.queues}, self.stream)

    def planned(self, topic: str) -> list[_Record]:
        return [r for r in self.queues[topic] if r.index < self.lines]

    def sizes(self, runs: int) -> dict[str, list[int]]:
        """Each topic's share of the planned input (``--lines`` values) per run."""
        return {t: segment_sizes(len(self.planned(t)), runs) for t in self.queues}

    def stream_partitions(self) -> list[int]:
        """The partition of each planned record of the stream, in order (what the
        offsets of a Startpoint or a checkpoint write are drawn from and checked against)."""
        return [self._partition(r, None, 0) for r in self.planned(self.stream)]

    def _partition(self, r: _Record, partitions: list[int] | None, k: int) -> int:
        if r.partition is not None:
            return r.partition
        if partitions is None:
            return r.index % self.partitions
        return partitions[k % len(partitions)]

    def write(self, opts: dict[str, Any], model: Inputs, stamp0: int, topic: str, count: int,
              partitions: list[int] | None = None) -> int:
        """The next ``count`` records of ``topic`` (only those meant for ``partitions``,
        when given; round-robin values go there in turn), into the topic and the model."""
        queue = self.queues[topic]
        take: list[int] = []
        for n, r in enumerate(queue):
            if len(take) == count:
                break
            if partitions is None or r.partition is None or r.partition in partitions:
                take.append(n)
        if not take:
            return 0
        with open_transport(**opts) as t, t.producer() as producer:
            for k, n in enumerate(take):
                r = queue[n]
                p = self._partition(r, partitions, k)
                producer.produce(topic, p, r.value, key=r.key, timestamp=stamp0 + r.index)
                model.models[topic].append(p, self.values[r.index], stamp0 + r.index)
            producer.flush()
        taken = set(take)
        self.queues[topic] = [r for n, r in enumerate(queue) if n not in taken]
        return len(take)
