"""Windows through the API and the in-process helper (issue 25): what closes when, each
aggregation and emission, lateness, and what a window cannot follow."""

from __future__ import annotations

import pytest

from eos_runtime import Pipeline
from eos_runtime.errors import ConfigError
from eos_runtime.testing import TestRun
from eos_runtime.windows import Hopping, Session, Tumbling, hopping, tumbling


def views(emit: str = "final", agg=lambda w: w.count(), grace: int = 0, spec=None) -> Pipeline:
    p = Pipeline("views")
    windowed = (p.source("views", value="json", timestamp=lambda v: v["ts"])
                .key_by(lambda v: v["page"])
                .window(spec or tumbling(seconds=1), grace=grace))
    getattr(agg(windowed), emit)().sink("out", key="utf8", value="json")
    return p


def w(start: int, end: int, value) -> dict:
    return {"start": start, "end": end, "value": value}


def test_final_emits_each_window_once_when_the_watermark_passes_its_end_plus_grace():
    with TestRun(views(grace=500)) as test:
        assert test.send([{"page": "/", "ts": 100}, {"page": "/", "ts": 900},
                          {"page": "/b", "ts": 1_200}]) == []
        assert test.advance(1_499) == []                       # [0, 1000) closes at 1500
        assert test.advance(1_500) == [("/", w(0, 1_000, 2))]
        assert test.send([{"page": "/b", "ts": 1_999}]) == []
        assert test.advance(10_000) == [("/b", w(1_000, 2_000, 2))]
        assert test.advance(20_000) == []                      # nothing twice


def test_current_emits_every_update_and_nothing_at_the_close():
    with TestRun(views("current")) as test:
        assert test.send([{"page": "/", "ts": 1}, {"page": "/", "ts": 2}]) == [
            ("/", w(0, 1_000, 1)), ("/", w(0, 1_000, 2))]
        assert test.advance(5_000) == []


@pytest.mark.parametrize("agg, want", [
    (lambda x: x.sum(lambda v: v["n"]), 6),
    (lambda x: x.reduce(lambda acc, v: {"n": max(acc["n"], v["n"])}), {"n": 3}),
    (lambda x: x.aggregate(initial=lambda: [], add=lambda acc, v: acc + [v["n"]]), [1, 2, 3]),
])
def test_sum_reduce_and_aggregate(agg, want):
    with TestRun(views(agg=agg)) as test:
        test.send([{"page": "/", "ts": t, "n": t} for t in (1, 2, 3)])
        assert test.advance(1_000) == [("/", w(0, 1_000, want))]


def test_hopping_windows_hold_a_record_in_each_window_it_falls_in():
    with TestRun(views(spec=hopping(1_000, 500))) as test:
        test.send([{"page": "/", "ts": 700}])
        assert test.advance(2_000) == [("/", w(0, 1_000, 1)), ("/", w(500, 1_500, 1))]


def test_a_record_whose_windows_closed_is_late_counted_and_in_no_window():
    with TestRun(views()) as test:
        test.advance(3_000)
        assert test.send([{"page": "/", "ts": 2_999}, {"page": "/", "ts": 3_000}]) == []
        assert test.late == 1
        assert test.advance(4_000) == [("/", w(3_000, 4_000, 1))]


def test_a_window_s_results_go_on_through_later_steps_and_stages():
    p = Pipeline("busiest")
    (p.source("views", value="json", timestamp=lambda v: v["ts"])
        .key_by(lambda v: v["page"])
        .window(tumbling(1_000)).count().final()
        .map(lambda r: {"minute": r["start"], "views": r["value"]})
        .key_by(lambda r: r["minute"])
        .sink("per-minute", key="msgpack", value="json"))
    with TestRun(p) as test:
        test.send([{"page": pg, "ts": 10} for pg in ("/", "/", "/b")])
        assert sorted(test.advance(1_000), key=str) == [(0, {"minute": 0, "views": 1}),
                                                        (0, {"minute": 0, "views": 2})]


def test_what_a_window_cannot_follow_or_take_is_refused_when_written():
    p = Pipeline("bad")
    lines = p.source("lines")
    with pytest.raises(ConfigError, match="has no key: add .key_by"):
        lines.window(tumbling(1_000))
    keyed = lines.key_by(lambda s: s)
    with pytest.raises(ConfigError, match="tumbling"):
        keyed.window(1_000)
    with pytest.raises(ConfigError, match="grace is whole milliseconds"):
        keyed.window(tumbling(1_000), grace=-1)
    with pytest.raises(ConfigError, match="expected a function"):
        keyed.window(tumbling(1_000)).reduce("max")
    with pytest.raises(ConfigError, match="timestamp must be a function"):
        p.source("other", timestamp=5)
    with pytest.raises(ConfigError, match="idle_after"):
        p.source("third", idle_after=-1)
    a = p.source("a").key_by(lambda s: s)
    b = p.source("b").key_by(lambda s: s)
    with pytest.raises(ConfigError, match="follows a merge"):
        a.merge(b).window(tumbling(1_000))


def test_a_timestamp_function_that_is_not_whole_ms_names_the_source():
    from eos_runtime.errors import UserFunctionError

    p = Pipeline("t")
    (p.source("views", value="json", timestamp=lambda v: v["ts"])
        .key_by(lambda v: v["page"]).window(tumbling(1_000)).count().final().sink("o"))
    with TestRun(p) as test, pytest.raises(UserFunctionError, match=r"source 'views' "
                                           r"timestamp function returned 'soon': an event"):
        test.send([{"page": "/", "ts": "soon"}])


@pytest.mark.parametrize("ts", [2**63, -(2**63) - 1])
def test_an_event_time_beyond_64_bits_is_the_record_s_error_naming_the_source(ts):
    """Every record carries its event time as a signed 64-bit number (channel batches,
    Kafka's timestamps): one beyond is refused where the user's function made it."""
    from eos_runtime.errors import UserFunctionError

    p = Pipeline("t")
    p.source("views", value="json", timestamp=lambda v: v["ts"]).sink("o", value="json")
    with TestRun(p) as test, pytest.raises(UserFunctionError, match=r"source 'views' "
                                           r"timestamp function returned -?\d+: an event "
                                           r"time .*64-bit"):
        test.send([{"ts": ts}])


def sessions(agg=lambda w: w.count(), emit: str = "final") -> Pipeline:
    from eos_runtime.windows import session

    p = Pipeline("sessions")
    windowed = (p.source("clicks", value="json", timestamp=lambda c: c["ts"])
                .key_by(lambda c: c["user"])
                .window(session(gap=1_000)))
    getattr(agg(windowed), emit)().sink("out", key="utf8", value="json")
    return p


def test_sessions_close_a_gap_after_their_last_record_and_merge_when_bridged():
    with TestRun(sessions()) as test:
        test.send([{"user": "u", "ts": t} for t in (0, 500, 2_000)])
        assert test.advance(1_500) == []    # a record at 1 500 would still join [0, 1500)
        assert test.advance(1_501) == [("u", w(0, 1_500, 2))]      # [0, 500 + gap)
        test.send([{"user": "u", "ts": 2_400}])                    # extends [2000, 3000)
        assert test.advance(3_000) == []
        assert test.advance(3_401) == [("u", w(2_000, 3_400, 2))]


def test_a_session_stays_open_while_a_record_not_late_could_still_join_it():
    """[0, 1000) closed at watermark 1 000, yet a record at 1 000 (gap apart: the same
    session) was not late and opened [1000, 2000): with in-order input, the result hung
    on where a checkpoint fell. And one at 500 after the close was not late either, and
    opened [500, 1500) over the closed session. A record more than grace behind the
    watermark is late now, and a session closes once every record that could join it
    would be."""
    with TestRun(sessions()) as test:
        test.send([{"user": "u", "ts": 0}])
        assert test.advance(1_000) == []
        test.send([{"user": "u", "ts": 1_000}])
        assert test.late == 0
        assert test.advance(2_001) == [("u", w(0, 2_000, 2))]
    with TestRun(sessions()) as test:
        test.send([{"user": "u", "ts": 0}])
        assert test.advance(1_001) == [("u", w(0, 1_000, 1))]
        assert test.send([{"user": "u", "ts": 500}]) == [] and test.late == 1
        assert test.send([{"user": "u", "ts": 1_001}]) == [] and test.late == 1
        assert test.advance(2_002) == [("u", w(1_001, 2_001, 1))]


def test_a_record_that_bridges_two_sessions_merges_them_in_time_order():
    keep = sessions(lambda x: x.aggregate(initial=list, add=lambda acc, c: acc + [c["ts"]],
                                          merge=lambda a, b: a + b))
    with TestRun(keep) as test:
        test.send([{"user": "u", "ts": t} for t in (0, 1_800, 900)])   # 900 bridges
        assert test.advance(10_000) == [("u", w(0, 2_800, [0, 900, 1_800]))]


def test_current_sessions_show_each_update_and_a_late_record_starts_none():
    with TestRun(sessions(emit="current")) as test:
        assert test.send([{"user": "u", "ts": 0}, {"user": "u", "ts": 300}]) == [
            ("u", w(0, 1_000, 1)), ("u", w(0, 1_300, 2))]
        test.advance(5_000)
        assert test.send([{"user": "u", "ts": 3_999}]) == [] and test.late == 1


def test_an_aggregate_over_sessions_needs_merge():
    from eos_runtime.windows import session

    keyed = Pipeline("p").source("s").key_by(lambda s: s)
    with pytest.raises(ConfigError, match="give merge=fn"):
        keyed.window(session(gap=10)).aggregate(initial=list, add=lambda a, v: a + [v])


def attribution(how: str = "inner", join=None) -> Pipeline:
    p = Pipeline("attribution")
    clicks = p.source("clicks", value="json", timestamp=lambda c: c["ts"])
    buys = p.source("purchases", value="json", timestamp=lambda b: b["ts"])
    (buys.join(clicks, within=1_000, on=(lambda b: b["user"], lambda c: c["user"]), how=how,
               join=join)
        .sink("attributed", key="utf8", value="json"))
    return p


def test_a_windowed_join_pairs_records_within_the_interval_once_each():
    with TestRun(attribution(join=lambda b, c: [b["id"], c["id"]])) as test:
        assert test.send({"clicks": [{"user": "u", "id": "c1", "ts": 100},
                                     {"user": "v", "id": "c2", "ts": 100}]}) == []
        out = test.send({"purchases": [{"user": "u", "id": "b1", "ts": 1_100},    # c1: 1000 ms
                                       {"user": "u", "id": "b2", "ts": 1_101}]})  # too late
        assert out == [("u", ["b1", "c1"])]
        out = test.send({"clicks": [{"user": "u", "id": "c3", "ts": 2_000}]})     # b1, b2
        assert out == [("u", ["b1", "c3"]), ("u", ["b2", "c3"])]
        assert test.advance(100_000) == []                                        # inner


def test_a_left_join_emits_the_unmatched_once_no_partner_can_come():
    with TestRun(attribution("left")) as test:
        test.send({"purchases": [{"user": "u", "id": "b1", "ts": 5_000},
                                 {"user": "w", "id": "b2", "ts": 5_000}]})
        test.send({"clicks": [{"user": "u", "id": "c1", "ts": 4_500}]})
        assert test.advance(6_000) == []       # a partner at 6000 may still come
        assert test.advance(6_001) == [("w", [{"user": "w", "id": "b2", "ts": 5_000}, None])]
        assert test.advance(100_000) == []     # b1 had c1: nothing more


def test_a_join_record_past_the_watermark_is_late():
    with TestRun(attribution()) as test:
        test.advance(10_000)
        test.send({"clicks": [{"user": "u", "id": "c", "ts": 9_999}]})
        assert test.late == 1


def test_a_join_is_refused_where_it_cannot_work():
    p = Pipeline("j")
    a, b = p.source("a"), p.source("b")
    with pytest.raises(ConfigError, match="on=\\(left_key, right_key\\)"):
        a.join(b, within=10, on=lambda v: v)
    with pytest.raises(ConfigError, match="within is whole"):
        a.join(b, within=-1, on=(len, len))
    with pytest.raises(ConfigError, match="how='outer'"):
        a.join(b, within=1, on=(len, len), how="outer")
    with pytest.raises(ConfigError, match="joined with itself"):
        a.join(a, within=1, on=(len, len))


def reminders() -> Pipeline:
    def remember(order, state):
        state.set("order", order)
        state.timer(order["ts"] + 1_000)        # an hour, in this test a second
        return None

    def on_timer(at, state):
        order = state.get("order")
        state.delete("order")
        return None if order.get("paid") else {"unpaid": order["id"], "at": at}

    p = Pipeline("reminders")
    (p.source("orders", value="json", timestamp=lambda o: o["ts"])
        .key_by(lambda o: o["id"])
        .map(remember, stateful=True, on_timer=on_timer)
        .filter(lambda out: out is not None)
        .sink("unpaid", key="utf8", value="json"))
    return p


def test_a_step_s_timer_calls_on_timer_with_the_key_s_state_once_the_watermark_passes():
    with TestRun(reminders()) as test:
        test.send([{"id": "a", "ts": 0}, {"id": "b", "ts": 500, "paid": True},
                   {"id": "c", "ts": 700}])
        assert test.advance(999) == []
        assert test.advance(1_500) == [("a", {"unpaid": "a", "at": 1_000})]   # b paid
        assert test.advance(5_000) == [("c", {"unpaid": "c", "at": 1_700})]
        assert test.advance(9_000) == []                                      # once


def test_a_timer_needs_on_timer_and_on_timer_needs_state():
    from eos_runtime.errors import UserFunctionError

    p = Pipeline("t")
    keyed = p.source("s", value="json", timestamp=lambda v: 0).key_by(lambda v: "k")
    with pytest.raises(ConfigError, match="on_timer needs stateful=True"):
        keyed.map(lambda v: v, on_timer=lambda at, state: None)

    def sets(v, state):
        state.timer(5)
        return v

    keyed.map(sets, stateful=True).sink("o")
    with TestRun(p) as test, pytest.raises(UserFunctionError, match="has no on_timer"):
        test.send([1])


def test_a_windowed_job_s_state_stays_flat_as_time_goes_on():
    """T3: 200 windows' worth of views, the watermark following: what the store holds
    (aggregates and timers) is the windows still open, not the windows ever seen."""
    import random

    rng = random.Random(3)
    sizes = []
    with TestRun(views(grace=500)) as test:
        store = test._stages[1].store
        t = 0
        for _ in range(200):
            views_ = []
            for _ in range(50):
                t += rng.randint(0, 40)
                views_.append({"page": rng.choice(["/", "/a", "/b", "/c"]), "ts": t})
            test.send(views_)
            test.advance(t)
            sizes.append((sum(1 for _ in store.items("window0")),
                          sum(1 for _ in store.items("timers"))))
    assert t > 200_000                                       # 200 one-second windows
    assert max(n for n, _ in sizes) <= 8                     # 4 pages x (1 + grace/size)
    assert all(n == m for n, m in sizes)                     # a timer per open window


def test_a_window_after_a_window_places_each_result_at_its_own_time():
    """A window's result went into the next window of the stage at the event time of the
    last record read (950 here), not at its own (its end - 1): [0, 10)'s count of 2 was
    counted in [900, 1000)."""
    p = Pipeline("rollup")
    (p.source("views", value="json", timestamp=lambda v: v["ts"])
        .key_by(lambda v: v["page"])
        .window(tumbling(10)).count().final()
        .window(tumbling(100)).sum(lambda r: r["value"]).final()
        .sink("out", key="utf8", value="json"))
    with TestRun(p) as test:
        test.send([{"page": "/", "ts": t} for t in (0, 5, 950)])
        assert test.advance(10) == []
        assert test.advance(100) == [("/", w(0, 100, 2))]
        assert test.advance(1_000) == [("/", w(900, 1_000, 1))]


def _remember(value, state):
    state.timer(value["ts"])
    return None


def _again(at, state):
    state.timer(at)            # due again at once: waits for the next checkpoint
    return {"at": at}


def _timer_job(name: str, on_timer) -> Pipeline:
    """Each record sets a timer at its own time (``_remember``); ``on_timer`` fires it."""
    p = Pipeline(name)
    (p.source("in", value="json", timestamp=lambda v: v["ts"])
        .key_by(lambda v: v["k"])
        .map(_remember, stateful=True, on_timer=on_timer)
        .filter(lambda out: out is not None)
        .sink("out", key="utf8", value="json"))
    return p


def test_a_timer_that_sets_a_due_timer_of_its_own_fires_once_a_checkpoint():
    """Firing goes on for the ops after one that sent results on (a roll-up of windows),
    never for that op again: a timer set due in its own callback would loop for ever."""
    with TestRun(_timer_job("again", _again)) as test:
        test.send([{"k": "a", "ts": 5}])
        assert test.advance(10) == [("a", {"at": 5})]
        assert test.advance(10) == [("a", {"at": 5})]


def test_a_record_without_a_key_in_a_window_is_the_records_error_naming_it():
    """A keyed source's record with no key (``eos produce`` writes none) reached a window
    as a bare AssertionError."""
    from eos_runtime.errors import UserFunctionError

    p = Pipeline("nokey")
    (p.source("views", key="utf8", value="json", timestamp=lambda v: v["ts"])
        .window(tumbling(1_000)).count().final()
        .sink("out", key="utf8", value="json"))
    with TestRun(p) as test:
        with pytest.raises(UserFunctionError, match="no key"):
            test.send([(None, {"ts": 5})])


@pytest.mark.parametrize("spec", [tumbling(1_000), None])
def test_an_aggregate_that_cannot_be_state_is_the_records_error_naming_the_window(spec):
    """aggregate(initial=set, ...) raised msgpack's bare TypeError ("can not serialize
    'set' object") against the record, naming no window."""
    from eos_runtime.errors import UserFunctionError
    from eos_runtime.windows import session

    p = Pipeline("sets")
    windowed = (p.source("views", value="json", timestamp=lambda v: v["ts"])
                .key_by(lambda v: v["page"])
                .window(spec or session(1_000)))
    (windowed.aggregate(initial=set, add=lambda acc, v: acc | {v["ts"]},
                        **({} if spec else {"merge": lambda a, b: a | b}))
        .final().sink("out", key="utf8", value="json"))
    with TestRun(p) as test:
        with pytest.raises(UserFunctionError, match=r"window .*aggregate, a set, cannot be "
                                                    r"kept as state"):
            test.send([{"page": "/", "ts": 5}])


@pytest.mark.parametrize("cls, args, message", [
    (Hopping, (10, 30), "must divide"), (Tumbling, (0,), "whole milliseconds"),
    (Tumbling, (1.5,), "whole milliseconds"), (Session, (-1,), "whole milliseconds"),
])
def test_a_window_class_built_directly_is_checked_as_its_function_checks_it(cls, args,
                                                                            message):
    """Hopping(10, 30) put every record in no window (each counted late); Tumbling(0)
    divided by zero on every record."""
    with pytest.raises(ValueError, match=message):
        cls(*args)


def _timer_far(value, state):
    state.timer(2**63)
    return None


def test_a_timer_or_window_past_the_largest_time_is_the_records_error():
    """Masked to 64 bits, state.timer(2**63) became a timer at -2**63 that fired at the
    next checkpoint, and a window of a record near the largest time closed at once, then
    crashed the task on its result's timestamp at every restart."""
    from eos_runtime.errors import UserFunctionError

    far = Pipeline("far")
    (far.source("in", value="json", timestamp=lambda v: v["ts"])
        .key_by(lambda v: v["k"])
        .map(_timer_far, stateful=True, on_timer=_again)
        .sink("out", key="utf8", value="json"))
    with TestRun(far) as test:
        with pytest.raises(UserFunctionError, match=r"time 9223372036854775808 is past"):
            test.send([{"k": "a", "ts": 5}])
    with TestRun(views()) as test:
        with pytest.raises(UserFunctionError, match=r"is past the times an event may carry"):
            test.send([{"page": "/", "ts": 2**63 - 10}])


def test_a_fired_result_a_later_window_had_closed_is_counted_late_at_the_firing():
    """With the later window's grace shorter than the earlier one's, the later window
    closes first, and the earlier one's result is late for it: it was left for the next
    record read to count (and, in a task, set aside as that record's letter)."""
    p = Pipeline("rollup-grace")
    (p.source("views", value="json", timestamp=lambda v: v["ts"])
        .key_by(lambda v: v["page"])
        .window(tumbling(1_000), grace=500).count().final()
        .window(tumbling(1_000)).sum(lambda r: r["value"]).final()
        .sink("out", key="utf8", value="json"))
    with TestRun(p) as test:
        test.send([{"page": "/", "ts": 100}])
        assert test.advance(1_200) == []
        assert test.advance(1_500) == [] and test.late == 1


def test_a_send_that_raises_leaves_the_late_count_and_the_watermark_as_they_were():
    """A send or advance that raised undid the state but not the late count (counted per
    record as it went) nor the watermark (moved before the firing)."""
    from eos_runtime.errors import UserFunctionError

    with TestRun(views()) as test:
        test.advance(1_500)
        with pytest.raises(UserFunctionError, match="timestamp function returned 'x'"):
            test.send([{"page": "/", "ts": 999}, {"page": "/", "ts": "x"}])
        assert test.late == 0
    with TestRun(_timer_job("boom", _boom)) as test:
        test.send([{"k": "a", "ts": 5}])
        with pytest.raises(UserFunctionError, match="boom"):
            test.advance(10)
        assert test.watermark is None


def _boom(*args):
    raise ValueError("boom")
