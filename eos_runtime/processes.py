"""Helpers for the child processes the project starts itself (the Kafka broker, a Spark
standalone cluster)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

__all__ = ["parent_death_signal_hook"]


def parent_death_signal_hook() -> Callable[[], None] | None:
    """A preexec_fn making the child get SIGTERM when its parent dies (Linux), or None."""
    if sys.platform != "linux":
        return None
    import ctypes
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl   # loaded here, not in the child
    except (OSError, AttributeError):
        return None

    def hook() -> None:
        prctl(1, int(signal.SIGTERM))                      # PR_SET_PDEATHSIG
    return hook
