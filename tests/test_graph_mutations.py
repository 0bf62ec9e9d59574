"""Mutations of the graph rules (issue 24): each change to one line of ``graph.py`` (the
source edited in memory and loaded as a copy; nothing on disk changes) must make the
structure check below fail. The check is independent of the rules' code: for three
pipelines it states what each stage reads, runs, writes and who produces into it, as
docs/protocol.md (Graphs) says. A wrong upstream set is a hang or a loss at run time
(a producer never waited for, or a stage waiting for one that never writes), a wrong
output a lost branch, a lookup taken for a chain a lookup skipped."""

from __future__ import annotations

import inspect
import sys
import types

import pytest

from eos_runtime import Pipeline, graph
from eos_runtime.errors import ConfigError


def _count(v, state):
    n = state.get("n", 0) + 1
    state.set("n", n)
    return n


def merge_of_two_stages() -> Pipeline:
    p = Pipeline("m")
    s = p.source("in")
    s.filter(bool).sink("kept")
    keyed = s.key_by(str)
    keyed.filter(bool).map(_count, stateful=True).sink("counts", key="utf8")
    s.map(str).merge(keyed.map(str)).key_by(len).map(_count, stateful=True).sink(
        "lengths", key="utf8")
    return p


def lookup() -> Pipeline:
    p = Pipeline("l")
    users = p.table("users")
    p.source("clicks").lookup(users, on=str, how="left").sink("seen")
    return p


def check(stage_graph) -> None:
    m = stage_graph(merge_of_two_stages())
    assert [st.upstream for st in m] == [(), (0,), (0, 1)]
    assert [[(o.to_stage, o.sink.topic if o.sink else None) for o in st.outputs]
            for st in m] == [[(1, None), (None, "kept"), (2, None)],
                             [(None, "counts"), (2, None)], [(None, "lengths")]]
    # a chain's store names are what they were before graphs: step<i>, i among all steps
    assert [st.stores for st in m] == [(), ("step1",), ("step0",)]
    assert m[0].is_chain is False and m[2].is_chain is True
    users, clicks, looked = stage_graph(lookup())
    assert users.source is not None and users.source.table
    assert [(o.to_stage, o.shuffle.key_fn) for o in users.outputs] == [(2, None)]
    assert looked.upstream == (0, 1) and [(f.stage, f.store) for f in looked.tables] == [
        (0, "table0")]
    assert looked.stores == ("table0",) and not looked.is_chain
    assert [op.lookup is not None for op in looked.program] == [False, True]


# (name, original text, mutated text)
MUTATIONS = [
    ("a merge's key_by keeps only its first upstream stage",
     '                if nxt.kind == "key_by" and i not in upstream[stage_of[nxt.id]]:',
     '                if nxt.kind == "key_by" and not upstream[stage_of[nxt.id]]:'),
    ("a lookup stage waits for no table producer",
     "                if t not in upstream[i]:\n                    upstream[i].append(t)",
     "                pass"),
    ("a table feeds no stage",
     "                       for s in range(len(roots)) if i in feeds[s]]",
     "                       for s in range(len(roots)) if False]"),
    ("a stage stops at a merge",
     '            if nxt.kind in ("step", "merge", "lookup", "window") and nxt.id not in seen:',
     '            if nxt.kind in ("step", "lookup", "window") and nxt.id not in seen:'),
    ("a stage stops at a lookup",
     '            if nxt.kind in ("step", "merge", "lookup", "window") and nxt.id not in seen:',
     '            if nxt.kind in ("step", "merge", "window") and nxt.id not in seen:'),
    ("a lookup taken for a chain (the fast path would skip it)",
     "        and op.lookup is None and not has_timers(op) for i, op in enumerate(program))",
     "        and not has_timers(op) for i, op in enumerate(program))"),
    ("a branch's second output dropped",
     '            outs += [x for x in n.nexts if x.kind in ("key_by", "sink") and x not in outs]',
     '            outs += [x for x in n.nexts[:1] if x.kind in ("key_by", "sink") '
     'and x not in outs]'),
    ("stores named by their position among stateful steps only",
     "                steps += 1\n",
     "                steps += 1 if step.stateful else 0\n"),
]


def _mutated(old: str, new: str) -> types.ModuleType:
    source = inspect.getsource(graph)
    assert source.count(old) == 1, f"the rule's text is not in graph.py once: {old!r}"
    copy = types.ModuleType("graph_mutant")
    copy.__dict__["__package__"] = "eos_runtime"   # its relative imports
    sys.modules["graph_mutant"] = copy              # where dataclasses look it up
    try:
        exec(compile(source.replace(old, new), "graph_mutant.py", "exec"), copy.__dict__)
    finally:
        del sys.modules["graph_mutant"]
    return copy


def test_the_unmutated_rules_pass_the_check():
    check(graph.stage_graph)


@pytest.mark.parametrize("name,old,new", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_the_check_catches(name, old, new):
    mutant = _mutated(old, new)
    try:
        check(mutant.stage_graph)
    except (AssertionError, KeyError, IndexError, ConfigError):
        return
    pytest.fail(f"the mutation {name!r} went unnoticed")
