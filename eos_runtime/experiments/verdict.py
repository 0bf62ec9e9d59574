"""A verdict: what the verifier (``verify.py``) counted of a run's output, and what it
shares with the event-time workloads' own judges (``window_workloads.py``).

Apart from ``verify.py`` so those judges import it at load: ``verify.py`` imports
``workloads.py``, which registers the event-time workloads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..transport import Record

__all__ = ["EXAMPLES", "Verdict", "since"]

EXAMPLES = 5   # values shown per key and category in a report


@dataclass
class Verdict:
    guarantee: str
    passed: bool = False
    keys: int = 0                  # the oracle's
    expected: int = 0              # results the oracle expects
    committed: int = 0             # results the reader sees
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    out_of_order: int = 0
    unexpected_keys: int = 0
    bad_keys: list[dict[str, Any]] = field(default_factory=list)   # the first few, with examples
    raw: dict[str, Any] | None = None    # the cross-check against every record written
    # a workload with bad records: {"expected": letters, "committed": letters read}
    dead_letters: dict[str, int] | None = None

    def counts(self) -> dict[str, int]:
        return {"lost": self.lost, "duplicated": self.duplicated,
                "unexpected": self.unexpected, "out_of_order": self.out_of_order}

    def reasons(self) -> list[str]:
        """Why it failed, in words ([] when it passed)."""
        if self.passed:
            return []
        out = [f"{n:,} {what.replace('_', '-')}" for what, n in self.counts().items() if n]
        if self.unexpected_keys:
            out.append(f"{self.unexpected_keys} unexpected keys")
        if self.raw and self.raw.get("phantom"):
            out.append(f"{self.raw['phantom']} committed records not in the topic")
        return out or ["failed"]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def since(records: list[Record], marks: dict[int, int] | None) -> list[Record]:
    """The records at or past ``marks`` (partition -> offset; None: all of them)."""
    if not marks:
        return records
    return [r for r in records if r.offset >= marks.get(r.partition, 0)]
