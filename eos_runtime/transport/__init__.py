"""Transports: the Kafka log and the embedded local log behind one interface."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .base import (
    OLDEST,
    UPCOMING,
    AtOffset,
    AtTimestamp,
    Consumer,
    Oldest,
    PendingProducer,
    Position,
    Producer,
    Record,
    TopicPartition,
    TopicSpec,
    Transport,
    Upcoming,
)

__all__ = [
    "OLDEST", "UPCOMING", "AtOffset", "AtTimestamp", "Consumer", "Oldest", "Position",
    "PendingProducer", "Producer", "Record", "TopicPartition", "TopicSpec", "Transport", "Upcoming",
    "open_transport",
]


def open_transport(*, bootstrap_servers: str | None = None, data_dir: str | None = None,
                   **options: Any) -> Transport:
    """Kafka when ``bootstrap_servers`` is given, else the embedded local log in ``data_dir``."""
    # Each transport is imported when asked for: the local log does not load the Kafka
    # client (confluent_kafka).
    if bootstrap_servers and data_dir:
        raise ConfigError("give either bootstrap_servers (Kafka) or data_dir (local log), not both")
    if bootstrap_servers:
        from .kafka import KafkaTransport
        return KafkaTransport(bootstrap_servers, **options)
    if data_dir:
        from .locallog import LocalLogTransport
        return LocalLogTransport(data_dir, **options)
    raise ConfigError("no transport: give bootstrap_servers (Kafka) or data_dir (local log)")
