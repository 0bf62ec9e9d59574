"""A pipeline's name and topic rules, checked where it is written, renamed and planned."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .errors import ConfigError


def check_sinks_not_read(sources: Sequence[str], tables: Sequence[str],
                         sinks: Sequence[str]) -> None:
    """Refuse a sink the job also reads: its output would feed its input, and a committed
    record cannot be taken back, so the loop would be in the topic for good."""
    for kind, topics in (("source", sources), ("table", tables)):
        for topic in sinks:
            if topic in topics:
                raise ConfigError(f"sink {topic!r} is the job's own {kind}: its output would "
                                  f"be appended to its input for good; give the sink another "
                                  f"topic (eos run --sink TOPIC)")


def kept_for(job: str, topic: str) -> str | None:
    """What the runtime keeps ``topic`` for in ``job`` (its change log, control topic,
    ...), or None for a topic of the user's. Nothing but the runtime may write these:
    a record of another kind there is one recovery or a run's start cannot read."""
    kinds = {"changelog": "change log", "control": "control topic",
             "heartbeats": "lease heartbeats", "metadata": "Startpoints",
             "dead-letters": "default dead-letter topic"}
    prefix = f"{job}."
    if topic.startswith(prefix):
        rest = topic[len(prefix):]
        if rest in kinds:
            return kinds[rest]
        if rest.startswith("shuffle-"):
            return "channel"
    if topic.startswith(f"__eos_checkpoint_{job}_"):
        return "checkpoint topic"
    return None


def check_outputs_not_kept(job: str, sinks: Sequence[str], dead_letters: str | None,
                           read: Sequence[str]) -> None:
    """Refuse a sink, or a dead-letter topic, that is a topic the runtime keeps for the
    job; and a dead-letter topic the job also reads or writes (``read``: its sources and
    tables)."""
    for topic in sinks:
        kind = kept_for(job, topic)
        if kind is not None:
            raise ConfigError(f"sink {topic!r} is the {kind} of job {job!r}, which only "
                              f"the runtime writes: give the sink another topic")
    if dead_letters is None:
        return
    kind = kept_for(job, dead_letters)
    if kind is not None and dead_letters != f"{job}.dead-letters":
        raise ConfigError(f"dead-letter topic {dead_letters!r} is the {kind} of job "
                          f"{job!r}, which only the runtime writes: give it a topic of its own")
    if dead_letters in {*sinks, *read}:
        raise ConfigError(f"dead-letter topic {dead_letters!r} is also an input or output of "
                          f"the job: give it a topic of its own")


def check_inputs_not_kept(job: str, sources: Sequence[str], tables: Sequence[str]) -> None:
    """Refuse a source or table that is a topic the runtime keeps for the job itself: read
    back, its own channel loops, and its change log or control records are no user's."""
    for what, topics in (("source", sources), ("table", tables)):
        for topic in topics:
            kind = kept_for(job, topic)
            if kind is not None:
                raise ConfigError(f"{what} {topic!r} is the {kind} of job {job!r} itself, "
                                  f"which the runtime keeps for it: a job cannot read it; "
                                  f"read another topic, or read it from another job")


def check_moves(job: str, what: str, moves: Mapping[str, str], known: list[str]) -> None:
    """Refuse a rename of a topic the pipeline does not have, to nothing, or onto another."""
    for old, new in moves.items():
        if old not in known:
            raise ConfigError(f"pipeline {job!r} has no {what} {old!r} to move to {new!r}; "
                              f"its {what}s: {', '.join(sorted(known))}")
        if not isinstance(new, str) or not new:
            raise ConfigError(f"{what} {old!r}: a new topic must be a non-empty string, "
                              f"not {new!r}")
    targets = [moves.get(t, t) for t in known]
    if len(set(targets)) < len(targets):
        raise ConfigError(f"pipeline {job!r}: two {what}s would be one topic "
                          f"({', '.join(sorted(targets))})")


def check_name(name: object) -> None:
    if not isinstance(name, str) or not name.isascii() or \
            not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"pipeline name {name!r}: use letters, digits, - and _ (ASCII)")
