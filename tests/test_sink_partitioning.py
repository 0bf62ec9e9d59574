"""Sink output goes where Kafka's default partitioner puts a key (murmur2 of the serialized
key, as every Java client and librdkafka's murmur2 partitioner do), so other clients
co-partition with a job's output (issue 11, item 8)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eos_runtime import Pipeline
from eos_runtime.errors import ConfigError
from eos_runtime.joblog.committed import read_output
from eos_runtime.plan import plan_job
from eos_runtime.runner import run_pipeline
from eos_runtime.runtime.outputs import kafka_partition, murmur2
from eos_runtime.transport import TopicSpec, open_transport

# Apache Kafka's own vectors (UtilsTest.testMurmur2 in the Java client).
JAVA_MURMUR2 = {b"21": -973932308, b"foobar": -790332482, b"abc": 479470107,
                b"a-little-bit-long-string": -985981536,
                b"a-little-bit-longer-string": -1486304829,
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}


def test_murmur2_is_the_java_clients():
    for data, expected in JAVA_MURMUR2.items():
        assert murmur2(data) == expected


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_the_c_murmur2_partitions_as_the_java_clients_murmur2(data):
    for partitions in (1, 7, 12):
        assert kafka_partition(data, partitions) == (murmur2(data) & 0x7FFFFFFF) % partitions


@pytest.mark.kafka
def test_librdkafkas_murmur2_partitioner_agrees(kafka_bootstrap):
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = f"murmur-{uuid.uuid4().hex[:6]}"
    with open_transport(bootstrap_servers=kafka_bootstrap) as t:
        t.create_topics([TopicSpec(topic, 7)])
    keys = [f"key-{i}".encode() for i in range(200)]
    p = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2"})
    for k in keys:
        p.produce(topic, b"v", key=k)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": topic,
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, i, 0) for i in range(7)])
    where = {}
    while len(where) < len(keys):
        for m in c.consume(500, 5.0):
            where[m.key()] = m.partition()
    c.close()
    assert where == {k: kafka_partition(k, 7) for k in keys}


def test_a_keyed_sink_writes_each_key_where_kafka_would(tmp_path):
    opts = {"data_dir": str(tmp_path / "data")}
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec("words", 2), TopicSpec("counted", 5)])
        with t.producer() as prod:
            for i in range(300):
                prod.produce("words", i % 2, f"w{i % 37}".encode())
            prod.flush()
    p = Pipeline("sinkpart")
    p.source("words").key_by(str).map(str).sink("counted", key="utf8")
    run_pipeline(p, state_dir=str(tmp_path / "state"), **opts)
    with open_transport(**opts) as t:
        out = read_output(t, "counted", job="sinkpart")
    assert len(out) == 300
    assert all(r.partition == kafka_partition(r.key, 5) for r in out)


def test_sink_partitions_that_contradict_the_topic_are_refused(tmp_path):
    with open_transport(data_dir=str(tmp_path)) as t:
        t.create_topics([TopicSpec("in", 1), TopicSpec("out", 3)])
        p = Pipeline("contra")
        p.source("in").sink("out")
        with pytest.raises(ConfigError, match="exists with 3 partitions; --sink-partitions 4"):
            plan_job(p, t, sink_partitions=4)
        assert plan_job(p, t, sink_partitions=3).stages[-1].output_partitions == 3


def test_the_sink_writer_remembers_partitions_and_forgets_them_whole(monkeypatch):
    from eos_runtime.api import Sink
    from eos_runtime.runtime import outputs
    from eos_runtime.runtime.operators import encode_key

    monkeypatch.setattr(outputs, "_KEY_PARTITIONS_KEPT", 8)
    w = outputs.SinkWriter(Sink("out", "utf8", "utf8"), 7)
    keys = [f"key-{i % 20}" for i in range(100)]      # more keys than it keeps
    for k in keys:
        w.write(encode_key(k), ["v"], 0)
    assert len(w._by_key) <= 8
    assert [p for p, *_ in w._pending] == [kafka_partition(k.encode(), 7) for k in keys]


@settings(max_examples=300, deadline=None)
@given(key=st.one_of(st.text(max_size=40), st.text(min_size=200, max_size=300),
                     st.binary(max_size=40), st.integers(-2**63, 2**64 - 1)),
       partitions=st.integers(1, 64), key_format=st.sampled_from(["utf8", "msgpack", "json",
                                                                    "bytes"]))
def test_a_str_keys_utf8_sink_key_is_the_one_the_format_encodes(key, partitions, key_format):
    """A str key's utf8 sink key is cut from its stream form, not decoded and encoded: the
    same bytes and partition as the format's own encoding, for keys of every msgpack
    str header; other keys and formats take the format's way (a bytes key is not utf8)."""
    from eos_runtime.api import FORMATS, Sink
    from eos_runtime.errors import UserFunctionError
    from eos_runtime.runtime.operators import encode_key
    from eos_runtime.runtime.outputs import SinkWriter

    w = SinkWriter(Sink("out", key_format, "utf8"), partitions)
    try:
        expected = FORMATS[key_format][0](key)
    except Exception:
        expected = None
    if not isinstance(expected, bytes):   # the bytes format passes other values through
        with pytest.raises(UserFunctionError, match="key format"):
            w.write(encode_key(key), ["v"], 0)
        return
    w.write(encode_key(key), ["v"], 0)
    assert w._pending == [(kafka_partition(expected, partitions), expected, b"v", 0)]


def test_every_msgpack_str_header_is_cut_at_its_length():
    from eos_runtime.api import Sink
    from eos_runtime.runtime.operators import encode_key
    from eos_runtime.runtime.outputs import SinkWriter

    w = SinkWriter(Sink("out", "utf8", "utf8"), 3)
    for key in ("", "a" * 31, "b" * 32, "c" * 255, "d" * 256, "e" * 65_535, "f" * 65_536):
        w.write(encode_key(key), ["v"], 0)   # fixstr, str 8, str 16, str 32
        assert w._pending[-1][1] == key.encode()
