"""Windows on Spark (issue 25): views per page per tumbling window, each window's final
count once in the committed output, checked against an oracle computed from the input
alone; with records late by construction counted and set aside."""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter

import pytest

from eos_runtime import Pipeline
from eos_runtime.experiments.window_workloads import recent_epoch
from eos_runtime.joblog.committed import read_output
from eos_runtime.transport import open_transport
from eos_runtime.windows import tumbling

from pipeline_oracles import run_by_count, run_until_a_result
from test_pipelines import KINDS, transport_opts

SIZE, GRACE = 1_000, 300
# Event time starts today: a Kafka broker deletes records whose timestamps (a result's is
# its window's) are older than retention.ms, at its retention checks, mid-run.
EPOCH = recent_epoch()
PAGES = ["/", "/a", "/b", "/c"]


def views_pipeline(suffix: str, dead_letters: bool = False) -> Pipeline:
    p = Pipeline(f"views-{suffix}", parallelism=2, dead_letters=dead_letters)
    (p.source(f"views-{suffix}", value="json", timestamp=lambda v: v["ts"])
        .key_by(lambda v: v["page"])
        .window(tumbling(SIZE), grace=GRACE)
        .count()
        .final()
        .sink(f"per-window-{suffix}", key="utf8", value="json"))
    return p


def partition_views(seed: int, n: int, disorder: int) -> list[list[dict]]:
    """Two partitions' views, time going up ~10 ms a view, each view up to ``disorder`` ms
    before its partition's latest: within the grace, nothing is late."""
    rng = random.Random(seed)
    parts: list[list[dict]] = [[], []]
    clock = [0, 0]
    for i in range(n):
        p = i % 2
        clock[p] += rng.randint(0, 20)
        parts[p].append({"id": i, "page": rng.choice(PAGES),
                         "ts": EPOCH + max(0, clock[p] - rng.randint(0, disorder))})
    return parts


def expected(parts: list[list[dict]]) -> Counter:
    """What a bounded run closes: the windows whose end + grace is at or below the lowest
    of the partitions' highest times (each source task reads one partition)."""
    watermark = min(max(v["ts"] for v in vs) for vs in parts if vs)
    counts: Counter = Counter()
    for vs in parts:
        for v in vs:
            start = v["ts"] - v["ts"] % SIZE
            if start + SIZE + GRACE <= watermark:
                counts[(v["page"], start)] += 1
    return counts


def write(t, topic: str, parts: list[list[dict]]) -> None:
    from eos_runtime.transport import TopicSpec

    t.create_topics([TopicSpec(topic, len(parts))])
    with t.producer() as prod:
        for p, vs in enumerate(parts):
            for v in vs:
                prod.produce(topic, p, json.dumps(v).encode())
        prod.flush()


def results(t, topic: str, job: str) -> Counter:
    got: Counter = Counter()
    for r in read_output(t, topic, job=job):
        v = json.loads(r.value)
        assert v["end"] == v["start"] + SIZE
        got[(r.key.decode(), v["start"])] += v["value"]
    return got


def once_each(t, topic: str, job: str) -> list[tuple[str, int]]:
    return [(r.key.decode(), json.loads(r.value)["start"])
            for r in read_output(t, topic, job=job)]


@pytest.mark.parametrize("kind", KINDS)
def test_each_window_s_final_count_is_committed_once(kind, tmp_path, request):
    opts = transport_opts(kind, tmp_path, request)
    suffix = f"{kind}-{uuid.uuid4().hex[:6]}"
    p = views_pipeline(suffix)
    parts = partition_views(7, 1200, disorder=GRACE)
    with open_transport(**opts) as t:
        write(t, f"views-{suffix}", parts)
    summary = run_by_count(p, tmp_path, opts)
    want = expected(parts)
    assert len(want) >= 16
    with open_transport(**opts) as t:
        keys = once_each(t, f"per-window-{suffix}", p.name)
        assert len(keys) == len(set(keys)), "a window's result came twice"
        assert results(t, f"per-window-{suffix}", p.name) == want
    assert sum(s["late"] for s in summary.tasks) == 0
    # T2, T3: what stays in the window tasks' stores is the windows still open, one
    # aggregate and one timer each; a closed window leaves nothing
    every = {(v["page"], v["ts"] - v["ts"] % SIZE) for vs in parts for v in vs}
    assert stored(tmp_path, p, "timers") == stored(tmp_path, p, "window0") \
        == len(every) - len(want) > 0


def stored(tmp_path, p: Pipeline, store: str) -> int:
    from eos_runtime.state import TaskStore

    n = 0
    for task in (2, 3):
        with TaskStore(tmp_path / "state" / p.name / f"task-{task}", ["window0", "timers"]) as s:
            n += sum(1 for _ in s.items(store))
    return n


def test_a_window_s_result_survives_a_crash_after_it_fired(tmp_path):
    """A crash between the firing and the commit (``task.window.fired``): the restarted
    task fires the window again, from state the crash left as it was."""
    opts = {"data_dir": str(tmp_path / "data")}
    suffix = f"crash-{uuid.uuid4().hex[:6]}"
    p = views_pipeline(suffix)
    parts = partition_views(8, 1200, disorder=GRACE)
    with open_transport(**opts) as t:
        write(t, f"views-{suffix}", parts)
    summary = run_by_count(p, tmp_path, opts, fault=[
        {"point": "task.window.fired", "task": 2, "hit": 3, "attempt": 0}])
    assert summary.tasks[2]["attempt"] == 1, "the crash point did not fire"
    with open_transport(**opts) as t:
        keys = once_each(t, f"per-window-{suffix}", p.name)
        assert len(keys) == len(set(keys))
        assert results(t, f"per-window-{suffix}", p.name) == expected(parts)


def test_late_records_are_counted_and_set_aside(tmp_path):
    opts = {"data_dir": str(tmp_path / "data")}
    suffix = f"late-{uuid.uuid4().hex[:6]}"
    p = views_pipeline(suffix, dead_letters=True)
    parts = partition_views(9, 1200, disorder=GRACE)
    # records so late that any watermark past the first windows makes them late
    late = [{"id": 10_000 + i, "page": "/", "ts": EPOCH} for i in range(5)]
    for vs in parts:
        vs[len(vs) // 2:len(vs) // 2] = late
    with open_transport(**opts) as t:
        write(t, f"views-{suffix}", parts)
    summary = run_by_count(p, tmp_path, opts)
    assert sum(s["late"] for s in summary.tasks) == 10
    with open_transport(**opts) as t:
        letters = [json.loads(r.value) for r in read_output(t, f"{p.name}.dead-letters",
                                                            job=p.name)]
    assert len(letters) == 10 and all(x["error"].startswith("late:") for x in letters)
    # and what the record's stage reads, as every other letter says (a late one did not)
    assert all(x.get("stream", "").startswith("stage ") for x in letters), letters[0]
    # the tasks' dead-letter count is what the topic holds: the late ones too
    assert sum(s["dead_letters"] for s in summary.tasks) == 10


@pytest.mark.parametrize("task", [0, 3])
def test_at_least_once_a_window_s_result_may_repeat_but_is_never_lost(task, tmp_path):
    """Watermarks ride on the markers, which an at-least-once job with windows sends at
    every checkpoint too (G1 widened): windows close during the run, not only at its end.
    A crash of a source task (0) or a window task (3, the one with most keys) replays;
    every window is there."""
    opts = {"data_dir": str(tmp_path / "data")}
    suffix = f"alo-{task}-{uuid.uuid4().hex[:6]}"
    p = views_pipeline(suffix)
    parts = partition_views(10, 1200, disorder=GRACE)
    with open_transport(**opts) as t:
        write(t, f"views-{suffix}", parts)
    summary = run_by_count(p, tmp_path, opts, guarantee="at-least-once", fault=[
        {"point": "task.checkpoint.after_output_flush", "task": task, "hit": 2, "attempt": 0}])
    assert summary.tasks[task]["attempt"] == 1, ("the crash point did not fire",
                                                 summary.tasks)
    want = expected(parts)
    best: dict = {}
    with open_transport(**opts) as t:
        for r in read_output(t, f"per-window-{suffix}", job=p.name):
            v = json.loads(r.value)
            k = (r.key.decode(), v["start"])
            best[k] = max(best.get(k, 0), v["value"])
    assert set(best) == set(want)
    assert all(best[k] >= n for k, n in want.items())
    # the sources sent markers with their watermarks at checkpoints before the run's
    # end, so windows could close during the run, not all at its end
    with open_transport(**opts) as t:
        marks = channel_markers(t, f"{p.name}.shuffle-1")
    assert any(m.watermark is not None and m.version < marks[-1].version for m in marks)


def channel_markers(t, topic: str) -> list:
    """Every marker in a channel topic's partitions, by version."""
    from eos_runtime.protocol import wire
    from eos_runtime.transport import TopicPartition

    out = []
    with t.consumer(read_committed=False) as c:
        for p in range(2):
            tp = TopicPartition(topic, p)
            c.assign({tp: 0})
            while c.position(tp) < t.watermarks(tp, read_committed=False)[1]:
                for r in c.poll(10_000, 0.5):
                    rec = wire.decode_channel(r.value)
                    if isinstance(rec, wire.Marker):
                        out.append(rec)
    return sorted(out, key=lambda m: m.version)


def test_a_windowed_join_commits_each_pair_once_under_a_crash(tmp_path):
    """Purchases joined with the clicks of the same user within 200 ms: every pair of the
    input, each once, with the join task crashing between a firing and its commit."""
    opts = {"data_dir": str(tmp_path / "data")}
    suffix = f"join-{uuid.uuid4().hex[:6]}"
    p = Pipeline(f"attribution-{suffix}", parallelism=2)
    clicks = p.source(f"clicks-{suffix}", value="json", timestamp=lambda c: c["ts"])
    buys = p.source(f"buys-{suffix}", value="json", timestamp=lambda b: b["ts"])
    (buys.join(clicks, within=200, on=(lambda b: b["user"], lambda c: c["user"]),
               join=lambda b, c: [b["id"], c["id"]], grace=GRACE)
        .sink(f"attributed-{suffix}", key="utf8", value="json"))
    rng = random.Random(11)

    def side(prefix: str, n: int) -> list[list[dict]]:
        parts: list[list[dict]] = [[], []]
        clock = [0, 0]
        for i in range(n):
            k = i % 2
            clock[k] += rng.randint(0, 20)
            parts[k].append({"id": f"{prefix}{i}", "user": f"u{rng.randint(0, 9)}",
                             "ts": max(0, clock[k] - rng.randint(0, GRACE))})
        return parts

    cs, bs = side("c", 600), side("b", 600)
    with open_transport(**opts) as t:
        write(t, f"clicks-{suffix}", cs)
        write(t, f"buys-{suffix}", bs)
    summary = run_by_count(p, tmp_path, opts, fault=[
        {"point": "task.window.fired", "task": 4, "hit": 2, "attempt": 0}])
    assert summary.tasks[4]["attempt"] == 1, "the crash point did not fire"
    want = sorted([b["id"], c["id"]] for b in sum(bs, []) for c in sum(cs, [])
                  if b["user"] == c["user"] and abs(b["ts"] - c["ts"]) <= 200)
    with open_transport(**opts) as t:
        got = sorted(json.loads(r.value) for r in read_output(t, f"attributed-{suffix}",
                                                              job=p.name))
    assert sum(s["late"] for s in summary.tasks) == 0, [s["late"] for s in summary.tasks]
    assert len(want) > 100 and got == want


def test_an_empty_partition_holds_no_window_open_at_the_run_s_end(tmp_path):
    """A third partition that never had a record: its source task read nothing, and at
    the run's end it holds nothing back (W4 at the end); the windows the other two
    partitions close are in the output."""
    opts = {"data_dir": str(tmp_path / "data")}
    suffix = f"empty-{uuid.uuid4().hex[:6]}"
    p = views_pipeline(suffix)
    parts = partition_views(12, 600, disorder=GRACE) + [[]]
    with open_transport(**opts) as t:
        write(t, f"views-{suffix}", parts)
    run_by_count(p, tmp_path, opts)
    want = expected(parts)
    assert want
    with open_transport(**opts) as t:
        assert results(t, f"per-window-{suffix}", p.name) == want


def _view_time(view):
    return view["at"]


def _view_page(view):
    return view["page"]


@pytest.mark.parametrize("guarantee,crash", [("exactly-once", False), ("at-least-once", False),
                                             ("exactly-once", True)])
def test_idle_sources_hold_no_window_back_in_an_unbounded_run(tmp_path, guarantee, crash):
    """W7: a merge of two sources, one partition of the first and the whole second empty.
    Their source tasks' watermarks were None (nothing read), and W4 takes the minimum over
    every producer, so no window closed until the run was stopped, idle_after or not.
    With idle_after they say idle, and the window commits while the run goes on. With a
    crash of the window's task between its firing and its commit, the restarted task (its
    lanes busy at the checkpoint's watermark until the next markers) fires it again, and
    the committed output has it once."""
    from eos_runtime.transport import TopicSpec

    opts = {"data_dir": str(tmp_path / "data")}
    suffix = uuid.uuid4().hex[:8]
    p = Pipeline(f"idle-{suffix}", processing_guarantee=guarantee)
    a = p.source(f"a-{suffix}", value="json", timestamp=_view_time, idle_after=0.5)
    b = p.source(f"b-{suffix}", value="json", timestamp=_view_time, idle_after=0.5)
    (a.merge(b).key_by(_view_page).window(tumbling(seconds=1)).count().final()
     .sink(f"per-page-{suffix}", value="json"))
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec(f"a-{suffix}", 2), TopicSpec(f"b-{suffix}", 1)])
        with t.producer() as prod:
            for at in (0, 300, 600, 900, 5000, 5100):
                prod.produce(f"a-{suffix}", 0, json.dumps({"page": "/", "at": at}).encode())
            prod.flush()
    fault = ([{"point": "task.window.fired", "task": 3, "hit": 1, "attempt": 0}] if crash
             else None)
    summary = run_until_a_result(p, tmp_path, opts, fault=fault)
    with open_transport(**opts) as t:
        out = [json.loads(r.value) for r in read_output(t, f"per-page-{suffix}", job=p.name)]
    assert out[0] == {"start": 0, "end": 1000, "value": 4}, out
    if crash:
        assert summary.tasks[3]["attempt"] == 1, "the crash point did not fire"
        assert out == [{"start": 0, "end": 1000, "value": 4}], out
