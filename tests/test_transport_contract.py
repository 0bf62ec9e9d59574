"""The transport contract (eos_runtime/transport/base.py), run against both transports:
the embedded local log and the real Kafka broker."""

from __future__ import annotations

import time
import uuid

import pytest

from eos_runtime.errors import ConfigError, TopicExists, TopicNotFound, TransportError
from eos_runtime.transport import (
    OLDEST,
    UPCOMING,
    AtOffset,
    AtTimestamp,
    TopicPartition,
    TopicSpec,
    open_transport,
)


@pytest.fixture(params=["local", pytest.param("kafka", marks=pytest.mark.kafka)])
def transport(request, tmp_path):
    if request.param == "local":
        t = open_transport(data_dir=str(tmp_path / "log"))
    else:
        t = open_transport(bootstrap_servers=request.getfixturevalue("kafka_bootstrap"))
    with t:
        yield t


def new_topic(transport, partitions=1, compacted=False) -> str:
    name = f"contract-{uuid.uuid4().hex[:12]}"
    transport.create_topics([TopicSpec(name, partitions, compacted)])
    return name


def read_all(transport, positions, expect, timeout=20.0):
    """Poll until ``expect`` records arrived (or fail after ``timeout``)."""
    out = []
    with transport.consumer() as c:
        c.assign(positions)
        deadline = time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            out.extend(c.poll(1000, 0.5))
    assert len(out) == expect, f"got {len(out)} of {expect} records"
    return out


def test_create_topics_is_idempotent_and_describes_the_layout(transport):
    name = new_topic(transport, partitions=3)
    transport.create_topics([TopicSpec(name, 3)])  # same layout: fine
    assert transport.describe(name) == TopicSpec(name, 3, False)
    assert name in transport.list_topics()
    compacted = new_topic(transport, partitions=1, compacted=True)
    assert transport.describe(compacted).compacted is True


def test_create_with_another_partition_count_is_refused(transport):
    name = new_topic(transport, partitions=2)
    with pytest.raises(TopicExists, match=name):
        transport.create_topics([TopicSpec(name, 4)])


def test_unknown_topic_is_named(transport):
    with pytest.raises(TopicNotFound, match="no-such-topic"):
        transport.describe("no-such-topic-" + uuid.uuid4().hex[:6])
    with pytest.raises(TopicNotFound):
        transport.watermarks(TopicPartition("no-such-topic-" + uuid.uuid4().hex[:6], 0))


def test_producing_to_a_missing_partition_fails(transport):
    name = new_topic(transport, partitions=1)
    with transport.producer() as p, pytest.raises(TransportError, match=name):
        p.produce(name, 5, b"x")
        p.flush(10)


@pytest.mark.parametrize("how", ["produce", "produce_many"])
def test_flush_reports_the_last_offset_per_partition_and_records_come_back_in_order(transport,
                                                                                    how):
    name = new_topic(transport, partitions=2)
    records = [(i % 2, f"k{i}".encode(), f"v{i}".encode(), 1_000 + i) for i in range(300)]
    with transport.producer() as p:
        if how == "produce":
            for part, k, v, ts in records:
                p.produce(name, part, v, key=k, timestamp=ts)
        else:   # what a sink hands over: in three calls, the last one empty
            p.produce_many(name, records[:120])
            p.produce_many(name, iter(records[120:]))
            p.produce_many(name, [])
        report = p.flush()
        assert set(report) == {TopicPartition(name, 0), TopicPartition(name, 1)}
        assert p.flush() == {}  # nothing new since the last flush
    for part in (0, 1):
        tp = TopicPartition(name, part)
        low, high = transport.watermarks(tp)
        assert report[tp] < high
        records = read_all(transport, {tp: low}, 150)
        assert [r.value for r in records] == [f"v{i}".encode() for i in range(part, 300, 2)]
        assert [r.key for r in records] == [f"k{i}".encode() for i in range(part, 300, 2)]
        assert [r.timestamp for r in records] == list(range(1_000 + part, 1_300, 2))
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets)), "offsets must strictly increase"
        assert records[-1].offset == report[tp]
        assert {(r.topic, r.partition) for r in records} == {tp}


def test_none_keys_and_values_and_empty_bytes_survive(transport):
    name = new_topic(transport)
    with transport.producer() as p:
        p.produce(name, 0, None, key=None)
        p.produce(name, 0, b"", key=b"")
        p.produce(name, 0, b"\x00" * 100_000, key=b"big")
        p.flush()
    recs = read_all(transport, {TopicPartition(name, 0): 0}, 3)
    assert (recs[0].key, recs[0].value) == (None, None)
    assert (recs[1].key or b"", recs[1].value or b"") == (b"", b"")
    assert (recs[2].key, recs[2].value) == (b"big", b"\x00" * 100_000)


def test_assign_seek_and_position(transport):
    name = new_topic(transport)
    tp = TopicPartition(name, 0)
    with transport.producer() as p:
        for i in range(50):
            p.produce(name, 0, str(i).encode())
        p.flush()
    offsets = [r.offset for r in read_all(transport, {tp: 0}, 50)]
    with transport.consumer() as c:
        c.assign({tp: offsets[20]})
        assert c.assignment() == [tp]
        assert c.position(tp) == offsets[20]
        got = []
        while len(got) < 5:
            got.extend(c.poll(5 - len(got), 5.0))
        assert [r.value for r in got] == [str(i).encode() for i in range(20, 25)]
        assert c.position(tp) == offsets[24] + 1
        c.seek(tp, offsets[40])
        got = []
        while len(got) < 10:
            got.extend(c.poll(100, 5.0))
        assert [r.value for r in got] == [str(i).encode() for i in range(40, 50)]


def test_poll_returns_at_most_max_records(transport):
    name = new_topic(transport)
    with transport.producer() as p:
        for _ in range(100):
            p.produce(name, 0, b"x")
        p.flush()
    with transport.consumer() as c:
        c.assign({TopicPartition(name, 0): 0})
        seen = 0
        deadline = time.monotonic() + 20
        while seen < 100 and time.monotonic() < deadline:
            batch = c.poll(7, 1.0)
            assert len(batch) <= 7
            seen += len(batch)
        assert seen == 100


def test_pause_stops_a_partition_until_resume(transport):
    name = new_topic(transport, partitions=2)
    a, b = TopicPartition(name, 0), TopicPartition(name, 1)
    with transport.producer() as p:
        for _ in range(10):
            p.produce(name, 0, b"a")
            p.produce(name, 1, b"b")
        p.flush()
    with transport.consumer() as c:
        c.assign({a: 0, b: 0})
        c.pause([b])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 10 and time.monotonic() < deadline:
            got.extend(c.poll(100, 0.5))
        got.extend(c.poll(100, 1.0))  # a paused partition stays silent
        assert {r.partition for r in got} == {0} and len(got) == 10
        c.resume([b])
        more = []
        deadline = time.monotonic() + 60
        while len(more) < 10 and time.monotonic() < deadline:
            more.extend(c.poll(100, 0.5))
        assert {r.partition for r in more} == {1} and len(more) == 10


def poll_until(consumer, expect, timeout=20.0):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < expect and time.monotonic() < deadline:
        got.extend(consumer.poll(1000, 0.5))
    return got


def two_filled_partitions(transport, n=10):
    """A new two-partition topic holding a0..a(n-1) and b0..b(n-1); its two partitions."""
    name = new_topic(transport, partitions=2)
    with transport.producer() as p:
        for i in range(n):
            p.produce(name, 0, b"a%d" % i)
            p.produce(name, 1, b"b%d" % i)
        p.flush()
    return TopicPartition(name, 0), TopicPartition(name, 1)


def test_assign_clears_every_pause(transport):
    """A task paused by backpressure re-positions with assign and then expects to read
    every assigned partition: a pause that outlived assign would hang it."""
    a, b = two_filled_partitions(transport)
    with transport.consumer() as c:
        c.assign({a: 0, b: 0})
        c.pause([a])
        c.assign({a: 0, b: 0})  # the same partitions again
        got = poll_until(c, 20)
        assert sorted((r.partition, r.value) for r in got) == sorted(
            [(0, b"a%d" % i) for i in range(10)] + [(1, b"b%d" % i) for i in range(10)])
        # A partition paused, dropped from the assignment and assigned again later.
        c.pause([b])
        c.assign({a: 0})
        c.assign({a: 10, b: 5})
        got = poll_until(c, 5)
        assert [(r.partition, r.value) for r in got] == [(1, b"b%d" % i) for i in range(5, 10)]


def test_seek_keeps_a_pause(transport):
    a, b = two_filled_partitions(transport)
    with transport.consumer() as c:
        c.assign({a: 0, b: 0})
        c.pause([a])
        c.seek(a, 3)
        got = poll_until(c, 10)
        got.extend(c.poll(100, 1.0))  # a paused partition stays silent, seek or not
        assert {r.partition for r in got} == {1} and len(got) == 10
        c.resume([a])
        got = poll_until(c, 7)
        assert [r.value for r in got] == [b"a%d" % i for i in range(3, 10)]


def test_pause_and_resume_refuse_partitions_that_are_not_assigned(transport):
    """Refused, not remembered: a pause taken before assign would silence the partition
    once it is assigned."""
    a, b = two_filled_partitions(transport)
    with transport.consumer() as c:
        for call in (c.pause, c.resume):
            with pytest.raises(TransportError, match="not assigned"):
                call([a])
        c.assign({a: 0})
        for call in (c.pause, c.resume):
            with pytest.raises(TransportError, match="not assigned"):
                call([a, b])  # all or nothing: a is not paused either
        got = poll_until(c, 10)
        assert [r.value for r in got] == [b"a%d" % i for i in range(10)]


def test_a_consumer_sees_records_appended_while_it_waits(transport):
    name = new_topic(transport)
    tp = TopicPartition(name, 0)
    with transport.consumer() as c, transport.producer() as p:
        c.assign({tp: transport.resolve(tp, UPCOMING)})
        assert c.poll(10, 0.2) == []
        p.produce(name, 0, b"late")
        p.flush()
        got = []
        deadline = time.monotonic() + 60
        while not got and time.monotonic() < deadline:
            got = c.poll(10, 0.5)
        assert [r.value for r in got] == [b"late"]


def test_positions_resolve(transport):
    name = new_topic(transport)
    tp = TopicPartition(name, 0)
    # recent times: a Kafka broker's retention check deletes records older than retention.ms
    base = (int(time.time()) - 3_600) * 1_000
    with transport.producer() as p:
        for i in range(10):
            p.produce(name, 0, str(i).encode(), timestamp=base + 10_000 + 100 * i)
        p.flush()
    recs = read_all(transport, {tp: 0}, 10)
    low, high = transport.watermarks(tp)
    assert transport.resolve(tp, OLDEST) == low == recs[0].offset
    assert transport.resolve(tp, UPCOMING) == high > recs[-1].offset
    assert transport.resolve(tp, AtOffset(recs[3].offset)) == recs[3].offset
    assert transport.resolve(tp, AtTimestamp(base + 10_350)) == recs[4].offset  # first ts >= 10_350
    assert transport.resolve(tp, AtTimestamp(base + 10_400)) == recs[4].offset
    assert transport.resolve(tp, AtTimestamp(base)) == recs[0].offset
    assert transport.resolve(tp, AtTimestamp(base + 99_999)) == high  # none that late


def test_two_producers_share_a_partition_and_each_keeps_its_order(transport):
    """The shared channel of SEP-10: several upstream tasks append to one partition."""
    name = new_topic(transport)
    with transport.producer() as p1, transport.producer() as p2:
        for i in range(200):
            p1.produce(name, 0, b"a%d" % i)
            p2.produce(name, 0, b"b%d" % i)
            if i % 50 == 49:
                p1.flush()
                p2.flush()
        p1.flush()
        p2.flush()
    values = [r.value for r in read_all(transport, {TopicPartition(name, 0): 0}, 400)]
    assert [v for v in values if v.startswith(b"a")] == [b"a%d" % i for i in range(200)]
    assert [v for v in values if v.startswith(b"b")] == [b"b%d" % i for i in range(200)]


def test_open_transport_needs_exactly_one_target(tmp_path):
    with pytest.raises(ConfigError, match="not both"):
        open_transport(bootstrap_servers="127.0.0.1:1", data_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="no transport"):
        open_transport()


def _write(producer, topic: str, value: bytes) -> None:
    """One record, in a transaction where the producer has them."""
    txn = producer.transactional
    if txn:
        producer.begin_transaction()
    producer.produce(topic, 0, value)
    (producer.commit_transaction if txn else producer.flush)()


@pytest.mark.parametrize("started", [False, True], ids=["made", "started"])
def test_a_fenced_producer_stops_once_a_newer_generation_starts(transport, started):
    """Zombie fencing: generation 2 of the same fence id makes generation 1's writes fail.
    Started (``start_producer(fence_id)``), what ``take(generation)`` hands over is that
    fenced producer, whatever was done between start and take."""
    from eos_runtime.errors import ProducerFenced

    name = new_topic(transport)
    fence = f"fence-{uuid.uuid4().hex[:8]}"
    old = transport.fenced_producer(fence, 1)
    _write(old, name, b"old-1")
    if started:
        pending = transport.start_producer(fence)
        read_all(transport, {TopicPartition(name, 0): 0}, 1)   # other work meanwhile
        new = pending.take(2)
        with pytest.raises(RuntimeError, match="taken"):
            pending.take(3)
        pending.close()   # after a take: nothing left to close
    else:
        new = transport.fenced_producer(fence, 2)
    assert new.transactional == old.transactional
    with pytest.raises(ProducerFenced):
        _write(old, name, b"old-2")
    _write(new, name, b"new-1")
    values = [r.value for r in read_all(transport, {TopicPartition(name, 0): 0}, 2)]
    assert values == [b"old-1", b"new-1"]
    old.close()
    new.close()


def test_a_started_plain_producer_writes_and_an_untaken_one_closes(transport):
    name = new_topic(transport)
    pending = transport.start_producer()
    p = pending.take(1)
    assert not p.transactional
    p.produce(name, 0, b"plain")
    p.flush()
    p.close()
    assert [r.value for r in read_all(transport, {TopicPartition(name, 0): 0}, 1)] == [
        b"plain"]
    for fence in (None, f"fence-{uuid.uuid4().hex[:8]}"):
        untaken = transport.start_producer(fence)
        untaken.close()
        with pytest.raises(RuntimeError, match="closed"):
            untaken.take(1)


def test_a_started_producer_that_cannot_be_made_says_so_at_take(transport):
    pending = transport.start_producer("")
    with pytest.raises(ConfigError):
        pending.take(1)


def test_send_hands_records_over_without_a_flush_and_flush_still_reports_them(transport):
    name = new_topic(transport)
    tp = TopicPartition(name, 0)
    with transport.producer() as p:
        p.produce(name, 0, b"early")
        p.send()
        assert [r.value for r in read_all(transport, {tp: 0}, 1)] == [b"early"]
        p.produce(name, 0, b"late")
        report = p.flush()
    recs = read_all(transport, {tp: 0}, 2)
    assert report == {tp: recs[1].offset}


def test_deleted_topics_are_gone_and_their_names_free(transport):
    doomed = new_topic(transport, partitions=2)
    kept = new_topic(transport, partitions=1)
    with transport.producer() as p:
        p.produce(doomed, 0, b"old")
        p.produce(kept, 0, b"kept")
        p.flush(10)
    missing = "contract-missing-" + uuid.uuid4().hex[:6]
    assert transport.delete_topics([doomed, missing]) == [doomed]
    with pytest.raises(TopicNotFound, match=doomed):
        transport.describe(doomed)
    assert doomed not in transport.list_topics()
    assert kept in transport.list_topics()
    assert [r.value for r in read_all(transport, {TopicPartition(kept, 0): 0}, 1)] == [b"kept"]
    # The name makes a new, empty topic, of another layout if asked.
    transport.create_topics([TopicSpec(doomed, 3)])
    assert transport.describe(doomed).partitions == 3
    assert transport.watermarks(TopicPartition(doomed, 0))[1] == 0
    with transport.producer() as p:
        p.produce(doomed, 2, b"new")
        p.flush(10)
    got = read_all(transport, {TopicPartition(doomed, q): 0 for q in range(3)}, 1)
    assert [r.value for r in got] == [b"new"]


def test_deleting_nothing_or_only_missing_topics_deletes_nothing(transport):
    assert transport.delete_topics([]) == []
    assert transport.delete_topics(["contract-missing-" + uuid.uuid4().hex[:6]]) == []


def test_delete_records_moves_the_low_watermark_and_keeps_the_offsets_after_it(transport):
    from eos_runtime.errors import OffsetOutOfRange

    topic = new_topic(transport, partitions=2)
    tp, other = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with transport.producer() as p:
        for i in range(300):
            p.produce(topic, 0, f"v{i}".encode(), key=b"k")
        p.produce(topic, 1, b"x")
        p.flush()
    assert transport.delete_records(tp, 120) == 120
    assert transport.watermarks(tp) == (120, 300)
    assert transport.watermarks(other) == (0, 1)               # only that partition
    assert transport.delete_records(tp, 50) == 120              # never moves back
    assert transport.resolve(tp, OLDEST) == 120
    kept = read_all(transport, {tp: 120}, 180)
    assert [(r.offset, r.value) for r in kept[:2]] == [(120, b"v120"), (121, b"v121")]
    assert kept[-1].offset == 299
    assert transport.resolve(tp, AtTimestamp(0)) == 120         # a time before the low
    with pytest.raises(OffsetOutOfRange):
        transport.delete_records(tp, 301)
    with transport.consumer() as c, pytest.raises(OffsetOutOfRange):
        c.assign({tp: 10})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            c.poll(100, 0.5)
    # A reader positioned before a deletion and left below it is told, not fed a hole.
    with transport.consumer() as c:
        c.assign({tp: 130})
        assert read_poll(c, 1)[0].offset == 130
        transport.delete_records(tp, 200)
        with pytest.raises(OffsetOutOfRange):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                c.seek(tp, 140)
                c.poll(100, 0.5)
    assert transport.delete_records(tp, 300) == 300             # everything: low == high
    assert transport.watermarks(tp) == (300, 300)


def read_poll(consumer, n, timeout=20.0):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out.extend(consumer.poll(n - len(out), 0.5))
    return out


def test_a_closed_producer_writes_nothing_more(transport):
    """A fenced producer's close let go of its fence on the local log, after which its
    writes went through unfenced; Kafka's refuses them."""
    name = new_topic(transport)
    plain = transport.producer()
    plain.close()
    fenced = transport.fenced_producer(f"{name}-fence", 1)
    fenced.close()
    for p in (plain, fenced):
        with pytest.raises(TransportError, match="closed"):
            p.produce(name, 0, b"late")
            p.flush()
    assert transport.watermarks(TopicPartition(name, 0)) == (0, 0)


def test_describe_says_how_far_ahead_a_records_timestamp_may_be(transport):
    """Kafka 4 refuses a record whose timestamp is over an hour ahead of its clock
    (message.timestamp.after.max.ms), the local log nothing: a job checks event times
    against it, since its sinks take them as their records' timestamps."""
    spec = transport.describe(new_topic(transport))
    assert spec.ahead_ms == (None if transport.name == "local" else 3_600_000)
    if transport.name == "kafka":   # a topic the broker stamps itself takes any time
        from confluent_kafka.admin import AdminClient, NewTopic

        name = f"contract-{uuid.uuid4().hex[:12]}"
        admin = AdminClient({"bootstrap.servers": transport.bootstrap_servers})
        admin.create_topics([NewTopic(name, 1, 1, config={
            "message.timestamp.type": "LogAppendTime"})])[name].result(30)
        assert transport.describe(name).ahead_ms is None
