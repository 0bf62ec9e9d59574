"""Spark's Python worker daemon, with the runtime imported before it forks a worker.

Spark forks each task attempt's Python worker from one daemon per executor
(``spark.python.daemon.module``; the engine names this module there). A worker then
imports what its task needs: the runtime, librdkafka's and RocksDB's bindings. For a
task restarted after a crash that import sat on the path to output resuming (0.2-0.4 s,
more on a busy machine). Imported here, once, the modules are in every forked worker
from its first instruction.

Only modules that start no thread when imported belong here: a forked child keeps none
of its parent's threads (pyspark's own daemon imports the worker module after the fork
for that reason). ``tests/test_spark_engine.py`` checks the daemon has none.
"""

from __future__ import annotations

import importlib

__all__ = ["PRELOAD", "preload"]

#: What a runtime task imports. Each starts no thread at import.
PRELOAD = (
    "eos_runtime.runtime.task",
    "eos_runtime.transport.kafka",
    "eos_runtime.transport.locallog",
    "eos_runtime.state.store",
)


def preload() -> list[str]:
    """Import ``PRELOAD``; returns those that failed (a worker imports them again and its
    task reports why, as without the daemon)."""
    failed = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:
            failed.append(name)
    return failed


if __name__ == "__main__":
    preload()
    from pyspark.daemon import manager

    manager()
