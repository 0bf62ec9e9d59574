"""Inputs and independent oracles for the example pipelines: what the committed output must
be, computed from the input alone, and record-by-record checks of real output.

The generators and oracles are the experiments' own (``eos_runtime.experiments.workloads``)
and the checks are its verifier's (``eos_runtime.experiments.verify``): tests and
``eos experiment`` judge output with one copy of the logic."""

from __future__ import annotations

import json

from eos_runtime.experiments.verify import Verdict, compare
from eos_runtime.experiments.workloads import (
    WORDS,
    Expected,
    page_views,
    pageviews_expected,
    word_lines,
    wordcount_expected,
)
from eos_runtime.transport import TopicSpec, Transport

__all__ = ["WORDS", "word_lines", "page_views", "produce", "run_by_count",
           "check_wordcount_exactly_once",
           "check_wordcount_at_least_once", "check_pageviews_exactly_once", "encode_lines",
           "encode_views", "run_until_a_result"]


def produce(transport: Transport, topic: str, values: list[bytes], partitions: int = 2) -> None:
    transport.create_topics([TopicSpec(topic, partitions)])
    with transport.producer() as p:
        for i, v in enumerate(values):
            p.produce(topic, i % partitions, v)
        p.flush()


def run_by_count(pipeline, tmp_path, opts: dict, guarantee: str = "exactly-once",
                 fault=None):
    """Run ``pipeline`` bounded with checkpoints by record count only (every 150 records,
    100 a poll, never by timer), so a crash point's hit means the same on a busy machine.

    Channels carry one message a record (``channel_batch=1``): a channel task's polls then
    read at most 16 records each, however far its producers ran ahead, so its
    ``task.mid_version`` is reached at least once per 16 records it reads. With batches,
    every record its producers sent may come in its first poll or two."""
    from eos_runtime.runner import run_pipeline

    return run_pipeline(pipeline, guarantee=guarantee, commit_every=150, commit_interval=1e9,
                        poll_records=100, channel_batch=1, state_dir=str(tmp_path / "state"),
                        fault=fault, **opts)


def _utf8(b: bytes) -> str:
    return b.decode()


def _verdict(expected: Expected, records, guarantee: str) -> Verdict:
    return compare(expected, records, guarantee, key_decode=_utf8, value_decode=_utf8)


def _explain(v: Verdict) -> str:
    return f"{', '.join(v.reasons())}; first keys: {v.bad_keys[:3]}"


def check_wordcount_exactly_once(records, lines: list[str]) -> None:
    """Each word seen n times has exactly the values "1".."n", in that order."""
    v = _verdict(wordcount_expected(lines), records, "exactly-once")
    assert v.passed, _explain(v)


def check_wordcount_at_least_once(records, lines: list[str]) -> int:
    """Nothing lost: for a word seen n times every count 1..n appears (a replayed input
    counts again, so counts may go past n). Returns how many records are duplicates."""
    v = _verdict(wordcount_expected(lines), records, "at-least-once")
    assert v.passed, _explain(v)
    return v.duplicated


def check_pageviews_exactly_once(records, views: list[dict]) -> None:
    """Per page: views 1..n in order, and every record's visitor count one that the page's
    views give in some order (``pageviews_expected`` says why that is all one can check)."""
    v = _verdict(pageviews_expected(views), records, "exactly-once")
    assert v.passed, _explain(v)


def encode_lines(lines: list[str]) -> list[bytes]:
    return [line.encode() for line in lines]


def encode_views(views: list[dict]) -> list[bytes]:
    return [json.dumps(v).encode() for v in views]


def run_until_a_result(pipeline, tmp_path, opts: dict, **options):
    """An unbounded run (commit interval 0.2 s) until its sink has a committed record,
    then stopped: for a result that must come while the run goes on (a window closed
    by the watermark), not only at its stop. ``options``: more of ``start_pipeline``'s
    (a ``fault``, say). Returns the run's summary."""
    import time

    from eos_runtime.runner import start_pipeline

    run = start_pipeline(pipeline, **opts, state_dir=str(tmp_path / "state"), bounded=False,
                         commit_interval=0.2, **options)
    try:
        deadline = time.monotonic() + 240   # a hang fails; a busy machine waits longer
        while run.progress()["sink_records"] < 1:
            assert time.monotonic() < deadline, f"no result committed: {run.progress()}"
            time.sleep(0.2)
    finally:
        run.stop("the test saw a result committed")
    return run.summary()
