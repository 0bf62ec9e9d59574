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
