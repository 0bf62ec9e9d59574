"""Pins the public API: a name leaving __all__ is a breaking change and must be deliberate."""

import eos_runtime
from eos_runtime import errors, faults, transport
from eos_runtime.protocol import wire


def test_top_level_api():
    assert sorted(eos_runtime.__all__) == sorted(["EosError", "Pipeline", "State", "errors", "open_transport",
                                                "__version__"])


def test_transport_api():
    assert sorted(transport.__all__) == sorted([
        "OLDEST", "UPCOMING", "AtOffset", "AtTimestamp", "Consumer", "Oldest", "Position",
        "Producer", "Record", "TopicPartition", "TopicSpec", "Transport", "Upcoming",
        "open_transport"])


def test_every_error_is_an_eos_error_and_listed():
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.EosError)
        assert name in errors.__doc__, f"{name} missing from the exception tree in errors.py"


def test_wire_api_names_exist():
    for name in wire.__all__:
        assert hasattr(wire, name)


def test_faults_api():
    assert sorted(faults.__all__) == ["CRASH_POINTS", "arm", "crash_point", "disarm", "is_armed"]
