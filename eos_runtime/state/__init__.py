"""A task's local keyed state on RocksDB: staged in memory, committed with the checkpoint
data in one atomic batch (see ``store.py`` and docs/state.md)."""

from __future__ import annotations

from .store import CHECKPOINT_KEY, META_FAMILY, RESERVED_PREFIX, StateError, StateLocked, TaskStore

__all__ = ["TaskStore", "StateError", "StateLocked", "META_FAMILY", "RESERVED_PREFIX",
           "CHECKPOINT_KEY"]
