"""File handshakes between engine test tasks (they run in other processes, so they meet
through files): imported by the task functions of the Spark tests, on workers too."""

from __future__ import annotations

import os
import time
from pathlib import Path


def wait_for(paths: list[Path], what: str, wait: float) -> None:
    """Until every path exists; a task waiting for its peers gives up after ``wait``
    seconds, so a deadlock fails instead of hanging."""
    deadline = time.monotonic() + wait
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline:
            missing = [p.name for p in paths if not p.exists()]
            raise TimeoutError(f"{what}: still missing {missing} after {wait} s")
        time.sleep(0.05)


def touch(path: Path, text: str = "") -> None:
    """Create ``path`` with ``text`` atomically (a reader never sees it half written)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
