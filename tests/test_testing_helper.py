"""eos_runtime.testing: a pipeline's steps run in-process, without Spark or a log (issue 11,
item 10), through the runtime's own step chain and a real RocksDB task store."""

from __future__ import annotations

import runpy
from collections import namedtuple
from pathlib import Path

import pytest

from eos_runtime import Pipeline
from eos_runtime.errors import ConfigError, UserFunctionError
from eos_runtime.testing import TestRun, run_steps

from pipeline_oracles import (
    check_pageviews_exactly_once,
    check_wordcount_exactly_once,
    page_views,
    word_lines,
)

ROOT = Path(__file__).resolve().parent.parent
Out = namedtuple("Out", "partition offset key value")


def example(name: str) -> Pipeline:
    return runpy.run_path(str(ROOT / "examples" / f"{name}.py"))["pipeline"]


def as_records(pairs):
    """(key, value) pairs as the oracles read sink records: bytes, in one partition (a
    count, as a json sink writes it: its digits)."""
    return [Out(0, i, k.encode(), str(v).encode()) for i, (k, v) in enumerate(pairs)]


def count(word, state):
    n = state.get("n", 0) + 1
    state.set("n", n)
    return str(n)


def wordcount() -> Pipeline:
    p = Pipeline("wc")
    (p.source("lines").flat_map(str.split).key_by(lambda w: w)
     .map(count, stateful=True).sink("counts", key="utf8"))
    return p


# --------------------------------------------------------------------------- what it runs

def test_run_steps_returns_what_the_sink_would_hold():
    assert run_steps(wordcount(), ["a b a", "b"]) == [
        ("a", "1"), ("b", "1"), ("a", "2"), ("b", "2")]


def test_state_carries_over_between_sends_and_stays_per_key():
    with TestRun(wordcount()) as test:
        assert test.send(["a b"]) == [("a", "1"), ("b", "1")]
        assert test.send(["a", "c a"]) == [("a", "2"), ("c", "1"), ("a", "3")]
        assert test.send([]) == []


def test_the_examples_match_their_oracles():
    lines = word_lines(300)
    with TestRun(example("wordcount")) as test:
        out = test.send(lines[:100]) + test.send(lines[100:])
    check_wordcount_exactly_once(as_records(out), lines)

    views = page_views(300)
    out = run_steps(example("pageviews"), views)   # three stages, state in two
    check_pageviews_exactly_once(as_records(out), views)


def test_it_uses_the_runtimes_program_and_a_rocksdb_store(monkeypatch):
    from eos_runtime.runtime import operators
    from eos_runtime.state import TaskStore

    calls, stores = [], []
    real_run, real_init = operators.Program.run, TaskStore.__init__

    def spy_run(self, key_bytes, value):
        calls.append((key_bytes, value))
        return real_run(self, key_bytes, value)

    def spy_init(self, path, names, **kw):
        stores.append((Path(path), tuple(names)))
        real_init(self, path, names, **kw)

    monkeypatch.setattr(operators.Program, "run", spy_run)
    monkeypatch.setattr(TaskStore, "__init__", spy_init)
    test = TestRun(wordcount())
    test.send(["x y"])
    assert calls == [(None, "x y"), (operators.encode_key("x"), "x"),
                     (operators.encode_key("y"), "y")]
    assert [names for _, names in stores] == [("step0",)]   # only the stateful stage has one
    path = stores[0][0]
    assert (path / "CURRENT").is_file()                     # a real RocksDB directory
    test.close()
    assert not path.exists(), "close() removes the temporary store"
    with pytest.raises(ConfigError, match="closed"):
        test.send(["x"])


def test_values_cross_a_key_by_as_msgpack_and_edges_through_their_formats():
    p = Pipeline("shapes")
    (p.source("in", value="json").map(lambda v: (v["k"], v["n"]))
     .key_by(lambda pair: pair[0]).map(lambda pair: {"got": pair})
     .sink("out", key="utf8", value="json"))
    # a tuple becomes a list between stages, as on the wire
    assert run_steps(p, [{"k": "a", "n": 1}]) == [("a", {"got": ["a", 1]})]


def test_a_keyed_source_takes_key_value_pairs_and_its_sink_writes_the_key():
    p = Pipeline("keyed")
    p.source("in", key="utf8").map(count, stateful=True).sink("out", key="utf8")
    assert run_steps(p, [("k1", "v"), ("k2", "v"), ("k1", "v")]) == [
        ("k1", "1"), ("k2", "1"), ("k1", "2")]
    with pytest.raises(ConfigError, match=r"\(key, value\) pairs"):
        run_steps(p, ["v"])


def test_an_unkeyed_sink_writes_no_key():
    p = Pipeline("nokeysink")
    p.source("in").key_by(len).map(str.upper).sink("out")
    assert run_steps(p, ["ab"]) == [(None, "AB")]


# --------------------------------------------------------------------------- errors

def test_a_keyless_record_at_a_stateful_step_is_refused_as_at_run_time():
    p = Pipeline("nullkey")
    p.source("in", key="utf8").map(count, stateful=True).sink("out", key="utf8")
    with pytest.raises(UserFunctionError, match=r"map\(count\).*no key"):
        run_steps(p, [(None, "v")])


def test_a_function_that_raises_names_its_step_and_chains_the_cause():
    def parse(line):
        return int(line)

    p = Pipeline("raises")
    p.source("in").map(parse).map(str).sink("out")
    line = parse.__code__.co_firstlineno + 1
    with pytest.raises(UserFunctionError,
                       match=rf"step map\(parse\) at test_testing_helper.py:{line} raised "
                             rf"ValueError") as info:
        run_steps(p, ["1", "x"])
    assert isinstance(info.value.__cause__, ValueError)


def test_a_send_that_raises_changes_no_state():
    def maybe(word, state):
        n = count(word, state)
        if word == "boom":
            raise RuntimeError("boom")
        return n

    p = Pipeline("atomic")
    p.source("in").key_by(str).map(maybe, stateful=True).sink("out", key="utf8")
    with TestRun(p) as test:
        assert test.send(["a"]) == [("a", "1")]
        with pytest.raises(UserFunctionError):
            test.send(["a", "boom"])
        assert test.send(["a"]) == [("a", "2")], "the failed send's a was not kept"


def test_bad_keys_values_and_inputs_are_named():
    bad_key = Pipeline("badkey")
    bad_key.source("in").key_by(float).sink("out")
    with pytest.raises(UserFunctionError, match=r"key_by\(float\).*keys must be str, bytes or int"):
        run_steps(bad_key, ["1.5"])

    unpackable = Pipeline("unpackable")
    unpackable.source("in").map(lambda v: {v}).key_by(str).sink("out")
    with pytest.raises(UserFunctionError, match="msgpack"):
        run_steps(unpackable, ["a"])

    int_into_utf8 = Pipeline("intsink")
    int_into_utf8.source("in").map(len).sink("out")
    with pytest.raises(UserFunctionError, match=r"sink 'out'.*value format 'utf8'.*a str"):
        run_steps(int_into_utf8, ["abc"])

    with pytest.raises(ConfigError, match=r"source 'in'.*value format 'utf8'"):
        run_steps(int_into_utf8, [3])
    with pytest.raises(ConfigError, match="a list of records"):
        run_steps(int_into_utf8, "abc")


def test_an_unfinished_pipeline_is_refused():
    p = Pipeline("unfinished")
    with pytest.raises(ConfigError, match="has no source"):
        TestRun(p)
    p.source("in").map(str)
    with pytest.raises(ConfigError, match=r"has no sink: end it with \.sink"):
        TestRun(p)


def test_a_test_run_left_open_is_cleaned_up_when_collected():
    import gc

    test = TestRun(wordcount())
    test.send(["a"])
    where = Path(test.directory)
    assert where.is_dir()
    del test
    gc.collect()
    assert not where.exists()


def test_pytest_does_not_collect_it():
    assert TestRun.__test__ is False



def test_a_value_the_sink_cannot_write_names_the_step_that_made_it():
    """Issue 27 (small): the helper's bad-sink-value message named no step; a run's does."""
    p = Pipeline("lens")
    p.source("in").filter(bool).map(len).filter(lambda n: n > 0).sink("out")
    with pytest.raises(UserFunctionError) as info:
        run_steps(p, ["abc"])
    assert str(info.value).startswith(
        "sink 'out': the value 3 (returned by map(len)) does not fit the value format "
        "'utf8', which takes a str: make that step return one"), str(info.value)


def test_an_int_key_past_64_bits_is_the_records_error_naming_the_key_by():
    """msgpack raised a bare OverflowError, out of the testing helper and, in a task,
    with no key_by named."""
    from eos_runtime.errors import UserFunctionError

    p = Pipeline("big")
    p.source("in", value="json").key_by(_huge).map(str).sink("out")
    with TestRun(p) as test:
        with pytest.raises(UserFunctionError, match=r"key_by\(_huge\) returned a bad key: an "
                                                    r"int key must fit in 64 bits"):
            test.send([{"n": 1}])


def _huge(value):
    return 2**64


def test_a_dict_with_int_keys_crosses_a_key_by_and_lives_in_state():
    """msgpack writes int map keys, and its reader refused them by default: a step's
    {1: v} was refused at the next stage, a state set to one failed every later get of
    its key (each of that key's records then a dead letter, for good), and a msgpack
    source's record with one did not decode."""
    from eos_runtime.values import FORMATS

    def keep(v, state):
        seen = state.get("seen", {})
        seen[len(seen)] = v
        state.set("seen", seen)
        return seen

    p = Pipeline("intkeys")
    (p.source("in", value="msgpack").key_by(lambda v: "k").map(lambda v: {1: v})
     .key_by(lambda v: "k").map(keep, stateful=True).sink("out", value="json"))
    run = TestRun(p)
    try:
        # the json sink writes the int keys as JSON's strings
        assert run.send([{7: "a"}]) == [(None, {"0": {"1": {"7": "a"}}})]
        assert run.send([{8: "b"}]) == [(None, {"0": {"1": {"7": "a"}},
                                                "1": {"1": {"8": "b"}}})]
    finally:
        run.close()
    encode, decode = FORMATS["msgpack"]
    assert decode(encode({1: [2]})) == {1: [2]}


def test_a_json_sink_refuses_nan_and_infinity_which_are_not_json():
    """Python's json writes NaN and Infinity by default; a reader of the sink in any
    other language refuses them. They are now the record's error, naming the format."""
    p = Pipeline("nan")
    p.source("in", value="json").map(lambda v: float("nan") if v == 0 else float("inf")) \
        .sink("out", value="json")
    with TestRun(p) as run:
        for v in (0, 1):
            with pytest.raises(UserFunctionError, match=r"sink 'out'.*json.*not JSON compliant"):
                run.send([v])
    # and a task's sink writer, as a run writes
    from eos_runtime.api import Sink
    from eos_runtime.runtime.outputs import SinkWriter

    writer = SinkWriter(Sink("out", "utf8", "json"), 1)
    for value in (float("nan"), float("-inf")):
        with pytest.raises(UserFunctionError, match=r"sink 'out'.*NaN and infinities"):
            writer.write(b"\xa1k", [value], 0)
