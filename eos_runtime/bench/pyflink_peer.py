"""The PyFlink peer's set-up: its interpreter and Flink's Kafka connector, both on first use.

PyFlink (``apache-flink`` from PyPI) brings apache-beam, pandas, pyarrow and pins of its
own, so it gets a venv of its own in the bench cache (bench/peer_venv.py):
``$EOS_CACHE_DIR/apache-flink-<version>-py<X.Y>``. Its Kafka connector is not in that
package: ``org.apache.flink:flink-sql-connector-kafka`` (the shaded jar, Kafka's client
inside) at the release built for this Flink, fetched from Maven Central with
``mvn dependency:copy`` into ``$EOS_CACHE_DIR/flink-sql-connector-kafka-<version>/``,
through a temporary directory renamed into place when whole.

What it takes is checked first, before a download: Java 17+ (PyFlink runs Flink in a JVM
it starts), a Python that this PyFlink release supports, and Maven (while the cache lacks
the jar); then pip, then Maven.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from ..broker.jars import cache_root, find_java, find_maven
from ..errors import SetupError
from . import peer_venv

__all__ = ["FLINK_VERSION", "CONNECTOR_VERSION", "PYTHONS", "PYFLINK_WORKLOADS", "install",
           "connector_jar", "kill_a_python_worker"]

#: The PyFlink release the bench measures: the newest that the newest Kafka connector
#: release found in Maven Central is built for (5.0.0-2.2: Flink 2.2; PyPI has 2.3.0).
FLINK_VERSION = "2.2.1"
CONNECTOR_VERSION = "5.0.0-2.2"
#: The Python versions ``apache-flink`` 2.2.1 is released for (its wheels, its classifiers).
PYTHONS = ((3, 9), (3, 10), (3, 11), (3, 12))
#: The workloads bench/pyflink_app.py is written for.
PYFLINK_WORKLOADS = ("wordcount", "aggregate", "pageviews")
_DIST = "apache-flink"
_CONNECTOR = "flink-sql-connector-kafka"


def connector_jar() -> Path:
    return cache_root() / f"{_CONNECTOR}-{CONNECTOR_VERSION}" / \
        f"{_CONNECTOR}-{CONNECTOR_VERSION}.jar"


def install() -> tuple[str, Path]:
    """PyFlink's interpreter and the connector jar, each set up first if the cache lacks it.
    :class:`SetupError` says what is missing or which step failed."""
    find_java()
    here = sys.version_info[:2]
    if here not in PYTHONS:
        raise SetupError(
            f"PyFlink {FLINK_VERSION} is released for Python "
            f"{', '.join(f'{a}.{b}' for a, b in PYTHONS)}, not {here[0]}.{here[1]} (the "
            f"bench makes PyFlink's venv with the interpreter it runs on)")
    jar = connector_jar()
    mvn = None if jar.is_file() else find_maven()   # said before a long pip install
    python = peer_venv.install(_DIST, FLINK_VERSION)
    if mvn is not None:
        _fetch_connector(mvn, jar)
    return python, jar


def _fetch_connector(mvn: str, jar: Path) -> None:
    jar.parent.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".fetch-flink-kafka-", dir=jar.parent.parent))
    try:
        out = work / "jars"
        peer_venv.run_step(
            [mvn, "-q", "-B", "-Dstyle.color=never", "dependency:copy",
             f"-Dartifact=org.apache.flink:{_CONNECTOR}:{CONNECTOR_VERSION}",
             f"-DoutputDirectory={out}"],
            f"fetching {_CONNECTOR} {CONNECTOR_VERSION} with Maven (is Maven Central "
            f"reachable?)", cwd=work)   # a directory without a pom.xml of its own
        if not (out / jar.name).is_file():
            raise SetupError(f"Maven fetched no {jar.name} into {out}")
        if jar.parent.exists():   # a directory without the jar: no cache
            shutil.rmtree(jar.parent)
        try:
            out.rename(jar.parent)
        except OSError:
            if not jar.is_file():   # else a concurrent fetch won the race: as good
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def kill_a_python_worker(session: int) -> str:
    """SIGKILL one Python worker of the PyFlink job whose driver leads ``session`` (a task's
    user code): Flink restarts the job from its last completed checkpoint, as it does when
    a task fails. Says which."""
    for entry in sorted(Path("/proc").iterdir(), key=lambda p: p.name):
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
            if os.getsid(int(entry.name)) == session and b"beam_boot" in cmd:
                os.kill(int(entry.name), signal.SIGKILL)
                return (f"a Python worker of the PyFlink job (pid {entry.name}); Flink "
                        f"restarts the job from its last checkpoint")
        except OSError:
            continue   # gone meanwhile
    raise SetupError("the PyFlink job has no Python worker to kill")
