"""What Spark's launcher runs: the java it finds, and the pip-installed pyspark's jars."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from ..errors import SetupError

__all__ = ["pyspark_home", "spark_java"]


def spark_java() -> str:
    """``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else java on PATH, as Spark's
    launcher picks it. ``SetupError`` naming what to fix when there is none."""
    home = os.environ.get("JAVA_HOME", "")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise SetupError(f"Spark needs Java 17 or 21, but JAVA_HOME={home} has no "
                             f"bin/java: fix JAVA_HOME or unset it to use java from PATH")
        return java
    on_path = shutil.which("java")
    if on_path is None:
        raise SetupError("Spark needs Java 17 or 21: no java on PATH and JAVA_HOME is not set")
    return on_path


def pyspark_home() -> Path:
    """The pip-installed pyspark directory (it holds ``jars/`` and ``bin/``)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise SetupError("pyspark is not installed in this Python")
    home = Path(list(spec.submodule_search_locations)[0])
    if not (home / "jars").is_dir():
        raise SetupError(f"pyspark at {home} has no jars/ directory: install pyspark from "
                         f"PyPI (pip install pyspark), not a jar-less build")
    return home
