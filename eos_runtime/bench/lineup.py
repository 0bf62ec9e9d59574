"""Every system of a bench, by name, in the order a bench runs them."""

from __future__ import annotations

from .kafka_streams import COMMIT_INTERVALS
from .peers import (
    FaustSystem,
    KafkaStreamsSystem,
    PyFlinkSystem,
    QuixSystem,
    SparkStructuredStreaming,
)
from .systems import EosSystem, RawSystem, System

__all__ = ["all_systems", "SYSTEM_NAMES"]


def all_systems(*, quix_python: str | None = None) -> dict[str, System]:
    """Every system by name, in the order the bench runs them."""
    systems: list[System] = [EosSystem("exactly-once"), EosSystem("at-least-once"), RawSystem(),
                             QuixSystem("exactly-once", quix_python),
                             QuixSystem("at-least-once", quix_python),
                             SparkStructuredStreaming(),
                             *(KafkaStreamsSystem(i) for i in COMMIT_INTERVALS),
                             FaustSystem(), PyFlinkSystem()]
    return {s.name: s for s in systems}


SYSTEM_NAMES = list(all_systems())
