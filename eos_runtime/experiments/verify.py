"""The verifier: committed output, read as a reader reads it, against a workload's oracle.

Per key it counts results

- **lost**: expected and missing;
- **duplicated**: expected, but there more often than expected;
- **unexpected**: no correct run writes them (a value the oracle does not have, a key it
  does not have, a value its ``check`` rejects);
- **out of order**: there once, but not in the oracle's order (the fewest results that
  would have to move).

Exactly-once passes only with zero of each. At-least-once passes with nothing lost and
no unexpected result; its duplicates are counted and reported. Under at-least-once a
result of a known key that the oracle does not have counts as a duplicate too when a
replay can write it (``Expected.replayed``): a replayed input that reaches a stateful step
again is counted again there (wordcount's "n+1" for a word seen n times), which is what
at-least-once does, not a failure of it. Any other value ("0", a word) is unexpected.

Reading is what a reader of the sink sees (``joblog/committed.read_output``: Kafka
read_committed, the local log's commit records). Then the raw topic, every record the
sink ever wrote, is read too: every committed record must be one of them, unchanged
(``phantom`` otherwise, a failure), and the raw records the committed view leaves out
(``hidden``: output of crashed or fenced attempts) are counted, with what the verdict on
the raw records would have been, so a report shows what the commit protocol kept from
the reader.

A correct reader makes no phantom: the committed view is read from the same records as
the raw one (on the local log a filter of them by the commit records' ranges, on Kafka
the same offsets read read_committed). ``phantom`` is the check on the reader itself: a
reader that returned a record from a wrong offset or with a changed value would
otherwise be believed (``tests/test_experiments.py`` feeds it one).
"""

from __future__ import annotations

import bisect
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from ..api import FORMATS
from ..errors import EosError
from ..joblog import committed as committed_log
from ..transport import Record, Transport
from .verdict import EXAMPLES, Verdict, since
from .workloads import Expected, hashable

__all__ = ["Verdict", "compare", "verify_output", "verify_sinks", "merge", "since",
           "check_dead_letters"]

def _longest_increasing(seq: list[int]) -> int:
    tails: list[int] = []
    for x in seq:
        i = bisect.bisect_left(tails, x)
        if i == len(tails):
            tails.append(x)
        else:
            tails[i] = x
    return len(tails)


def _decoded(records: Iterable[Record], key_decode: Callable[[bytes], Any] | None,
             value_decode: Callable[[bytes], Any]) -> tuple[dict[Any, list[Any]], list[str]]:
    """Values per key in the order a reader meets them (a key's results share a partition)."""
    by_key: dict[Any, list[Any]] = defaultdict(list)
    bad: list[str] = []
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        try:
            key = key_decode(r.key) if key_decode is not None and r.key is not None else None
            value = value_decode(r.value) if r.value is not None else None
        except Exception as exc:   # a result no oracle can expect, whatever the format raises
            bad.append(f"partition {r.partition} offset {r.offset}: does not decode ({exc})")
            continue
        by_key[hashable(key)].append(value)
    return by_key, bad


def compare(expected: Expected, records: Iterable[Record], guarantee: str, *,
            key_decode: Callable[[bytes], Any] | None,
            value_decode: Callable[[bytes], Any]) -> Verdict:
    """Count lost, duplicated, unexpected and out-of-order results of ``records``."""
    v = Verdict(guarantee)
    got, undecodable = _decoded(records, key_decode, value_decode)
    want = {hashable(k): [hashable(x) for x in xs] for k, xs in expected.results.items()}
    v.keys = len(want)
    v.expected = sum(len(xs) for xs in want.values())
    v.committed = sum(len(xs) for xs in got.values()) + len(undecodable)
    v.unexpected += len(undecodable)
    if undecodable:
        v.bad_keys.append({"key": None, "unexpected": len(undecodable),
                           "examples": undecodable[:EXAMPLES]})
    ident = expected.identity
    tolerated = expected.tolerated
    for key in sorted(set(want) | set(got), key=repr):
        values = got.get(key, [])
        if tolerated is not None and key not in want and tolerated(key):
            continue   # the workload's judge counts it
        if key not in want:
            v.unexpected_keys += 1
            v.unexpected += len(values)
            _note(v, key, {"unexpected": len(values), "examples": {
                "unexpected": [repr(x) for x in values[:EXAMPLES]]}})
            continue
        wanted = want[key]
        positions: dict[Any, list[int]] = defaultdict(list)
        for i, x in enumerate(wanted):
            positions[x].append(i)
        used: Counter[Any] = Counter()
        firsts: list[int] = []
        dup: list[Any] = []
        odd: list[Any] = []
        for value in values:
            try:
                x = hashable(ident(value)) if ident is not None else hashable(value)
            except Exception:   # the identity cannot even read it: not a result of this job
                odd.append(value)
                continue
            slots = positions.get(x)
            if slots is None:
                odd.append(value)
            elif used[x] < len(slots):
                firsts.append(slots[used[x]])
                used[x] += 1
            else:
                dup.append(value)
        # An input counted again (a replay; under exactly-once, a broken rule) is a
        # duplicate under either guarantee, and fails an exactly-once run all the same:
        # only at-least-once, which may count again, takes any value it cannot place.
        replayed = (expected.replayed if guarantee == "exactly-once"
                    else expected.replayed or (lambda _k, _v: True))
        if replayed is not None:
            dup += [x for x in odd if replayed(key, x)]
            odd = [x for x in odd if not replayed(key, x)]
        lost = len(wanted) - len(firsts)
        disorder = len(firsts) - _longest_increasing(firsts)
        problems: list[str] = []
        if expected.check is not None and not (lost or dup or odd or disorder):
            problems = expected.check(key, values)
        if lost or dup or odd or disorder or problems:
            missing = Counter(wanted) - Counter(wanted[i] for i in firsts)
            _note(v, key, {"expected": len(wanted), "committed": len(values), "lost": lost,
                           "duplicated": len(dup), "unexpected": len(odd) + len(problems),
                           "out_of_order": disorder, "examples": {
                               "lost": [repr(x) for x in list(missing.elements())[:EXAMPLES]],
                               "duplicated": [repr(x) for x in dup[:EXAMPLES]],
                               "unexpected": ([repr(x) for x in odd[:EXAMPLES]]
                                              + problems[:EXAMPLES])}})
        v.lost += lost
        v.duplicated += len(dup)
        v.unexpected += len(odd) + len(problems)
        v.out_of_order += disorder
    if guarantee == "exactly-once":
        v.passed = not (v.lost or v.duplicated or v.unexpected or v.out_of_order)
    else:
        v.passed = not (v.lost or v.unexpected)
    return v


def _note(v: Verdict, key: Any, entry: dict[str, Any]) -> None:
    if len(v.bad_keys) < 20:
        v.bad_keys.append({"key": key, **entry})


def verify_output(transport: Transport, topic: str, job: str, expected: Expected,
                  guarantee: str, *, key_decode: Callable[[bytes], Any] | None,
                  value_decode: Callable[[bytes], Any],
                  marks: dict[int, int] | None = None) -> Verdict:
    """The verdict on ``topic`` as ``job``'s readers see it, cross-checked against every
    record the topic holds; with ``marks`` only the records at or past them (the output
    after an ``eos reset``)."""
    # read through the module, per call: tests/test_experiments.py swaps in a reader
    committed = since(committed_log.read_output(transport, topic, job=job), marks)
    verdict = compare(expected, committed, guarantee, key_decode=key_decode,
                      value_decode=value_decode)
    raw = since(committed_log.read_output(transport, topic, committed=False), marks)
    by_place = {(r.partition, r.offset): r for r in raw}
    phantom = 0
    for r in committed:
        found = by_place.get((r.partition, r.offset))
        if found is None or found.key != r.key or found.value != r.value:
            phantom += 1
    raw_verdict = compare(expected, raw, guarantee, key_decode=key_decode,
                          value_decode=value_decode)
    verdict.raw = {"records": len(raw), "hidden": len(raw) - (len(committed) - phantom),
                   "phantom": phantom, **{f"raw_{k}": n for k, n in raw_verdict.counts().items()}}
    if phantom:
        verdict.passed = False
    return verdict


def check_dead_letters(v: Verdict, transport: Transport, topic: str, job: str, source: str,
                       expected: Counter[tuple[int, int]],
                       marks: dict[int, int] | None = None) -> None:
    """Add to ``v`` what the dead letters of ``topic`` (as its readers see them) do wrong:
    every bad source record processed (``expected``: (partition, offset) -> times) must
    have exactly one letter naming it per time; a missing one is lost, one more is a
    duplicate (fails exactly-once only), a letter for any other record is unexpected."""
    try:
        letters = since(committed_log.read_output(transport, topic, job=job), marks)
    except EosError:   # no topic: no letter was ever written
        letters = []
    got: Counter[tuple[int, int]] = Counter()
    odd: list[str] = []
    for r in letters:
        try:
            d = json.loads(r.value or b"")
            place = (int(d["partition"]), int(d["offset"]))
            if d.get("topic") != source:
                raise ValueError(f"it names topic {d.get('topic')!r}")
        except (ValueError, KeyError, TypeError) as exc:
            odd.append(f"offset {r.offset}: not a letter for the source ({exc})")
            continue
        got[place] += 1
    lost = expected - got
    extra = got - expected
    dup = Counter({k: n for k, n in extra.items() if k in expected})
    odd += [f"names {topic_place(source, k)}, which is not a bad record"
            for k in extra if k not in expected]
    v.dead_letters = {"expected": sum(expected.values()), "committed": len(letters)}
    if lost or dup or odd:
        _note(v, "dead letters", {
            "expected": sum(expected.values()), "committed": len(letters),
            "lost": sum(lost.values()), "duplicated": sum(dup.values()), "unexpected": len(odd),
            "examples": {"lost": [topic_place(source, k) for k in list(lost)[:EXAMPLES]],
                         "duplicated": [topic_place(source, k) for k in list(dup)[:EXAMPLES]],
                         "unexpected": odd[:EXAMPLES]}})
    v.lost += sum(lost.values())
    v.duplicated += sum(dup.values())
    v.unexpected += len(odd)
    if lost or odd or (dup and v.guarantee == "exactly-once"):
        v.passed = False


def topic_place(topic: str, place: tuple[int, int]) -> str:
    return f"{topic}[{place[0]}]@{place[1]}"


def verify_sinks(transport: Transport, pipeline: Any, expected: dict[str, Expected],
                 guarantee: str, job: str, transport_name: str, *,
                 marks: dict[str, dict[int, int]] | None = None) -> Verdict:
    """A graph workload's verdict: every sink against its oracle (``expected`` by the
    workload's sink names), from its own ``marks`` when given, one verdict of them."""
    prefix = "" if transport_name == "local" else f"{job}-"
    verdicts = []
    for sink in pipeline.sinks:
        key = FORMATS[sink.key_format][1] if sink.key_format else None
        verdicts.append(verify_output(transport, sink.topic, job,
                                      expected[sink.topic[len(prefix):]], guarantee,
                                      key_decode=key, value_decode=FORMATS[sink.value_format][1],
                                      marks=None if marks is None else marks[sink.topic]))
    return merge(verdicts, guarantee)


def merge(verdicts: list[Verdict], guarantee: str) -> Verdict:
    """One verdict of several parts (the epochs between resets): counts added, bad keys
    of each part kept, passed only if every part passed."""
    v = Verdict(guarantee, passed=all(p.passed for p in verdicts))
    raw: dict[str, Any] = {}
    for part in verdicts:
        for name in ("keys", "expected", "committed", "lost", "duplicated", "unexpected",
                     "out_of_order", "unexpected_keys"):
            setattr(v, name, getattr(v, name) + getattr(part, name))
        v.bad_keys += part.bad_keys[:max(0, 20 - len(v.bad_keys))]
        for k, n in (part.raw or {}).items():
            raw[k] = raw.get(k, 0) + n
        if part.dead_letters is not None:
            v.dead_letters = {k: (v.dead_letters or {}).get(k, 0) + n
                              for k, n in part.dead_letters.items()}
    v.raw = raw or None
    return v
