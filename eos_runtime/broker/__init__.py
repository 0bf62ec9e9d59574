"""The project's own Kafka broker: Kafka 4.x from Maven Central, single-node KRaft on 127.0.0.1.

See :mod:`eos_runtime.broker.kafka` and docs/broker.md.
"""

from __future__ import annotations

from .kafka import (
    DEFAULT_PORT,
    HOST,
    KAFKA_VERSION,
    BrokerState,
    KafkaBroker,
    cache_root,
    default_run_dir,
    fetch,
    find_java,
    find_maven,
    find_running,
    free_port,
    libs_dir,
    port_is_free,
    stop_running,
)

__all__ = [
    "DEFAULT_PORT", "HOST", "KAFKA_VERSION", "BrokerState", "KafkaBroker", "cache_root",
    "default_run_dir", "fetch", "find_java", "find_maven", "find_running", "free_port",
    "libs_dir", "port_is_free", "stop_running",
]
