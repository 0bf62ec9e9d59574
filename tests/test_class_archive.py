"""Spark's class-data archive (engine/class_archive.py), on a real JVM: built into a cache
of its own, proved by a JVM that must map it, named in a local driver's options; a
truncated or corrupted archive is refused before it could take its place."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from eos_runtime.engine import EngineConfig, class_archive
from eos_runtime.engine.class_archive import (
    LOCAL_DRIVER_JAVA_OPTIONS,
    archive_path,
    build,
    java_options,
)
from eos_runtime.engine.cluster import _plan, _spark_conf
from eos_runtime.errors import SetupError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_the_archive_is_built_proved_and_named_in_a_local_drivers_options(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOS_CACHE_DIR", str(tmp_path / "cache"))
    path = archive_path()
    assert path is not None and path.parent == tmp_path / "cache" / "spark-classes"
    assert java_options() == LOCAL_DRIVER_JAVA_OPTIONS    # none yet: the defaults alone

    write, classpaths = class_archive._write, []

    def recorded(target: Path, timeout: float) -> str:
        classpaths.append(write(target, timeout))
        return classpaths[-1]
    monkeypatch.setattr(class_archive, "_write", recorded)
    assert build() == path and path.is_file()     # proved by a JVM that mapped it
    assert list(path.parent.iterdir()) == [path]          # no temporary file left behind
    assert java_options() == f"{LOCAL_DRIVER_JAVA_OPTIONS} -XX:SharedArchiveFile={path}"
    local = EngineConfig()
    assert _spark_conf(local, _plan(local, 2), sys.executable, None)[
        "spark.driver.extraJavaOptions"] == java_options()
    cluster = EngineConfig(master="spark://127.0.0.1:7077")
    assert "spark.driver.extraJavaOptions" not in _spark_conf(
        cluster, _plan(cluster, 2), sys.executable, None)

    # A truncated archive crashes the JVM that maps it; a corrupted one maps, and fails
    # later, when a damaged class is used. The proof refuses both, and neither takes the
    # good one's place.
    good = path.read_bytes()
    flipped = bytearray(good)
    middle = len(good) // 2
    flipped[middle:middle + 64] = bytes(b ^ 0xFF for b in flipped[middle:middle + 64])
    for bad in (good[:1 << 20], bytes(flipped)):
        def made(target: Path, timeout: float, bad: bytes = bad) -> str:
            target.write_bytes(bad)
            return classpaths[0]
        monkeypatch.setattr(class_archive, "_write", made)
        with pytest.raises(SetupError, match="proving Spark's class-data archive failed"):
            build(force=True)
        assert list(path.parent.iterdir()) == [path] and path.read_bytes() == good
    assert list(Path.cwd().glob("hs_err*")) == []   # a crash's log went with its directory
