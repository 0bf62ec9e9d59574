"""The example pipelines end to end on Spark, on the local log and on the real broker, in
both modes, compared record by record with an oracle computed from the input."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pytest

from eos_runtime.joblog.committed import read_output
from eos_runtime.runner import load_pipeline, run_pipeline
from eos_runtime.transport import open_transport

from pipeline_oracles import (
    check_pageviews_exactly_once,
    check_wordcount_at_least_once,
    check_wordcount_exactly_once,
    encode_lines,
    encode_views,
    page_views,
    produce,
    word_lines,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def transport_opts(kind, tmp_path, request) -> dict:
    if kind == "local":
        return {"data_dir": str(tmp_path / "data")}
    return {"bootstrap_servers": request.getfixturevalue("kafka_bootstrap")}


def fresh_pipeline(name: str, suffix: str):
    """The example with topics renamed per test, so tests on one broker do not meet
    (a broker may outlive many test sessions: the suffix ends in a random part)."""
    suffix = f"{suffix}-{uuid.uuid4().hex[:6]}"
    pipeline = load_pipeline(EXAMPLES / f"{name}.py")
    pipeline.rename(f"{pipeline.name}-{suffix}", source=f"{pipeline.source_topic}-{suffix}",
                    sink=f"{pipeline.sink_topic}-{suffix}")
    return pipeline, pipeline.source_topic, pipeline.sink_topic


KINDS = ["local", pytest.param("kafka", marks=pytest.mark.kafka)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_wordcount_matches_the_oracle(kind, guarantee, tmp_path, request):
    opts = transport_opts(kind, tmp_path, request)
    suffix = f"{kind}-{guarantee}-{tmp_path.name[-8:]}".replace("_", "-")
    pipeline, source, sink = fresh_pipeline("wordcount", suffix)
    lines = word_lines(1500)
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(lines))
    summary = run_pipeline(pipeline, guarantee=guarantee, commit_every=300,
                           state_dir=str(tmp_path / "state"), **opts)
    assert summary.input_records == len(lines)
    with open_transport(**opts) as t:
        if guarantee == "exactly-once":
            check_wordcount_exactly_once(read_output(t, sink, job=pipeline.name), lines)
        else:
            # the committed view (eos consume --job): at-least-once may duplicate after a
            # crash, but this run has none, and it must never lose a count
            records = read_output(t, sink, job=pipeline.name)
            assert check_wordcount_at_least_once(records, lines) == 0


@pytest.mark.parametrize("kind", KINDS)
def test_three_stage_pageviews_matches_the_oracle(kind, tmp_path, request):
    opts = transport_opts(kind, tmp_path, request)
    suffix = f"{kind}-{tmp_path.name[-8:]}".replace("_", "-")
    pipeline, source, sink = fresh_pipeline("pageviews", suffix)
    views = page_views(1500)
    with open_transport(**opts) as t:
        produce(t, source, encode_views(views))
    summary = run_pipeline(pipeline, commit_every=250, state_dir=str(tmp_path / "state"), **opts)
    assert [len(s["tasks"]) for s in summary.plan] == [2, 2, 2]
    with open_transport(**opts) as t:
        check_pageviews_exactly_once(read_output(t, sink, job=pipeline.name), views)


def _page_totals(page: str, first_visits: list[bool]):
    """The sink records of one page whose views counted, in this order, as first visits
    or not (what pageviews' last stage writes)."""
    from eos_runtime.transport import Record

    visitors = 0
    out = []
    for views, first in enumerate(first_visits, 1):
        visitors += first
        out.append(Record("page-totals", 0, views - 1, page.encode(),
                          f"{views}:{visitors}".encode(), 0))
    return out


# /a: u1 and u2 twice each, u3 and u4 once: 6 views, 4 visitors.
SIX_VIEWS = [{"user": u, "page": "/a"} for u in ("u1", "u1", "u2", "u2", "u3", "u4")]


@pytest.mark.parametrize("first_visits", [
    # u2's first view lost (its second counts as a repeat), u4's counted twice
    [True, False, False, True, True, True],
    # u1's first view lost (its other view, read first, counts as a repeat), u3's counted twice
    [False, True, True, True, True, False],
])
def test_the_pageviews_check_catches_a_lost_first_visit_made_up_by_a_duplicate(first_visits):
    """Views still run 1..6 and the last record still has 4 visitors: only the records
    before it show that a first visit was lost and another counted twice."""
    check_pageviews_exactly_once(_page_totals("/a", [True, False, True, False, True, True]),
                                 SIX_VIEWS)   # the views in input order: a true output
    with pytest.raises(AssertionError):
        check_pageviews_exactly_once(_page_totals("/a", first_visits), SIX_VIEWS)


def test_user_errors_are_refused_before_anything_starts(tmp_path):
    from eos_runtime import Pipeline
    from eos_runtime.errors import ConfigError

    opts = {"data_dir": str(tmp_path / "data")}
    p = Pipeline("nosrc")
    p.source("missing-topic").sink("out")
    with pytest.raises(ConfigError, match="source topic 'missing-topic' does not exist"):
        run_pipeline(p, **opts)
    with pytest.raises(ConfigError, match="has no key"):
        Pipeline("nokey").source("x").map(lambda v, s: v, stateful=True)
    big = Pipeline("big")
    with open_transport(**opts) as t:
        produce(t, "two-parts", [b"a"], partitions=2)
    big.source("two-parts").key_by(str, parallelism=3).sink("out")
    from eos_runtime.engine import EngineError
    with pytest.raises((ConfigError, EngineError), match="slots"):
        run_pipeline(big, master="local[3]", **opts)


def test_a_user_function_that_raises_stops_the_task_naming_the_record(tmp_path, monkeypatch):
    from eos_runtime import Pipeline
    from eos_runtime.engine import EngineError

    opts = {"data_dir": str(tmp_path / "data")}
    with open_transport(**opts) as t:
        produce(t, "nums", [str(i).encode() for i in range(1000)], partitions=1)

    def checked(v):
        if v == 500:
            raise ValueError("no 500 please")
        return v

    p = Pipeline("fails", commit_every=100)
    p.source("nums", value="utf8").map(int).map(checked).map(str).sink("out")
    with pytest.raises(EngineError) as info:
        run_pipeline(p, max_attempts=2, poll_records=50, **opts)
    msg = str(info.value)
    assert "topic='nums' partition=0 offset=500, value '500'" in msg and "no 500 please" in msg
    line = checked.__code__.co_firstlineno + 2
    assert f"step map(checked) at test_pipelines.py:{line} raised ValueError" in msg, msg
    # the user's frames travel with the error (issue 27 item 7): eos run --traceback
    # prints them; EOS_TRACEBACK=1 adds them to the error as a note for API users
    frames = info.value.user_traceback
    assert frames is not None and f"line {line}, in checked" in frames, frames
    assert not getattr(info.value, "__notes__", None)
    with open_transport(**opts) as t:
        got = [int(r.value) for r in read_output(t, "out", job="fails")]
    assert got == list(range(len(got))) and len(got) <= 500, "committed past the failing record"
    assert len(got) >= 400  # the checkpoints before it did commit

    bad_key = Pipeline("badkey")
    bad_key.source("nums", value="utf8").key_by(lambda v: str(1 // (int(v) - 700))).sink("out2")
    monkeypatch.setenv("EOS_TRACEBACK", "1")
    with pytest.raises(EngineError) as info:
        run_pipeline(bad_key, max_attempts=1, poll_records=50, **opts)
    assert "offset=700, value '700'" in str(info.value)
    assert "key_by(<lambda>) at test_pipelines.py:" in str(info.value)
    assert "raised ZeroDivisionError" in str(info.value)
    [note] = info.value.__notes__
    assert note.startswith("Traceback of the pipeline's own code") and "<lambda>" in note


def test_a_full_early_arrival_buffer_overflows_and_loses_nothing(tmp_path):
    """Invariant 8 with a 1-byte buffer: always full, so every early arrival overflows
    (aligner R8) and its channel is read again once its version opens; nothing is lost
    or counted twice."""
    opts = {"data_dir": str(tmp_path / "data")}
    pipeline, source, sink = fresh_pipeline("pageviews", "bp")
    views = page_views(1500)
    with open_transport(**opts) as t:
        produce(t, source, encode_views(views))
    summary = run_pipeline(pipeline, commit_every=100, poll_records=50, buffer_max_bytes=1,
                           state_dir=str(tmp_path / "state"), **opts)
    assert sum(t["overflowed"] for t in summary.tasks) > 0, "nothing arrived early"
    assert sum(t["rereads"] for t in summary.tasks) > 0
    assert all(t["max_buffer_bytes"] <= 1 for t in summary.tasks)
    with open_transport(**opts) as t:
        check_pageviews_exactly_once(read_output(t, sink, job=pipeline.name), views)


def _parse(line):
    return int(line)                       # "oops-7" raises ValueError in the source stage


def _running_total(v, state):
    if v % 250 == 0:
        raise RuntimeError(f"no multiples of 250 ({v})")   # raises in the downstream stage
    total = state.get("total", 0) + v
    state.set("total", total)
    return f"{v}:{total}"


@pytest.mark.parametrize("kind", KINDS)
def test_dead_letters_take_the_failing_records_exactly_once_and_the_run_goes_on(
        kind, tmp_path, request):
    from eos_runtime import Pipeline

    opts = transport_opts(kind, tmp_path, request)
    tag = uuid.uuid4().hex[:6]
    lines = [f"oops-{i}" if i % 97 == 0 else str(i) for i in range(1, 1201)]
    with open_transport(**opts) as t:
        produce(t, f"nums-{tag}", [x.encode() for x in lines])
    p = Pipeline(f"dead-{tag}", commit_every=150, dead_letters=True, parallelism=2)
    (p.source(f"nums-{tag}", value="utf8").map(_parse).key_by(lambda v: v % 3)
        .map(_running_total, stateful=True).sink(f"totals-{tag}"))
    crash = [{"point": "task.checkpoint.before_commit", "task": 3, "hit": 2}]
    summary = run_pipeline(p, fault=crash, **opts)
    assert sum(t["dead_letters"] for t in summary.tasks[:2]) == 12   # the source tasks'
    # and the retried task's: 250, 500, 750, 1000, each counted once across its attempts
    assert sum(t["dead_letters"] for t in summary.tasks[2:]) == 4

    good = [int(x) for x in lines if not x.startswith("oops")]
    with open_transport(**opts) as t:
        out = read_output(t, f"totals-{tag}", job=p.name)
        dead = read_output(t, f"{p.name}.dead-letters", job=p.name)
    # Per key (v % 3): every good value once, and the totals are the running sums in the
    # order the values came out (the two source partitions interleave in any order).
    got: dict[int, list[tuple[int, int]]] = {0: [], 1: [], 2: []}
    for r in sorted(out, key=lambda r: (r.partition, r.offset)):
        v, total = map(int, r.value.decode().split(":"))
        got[v % 3].append((v, total))
    for k, pairs in got.items():
        assert sorted(v for v, _ in pairs) == [v for v in good if v % 3 == k and v % 250]
        sums = [sum(v for v, _ in pairs[:i + 1]) for i in range(len(pairs))]
        assert [total for _, total in pairs] == sums, f"key {k}: state counted a record twice"
    letters = sorted((json.loads(r.value) for r in dead), key=lambda d: str(d["value"]))
    assert sorted(d["value"] for d in letters) == sorted(
        [x for x in lines if x.startswith("oops")] + [repr(v) for v in good if v % 250 == 0])
    first = next(d for d in letters if d["value"] == "oops-97")
    assert first["topic"] == f"nums-{tag}" and first["task"] in (0, 1)
    # the step and the user's line first (issue 27 item 7), then the error
    assert first["error"].startswith("step map(_parse) at test_pipelines.py:")
    assert "raised ValueError: invalid literal for int()" in first["error"]
    second = next(d for d in letters if d["value"] == "250")
    assert second["error"].startswith("step map(_running_total) at test_pipelines.py:")
    assert second["error"].endswith(" raised RuntimeError: no multiples of 250 (250)")
    assert second["topic"] == f"{p.name}.shuffle-1" and second["key"] == "1"


# The local log's plain producer appends on its own once this many records wait for one
# partition (transport/locallog/clients.py); only then can a checkpoint's output be cut in pieces.
from eos_runtime.transport.locallog import _LocalProducer  # noqa: E402

LAST_LINE = "~end~"
COPIES = 16


def _words_then_wait(line):
    # The last line of each source partition holds its source back for a second: both
    # sink tasks have read everything by then and wait for the end-of-run markers, which
    # then reach them together, so their final checkpoints write at the same time.
    if line == LAST_LINE:
        import time

        time.sleep(1.0)
        return []
    return line.split()


def _count(word, state):
    n = state.get("count", 0) + 1
    state.set("count", n)
    return str(n)


def _copies(count):
    return [count] * COPIES


def test_at_least_once_committed_view_on_the_local_log_loses_nothing(tmp_path):
    """Two sink tasks write the one sink partition, and each holds many batches' worth of
    output for its last checkpoint: their appends interleave. An at-least-once reader sees
    every record the sinks wrote, as a read_committed Kafka reader does (that output is
    not transactional there either)."""
    from eos_runtime import Pipeline
    from eos_runtime.joblog.control import ControlLog

    opts = {"data_dir": str(tmp_path / "data")}
    tag = uuid.uuid4().hex[:6]
    lines = word_lines(3000)
    words = Counter(w for line in lines for w in line.split())
    assert sum(words.values()) * COPIES >= 20 * _LocalProducer.MAX_PENDING
    with open_transport(**opts) as t:
        produce(t, f"lines-{tag}", encode_lines(lines + [LAST_LINE, LAST_LINE]))
    # no timer checkpoints: every sink task holds all its output for the end of the run (the
    # commit grid's lines of 1e9 s are in 2001 and 2033)
    p = Pipeline(f"alo-{tag}", processing_guarantee="at-least-once", commit_interval=1e9,
                 parallelism=2)
    (p.source(f"lines-{tag}", value="utf8").flat_map(_words_then_wait).key_by(lambda w: w)
        .map(_count, stateful=True).flat_map(_copies).sink(f"counts-{tag}", key="utf8"))
    summary = run_pipeline(p, state_dir=str(tmp_path / "state"), **opts)
    assert [len(s["tasks"]) for s in summary.plan] == [2, 2]
    with open_transport(**opts) as t:
        assert t.describe(f"counts-{tag}").partitions == 1
        got = Counter((r.key.decode(), r.value.decode())
                      for r in read_output(t, f"counts-{tag}", job=p.name))
    want = Counter({(w, str(i)): COPIES for w, n in words.items() for i in range(1, n + 1)})
    lost, extra = sum((want - got).values()), sum((got - want).values())
    assert lost == 0, f"{lost} of {sum(want.values())} records lost"
    assert extra == 0, f"{extra} duplicates in a run without a crash"
    with open_transport(**opts) as t:
        assert ControlLog(t, p.name).guarantee() == "at-least-once"
