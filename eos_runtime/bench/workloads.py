"""Bench workloads: a seeded input, an oracle, and the dataflow each system runs.

Generators and oracles are those of ``eos experiment`` where one exists
(``experiments/workloads.py``), so the bench and the fault experiments agree on what a
correct answer is; wordcount's lines are ``vocabulary.py``'s (a Zipf vocabulary by
default, or ``eos experiment``'s small one). Every workload's sink writes utf8 keys and
utf8 values. A workload may read tables beside its source (``tables``): topics the bench
writes before the system starts, untimed.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..api import Pipeline
from ..experiments.workloads import (
    Expected,
    page_views,
    pageviews_expected,
    pageviews_pipeline,
    word_lines,
    wordcount_expected,
    wordcount_pipeline,
)
from ..runtime.outputs import kafka_partition
from ..transport import Record
from . import windows
from .vocabulary import Vocabulary

__all__ = ["BenchWorkload", "WORKLOADS", "InputRecord", "expected_pairs", "Probe",
           "aggregate_input", "aggregate_keys", "aggregate_pipeline", "enrich_pipeline",
           "ENRICH_USERS", "ENRICH_ROWS", "NO_ROW", "wordcount", "with_vocabulary"]

#: Input records of a burst, where a record makes one result (--records' default).
DEFAULT_BURST = 800_000
#: Wordcount's burst, in lines: eight words a line on the default text.
WORDCOUNT_BURST = 100_000

InputRecord = tuple[bytes | None, bytes]     # (key, value) as the source topic holds it
#: A probe: its input record, and the key of the one output record it makes.
Probe = tuple[InputRecord, bytes]


def _no_tables() -> dict[str, list[InputRecord]]:
    return {}


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
    # other result has, so its output is found and timed (bench/latency.py). None: the
    # workload cannot have one (windows: a record's event time must fit its place), and
    # its steady runs are timed by ``measure_output`` alone.
    probe: Callable[[int], Probe] | None
    # The part of an output value the oracle fixes (None: all of it); the rest is the
    # oracle's ``check``'s to judge, after the run.
    value_part: Callable[[bytes], bytes] | None = None
    # The source partition of a record among N (None: record i goes to partition i mod N).
    partition: Callable[[InputRecord, int], int] | None = None
    # The tables the pipeline reads beside its source: per topic (as the pipeline names
    # it), its keyed records, written before the system starts, each key in the partition
    # Kafka's default partitioner gives it. Fixed, so the oracle knows every row.
    tables: Callable[[], dict[str, list[InputRecord]]] = _no_tables
    # A measure of the run's own, from (bootstrap, source topic, partitions, the output
    # read, the visibility samples): entries for its row (windows: the window-close
    # latency, bench/windows.py).
    measure_output: Callable[[str, str, int, list[Record], list[tuple[int, list[int]]]],
                             dict[str, Any]] | None = None
    # Input records of a throughput burst when --records is not given: about 800 000
    # results for every workload, so that on a fast machine each burst still spans many
    # commit intervals (100 000 views took 1.5 s on one: its ratio measured the interval).
    burst: int = DEFAULT_BURST


def expected_pairs(expected: Expected) -> Counter[tuple[bytes, bytes]]:
    """The oracle's results as the sink's bytes (of ``value_part`` where the workload has
    one): what the output watch ticks off."""
    return Counter((str(k).encode(), str(v).encode())
                   for k, vs in expected.results.items() for v in vs)


# --------------------------------------------------------------------------- wordcount



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


def aggregate_input(records: int, keys: int, seed: int) -> list[InputRecord]:
    """``records`` events, each of a key drawn uniformly from a space of ``keys``: the
    state the aggregate keeps is as many counts as distinct keys drawn (at two records a
    key, 86 % of the space)."""
    draw = random.Random(seed).randrange
    return [(None, b"k%09d" % draw(keys)) for _ in range(records)]


def _accounts(n: int, seed: int) -> list[InputRecord]:
    # Every key about twice: state grows with the input, to millions of keys for a few
    # million records.
    return aggregate_input(n, aggregate_keys(n), seed)


def _account(value: str) -> str:
    return value


def aggregate_pipeline() -> Pipeline:
    """A count per key over a key space as large as the input: state that grows."""
    pipeline = Pipeline("aggregate", processing_guarantee="exactly-once", commit_interval=1.0,
                        parallelism=2)
    (pipeline.source("events", value="utf8")
        .key_by(_account)
        .count()
        .sink("counts", key="utf8", value="json"))
    return pipeline


# --------------------------------------------------------------------------- enrich

#: Users the enrich workload's clicks come from; the users table has rows for the first
#: ENRICH_ROWS of them only, so a fifth of the clicks find no row, ever.
ENRICH_USERS = 5000
ENRICH_ROWS = 4000
#: An enriched click's row part when its user has no row (or none read yet).
NO_ROW = "-"
_TIERS = ("free", "plus", "pro")


def _user_name(i: int) -> str:
    return f"u{i:04d}"


def _users_table() -> dict[str, list[InputRecord]]:
    return {"users": [(_user_name(i).encode(),
                       _compact({"name": f"n{i:04d}", "tier": _TIERS[i % len(_TIERS)]}))
                      for i in range(ENRICH_ROWS)]}


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _row_text(row: dict[str, Any] | None) -> str:
    return NO_ROW if row is None else f"{row['name']}:{row['tier']}"


def _rows() -> dict[str, str]:
    """The row part an enriched click of each user with a row must carry."""
    return {(k or b"").decode(): _row_text(json.loads(v)) for k, v in _users_table()["users"]}


def _clicks(n: int, seed: int) -> list[InputRecord]:
    rng = random.Random(f"enrich:{seed}")
    return [(None, _compact({"click": i, "user": _user_name(rng.randrange(ENRICH_USERS))}))
            for i in range(n)]


def _click_user(click: dict[str, Any]) -> str:
    return str(click["user"])


def _clicks_partition(record: InputRecord, partitions: int) -> int:
    # Where a keyed producer would put the click of its user: every click of a user in one
    # partition, so in order (the oracle checks each user's clicks in the order made);
    # the table's rows of that user are in the same partition.
    return kafka_partition(_click_user(json.loads(record[1])).encode(), partitions)


def _click_id(value: str) -> str:
    return value.split("|", 1)[0]


def _enrich_oracle(records: list[InputRecord]) -> Expected:
    """Per user, each of its clicks exactly once, in the order made; each with the user's
    own row or with none: a lookup sees the table as far as the job has read it, and a
    first run reads the table beside the clicks. Never another user's row."""
    clicks: dict[str, list[str]] = {}
    for _, value in records:
        click = json.loads(value)
        clicks.setdefault(_click_user(click), []).append(str(click["click"]))
    rows = _rows()

    def check(user: Any, values: list[Any]) -> list[str]:
        allowed = {rows.get(user, NO_ROW), NO_ROW}
        return [f"click {value!r} of {user!r}: its row should be {rows.get(user, NO_ROW)!r} "
                f"or {NO_ROW!r}" for value in values
                if str(value).partition("|")[2] not in allowed]
    return Expected(clicks, identity=_click_id, check=check)


def _click_probe(i: int) -> Probe:
    # a user of its own, with no row: its one result is keyed by it
    user = f"probe{i:07d}"
    return (None, _compact({"click": f"p{i}", "user": user})), user.encode()


def _enriched(click: dict[str, Any], row: dict[str, Any] | None) -> str:
    return f"{click['click']}|{_row_text(row)}"


def _click_part(value: bytes) -> bytes:
    # "click|row": the row depends on how far the table was read; the click does not
    return value.split(b"|", 1)[0]


def enrich_pipeline() -> Pipeline:
    """Each click with its user's row from a users table: a stream-table lookup, left join,
    keyed by user."""
    pipeline = Pipeline("enrich", processing_guarantee="exactly-once", commit_interval=1.0,
                        parallelism=2)
    users = pipeline.table("users", key="utf8", value="json")
    (pipeline.source("clicks", value="json")
        .lookup(users, on=_click_user, how="left", join=_enriched)
        .sink("enriched-clicks", key="utf8", value="utf8"))
    return pipeline


def wordcount(vocabulary: Vocabulary) -> BenchWorkload:
    """The wordcount workload on lines of ``vocabulary``'s words."""
    def lines(n: int, seed: int) -> list[InputRecord]:
        return [(None, line.encode()) for line in vocabulary.lines(n, seed)]
    return BenchWorkload(
        "wordcount", "split lines, shuffle by word, count per word (examples/wordcount.py); "
        + vocabulary.describe(), "words", lines, _wordcount_oracle, wordcount_pipeline,
        ("split", "count"), _word_probe, burst=WORDCOUNT_BURST)


def with_vocabulary(vocabulary: Vocabulary) -> dict[str, BenchWorkload]:
    """``WORKLOADS``, with wordcount's lines from ``vocabulary``."""
    return {**WORKLOADS, "wordcount": wordcount(vocabulary)}


WORKLOADS: dict[str, BenchWorkload] = {
    "wordcount": wordcount(Vocabulary()),
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
    "enrich": BenchWorkload(
        "enrich", "clicks joined with their user's row from a users table topic "
        "(stream-table lookup, left join; 4 000 of 5 000 users have rows)",
        "clicks", _clicks, _enrich_oracle, enrich_pipeline, ("clicks-by-user", "enrich"),
        _click_probe, value_part=_click_part, partition=_clicks_partition,
        tables=_users_table),
    "windows": BenchWorkload(
        "windows", f"views per page per tumbling {windows.WINDOW_MS / 1000:g} s window, final "
        f"(grace {windows.GRACE_MS / 1000:g} s), event time from the view, out of order by up "
        f"to {windows.JITTER_MS} ms, keyed by page; each window's count once, when it closes",
        "windows", windows.views, windows.windows_oracle, windows.windows_pipeline, (),
        None, value_part=windows.window_part, partition=windows.view_partition,
        measure_output=windows.close_latency),
}
