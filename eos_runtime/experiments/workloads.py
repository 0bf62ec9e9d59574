"""Workloads for experiments: a pipeline, a seeded input generator, an independent oracle.

A workload's oracle says what the committed output must be, computed from the generated
input alone: plain Python over the input records, never the runtime's steps, state or
planner, so a bug in the runtime cannot hide in the expectation. The two built-in
workloads are the pipelines of ``examples/wordcount.py`` and ``examples/pageviews.py``
(the same steps, shipped here so an installed package has them); any pipeline file
becomes one by defining ``generate(seed, n)`` and ``oracle(records)`` beside its pipeline
(docs/experiments.md):

    def generate(seed, n):        # the input: n source values, the same for the same seed
        rng = random.Random(seed)
        return [...]

    def oracle(records):          # records: what generate returned
        return {key: [value, ...]}   # the sink's results per key, in order

Keys and values are as the sink's formats decode them (``utf8``: str, ``json``: the
object). The oracle may instead return an ``Expected`` to compare only a part of each
value (``identity``) and check the rest record by record (``check``).
"""

from __future__ import annotations

import json
import random
import runpy
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from itertools import accumulate, pairwise
from pathlib import Path
from typing import Any

from ..api import FORMATS, Pipeline
from ..errors import ConfigError, PipelineFileError
from ..runner import load_pipeline
from ..runtime.outputs import kafka_partition
from .window_workloads import WINDOW_WORKLOADS
from .workload_types import Expected, Feed, Workload, encode_values

__all__ = ["Expected", "Workload", "BUILTIN", "load_workload", "wordcount_pipeline",
           "pageviews_pipeline", "word_lines", "page_views", "wordcount_expected",
           "pageviews_expected", "encode_values", "check_refused"]


def _count_past(results: dict[Any, list[Any]],
                count: Callable[[Any], int]) -> Callable[[Any, Any], bool]:
    """``replayed`` for a running count: a replay can only take it past the key's last."""
    def replayed(key: Any, value: Any) -> bool:
        try:
            return count(value) > len(results[key])
        except (ValueError, TypeError, AttributeError, IndexError, KeyError):
            return False
    return replayed


Decoder = Callable[[bytes], Any]


def sink_formats(pipeline: Pipeline) -> tuple[Decoder | None, Decoder]:
    """Decoders of the sink's key (None: unkeyed) and value."""
    sinks = pipeline.sinks
    if len(sinks) != 1:
        raise ConfigError(f"pipeline {pipeline.name!r} has {len(sinks) or 'no'} sinks: a "
                          f"workload's oracle judges one")
    end = sinks[0]
    key = FORMATS[end.key_format][1] if end.key_format else None
    return key, FORMATS[end.value_format][1]


# --------------------------------------------------------------------------- wordcount

#: The vocabulary of the wordcount workload (small: every word is counted many times).
WORDS = "apple banana cherry date elder fig grape hazel iris juniper kiwi lemon".split()


def word_lines(n: int, seed: int = 7) -> list[str]:
    """``n`` lines of 1 to 8 words from ``WORDS``; the same for the same seed."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))) for _ in range(n)]


def wordcount_expected(lines: Sequence[str], as_read: Callable[[int], Any] = str) -> Expected:
    """Each word seen n times has the counts "1", "2", ..., "n", in that order; as the
    sink's value format reads them back (``as_read``: a ``json`` sink's are ints)."""
    seen = Counter(w for line in lines for w in line.split())
    results: dict[Any, list[Any]] = {word: [as_read(i) for i in range(1, n + 1)]
                                     for word, n in seen.items()}
    return Expected(results, replayed=_count_past(results, int))


def _word(word: str) -> str:
    return word


def _counted(lines: Sequence[str]) -> Expected:
    """The wordcount workload's oracle: its ``json`` sink reads its counts back as ints."""
    return wordcount_expected(lines, int)


def wordcount_pipeline() -> Pipeline:
    """examples/wordcount.py: split lines, shuffle by word, the built-in running count."""
    pipeline = Pipeline("wordcount", processing_guarantee="exactly-once", commit_interval=1.0,
                        parallelism=2)
    (pipeline.source("lines", value="utf8")
        .flat_map(str.split)
        .key_by(_word)
        .count()
        .sink("counts", key="utf8", value="json"))
    return pipeline


# --------------------------------------------------------------------------- pageviews

def page_views(n: int, seed: int = 11) -> list[dict[str, str]]:
    """``n`` views ``{"user": "u0".."u29", "page": "/p0".."/p9"}``."""
    rng = random.Random(seed)
    return [{"user": f"u{rng.randint(0, 29)}", "page": f"/p{rng.randint(0, 9)}"}
            for _ in range(n)]


def _views_part(value: str) -> int:
    return int(value.split(":", 1)[0])


def pageviews_expected(views: Sequence[dict[str, str]]) -> Expected:
    """Per page: views "1".."n" in order (the part before the colon), and every record's
    visitor count one that the page's views give in some order.

    The exact visitor counts are not a function of the input: the last stage merges its
    producers' records in the order they arrive. What every order keeps, record by
    record: a user's first view of a page reaches the page's task before the user's other
    views of it (one task handles the user, one channel carries the page), so the count
    starts at 1, grows by 0 or 1 per view, ends at the page's distinct users, and after k
    views with v visitors the k - v repeat views fit those v users: at most the repeats
    of the v users who viewed the page most."""
    users: dict[str, Counter[str]] = defaultdict(Counter)
    for v in views:
        users[v["page"]][v["user"]] += 1

    def check(page: Any, values: list[Any]) -> list[str]:
        seen = users[page]
        problems = []
        counts = [0] + [int(v.split(":", 1)[1]) for v in values]
        # most repeat views v visitors can have made: v = 0, 1, ..., distinct users
        repeats = list(accumulate(sorted((c - 1 for c in seen.values()), reverse=True),
                                  initial=0))
        for k, (before, after) in enumerate(pairwise(counts), 1):
            if after - before not in (0, 1):
                problems.append(f"{page}: visitors {before} -> {after} at view {k}")
            elif k - after > repeats[min(after, len(seen))]:
                problems.append(f"{page}: {after} visitors after {k} views, but those can have "
                                f"made at most {repeats[min(after, len(seen))]} repeat views")
        if counts[-1] != len(seen):
            problems.append(f"{page}: {counts[-1]} visitors in the last record, "
                            f"expected {len(seen)}")
        return problems

    results = {page: list(range(1, sum(seen.values()) + 1)) for page, seen in users.items()}
    return Expected(results, identity=_views_part, check=check,
                    replayed=_count_past(results, _views_part))


def _user(view: dict[str, Any]) -> str:
    user: str = view["user"]
    return user


def _page(visit: dict[str, Any]) -> str:
    return str(visit["page"])


def first_visit(view: dict[str, str], state: Any) -> dict[str, Any]:
    pages = state.get("pages", [])
    new = view["page"] not in pages
    if new:
        state.set("pages", pages + [view["page"]])
    return {"page": view["page"], "new_visitor": new}


def page_total(visit: dict[str, Any], state: Any) -> str:
    views = state.get("views", 0) + 1
    visitors = state.get("visitors", 0) + (1 if visit["new_visitor"] else 0)
    state.set("views", views)
    state.set("visitors", visitors)
    return f"{views}:{visitors}"


def pageviews_pipeline() -> Pipeline:
    """examples/pageviews.py: views -> per-user first visits -> per-page totals."""
    pipeline = Pipeline("pageviews", processing_guarantee="exactly-once", commit_interval=1.0,
                        parallelism=2)
    (pipeline.source("pageviews", value="json")
        .key_by(_user)
        .map(first_visit, stateful=True)
        .key_by(_page)
        .map(page_total, stateful=True)
        .sink("page-totals", key="utf8", value="utf8"))
    return pipeline


# --------------------------------------------------------------------------- dead letters

#: Bytes of padding that make a source record big: about 600 KB, under Kafka's default
#: 1 MB record limit, so the record itself is fine where its dead letter (which keeps
#: the value) may not be.
BIG = 600_000


def bad_records(n: int, seed: int = 13) -> list[dict[str, Any]]:
    """``n`` records ``{"id", "words", "bad", "pad"}``: lines of words (as wordcount's), some
    bad: ``"set"`` (one of its flat_map values holds a set, which msgpack cannot carry
    across the shuffle, after some good ones), ``"raise"`` (its flat_map raises); two
    big ones (a ~600 KB ``pad``), one fine and one that raises."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 8))]
        roll = rng.random()
        bad = "set" if roll < 0.03 else "raise" if roll < 0.04 else None
        out.append({"id": i, "words": words, "bad": bad, "pad": ""})
    if n >= 4:
        out[n // 3].update(pad="x" * BIG, bad=None)
        out[2 * n // 3].update(pad="y" * BIG, bad="raise")
    return out


def explode(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Each word as a value; a bad record fails part-way, after some values went out."""
    if record["bad"] == "raise":
        raise ValueError(f"record {record['id']} is bad")
    out: list[dict[str, Any]] = [{"w": w} for w in record["words"]]
    if record["bad"] == "set":
        out.insert(len(out) // 2 + 1, {"w": "zzz", "s": {1, 2}})   # cannot cross the shuffle
    return out


def _w(value: dict[str, Any]) -> str:
    return str(value["w"])


def count_word(value: dict[str, Any], state: Any) -> str:
    n = state.get("count", 0) + 1
    state.set("count", n)
    return str(n)


def dead_letters_pipeline() -> Pipeline:
    """Wordcount over records some of which are bad, with dead letters on."""
    pipeline = Pipeline("deadletters", processing_guarantee="exactly-once", commit_interval=1.0,
                        parallelism=2, dead_letters=True)
    (pipeline.source("records", value="json")
        .flat_map(explode)
        .key_by(_w)
        .map(count_word, stateful=True)
        .sink("counts", key="utf8", value="utf8"))
    return pipeline


def dead_letters_expected(records: Sequence[dict[str, Any]]) -> Expected:
    """Wordcount over the good records alone: a bad record's output is absent, all of it."""
    return wordcount_expected([" ".join(r["words"]) for r in records if not r["bad"]])


def is_bad(records: list[Any]) -> list[bool]:
    return [bool(r["bad"]) for r in records]


# --------------------------------------------------------------------------- chained jobs

def tally(value: str, state: Any) -> str:
    n = state.get("n", 0) + 1
    state.set("n", n)
    return f"{n}:{value}"


def tally_pipeline() -> Pipeline:
    """Job B of the chained workload: reads job A's sink (word -> count) and numbers the
    records of each word it reads: "n:count"."""
    pipeline = Pipeline("tally", processing_guarantee="exactly-once", commit_interval=1.0,
                        parallelism=2)
    (pipeline.source("counts", key="utf8", value="utf8")
        .map(tally, stateful=True)
        .sink("tallies", key="utf8", value="utf8"))
    return pipeline


def chained_expected(lines: Sequence[str]) -> Expected:
    """Job B's sink over job A's input: a word seen n times has "1:1" .. "n:n", in order
    (A writes the counts 1..n of a word in order, to one partition; B numbers what it
    reads). A record A wrote twice, or B read twice, breaks the pairing."""
    seen = Counter(w for line in lines for w in line.split())
    results: dict[Any, list[Any]] = {w: [f"{i}:{i}" for i in range(1, n + 1)]
                                     for w, n in seen.items()}
    return Expected(results, replayed=_count_past(results, lambda v: int(v.split(":")[0])))


# --------------------------------------------------------------------------- a graph

#: Users of the clickstream workload: the table holds rows of the first 12 only.
CLICK_USERS = [f"u{i}" for i in range(15)]


def clickstream_events(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """n events: about one in five updates a user's row in the table (its version + 1,
    one in ten of those deletes it instead), the rest are clicks of a user (three users
    never get a row)."""
    rng = random.Random(f"clickstream:{seed}")
    versions: dict[str, int] = {}
    events: list[dict[str, Any]] = []
    for i in range(n):
        if rng.random() < 0.2:
            user = rng.choice(CLICK_USERS[:12])
            if rng.random() < 0.1:
                events.append({"table": user, "v": None})
            else:
                versions[user] = versions.get(user, 0) + 1
                events.append({"table": user, "v": versions[user]})
        else:
            events.append({"click": i, "user": rng.choice(CLICK_USERS)})
    return events


def _click_version(click: dict[str, Any], row: Any) -> dict[str, Any]:
    return {"id": click["click"], "user": click["user"], "v": None if row is None else row["v"]}


def count_clicks(click: dict[str, Any], state: Any) -> str:
    n = state.get("n", 0) + 1
    state.set("n", n)
    return str(n)


def clickstream_pipeline() -> Pipeline:
    """Clicks looked up in a users table that changes as the job reads it, branched to
    two sinks: each click with the version of its user's row it saw, and each user's
    running click count."""
    pipeline = Pipeline("clickstream", processing_guarantee="exactly-once",
                        commit_interval=1.0, parallelism=2)
    users = pipeline.table("users", key="utf8", value="json")
    seen = (pipeline.source("clicks", value="json")
            .lookup(users, on=_user, how="left", join=_click_version))
    seen.sink("clicks-seen", key="utf8", value="json")
    (seen.key_by(_user)
        .map(count_clicks, stateful=True)
        .sink("clicks-per-user", key="utf8", value="utf8"))
    return pipeline


def clickstream_feed(events: list[dict[str, Any]]) -> Feed:
    """The table's rows keyed by user, in the partition Kafka's default partitioner gives
    the user (a key's rows in order); each user's clicks all in one partition, so the
    order of a user's clicks is the order they were made."""
    feed: Feed = {"users": [], "clicks": []}
    for e in events:
        if "table" in e:
            key = e["table"].encode()
            row = None if e["v"] is None else json.dumps({"v": e["v"]}).encode()
            feed["users"].append((kafka_partition(key, 2), key, row))
        else:
            feed["clicks"].append((zlib.crc32(e["user"].encode()) % 2, None,
                                   json.dumps(e).encode()))
    return feed


def clickstream_expected(events: list[dict[str, Any]]) -> dict[str, Expected]:
    """Per user, the clicks in the order made, each exactly once (``clicks-seen``) with a
    row version the user had (any, or none: a lookup sees the table as far as the job has
    read it), never falling back: a later click sees the same version or a later one, or
    no row only where a delete came after the version seen; and the counts 1..n
    (``clicks-per-user``). Strict on each click, tolerant on which row it met."""
    clicks: dict[str, list[int]] = defaultdict(list)
    last: dict[str, int] = {}
    last_delete: dict[str, int] = {}   # the version the user's last delete came after
    for e in events:
        if "click" in e:
            clicks[e["user"]].append(e["click"])
        elif e["v"] is not None:
            last[e["table"]] = e["v"]
        else:
            last_delete[e["table"]] = last.get(e["table"], 0)

    def check(user: Any, values: list[Any]) -> list[str]:
        problems = []
        top = last.get(user)
        before = 0
        for value in values:
            v = value.get("v") if isinstance(value, dict) else "?"
            if v is None:
                if before and last_delete.get(user, -1) < before:
                    problems.append(f"click {value!r}: no row after version {before}, which "
                                    f"no delete followed")
                continue
            if top is None or not isinstance(v, int) or not 1 <= v <= top:
                problems.append(f"click {value!r}: user {user!r} never had row version {v!r}")
            elif v < before:   # rows only move forward, and versions only grow
                problems.append(f"click {value!r}: saw version {v} after {before}")
            before = v if isinstance(v, int) else before
        return problems

    seen = Expected({u: ids for u, ids in clicks.items()}, identity=lambda value: value["id"],
                    check=check)
    counts: dict[Any, list[Any]] = {u: [str(i) for i in range(1, len(ids) + 1)]
                                    for u, ids in clicks.items()}
    return {"clicks-seen": seen,
            "clicks-per-user": Expected(counts, replayed=_count_past(counts, int))}


BUILTIN: dict[str, Workload] = {
    "wordcount": Workload(
        "wordcount", "word count: two stages, state in the second (examples/wordcount.py)",
        wordcount_pipeline, lambda seed, n: word_lines(n, seed), _counted),
    "pageviews": Workload(
        "pageviews", "page views: three stages, state in two, several producers per channel "
        "(examples/pageviews.py)",
        pageviews_pipeline, lambda seed, n: page_views(n, seed), pageviews_expected),
    "clickstream": Workload(
        "clickstream", "clicks looked up in a users table that changes as the job reads "
        "it, branched to two sinks (a graph: two sources, a table, a lookup, a branch)",
        clickstream_pipeline, lambda seed, n: clickstream_events(n, seed),
        lambda events: clickstream_expected(events)["clicks-per-user"],
        feed=clickstream_feed, sinks_oracle=clickstream_expected),
    "deadletters": Workload(
        "deadletters", "word count with dead letters on, over records some of which fail "
        "part-way through their flat_map (a value msgpack cannot carry, a raise), two of "
        "~600 KB", dead_letters_pipeline, lambda seed, n: bad_records(n, seed),
        dead_letters_expected, dead_letters=is_bad),
    "chained": Workload(
        "chained", "two jobs in a chain: wordcount (job A), whose exactly-once sink is the "
        "source of job B, which numbers each word's counts", wordcount_pipeline,
        lambda seed, n: word_lines(n, seed), _counted, then=tally_pipeline,
        then_oracle=chained_expected),
    **WINDOW_WORKLOADS,   # the event-time ones, in window_workloads.py
}


# --------------------------------------------------------------------------- user files

def load_workload(name_or_path: str) -> Workload:
    """A built-in workload by name, or a pipeline file defining ``generate`` and ``oracle``."""
    if name_or_path in BUILTIN:
        return BUILTIN[name_or_path]
    path = Path(name_or_path)
    if not path.suffix == ".py":
        raise ConfigError(f"unknown workload {name_or_path!r}: use one of "
                          f"{', '.join(sorted(BUILTIN))}, or a pipeline file (.py) that "
                          f"defines generate(seed, n) and oracle(records)")

    load_pipeline(path)   # the file's own errors, named as `eos run` names them
    try:
        namespace = runpy.run_path(str(path), run_name="eos_pipeline")
    except Exception as exc:  # it ran once already; a file that raises only sometimes
        raise PipelineFileError(f"{path}: {type(exc).__name__}: {exc} (raised while loading "
                                f"the pipeline file again)", path=str(path)) from exc
    missing = [f"{fn}({args})" for fn, args in (("generate", "seed, n"), ("oracle", "records"))
               if not callable(namespace.get(fn))]
    if missing:
        raise ConfigError(f"workload file {str(path)!r} does not define {' and '.join(missing)}: "
                          f"an experiment needs both beside the pipeline (docs/experiments.md)")
    generate, user_oracle = namespace["generate"], namespace["oracle"]

    def make_pipeline() -> Pipeline:
        return load_pipeline(path)

    def oracle(records: list[Any]) -> Expected:
        found = user_oracle(records)
        if isinstance(found, Expected):
            return found
        if not isinstance(found, dict) or not all(isinstance(v, list | tuple)
                                                  for v in found.values()):
            raise ConfigError(f"{path}: oracle(records) must return a dict of key -> list of "
                              f"values (or an Expected), not {type(found).__name__}")
        return Expected({k: list(v) for k, v in found.items()})

    def gen(seed: int, n: int) -> list[Any]:
        values = generate(seed, n)
        try:
            return list(values)
        except TypeError:
            raise ConfigError(f"{path}: generate(seed, n) must return a list of source values, "
                              f"not {type(values).__name__}") from None

    parts = namespace.get("SOURCE_PARTITIONS", 2)
    if type(parts) is not int or parts < 1:
        raise ConfigError(f"{path}: SOURCE_PARTITIONS must be a positive integer, not {parts!r}")
    pipeline = make_pipeline()
    return Workload(pipeline.name, (namespace.get("__doc__") or "").strip().split("\n")[0],
                    make_pipeline, gen, oracle, source_partitions=parts, origin=str(path))


def hashable(value: Any) -> Any:
    """Values the sink decodes to dicts or lists (json, msgpack) compared by content."""
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return value


def check_refused(w: Workload, kinds: Sequence[str], soak: bool) -> None:
    """Refuse a kind (or a soak) the workload cannot be judged under, saying why."""
    for kind in [*kinds, *(["soak"] if soak else [])]:
        why = w.refused.get(kind)
        if why is not None:
            what = "a soak (--duration)" if kind == "soak" else f"fault kind {kind!r}"
            raise ConfigError(f"workload {w.name!r} refuses {what}: {why}")

