"""``eos experiment windows`` and ``eos experiment attribution`` (issue 25): the event-time
workloads, their oracles from the input alone, and short runs under faults on both
transports (the long runs are in docs/experiments.md)."""

from __future__ import annotations

import json

import pytest

from eos_runtime.errors import ConfigError
from eos_runtime.experiments.window_workloads import (
    GRACE,
    LATE_PAGE,
    LATE_USER,
    SIZE,
    WITHIN,
    attribution_expected,
    final_watermark,
    judge_windows,
    shop_events,
    view_events,
    window_counts,
)
from eos_runtime.experiments.workloads import BUILTIN

# windows: views 0-1, per page 2-3; attribution: clicks 0-1, purchases 2-3, the join 4-5,
# the pairs 6-7
WINDOWS_SCHEDULE = """
[[fault]]
kind = "crash"           # between its windows' firing and the commit (T2)
task = 2
point = "task.window.fired"
hit = 2

[[fault]]
kind = "lose-state"      # its retry rebuilds the windows from the change log
task = 3
point = "task.checkpoint.after_commit"
hit = 2

[[fault]]
kind = "crash"
task = 0
point = "task.mid_version"
hit = 2
"""

ATTRIBUTION_SCHEDULE = """
[[fault]]
kind = "crash"           # the join task, between a firing and its commit
task = 4
point = "task.window.fired"
hit = 2

[[fault]]
kind = "zombie"          # the join's other task goes on beside its successor
task = 5
point = "task.checkpoint.before_commit"
release = 0.3

[[fault]]
kind = "crash"           # a purchases task mid-version: the join tasks get a restore
task = 2
point = "task.mid_version"
hit = 2
"""

OPERATOR_SCHEDULE = """
[[fault]]
kind = "startpoint"      # partition 0 back 150 views: each counted again, or a dead letter
run = 2
partition = 0
offset = 100

[[fault]]
kind = "crash"           # a window task of the run that reads them again
run = 2
task = 2
point = "task.window.fired"
hit = 2

[[fault]]
kind = "reset"           # a new epoch: empty state, no watermark, all input read again
run = 3
"""


def _run_json(report, seed):
    return json.loads((report / f"seed-{seed}" / "run.json").read_text())


def _partition_highs(values):
    highs: dict = {}
    for v in values:
        where = (v.get("side"), v["id"] % 2)
        highs[where] = max(highs.get(where, v["ts"]), v["ts"])
    return highs


@pytest.mark.parametrize("make,late", [(view_events, lambda v: v["page"] == LATE_PAGE),
                                       (shop_events, lambda v: v["user"] == LATE_USER)])
def test_the_input_is_out_of_order_within_the_grace_but_for_the_late_by_design(make, late):
    """What the oracles rest on: every record but the late-by-design ones is at most GRACE
    ms before any record before it in its partition (so never late, whatever watermark it
    meets); the late-by-design ones are far behind; the same seed, the same input."""
    values = make(3000, 5)
    assert values == make(3000, 5) != make(3000, 6)
    highs: dict = {}
    disorder = late_ones = 0
    for v in values[1:]:
        where = (v.get("side"), v["id"] % 2)
        high = highs.get(where, 0)
        if late(v):
            late_ones += 1
            assert v["ts"] < SIZE < high - GRACE
            continue
        assert v["ts"] >= high - GRACE, v
        disorder += v["ts"] < high
        highs[where] = max(high, v["ts"])
    assert late_ones >= 3 and disorder > 100


def test_the_windows_oracle_closes_what_the_lowest_partition_high_closes():
    # partition 0 (even ids) reaches 2600, partition 1 (odd ids) 3400: windows ending at
    # or before 2600 - GRACE = 2300 close, that is [0, 1000) and [1000, 2000)
    views = [{"id": 0, "page": LATE_PAGE, "ts": 0}, {"id": 1, "page": "/a", "ts": 900},
             {"id": 2, "page": "/a", "ts": 1500}, {"id": 3, "page": "/a", "ts": 1999},
             {"id": 4, "page": "/b", "ts": 2600}, {"id": 5, "page": "/a", "ts": 3400},
             {"id": 6, "page": "/a", "ts": 2100}]
    assert final_watermark(views) == 2600
    assert window_counts(views) == {LATE_PAGE: {0: 1}, "/a": {0: 1, 1000: 2}}
    assert BUILTIN["windows"].oracle(views).results == {
        LATE_PAGE: [[0, 1000]], "/a": [[0, 1000], [1000, 2000]]}
    # a partition none was read from holds nothing back at a run's end (lowest_at_end)
    assert final_watermark(views[:1]) == 0 and final_watermark([]) is None


def test_the_attribution_oracle_is_every_pair_within_the_interval():
    events = [{"id": 0, "side": "click", "user": "u1", "ts": 100},
              {"id": 1, "side": "buy", "user": "u1", "ts": 100 + WITHIN},
              {"id": 2, "side": "buy", "user": "u1", "ts": 101 + WITHIN + 100},
              {"id": 3, "side": "click", "user": "u2", "ts": 300},
              {"id": 4, "side": "click", "user": "u1", "ts": 400}]
    assert attribution_expected(events).results == {
        "1>0": [{"buy": 1, "click": 0}], "1>4": [{"buy": 1, "click": 4}],
        "2>4": [{"buy": 2, "click": 4}]}


def test_a_random_schedule_fires_windows_only_where_there_are_windows():
    from eos_runtime.experiments.random_schedule import random_schedule
    from eos_runtime.experiments.schedule import check_schedule, parse_schedule
    from eos_runtime.experiments.setup import task_roles

    roles = task_roles(BUILTIN["attribution"], "exactly-once")
    assert [r.task for r in roles if r.windows] == [4, 5]
    drawn = [f for s in range(60) for f in random_schedule(
        s, 4, ["crash", "zombie"], roles, "local").faults if f.point == "task.window.fired"]
    assert drawn and all(f.task in (4, 5) and f.hit in (2, 3) for f in drawn)
    with pytest.raises(ConfigError, match="field 'point' 'task.window.fired': task 0 has "
                                          "no windows: none fires"):
        check_schedule(parse_schedule([{"kind": "crash", "task": 0,
                                        "point": "task.window.fired"}]),
                       roles, "local", "exactly-once")


def test_windows_under_faults_on_the_local_log_and_the_checker_can_fail(tmp_path):
    """A window task crashing between its windows' firing and the commit, the other losing
    its state, a source crashing mid-version: each window's count once, the late-by-design
    views each counted or a dead letter. Then the same output judged against input it was
    not made from fails: one view fewer (a count off by one), one late-by-design view more
    (one view neither counted nor a letter)."""
    from eos_runtime.experiments.setup import job_pipeline
    from eos_runtime.joblog.committed import read_topic
    from eos_runtime.transport import open_transport

    from test_cli import ok_here

    (tmp_path / "w.toml").write_text(WINDOWS_SCHEDULE)
    ok_here("experiment", "windows", "--schedule", "w.toml", "--seed", "3", "--lines", "1500",
            "--report", "report", "--keep-data", cwd=tmp_path, timeout=600)
    run = _run_json(tmp_path / "report", 3)
    assert run["passed"] and all(f["fired"] for f in run["faults"]), run["faults"]
    v = run["verdict"]
    assert v["expected"] == v["committed"] > 30 and v["dead_letters"]["late_by_design"] >= 1
    pipeline = job_pipeline(BUILTIN["windows"], run["job"], "local")
    with open_transport(data_dir=run["kept_data"]) as t:
        # the run's input as it read it (its event times start at the day it ran)
        views = sorted((json.loads(r.value) for r in read_topic(t, pipeline.sources[0].topic)),
                       key=lambda x: x["id"])
        assert views == view_events(1500, 3, views[0]["ts"])
        assert judge_windows(t, pipeline, run["job"], views, "exactly-once").passed
        epoch = views[0]["ts"]
        one = next(i for i, x in enumerate(views)
                   if x["page"] == "/p1" and x["ts"] < epoch + 5_000)
        fewer = judge_windows(t, pipeline, run["job"], views[:one] + views[one + 1:],
                              "exactly-once")
        assert not fewer.passed and fewer.unexpected == 1, fewer
        more = judge_windows(t, pipeline, run["job"],
                             views + [{"id": 10**6, "page": LATE_PAGE, "ts": epoch + 5}],
                             "at-least-once")
        assert not more.passed and more.lost == 1, more


def test_attribution_under_faults_on_the_local_log(tmp_path):
    """The join task crashing between a firing and its commit, the other one a zombie, a
    purchases task crashing mid-version: every pair once."""
    from test_cli import ok_here

    (tmp_path / "a.toml").write_text(ATTRIBUTION_SCHEDULE)
    ok_here("experiment", "attribution", "--schedule", "a.toml", "--seed", "4", "--lines", "1500",
            "--report", "report", cwd=tmp_path, timeout=600)
    run = _run_json(tmp_path / "report", 4)
    assert run["passed"] and all(f["fired"] for f in run["faults"]), run["faults"]
    assert run["verdict"]["expected"] == run["verdict"]["committed"] > 300


@pytest.mark.kafka
@pytest.mark.parametrize("workload", ["windows", "attribution"])
def test_the_event_time_workloads_on_kafka(workload, kafka_bootstrap, tmp_path):
    from test_cli import ok_here

    (tmp_path / "s.toml").write_text(WINDOWS_SCHEDULE if workload == "windows"
                                     else ATTRIBUTION_SCHEDULE)
    ok_here("experiment", workload, "--schedule", "s.toml", "--seed", "5", "--lines", "1200",
            "--bootstrap-servers", kafka_bootstrap, "--report", "report", cwd=tmp_path,
            timeout=600)
    run = _run_json(tmp_path / "report", 5)
    assert run["passed"] and all(f["fired"] for f in run["faults"]), run["faults"]


@pytest.mark.parametrize("workload", ["windows", "attribution"])
def test_the_workloads_event_times_are_recent_so_no_broker_retention_deletes_their_results(
        workload):
    # A Kafka broker deletes a segment once its records' timestamps (CreateTime: a
    # window's result carries its window's time) are older than retention.ms, 7 days by
    # default. Results timestamped in 1970 went at the broker's first retention check
    # after its start (30 s), mid-run: seeds 25502, 25506 and 25509 lost window
    # [0, 1000) of every page, and a few dead letters, that way.
    import time

    values = BUILTIN[workload].generate(7, 200)
    now_ms = time.time() * 1000
    assert all(now_ms - 2 * 86_400_000 <= v["ts"] <= now_ms for v in values)
    assert min(v["ts"] for v in values) % SIZE == 0   # windows start on the epoch


def test_a_view_read_again_is_counted_again_or_a_dead_letter_never_both_never_neither():
    """The windows judgment under an operator's actions (window_verdict): a closing
    window's count plus the letters of its views is the times they were read."""
    from eos_runtime.experiments.window_workloads import window_verdict

    views = [{"id": 0, "page": LATE_PAGE, "ts": 0}, {"id": 1, "page": "/a", "ts": 100},
             {"id": 2, "page": "/a", "ts": 200}, {"id": 3, "page": "/a", "ts": 1500},
             {"id": 4, "page": "/a", "ts": 3000}, {"id": 5, "page": "/a", "ts": 3100}]
    again = views + [views[2]]   # partition 0 moved back to view 2: read twice
    base = [(LATE_PAGE, 0, 1), ("/a", 1000, 1)]

    def verdict(views_read, a_count, letters, guarantee="exactly-once"):
        return window_verdict(views_read, [*base, ("/a", 0, a_count)],
                              [{"id": i} for i in letters], guarantee)

    assert verdict(views, 2, []).passed                      # read once each
    assert verdict(again, 3, []).passed                      # its window still open
    assert verdict(again, 2, [2]).passed                     # its window had closed
    assert verdict(again, 2, []).lost == 1                   # neither
    assert verdict(again, 3, [2]).duplicated == 1            # both
    assert verdict(again, 2, [2, 2]).duplicated == 1         # a letter more than reads
    assert verdict(again, 2, [2], "at-least-once").passed
    assert verdict(again, 2, [], "at-least-once").lost == 1
    # read once and in order: an ordinary view is never late (W6), so never a letter
    assert verdict(views, 1, [2]).unexpected == 2            # the letter, and the count
    assert verdict(again, 2, [7]).unexpected == 1            # a view never read
    # skipped (a source moved forward): in no window, nothing expected of it
    skipped = [x for x in views if x["id"] != 2]
    assert verdict(skipped, 1, []).passed


def test_windows_under_an_operator_s_startpoint_back_and_a_reset(tmp_path):
    """Several runs of the windows job: a Startpoint moves partition 0 back (its views
    read again land in closed windows as dead letters, or in open ones as counts), a
    window task crashes between a firing and its commit in that run, then a reset starts
    an epoch over. Each epoch judged over the views it read."""
    from test_cli import ok_here

    (tmp_path / "ops.toml").write_text(OPERATOR_SCHEDULE)
    ok_here("experiment", "windows", "--schedule", "ops.toml", "--seed", "5", "--lines", "1500",
            "--report", "report", cwd=tmp_path, timeout=600)
    run = _run_json(tmp_path / "report", 5)
    assert run["passed"] and all(f["fired"] for f in run["faults"]), run["faults"]
    runs = [r for r in run["runs"] if "run" in r]
    assert [r["run"] for r in runs] == [1, 2, 3] and runs[1]["starts"][0] == 100
    # the views read again that found their windows closed are letters, beyond the
    # late-by-design ones
    assert run["verdict"]["dead_letters"]["committed"] > \
        run["verdict"]["dead_letters"]["late_by_design"]


def test_a_pair_of_records_read_again_is_judged_by_a_range():
    """The attribution judgment under an operator's actions (attribution_pairs): a pair
    of records read once each, in course, exactly once; a record read again pairs again
    with what its join task still holds (at most once per pair of reads, at least once
    when both were first read in course); one read out of course may be late (none
    required)."""
    from eos_runtime.experiments.window_workloads import attribution_pairs, attribution_verdict

    # clicks 0, 2 and purchase 1 of u1 (ids: partitions by parity within each side)
    events = [{"id": 0, "side": "click", "user": "u1", "ts": 100},
              {"id": 1, "side": "buy", "user": "u1", "ts": 150},
              {"id": 2, "side": "click", "user": "u1", "ts": 160},
              {"id": 3, "side": "buy", "user": "u2", "ts": 170}]
    exact, ranges = attribution_pairs(events)
    assert sorted(exact) == ["1>0", "1>2"] and ranges == {}
    again = events + [events[0]]                    # click 0 read again
    exact, ranges = attribution_pairs(again)
    assert sorted(exact) == ["1>2"] and ranges == {"1>0": (1, 2)}
    verdict = lambda keys, letters=(), g="exactly-once": attribution_verdict(  # noqa: E731
        again, keys, [["R", {"id": i}] for i in letters], g)
    assert verdict(["1>0", "1>2"], letters=[0]).passed      # late the second time
    assert verdict(["1>0", "1>0", "1>2"]).passed            # paired again
    assert verdict(["1>2"]).lost == 1                       # its first read paired nothing
    assert verdict(["1>0"] * 3 + ["1>2"]).duplicated == 1   # more than its reads
    assert verdict(["1>0"] * 3, g="at-least-once").passed
    assert verdict(["1>0", "1>2"], letters=[0, 0]).duplicated == 1   # a letter per read
    assert verdict(["1>0", "1>2"], letters=[9]).unexpected == 1      # never read
    # read once each, in course: only a late-by-design click may be a letter
    assert attribution_verdict(events, ["1>0", "1>2"], [["R", {"id": 0}]],
                               "exactly-once").unexpected == 1
    # out of course: click 2 (partition 0) read before click 0: 0 may have been late
    swapped = [events[2], events[1], events[0], events[3]]
    _, ranges = attribution_pairs(swapped)
    assert ranges == {"1>0": (0, 1)}


ATTRIBUTION_OPERATOR_SCHEDULE = """
[[fault]]
kind = "startpoint"      # clicks partition 0 back: each click read again pairs again, or is late
run = 2
partition = 0
offset = 100

[[fault]]
kind = "crash"           # the join task, between a firing and its commit, in that run
run = 2
task = 4
point = "task.window.fired"
hit = 2
"""


def test_attribution_under_an_operator_s_startpoint_back(tmp_path):
    """Two runs of the windowed join, the second with clicks' partition 0 moved back:
    pairs of records read once, in course, exactly once; a click read again pairs again
    with what its join task still holds, within its range; letters only for reads that
    could be late."""
    from test_cli import ok_here

    (tmp_path / "ops.toml").write_text(ATTRIBUTION_OPERATOR_SCHEDULE)
    ok_here("experiment", "attribution", "--schedule", "ops.toml", "--seed", "6", "--lines",
            "1500", "--report", "report", cwd=tmp_path, timeout=600)
    run = _run_json(tmp_path / "report", 6)
    assert run["passed"] and all(f["fired"] for f in run["faults"]), run["faults"]
    runs = [r for r in run["runs"] if "run" in r]
    assert [r["run"] for r in runs] == [1, 2] and runs[1]["starts"]["clicks"][0] == 100
    # clicks read again after their purchases had expired are late: letters past the
    # late-by-design ones
    assert run["verdict"]["dead_letters"]["committed"] > \
        run["verdict"]["dead_letters"]["late_by_design"]
