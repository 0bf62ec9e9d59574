"""The Kafka transport, on confluent-kafka (librdkafka).

This package and the broker launcher are the only places that import ``confluent_kafka``;
no confluent type leaves the package (``docs/transports-kafka.md`` has the user-facing
design). Its modules, each along one seam:

* ``errors``: librdkafka's errors as ``eos_runtime.errors`` classes (``_map_error``,
  ``_transient``), the bootstrap check and the watch over connecting;
* ``producer``: ``KafkaProducer``, its delivery state, flush and transactions;
* ``consumer``: ``KafkaConsumer``, on explicitly assigned partitions;
* ``transport``: ``KafkaTransport``: topics, watermarks, fenced producers, look-ups;
* ``zombie``: the clients made anew across a fault-injection zombie's fork.
"""

from .consumer import KafkaConsumer
from .errors import check_bootstrap_servers
from .producer import KafkaProducer
from .transport import KafkaTransport

__all__ = ["KafkaTransport", "KafkaProducer", "KafkaConsumer", "check_bootstrap_servers"]
