"""The foundation's smoke run: what ``eos smoke`` does.

1. A round trip through the embedded local log: protocol envelopes are written by
   several producers into a shared partition, read back, decoded and checked record
   by record against what was sent.
2. With a Kafka broker: a transaction smoke run. One transaction is committed and one
   aborted; a read_committed reader must see exactly the committed records.

It is a check of the ground the runtime stands on, not yet a pipeline.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from rich.progress import Progress

from .errors import SmokeFailed
from .protocol import wire
from .transport import OLDEST, Record, TopicPartition, TopicSpec, Transport, open_transport


@dataclass
class SmokeResult:
    transport: str
    records: int
    seconds: float
    checks: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"transport": self.transport, "records": self.records,
                "seconds": round(self.seconds, 3), "checks": self.checks}


def _read(transport: Transport, tp: TopicPartition, count: int, *, timeout: float = 30.0,
          linger: float = 0.0) -> list[Record]:
    """Read ``count`` records from the start, then keep reading ``linger`` s for any extra."""
    out: list[Record] = []
    with transport.consumer(read_committed=True) as consumer:
        consumer.assign({tp: transport.resolve(tp, OLDEST)})
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            out.extend(consumer.poll(10_000, 0.5))
        deadline = time.monotonic() + linger
        while time.monotonic() < deadline:
            out.extend(consumer.poll(10_000, 0.2))
    return out


def envelope_round_trip(transport: Transport, *, records: int = 20_000, producers: int = 3,
                        progress: Progress | None = None) -> SmokeResult:
    """Producers write data envelopes and markers into one shared channel; read and verify."""
    started = time.monotonic()
    topic = f"eos-smoke-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    transport.create_topics([TopicSpec(topic, 1)])
    task = progress.add_task(f"{transport.name}: write", total=records) if progress else None
    clients = [transport.producer() for _ in range(producers)]
    sent: dict[int, list[bytes]] = {pid: [] for pid in range(producers)}
    try:
        for i in range(records):
            pid = i % producers
            value = f"record-{i}".encode()
            clients[pid].produce(topic, 0, wire.encode_data(pid, 1, 1 + i // 5_000, len(sent[pid]),
                                                            str(i).encode(), value, i))
            sent[pid].append(value)
            if i % 5_000 == 4_999:
                for pid_, client in enumerate(clients):
                    client.produce(topic, 0, wire.encode(wire.Marker(pid_, 1, 1 + i // 5_000, 0)))
                    client.flush()
                if progress is not None and task is not None:
                    progress.update(task, completed=i + 1)
        for client in clients:
            client.flush()
    finally:
        for client in clients:
            client.close()
    if progress is not None and task is not None:
        progress.update(task, completed=records)

    markers = producers * (records // 5_000)
    got = _read(transport, tp, records + markers, linger=0.2)
    seen: dict[int, list[bytes | None]] = {pid: [] for pid in range(producers)}
    marker_count = 0
    for rec in got:
        msg = wire.decode_channel(rec.value, topic=rec.topic, partition=rec.partition,
                                  offset=rec.offset)
        if isinstance(msg, wire.Envelope):
            if msg.seq != len(seen[msg.producer_id]):
                raise SmokeFailed(f"producer {msg.producer_id}: seq {msg.seq} out of order")
            seen[msg.producer_id].append(msg.value)
        else:
            marker_count += 1
    if seen != sent or marker_count != markers:
        raise SmokeFailed(f"{transport.name}: read back {sum(map(len, seen.values()))} envelopes "
                          f"and {marker_count} markers, wrote {records} and {markers}")
    return SmokeResult(transport.name, records, time.monotonic() - started,
                       [f"{records} envelopes from {producers} producers read back in order",
                        f"{markers} markers read back"])


def kafka_transactions(transport: Transport) -> SmokeResult:
    """A committed and an aborted transaction; read_committed sees only the committed one."""
    started = time.monotonic()
    topic = f"eos-smoke-txn-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    transport.create_topics([TopicSpec(topic, 1)])
    with transport.producer(transactional_id=f"eos-smoke-{uuid.uuid4().hex[:8]}") as producer:
        producer.begin_transaction()
        for i in range(100):
            producer.produce(topic, 0, b"committed-%d" % i)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(100):
            producer.produce(topic, 0, b"aborted-%d" % i)
        producer.flush()
        producer.abort_transaction()
    got = [r.value for r in _read(transport, tp, 100, timeout=15.0, linger=1.0)]
    want = [b"committed-%d" % i for i in range(100)]
    if got != want:
        raise SmokeFailed(f"read_committed saw {len(got)} records, "
                          f"{sum(1 for v in got if v and v.startswith(b'aborted'))} of them "
                          f"aborted")
    return SmokeResult(transport.name, 200, time.monotonic() - started,
                       ["read_committed sees the 100 committed records",
                        "the 100 aborted records stay invisible"])


def run(*, data_dir: str, bootstrap_servers: str | None, records: int,
        show_progress: bool = True,
        client_config: dict[str, Any] | None = None) -> list[SmokeResult]:
    results = []
    with Progress(transient=True, disable=not show_progress) as progress:
        with open_transport(data_dir=data_dir) as local:
            results.append(envelope_round_trip(local, records=records, progress=progress))
        if bootstrap_servers:
            with open_transport(bootstrap_servers=bootstrap_servers,
                                client_config=client_config) as kafka:
                results.append(envelope_round_trip(kafka, records=records, progress=progress))
                results.append(kafka_transactions(kafka))
    return results
