"""The java Spark's launcher runs, found as the launcher finds it."""

from __future__ import annotations

import os
import shutil

from ..errors import SetupError

__all__ = ["spark_java"]


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
