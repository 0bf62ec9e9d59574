"""Spark's Python worker daemon, with the runtime imported before it forks a worker.

Spark forks each task attempt's Python worker from one daemon per executor
(``spark.python.daemon.module``; the engine names this module there). A worker then
imports what its task needs: the runtime, librdkafka's and RocksDB's bindings. For a
task restarted after a crash that import sat on the path to output resuming (0.2-0.4 s,
more on a busy machine). Imported here, once, the modules are in every forked worker
from its first instruction.

Only modules that start no thread when imported belong here: a forked child keeps none
of its parent's threads. pyspark's own daemon imports its worker module after the fork
for that reason, not knowing what a worker module might start; pyspark's own starts
none, so it is imported here too (0.13 s of a restarted task's path on a busy machine).
``tests/test_spark_engine.py`` checks the daemon runs one thread and what a worker
found imported.
"""

from __future__ import annotations

import importlib
import os
import sys

__all__ = ["FILES_DIR_ENV", "PRELOAD", "imported", "path", "preload"]

#: What a runtime task's worker imports. Each starts no thread at import.
PRELOAD = (
    "pyspark.worker",
    "eos_runtime.runtime.task",
    "eos_runtime.transport.kafka",
    "eos_runtime.transport.locallog",
    "eos_runtime.state.store",
)

#: The engine names the executor's SparkFiles directory here (local masters: the driver's).
FILES_DIR_ENV = "EOS_SPARK_FILES_DIR"

#: The modules imported and sys.path once ``preload`` ran (a worker sees its daemon's
#: module as ``__main__``).
imported: frozenset[str] = frozenset()
path: tuple[str, ...] = ()


def preload() -> None:
    """Import ``PRELOAD``. One that fails is left to the worker, which imports it again
    and whose task reports why, as without the daemon.

    Also put the SparkFiles directory on sys.path where pyspark's worker puts it: a
    worker that finds it there already skips ``importlib.invalidate_caches()``, which
    re-reads pyspark's and py4j's zip directories (0.07 s and 16 MB per worker)."""
    global imported, path
    sys.path[:] = _installed_before_zips(sys.path)
    files = os.environ.get(FILES_DIR_ENV)
    if files and files not in sys.path:
        sys.path.insert(1, files)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:
            pass
    imported = frozenset(sys.modules)
    path = tuple(sys.path)


def _installed_before_zips(entries: list[str]) -> list[str]:
    """``entries`` with Spark's ``pyspark.zip`` and ``py4j-*-src.zip`` moved last when
    they are the zips of the pyspark installed on this path (``<dir>/pyspark/python/lib``,
    ``<dir>`` an entry too), so the same code is imported from the installed copy.

    Spark puts its zips first on a worker's path. zipimport writes no bytecode cache and
    compiles every module it loads from source, in every new daemon, so once a run (a
    SparkContext starts one): 1.0-1.1 s of CPU more than the installed, compiled copy for
    what ``PRELOAD`` imports (measured alone). A Spark of its own (``SPARK_HOME``
    elsewhere, a cluster's) keeps its zips first: they must match its JVM."""
    def ours(entry: str) -> bool:
        lib = os.path.dirname(entry)
        name = os.path.basename(entry)
        if not (name == "pyspark.zip" or (name.startswith("py4j-") and name.endswith(".zip"))):
            return False
        package = os.path.dirname(os.path.dirname(lib))   # <dir>/pyspark
        return (os.path.basename(package) == "pyspark"
                and os.path.dirname(package) in entries
                and os.path.isfile(os.path.join(package, "__init__.py")))
    zips = [e for e in entries if ours(e)]
    return [e for e in entries if e not in zips] + zips


if __name__ == "__main__":
    preload()
    from pyspark.daemon import manager

    manager()
