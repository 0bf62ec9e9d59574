"""The smoke run (README's main command for now) on both transports."""

import pytest

from eos_runtime import smoke
from eos_runtime.transport import open_transport


def test_envelope_round_trip_on_the_local_log(tmp_path):
    with open_transport(data_dir=str(tmp_path)) as t:
        result = smoke.envelope_round_trip(t, records=12_000, producers=3)
    assert result.records == 12_000 and len(result.checks) == 2


@pytest.mark.kafka
def test_smoke_on_kafka(kafka_bootstrap, tmp_path):
    results = smoke.run(data_dir=str(tmp_path), bootstrap_servers=kafka_bootstrap, records=6_000,
                        show_progress=False)
    assert [r.transport for r in results] == ["local", "kafka", "kafka"]
    assert "the 100 aborted records stay invisible" in results[2].checks


def test_the_main_job_runs_wordcount_and_verifies_it(tmp_path):
    from eos_runtime.demo import generate_words, run_demo

    result = run_demo(data_dir=str(tmp_path / "demo"), lines=800)
    assert result.lines == 800 and result.duplicates == 0
    assert result.output_records == sum(len(line.split()) for line in generate_words(800, seed=42))
