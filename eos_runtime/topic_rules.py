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
    if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"pipeline name {name!r}: use letters, digits, - and _")
