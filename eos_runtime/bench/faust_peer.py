"""The faust-streaming peer's interpreter: a venv of its own, installed on first use
(bench/peer_venv.py): ``$EOS_CACHE_DIR/faust-streaming-<version>-py<X.Y>``. faust-streaming
brings aiokafka and its own pins, which must not change what the runtime is measured with.
"""

from __future__ import annotations

from pathlib import Path

from . import peer_venv

__all__ = ["FAUST_VERSION", "venv_dir", "install"]

#: The faust-streaming release the bench measures (PyPI's newest when the peer was added).
FAUST_VERSION = "0.15.3"
_DIST = "faust-streaming"


def venv_dir() -> Path:
    return peer_venv.venv_dir(_DIST, FAUST_VERSION)


def install() -> str:
    """The venv's interpreter, installing faust-streaming first if the cache has no whole
    venv. :class:`SetupError` says which step failed."""
    return peer_venv.install(_DIST, FAUST_VERSION)
