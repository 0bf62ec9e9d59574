"""Where eos_runtime caches what it fetches or builds once per machine: the Kafka jars, the
peers' builds, Spark's class-data archive."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]

_ENV_CACHE = "EOS_CACHE_DIR"


def cache_root() -> Path:
    """``$EOS_CACHE_DIR``, else ``$XDG_CACHE_HOME/eos_runtime`` (``~/.cache/eos_runtime``)."""
    env = os.environ.get(_ENV_CACHE)
    if env:
        return Path(env).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "eos_runtime").absolute()
