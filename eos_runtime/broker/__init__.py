"""The project's own Kafka broker: Kafka 4.x from Maven Central, single-node KRaft on 127.0.0.1.

See :mod:`eos_runtime.broker.kafka` (starting it), ``jars`` (its jars, fetched once),
``config`` (its ``server.properties``), ``rundir`` (its run dir, state file and stop) and
docs/broker.md.
"""

from __future__ import annotations

from .config import DEFAULT_PORT, HOST
from .jars import KAFKA_VERSION, cache_root, fetch, find_java, find_maven, libs_dir
from .kafka import KafkaBroker, free_port, port_is_free
from .rundir import BrokerState, default_run_dir, find_running, stop_running

__all__ = [
    "DEFAULT_PORT", "HOST", "KAFKA_VERSION", "BrokerState", "KafkaBroker", "cache_root",
    "default_run_dir", "fetch", "find_java", "find_maven", "find_running", "free_port",
    "libs_dir", "port_is_free", "stop_running",
]
