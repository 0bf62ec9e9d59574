"""The Kafka jars: the pinned release, fetched from Maven Central into a cache, once.

Kafka 4.x is resolved from its Maven Central artifacts (``pom.xml`` beside this file)
into a cache directory, once: ``$EOS_CACHE_DIR/kafka-<version>/libs`` or
``~/.cache/eos_runtime/kafka-<version>/libs``. The fetch goes to a temporary directory
that is renamed into place when complete, so a killed fetch never leaves a half cache.
Java (17+, to run the broker and Maven) and Maven are found here too.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ..cache import cache_root
from ..errors import SetupError

__all__ = ["KAFKA_VERSION", "cache_root", "libs_dir", "fetch", "find_java", "find_maven"]

log = logging.getLogger("eos_runtime.broker")

#: The pinned Kafka release (its jars come from Maven Central; docker-compose.yml uses
#: the apache/kafka image of the same version).
KAFKA_VERSION = "4.1.1"

_JAVA_HINT = "install OpenJDK 17 (apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
_MAVEN_HINT = "install Maven 3.6+ (apt-get install maven)"


def libs_dir(version: str = KAFKA_VERSION) -> Path:
    """Where the jars of Kafka ``version`` are (or will be) cached."""
    return cache_root() / f"kafka-{version}" / "libs"


# --------------------------------------------------------------------------- tools

def find_java() -> str:
    """The ``java`` to run (``$JAVA_HOME/bin/java``, else ``java`` on PATH), checked to be 17+.

    Raises :class:`SetupError` saying what to install when there is none or it is too old.
    """
    java = None
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            java = str(candidate)
    if java is None:
        java = shutil.which("java")
    if java is None:
        raise SetupError(f"Java 17+ not found on PATH: {_JAVA_HINT}")
    major = _java_major(java)
    if major is not None and major < 17:
        raise SetupError(f"Java 17+ needed for Kafka {KAFKA_VERSION}, but {java} is Java {major}: "
                         f"{_JAVA_HINT}")
    return java


@lru_cache(maxsize=8)
def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SetupError(f"cannot run {java} -version ({exc}): {_JAVA_HINT}") from exc
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return None                     # unknown format: let the JVM speak for itself
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major      # "1.8.0_x" is Java 8


def find_maven() -> str:
    """``mvn`` on PATH, or :class:`SetupError` saying what to install."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SetupError(f"Maven not found on PATH (it fetches the Kafka jars from Maven Central "
                         f"once, into {cache_root()}): {_MAVEN_HINT}")
    return mvn


# --------------------------------------------------------------------------- fetch

def _cache_complete(libs: Path, version: str) -> bool:
    return (libs / f"kafka_2.13-{version}.jar").is_file() and any(libs.glob("log4j-core-*.jar"))


def fetch(version: str = KAFKA_VERSION, *, force: bool = False) -> Path:
    """Make sure the jars of Kafka ``version`` are in the cache; return the ``libs`` dir.

    Only the first call downloads (with ``mvn dependency:copy-dependencies``, into a
    temporary directory renamed into place at the end). Raises :class:`SetupError` when
    Java or Maven is missing or Maven fails.
    """
    libs = libs_dir(version)
    if not force and _cache_complete(libs, version):
        return libs
    find_java()                          # Maven needs it too; say so first
    mvn = find_maven()
    parent = libs.parent
    parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temp_dirs(parent)
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=parent))
    try:
        pom = work / "pom.xml"
        pom.write_bytes(resources.files(__package__).joinpath("pom.xml").read_bytes())
        out = work / "libs"
        cmd = [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(pom),
               f"-Dkafka.version={version}", "dependency:copy-dependencies",
               "-DincludeScope=runtime", f"-DoutputDirectory={out}"]
        log.info("fetching Kafka %s jars from Maven Central into %s", version, libs)
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True)
        if proc.returncode != 0 or not _cache_complete(out, version):
            tail = _tail_text((proc.stdout + proc.stderr).replace("\x1b[0m", ""), 30)
            raise SetupError(f"fetching Kafka {version} with Maven failed "
                             f"(exit {proc.returncode}); "
                             f"check that Maven Central is reachable and the version exists.\n"
                             f"{' '.join(cmd)}\n{tail}")
        (out / ".eos-complete").write_text(f"kafka {version}\n")
        if force and libs.exists():
            shutil.rmtree(libs)
        try:
            os.rename(out, libs)         # atomic: the cache is either whole or absent
        except OSError as exc:
            if (exc.errno not in (errno.ENOTEMPTY, errno.EEXIST)
                    or not _cache_complete(libs, version)):
                raise
            # A concurrent fetch won the race; its copy is as good as ours.
        log.info("fetched %d jars in %.1f s", len(list(libs.glob("*.jar"))), time.monotonic() - t0)
        return libs
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _remove_stale_temp_dirs(parent: Path, older_than: float = 3600.0) -> None:
    """Temporary dirs of fetches that were killed (an hour old, so not a live fetch)."""
    now = time.time()
    for d in parent.glob(".fetch-*"):
        with contextlib.suppress(OSError):
            if now - d.stat().st_mtime > older_than:
                shutil.rmtree(d, ignore_errors=True)


def _tail_text(text: str, lines: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])

