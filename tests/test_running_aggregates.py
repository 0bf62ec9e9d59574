"""Running aggregates of a keyed stream: ``key_by(...).count()``, ``sum``, ``reduce``,
``aggregate`` (``aggregates.py``; docs/api.md, *Running aggregates*).

The record path runs them on the store itself (``RunningAggregate.over``), and a step
called the plain way, ``fn(value, state)``, goes through ``State``: both must keep one
layout, since a chain of one step takes the first and a program the loop's form. Their
fault-injected runs are the wordcount example's (test_crashes, test_pipelines)."""

from __future__ import annotations

import json

import pytest

from eos_runtime import Pipeline
from eos_runtime.aggregates import count, summing
from eos_runtime.api import FORMATS, State, Step
from eos_runtime.errors import ConfigError, UserFunctionError
from eos_runtime.runtime.operators import Chain, encode_key
from eos_runtime.state import TaskStore
from eos_runtime.testing import TestRun, run_steps


def _by_user(view):
    return view["user"]


def _amount(purchase):
    return purchase["amount"]


def test_count_sends_each_key_s_running_count_on_every_value():
    words = Pipeline("words")
    (words.source("lines").flat_map(str.split).key_by(lambda w: w).count()
        .sink("counts", key="utf8", value="json"))
    assert run_steps(words, ["a b a", "b a"]) == [
        ("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3)]
    with TestRun(words) as test:             # the count lasts from one send to the next
        assert test.send(["a"]) == [("a", 1)]
        assert test.send(["a a"]) == [("a", 2), ("a", 3)]


@pytest.mark.parametrize("aggregate,expected", [
    (lambda s: s.sum(_amount), [5, 1, 12, 13]),
    (lambda s: s.map(_amount).sum(), [5, 1, 12, 13]),
    (lambda s: s.map(_amount).reduce(min), [5, 1, 5, 1]),
    (lambda s: s.aggregate(list, lambda acc, p: acc + [p["amount"]]),
     [[5], [1], [5, 7], [1, 12]]),
])
def test_sum_reduce_and_aggregate(aggregate, expected):
    p = Pipeline("totals")
    aggregate(p.source("purchases", value="json").key_by(_by_user)).sink(
        "totals", key="utf8", value="json")
    got = run_steps(p, [{"user": "ann", "amount": 5}, {"user": "bob", "amount": 1},
                        {"user": "ann", "amount": 7}, {"user": "bob", "amount": 12}])
    assert got == list(zip(["ann", "bob", "ann", "bob"], expected, strict=True))


def _store_after(tmp_path, name, run):
    with TaskStore(tmp_path / name, ("step0", "step1")) as store:
        outs = run(store)
        return outs, store.staged()


@pytest.mark.parametrize("aggregate", [count(), summing(len, "len")], ids=["count", "sum"])
def test_the_record_path_s_form_and_the_state_form_keep_one_layout(tmp_path, aggregate):
    records = [("k1", "a"), ("k2", "bb"), ("k1", "ccc"), ("k1", "d")]
    step = Step("map", aggregate, True, aggregate.name)

    def fast(store):     # a chain of one step: the step on the store
        chain = Chain((step,), store)
        return [chain.run(encode_key(k), v) for k, v in records]

    def looped(store):   # behind another step: the loop over steps
        chain = Chain((Step("map", lambda v: v, name="same"), step), store)
        return [chain.run(encode_key(k), v) for k, v in records]

    def through_state(store):
        state = State(*store.accessors("step0"))
        outs = []
        for k, v in records:
            state._prefix = encode_key(k)
            outs.append([aggregate(v, state)])
        return outs

    fast_out, fast_staged = _store_after(tmp_path, "fast", fast)
    looped_out, looped_staged = _store_after(tmp_path, "looped", looped)
    state_out, state_staged = _store_after(tmp_path, "state", through_state)
    assert fast_out == looped_out == state_out
    assert fast_out == ([[1], [1], [2], [3]] if aggregate.name == "count()" else
                        [[1], [2], [4], [5]])
    assert fast_staged == state_staged
    assert [(k, v) for _, k, v in looped_staged] == [(k, v) for _, k, v in fast_staged]
    # the aggregate is stored under the encoded key itself, as msgpack
    assert fast_staged[0][1] == encode_key("k1")


def test_a_record_set_aside_takes_its_count_back(tmp_path):
    with TaskStore(tmp_path / "s", ("step0",)) as store:
        chain = Chain((Step("map", count(), True, "count()"),), store)
        assert chain.run(encode_key("a"), "x") == [1]
        store.savepoint()
        assert chain.run(encode_key("a"), "x") == [2]
        store.rollback()   # the record went to the dead letters
        assert chain.run(encode_key("a"), "x") == [2]


def test_each_value_of_a_record_adds_in_turn(tmp_path):
    with TaskStore(tmp_path / "s", ("step1",)) as store:
        chain = Chain((Step("flat_map", lambda v: [v, v, v], name="three"),
                       Step("map", count(), True, "count()")), store)
        assert chain.run(encode_key("a"), "x") == [1, 2, 3]
        assert chain.run(encode_key("a"), "x") == [4, 5, 6]


def test_a_keyless_record_s_aggregate_is_an_error_of_the_record():
    p = Pipeline("keyless")
    p.source("events", key="utf8").count().sink("counts", key="utf8", value="json")
    assert run_steps(p, [("a", "x"), ("a", "y")]) == [("a", 1), ("a", 2)]
    with pytest.raises(UserFunctionError, match=r"step count\(\) raised .*this record has no "
                                                r"key"):
        run_steps(p, [(None, "x")])


def test_a_failing_aggregate_is_named_with_the_user_s_function_and_line():
    p = Pipeline("bad-sum")
    p.source("purchases", value="json").key_by(_by_user).sum(_amount).sink(
        "totals", key="utf8", value="json")
    with pytest.raises(UserFunctionError,
                       match=r"^step sum\(_amount\) at test_running_aggregates.py:\d+ raised "
                             r"TypeError"):
        run_steps(p, [{"user": "ann", "amount": 5}, {"user": "ann", "amount": "7"}])


def test_an_aggregate_the_sink_cannot_write_is_named_by_its_step():
    p = Pipeline("utf8-count")
    p.source("lines").key_by(len).count().sink("counts", value="utf8")
    with pytest.raises(UserFunctionError, match=r"the value 1 \(made by count\(\)\) does not "
                                                r"fit the value format 'utf8'"):
        run_steps(p, ["a"])


def test_an_aggregate_whose_value_msgpack_cannot_hold_is_an_error_of_the_record():
    p = Pipeline("sets")
    p.source("lines").key_by(len).aggregate(set, lambda acc, v: acc | {v}).sink(
        "sets", value="json")
    with pytest.raises(UserFunctionError, match=r"step aggregate\(<lambda>\) .*raised"):
        run_steps(p, ["a"])


def test_a_stream_after_an_aggregate_is_named_by_it():
    p = Pipeline("nowhere")
    counted = p.source("lines").key_by(len)
    counted.sink("keyed")
    counted.count()
    with pytest.raises(ConfigError, match=r"after \.count\(\) goes nowhere"):
        run_steps(p, ["a"])


@pytest.mark.parametrize("write,says", [
    (lambda p: p.source("lines").count(),
     r"^count\(\) from source 'lines': the stream has no key: add \.key_by"),
    (lambda p: p.source("a").key_by(len).merge(p.source("b").key_by(len)).sum(),
     r"^sum\(\) after \.merge\(\.\.\.\) follows a merge of streams of different stages"),
    (lambda p: p.source("lines").key_by(len).sum(3), r"^sum: expected a function, got 3"),
    (lambda p: p.source("lines").key_by(len).reduce(len),
     r"^reduce\(len\): a function is called as len\(acc, value\), but its parameters are "
     r"\(obj, /\): give it 2 parameters, \(acc, value\)"),
    (lambda p: p.source("lines").key_by(len).aggregate(lambda x: [], lambda a, v: a),
     r"^aggregate initial\(<lambda>\): a function is called as fn\(\), but its parameters "
     r"are \(x\): give it no parameters"),
    (lambda p: p.source("lines").key_by(len).aggregate(list, lambda a: a),
     r"^aggregate add\(<lambda>\): .* give it 2 parameters, \(acc, value\)"),
])
def test_an_aggregate_that_cannot_run_is_refused_where_written(write, says):
    with pytest.raises(ConfigError, match=says):
        write(Pipeline("refused"))


@pytest.mark.parametrize("value", [0, 3, -5, 2**70, True, False, None, 1.5, "é", [1, "a"],
                                   {"a": [1, 2.0]}])
def test_the_json_sink_writes_what_json_dumps_writes(value):
    """An int takes a shortcut (its digits); nothing else may, a bool least of all."""
    encode = FORMATS["json"][0]
    assert encode(value) == json.dumps(value, separators=(",", ":")).encode()
    with pytest.raises(TypeError):
        encode({1, 2})
