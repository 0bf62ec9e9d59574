"""Experiments: workloads and their oracles, the verifier, fault schedules, `eos experiment`."""

from __future__ import annotations

from pathlib import Path

import pytest

from eos_runtime.errors import ConfigError
from eos_runtime.experiments.verify import compare
from eos_runtime.experiments.workloads import (
    BUILTIN,
    Expected,
    load_workload,
    pageviews_expected,
    wordcount_expected,
)
from eos_runtime.plan import describe_plan, plan_job
from eos_runtime.runner import load_pipeline
from eos_runtime.transport import Record, TopicSpec, open_transport

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def rec(key: str, value: str, offset: int, partition: int = 0) -> Record:
    return Record("out", partition, offset, key.encode(), value.encode(), 0)


def check(expected: Expected, pairs, guarantee="exactly-once"):
    records = [rec(k, v, i) for i, (k, v) in enumerate(pairs)]
    return compare(expected, records, guarantee, key_decode=bytes.decode,
                   value_decode=bytes.decode)


# --------------------------------------------------------------------------- workloads

@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_builtin_workloads_plan_like_the_examples(name, tmp_path):
    """The package ships the examples' pipelines: the same stages, steps and topics."""
    workload = BUILTIN[name]
    with open_transport(data_dir=str(tmp_path)) as t:
        ours, theirs = workload.make_pipeline(), load_pipeline(EXAMPLES / f"{name}.py")
        t.create_topics([TopicSpec(ours.source_topic, 2)])
        assert ours.name == theirs.name
        assert describe_plan(plan_job(ours, t)) == describe_plan(plan_job(theirs, t))


def test_generators_are_seeded():
    wc = BUILTIN["wordcount"]
    assert wc.generate(3, 50) == wc.generate(3, 50) != wc.generate(4, 50)
    assert wc.generate(3, 20) == wc.generate(3, 50)[:20]


def test_wordcount_oracle_counts_from_the_input_alone():
    expected = wordcount_expected(["a b a", "b"])
    assert expected.results == {"a": ["1", "2"], "b": ["1", "2"]}


# --------------------------------------------------------------------------- the verifier

def test_exact_output_passes():
    v = check(wordcount_expected(["a b a"]), [("a", "1"), ("b", "1"), ("a", "2")])
    assert v.passed and v.counts() == {"lost": 0, "duplicated": 0, "unexpected": 0,
                                       "out_of_order": 0}


def test_each_kind_of_wrong_result_is_counted():
    expected = wordcount_expected(["a a a b"])
    v = check(expected, [("a", "1"), ("a", "3"), ("a", "2"), ("a", "3"), ("b", "7"),
                         ("z", "1")])
    assert not v.passed
    assert (v.lost, v.duplicated, v.out_of_order) == (1, 1, 1)   # b's "1"; a's "3"; a's "2"
    assert v.unexpected == 2 and v.unexpected_keys == 1         # b's "7", z
    assert "1 lost" in v.reasons() and "1 duplicated" in v.reasons()


def test_at_least_once_passes_with_duplicates_and_fails_on_a_loss():
    expected = wordcount_expected(["a a"])
    v = check(expected, [("a", "1"), ("a", "2"), ("a", "2"), ("a", "3")], "at-least-once")
    assert v.passed and v.duplicated == 1 and v.unexpected == 1
    assert not check(expected, [("a", "2")], "at-least-once").passed


def test_pageviews_checks_every_visitor_count():
    views = [{"user": "u1", "page": "/p"}, {"user": "u2", "page": "/p"},
             {"user": "u1", "page": "/p"}]
    expected = pageviews_expected(views)
    assert check(expected, [("/p", "1:1"), ("/p", "2:2"), ("/p", "3:2")]).passed
    assert check(expected, [("/p", "1:1"), ("/p", "2:1"), ("/p", "3:2")]).passed
    bad = check(expected, [("/p", "1:1"), ("/p", "2:1"), ("/p", "3:1")])
    # 3 views by 1 visitor: u1 made one repeat view, not two; and 2 visitors, not 1, at the end
    assert not bad.passed and bad.unexpected == 2


# --------------------------------------------------------------------------- user workloads

USER_FILE = '''"""Even numbers, counted per parity."""
import random
from eos_runtime import Pipeline

pipeline = Pipeline("parity", parallelism=1)

def count(n, state):
    c = state.get("c", 0) + 1
    state.set("c", c)
    return str(c)

(pipeline.source("numbers", value="json")
    .key_by(lambda n: "even" if n % 2 == 0 else "odd")
    .map(count, stateful=True)
    .sink("parity-counts", key="utf8", value="utf8"))

def generate(seed, n):
    rng = random.Random(seed)
    return [rng.randint(0, 100) for _ in range(n)]

def oracle(records):
    out = {}
    for n in records:
        key = "even" if n % 2 == 0 else "odd"
        out.setdefault(key, []).append(str(len(out.get(key, [])) + 1))
    return out
'''


def test_a_user_pipeline_file_is_a_workload(tmp_path):
    path = tmp_path / "parity.py"
    path.write_text(USER_FILE)
    w = load_workload(str(path))
    assert w.name == "parity" and w.description == "Even numbers, counted per parity."
    records = w.generate(1, 10)
    assert records == w.generate(1, 10)
    expected = w.oracle(records)
    assert sum(len(v) for v in expected.results.values()) == 10


def test_unknown_workloads_and_incomplete_files_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="unknown workload 'wordcont'.*pageviews, wordcount"):
        load_workload("wordcont")
    path = tmp_path / "half.py"
    path.write_text(USER_FILE.split("def generate")[0])
    with pytest.raises(ConfigError, match=r"does not define generate\(seed, n\) and oracle"):
        load_workload(str(path))
