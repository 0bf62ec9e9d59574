"""The local Spark driver's class-data archive: Spark's classes, parsed once, mapped at start.

A local job's JVM spends most of its start loading and verifying some ten thousand of
Spark's classes. Java's class-data sharing (CDS) keeps them, already parsed, in an
archive file that a later JVM maps instead: the SparkContext comes up in about half the
time (docs/engine.md has the measurements).

``build`` makes the archive by running a one-task local job whose JVM writes the classes
it loaded at its exit (``-XX:ArchiveClassesAtExit``), then proves the file with a JVM of
the same java, options and classpath that must map it and check its checksums, and only
then renames it into place: a truncated archive does not fail gracefully, it crashes the
JVM that maps it (SIGBUS in JDK 17). ``java_options`` adds the archive to a local
driver's options when it is there.

The archive is only valid for one JVM build and one set of Spark jars where they are,
so its name is a digest of both: after an upgrade of either, ``java_options`` finds no
archive and the driver starts as before, until ``build`` runs again. Each venv (each
checkout) has an archive of its own, some 70 MB; none is deleted. A JVM that finds the archive
unusable anyway (another classpath: a user's ``spark.driver.extraClassPath``) ignores
it: sharing is ``auto``.

    python -c "from eos_runtime.engine.class_archive import main; main()"   # build it

(scripts/bootstrap does, once.)
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..cache import cache_root
from ..errors import SetupError
from .java import pyspark_home, spark_java

__all__ = ["archive_path", "build", "java_options", "prove", "LOCAL_DRIVER_JAVA_OPTIONS"]

#: The JVM options of a local job's driver (where its executors run too), unless the
#: user's ``spark.driver.extraJavaOptions`` says otherwise: C1 only and the serial
#: collector (the JVM only schedules tasks and relays a few bytes each; docs/engine.md).
LOCAL_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def archive_path() -> Path | None:
    """Where the archive of this machine's java and pyspark is (or would be); None when
    either is missing."""
    try:
        return _archive_of(spark_java(), pyspark_home())
    except SetupError:
        return None


def _archive_of(java_path: str, home: Path) -> Path:
    """The archive's path for ``java_path`` and the pyspark at ``home``. The name digests
    the JVM's library and every Spark jar (name, size, modification time): what the JVM
    itself checks before it maps the archive."""
    java = Path(os.path.realpath(java_path))
    digest = hashlib.sha256(LOCAL_DRIVER_JAVA_OPTIONS.encode())
    libjvm = java.parent.parent / "lib" / "server" / "libjvm.so"
    for path in [java, libjvm, *sorted((home / "jars").iterdir())]:
        try:
            st = path.stat()
        except OSError:
            continue
        digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return cache_root() / "spark-classes" / f"{digest.hexdigest()[:20]}.jsa"


def java_options() -> str:
    """A local driver's default JVM options: ``LOCAL_DRIVER_JAVA_OPTIONS``, and the
    class-data archive once ``build`` made it."""
    path = archive_path()
    if path is None or not path.is_file() or any(c.isspace() for c in str(path)):
        return LOCAL_DRIVER_JAVA_OPTIONS   # Spark splits the options at whitespace
    return f"{LOCAL_DRIVER_JAVA_OPTIONS} -XX:SharedArchiveFile={path}"


def build(*, force: bool = False, timeout: float = 300.0) -> Path:
    """Make the archive (unless it is there already and ``force`` is not given); returns
    its path. ``SetupError`` when java or pyspark is missing or the archive could not be
    made or proved."""
    path = _archive_of(spark_java(), pyspark_home())   # SetupError naming what is missing
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".jsa", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    tmp.unlink()   # a unique name for the JVM to write
    try:
        classpath = _write(tmp, timeout)
        if not tmp.is_file():
            raise SetupError(f"the Spark JVM wrote no class-data archive to {tmp}")
        prove(tmp, classpath, timeout)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    # Other archives stay: another checkout's venv, whose jars are elsewhere, maps its own.
    return path


def _write(target: Path, timeout: float) -> str:
    """A one-task job's JVM writes the archive to ``target``; returns its classpath."""
    out = _run([sys.executable, "-c", _MAIN, "_dump", str(target)], timeout, "writing")
    return out.strip().splitlines()[-1]


def prove(archive: Path, classpath: str, timeout: float = 120.0) -> None:
    """A JVM of the driver's java, options and classpath must map ``archive`` and check
    its checksums (``-Xshare:on``: a JVM that cannot fails to start); ``SetupError`` if
    it does not."""
    _run([spark_java(), *LOCAL_DRIVER_JAVA_OPTIONS.split(), f"-XX:SharedArchiveFile={archive}",
          "-Xshare:on", "-XX:+VerifySharedSpaces", "-cp", classpath, "-version"],
         timeout, "proving")


_MAIN = f"from {__name__} import main; main()"


def _run(cmd: list[str], timeout: float, what: str) -> str:
    """``cmd``'s stdout; ``SetupError`` with its output's tail if it fails."""
    # in a directory of its own: a JVM that crashes on a bad archive leaves its
    # hs_err_pid*.log in its working directory
    with tempfile.TemporaryDirectory(prefix="eos-class-archive-") as cwd:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, cwd=cwd)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SetupError(f"{what} Spark's class-data archive failed (exit "
                         f"{proc.returncode}):\n{tail}")
    return proc.stdout


def _nothing(task: object) -> bytes:
    return b""


def _dump(target: str) -> None:
    """A one-task local job whose JVM writes the classes it loaded to ``target`` at its
    exit; returns once the JVM has exited, and prints its classpath (the proof's)."""
    from pyspark import SparkContext

    from . import EngineConfig, run_tasks
    options = f"{LOCAL_DRIVER_JAVA_OPTIONS} -XX:ArchiveClassesAtExit={target}"
    run_tasks(_nothing, [b""], EngineConfig(
        conf={"spark.driver.extraJavaOptions": options}, no_progress_timeout=None))
    proc = SparkContext._gateway.proc   # type: ignore[union-attr]
    args = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode().split("\0")
    # close its stdin, on which it exits, and wait: the archive is written at its exit
    proc.stdin.close()
    proc.wait(timeout=120)
    print(args[args.index("-cp") + 1])


def main(argv: list[str] | None = None) -> None:
    """Build the archive and print its path (``--force``: again, even if it is there);
    ``_dump`` is ``build``'s own step."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "_dump":
        _dump(args[1])
    else:
        force = "--force" in args
        path = archive_path()
        if force or path is None or not path.is_file():
            print("building Spark's class-data archive, once (half a minute) ...",
                  file=sys.stderr, flush=True)
        print(build(force=force))
