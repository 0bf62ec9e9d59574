"""The pipeline API's rules, refused where the pipeline is written (issue 11, item 5;
issue 24): branches see every value, merges and what cannot follow them, a graph that
cannot run, a function's arity must fit how the step calls it, and a stateful step never
puts keyless records into one shared state."""

from __future__ import annotations

import functools

import pytest

from eos_runtime import Pipeline
from eos_runtime.api import Sink
from eos_runtime.errors import ConfigError, UserFunctionError
from eos_runtime.graph import stage_graph
from eos_runtime.testing import run_steps


def is_long(line):
    return len(line) > 3


def count(word, state):
    n = state.get("n", 0) + 1
    state.set("n", n)
    return str(n)


# --------------------------------------------------------------------------- graphs

def test_each_step_returns_a_new_stream_and_chains_as_before():
    p = Pipeline("chain")
    s0 = p.source("lines")
    s1 = s0.flat_map(str.split)
    s2 = s1.key_by(lambda w: w)
    s3 = s2.map(count, stateful=True)
    s3.sink("counts", key="utf8")
    assert len({id(s) for s in (s0, s1, s2, s3)}) == 4
    first, second = stage_graph(p)
    assert [st.name for st in first.steps] == ["split"] and first.is_chain
    assert first.outputs[0].shuffle is not None and first.outputs[0].to_stage == 1
    assert [st.name for st in second.steps] == ["count"]
    assert isinstance(second.outputs[0].sink, Sink)
    assert second.stores == ("step0",) and second.upstream == (0,)


def test_a_branch_sees_every_value():
    # Before issue 24 a second next step was refused; now each branch sees every value.
    p = Pipeline("branch")
    s = p.source("lines")
    s.filter(is_long).sink("long-lines")
    s.sink("all-lines")
    assert run_steps(p, ["a", "abcd"]) == {"long-lines": [(None, "abcd")],
                                            "all-lines": [(None, "a"), (None, "abcd")]}
    (stage,) = stage_graph(p)
    assert not stage.is_chain and len(stage.outputs) == 2


def test_a_branch_after_a_step_or_a_key_by_and_a_sink_that_is_not_the_end():
    p = Pipeline("branch2")
    s = p.source("lines").map(str.lower)
    s.map(str.upper).sink("upper")
    s.filter(is_long).key_by(lambda v: v[0]).map(count, stateful=True).sink("counts", key="utf8")
    s.sink("lower")
    out = run_steps(p, ["AbCd", "x"])
    assert out == {"upper": [(None, "ABCD"), (None, "X")], "counts": [("a", "1")],
                   "lower": [(None, "abcd"), (None, "x")]}


def test_a_sink_topic_written_twice_is_refused_naming_the_first():
    s = Pipeline("twice").source("lines")
    s.sink("out")
    with pytest.raises(ConfigError,
                       match=r"sink 'out'.*already writes it.*from source 'lines'.*merge"):
        s.map(str.upper).sink("out")


def test_a_stream_that_goes_nowhere_is_refused_naming_it():
    p = Pipeline("nowhere")
    s = p.source("lines")
    s.sink("out")
    s.map(str.upper)
    with pytest.raises(ConfigError, match=r"after \.map\(upper\) goes nowhere: end it with \.sink"):
        stage_graph(p)


def test_a_merge_in_one_stage_passes_both_streams_values_on():
    p = Pipeline("merge1")
    s = p.source("lines")
    s.filter(is_long).map(str.upper).merge(s.filter(lambda v: not is_long(v))).sink("out")
    assert run_steps(p, ["abcd", "x", "efgh"]) == [(None, "ABCD"), (None, "x"), (None, "EFGH")]


def test_a_merge_of_two_stages_runs_its_steps_in_each_and_meets_at_the_key_by():
    p = Pipeline("merge2")
    s = p.source("lines")
    left = s.key_by(lambda v: v[0]).map(str.upper)
    both = left.merge(s.map(str.lower))
    both.map(lambda v: v + "!").key_by(lambda v: v.lower()).map(count, stateful=True).sink(
        "counts", key="utf8")
    stages = stage_graph(p)
    assert len(stages) == 3
    # the steps after the merge run in both stages, which both write the last one's channels
    assert stages[2].upstream == (0, 1)
    assert [st.name for st in stages[0].steps] == ["lower", "<lambda>"]
    assert [st.name for st in stages[1].steps] == ["upper", "<lambda>"]
    assert run_steps(p, ["ab"]) == [("ab!", "1"), ("ab!", "2")]


def test_a_stateful_step_after_a_merge_of_two_stages_is_refused():
    p = Pipeline("merge3")
    s = p.source("lines", key="utf8")
    both = s.key_by(len).merge(s)
    with pytest.raises(ConfigError, match=r"stateful step 'count' follows a merge of streams of "
                                          r"different stages \(source 'lines', \.key_by\(len\)\)"):
        both.map(count, stateful=True)
    both.key_by(str).map(count, stateful=True).sink("ok", key="utf8")   # a key_by first


def test_merge_refuses_nothing_a_stream_twice_and_another_pipelines_stream():
    s = Pipeline("m").source("lines")
    with pytest.raises(ConfigError, match=r"give the streams to merge"):
        s.merge()
    with pytest.raises(ConfigError, match=r"given twice"):
        s.map(str).merge(s, s)
    other = Pipeline("other").source("lines")
    with pytest.raises(ConfigError, match=r"belongs to pipeline 'other'"):
        s.merge(other)
    with pytest.raises(ConfigError, match=r"expected streams"):
        s.merge("lines")


def test_a_merged_stream_is_keyed_only_if_every_input_is():
    s = Pipeline("k").source("lines")
    with pytest.raises(ConfigError, match=r"has no key"):
        s.merge(s.map(str)).map(count, stateful=True)
    keyed = s.key_by(len)
    keyed.map(str).merge(keyed.filter(is_long)).map(count, stateful=True)   # one stage, keyed


# --------------------------------------------------------------------------- arity

def test_a_stateful_function_without_a_state_parameter_is_refused_at_definition():
    s = Pipeline("arity").source("words", key="utf8")
    with pytest.raises(ConfigError, match=r"map\(<lambda>\).*\(value, state\)") as info:
        s.map(lambda word: word, stateful=True)
    assert "\n" not in str(info.value)

    def three(word, state, extra):
        return word

    with pytest.raises(ConfigError, match=r"flat_map\(three\).*are \(word, state, extra\)"):
        s.flat_map(three, stateful=True)


def test_a_stateless_function_of_value_and_state_is_told_to_say_stateful():
    s = Pipeline("arity2").source("words", key="utf8")
    with pytest.raises(ConfigError, match=r"map\(count\).*stateful=True"):
        s.map(count)
    with pytest.raises(ConfigError, match=r"filter\(<lambda>\).*one parameter"):
        s.filter(lambda: True)
    with pytest.raises(ConfigError, match=r"key_by\(<lambda>\).*\(value\)"):
        s.key_by(lambda word, other: word)


def test_functions_that_can_be_called_that_way_are_accepted():
    s = Pipeline("arity3").source("words", key="utf8")

    def anything(*args):
        return args[0]

    def default_state(value, state=None):
        return value

    class Counter:
        def __call__(self, value, state):
            return value

    s = (s.map(anything).map(anything, stateful=True)
         .map(default_state).map(default_state, stateful=True)
         .map(Counter(), stateful=True)
         .map(functools.partial(lambda prefix, v: prefix + v, "x"))
         .map(str).map(int).flat_map(str.split).filter(len)   # builtins, signature or not
         .map(functools.partial(three_with_flag, flag=True), stateful=True))
    s.key_by(str).sink("out")


def three_with_flag(value, state, flag=False):
    return value


# --------------------------------------------------------------------------- keyless records

def test_the_no_key_hint_says_a_key_format_is_only_for_records_that_have_keys():
    with pytest.raises(ConfigError, match="has no key") as info:
        Pipeline("nokey").source("x").map(count, stateful=True)
    assert "key_by" in str(info.value) and "carry keys" in str(info.value)


def test_a_stateful_step_refuses_a_record_without_a_key(tmp_path):
    # The runtime's own chain over a real task store: a keyed source whose record has a
    # null key used to share state b"" with every other keyless record.
    from eos_runtime.runtime.operators import Chain, encode_key
    from eos_runtime.state import TaskStore

    p = Pipeline("nullkey")
    p.source("events", key="utf8").map(count, stateful=True).sink("out", key="utf8")
    steps = stage_graph(p)[0].steps
    with TaskStore(tmp_path / "task", ["step0"]) as store:
        chain = Chain(steps, store)
        assert chain.run(encode_key("ann"), "e") == ["1"]
        assert chain.run(encode_key("ann"), "e") == ["2"]
        with pytest.raises(UserFunctionError, match=r"map\(count\).*no key") as info:
            chain.run(None, "e")
        assert "key_by" in str(info.value)
        assert chain.run(encode_key(""), "e") == ["1"], "an empty key is a key"


def test_eos_run_stops_on_a_keyless_record_at_a_stateful_step_naming_it(tmp_path):
    # Where a user meets it: `eos produce` writes records without keys, the pipeline's
    # source says key="utf8" (as the old "has no key" hint suggested). Before, the run
    # succeeded and both records shared one count ("1", "2").
    import os
    import subprocess
    import sys

    (tmp_path / "events.txt").write_text("a\nb\n")
    (tmp_path / "keyed.py").write_text(
        "from eos_runtime import Pipeline\n"
        "pipeline = Pipeline('keyed')\n"
        "def count(v, state):\n"
        "    n = state.get('n', 0) + 1\n"
        "    state.set('n', n)\n"
        "    return str(n)\n"
        "pipeline.source('events', key='utf8').map(count, stateful=True)"
        ".sink('out', key='utf8')\n")
    env = {k: v for k, v in os.environ.items() if k != "EOS_BOOTSTRAP_SERVERS"}

    def eos(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", "from eos_runtime.cli import run; run()",
                               *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=180)

    assert eos("produce", "events", "--lines-from", "events.txt",
               "--partitions", "1").returncode == 0
    p = eos("run", "keyed.py", "--max-attempts", "1")
    assert p.returncode == 1, (p.stdout, p.stderr)
    errors = [line for line in p.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, p.stderr
    assert "topic='events' partition=0 offset=0" in errors[0]
    assert "map(count)" in errors[0] and "has no key" in errors[0]
