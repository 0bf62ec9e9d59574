"""The pipeline API's rules, refused where the pipeline is written (issue 11, item 5):
a stream takes one next step (no silent branches), a function's arity must fit how the
step calls it, and a stateful step never puts keyless records into one shared state."""

from __future__ import annotations

import functools

import pytest

from eos_runtime import Pipeline
from eos_runtime.api import Shuffle, Sink
from eos_runtime.errors import ConfigError, UserFunctionError


def is_long(line):
    return len(line) > 3


def count(word, state):
    n = state.get("n", 0) + 1
    state.set("n", n)
    return str(n)


# --------------------------------------------------------------------------- one next step

def test_each_step_returns_a_new_stream_and_chains_as_before():
    p = Pipeline("chain")
    s0 = p.source("lines")
    s1 = s0.flat_map(str.split)
    s2 = s1.key_by(lambda w: w)
    s3 = s2.map(count, stateful=True)
    s3.sink("counts", key="utf8")
    assert len({id(s) for s in (s0, s1, s2, s3)}) == 4
    first, second = p.segments
    assert [st.name for st in first.steps] == ["split"] and isinstance(first.end, Shuffle)
    assert [st.name for st in second.steps] == ["count"] and isinstance(second.end, Sink)


def test_a_branch_is_refused_naming_the_step_that_continues_the_stream():
    # Before: s.filter(...) appended to s itself, so s.sink(...) silently wrote the
    # filtered stream.
    p = Pipeline("branch")
    s = p.source("lines")
    s.filter(is_long)
    with pytest.raises(ConfigError, match=r"already continues with \.filter\(is_long\)") as info:
        s.sink("all-lines")
    msg = str(info.value)
    assert "\n" not in msg and "branch" in msg and "source 'lines'" in msg


def test_a_branch_after_a_step_or_a_key_by_is_refused_too():
    p = Pipeline("branch2")
    s = p.source("lines").map(str.lower)
    s.map(str.upper)
    with pytest.raises(ConfigError, match=r"after \.map\(lower\).*\.map\(upper\)"):
        s.filter(is_long)
    t = Pipeline("branch3").source("lines")
    t.key_by(len)
    with pytest.raises(ConfigError, match=r"already continues with \.key_by\(len\)"):
        t.map(str.upper)
    with pytest.raises(ConfigError, match=r"already continues with \.key_by\(len\)"):
        t.key_by(len)


def test_a_stream_that_ends_in_a_sink_takes_no_more_steps():
    s = Pipeline("ended").source("lines")
    s.sink("out")
    for more in (lambda: s.map(str), lambda: s.key_by(str), lambda: s.sink("again")):
        with pytest.raises(ConfigError, match=r"already ends in \.sink\('out'\)"):
            more()


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
    steps = tuple(p.segments[0].steps)
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
