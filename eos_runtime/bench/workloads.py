"""Bench workloads: a seeded input, an oracle, and the dataflow each system runs.

Generators and oracles are those of ``eos experiment`` where one exists
(``experiments/workloads.py``), so the bench and the fault experiments agree on what a
correct answer is. Every workload's sink writes utf8 keys and utf8 values.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from ..api import Pipeline
from ..experiments.workloads import (
    Expected,
    count,
    page_views,
    pageviews_expected,
    pageviews_pipeline,
    word_lines,
    wordcount_expected,
    wordcount_pipeline,
)

__all__ = ["BenchWorkload", "WORKLOADS", "InputRecord", "expected_pairs", "Probe",
           "aggregate_keys", "aggregate_pipeline"]

InputRecord = tuple[bytes | None, bytes]     # (key, value) as the source topic holds it
#: A probe: its input record, and the key of the one output record it makes.
Probe = tuple[InputRecord, bytes]


@dataclass(frozen=True)
class BenchWorkload:
    name: str
    description: str
    unit: str                                          # what one expected result stands for
    generate: Callable[[int, int], list[InputRecord]]  # (n, seed) -> the burst
    oracle: Callable[[list[InputRecord]], Expected]
    make_pipeline: Callable[[], Pipeline]              # the eos_runtime job (runs rename it)
    raw_stages: tuple[str, ...]                        # raw_dataflow's stages, in order
    # The i-th probe of a latency run: an input record whose one result has a key no
    # other result has, so its output is found and timed (bench/latency.py).
    probe: Callable[[int], Probe]
    # The part of an output value the oracle fixes (None: all of it); the rest is the
    # oracle's ``check``'s to judge, after the run.
    value_part: Callable[[bytes], bytes] | None = None


def expected_pairs(expected: Expected) -> Counter[tuple[bytes, bytes]]:
    """The oracle's results as the sink's bytes (of ``value_part`` where the workload has
    one): what the output watch ticks off."""
    return Counter((str(k).encode(), str(v).encode())
                   for k, vs in expected.results.items() for v in vs)


# --------------------------------------------------------------------------- wordcount

def _lines(n: int, seed: int) -> list[InputRecord]:
    return [(None, line.encode()) for line in word_lines(n, seed)]


def _wordcount_oracle(records: list[InputRecord]) -> Expected:
    return wordcount_expected([v.decode() for _, v in records])


def _word_probe(i: int) -> Probe:
    # a line of one word seen nowhere else: its one result is ("probe…", "1")
    word = f"probe{i:07d}".encode()
    return (None, word), word


# --------------------------------------------------------------------------- pageviews

def _views(n: int, seed: int) -> list[InputRecord]:
    return [(None, json.dumps(v, separators=(",", ":")).encode()) for v in page_views(n, seed)]


def _pageviews_oracle(records: list[InputRecord]) -> Expected:
    return pageviews_expected([json.loads(v) for _, v in records])


def _view_probe(i: int) -> Probe:
    page = f"/probe{i:07d}"
    return (None, json.dumps({"user": "u0", "page": page}, separators=(",", ":")).encode()), \
        page.encode()


def _views_part(value: bytes) -> bytes:
    # "views:visitors": the visitor count depends on the order a task merges its
    # producers' records; the views part does not
    return value.split(b":", 1)[0]


# --------------------------------------------------------------------------- passthrough

def _keyed_lines(n: int, seed: int) -> list[InputRecord]:
    # Unique keys make every output record checkable on its own, whatever partition
    # and order it lands in.
    return [(f"r{i:09d}".encode(), line.encode()) for i, line in enumerate(word_lines(n, seed))]


def _passthrough_oracle(records: list[InputRecord]) -> Expected:
    return Expected({(k or b"").decode(): [v.decode()] for k, v in records})


def _keyed_probe(i: int) -> Probe:
    key = f"probe{i:07d}".encode()
    return (key, b"probe"), key


def passthrough_pipeline() -> Pipeline:
    """Source to sink, no step: what the framework costs per record and nothing else."""
    pipeline = Pipeline("passthrough", processing_guarantee="exactly-once", commit_interval=1.0,
                        parallelism=2)
    (pipeline.source("records", key="utf8", value="utf8")
        .sink("records-out", key="utf8", value="utf8"))
    return pipeline


# --------------------------------------------------------------------------- aggregate

def aggregate_keys(records: int) -> int:
    """How many distinct keys an aggregate input of ``records`` records holds at most:
    the state the aggregate keeps (one count per key)."""
    return max(records // 2, 1)


def _accounts(n: int, seed: int) -> list[InputRecord]:
    # Every key about twice: state grows with the input, to millions of keys for a few
    # million records.
    rng = random.Random(seed)
    keys = aggregate_keys(n)
    return [(None, f"k{rng.randrange(keys):09d}".encode()) for _ in range(n)]


def _account(value: str) -> str:
    return value


def aggregate_pipeline() -> Pipeline:
    """A count per key over a key space as large as the input: state that grows."""
    pipeline = Pipeline("aggregate", processing_guarantee="exactly-once", commit_interval=1.0,
                        parallelism=2)
    (pipeline.source("events", value="utf8")
        .key_by(_account)
        .map(count, stateful=True)
        .sink("counts", key="utf8", value="utf8"))
    return pipeline


WORKLOADS: dict[str, BenchWorkload] = {
    "wordcount": BenchWorkload(
        "wordcount", "split lines, shuffle by word, count per word (examples/wordcount.py)",
        "words", _lines, _wordcount_oracle, wordcount_pipeline, ("split", "count"),
        _word_probe),
    "pageviews": BenchWorkload(
        "pageviews", "views by user, first visits per user, totals per page: three stages, "
        "state in two (examples/pageviews.py)",
        "views", _views, _pageviews_oracle, pageviews_pipeline,
        ("by-user", "first-visit", "page-total"), _view_probe, value_part=_views_part),
    "passthrough": BenchWorkload(
        "passthrough", "copy keyed records from source to sink: the stateless floor",
        "records", _keyed_lines, _passthrough_oracle, passthrough_pipeline, ("copy",),
        _keyed_probe),
    "aggregate": BenchWorkload(
        "aggregate", "a running count per key over a key space half as large as the input: "
        "state grows with it (the memory measurement's workload)",
        # one key per record: the oracle and raw stages of wordcount on one-word lines
        "events", _accounts, _wordcount_oracle, aggregate_pipeline, ("split", "count"),
        _word_probe),
}
