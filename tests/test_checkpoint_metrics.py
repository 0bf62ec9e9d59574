"""The per-checkpoint metrics' distributions: exact count, mean and max, a bounded
sample for the percentiles however long a run is."""

from __future__ import annotations

from eos_runtime.runtime.metrics import KEEP, CheckpointMetrics, Distribution


def test_a_distribution_summarises_what_it_was_given():
    d = Distribution()
    for x in range(1, 101):
        d.add(x)
    s = d.summary()
    assert (s["count"], s["mean"], s["max"]) == (100, 50.5, 100)
    assert 49 <= s["p50"] <= 52 and 89 <= s["p90"] <= 92 and 98 <= s["p99"] <= 100


def test_a_long_run_keeps_a_bounded_sample_and_exact_totals():
    d = Distribution()
    n = KEEP * 10
    for x in range(n):
        d.add(x % 1000)
    assert len(d._sample) < KEEP
    s = d.summary()
    assert s["count"] == n and s["max"] == 999
    assert s["mean"] == round(sum(x % 1000 for x in range(n)) / n, 3)
    assert 450 <= s["p50"] <= 550


def test_only_measured_metrics_are_reported():
    m = CheckpointMetrics()
    m.record(duration_ms=3.0, commit_ms=1.0, alignment_ms=None)
    assert set(m.summary()) == {"duration_ms", "commit_ms"}


def test_every_metric_is_in_the_cli_docs_table():
    from pathlib import Path

    from eos_runtime.runtime.metrics import METRICS
    table = (Path(__file__).parent.parent / "docs" / "cli.md").read_text()
    assert [n for n in METRICS if f"| `{n}` |" not in table] == []
