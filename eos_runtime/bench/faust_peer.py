"""The faust-streaming peer's interpreter: a venv of its own, installed on first use.

faust-streaming brings aiokafka and its own pins; installed beside the runtime it could
change what the runtime is measured with, so, as for Quix, it lives in a venv of its own:
``$EOS_CACHE_DIR/faust-streaming-<version>-py<X.Y>`` (else under ``~/.cache/eos_runtime``),
made with this interpreter's ``venv`` and filled by ``pip`` from PyPI the first time a
bench runs the peer. A marker file written last says the venv is whole; a venv without it
(an install killed halfway) is made anew.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from ..broker.jars import cache_root
from ..errors import SetupError

__all__ = ["FAUST_VERSION", "venv_dir", "install"]

#: The faust-streaming release the bench measures (PyPI's newest when the peer was added).
FAUST_VERSION = "0.15.3"
_COMPLETE = ".eos-complete"


def venv_dir() -> Path:
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    return cache_root() / f"faust-streaming-{FAUST_VERSION}-py{py}"


def install() -> str:
    """The venv's interpreter, installing faust-streaming first if the cache has no whole
    venv. :class:`SetupError` says which step failed."""
    target = venv_dir()
    python = target / "bin" / "python"
    if (target / _COMPLETE).is_file() and python.exists():
        return str(python)
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "venv", str(target)], "making a venv for faust-streaming")
    _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
          f"faust-streaming=={FAUST_VERSION}"],
         f"installing faust-streaming {FAUST_VERSION} with pip (is PyPI reachable?)")
    (target / _COMPLETE).write_text(f"faust-streaming {FAUST_VERSION}\n")
    return str(python)


def _run(cmd: list[str], what: str) -> None:
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SetupError(f"{what} failed: {exc}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
        raise SetupError(f"{what} failed (exit {proc.returncode}):\n{' '.join(cmd)}\n{tail}")
