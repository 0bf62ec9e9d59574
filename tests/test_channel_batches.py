"""Channel output as data batches: ``ChannelWriter`` sends one record per channel and poll
batch, in the order messages and commands were made, and the exactly-once input policy
treats a batch as one message of its producer, generation and version."""

from __future__ import annotations

import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eos_runtime.protocol import wire
from eos_runtime.runtime.outputs import ChannelWriter
from eos_runtime.runtime.policy import Action, Aligned


class FakeProducer:
    def __init__(self) -> None:
        self.records: list[tuple[str, int, Any]] = []
        self.sends = 0
        self.flushes: list[int] = []   # records produced by each flush

    def produce(self, topic: str, partition: int, value: bytes | None,
                key: bytes | None = None, timestamp: int | None = None) -> None:
        self.records.append((topic, partition, wire.decode_channel(value)))

    def send(self) -> None:
        self.sends += 1

    def flush(self, timeout: float = 30.0) -> dict[Any, int]:
        self.flushes.append(len(self.records))
        return {}

    def of(self, partition: int) -> list[Any]:
        return [r for _, p, r in self.records if p == partition]


def key(word: str) -> bytes:
    from eos_runtime.runtime.operators import encode_key
    return encode_key(word)


def test_a_poll_batch_of_writes_is_one_record_per_channel():
    prod = FakeProducer()
    w = ChannelWriter(prod, "ch", 2, producer_id=7)
    for i, word in enumerate(["a", "b", "a", "c", "a"]):
        w.write(3, 10, key(word), [i], 100 + i)
    assert prod.records == []          # nothing goes out before send
    w.send()
    assert prod.sends == 1
    batches = [r for _, _, r in prod.records]
    assert all(type(b) is wire.DataBatch and (b.producer_id, b.generation, b.version) ==
               (7, 3, 10) for b in batches)
    assert sum(len(b.keys) for b in batches) == 5
    assert len(batches) <= 2           # one per channel that got something
    a = next(b for b in batches if key("a") in b.keys)
    assert [b.seq for b in batches] == [0] * len(batches)
    assert [k for k in a.keys if k == key("a")] == [key("a")] * 3   # same key, same channel
    # sequence numbers count messages
    assert w.seq == [len(prod.of(0)[0].keys) if prod.of(0) else 0,
                     len(prod.of(1)[0].keys) if prod.of(1) else 0]


def test_another_version_or_generation_sends_what_is_pending_first():
    prod = FakeProducer()
    w = ChannelWriter(prod, "ch", 1, producer_id=1)
    w.write(1, 5, key("x"), ["v5"], 0)
    w.write(1, 6, key("x"), ["v6a", "v6b"], 0)
    w.write(2, 6, key("x"), ["g2"], 0)
    w.send()
    got = [(b.generation, b.version, b.seq, len(b.keys)) for b in prod.of(0)]
    assert got == [(1, 5, 0, 1), (1, 6, 1, 2), (2, 6, 3, 1)]


@pytest.mark.parametrize("command", ["markers", "restore", "flush", "output_seqs"])
def test_everything_else_on_a_channel_follows_the_pending_messages(command):
    prod = FakeProducer()
    w = ChannelWriter(prod, "ch", 2, producer_id=1)
    w.write(1, 5, None, ["x", "y", "z"], 0)     # keyless: round robin over both channels
    if command == "markers":
        w.markers(1, 5)
    elif command == "restore":
        w.restore(2, 4)
    elif command == "flush":
        w.flush()
    else:
        assert [s.seq for s in w.output_seqs()] == [1, 2]
    for p in (0, 1):
        kinds = [type(r).__name__ for r in prod.of(p)]
        assert kinds[0] == "DataBatch"
        if command == "markers":
            assert kinds == ["DataBatch", "Marker"]
            assert prod.of(p)[1].seq == w.seq[p]   # the marker's seq: messages before it
        if command == "restore":
            assert kinds == ["DataBatch", "Restore"]


def test_markers_are_flushed_once_and_a_checkpoints_need_not_wait():
    """A checkpoint's markers need no acknowledgement before the task goes on (a restart
    sends its last marker again, and the producer keeps each channel's order): with
    ``wait=False`` they are handed on, not flushed. Waited for, one flush after the
    last; the flush halfway exists for the crash point there, so only an armed one gets
    it."""
    from eos_runtime import faults
    prod = FakeProducer()
    w = ChannelWriter(prod, "ch", 4, producer_id=1)
    w.markers(1, 5)
    assert prod.flushes == [4]
    prod.flushes.clear()
    w.markers(1, 6, wait=False)
    assert prod.flushes == [] and prod.sends == 1
    assert [type(r).__name__ for _, _, r in prod.records[4:]] == ["Marker"] * 4
    faults.arm("task.checkpoint.mid_marker_fanout", hit=1000)
    try:
        w.markers(1, 7, wait=False)
    finally:
        faults.disarm()
    assert prod.flushes == [10]   # the first half of this fan-out, durable before the point


def test_a_batch_is_capped_and_channel_batch_1_sends_each_message_alone():
    prod = FakeProducer()
    w = ChannelWriter(prod, "ch", 1, producer_id=1, batch_messages=3)
    w.write(1, 1, key("k"), list(range(7)), 0)
    w.send()
    assert [len(b.keys) for b in prod.of(0)] == [3, 3, 1]
    assert [b.seq for b in prod.of(0)] == [0, 3, 6]
    prod = FakeProducer()
    w = ChannelWriter(prod, "ch", 1, producer_id=1, batch_messages=1)
    w.write(1, 1, key("k"), ["a", "b"], 0)
    w.send()
    assert [len(b.keys) for b in prod.of(0)] == [1, 1]
    with pytest.raises(ValueError):
        ChannelWriter(prod, "ch", 1, producer_id=1, batch_messages=0)


@pytest.mark.parametrize("timestamp", [2**63, -(2**63) - 1, 1.5, "1"])
def test_a_timestamp_a_batch_cannot_carry_is_refused_as_written_and_nothing_kept(timestamp):
    """The batch's encoder trusts the writer's timestamps (it checks each as written), so a
    bad one (an event time a user's function made) is the record's error, not the batch's."""
    prod = FakeProducer()
    w = ChannelWriter(prod, "ch", 1, producer_id=1)
    w.write(1, 1, key("a"), ["kept"], 5)
    with pytest.raises(ValueError, match="timestamp must be an integer"):
        w.write(1, 1, key("a"), ["x", "y"], timestamp)
    w.send()
    assert [(b.values, b.timestamps) for b in prod.of(0)] == [((wire_pack("kept"),), (5,))]


def wire_pack(value: Any) -> bytes:
    return ChannelWriter.pack([value])[0]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 4), st.sampled_from("abcde"),
                          st.integers(0, 3)), max_size=40),
       st.integers(1, 5))
def test_batches_keep_every_message_in_order_per_channel(writes, cap):
    """Whatever the cap and however generation and version change, each channel gets
    exactly the messages routed to it, in order, with consecutive sequence numbers."""
    prod = FakeProducer()
    w = ChannelWriter(prod, "ch", 3, producer_id=1, batch_messages=cap)
    expected: dict[int, list[tuple[int, int, bytes | None]]] = {0: [], 1: [], 2: []}
    generation = 0
    for g, v, word, n in writes:
        generation = max(generation, g)      # generations only grow in a task
        values = [f"{word}{i}" for i in range(n)]
        w.write(generation, v, key(word), values, 0)

        p = zlib.crc32(key(word)) % 3
        expected[p] += [(generation, v, key(word))] * n
    w.send()
    for p in range(3):
        got, seq = [], 0
        for b in prod.of(p):
            assert b.seq == seq and 1 <= len(b.keys) <= cap
            seq += len(b.keys)
            got += [(b.generation, b.version, k) for k in b.keys]
        assert got == expected[p]
        assert w.seq[p] == seq


def _aligned(tmp_path, stats):
    return Aligned([("ch", 0)], (1, 2), 10**12, None, tmp_path / "buf", 1 << 20, stats)


class Stats:
    buffered = max_buffer_bytes = overflowed = stale = fenced = rereads = 0


def test_the_aligned_policy_decides_once_per_batch(tmp_path):
    stats = Stats()
    pol = _aligned(tmp_path, stats)
    now = wire.DataBatch(1, 1, 1, 0, (b"a", b"b"), (b"1", b"2"), (0, 0))
    later = wire.DataBatch(2, 1, 2, 0, (b"c",), (b"3",), (0,))
    assert pol.on_record(("ch", 0), 0, now, wire.encode(now)) is Action.PROCESS
    assert pol.aligner._lanes[("ch", 0)][1].seq == 1            # the batch's last message
    assert pol.on_record(("ch", 0), 1, later, wire.encode(later)) is Action.NOTHING
    assert stats.buffered == 1
    for off, pid in ((2, 1), (3, 2)):
        m = wire.Marker(pid, 1, 1, 0)
        pol.on_record(("ch", 0), off, m, wire.encode(m))
    [(version, inputs, _, _)] = list(pol.checkpoints())[:1]
    assert version == 1
    released = list(pol.released())
    assert [(r[0], r[3]) for r in released] == [(later, 1)]   # the whole batch, its offset
    # the checkpoint resumes at the buffered batch: it is read again after a restart
    assert inputs[0].offset == 1
    pol.close()


def test_a_restart_continues_every_output_of_a_fan_out_from_the_commit():
    # A stage with two key_by outputs (graph.py) writes two channel topics through one
    # ChannelFanout; a restarted task's sequence numbers go on, on each, from its commit
    # (recovery C5), whichever topic comes first.
    from eos_runtime.runtime.outputs import ChannelFanout, channels_of

    producer = FakeProducer()
    fan = channels_of([ChannelWriter(producer, "a", 2, 7), ChannelWriter(producer, "b", 3, 7)])
    assert isinstance(fan, ChannelFanout)
    commit = wire.ChangeLogCommit(1, 5, outputs=(
        wire.OutputSeq("a", 0, 4), wire.OutputSeq("a", 1, 9),
        wire.OutputSeq("b", 0, 2), wire.OutputSeq("b", 2, 6)))
    fan.continue_from(commit)
    assert [w.seq for w in fan.writers] == [[4, 9], [2, 0, 6]]
    assert fan.output_seqs() == (wire.OutputSeq("a", 0, 4), wire.OutputSeq("a", 1, 9),
                                 wire.OutputSeq("b", 0, 2), wire.OutputSeq("b", 1, 0),
                                 wire.OutputSeq("b", 2, 6))


def test_a_batch_is_sent_before_a_value_would_take_it_past_its_bound():
    """A batch took its value and only then checked its bound: 250 KB of small values
    and then a 900 KB one, each fine alone, went out as one channel record of 1.15 MB,
    over Kafka's 1 MB record limit (the task failed on every attempt, no dead letter)."""
    from eos_runtime.runtime.outputs import BATCH_BYTES

    prod = FakeProducer()
    w = ChannelWriter(prod, "ch", 1, producer_id=1)
    small, big = b"s" * 1000, b"b" * 900_000
    w.append_stamped(1, 1, [key("k")] * 250, [small] * 250, [0] * 250)
    w.append_stamped(1, 1, [key("k")], [big], [0])
    w.send_pending()
    sizes = [sum(len(k) + len(v) for k, v in zip(b.keys, b.values, strict=True))
             for _, _, b in prod.records]
    assert sizes and max(sizes) <= max(BATCH_BYTES, len(big) + len(key("k"))), sizes
    assert sum(len(b.keys) for _, _, b in prod.records) == 251   # every value went out
