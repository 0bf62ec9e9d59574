"""A Python peer's interpreter: a venv of its own in the bench cache, installed on first use.

A peer (faust-streaming, PyFlink) brings its own pins; installed beside the runtime it
could change what the runtime is measured with, so, as for Quix, it lives in a venv of
its own: ``$EOS_CACHE_DIR/<dist>-<version>-py<X.Y>`` (else under ``~/.cache/eos_runtime``),
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

__all__ = ["venv_dir", "install", "run_step"]

_COMPLETE = ".eos-complete"


def venv_dir(dist: str, version: str) -> Path:
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    return cache_root() / f"{dist}-{version}-py{py}"


def install(dist: str, version: str) -> str:
    """The interpreter of ``dist==version``'s venv, installing it first if the cache has no
    whole venv. :class:`SetupError` says which step failed."""
    target = venv_dir(dist, version)
    python = target / "bin" / "python"
    if (target / _COMPLETE).is_file() and python.exists():
        return str(python)
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    run_step([sys.executable, "-m", "venv", str(target)], f"making a venv for {dist}")
    run_step([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
              f"{dist}=={version}"],
             f"installing {dist} {version} with pip (is PyPI reachable?)")
    (target / _COMPLETE).write_text(f"{dist} {version}\n")
    return str(python)


def run_step(cmd: list[str], what: str, timeout: float = 900, cwd: Path | None = None) -> None:
    """Run one step of a peer's set-up; :class:`SetupError` naming ``what`` and the
    output's tail when it fails."""
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SetupError(f"{what} failed: {exc}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).replace("\x1b[0m", "").strip()
                         .splitlines()[-10:])
        raise SetupError(f"{what} failed (exit {proc.returncode}):\n{' '.join(cmd)}\n{tail}")
