"""A channel stage that is one built-in running aggregate into a sink (``.count()``,
``.sum(...)`` ... ``.sink(...)``, the wordcount's counting stage) runs its messages in a
loop of its own (``RecordPath._aggregate_messages``: no list per record, and no value
decoded for ``count()``). It must write what the general record loop writes, state and
sink records alike, and fail as it fails, naming the step, the sink's format and the
record.

The general loop is the same stage with dead letters on (a savepoint per record), which
the aggregate's own loop does not take."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from eos_runtime import Pipeline
from eos_runtime.errors import TaskFailed
from eos_runtime.plan import plan_job
from eos_runtime.protocol import wire
from eos_runtime.runtime.operators import encode_key
from eos_runtime.runtime.outputs import SinkWriter
from eos_runtime.runtime.records import RecordPath
from eos_runtime.runtime.stats import TaskStats
from eos_runtime.state import TaskStore
from eos_runtime.transport import TopicSpec, open_transport


def _word(w: str) -> str:
    return w


def _length(w: Any) -> int:
    return len(w)


def _stage_path(tmp_path, name: str, aggregate, *, dead_letters: bool,
                value: str = "json") -> tuple[RecordPath, SinkWriter, TaskStore]:
    t = open_transport(data_dir=str(tmp_path / f"data-{name}"))
    t.create_topics([TopicSpec(f"{name}.lines", 2)])
    p = Pipeline(name, dead_letters=dead_letters)
    aggregate(p.source(f"{name}.lines").key_by(_word)).sink(f"{name}.out", key="utf8",
                                                            value=value)
    plan = plan_job(p, t, sink_partitions=3)
    stage = plan.stages[1]
    store = TaskStore(tmp_path / f"state-{name}", stage.stores)
    sink = SinkWriter(stage.outputs[0].sink, 3)
    dead = SinkWriter(stage.outputs[0].sink, 1) if dead_letters else None
    path = RecordPath(name, 2, stage, [sink], dead, TaskStats(2), store=store, plan=plan)
    return path, sink, store


_WORDS = ["apple", "fig", "apple", "kiwi", "fig", "apple", "é", "apple"]


def _batch(words: list[Any]) -> tuple[tuple[bytes, ...], tuple[bytes, ...], tuple[int, ...]]:
    keys = tuple(encode_key(w) for w in words)
    values = tuple(msgpack.packb(w) for w in words)
    return keys, values, tuple(1000 + i for i in range(len(words)))


@pytest.mark.parametrize("aggregate", [
    lambda s: s.count(),
    lambda s: s.sum(_length),
    lambda s: s.reduce(max),
], ids=["count", "sum", "reduce"])
def test_the_aggregate_s_own_loop_writes_what_the_general_loop_writes(tmp_path, aggregate):
    fast, fast_sink, fast_store = _stage_path(tmp_path, "fast", aggregate, dead_letters=False)
    general, general_sink, general_store = _stage_path(tmp_path, "general", aggregate,
                                                       dead_letters=True)
    assert fast._messages == fast._aggregate_messages      # the loop under test is taken
    assert general._messages != general._aggregate_messages
    with fast_store, general_store:
        for path in (fast, general):
            path.data(_batch_envelope(_WORDS[:5]), "ch", 0, 7, 1)
            path.data(_batch_envelope(_WORDS[5:]), "ch", 1, 8, 1)
        assert fast_sink._pending == general_sink._pending
        assert fast_store.staged() == general_store.staged()
        assert (fast.stats.processed, fast.stats.emitted) == (len(_WORDS), len(_WORDS))
        assert (general.stats.processed, general.stats.emitted) == (len(_WORDS), len(_WORDS))
    apples = [v for _, k, v, _ in fast_sink._pending if k == b"apple"]
    assert apples == {"count": [b"1", b"2", b"3", b"4"], "sum": [b"5", b"10", b"15", b"20"],
                      "reduce": [b'"apple"'] * 4}[fast.stage.steps[0].name.split("(")[0]]


def _batch_envelope(words: list[Any]) -> wire.DataBatch:
    keys, values, stamps = _batch(words)
    return wire.DataBatch(0, 0, 1, 0, keys, values, stamps)


def test_a_failing_aggregate_stops_the_task_naming_the_step_and_the_record(tmp_path):
    path, sink, store = _stage_path(tmp_path, "bad-sum", lambda s: s.sum(_length),
                                    dead_letters=False)
    with store, pytest.raises(TaskFailed) as failed:
        path.data(_batch_envelope(["apple", 7, "fig"]), "ch", 0, 5, 1)
    text = str(failed.value)
    assert "step sum(_length)" in text and "raised TypeError" in text
    assert "key 7" in text and "value 7" in text
    assert "nothing past this record was committed" in text


def test_a_count_the_sink_cannot_write_names_the_sink_s_format(tmp_path):
    path, sink, store = _stage_path(tmp_path, "utf8-count", lambda s: s.count(),
                                    dead_letters=False, value="utf8")
    with store, pytest.raises(TaskFailed, match=r"value format utf8 cannot encode int 1 \(made by "
                                                 r"count\(\)\).*key 'apple'"):
        path.data(_batch_envelope(["apple"]), "ch", 0, 5, 1)
