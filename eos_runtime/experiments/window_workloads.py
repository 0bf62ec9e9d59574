"""The event-time workloads of ``eos experiment`` (issue 25): ``windows`` (views per page
per tumbling second, final) and ``attribution`` (purchases joined with the clicks of the
same user within 200 ms), each with an oracle computed from the input alone.

Their input is out of order, but never late: every record's time is at most ``GRACE`` ms
before the time of any record before it in the input. A task's watermark is never above
the highest time its partition's records before a record brought (W2, W4: each producer's
marker comes after what it read), so such a record is within the grace of any watermark
it meets: in its window (the window's end + grace is above the watermark), and for the
join neither late (``t + grace >= watermark``) nor past a partner's expiry.

A few records are far later than that: in the first second, written after the first
seconds. Whether one is late depends on the watermark when its task processes it (a
lagging producer holds it back), so the oracle does not say; it says what is exact either
way. Dead letters are on:

- ``windows``: every such record is a view of page ``/late`` (no other view is), whose
  first view, the input's first record, is never late. So the first window of ``/late``
  always closes, and each late-by-design view is either counted in it or a dead letter:
  under exactly-once, its count plus its dead letters is exactly its views, each letter
  naming a different view (``judge_windows``); under at-least-once, at least.
- ``attribution``: such records are clicks of a user with no purchase: whether late or
  not, they pair with nothing. A dead letter must name one of them, once.

A bounded run closes a window when its end + grace is at or below the final watermark:
the lowest, over the source partitions (one per source task), of the highest time each
holds. Which windows close is thus known from the input; which records are in them too
(none is late). A record's partition is its id's parity (``feed``), so the oracle reads
it off the values, whatever order they come in (several runs of the job, ``scenario``).

Under the operator's actions (several runs of the job, ``multirun.py``) the judgment is
over the views the job read, as ``scenario.InputModel`` follows them: a view read again
(a source moved back) is counted again if its window is still open when it comes, and is
a dead letter if not; one skipped is in no window. Which of the two a view read again
meets depends on timing, but their sum does not: a closing window's count plus the
letters of its views is the times they were read (``window_verdict``). For
``attribution`` a record read again pairs again with each partner its join task still
holds, and one read out of course may be late: such pairs are judged by a range, at
least once when both records were first read in course, at most once per pair of reads
(``attribution_pairs``); the others exactly. Both refuse a soak (``--duration``): an
unbounded run's last watermark depends on where the stop finds the sources.
"""

from __future__ import annotations

import ast
import json
import random
import time
from collections import Counter, defaultdict
from typing import Any

from ..api import Pipeline
from ..errors import EosError
from ..joblog.committed import read_output
from ..windows import tumbling
from .verdict import EXAMPLES, Verdict, since
from .workload_types import Expected, Feed, Workload

__all__ = ["WINDOW_WORKLOADS", "SIZE", "GRACE", "WITHIN", "LATE_PAGE", "view_events",
           "windows_expected", "judge_windows", "window_verdict", "recent_epoch", "shop_events",
           "attribution_expected", "attribution_pairs", "attribution_verdict",
           "judge_attribution", "final_watermark"]

SIZE = 1_000          # ms: tumbling windows of a second
GRACE = 300           # ms: a window closes this long after its end; the input's disorder
WITHIN = 200          # ms: a purchase and a click at most this far apart are a pair
STEP = 10             # ms: the input's time goes up by 0..STEP a record
PAGES = [f"/p{i}" for i in range(6)]
LATE_PAGE = "/late"   # the page of the first view and of the late-by-design views
LATE_USER = "u-late"  # the user of the late-by-design clicks: no purchase of theirs
USERS = [f"u{i}" for i in range(40)]
LATE_EVERY = 400      # about one record in this many is late by design
PARTITIONS = 2

#: Both workloads take every fault kind, the operator's actions that move a source or
#: reset the job included (``window_verdict``, ``attribution_verdict``): but a soak.
REFUSED = {"soak": "an unbounded run's last watermark depends on where the stop finds the "
                   "sources, so which windows close is not known from the input: give --lines"}


def recent_epoch() -> int:
    """Where a run's event time starts: yesterday's midnight (UTC), in ms. A result
    carries its window's time as its record's timestamp, and a Kafka broker deletes a
    segment once its timestamps are older than the topic's retention.ms (7 days by
    default): input timed near 1970 had its results deleted mid-run, at the broker's
    retention check. A midnight, so windows start on whole seconds; yesterday's, so no
    result is in the future (a broker refuses timestamps too far ahead, 1 hour by
    default since Kafka 4.0)."""
    return (int(time.time() // 86_400) - 1) * 86_400_000


def _partition(value: dict[str, Any]) -> int:
    return int(value["id"]) % PARTITIONS


def _late_by_design(rng: random.Random, i: int, n: int) -> bool:
    return i > n // 10 and rng.randrange(LATE_EVERY) == 0


def final_watermark(values: list[dict[str, Any]]) -> int | None:
    """What a bounded run's last checkpoint closes with: the lowest over the source
    partitions the input holds records of, of the highest time each holds (None: no
    record). A partition none was read from holds nothing back at a run's end (W4,
    ``watermarks.lowest_at_end``)."""
    highs: dict[tuple[Any, int], int] = {}
    for v in values:
        where = (v.get("side"), _partition(v))
        highs[where] = max(highs.get(where, v["ts"]), v["ts"])
    return min(highs.values(), default=None)


# --------------------------------------------------------------------------- windows

def view_events(n: int, seed: int = 0, epoch: int = 0) -> list[dict[str, Any]]:
    """``n`` views ``{"id", "page", "ts"}``: time going up 0..STEP ms a view from ``epoch``,
    each up to GRACE ms before it; the first a view of ``/late`` at ``epoch``, and about
    one in LATE_EVERY after the first tenth a view of ``/late`` in the first second: late
    by design."""
    rng = random.Random(f"windows:{seed}")
    clock = 0
    out: list[dict[str, Any]] = []
    for i in range(n):
        clock += rng.randint(0, STEP)
        if i == 0:
            out.append({"id": 0, "page": LATE_PAGE, "ts": epoch})
        elif _late_by_design(rng, i, n):
            out.append({"id": i, "page": LATE_PAGE, "ts": epoch + rng.randrange(SIZE)})
        else:
            out.append({"id": i, "page": rng.choice(PAGES),
                        "ts": epoch + max(0, clock - rng.randint(0, GRACE))})
    return out


def _view_page(view: dict[str, Any]) -> str:
    return str(view["page"])


def _view_time(view: dict[str, Any]) -> int:
    return int(view["ts"])


def windows_pipeline() -> Pipeline:
    """Views per page per tumbling second, each window's count once, when it closes."""
    pipeline = Pipeline("windows", processing_guarantee="exactly-once", commit_interval=1.0,
                        parallelism=2, dead_letters=True)
    (pipeline.source("views", value="json", timestamp=_view_time)
        .key_by(_view_page)
        .window(tumbling(SIZE), grace=GRACE)
        .count()
        .final()
        .sink("views-per-second", key="utf8", value="json"))
    return pipeline


def windows_feed(views: list[dict[str, Any]]) -> Feed:
    """Each view into partition id % 2 (the oracle reads a view's partition off its id)."""
    return {"views": [(_partition(v), None, json.dumps(v).encode()) for v in views]}


def window_counts(views: list[dict[str, Any]]) -> dict[str, dict[int, int]]:
    """Per page, per window start, the views a bounded run over ``views`` closes."""
    wm = final_watermark(views)
    counts: dict[str, dict[int, int]] = defaultdict(dict)
    for v in views:
        start = v["ts"] - v["ts"] % SIZE
        if wm is not None and start + SIZE + GRACE <= wm:
            counts[v["page"]][start] = counts[v["page"]].get(start, 0) + 1
    return counts


def _window(value: Any) -> list[int]:
    return [value["start"], value["end"]]


def _never(key: Any, value: Any) -> bool:
    """A replay repeats a window's result (the identity places it), never makes another."""
    return False


def windows_expected(views: list[dict[str, Any]]) -> Expected:
    """Per page, each window the run closes once, in order (``[start, end]``); the counts
    are ``judge_windows``'s: exact under exactly-once, at least under at-least-once."""
    results: dict[Any, list[Any]] = {
        page: [[s, s + SIZE] for s in sorted(per)] for page, per in window_counts(views).items()}
    return Expected(results, identity=_window, replayed=_never)


def _letters(t: Any, pipeline: Any, job: str, marks: dict[int, int] | None) -> list[Any]:
    """The values the committed dead letters name (a channel record's, as Python shows it)."""
    try:
        letters = since(read_output(t, pipeline.dead_letter_topic, job=job), marks)
    except EosError:   # no topic: no letter was written
        return []
    out = []
    for r in letters:
        letter = json.loads(r.value or b"{}")
        try:
            out.append(ast.literal_eval(letter.get("value") or "None"))
        except (ValueError, SyntaxError):
            out.append(letter.get("value"))
    return out


def _results(t: Any, pipeline: Any, job: str, marks: dict[int, int] | None) -> list[Any]:
    return [(r.key.decode() if r.key is not None else None, json.loads(r.value or b"null"))
            for r in since(read_output(t, pipeline.sink_topic, job=job), marks)]


def _add(v: Verdict, what: str, key: Any, examples: list[str]) -> None:
    setattr(v, what, getattr(v, what) + len(examples))
    if examples and len(v.bad_keys) < 20:
        v.bad_keys.append({"key": key, what: len(examples),
                           "examples": {what: examples[:EXAMPLES]}})


def _in_course(values: list[dict[str, Any]]) -> set[int]:
    """The records whose first read was in course: every record of their topic's partition
    read before them (in the epoch) came before them in the input (a lower id). Such a
    record is within the grace of any watermark it meets (the input's disorder is within
    it), so it is not late (W6): a view is counted in its window, a click or purchase meets
    every partner within WITHIN that is in course too (the partner waits until the
    watermark passes its time + WITHIN + GRACE). A record read after a Startpoint moved its
    partition back, or forward past it and back, may be late: timing decides."""
    high: dict[tuple[Any, int], int] = {}
    seen: set[int] = set()
    out: set[int] = set()
    for v in values:
        where, i = (v.get("side"), _partition(v)), v["id"]
        if i not in seen:
            seen.add(i)
            if i > high.get(where, -1):
                out.add(i)
        high[where] = max(high.get(where, -1), i)
    return out


def _letters_allowed(values: list[dict[str, Any]], late_ids: set[int]) -> Counter[int]:
    """How many dead letters may name each record read: one per read that may have been
    late. A record first read in course (``_in_course``) that is not late by design was
    not late then, so only its later reads may be."""
    course = _in_course(values)
    allowed = Counter(x["id"] for x in values)
    for i in course - late_ids:
        allowed[i] -= 1
    return allowed


def _judge_letters(v: Verdict, named: Counter[Any], allowed: Counter[int],
                   exact: bool) -> None:
    """Each record a dead letter names was read, and is named at most ``allowed`` times
    (under at-least-once, a record that could be late at all may repeat)."""
    never, more = [], []
    for i, n in named.items():
        if n <= allowed.get(i, 0):
            continue
        if allowed.get(i, 0) <= 0:
            never.append(f"a letter for {i!r}, which was never late")
        else:
            more.append(f"record {i} in {n} letters, late at most {allowed[i]} times")
    _add(v, "unexpected", "dead letters", never)
    if exact:
        _add(v, "duplicated", "dead letters", more)


def judge_windows(t: Any, pipeline: Any, job: str, views: list[dict[str, Any]],
                  guarantee: str, marks: dict[str, dict[int, int]] | None = None) -> Verdict:
    """``window_verdict`` on the committed results and dead letters (since ``marks``)."""
    marks = marks or {}
    results = []
    for key, value in _results(t, pipeline, job, marks.get(pipeline.sink_topic)):
        try:
            results.append((key, value["start"], int(value["value"])))
        except (TypeError, KeyError, ValueError):
            pass   # the oracle's identity counts it unexpected
    letters = _letters(t, pipeline, job, marks.get(pipeline.dead_letter_topic or ""))
    return window_verdict(views, results, letters, guarantee)


def window_verdict(views: list[dict[str, Any]], results: list[tuple[str, int, int]],
                   letters: list[Any], guarantee: str) -> Verdict:
    """Each window's count against the views read, ``views`` as the job read them (a
    view read twice, after an operator moved its source back, is there twice; one
    skipped is not). A read view is counted in its window, or is a dead letter (its
    window had closed when it came): so a closing window's count plus the letters of its
    views is the times they were read, exactly under exactly-once, at least under
    at-least-once. Dead letters as ``_judge_letters`` says (W6: a view within the grace of
    its partition's latest is never late)."""
    exact = guarantee == "exactly-once"
    v = Verdict(guarantee)
    want = window_counts(views)
    got: dict[tuple[str, int], list[int]] = defaultdict(list)
    for key, start, count in results:
        got[(key, start)].append(count)
    reads = Counter(x["id"] for x in views)
    window_of = {x["id"]: (x["page"], x["ts"] - x["ts"] % SIZE) for x in views}
    late_ids = {x["id"] for x in views if x["page"] == LATE_PAGE and x["id"] != 0}
    named = Counter(x.get("id") if isinstance(x, dict) else None for x in letters)
    allowed = _letters_allowed(views, late_ids)
    _judge_letters(v, named, allowed, exact)
    read_again = {window_of[i] for i, n in reads.items() if n > 1}
    lettered: Counter[tuple[str, int]] = Counter()
    for i, n in named.items():
        if isinstance(i, int) and i in reads:
            lettered[window_of[i]] += min(n, allowed[i])
    for page, per in want.items():
        for start, n in per.items():
            counts = got.get((page, start), [])
            bounds = f"window [{start}, {start + SIZE})"
            letters_of = lettered[(page, start)]
            if exact:
                for c in counts:
                    if c + letters_of == n:
                        continue
                    if letters_of or page == LATE_PAGE or (page, start) in read_again:
                        _add(v, "lost" if c + letters_of < n else "duplicated", page,
                             [f"{bounds}: {c} counted and {letters_of} dead letters, of "
                              f"{n} views read"])
                    else:
                        _add(v, "unexpected", page, [f"{bounds}: count {c}, expected {n}"])
            elif counts and max(counts) + letters_of < n:
                _add(v, "lost", page, [f"{bounds}: at most {max(counts)} counted and "
                                       f"{letters_of} dead letters, of {n} views read"])
    v.dead_letters = {"late_by_design": len(late_ids), "committed": len(letters)}
    v.passed = not (v.lost or v.unexpected or (exact and v.duplicated))
    return v


# --------------------------------------------------------------------------- attribution

def shop_events(n: int, seed: int = 0, epoch: int = 0) -> list[dict[str, Any]]:
    """``n`` clicks and purchases ``{"id", "side", "user", "ts"}`` (about 3 clicks to 2
    purchases), time going up 0..STEP ms a record from ``epoch``, each up to GRACE ms
    before it; about one in LATE_EVERY after the first tenth a click of LATE_USER in the
    first half second."""
    rng = random.Random(f"attribution:{seed}")
    clock = 0
    out: list[dict[str, Any]] = []
    for i in range(n):
        clock += rng.randint(0, STEP)
        if _late_by_design(rng, i, n):
            out.append({"id": i, "side": "click", "user": LATE_USER,
                        "ts": epoch + rng.randrange(SIZE // 2)})
            continue
        out.append({"id": i, "side": "click" if rng.random() < 0.6 else "buy",
                    "user": rng.choice(USERS),
                    "ts": epoch + max(0, clock - rng.randint(0, GRACE))})
    return out


def _user(event: dict[str, Any]) -> str:
    return str(event["user"])


def _pair(buy: dict[str, Any], click: dict[str, Any]) -> dict[str, Any]:
    return {"buy": buy["id"], "click": click["id"]}


def _pair_key(pair: dict[str, Any]) -> str:
    return f"{pair['buy']}>{pair['click']}"


def attribution_pipeline() -> Pipeline:
    """Purchases joined with the clicks of the same user within WITHIN ms (inner), each
    pair keyed by its ids (one result per key: the oracle needs no order between pairs)."""
    pipeline = Pipeline("attribution", processing_guarantee="exactly-once",
                        commit_interval=1.0, parallelism=2, dead_letters=True)
    clicks = pipeline.source("clicks", value="json", timestamp=_view_time)
    buys = pipeline.source("purchases", value="json", timestamp=_view_time)
    (buys.join(clicks, within=WITHIN, on=(_user, _user), join=_pair, grace=GRACE)
        .key_by(_pair_key)
        .sink("attributed", key="utf8", value="json"))
    return pipeline


def attribution_feed(events: list[dict[str, Any]]) -> Feed:
    feed: Feed = {"clicks": [], "purchases": []}
    for e in events:
        feed["clicks" if e["side"] == "click" else "purchases"].append(
            (_partition(e), None, json.dumps(e).encode()))
    return feed


def attribution_pairs(events: list[dict[str, Any]]
                      ) -> tuple[dict[str, Any], dict[str, tuple[int, int]]]:
    """Every purchase and click of the same user at most WITHIN ms apart, as read: the pairs
    that must be there exactly once (each of the two read once, in course), and for the
    others the range of times a pair may be there: at least once when both were first read
    in course, at most once per pair of reads (a record read again pairs again with each
    partner its join task still holds)."""
    reads = Counter(e["id"] for e in events)
    course = _in_course(events)
    distinct = list({e["id"]: e for e in events}.values())
    clicks: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in distinct:
        if e["side"] == "click":
            clicks[e["user"]].append(e)
    exact: dict[str, Any] = {}
    ranges: dict[str, tuple[int, int]] = {}
    for b in distinct:
        if b["side"] != "buy":
            continue
        for c in clicks[b["user"]]:
            if abs(b["ts"] - c["ts"]) > WITHIN:
                continue
            pair = _pair(b, c)
            both = b["id"] in course and c["id"] in course
            if both and reads[b["id"]] == reads[c["id"]] == 1:
                exact[_pair_key(pair)] = pair
            else:
                ranges[_pair_key(pair)] = (1 if both else 0, reads[b["id"]] * reads[c["id"]])
    return exact, ranges


def attribution_expected(events: list[dict[str, Any]]) -> Expected:
    """Every purchase and click of the same user at most WITHIN ms apart, once; a pair of
    records read again or out of course is left to ``judge_attribution`` (a range)."""
    exact, ranges = attribution_pairs(events)
    return Expected({k: [pair] for k, pair in exact.items()}, replayed=_never,
                    tolerated=ranges.__contains__)


def judge_attribution(t: Any, pipeline: Any, job: str, events: list[dict[str, Any]],
                      guarantee: str, marks: dict[str, dict[int, int]] | None = None) -> Verdict:
    """``attribution_verdict`` on the committed pairs and dead letters (since ``marks``)."""
    marks = marks or {}
    pairs = [key for key, _ in _results(t, pipeline, job, marks.get(pipeline.sink_topic))]
    letters = _letters(t, pipeline, job, marks.get(pipeline.dead_letter_topic or ""))
    return attribution_verdict(events, pairs, letters, guarantee)


def attribution_verdict(events: list[dict[str, Any]], pair_keys: list[Any],
                        letters: list[Any], guarantee: str) -> Verdict:
    """The pairs of records read again or out of course, each within its range
    (``attribution_pairs``; the verifier judges the others against the oracle); dead
    letters as ``_judge_letters`` says (a late-by-design click pairs with nothing, late
    or not)."""
    exact_once = guarantee == "exactly-once"
    v = Verdict(guarantee)
    _, ranges = attribution_pairs(events)
    seen = Counter(pair_keys)
    for key, (lo, hi) in sorted(ranges.items()):
        n = seen.get(key, 0)
        if n < lo:
            _add(v, "lost", key, [f"pair {key}: none, its records both read in course"])
        elif exact_once and n > hi:
            _add(v, "duplicated", key, [f"pair {key}: {n} times, at most {hi} (reads)"])
    late_ids = {e["id"] for e in events if e["user"] == LATE_USER}
    # a join's channel value is tagged: ["L", purchase] or ["R", click]
    named = Counter(x[1].get("id") if isinstance(x, list) and len(x) == 2
                    and isinstance(x[1], dict) else None for x in letters)
    _judge_letters(v, named, _letters_allowed(events, late_ids), exact_once)
    v.dead_letters = {"late_by_design": len(late_ids), "committed": len(letters)}
    v.passed = not (v.lost or v.unexpected or (exact_once and v.duplicated))
    return v


WINDOW_WORKLOADS: dict[str, Workload] = {
    "windows": Workload(
        "windows", "views per page per tumbling second (final, grace 300 ms), out of order "
        "within the grace, a few views late by design (dead letters on)",
        windows_pipeline, lambda seed, n: view_events(n, seed, recent_epoch()),
        windows_expected,
        feed=windows_feed, judge=judge_windows, refused=REFUSED),
    "attribution": Workload(
        "attribution", "purchases joined with the clicks of the same user within 200 ms "
        "(a windowed join of two sources, inner), each pair keyed by its ids",
        attribution_pipeline, lambda seed, n: shop_events(n, seed, recent_epoch()),
        attribution_expected,
        feed=attribution_feed, judge=judge_attribution, refused=REFUSED),
}
