"""eos bench's memory measure as a state-growth curve (issue 26: throughput, CPU per result
and peak memory at 10³ to 10⁷ keys): the sizes it takes, the input of each, the report's
points and the targets judged on them. Pure: no broker, no system runs."""

from __future__ import annotations

import pytest

from eos_runtime.bench import more_measures as more
from eos_runtime.bench.targets import ROCKSDB_TASK_MB, STATE_TASK_MB, judge
from eos_runtime.bench.workloads import WORKLOADS, aggregate_input
from eos_runtime.cli.bench import parse_state_keys
from eos_runtime.errors import ConfigError


def test_state_keys_are_a_list_of_sizes_or_one_size_and_ten_times_it():
    assert parse_state_keys("100000") == [100_000, 1_000_000]
    assert parse_state_keys("10000000, 1000,100000,1000000") == \
        [1_000, 100_000, 1_000_000, 10_000_000]
    assert parse_state_keys("1_000,1000,10_000") == [1_000, 10_000]
    for bad in ("0", "many", "", "1000,", "-5", "2000000000"):
        with pytest.raises(ConfigError, match="--state-keys"):
            parse_state_keys(bad)


def test_the_aggregate_input_draws_its_keys_from_the_space_given():
    got = aggregate_input(20_000, 1_000, seed=3)
    assert len(got) == 20_000 and got == aggregate_input(20_000, 1_000, seed=3)
    keys = {v for _, v in got}
    assert len(keys) == 1_000 and all(k.startswith(b"k") and int(k[1:]) < 1_000 for k in keys)
    # two records a key: 1 - e^-2 of the space is drawn
    assert 8_400 < len({v for _, v in aggregate_input(20_000, 10_000, seed=3)}) < 8_900
    # the workload's own input, two records a key, is the same draw
    assert WORKLOADS["aggregate"].generate(2_000, 7) == aggregate_input(2_000, 1_000, 7)


def _runs(system: str, curve: list[tuple[int, float, float, float]]) -> list[dict]:
    """A memory run per (key space, peak MiB, events/s, CPU seconds) of 1 000 results."""
    return [{"measure": "memory", "workload": "aggregate", "system": system,
             "guarantee": "exactly-once", "round": 1, "verified": True, "error": None,
             "state_keys": int(space * 0.86), "key_space": space, "input_records": 1_000,
             "results_expected": 1_000, "peak_rss_bytes": int(mb * 2**20),
             "throughput": speed, "cpu_seconds": cpu} for space, mb, speed, cpu in curve]


CURVE = [(1_000, 600, 100_000, 0.005), (100_000, 640, 95_000, 0.006),
         (1_000_000, 700, 90_000, 0.007), (10_000_000, 780, 75_000, 0.009)]


def test_each_state_size_is_a_point_with_memory_throughput_and_cpu_per_result():
    (row,) = more.summarize_memory(_runs("eos-exactly-once", CURVE))
    assert [(p["key_space"], p["peak_rss_mb"], p["throughput"], p["cpu_us_per_result"])
            for p in row["points"]] == [(1_000, 600, 100_000, 5.0), (100_000, 640, 95_000, 6.0),
                                        (1_000_000, 700, 90_000, 7.0),
                                        (10_000_000, 780, 75_000, 9.0)]
    assert row["growth"] == 1.3 and row["throughput_kept"] == 0.75
    table = "\n".join(more.markdown_sections({"memory": [row]}))
    assert "| 8,600,000 | 1,000 | 780 | 75,000 | 9.0 |" in table


def test_each_rounds_peak_is_split_by_kind_of_process():
    """A round's peak over budget is explained by the processes it moved in: the report
    splits each round's peak by kind (the JVMs, the Python under them, the others)."""
    runs = _runs("eos-exactly-once", CURVE[:1] * 2)
    for n, (r, jvm) in enumerate(zip(runs, (350, 380), strict=True), 1):
        r["round"] = n
        r["peak_rss_by_kind_bytes"] = {"java": jvm * 2**20,
                                       "python under java": (600 - jvm) * 2**20}
    (row,) = more.summarize_memory(runs)
    assert row["points"][0]["per_round_mb_by_kind"] == [
        {"java": 350.0, "python under java": 250.0}, {"java": 380.0, "python under java": 220.0}]
    report = "\n".join(more.markdown_sections({"memory": [row]}))
    assert "## Each round's peak memory, by process" in report
    assert "| eos-exactly-once | 860 | 2 | 600 | 380 | 220 | 0 |" in report
    # runs measured before the split: no such section
    (old,) = more.summarize_memory(_runs("eos-exactly-once", CURVE[:1]))
    assert "by process" not in "\n".join(more.markdown_sections({"memory": [old]}))


def _targets(curve: list, partitions: int = 2) -> dict[str, dict]:
    runs = _runs("eos-exactly-once", curve)
    result = {"settings": {"partitions": partitions, "rounds": {"memory": 3},
                           "commit_interval": 1.0},
              "memory": more.summarize_memory(runs)}
    return {r["target"].split(": ", 1)[1].split(" (")[0]: r for r in judge(result)
            if r["target"].startswith("eos-exactly-once: ")}


def test_the_state_growth_targets_are_judged_on_the_curve():
    got = _targets(CURVE)
    kept = got["throughput as state grows from 10³ to 10⁷ keys ≥ 0.7 × its throughput at 10³"]
    assert kept["met"] is True and kept["value"] == 0.75
    budget = got["peak memory grows by at most the state's budget as state grows"]
    assert budget["met"] is True and budget["value"] == 180   # 780 - 600 <= 2 x 208
    # two 64 MiB memtables and a 32 MiB cache, 16 MiB of recent values, and the producer's
    # 32 MiB queue
    assert "416 MiB" in budget["target"] and (ROCKSDB_TASK_MB, STATE_TASK_MB) == (160, 208)
    assert "the producer's queue" in budget["target"]
    tenfold = got["peak memory within ±20 % as state grows 10×"]   # 10⁵ -> 10⁶, not 10³ -> 10⁵
    assert tenfold["met"] is True and tenfold["value"] == round(700 / 640, 3)

    slow = _targets([*CURVE[:3], (10_000_000, 1_100, 69_000, 0.009)])
    assert slow["throughput as state grows from 10³ to 10⁷ keys ≥ 0.7 × its throughput "
                "at 10³"]["met"] is False
    assert slow["peak memory grows by at most the state's budget as state grows"]["met"] is False
    # one stateful task per partition: a budget per task (500 MiB: more than 2 x 208,
    # less than 3 x 208)
    assert _targets([*CURVE[:3], (10_000_000, 1_100, 69_000, 0.009)], partitions=3)[
        "peak memory grows by at most the state's budget as state grows"]["met"] is True


def test_a_curve_too_short_for_a_target_is_not_measured_never_met():
    got = _targets(CURVE[1:3])   # 10⁵ and 10⁶: one 10× step, no 10⁴ span
    assert got["peak memory within ±20 % as state grows 10×"]["met"] is True
    short = got["throughput as state grows from 10³ to 10⁷ keys ≥ 0.7 × its throughput at 10³"]
    assert short["met"] is None and "less than 10,000×" in short["measured"]
    lone = _targets(CURVE[:1])
    assert [r["measured"] for k, r in lone.items() if "state grows" in k] == \
        ["not measured: one state size only"] * 3
    skip = _targets([CURVE[0], CURVE[2]])   # 10³ and 10⁶: no step of 10×
    assert skip["peak memory within ±20 % as state grows 10×"]["met"] is None


def test_a_report_is_written_again_from_the_results_of_a_bench_stopped_halfway(tmp_path):
    """``eos bench --report-from``: a killed bench's results.json (written after every run,
    marked incomplete) gives report.md and memory.png with this release's summaries and
    targets, and says the bench stopped; a file that is no bench's is refused by name."""
    import json

    from test_cli import here, ok_here

    runs = _runs("eos-exactly-once", CURVE[:3])
    stale = {"benchmark": "eos bench", "command": "eos bench --measures memory",
             "started": "2026-11-27 18:00:00 UTC", "complete": False,
             "machine": {"python": "3.11", "cpus": 2, "platform": "linux"},
             "settings": {"measures": ["memory"], "workloads": [], "systems": [
                 "eos-exactly-once"], "records": 1_000, "rounds": {"memory": 1},
                 "partitions": 2, "commit_interval": 1.0, "rate": 0, "probe_every_ms": 0,
                 "steady_seconds": 0, "state_keys": [1_000, 100_000, 1_000_000], "seed": 1,
                 "bootstrap_servers": "127.0.0.1:9092"},
             "versions": {}, "skipped": {}, "warm_up": [], "summary": {}, "memory": [],
             "targets": [], "runs": runs}
    (tmp_path / "results.json").write_text(json.dumps(stale))
    out = ok_here("bench", "--report-from", str(tmp_path), "--out", str(tmp_path / "again"))
    report = (tmp_path / "again" / "report.md").read_text()
    assert "**Incomplete**: the bench stopped after 3 run(s)" in report
    assert "| 860,000 | 1,000 | 700 | 90,000 | 7.0 |" in report      # the memory points
    assert "peak memory within ±20 % as state grows 10×" in report   # targets judged again
    assert (tmp_path / "again" / "memory.png").stat().st_size > 0
    assert "report: " in out.stdout
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    assert again["memory"] and again["targets"] and again["runs"] == runs

    (tmp_path / "other.json").write_text('{"benchmark": "jmh"}')
    bad = here("bench", "--report-from", str(tmp_path / "other.json"))
    assert bad.returncode == 2 and "other.json is not an eos bench results.json" in bad.stderr
