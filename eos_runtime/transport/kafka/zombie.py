"""The Kafka clients across the fork of a fault-injection zombie.

A fault-injection zombie (faults.py) is a fork of a task's process, and librdkafka's
threads do not survive a fork: the zombie's clients would never send or fetch again.
So just before the split every producer flushes (its queue empty, nothing is lost or
sent twice by the split), and in the zombie, before it stops, every client of every
open transport is made anew from its settings: a transactional producer with the same
transactional id, whose init_transactions fences the dying parent's and aborts its
open transaction, so the zombie opens it again and produces into it what the parent's
held (its journal); the successor's init_transactions, later, fences the zombie's, and
the broker refuses the zombie's late transactions as it would a real zombie's.
Consumers are assigned at the positions the old ones had reached. The old handles are
kept, never destroyed: destroying one joins threads that are gone.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any, Protocol

from ... import faults


class _Splits(Protocol):
    """An open transport, as the split sees it."""

    def _before_split(self) -> None: ...

    def _after_split(self) -> None: ...


#: Every open Kafka transport (``KafkaTransport`` adds itself once it is open).
_live: weakref.WeakSet[_Splits] = weakref.WeakSet()


def _abandon(handle: Any) -> None:
    """Never destroy ``handle``, not even when the interpreter exits: a reference that is
    never given back (a list would be emptied at shutdown, and the zombie hang there)."""
    if handle is not None:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(handle))


def _settle_before_split() -> None:
    for transport in list(_live):
        transport._before_split()


def _rebuild_after_split() -> None:
    for transport in list(_live):
        transport._after_split()


faults.on_split(_settle_before_split, _rebuild_after_split)
