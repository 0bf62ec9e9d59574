"""What a workload of ``eos experiment`` is: its pipeline, its input and the oracle of its
output (``Expected``). The built-in workloads (``workloads.py``, ``window_workloads.py``)
and pipeline files are made of these; this module imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..api import FORMATS, Pipeline
from ..errors import ConfigError

__all__ = ["Expected", "Feed", "Workload", "encode_values"]


@dataclass(frozen=True)
class Expected:
    """The committed output a correct run must have.

    ``results``: per key, the values the sink must have written for it, in order (as
    ``identity`` maps them, when given). ``identity``: the part of a value that must
    match; the rest may differ between correct runs (the order in which a task merges
    its producers' records, say) and is checked by ``check(key, values)``, which gets a
    key's committed values in order and returns one line per value no correct run could
    have written. ``replayed(key, value)``: whether a value the oracle does not have is
    one that at-least-once can write, replaying input that a stateful step then counts
    again (a count past the true one); without it, at-least-once takes every such value
    of a known key for a replay. ``tolerated(key)``: a key whose results the workload's
    own ``judge`` counts (how many times it may be there is a range, not a list); the
    verifier leaves its values out of its own counts."""

    results: dict[Any, list[Any]]
    identity: Callable[[Any], Any] | None = None
    check: Callable[[Any, list[Any]], list[str]] | None = None
    replayed: Callable[[Any, Any], bool] | None = None
    tolerated: Callable[[Any], bool] | None = None


#: A graph workload's input: per topic, records (partition, key, value).
Feed = dict[str, list[tuple[int, bytes | None, bytes | None]]]


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    make_pipeline: Callable[[], Pipeline]              # a fresh Pipeline (runs rename it)
    generate: Callable[[int, int], list[Any]]          # (seed, n) -> source values
    oracle: Callable[[list[Any]], Expected]            # source values -> expected output
    source_partitions: int = 2
    origin: str = "built in"                           # or the pipeline file's path
    # which source values must end as dead letters (one each, and none of their output):
    # (source values) -> one bool per value; None: the workload has no bad records
    dead_letters: Callable[[list[Any]], list[bool]] | None = None
    # a chained workload: job B, whose source is this job's sink (``then()``: its
    # pipeline, reading the sink's topic), and the oracle of B's sink over this job's input
    then: Callable[[], Pipeline] | None = None
    then_oracle: Callable[[list[Any]], Expected] | None = None
    # a graph workload: its input per source (or table) topic, each record (partition,
    # key, value) (None: the values round robin into the one source), and the expected
    # output of each sink by its topic (None: ``oracle``'s, of the one sink)
    feed: Callable[[list[Any]], Feed] | None = None
    sinks_oracle: Callable[[list[Any]], dict[str, Expected]] | None = None
    # a judgment of its own beside the oracle's, merged into the verdict: (transport,
    # pipeline, job, source values, guarantee, marks per topic) -> Verdict (an event-time
    # workload's counts and late records: window_workloads.py)
    judge: Callable[..., Any] | None = None
    # fault kinds (and "soak") it cannot be judged under, with why: refused before a run
    refused: dict[str, str] = field(default_factory=dict)

    def input_bytes(self, values: Sequence[Any], pipeline: Pipeline) -> list[bytes]:
        return encode_values(values, pipeline)


def encode_values(values: Sequence[Any], pipeline: Pipeline) -> list[bytes]:
    """Source values as the pipeline's source format writes them."""
    start = pipeline.sources[0] if pipeline.sources else None
    if start is None:
        raise ConfigError(f"pipeline {pipeline.name!r} has no source")
    encode = FORMATS[start.value_format][0]
    return [encode(v) for v in values]
