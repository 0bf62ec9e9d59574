"""A source stage that feeds the next stage's channels (a chain, then ``key_by``) takes a
poll batch at a time (``RecordPath.source_records``): it gathers the batch's output, a
record's all or nothing, and hands it to the channels in one call. It must send what the
record-at-a-time path sends, message for message, and set aside or stop on the same
records with the same errors."""

from __future__ import annotations

from typing import Any

import pytest

from eos_runtime import Pipeline
from eos_runtime.api import Sink
from eos_runtime.errors import TaskFailed
from eos_runtime.plan import plan_job
from eos_runtime.runtime.outputs import ChannelWriter, SinkWriter
from eos_runtime.runtime.records import RecordPath
from eos_runtime.runtime.stats import TaskStats
from eos_runtime.transport import Record, TopicSpec, open_transport


class Captured:
    def __init__(self) -> None:
        self.records: list[tuple[str, int, bytes | None]] = []

    def produce(self, topic: str, partition: int, value: bytes | None,
                key: bytes | None = None, timestamp: int | None = None) -> None:
        self.records.append((topic, partition, value))


def _words(line: str) -> list[str]:
    if line == "boom":
        raise ValueError("a line that breaks the split")
    return line.split()


def _key(word: str) -> Any:
    if word == "listed":
        return [word]            # not a key: keys are str, bytes or int
    return word if word != "seven" else 7


def _path(tmp_path, name: str, dead_letters: bool) -> tuple[RecordPath, Captured,
                                                             SinkWriter | None]:
    t = open_transport(data_dir=str(tmp_path / f"data-{name}"))
    t.create_topics([TopicSpec(f"{name}.lines", 2)])
    p = Pipeline(name, dead_letters=dead_letters)
    p.source(f"{name}.lines", value="utf8").flat_map(_words).key_by(_key).sink(
        f"{name}.out", key="json", value="json")
    plan = plan_job(p, t)
    stage = plan.stages[0]
    captured = Captured()
    channels = ChannelWriter(captured, stage.outputs[0].topic, 3, producer_id=0)  # type: ignore[arg-type]
    dead = SinkWriter(Sink(f"{name}.dead-letters", None, "json"), 1) if dead_letters else None
    path = RecordPath(name, 0, stage, [channels], dead, TaskStats(0), plan=plan)
    return path, captured, dead


_LINES: list[bytes | None] = [b"a b c", b"", b"boom", b"seven a", b"listed b", None,
                              "é ö".encode(), b"\xff", b"d e f g"]


def _records(name: str) -> list[Record]:
    return [Record(f"{name}.lines", i % 2, 100 + i, None, v, 1_000 + i)
            for i, v in enumerate(_LINES)]


def test_a_poll_batch_sends_what_one_record_at_a_time_sends(tmp_path):
    batched, got, batched_dead = _path(tmp_path, "batched", dead_letters=True)
    single, expected, single_dead = _path(tmp_path, "single", dead_letters=True)
    assert batched.source_records == batched._source_batch   # the path under test is taken
    batched.source_records(_records("batched"), 3)
    for r in _records("single"):
        single.source_record(r, 3)
    for path in (batched, single):
        assert path.channels is not None
        path.channels.send_pending()
    assert [(p, v) for _, p, v in got.records] == [(p, v) for _, p, v in expected.records]
    assert got.records, "the lines that split made output"
    assert batched.stats.emitted == single.stats.emitted == 11
    # the same records were set aside, with the same errors
    assert batched_dead is not None and single_dead is not None
    letters = [v.replace(b"batched", b"single") for _, _, v, _ in batched_dead._pending]
    assert letters == [v for _, _, v, _ in single_dead._pending]
    assert len(letters) == 4     # boom, listed, the null value, the bytes that are not UTF-8


def test_without_dead_letters_the_batch_stops_at_the_first_bad_record(tmp_path):
    batched, got, _ = _path(tmp_path, "stops", dead_letters=False)
    with pytest.raises(TaskFailed, match=r"offset=102.*a line that breaks the split"):
        batched.source_records(_records("stops"), 3)
