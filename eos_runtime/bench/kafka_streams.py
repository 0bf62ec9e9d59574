"""The Kafka Streams peer's application, built once (the system is bench/systems.py's).

``kafka_streams_app/`` holds the application's Java source (``BenchApp.java``) and a pom
that only lists its classpath: Kafka Streams at the broker's version (``KAFKA_VERSION``)
and slf4j-simple. The first bench that runs the peer fetches that classpath with Maven,
compiles the source with the machine's ``javac`` and caches both beside the broker's jars
(``$EOS_CACHE_DIR``, else ``~/.cache/eos_runtime``), in a directory named after the
version and a digest of the source and pom, so an edited source is built anew. The build
goes to a temporary directory renamed into place when complete: a killed build never
leaves a half cache.

The peer is one JVM, as a Kafka Streams user deploys an instance, with one stream thread
per core (at most one per partition: the cores the other peers get), exactly_once_v2,
the record caches off, at a commit interval of its own: 100 ms (Kafka Streams' default
under exactly-once) or 1 s (the bench's default), two systems of the bench.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from importlib import resources
from pathlib import Path

from ..broker.jars import KAFKA_VERSION, cache_root, find_java, find_maven
from ..errors import SetupError

__all__ = ["build", "find_javac", "APP_CLASS", "APP_JAR", "COMMIT_INTERVALS"]

APP_CLASS = "eosbench.BenchApp"
_APP_FILES = ("BenchApp.java", "pom.xml")
APP_JAR = "eos-bench-kafka-streams.jar"
_COMPLETE = ".eos-complete"
#: The peer's systems, by their commit interval: Kafka Streams' default under
#: exactly-once, and eos_runtime's.
COMMIT_INTERVALS = {"100ms": 0.1, "1s": 1.0}
_JDK_HINT = "install a JDK 17+ (apt-get install openjdk-17-jdk-headless) or set JAVA_HOME"


def _app_source() -> dict[str, bytes]:
    here = resources.files(__package__).joinpath("kafka_streams_app")
    return {name: here.joinpath(name).read_bytes() for name in _APP_FILES}


def _cache_dir(source: dict[str, bytes]) -> Path:
    digest = hashlib.sha256(b"".join(source[n] for n in _APP_FILES)).hexdigest()[:12]
    return cache_root() / f"kafka-streams-{KAFKA_VERSION}-{digest}"


def _complete(d: Path) -> bool:
    return (d / _COMPLETE).is_file() and (d / APP_JAR).is_file() and \
        any((d / "libs").glob("kafka-streams-*.jar"))


def find_javac() -> str:
    """``javac`` of ``$JAVA_HOME``, else on PATH: a JRE alone cannot build the peer."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "javac", os.X_OK):
        return str(Path(home) / "bin" / "javac")
    javac = shutil.which("javac")
    if javac is None:
        raise SetupError(f"javac not found on PATH (the Kafka Streams peer is compiled here): "
                         f"{_JDK_HINT}")
    return javac


def build() -> Path:
    """The built application's directory (``eos-bench-kafka-streams.jar`` and ``libs/``),
    building it first if the cache does not have it. :class:`SetupError` says what is
    missing (Java, javac, Maven) or which step failed."""
    source = _app_source()
    target = _cache_dir(source)
    if _complete(target):
        return target
    find_java()
    javac = find_javac()
    mvn = find_maven()
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-kafka-streams-", dir=target.parent))
    try:
        for name, data in source.items():
            (work / name).write_bytes(data)
        out = work / "app"
        _run([mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(work / "pom.xml"),
              f"-Dkafka.version={KAFKA_VERSION}", "dependency:copy-dependencies",
              "-DincludeScope=runtime", f"-DoutputDirectory={out / 'libs'}"],
             f"fetching Kafka Streams {KAFKA_VERSION} with Maven (is Maven Central reachable?)",
             work)
        classes = work / "classes"
        _run([javac, "-nowarn", "-d", str(classes), "-cp", str(out / "libs" / "*"),
              str(work / "BenchApp.java")], "compiling the Kafka Streams peer with javac", work)
        with zipfile.ZipFile(out / APP_JAR, "w", zipfile.ZIP_DEFLATED) as jar:
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        (out / _COMPLETE).write_text(f"kafka-streams {KAFKA_VERSION}\n")
        if target.exists():   # an incomplete cache of an earlier build
            shutil.rmtree(target)
        try:
            out.rename(target)
        except OSError:
            if not _complete(target):   # else a concurrent build won the race: as good
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _run(cmd: list[str], what: str, cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).replace("\x1b[0m", "").strip()
                         .splitlines()[-15:])
        raise SetupError(f"{what} failed (exit {proc.returncode}):\n{' '.join(cmd)}\n{tail}")
