"""Inputs and independent oracles for the example pipelines: what the committed output must
be, computed from the input alone, and record-by-record checks of real output. The input
generators are the experiments' own (``eos_runtime.experiments.workloads``)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from itertools import accumulate, pairwise

from eos_runtime.experiments.workloads import WORDS, page_views, word_lines
from eos_runtime.transport import TopicSpec, Transport

__all__ = ["WORDS", "word_lines", "page_views", "produce", "check_wordcount_exactly_once",
           "check_wordcount_at_least_once", "check_pageviews_exactly_once", "encode_lines",
           "encode_views"]


def produce(transport: Transport, topic: str, values: list[bytes], partitions: int = 2) -> None:
    transport.create_topics([TopicSpec(topic, partitions)])
    with transport.producer() as p:
        for i, v in enumerate(values):
            p.produce(topic, i % partitions, v)
        p.flush()


def by_key_in_offset_order(records) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        out[r.key.decode()].append(r.value.decode())
    return out


def check_wordcount_exactly_once(records, lines: list[str]) -> None:
    """Each word seen n times has exactly the values "1".."n", in that order."""
    want = Counter(w for line in lines for w in line.split())
    got = by_key_in_offset_order(records)
    assert set(got) == set(want), f"words differ: {set(got) ^ set(want)}"
    for word, n in want.items():
        assert got[word] == [str(i) for i in range(1, n + 1)], (
            f"{word!r}: expected 1..{n}, got {len(got[word])} values starting {got[word][:12]}")


def check_wordcount_at_least_once(records, lines: list[str]) -> int:
    """Nothing lost: for a word seen n times every count 1..n appears (a replayed input
    counts again, so counts may go past n). Returns how many records are duplicates."""
    want = Counter(w for line in lines for w in line.split())
    got = by_key_in_offset_order(records)
    assert set(got) == set(want)
    dups = 0
    for word, n in want.items():
        values = [int(v) for v in got[word]]
        assert set(values) >= set(range(1, n + 1)), f"{word!r}: lost counts"
        dups += len(values) - n
    return dups


def check_pageviews_exactly_once(records, views: list[dict]) -> None:
    """Per page: views 1..n in order, and every record's visitor count one that the page's
    views give in some order.

    The exact visitor counts are not a function of the input: the last stage merges its
    producers' records in the order they arrive. What every order keeps, record by
    record: a user's first view of a page reaches the page's task before the user's other
    views of it (one task handles the user, one channel carries the page), so the count
    starts at 1, grows by 0 or 1 per view, ends at the page's distinct users, and after k
    views with v visitors the k - v repeat views fit those v users: at most the repeats
    of the v users who viewed the page most."""
    users: dict[str, Counter] = defaultdict(Counter)
    for v in views:
        users[v["page"]][v["user"]] += 1
    got = by_key_in_offset_order(records)
    assert set(got) == set(users), f"pages differ: {set(got) ^ set(users)}"
    for page, seen in users.items():
        n = sum(seen.values())
        pairs = [tuple(map(int, x.split(":"))) for x in got[page]]
        assert [p[0] for p in pairs] == list(range(1, n + 1)), f"{page}: views {pairs[:10]}"
        counts = [0] + [p[1] for p in pairs]
        # most repeat views v visitors can have made: v = 0, 1, ..., distinct users
        repeats = list(accumulate(sorted((c - 1 for c in seen.values()), reverse=True),
                                  initial=0))
        for k, (before, after) in enumerate(pairwise(counts), 1):
            assert after - before in (0, 1), f"{page}: visitors {before} -> {after} at view {k}"
            assert k - after <= repeats[min(after, len(seen))], (
                f"{page}: {after} visitors after {k} views, but those can have made at most "
                f"{repeats[min(after, len(seen))]} repeat views")
        assert counts[-1] == len(seen), f"{page}: {counts[-1]} visitors, expected {len(seen)}"


def encode_lines(lines: list[str]) -> list[bytes]:
    return [line.encode() for line in lines]


def encode_views(views: list[dict]) -> list[bytes]:
    return [json.dumps(v).encode() for v in views]
