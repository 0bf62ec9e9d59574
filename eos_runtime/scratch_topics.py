"""The topics a throwaway job made on a Kafka broker, and their removal.

``eos demo`` and every ``eos experiment`` run make a job of their own, named with a fresh
random suffix, and its topics: the input and output topics they name after the job
(``<job>-<topic>``), and what the runtime makes for it (``<job>.control``, ``.heartbeats``,
``.changelog``, ``.shuffle-N``, ``.metadata``, ``.dead-letters``, the checkpoint topic
``__eos_checkpoint_<job>_<id>``; a chained workload's job B is ``<job>-b``). On the local
log they live in a directory of the run's own, removed with it; on a shared broker they
would crowd ``eos jobs`` and ``eos topics`` run after run.

A topic is taken for the run's only when both hold: it did not exist when the run's job
was made (the list is taken then), and it is named after the job. A command deletes
only what it made.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .joblog.checkpoints import checkpoint_topic
from .transport import Transport, open_transport

__all__ = ["ScratchTopics", "named_after"]


def named_after(job: str, topics: Iterable[str]) -> list[str]:
    """The topics among ``topics`` that a run of ``job`` names after it, sorted."""
    checkpoints = checkpoint_topic(job, "")   # the job id follows
    return sorted(t for t in topics if t.startswith((f"{job}.", f"{job}-", checkpoints)))


class ScratchTopics:
    """Made when the job is, before anything of it exists: ``made()`` and ``remove()``
    then answer for what appeared since. On the local log both are empty: the caller
    removes the run's directory, which holds every topic. A job's checkpoint topic, of
    whatever job id, is named after the job too (``named_after``)."""

    def __init__(self, transport_opts: dict[str, Any], job: str) -> None:
        self.job = job
        self.opts = transport_opts if "bootstrap_servers" in transport_opts else None
        self.before: set[str] = set()
        if self.opts is not None:
            with open_transport(**self.opts) as t:
                self.before = set(self._named(t))

    def _named(self, t: Transport) -> list[str]:
        return named_after(self.job, t.list_topics())

    def made(self) -> list[str]:
        if self.opts is None:
            return []
        with open_transport(**self.opts) as t:
            return sorted(n for n in self._named(t) if n not in self.before)

    def remove(self) -> list[str]:
        """Delete what the run made; the topics deleted."""
        if self.opts is None:
            return []
        with open_transport(**self.opts) as t:
            return t.delete_topics(sorted(n for n in self._named(t) if n not in self.before))
