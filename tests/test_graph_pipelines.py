"""Graph pipelines (issue 24) end to end on Spark: a source stage with three outputs (a
shuffle, a sink, and a merge's shuffle), a stage with two (a sink and the merge's
shuffle), and a stage whose channels two stages write. Committed output of each sink is
compared with an oracle, record by record, with crashes at named points."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from eos_runtime import Pipeline
from eos_runtime.joblog.committed import read_output
from eos_runtime.transport import open_transport

from pipeline_oracles import encode_lines, produce, run_by_count, word_lines
from test_pipelines import transport_opts


def _count(value, state):
    n = state.get("n", 0) + 1
    state.set("n", n)
    return str(n)


def _is_long(word):
    return len(word) >= 6


def routes(suffix: str) -> Pipeline:
    """Words counted (stage 1); long words to a topic of their own (stage 0's branch);
    every word counted twice by its first letter, once from stage 0 and once from
    stage 1 (a merge of two stages, which both write stage 2's channels)."""
    p = Pipeline(f"routes-{suffix}", parallelism=2)
    words = p.source(f"lines-{suffix}").flat_map(str.split)
    words.filter(_is_long).sink(f"long-{suffix}")
    counted = words.key_by(lambda w: w)
    counted.map(_count, stateful=True).sink(f"counts-{suffix}", key="utf8")
    (words.map(str.upper).merge(counted)
        .key_by(lambda w: w[0].lower())
        .map(_count, stateful=True)
        .sink(f"letters-{suffix}", key="utf8"))
    return p


def _in_order(records, expected: Counter, what: str) -> None:
    """Each key seen n times has exactly the values "1".."n", in that order."""
    got: dict[str, list[str]] = {}
    for r in records:
        got.setdefault(r.key.decode(), []).append(r.value.decode())
    assert set(got) == set(expected), what
    for key, n in expected.items():
        assert got[key] == [str(i) for i in range(1, n + 1)], f"{what}: key {key!r}"


def check(t, p: Pipeline, suffix: str, lines: list[str], exactly_once: bool) -> None:
    words = [w for line in lines for w in line.split()]
    counts = read_output(t, f"counts-{suffix}", job=p.name)
    letters = read_output(t, f"letters-{suffix}", job=p.name)
    long_words = [r.value.decode() for r in read_output(t, f"long-{suffix}", job=p.name)]
    if exactly_once:
        _in_order(counts, Counter(words), "counts")
        _in_order(letters, Counter(w[0] for w in words for _ in range(2)), "letters")
        assert Counter(long_words) == Counter(w for w in words if _is_long(w))
    else:   # nothing lost
        assert {(r.key.decode(), r.value.decode()) for r in counts} >= {
            (w, str(i)) for w, n in Counter(words).items() for i in range(1, n + 1)}
        assert set(long_words) == {w for w in words if _is_long(w)}


def run_routes(tmp_path, opts, guarantee="exactly-once", fault=None, lines=900):
    suffix = uuid.uuid4().hex[:8]
    p = routes(suffix)
    data = word_lines(lines)
    with open_transport(**opts) as t:
        produce(t, f"lines-{suffix}", encode_lines(data))
    summary = run_by_count(p, tmp_path, opts, guarantee, fault)
    with open_transport(**opts) as t:
        check(t, p, suffix, data, guarantee == "exactly-once")
    return summary


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_a_graph_matches_its_oracle_on_every_sink(guarantee, tmp_path):
    summary = run_routes(tmp_path, {"data_dir": str(tmp_path / "data")}, guarantee)
    assert summary.input_records == 900


# Task ids: stage 0 (the source) 0-1, stage 1 (counts) 2-3, stage 2 (letters) 4-5.
@pytest.mark.parametrize("point,task,hit", [
    ("task.checkpoint.before_commit", 0, 2),        # a source of two channel topics
    ("task.checkpoint.mid_marker_fanout", 1, 2),    # markers half out, to two topics
    ("task.checkpoint.after_commit", 2, 2),         # a stage writing a sink and channels
    ("task.checkpoint.before_commit", 4, 2),        # aligning producers of two stages
])
def test_a_graph_is_exact_under_a_crash(point, task, hit, tmp_path):
    summary = run_routes(tmp_path, {"data_dir": str(tmp_path / "data")}, fault=[
        {"point": point, "task": task, "hit": hit, "attempt": 0}])
    assert summary.tasks[task]["attempt"] == 1, "the crash point did not fire"


@pytest.mark.kafka
def test_a_graph_matches_its_oracle_on_kafka(tmp_path, kafka_bootstrap):
    run_routes(tmp_path, {"bootstrap_servers": kafka_bootstrap},
               fault=[{"point": "task.checkpoint.before_commit", "task": 4, "hit": 2,
                       "attempt": 0}])


def test_sink_overrides_name_the_sink_to_move_when_there_are_several():
    from eos_runtime.cli.options import apply_overrides
    from eos_runtime.errors import ConfigError

    p = routes("o")
    apply_overrides(p, "moved", (), ["long-o=long-x", "counts-o=counts-x"])
    assert p.name == "moved"
    assert [s.topic for s in p.sinks] == ["long-x", "counts-x", "letters-o"]
    with pytest.raises(ConfigError, match=r"has 3 sinks \(long-x, counts-x, letters-o\): "
                                          r"name the one to move, --sink OLD=NEW"):
        apply_overrides(p, None, (), ["elsewhere"])
    with pytest.raises(ConfigError, match=r"no sink 'nope'.*its sinks: counts-x, letters-o"):
        apply_overrides(p, None, (), ["nope=x"])
    with pytest.raises(ConfigError, match=r"two sinks would be one topic"):
        apply_overrides(p, None, (), ["long-x=counts-x"])
    # one topic moved twice: the last one won, silently
    with pytest.raises(ConfigError, match=r"--sink long-x=a and --sink long-x=b: 'long-x' "
                                          r"moves to one topic; give it once"):
        apply_overrides(p, None, (), ["long-x=a", "long-x=b"])
    apply_overrides(p, None, (), ["long-x=a", "long-x=a"])   # the same twice: as once
    assert p.sinks[0].topic == "a"
    one = Pipeline("one")
    one.source("in").sink("out")
    apply_overrides(one, None, (), ["out2"])        # the one sink, as before
    assert one.sink_topic == "out2"


# --------------------------------------------------------------------------- several sources

def two_sources(suffix: str) -> Pipeline:
    """Lines of two topics (2 and 3 partitions) counted together per word; the second
    topic's lines also go, upper-cased, to a sink of their own."""
    p = Pipeline(f"two-{suffix}", parallelism=2)
    eu = p.source(f"eu-{suffix}")
    us = p.source(f"us-{suffix}", parallelism=3)
    us.map(str.upper).sink(f"us-upper-{suffix}")
    (eu.merge(us).flat_map(str.split)
        .key_by(lambda w: w).map(_count, stateful=True)
        .sink(f"counts-{suffix}", key="utf8"))
    return p


def run_two_sources(tmp_path, opts, guarantee="exactly-once", fault=None):
    suffix = uuid.uuid4().hex[:8]
    p = two_sources(suffix)
    eu, us = word_lines(600), [line[::-1] for line in word_lines(500)]
    with open_transport(**opts) as t:
        produce(t, f"eu-{suffix}", encode_lines(eu), partitions=2)
        produce(t, f"us-{suffix}", encode_lines(us), partitions=3)
    summary = run_by_count(p, tmp_path, opts, guarantee, fault)
    assert summary.input_records == 1100
    words = [w for line in eu + us for w in line.split()]
    with open_transport(**opts) as t:
        counts = read_output(t, f"counts-{suffix}", job=p.name)
        upper = [r.value.decode() for r in read_output(t, f"us-upper-{suffix}", job=p.name)]
    if guarantee == "exactly-once":
        _in_order(counts, Counter(words), "counts")
        assert Counter(upper) == Counter(line.upper() for line in us)
    else:
        assert set(upper) == {line.upper() for line in us}
    return p, summary


def test_two_sources_plan_as_two_source_stages_whose_tasks_all_feed_the_merge(tmp_path):
    from eos_runtime.plan import plan_job

    p = two_sources("plan")
    with open_transport(data_dir=str(tmp_path)) as t:
        produce(t, "eu-plan", [], partitions=2)
        produce(t, "us-plan", [], partitions=3)
        plan = plan_job(p, t)
    eu, us, counts = plan.stages
    assert (eu.input_topic, eu.task_ids, us.input_topic, us.task_ids) == (
        "eu-plan", (0, 1), "us-plan", (2, 3, 4))
    assert counts.upstream_task_ids == (0, 1, 2, 3, 4) and not counts.is_source
    assert plan.source_topics == ("eu-plan", "us-plan")
    assert [o.topic for o in us.outputs] == ["us-upper-plan", "two-plan.shuffle-2"]
    with pytest.raises(Exception, match=r"has 2 sources \(eu-plan, us-plan\): name the one"):
        assert p.source_topic
    with pytest.raises(Exception, match=r"already reads it"):
        p.source("eu-plan")


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_two_sources_match_their_oracle(guarantee, tmp_path):
    run_two_sources(tmp_path, {"data_dir": str(tmp_path / "data")}, guarantee)


@pytest.mark.parametrize("point,task,hit", [
    ("task.checkpoint.after_commit", 3, 1),     # a task of the second source
    ("task.checkpoint.before_commit", 5, 2),    # aligning producers of two sources
])
def test_two_sources_are_exact_under_a_crash(point, task, hit, tmp_path):
    _, summary = run_two_sources(tmp_path, {"data_dir": str(tmp_path / "data")}, fault=[
        {"point": point, "task": task, "hit": hit, "attempt": 0}])
    assert summary.tasks[task]["attempt"] == 1, "the crash point did not fire"


@pytest.mark.kafka
def test_two_sources_on_kafka(tmp_path, kafka_bootstrap):
    run_two_sources(tmp_path, {"bootstrap_servers": kafka_bootstrap}, fault=[
        {"point": "task.checkpoint.before_commit", "task": 5, "hit": 2, "attempt": 0}])


OPERATED_FILE = '''
from eos_runtime import Pipeline

pipeline = Pipeline("two{s}", parallelism=1, processing_guarantee="{guarantee}",
                    checkpoints="{store}")


def count(word, state):
    n = state.get("n", 0) + 1
    state.set("n", n)
    return str(n)


eu = pipeline.source("eu{s}")
us = pipeline.source("us{s}")
us.map(str.upper).sink("us-upper{s}")
eu.merge(us).flat_map(str.split).key_by(lambda w: w).map(count, stateful=True).sink(
    "counts{s}", key="utf8")
'''


@pytest.mark.parametrize("kind,guarantee,store", [
    ("local", "exactly-once", "changelog"),
    ("local", "at-least-once", "filesystem"),
    ("kafka", "at-least-once", "kafka")])
def test_an_operators_tools_cover_every_source_of_a_graph(kind, guarantee, store, tmp_path,
                                                           request):
    """Startpoints, the checkpoint tool, eos jobs, eos topics and eos reset on a job of
    two sources, with each checkpoint store, on both transports."""
    import json

    from test_cli import error_line, here, ok_here, run_here

    opts = transport_opts(kind, tmp_path, request)
    s = "" if kind == "local" else f"-{uuid.uuid4().hex[:6]}"
    d = (("--data-dir", opts["data_dir"]) if kind == "local"
         else ("--bootstrap-servers", opts["bootstrap_servers"]))
    state = ("--state-dir", str(tmp_path / "state"))
    (tmp_path / "two.py").write_text(OPERATED_FILE.format(s=s, guarantee=guarantee,
                                                          store=store))
    (tmp_path / "eu.txt").write_text("a b\nb\n")
    (tmp_path / "us.txt").write_text("x\ny a\nz\n")
    ok_here("produce", f"eu{s}", "--lines-from", str(tmp_path / "eu.txt"), "--partitions", "1", *d)
    ok_here("produce", f"us{s}", "--lines-from", str(tmp_path / "us.txt"), "--partitions", "1", *d)
    run = {**opts, "state_dir": str(tmp_path / "state")}
    run_here(tmp_path / "two.py", **run)   # the tools are tested
    show = ok_here("checkpoint", "show", f"two{s}", *d, *state).stdout
    assert f"streams.eu{s}.partitions.0=2" in show and f"streams.us{s}.partitions.0=3" in show
    info = json.loads(ok_here("jobs", "--json", *d).stdout)
    [job] = [j for j in info if j["job"] == f"two{s}"]
    assert job["sources"] == [f"eu{s}", f"us{s}"]
    assert sorted(job["sinks"]) == [f"counts{s}", f"us-upper{s}"]
    # a Startpoint on the second source: its partition is read again from offset 1
    assert error_line(here("startpoint", "set", f"two{s}", "nope", "0", "--offset", "0",
                           *d)).startswith(f"error: job 'two{s}' reads 'eu{s}' and 'us{s}', "
                                           f"not 'nope'")
    ok_here("startpoint", "set", f"two{s}", f"us{s}", "0", "--offset", "1", *d)
    run_here(tmp_path / "two.py", **run)
    upper = ok_here("consume", f"us-upper{s}", "--job", f"two{s}", *d).stdout.split()
    assert upper == ["X", "Y", "A", "Z", "Y", "A", "Z"]
    counts = [line.split() for line in ok_here("consume", f"counts{s}", "--job", f"two{s}", *d)
              .stdout.splitlines()]
    assert [v for k, v in counts if k == "a"] == ["1", "2", "3"]   # y a read again: a 3rd a
    kept = list((tmp_path / "state").glob("checkpoints/**/*.json"))
    assert len(kept) == (2 if store == "filesystem" else 0), kept   # one per source task
    assert (f"__eos_checkpoint_two{s}_1" in ok_here("topics", *d).stdout) == (store == "kafka")
    ok_here("reset", f"two{s}", "--yes", *d, *state)
    topics = ok_here("topics", *d).stdout
    assert f"two{s}.shuffle-2" not in topics and f"two{s}.changelog" not in topics
    assert f"__eos_checkpoint_two{s}_" not in topics
    assert all(t in topics for t in (f"eu{s} ", f"us{s} ", f"counts{s}", f"us-upper{s}"))
    assert not list((tmp_path / "state").glob("checkpoints/**/*.json"))   # filesystem store
