"""Tables and lookups (issue 24): a keyed topic read as a table, whose rows the tasks
that look it up keep as task state, fed through their channels by the table's own tasks.
In-process through the testing helper, and on Spark under crashes, each click checked
against an oracle: once in the enriched output with a country the user could have had,
and each user's counts exactly 1..n."""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from pathlib import Path

import pytest

from eos_runtime import Pipeline
from eos_runtime.errors import ConfigError, UserFunctionError
from eos_runtime.graph import stage_graph
from eos_runtime.joblog.committed import read_output
from eos_runtime.runner import load_pipeline
from eos_runtime.testing import TestRun, run_steps
from eos_runtime.transport import TopicSpec, open_transport

from pipeline_oracles import run_by_count, run_until_a_result

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "clickstream.py"


def clickstream(suffix: str = ""):
    p = load_pipeline(EXAMPLE)
    if suffix:
        p.rename(f"clickstream-{suffix}",
                 sources={"users": f"users-{suffix}", "clicks": f"clicks-{suffix}"},
                 sinks={"enriched-clicks": f"enriched-{suffix}",
                        "clicks-per-user": f"per-user-{suffix}"})
    return p


# --------------------------------------------------------------------------- the API

def test_a_lookup_sees_the_latest_row_and_a_null_value_deletes_it():
    p = clickstream()
    with TestRun(p) as test:
        out = test.send({"users": [("u1", {"name": "Ann", "country": "NO"})],
                         "clicks": [{"id": 1, "user": "u1"}, {"id": 2, "user": "u2"}]})
        assert out["enriched-clicks"] == [(None, {"id": 1, "user": "u1", "country": "NO"}),
                                          (None, {"id": 2, "user": "u2", "country": None})]
        assert out["clicks-per-user"] == [("u1", "1"), ("u2", "1")]
        out = test.send({"users": [("u1", {"name": "Ann", "country": "SE"}), ("u2", None)],
                         "clicks": [{"id": 3, "user": "u1"}]})
        assert out["enriched-clicks"] == [(None, {"id": 3, "user": "u1", "country": "SE"})]
        out = test.send({"users": [("u1", None)], "clicks": [{"id": 4, "user": "u1"}]})
        assert out["enriched-clicks"] == [(None, {"id": 4, "user": "u1", "country": None})]
        assert out["clicks-per-user"] == [("u1", "3")]


def test_an_inner_lookup_drops_what_the_table_lacks_and_without_join_gives_pairs():
    p = Pipeline("inner")
    prices = p.table("prices", key="utf8", value="json")
    (p.source("orders", value="json").lookup(prices, on=lambda o: o["item"])
        .sink("priced", value="json"))
    out = run_steps(p, {"prices": [("pen", 2)],
                        "orders": [{"item": "pen"}, {"item": "ink"}]})
    assert out == [(None, [{"item": "pen"}, 2])]    # a pair crosses as a list


def test_the_table_is_a_stage_of_its_own_feeding_the_lookup_stage():
    stages = stage_graph(clickstream())
    table, clicks, lookup, per_user = stages
    assert table.source is not None and table.source.table and table.source.topic == "users"
    assert [o.to_stage for o in table.outputs] == [2] and table.outputs[0].shuffle.key_fn is None
    assert lookup.upstream == (0, 1) and [(f.stage, f.store) for f in lookup.tables] == [
        (0, "table0")]
    assert lookup.stores == ("table0",) and not lookup.is_chain
    assert per_user.upstream == (2,)


def test_lookups_refuse_what_cannot_run_where_it_is_written():
    p = Pipeline("bad")
    t = p.table("t")
    s = p.source("s")
    with pytest.raises(ConfigError, match=r"not keyed by a key_by: give on=key_fn"):
        s.lookup(t)
    with pytest.raises(ConfigError, match=r"how='outer': use 'inner' or 'left'"):
        s.lookup(t, on=str, how="outer")
    with pytest.raises(ConfigError, match=r"expected a table of this pipeline"):
        s.lookup(Pipeline("other").table("t"), on=str)
    with pytest.raises(ConfigError, match=r"a join function is called as"):
        s.lookup(t, on=str, join=lambda only: only)
    with pytest.raises(ConfigError, match=r"already reads it"):
        p.table("s")
    lonely = Pipeline("lonely")
    lonely.table("t")
    lonely.source("s").sink("out")
    with pytest.raises(ConfigError, match=r"table 't' is looked up by no stream"):
        stage_graph(lonely)


def test_several_topics_are_sent_per_topic():
    with TestRun(clickstream()) as test:
        with pytest.raises(ConfigError, match=r"reads users, clicks: send records per topic"):
            test.send([{"id": 1, "user": "u1"}])
        with pytest.raises(ConfigError, match=r"'orders' is not a source or table"):
            test.send({"orders": []})


# --------------------------------------------------------------------------- on Spark

USERS = {f"u{i}": {"name": f"user {i}", "country": random.Random(i).choice("NO SE DK".split())}
         for i in range(20)}


def _produce(t, suffix: str, clicks: list[dict]) -> None:
    t.create_topics([TopicSpec(f"users-{suffix}", 2), TopicSpec(f"clicks-{suffix}", 2)])
    with t.producer() as prod:
        for i, (user, row) in enumerate(USERS.items()):
            prod.produce(f"users-{suffix}", i % 2, json.dumps(row).encode(), key=user.encode())
        prod.produce(f"users-{suffix}", 0, None, key=b"u0")       # u0 deleted again
        for i, click in enumerate(clicks):
            prod.produce(f"clicks-{suffix}", i % 2, json.dumps(click).encode())
        prod.flush()


def _check(t, p, suffix: str, clicks: list[dict], exactly_once: bool) -> None:
    enriched = [json.loads(r.value) for r in read_output(t, f"enriched-{suffix}", job=p.name)]
    per_user = read_output(t, f"per-user-{suffix}", job=p.name)
    ids = Counter(c["id"] for c in enriched)
    if exactly_once:
        assert ids == Counter(c["id"] for c in clicks), "each click exactly once"
    else:
        assert set(ids) == {c["id"] for c in clicks}, "no click lost"
    for c in enriched:   # a row the user had at some point, or none yet
        row = USERS.get(c["user"])
        assert c["country"] in ({None, row["country"]} if row else {None}), c
    if exactly_once:
        got: dict[str, list[str]] = {}
        for r in per_user:
            got.setdefault(r.key.decode(), []).append(r.value.decode())
        want = Counter(c["user"] for c in clicks)
        assert got == {u: [str(i) for i in range(1, n + 1)] for u, n in want.items()}


def run_clicks(tmp_path, opts, guarantee="exactly-once", fault=None, *, misses=False):
    """``misses``: the lookup tasks' ``lookup_misses`` add up to the clicks enriched with no
    row (one attempt each: no fault)."""
    suffix = uuid.uuid4().hex[:8]
    p = clickstream(suffix)
    rng = random.Random(7)
    clicks = [{"id": i, "user": f"u{rng.randrange(25)}"} for i in range(1200)]
    with open_transport(**opts) as t:
        _produce(t, suffix, clicks)
    summary = run_by_count(p, tmp_path, opts, guarantee, fault)
    with open_transport(**opts) as t:
        _check(t, p, suffix, clicks, guarantee == "exactly-once")
        if misses:
            enriched = [json.loads(r.value) for r in read_output(t, f"enriched-{suffix}",
                                                                  job=p.name)]
            rowless = sum(c["country"] is None for c in enriched)
            assert rowless > 0   # users without a row (and clicks before their row)
            assert sum(t_["lookup_misses"] for t_ in summary.tasks) == rowless
    return summary


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_clickstream_matches_its_oracle(guarantee, tmp_path):
    run_clicks(tmp_path, {"data_dir": str(tmp_path / "data")}, guarantee, misses=True)


# Tasks: the users table 0-1, clicks 2-3, the lookup 4-5, the counts 6-7.
@pytest.mark.parametrize("point,task,hit", [
    ("task.checkpoint.after_commit", 0, 1),      # a table task after its first commit
    ("task.checkpoint.before_commit", 4, 2),     # the lookup, table rows staged
    ("task.checkpoint.after_store", 5, 3),       # the lookup, rows in RocksDB, no markers
])
def test_clickstream_is_exact_under_a_crash(point, task, hit, tmp_path):
    summary = run_clicks(tmp_path, {"data_dir": str(tmp_path / "data")}, fault=[
        {"point": point, "task": task, "hit": hit, "attempt": 0}])
    assert summary.tasks[task]["attempt"] == 1, "the crash point did not fire"


@pytest.mark.kafka
def test_clickstream_on_kafka(tmp_path, kafka_bootstrap):
    run_clicks(tmp_path, {"bootstrap_servers": kafka_bootstrap}, fault=[
        {"point": "task.checkpoint.before_commit", "task": 4, "hit": 2, "attempt": 0}])


@pytest.mark.kafka
def test_a_middle_stage_waits_for_its_end_markers_before_it_exits(tmp_path, kafka_bootstrap):
    """The lookup tasks read channels and write channels: they end the run with the
    aligned checkpoint of the run's end, and exit. Its markers are the last the counting
    tasks wait for, and no restart sends them again. Producers that hold what is not
    flushed for seconds (``linger.ms``) make a marker handed on unacknowledged, then
    purged by the producer's close, certain to be lost: the run then hung."""
    run_clicks(tmp_path, {"bootstrap_servers": kafka_bootstrap,
                          "client_config": {"linger.ms": 3000}})


def test_eos_produce_writes_a_tables_keyed_rows_and_deletes(tmp_path):
    from click.testing import CliRunner

    from eos_runtime.cli import main
    from eos_runtime.runtime.outputs import kafka_partition

    data = str(tmp_path / "data")
    rows, bad_rows = tmp_path / "rows.txt", tmp_path / "bad.txt"
    rows.write_text('u1\t{"country": "NO"}\nu2\t{"country": "SE"}\nu1\tnull\n')
    bad_rows.write_text("u3\tx\nno separator\n")
    result = CliRunner().invoke(main, ["produce", "users", "--data-dir", data, "--lines-from",
                                       str(rows), "--key-separator", "\t", "--null-value",
                                       "null"])
    assert result.exit_code == 0, result.output
    with open_transport(data_dir=data) as t:
        got = [(r.partition, r.key, r.value) for r in read_output(t, "users", committed=False)]
    assert Counter(got) == Counter([(kafka_partition(b"u1", 2), b"u1", b'{"country": "NO"}'),
                                    (kafka_partition(b"u2", 2), b"u2", b'{"country": "SE"}'),
                                    (kafka_partition(b"u1", 2), b"u1", None)])
    u1 = [v for p, k, v in got if k == b"u1"]
    assert u1 == [b'{"country": "NO"}', None], "a key's records in order, in one partition"
    bad = CliRunner().invoke(main, ["produce", "users", "--data-dir", data, "--lines-from",
                                    str(bad_rows), "--key-separator", "\t"])
    said = str(bad.exception)
    assert "record 2: 'no separator' has no key before" in said
    assert "the 1 records before it were written" in said


# --------------------------------------------------------------------------- the crash matrix

#: Every named point a lookup task (4: it aligns the clicks' and the table's producers,
#: keeps the table's rows, writes a sink and the counts' channels) and a table task (0)
#: reach in every run. task.rewind and task.checkpoint.after_cut need a restore or a
#: snapshot to happen first: tests/test_crashes.py and test_changelog_snapshot.py have them.
#: task.mid_version comes once a poll that brought data; run_by_count sends one channel
#: message a record, so the lookup's 600-odd records take dozens of polls.
LOOKUP_POINTS = [
    ("locallog.append.mid_data", 2), ("locallog.append.after_data", 2),
    ("task.mid_version", 3), ("task.aligning", 3), ("task.checkpoint.after_output_flush", 2),
    ("task.checkpoint.before_commit", 2), ("task.checkpoint.after_commit", 2),
    ("task.checkpoint.after_store", 2), ("task.checkpoint.mid_marker_fanout", 2),
    ("task.recovery", 1)]
TABLE_POINTS = [("task.checkpoint.before_commit", 1), ("task.checkpoint.after_store", 1),
                ("task.checkpoint.mid_marker_fanout", 1), ("task.recovery", 1)]
# In a retry, the first hit of each point (it resumes, so it has less left to do).
CASES = ([(point, task, hit, 0) for task, points in ((4, LOOKUP_POINTS), (0, TABLE_POINTS))
          for point, hit in points]
         + [(point, task, 1, 1) for task, points in ((4, LOOKUP_POINTS), (0, TABLE_POINTS))
            for point, _ in points])


@pytest.mark.slow
@pytest.mark.parametrize("point,task,hit,attempt", CASES)
def test_a_lookup_is_exact_under_a_crash_at_every_point(point, task, hit, attempt, tmp_path):
    """A crash at ``point`` in the first attempt, or in the retry of an attempt that
    crashed mid-version: the restarted task rebuilds its table rows and goes on."""
    faults = [{"point": point, "task": task, "hit": hit, "attempt": attempt}]
    if attempt == 1:
        faults.insert(0, {"point": "task.mid_version", "task": task, "hit": 1, "attempt": 0})
    summary = run_clicks(tmp_path, {"data_dir": str(tmp_path / "data")}, fault=faults)
    assert summary.tasks[task]["attempt"] == attempt + 1, "the crash point did not fire"


def test_the_retention_helper_never_cuts_a_tables_topic(tmp_path):
    """The helper cuts consumed source input; a table's records are its rows, kept."""
    from eos_runtime.joblog.listeners import DeleteConsumedInput, ListenerContext
    from eos_runtime.plan import plan_job

    p = clickstream()
    with open_transport(data_dir=str(tmp_path)) as t:
        _produce(t, "r", [{"id": i, "user": "u1"} for i in range(4)])
        p.rename("clickstream", sources={"users": "users-r", "clicks": "clicks-r"})
        plan = plan_job(p, t)
        helper = DeleteConsumedInput(every=0)
        for task, offsets in ((0, {("users-r", 0): 5}), (2, {("clicks-r", 0): 2})):
            helper.open(ListenerContext(plan.name, task, plan, t))
            helper.on_checkpoint(task, offsets)
        assert helper.cuts == [("clicks-r", 0, 2)]


def test_an_idle_table_holds_no_lookup_back(tmp_path):
    """A table whose topic brings nothing while the stream flows (an unbounded run,
    clicks written in four batches, each once the one before is committed): its tasks
    still close their versions on the commit grid (S4), so the lookup aligns every later
    version and commits every click, each with no row, before anything is stopped."""
    import time

    from eos_runtime.runner import start_pipeline

    opts = {"data_dir": str(tmp_path / "data")}
    suffix = uuid.uuid4().hex[:8]
    p = clickstream(suffix)
    clicks = [{"id": i, "user": f"u{i % 7}"} for i in range(400)]
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec(f"users-{suffix}", 2), TopicSpec(f"clicks-{suffix}", 2)])
    run = start_pipeline(p, **opts, state_dir=str(tmp_path / "state"), bounded=False,
                         commit_interval=0.2)
    try:
        for batch in range(4):
            with open_transport(**opts) as t, t.producer() as prod:
                for i, click in enumerate(clicks[batch * 100:(batch + 1) * 100]):
                    prod.produce(f"clicks-{suffix}", i % 2, json.dumps(click).encode())
                prod.flush()
            deadline = time.monotonic() + 240   # a hang fails; a busy machine waits longer
            while run.progress()["sink_records"] < 2 * 100 * (batch + 1):
                assert time.monotonic() < deadline, f"the lookup is held back: {run.progress()}"
                time.sleep(0.2)
        # the run's progress shows the graph: each source, and every output of a stage
        shown = [(st["input"], st["output"]) for st in run.progress()["stages"]]
        assert shown == [(f"users-{suffix}", f"{p.name}.shuffle-2"),
                         (f"clicks-{suffix}", f"{p.name}.shuffle-2"),
                         (f"{p.name}.shuffle-2", f"enriched-{suffix}, {p.name}.shuffle-3"),
                         (f"{p.name}.shuffle-3", f"per-user-{suffix}")]
    finally:
        run.stop("the test saw every click committed")
        run.wait()
    with open_transport(**opts) as t:
        enriched = [json.loads(r.value) for r in read_output(t, f"enriched-{suffix}", job=p.name)]
    assert sorted(c["id"] for c in enriched) == list(range(len(clicks)))
    assert {c["country"] for c in enriched} == {None}


def _click_time(click):
    return click["at"]


def _click_user(click):
    return click["user"]


def _the_click(click, row):
    return click


def test_a_window_after_a_lookup_closes_while_the_run_goes_on(tmp_path):
    """A table's rows carry no event time, so its source's markers had no watermark, and
    W4's lowest over the lookup's lanes was None for the whole run: no window after a
    lookup closed until the run ended (and its state grew). An unbounded run now commits
    the first window once a click 5 s later is read, before anything is stopped."""
    from eos_runtime.windows import tumbling

    opts = {"data_dir": str(tmp_path / "data")}
    suffix = uuid.uuid4().hex[:8]
    p = Pipeline(f"late-table-{suffix}")
    users = p.table(f"users-{suffix}", value="json")
    (p.source(f"clicks-{suffix}", value="json", timestamp=_click_time)
     .key_by(_click_user).lookup(users, how="left", join=_the_click)
     .window(tumbling(seconds=1)).count().final()
     .sink(f"per-user-{suffix}", value="json"))
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec(f"users-{suffix}", 2), TopicSpec(f"clicks-{suffix}", 2)])
        with t.producer() as prod:
            for i, at in enumerate([0, 300, 600, 900, 5000, 5100]):
                prod.produce(f"clicks-{suffix}", i % 2,
                             json.dumps({"user": "u1", "at": at}).encode())
            prod.flush()
    run_until_a_result(p, tmp_path, opts)
    with open_transport(**opts) as t:
        out = [(r.key, json.loads(r.value)) for r in read_output(t, f"per-user-{suffix}",
                                                                   job=p.name)]
    assert out[0][1]["value"] == 4 and out[0][1]["start"] == 0, out


def test_the_testing_helper_refuses_a_table_row_without_a_key_or_with_a_bad_one():
    """A keyless row crashed the helper with a bare AssertionError (a task names it), and
    a delete ``(1, None)`` on a utf8-keyed table skipped the key format's check."""
    with TestRun(clickstream()) as test:
        with pytest.raises(ConfigError, match="without a key cannot be a row"):
            test.send({"users": [(None, {"country": "NO"})]})
        with pytest.raises(ConfigError, match="cannot be a key of table"):
            test.send({"users": [(1, None)]})


def test_a_runs_parallelism_stops_at_a_tables_partitions_and_a_sources_own_is_exact(tmp_path):
    """``--parallelism 4`` refused a graph of a 4-partition stream and a 1-partition table
    ("source 'users' has 1 partitions; a source stage cannot run 4 tasks"): a run's
    parallelism is at most each source's and table's partitions. A source's own
    ``parallelism`` still asks for exactly that many."""
    from eos_runtime.plan import plan_job

    suffix = uuid.uuid4().hex[:8]
    with open_transport(data_dir=str(tmp_path)) as t:
        t.create_topics([TopicSpec(f"users-{suffix}", 1), TopicSpec(f"clicks-{suffix}", 4)])
        plan = plan_job(clickstream(suffix), t, parallelism=4)
        by_input = {st.input_topic: len(st.task_ids) for st in plan.stages}
        assert by_input[f"users-{suffix}"] == 1 and by_input[f"clicks-{suffix}"] == 4
        p = Pipeline(f"own-{suffix}")
        p.source(f"users-{suffix}", parallelism=2).map(str).sink(f"out-{suffix}")
        with pytest.raises(ConfigError, match=rf"source 'users-{suffix}' has 1 partitions; "
                                              rf"its source\(parallelism=2\)"):
            plan_job(p, t)


def test_a_lookup_key_of_a_type_the_table_never_holds_is_an_error_not_a_silent_miss():
    """A utf8-keyed table's keys are str; a stream keyed by an int user id missed every
    row, in silence (an inner lookup dropped every record)."""
    p = Pipeline("ids")
    users = p.table("users", value="json")
    (p.source("clicks", value="json").key_by(lambda c: c["user_id"])
     .lookup(users, how="inner", join=lambda c, row: {**c, **row}).sink("out", value="json"))
    with TestRun(p) as run:
        run.send({"users": [("7", {"name": "Ann"})]})
        with pytest.raises(UserFunctionError, match=r"lookup\('users'\): the stream's key 7 is "
                                                    r"int, and table 'users' has utf8 keys"):
            run.send({"clicks": [{"user_id": 7}]})
        assert run.send({"clicks": [{"user_id": "7"}]}) == [(None, {"user_id": "7",
                                                                     "name": "Ann"})]
