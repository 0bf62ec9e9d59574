"""Percentiles of a list of latencies, as every bench report gives them (below the
workloads and the measures that time them, so each can import it)."""

from __future__ import annotations

import statistics
from typing import Any

__all__ = ["percentiles"]


def percentiles(values: list[int]) -> dict[str, Any]:
    """count, p50, p90, p99, max (nearest rank) and the sorted values, at most 200 kept
    evenly for a CDF."""
    xs = sorted(values)
    if not xs:
        return {"count": 0}

    def rank(q: float) -> int:
        return xs[min(len(xs) - 1, max(0, int(q * len(xs) + 0.999999) - 1))]

    keep = xs if len(xs) <= 200 else [xs[int(i * (len(xs) - 1) / 199)] for i in range(200)]
    return {"count": len(xs), "p50": rank(0.5), "p90": rank(0.9), "p99": rank(0.99),
            "max": xs[-1], "mean": round(statistics.fmean(xs), 1), "cdf": keep}
