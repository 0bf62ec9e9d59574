"""Runs refused before they are recorded, for what the pipeline's topics would do to
the job or to another one (no Spark: the refusals come first)."""

from __future__ import annotations

import uuid

import pytest

from eos_runtime import Pipeline
from eos_runtime.errors import ConfigError
from eos_runtime.joblog.control import ControlLog
from eos_runtime.plan import plan_job
from eos_runtime.runner import check_topics, start_pipeline
from eos_runtime.transport import TopicSpec, open_transport


def passthrough(name, source, sink, guarantee="exactly-once"):
    p = Pipeline(name, processing_guarantee=guarantee)
    p.source(source, value="utf8").map(str.upper).sink(sink, value="utf8")
    return p


def test_a_sink_that_is_the_jobs_own_source_is_refused(tmp_path):
    """Issue 27: `eos run p.py --sink clicks` where clicks is the source appended the
    job's output to its own input, for good."""
    tag = uuid.uuid4().hex[:6]
    with open_transport(data_dir=str(tmp_path / "data")) as t:
        t.create_topics([TopicSpec(f"in-{tag}", 1)])
    with pytest.raises(ConfigError, match=rf"sink 'in-{tag}' is the job's own source"):
        start_pipeline(passthrough(f"loop-{tag}", f"in-{tag}", f"in-{tag}"),
                       data_dir=str(tmp_path / "data"))
    with open_transport(data_dir=str(tmp_path / "data")) as t:
        assert f"loop-{tag}.control" not in t.list_topics(), "refused after it was recorded"


def test_a_sink_the_job_reads_is_refused_where_the_job_is_planned(tmp_path):
    """Issue 27 item 2: refused by the rename (eos run --sink) and by plan_job, so every
    way in to a run meets it, not only start_pipeline: a sink onto a source or onto a
    table of the job, in one line naming the topic."""
    p = passthrough("loop", "clicks", "out")
    with pytest.raises(ConfigError, match=r"^sink 'clicks' is the job's own source: "):
        p.rename("loop", sink="clicks")
    with pytest.raises(ConfigError, match=r"^sink 'out' is the job's own source: "):
        p.rename("loop", source="out")
    assert (p.sources[0].topic, p.sinks[0].topic) == ("clicks", "out"), "renamed though refused"
    enrich = Pipeline("enrich")
    rates = enrich.table("rates")
    enrich.source("clicks").lookup(rates, on=str.strip, how="left").map(str).sink("rates")
    with open_transport(data_dir=str(tmp_path / "data")) as t:
        t.create_topics([TopicSpec("clicks", 1), TopicSpec("rates", 1)])
        with pytest.raises(ConfigError, match=r"^sink 'clicks' is the job's own source: "):
            plan_job(passthrough("loop", "clicks", "clicks"), t)
        with pytest.raises(ConfigError, match=r"^sink 'rates' is the job's own table: "):
            plan_job(enrich, t)


def test_eos_run_refuses_a_sink_onto_its_source_in_one_line(tmp_path):
    """The issue's own command, and the pipeline written that way: one line, the input
    untouched, no job recorded."""
    from test_cli import eos, error_line, ok

    data = str(tmp_path / "data")
    (tmp_path / "p.py").write_text("from eos_runtime import Pipeline\n"
                                   "pipeline = Pipeline('p')\n"
                                   "pipeline.source('clicks').map(str.upper).sink('out')\n")
    (tmp_path / "q.py").write_text("from eos_runtime import Pipeline\n"
                                   "pipeline = Pipeline('q')\n"
                                   "pipeline.source('clicks').map(str.upper).sink('clicks')\n")
    ok("produce", "clicks", "--lines-from", "-", "--data-dir", data, stdin="a\nb\n")
    for args in (("p.py", "--name", "loop", "--sink", "clicks"), ("q.py",)):
        line = error_line(eos("run", *args, "--data-dir", data, cwd=tmp_path))
        assert line.startswith("error: sink 'clicks' is the job's own source: "), line
    assert ok("consume", "clicks", "--all", "--data-dir", data).stdout.count("\n") == 2
    assert "no jobs" in ok("jobs", "--data-dir", data).stdout


def test_on_the_local_log_another_exactly_once_jobs_sink_is_no_source(tmp_path):
    """The local log has no transactions: a job reading another exactly-once job's sink
    would read output of that job's crashed attempts, which its committed readers never
    see. Refused, naming both jobs; an at-least-once job's sink is what its readers see
    anyway, and is a source like any topic."""
    tag = uuid.uuid4().hex[:6]
    data = str(tmp_path / "data")
    with open_transport(data_dir=data) as t:
        t.create_topics([TopicSpec(n, 1) for n in (f"in-{tag}", f"a-{tag}-out", f"c-{tag}-out")])
        for name, guarantee in ((f"a-{tag}", "exactly-once"), (f"c-{tag}", "at-least-once")):
            plan = plan_job(passthrough(name, f"in-{tag}", f"{name}-out", guarantee), t)
            ControlLog(t, name).start_run(plan, bounded=True)
        check_topics(t, plan_job(passthrough(f"d-{tag}", f"c-{tag}-out", f"d-out-{tag}"), t))
        with pytest.raises(ConfigError, match=(
                rf"source 'a-{tag}-out' is the sink of exactly-once job 'a-{tag}'.*"
                rf"local log has no transactions.*Kafka")):
            check_topics(t, plan_job(passthrough(f"b-{tag}", f"a-{tag}-out", f"b-out-{tag}",
                                                 "at-least-once"), t))


def test_a_missing_source_topic_names_the_data_directory_and_the_nearest_topic(tmp_path):
    """Issue 27 (small): `eos run` on a topic that does not exist named neither the data
    directory it looked in nor the topic the user probably meant."""
    from test_cli import eos, error_line, ok

    data = tmp_path / "data"
    (tmp_path / "p.py").write_text("from eos_runtime import Pipeline\n"
                                   "pipeline = Pipeline('p')\n"
                                   "pipeline.source('clicks').map(str.upper).sink('out')\n")
    ok("produce", "clickz", "--lines-from", "-", "--data-dir", str(data), stdin="a\n")
    ok("produce", "views", "--lines-from", "-", "--data-dir", str(data), stdin="a\n")
    line = error_line(eos("run", "p.py", "--data-dir", str(data), cwd=tmp_path))
    assert line == (f"error: source topic 'clicks' does not exist on the local log in {data} "
                    f"(did you mean 'clickz'?): create it (eos produce creates it) or fix "
                    f"the name"), line
    # nothing close: no guess
    (tmp_path / "q.py").write_text("from eos_runtime import Pipeline\n"
                                   "pipeline = Pipeline('q')\n"
                                   "pipeline.source('orders').map(str.upper).sink('out')\n")
    line = error_line(eos("run", "q.py", "--data-dir", str(data), cwd=tmp_path))
    assert line == (f"error: source topic 'orders' does not exist on the local log in {data}: "
                    f"create it (eos produce creates it) or fix the name"), line


def test_a_layout_refusal_says_what_changed_first(tmp_path):
    """Issue 27 (small): the refusal printed both layouts (8 lines) but not what changed;
    its first line now says it."""
    tag = uuid.uuid4().hex[:6]
    p = Pipeline(f"counts-{tag}", parallelism=2)
    p.source(f"in-{tag}", parallelism=2).key_by(str).map(str.upper).sink(f"out-{tag}")
    with open_transport(data_dir=str(tmp_path / "data")) as t:
        t.create_topics([TopicSpec(f"in-{tag}", 2)])
        ControlLog(t, p.name).start_run(plan_job(p, t), bounded=True)
        for options, changed in (
                ({"parallelism": 4}, "stage 1's partitions 2 -> 4, its tasks 2 -> 4"),
                ({"guarantee": "at-least-once"}, "guarantee exactly-once -> at-least-once"),
                ({"parallelism": 4, "guarantee": "at-least-once"},
                 "stage 1's partitions 2 -> 4, its tasks 2 -> 4; guarantee exactly-once -> "
                 "at-least-once")):
            with pytest.raises(ConfigError) as info:
                ControlLog(t, p.name).start_run(plan_job(p, t, **options), bounded=True)
            first = str(info.value).splitlines()[0]
            assert first == (f"job 'counts-{tag}' ran before (run 0) with another layout: "
                             f"{changed}"), str(info.value)
            assert "was:" in str(info.value) and "now:" in str(info.value)


def test_layout_changes_names_each_change_once():
    from eos_runtime.joblog.layout import layout_changes

    was = ("stage 0: input in x2, tasks 0,1, stores [], output j.shuffle-1 x2",
           "stage 1: input j.shuffle-1 x2, tasks 2,3, stores [step0], output out x1",
           "guarantee exactly-once")
    assert layout_changes(was, was) == "its stages are written differently"
    assert layout_changes(was, (was[0], was[1].replace("[step0]", "[step0, step1]"),
                                was[2])) == "stage 1's stores ['step0'] -> ['step0', 'step1']"
    assert layout_changes(was, (was[0], was[1].replace("out x1", "out x3"), was[2],
                                "checkpoints kafka")) == (
        "stage 1's sinks out x1 -> out x3; checkpoints changelog -> kafka")
    assert layout_changes(was, (was[0].replace("j.shuffle-1 x2", "out x1"), was[2])) == (
        "stages 2 -> 1; stage 0's sinks none -> out x1")


def _named(click, row):
    return {**click, "name": row}


def _aged(click, row):
    return {**click, "age": row}


def _click_user(click):
    return click["user"]


def test_lookups_written_in_another_order_are_a_layout_change(tmp_path):
    """A table's store is named by the order of its first lookup (table0, table1): two
    lookups written the other way round kept the same layout, and the next run read each
    table's rows from the other's store (an age as a name)."""
    tag = uuid.uuid4().hex[:6]

    def pipeline(first: str) -> Pipeline:
        p = Pipeline(f"enrich-{tag}")
        tables = {n: p.table(f"{n}-{tag}", value="json") for n in ("names", "ages")}
        joins = {"names": _named, "ages": _aged}
        second = "ages" if first == "names" else "names"
        (p.source(f"clicks-{tag}", value="json").key_by(_click_user)
         .lookup(tables[first], join=joins[first]).lookup(tables[second], join=joins[second])
         .sink(f"out-{tag}", value="json"))
        return p

    with open_transport(data_dir=str(tmp_path / "data")) as t:
        t.create_topics([TopicSpec(f"{n}-{tag}", 1) for n in ("clicks", "names", "ages")])
        ControlLog(t, f"enrich-{tag}").start_run(plan_job(pipeline("names"), t), bounded=True)
        ControlLog(t, f"enrich-{tag}").check_layout(plan_job(pipeline("names"), t))  # same
        with pytest.raises(ConfigError) as info:
            ControlLog(t, f"enrich-{tag}").start_run(plan_job(pipeline("ages"), t),
                                                     bounded=True)
        first = str(info.value).splitlines()[0]
        assert first.endswith(f"stage 3's lookups table0=names-{tag}, table1=ages-{tag} -> "
                              f"table0=ages-{tag}, table1=names-{tag}"), first


def test_a_layout_recorded_before_lookups_were_named_is_not_refused_for_it():
    from eos_runtime.joblog.layout import layouts_differ

    was = ("stage 0: input users x1, tasks 0, stores [], output j.shuffle-2 x1",
           "stage 1: input clicks x1, tasks 1, stores [], output j.shuffle-2 x1",
           "stage 2: input j.shuffle-2 x1, tasks 2, stores [table0], output out x1",
           "guarantee exactly-once")
    now = was[:3] + ("lookups of stage 2: table0=users",) + was[3:]
    assert not layouts_differ(was, now)      # an older run's layout names no lookups
    assert layouts_differ(now, now[:3] + ("lookups of stage 2: table0=clicks",) + now[4:])
    assert not layouts_differ(now, now)


def _count_state(value, state):
    n = (state.get() or 0) + 1
    state.set(n)
    return n


def _sum_state(value, state):
    n = (state.get() or 0) + value["n"]
    state.set(n)
    return n


def _is_a(value):
    return value["kind"] == "a"


def _is_b(value):
    return value["kind"] == "b"


def test_stateful_branches_written_in_another_order_are_refused_a_renamed_one_is_not(tmp_path):
    """A stateful step's store is named by its place in the stage (step1, step3): two
    stateful branches written the other way round kept the same layout, and the next run
    read each one's state from the other's store (a sum as a count). A step whose function
    only changed its name keeps its store, as it did."""
    tag = uuid.uuid4().hex[:6]

    def pipeline(order: tuple[str, str], names: dict[str, object] | None = None) -> Pipeline:
        fns = names or {"count": _count_state, "sum": _sum_state}
        p = Pipeline(f"two-{tag}")
        keyed = p.source(f"in-{tag}", value="json").key_by(lambda v: v["user"])
        made = {"count": lambda: keyed.filter(_is_a).map(fns["count"], stateful=True),
                "sum": lambda: keyed.filter(_is_b).map(fns["sum"], stateful=True)}
        first, second = made[order[0]](), made[order[1]]()   # written in this order
        first.merge(second).sink(f"out-{tag}", value="json")
        return p

    with open_transport(data_dir=str(tmp_path / "data")) as t:
        t.create_topics([TopicSpec(f"in-{tag}", 1)])
        plan = plan_job(pipeline(("count", "sum")), t)
        ControlLog(t, f"two-{tag}").start_run(plan, bounded=True)
        ControlLog(t, f"two-{tag}").check_layout(plan_job(pipeline(("count", "sum")), t))
        with pytest.raises(ConfigError) as info:
            ControlLog(t, f"two-{tag}").check_layout(
                plan_job(pipeline(("sum", "count"), None), t))
        first = str(info.value).splitlines()[0]
        assert first.endswith("state moved: map(_count_state) stage 1 step1 -> stage 1 step3, "
                              "map(_sum_state) stage 1 step3 -> stage 1 step1"), first

        def _tally(value, state):
            return _count_state(value, state)

        # a renamed function keeps its store: not refused
        ControlLog(t, f"two-{tag}").check_layout(
            plan_job(pipeline(("count", "sum"), {"count": _tally, "sum": _sum_state}), t))


def test_the_states_line_refuses_only_a_state_that_moved():
    from eos_runtime.joblog.layout import layout_changes, layouts_differ

    stage = "stage 1: input j.shuffle-1 x1, tasks 1, stores [step1, window2], output out x1"
    held = "step1=aggregate(add), window2=window Hopping(size=2, every=1) count"
    was = ("stage 0: input in x1, tasks 0, stores [], output j.shuffle-1 x1", stage,
           f"state of stage 1: {held}", "guarantee exactly-once")
    assert not layouts_differ(was[:2] + was[3:], was)   # recorded before states were named
    renamed = was[:2] + ("state of stage 1: step1=map(tally), "
                         "window2=window Hopping(size=2, every=1) count",) + was[3:]
    assert not layouts_differ(was, renamed)
    swapped = was[:2] + ("state of stage 1: step1=window Hopping(size=2, every=1) count, "
                         "window2=aggregate(add)",) + was[3:]
    assert layouts_differ(was, swapped)
    assert layout_changes(was, swapped) == (
        "state moved: aggregate(add) stage 1 step1 -> stage 1 window2, "
        "window Hopping(size=2, every=1) count stage 1 window2 -> stage 1 step1")
    # two stores of one name: which is which cannot be told, so not refused
    twins = was[:2] + ("state of stage 1: step1=map(<lambda>), window2=map(<lambda>)",)
    assert not layouts_differ(twins + was[3:], was[:2] + (
        "state of stage 1: step1=map(<lambda>), window2=map(<lambda>)",) + was[3:])


def _by_user(value):
    return value["user"]


def _by_item(value):
    return value["item"]


def test_two_key_by_stages_written_in_another_order_are_refused(tmp_path):
    """Stage indices are positional too: two key_by branches, each with its stateful step,
    written the other way round kept equal stage lines (stores [step0] each), and each
    stage's step read the other's state."""
    tag = uuid.uuid4().hex[:6]

    def pipeline(order: tuple[str, str]) -> Pipeline:
        p = Pipeline(f"keys-{tag}")
        src = p.source(f"in-{tag}", value="json")
        made = {"count": lambda: src.key_by(_by_user).map(_count_state, stateful=True),
                "sum": lambda: src.key_by(_by_item).map(_sum_state, stateful=True)}
        first, second = made[order[0]](), made[order[1]]()
        first.merge(second).sink(f"out-{tag}", value="json")
        return p

    with open_transport(data_dir=str(tmp_path / "data")) as t:
        t.create_topics([TopicSpec(f"in-{tag}", 1)])
        ControlLog(t, f"keys-{tag}").start_run(plan_job(pipeline(("count", "sum")), t),
                                               bounded=True)
        with pytest.raises(ConfigError) as info:
            ControlLog(t, f"keys-{tag}").check_layout(plan_job(pipeline(("sum", "count")), t))
        first = str(info.value).splitlines()[0]
        assert first.endswith("state moved: map(_count_state) stage 1 step0 -> stage 2 step0, "
                              "map(_sum_state) stage 2 step0 -> stage 1 step0"), first


def test_two_windows_of_one_aggregate_are_told_apart_by_their_windows(tmp_path):
    """Two branches counting in windows of different sizes, written the other way round:
    the layout names each window's size, so the swap is refused (both are ``count``)."""
    from eos_runtime.windows import tumbling

    tag = uuid.uuid4().hex[:6]

    def pipeline(sizes: tuple[int, int]) -> Pipeline:
        p = Pipeline(f"wins-{tag}")
        keyed = p.source(f"in-{tag}", value="json", timestamp=lambda v: v["ts"]).key_by(_by_user)
        first, second = (keyed.window(tumbling(size)).count().final() for size in sizes)
        first.merge(second).sink(f"out-{tag}", value="json")
        return p

    with open_transport(data_dir=str(tmp_path / "data")) as t:
        t.create_topics([TopicSpec(f"in-{tag}", 1)])
        ControlLog(t, f"wins-{tag}").start_run(plan_job(pipeline((1_000, 60_000)), t),
                                               bounded=True)
        with pytest.raises(ConfigError, match="state moved: window Tumbling.size=1000. count"):
            ControlLog(t, f"wins-{tag}").check_layout(plan_job(pipeline((60_000, 1_000)), t))
