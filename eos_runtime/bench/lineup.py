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
from .targets import EO_AT_INTERVAL, EO_INTERVAL

__all__ = ["all_systems", "DEFAULT_SYSTEMS", "SYSTEM_NAMES"]


def all_systems(*, quix_python: str | None = None) -> dict[str, System]:
    """Every system by name, in the order the bench runs them."""
    systems: list[System] = [EosSystem("exactly-once"), EosSystem("at-least-once"),
                             EosSystem("exactly-once", EO_INTERVAL), RawSystem(),
                             QuixSystem("exactly-once", quix_python),
                             QuixSystem("at-least-once", quix_python),
                             SparkStructuredStreaming(),
                             *(KafkaStreamsSystem(i) for i in COMMIT_INTERVALS),
                             FaustSystem(), PyFlinkSystem()]
    return {s.name: s for s in systems}


SYSTEM_NAMES = list(all_systems())
#: A bench without --systems: all of them but the one at a fixed interval, which is
#: eos-exactly-once again at the default interval (give it with --commit-interval 0.1).
DEFAULT_SYSTEMS = [name for name in SYSTEM_NAMES if name != EO_AT_INTERVAL]
