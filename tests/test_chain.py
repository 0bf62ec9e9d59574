"""A stage's chain of steps, and the keyed state its stateful steps see.

A chain of one step runs through a function of its own (``operators._one_step``), not
the loop over steps; both must give the same outputs, state and errors for every kind
of step. ``State`` reaches the store through ``TaskStore.accessors``, which skip the
checks of ``get``/``put``/``delete`` but must stage exactly as they do."""

from __future__ import annotations

import pytest

from eos_runtime.api import State, Step
from eos_runtime.errors import UserFunctionError
from eos_runtime.protocol.wire import CheckpointData
from eos_runtime.runtime import operators
from eos_runtime.runtime.operators import Chain, encode_key
from eos_runtime.state import TaskStore


def _count(value, state):
    n = state.get("n", 0) + 1
    state.set("n", n)
    return f"{value}:{n}"


def _words_seen(value, state):
    seen = state.get("seen", [])
    state.set("seen", seen + [value])
    return [value] * len(seen)


def _every_other(value, state):
    n = state.get("n", 0) + 1
    state.set("n", n)
    return n % 2 == 0


STEPS = {
    ("map", False): Step("map", lambda v: v * 2, name="double"),
    ("flat_map", False): Step("flat_map", lambda v: [v] * (len(v) % 3), name="copies"),
    ("filter", False): Step("filter", lambda v: len(v) % 2 == 1, name="odd"),
    ("map", True): Step("map", _count, stateful=True, name="count"),
    ("flat_map", True): Step("flat_map", _words_seen, stateful=True, name="seen"),
    ("filter", True): Step("filter", _every_other, stateful=True, name="every_other"),
}

IDENTITY = Step("map", lambda v: v, name="same")
INPUT = [("k1", "a"), ("k2", "bb"), ("k1", "ccc"), ("k1", "dd"), ("k2", "e"), ("k3", "fff")]


def _run(tmp_path, steps, name):
    stores = tuple(f"step{i}" for i, s in enumerate(steps) if s.stateful)
    with TaskStore(tmp_path / name, stores) as store:
        chain = Chain(steps, store)
        outs = [chain.run(encode_key(k), v) for k, v in INPUT]
        return outs, [(s, k, v) for s, k, v in store.staged()]


@pytest.mark.parametrize("kind,stateful", sorted(STEPS))
def test_a_chain_of_one_step_does_what_the_loop_over_steps_does(tmp_path, kind, stateful):
    step = STEPS[(kind, stateful)]
    one = _run(tmp_path, (step,), "one")
    # An identity step after it makes the chain go through the loop over steps.
    loop = _run(tmp_path, (step, IDENTITY), "loop")
    with TaskStore(tmp_path / "x", ("step0",)) as store:
        assert "run" in vars(Chain((step,), store))   # the one-step function is in use
    assert one == loop
    assert any(one[0]), "the step must let something through, or the test proves little"


@pytest.mark.parametrize("kind,stateful", sorted(STEPS))
def test_a_raising_step_is_named_alike_with_one_step_or_many(tmp_path, kind, stateful):
    def boom(*args):
        raise ValueError("no")
    step = Step(kind, boom, stateful=stateful, name="boom")
    said = []
    for steps in ((step,), (step, IDENTITY)):
        with TaskStore(tmp_path / f"s{len(steps)}", ("step0",)) as store:
            with pytest.raises(UserFunctionError) as info:
                Chain(steps, store).run(encode_key("k"), "v")
            said.append(str(info.value))
            assert isinstance(info.value.__cause__, ValueError)
    # where the function raised, in its file (issue 27 item 7)
    line = boom.__code__.co_firstlineno + 1
    assert said[0] == said[1] == f"step {kind}(boom) at test_chain.py:{line} raised ValueError: no"


def test_a_flat_map_that_returns_no_iterable_is_the_steps_error(tmp_path):
    step = Step("flat_map", lambda v: 7, name="seven")
    # the lambda returned; the step's iteration raised: the lambda's own line is named
    with pytest.raises(UserFunctionError,
                       match=r"step flat_map\(seven\) at test_chain.py:\d+ raised TypeError"):
        Chain((step,), None).run(None, "v")


def test_state_through_the_accessors_stages_as_put_and_delete_do(tmp_path):
    with TaskStore(tmp_path / "a", ("s",)) as fast, TaskStore(tmp_path / "b", ("s",)) as slow:
        state = State(*fast.accessors("s"))
        state._prefix = encode_key("k")
        key = state._prefix + b"x"
        assert state.get("x") is None and state.get("x", 5) == 5
        state.set("x", 1)
        slow.put("s", key, fast.get("s", key))
        state.set("y", [1, "two"])
        slow.put("s", state._prefix + b"y", fast.get("s", state._prefix + b"y"))
        state.set("x", 2)                       # last write wins, first touch keeps its place
        slow.put("s", key, fast.get("s", key))
        assert state.get("x") == 2              # read your writes
        state.delete("y")
        slow.delete("s", state._prefix + b"y")
        assert state.get("y") is None
        assert fast.staged() == slow.staged() == [("s", key, fast.get("s", key)),
                                                   ("s", state._prefix + b"y", None)]
        fast.commit(CheckpointData(0, 1, 1))
        assert state.get("x") == 2              # now from RocksDB
        state.set("x", 3)
        fast.discard()                          # a rewind drops the staged dict whole
        assert state.get("x") == 2 and fast.staged() == []
        state.set("x", 4)                       # and staging goes on in the new one
        assert fast.staged() == [("s", key, fast.get("s", key))] and state.get("x") == 4


def test_a_keyless_record_has_no_state_with_one_step_or_many(tmp_path):
    step = STEPS[("map", True)]
    for steps in ((step,), (step, IDENTITY)):
        with TaskStore(tmp_path / f"s{len(steps)}", ("step0",)) as store:
            with pytest.raises(UserFunctionError, match="this record has no key"):
                Chain(steps, store).run(None, "v")


def test_every_state_call_of_a_keyless_record_raises_and_nothing_is_staged(tmp_path):
    from eos_runtime.values import State
    with TaskStore(tmp_path / "s", ("step0",)) as store:
        state = State(*store.accessors("step0"))
        for call in (lambda: state.get("n"), lambda: state.set("n", 1),
                     lambda: state.delete("n")):
            with pytest.raises(UserFunctionError, match="this record has no key"):
                call()
        assert store.staged() == []
        state._prefix = encode_key("k")
        state.set("n", [1, "a"])
        assert state.get("n") == [1, "a"] and state.get("m", 5) == 5
        assert store.staged() == [("step0", encode_key("k") + b"n", store.get(
            "step0", encode_key("k") + b"n"))]


def test_encode_key_takes_str_bytes_and_int_and_names_anything_else():
    import msgpack
    for key in ("w", "", "é", b"b", 7, -1, 2**40):
        assert encode_key(key) == msgpack.packb(key, use_bin_type=True)
    for bad in (True, 1.5, None, ("t",), ["l"]):
        with pytest.raises(UserFunctionError, match="keys must be str, bytes or int"):
            encode_key(bad)
    assert operators.decode_key(encode_key("w")) == "w"
