"""The accepted range of every numeric setting, checked where the setting is given.

A setting out of its range is refused at once with one line naming it and the range
(``ConfigError``; on the command line, click's usage error): before, ``--commit-interval
inf`` was accepted, recorded with the run, and every task then died with
``OverflowError``. Not a number, infinity, a negative count and a zero that means
nothing are refused, and so are values so large that a later computation overflows or
the run could never work (a billion tasks). Where 0 means "off" the range says so.

``check(name, value)`` for the Python API (``Pipeline``, ``key_by``, ``run_pipeline``,
``start_pipeline``); ``option(name)`` is the click type of the same range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import click

from .errors import ConfigError

__all__ = ["LIMITS", "Limit", "check", "option"]


@dataclass(frozen=True)
class Limit:
    low: float
    high: float
    integer: bool = False
    low_open: bool = False     # the low end itself is refused (seconds > 0)
    unit: str = ""
    zero: str = ""             # what 0 means, when it is accepted below ``low``

    def text(self) -> str:
        kind = "an integer" if self.integer else "a number"
        unit = f" of {self.unit}" if self.unit else ""
        low = f"> {_num(self.low)}" if self.low_open else f">= {_num(self.low)}"
        out = f"{kind}{unit} {low} and <= {_num(self.high)}"
        return out + (f", or 0 {self.zero}" if self.zero else "")

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.integer and not isinstance(value, int):
            return False
        if not math.isfinite(value):
            return False
        if self.zero and value == 0:
            return True
        above = value > self.low if self.low_open else value >= self.low
        return above and value <= self.high


def _num(x: float) -> str:
    return f"{int(x):,}".replace(",", " ") if float(x).is_integer() else f"{x:g}"


YEAR = 365 * 24 * 3600.0

#: Each numeric setting's range, by its Python name (the CLI's option is its dashed form).
LIMITS: dict[str, Limit] = {
    # The commit grid counts whole milliseconds; 1e9 s (31 years) means "never by timer".
    "commit_interval": Limit(0.001, 1e9, unit="seconds"),
    "commit_every": Limit(1, 2**31 - 1, integer=True, zero="for none"),
    "parallelism": Limit(1, 10_000, integer=True),
    "partitions": Limit(1, 10_000, integer=True),
    "sink_partitions": Limit(1, 10_000, integer=True),
    "max_attempts": Limit(1, 1_000, integer=True),
    "buffer_max_bytes": Limit(1, 2**40, integer=True),
    "poll_records": Limit(1, 1_000_000, integer=True),
    "channel_batch": Limit(1, 1_000_000, integer=True),
    # A driver renews every third of it: under a second would be a storm of heartbeats.
    "lease_timeout": Limit(1, YEAR, unit="seconds"),
    "outage_budget": Limit(0, YEAR, unit="seconds"),
    "no_progress_timeout": Limit(0, YEAR, low_open=True, unit="seconds", zero="for none"),
    "progress_interval": Limit(0, 3600, unit="seconds"),
    # eos experiment and eos bench
    "rate": Limit(0, 10_000_000, low_open=True, unit="records per second"),
    "lines": Limit(1, 10**9, integer=True),
    "runs": Limit(1, 1_000_000, integer=True),
    "faults": Limit(0, 10_000, integer=True),
    "records": Limit(1, 10**10, integer=True),
    "state_keys": Limit(1, 10**9, integer=True),
    "vocabulary_size": Limit(1, 10**8, integer=True),
    "probe_every": Limit(1, 10_000_000, unit="records"),
    "steady_seconds": Limit(1, YEAR, unit="seconds"),
    "idle_timeout": Limit(1, YEAR, unit="seconds"),
    "bench_commit_interval": Limit(0.05, 3600, unit="seconds"),
    "bench_rate": Limit(1, 10_000_000, unit="records per second"),
    # eos kafka: up waits this long for the broker's answer; down, between SIGTERM and
    # SIGKILL (0: kill at once)
    "broker_start_timeout": Limit(0, YEAR, low_open=True, unit="seconds"),
    "broker_stop_timeout": Limit(0, YEAR, unit="seconds"),
}


def check(name: str, value: Any, *, what: str | None = None) -> Any:
    """``value`` if it is in ``name``'s range, else ``ConfigError`` naming it (as
    ``what``, default ``name``) and the range. Integral floats stay as given."""
    limit = LIMITS[name]
    if not limit.accepts(value):
        raise ConfigError(f"{what or name} {value!r}: give {limit.text()}")
    return value


class _Option(click.ParamType):
    def __init__(self, name: str) -> None:
        self.limit = LIMITS[name]
        self.name = "integer" if self.limit.integer else "float"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number: Any = value
        else:
            try:
                number = int(value) if self.limit.integer else float(value)
            except (TypeError, ValueError):
                self.fail(f"{value!r}: give {self.limit.text()}", param, ctx)
        if not self.limit.accepts(number):
            self.fail(f"{value!r}: give {self.limit.text()}", param, ctx)
        return number


def option(name: str) -> click.ParamType:
    """The click type that accepts ``name``'s range (``LIMITS``)."""
    return _Option(name)
