"""Spark's class-data archive (engine/class_archive.py), on a real JVM: built into a cache
of its own, proved, named in a local driver's options, and mapped by the JVM that starts
with them; a truncated archive is refused before it could be put in place."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eos_runtime.engine import EngineConfig, TaskAttempt
from eos_runtime.engine.class_archive import (
    LOCAL_DRIVER_JAVA_OPTIONS,
    _run,
    archive_path,
    build,
    java_options,
)
from eos_runtime.engine.cluster import _plan, _spark_conf
from eos_runtime.errors import SetupError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def mapped_archives(task: TaskAttempt) -> bytes:
    """The class-data archives the JVM running this worker maps, and its options."""
    pid = os.getppid()
    while pid > 1:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if cmd[0].endswith(b"java"):
            maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
            files = sorted({line.split()[-1] for line in maps if line.endswith(".jsa")})
            return json.dumps({"maps": files, "args": [c.decode() for c in cmd]}).encode()
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return b"{}"


_JOB = """
import json, sys
sys.path.insert(0, sys.argv[1])
from test_class_archive import mapped_archives
from eos_runtime.engine import EngineConfig, run_tasks
print(run_tasks(mapped_archives, [b""], EngineConfig())[0].decode())
"""


def test_the_archive_is_built_proved_and_mapped_by_a_local_drivers_jvm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOS_CACHE_DIR", str(tmp_path / "cache"))
    path = archive_path()
    assert path is not None and path.parent == tmp_path / "cache" / "spark-classes"
    assert java_options() == LOCAL_DRIVER_JAVA_OPTIONS    # none yet: the defaults alone

    assert build() == path and path.is_file()
    assert list(path.parent.iterdir()) == [path]          # no temporary file left behind
    assert java_options() == f"{LOCAL_DRIVER_JAVA_OPTIONS} -XX:SharedArchiveFile={path}"
    local = EngineConfig()
    assert _spark_conf(local, _plan(local, 2), sys.executable, None)[
        "spark.driver.extraJavaOptions"] == java_options()
    cluster = EngineConfig(master="spark://127.0.0.1:7077")
    assert "spark.driver.extraJavaOptions" not in _spark_conf(
        cluster, _plan(cluster, 2), sys.executable, None)

    # a fresh process, so a fresh JVM: it maps the archive it was given
    out = subprocess.run([sys.executable, "-c", _JOB, str(Path(__file__).parent)],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "EOS_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert f"-XX:SharedArchiveFile={path}" in seen["args"]
    assert str(path) in seen["maps"], seen["maps"]

    # a truncated archive crashes the JVM that maps it: the proof refuses it
    cut = tmp_path / "cut.jsa"
    cut.write_bytes(path.read_bytes()[:1 << 20])
    with pytest.raises(SetupError, match="proving Spark's class-data archive failed"):
        _run(["_prove", str(cut)], 300, "proving")
