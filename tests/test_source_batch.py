"""A stage that feeds the next stage's channels (a chain, then ``key_by``) takes a batch at
a time: a source stage its poll batch (``RecordPath.source_records``), a channel stage a
data batch's messages (``_channel_batch``). It gathers the batch's output, a record's all
or nothing, and hands it to the channels in one call. It must send what the
record-at-a-time path sends, message for message, and set aside or stop on the same
records with the same errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from eos_runtime import Pipeline
from eos_runtime.api import Sink
from eos_runtime.errors import TaskFailed
from eos_runtime.plan import plan_job
from eos_runtime.protocol import wire
from eos_runtime.runtime.operators import encode_key
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


def _shout(word: Any) -> str:
    if word == "boom":
        raise ValueError("a word that breaks the map")
    return word.upper() if isinstance(word, str) else word


def _path(tmp_path, name: str, dead_letters: bool, *, channel_stage: bool = False,
          value: str = "utf8") -> tuple[RecordPath, Captured, SinkWriter | None]:
    """The source stage's record path (``channel_stage``: the stage after it, a ``map``
    between two ``key_by``s), writing into captured channels."""
    t = open_transport(data_dir=str(tmp_path / f"data-{name}"))
    t.create_topics([TopicSpec(f"{name}.lines", 2)])
    p = Pipeline(name, dead_letters=dead_letters)
    source = p.source(f"{name}.lines", value=value)
    words = _words if value == "utf8" else (lambda b: b.decode().split())
    stream = (source.key_by(_key).map(_shout).key_by(_key) if channel_stage
              else source.flat_map(words).key_by(_key))
    stream.sink(f"{name}.out", key="json", value="json")
    plan = plan_job(p, t)
    stage = plan.stages[1 if channel_stage else 0]
    captured = Captured()
    channels = ChannelWriter(captured, stage.outputs[0].topic, 3,  # type: ignore[arg-type]
                             producer_id=int(channel_stage))
    dead = SinkWriter(Sink(f"{name}.dead-letters", None, "json"), 1) if dead_letters else None
    path = RecordPath(name, 2 if channel_stage else 0, stage, [channels], dead,
                      TaskStats(2 if channel_stage else 0), plan=plan)
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


_WORDS: list[Any] = ["a", "b", "boom", 7, "listed", ["x"], "é", "c"]


def _batch() -> wire.DataBatch:
    import msgpack
    keys = tuple(encode_key(w if isinstance(w, (str, int)) else "k") for w in _WORDS)
    return wire.DataBatch(0, 0, 1, 0, keys, tuple(msgpack.packb(w) for w in _WORDS),
                          tuple(2_000 + i for i in range(len(_WORDS))))


def test_a_channel_stage_s_batch_sends_what_one_message_at_a_time_sends(tmp_path):
    batched, got, batched_dead = _path(tmp_path, "batched", dead_letters=True, channel_stage=True)
    single, expected, single_dead = _path(tmp_path, "single", dead_letters=True, channel_stage=True)
    assert batched._messages == batched._channel_batch     # the path under test is taken
    batched.data(_batch(), "ch", 0, 40, 3)
    RecordPath._messages(single, *_fields(_batch()), "ch", 0, 40, 3)   # message by message
    for path in (batched, single):
        assert path.channels is not None
        path.channels.send_pending()
    assert [(p, v) for _, p, v in got.records] == [(p, v) for _, p, v in expected.records]
    assert got.records
    assert batched.stats.emitted == single.stats.emitted == 6
    assert batched.stats.processed == single.stats.processed == len(_WORDS)
    assert batched_dead is not None and single_dead is not None
    letters = [v.replace(b"batched", b"single") for _, _, v, _ in batched_dead._pending]
    assert letters == [v for _, _, v, _ in single_dead._pending]
    assert len(letters) == 2     # the map that raises, the key that is a list


def _fields(b: wire.DataBatch) -> tuple[Any, Any, Any]:
    return b.keys, b.values, b.timestamps


@pytest.mark.parametrize("value", ["bytes", "utf8", "json", "msgpack"])
def test_a_null_value_is_the_records_error_in_every_format(tmp_path, value):
    """A bytes source handed a null value on to the functions as None; the others failed
    in their decoder with a bare TypeError or AttributeError."""
    records = [Record("n.lines", 0, 5, None, None, 1_000)]
    for path, where in ((_path(tmp_path, "n", dead_letters=False, value=value)[0], "batch"),
                        (_path(tmp_path, "m", dead_letters=False, value=value)[0], "one")):
        with pytest.raises(TaskFailed, match=r"offset=5.*value is null \(a tombstone\)"):
            if where == "batch":
                path.source_records(records, 3)
            else:
                path.source_record(records[0], 3)
    path, _, dead = _path(tmp_path, "d", dead_letters=True, value=value)
    path.source_records(records, 3)
    assert dead is not None and len(dead._pending) == 1
    assert b"value is null" in dead._pending[0][2]


def _ts(view):
    return view["ts"]


@pytest.mark.parametrize("batched", [True, False])
def test_an_event_time_the_sinks_would_refuse_is_that_records_error(tmp_path, batched):
    """Kafka 4 refuses a record timestamped over an hour ahead of its clock, and a sink
    record carries its event time: one such record (a time in microseconds, a clock in
    2099) failed every commit, dead letters or not, with an error naming a sink
    partition. It is now the record's own error, a dead letter, and says what it is."""
    import json
    import time

    t = open_transport(data_dir=str(tmp_path / "data"))
    t.create_topics([TopicSpec("v.views", 1)])
    p = Pipeline("v", dead_letters=True)
    (p.source("v.views", value="json", timestamp=_ts).key_by(lambda v: v["page"])
     .sink("v.out", value="json"))
    plan = plan_job(p, t)
    stage = plan.stages[0]
    channels = ChannelWriter(Captured(), stage.outputs[0].topic, 1,  # type: ignore[arg-type]
                             producer_id=0)
    dead = SinkWriter(Sink("v.dead-letters", None, "json"), 1)
    path = RecordPath("v", 0, stage, [channels], dead, TaskStats(0), plan=plan,
                      timestamps_ahead_ms=3_600_000)
    now = round(time.time() * 1000)
    # the last: inside the bound, but not by the minute a broker's clock may lag
    times = [now, now + 7_200_000, now * 1000, now + 60_000, now + 3_600_000 - 30_000]
    records = [Record("v.views", 0, i, None, json.dumps({"page": "/", "ts": ts}).encode(), 0)
               for i, ts in enumerate(times)]
    if batched:
        path.source_records(records, 3)
    else:
        for r in records:
            path.source_record(r, 3)
    letters = [json.loads(v) for _, _, v, _ in dead._pending]
    assert [letter["offset"] for letter in letters] == [1, 2, 4]
    assert "2.0 h ahead of this clock" in letters[0]["error"]
    assert "microseconds or nanoseconds" in letters[1]["error"]
    assert path.stats.emitted == 2


def test_a_record_its_format_cannot_decode_names_the_format_not_a_function(tmp_path):
    """A non-UTF-8 line read as utf8 stopped the task with a bare UnicodeDecodeError and
    "fix the function", though no function had seen it."""
    path, _, dead = _path(tmp_path, "u", dead_letters=False)
    bad = [Record("u.lines", 0, 7, None, b"\xff", 1_000)]
    for run in (lambda: path.source_records(bad, 3), lambda: path.source_record(bad[0], 3)):
        with pytest.raises(TaskFailed) as info:
            run()
        text = str(info.value)
        assert "offset=7" in text and "its value is not utf8 (UnicodeDecodeError" in text
        assert "fix what writes the topic or read it with the format it holds" in text
        assert "fix the function" not in text
    path, _, dead = _path(tmp_path, "v", dead_letters=True)
    path.source_records(bad, 3)
    assert dead is not None and b"its value is not utf8" in dead._pending[0][2]


def test_a_table_key_that_decodes_but_cannot_be_a_key_is_named_as_such(tmp_path):
    """A json table's key {"a": 1} decodes (it is JSON) but is no key; the error blamed
    its decoding ("its key is not json") and the topic's writer."""
    t = open_transport(data_dir=str(tmp_path / "data"))
    t.create_topics([TopicSpec("k.users", 1), TopicSpec("k.clicks", 1)])
    p = Pipeline("k", dead_letters=True)
    users = p.table("k.users", key="json", value="json")
    (p.source("k.clicks", value="utf8").key_by(str).lookup(users, join=lambda c, u: c)
     .sink("k.out"))
    plan = plan_job(p, t)
    stage = next(st for st in plan.stages if st.input_topic == "k.users")
    channels = ChannelWriter(Captured(), stage.outputs[0].topic, 1,  # type: ignore[arg-type]
                             producer_id=0)
    dead = SinkWriter(Sink("k.dead-letters", None, "json"), 1)
    path = RecordPath("k", stage.task_ids[0], stage, [channels], dead, TaskStats(0), plan=plan)
    path.source_record(Record("k.users", 0, 3, b'{"a":1}', b'{"n":1}', 0), 3)
    path.source_record(Record("k.users", 0, 4, b"\xff", b'{"n":1}', 0), 3)
    errors = [json.loads(v)["error"] for _, _, v, _ in dead._pending]
    assert errors[0].startswith("keys must be str, bytes or int, not dict"), errors
    assert errors[1].startswith("its key is not json"), errors
