"""Reading a task's change log on recovery (``joblog/changelog._read``).

A change log on Kafka ends in a transaction marker after every commit: an offset that
holds no record a reader ever sees. Recovery reads up to the end offset, so the last
stretch of its read may bring no record at all, only the position moving past the
marker. That stretch must cost a short wait, not a whole poll timeout: recovery sits on
the path from a crash to output resuming (issue 10's recovery target). The waits are
counted, not timed, so a busy machine cannot fail the test."""

from __future__ import annotations

import pytest

from eos_runtime.joblog import changelog
from eos_runtime.transport import Record, TopicPartition

TP = TopicPartition("job.changelog", 0)


class _MarkerLog:
    """A consumer over offsets [0, end): records at ``data``, markers elsewhere. Each
    poll waits its whole timeout unless it returns records (as librdkafka's consume
    does with too few of them), and a poll that finds only markers moves past them."""

    def __init__(self, data: dict[int, bytes], end: int) -> None:
        self.data, self.end, self.pos = data, end, 0
        self.waited = 0.0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def assign(self, positions):
        self.pos = positions[TP]

    def position(self, tp):
        return self.pos

    def poll(self, max_records, timeout):
        out = []
        while self.pos < self.end and len(out) < max_records:
            if self.pos in self.data:
                out.append(Record(TP.topic, TP.partition, self.pos, None, self.data[self.pos],
                                  0))
            self.pos += 1
        if not out:
            self.waited += timeout
        return out


class _Transport:
    def __init__(self, consumer):
        self.c = consumer

    def consumer(self, read_committed=True):
        assert read_committed
        return self.c


def test_a_read_that_ends_in_a_transaction_marker_does_not_wait_out_a_poll_timeout():
    log = _MarkerLog({5: b"commit"}, end=7)      # the commit record, then its marker
    got = [r.offset for r in changelog._read(_Transport(log), TP, 6, 7)]
    assert got == []
    assert log.waited <= 0.1, f"waited {log.waited} s for a marker"


def test_a_read_returns_every_record_of_its_range_and_stops_at_its_end():
    log = _MarkerLog({i: b"x" for i in range(0, 20, 2)}, end=20)
    assert [r.offset for r in changelog._read(_Transport(log), TP, 3, 15)] == [4, 6, 8, 10,
                                                                              12, 14]


@pytest.mark.kafka
def test_an_at_least_once_commit_is_not_written_after_a_change_it_could_not_write(
        kafka_bootstrap):
    """At-least-once writes its change log with a plain producer. A change the producer
    refused (a value over the record limit) failed only at the flush that sealed the
    commit, after the commit record had gone out: the commit stood without the change,
    recovery restored the state without it, and the run went on (a review saw a value
    set to over 1 MB come back as never set)."""
    import uuid

    from eos_runtime.errors import DeliveryFailed
    from eos_runtime.protocol import wire
    from eos_runtime.transport import TopicSpec, open_transport

    topic = f"alo-{uuid.uuid4().hex[:8]}.changelog"
    with open_transport(bootstrap_servers=kafka_bootstrap) as t:
        t.create_topics([TopicSpec(topic, 1, keep_forever=True)])
        tp = TopicPartition(topic, 0)
        writer = changelog.ChangeLogWriter.open(t, tp, "alo-task-0", 1, fenced=False)
        try:
            writer.start_generation(0)
            writer.changes(1, [("step0", [b"k"], [b"x" * 2_000_000])])
            with pytest.raises(DeliveryFailed):
                writer.commit(wire.ChangeLogCommit(1, 1))
        finally:
            writer.close()
        assert changelog.last_commit(t, tp) is None
