"""The embedded local log: durable, multi-process partitioned log in plain files.

It is the default transport, so a pipeline runs on a fresh machine with no broker.
Several processes (Spark's Python workers) may write and read the same partitions.
Its modules, each along one seam:

* ``files``: a partition's files under the data directory, the formats of frames, commit
  pointer, index and low watermark, and reading frames back (``_PartitionFiles``, ``_scan``);
* ``transport``: ``LocalLogTransport``: topics, watermarks, ``delete_records``, timestamp
  look-ups, the atomic append and fences, with the writer's rules that make it safe;
* ``clients``: the producer (one atomic append per partition per flush) and the consumer
  (committed frames straight from the files).

**Reading needs no write access.** A partition whose files cannot be opened for
writing (a read-only file system, or files or directories the user may not write) is
opened read-only; reading it works as usual (readers never lock), and any attempt to
write to it, or to create a topic or register a fence in such a log, is one
``TransportError`` naming the data directory.

Durability: an acknowledged record survives the death of any process (SIGKILL
included) since the kernel holds the written pages. With ``fsync=True`` each
append is also fsynced and survives a machine crash.

There are no transactions here: the exactly-once protocol does not need them.
Compaction is recorded as the topic's policy but not carried out (a compacted
topic keeps every record, which readers of a compacted topic must tolerate anyway).
"""

# The names besides LocalLogTransport: tests and docs use them by this package's name
# (the alias makes each an explicit re-export).
from .clients import _LocalProducer as _LocalProducer
from .files import _INDEX as _INDEX
from .files import INDEX_INTERVAL as INDEX_INTERVAL
from .transport import OPEN_PARTITIONS as OPEN_PARTITIONS
from .transport import LocalLogTransport

__all__ = ["LocalLogTransport"]
