"""Pins the public API: a name leaving __all__ is a breaking change and must be deliberate."""

import importlib
import pkgutil
import re

import eos_runtime
from eos_runtime import errors, faults, transport
from eos_runtime.protocol import wire


def test_top_level_api():
    assert sorted(eos_runtime.__all__) == sorted(["EosError", "Pipeline", "PipelineRun",
                                                  "RunSummary", "State", "errors",
                                                  "load_pipeline", "open_transport",
                                                  "run_pipeline", "start_pipeline",
                                                  "__version__"])
    for name in eos_runtime.__all__:
        assert hasattr(eos_runtime, name)


def test_testing_api():
    from eos_runtime import testing

    assert sorted(testing.__all__) == ["TestRun", "run_steps"]


def test_transport_api():
    assert sorted(transport.__all__) == sorted([
        "OLDEST", "UPCOMING", "AtOffset", "AtTimestamp", "Consumer", "Oldest",
        "PendingProducer", "Position", "Producer", "Record", "TopicPartition", "TopicSpec",
        "Transport", "Upcoming", "open_transport"])


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub} | _subclasses(sub)
    return found


def test_one_exception_tree_in_errors_py():
    # Import every module that could define an error, then walk the classes themselves:
    # a subclass defined anywhere but errors.py is found whether or not a list names it.
    for mod in pkgutil.walk_packages(eos_runtime.__path__, "eos_runtime."):
        importlib.import_module(mod.name)
    tree = {errors.EosError} | _subclasses(errors.EosError)
    ours = {cls for cls in tree if cls.__module__.startswith("eos_runtime")}
    assert len(ours) > 20
    for cls in sorted(ours, key=lambda c: c.__name__):
        name = cls.__name__
        assert cls.__module__ == "eos_runtime.errors", f"{name} is defined in {cls.__module__}"
        assert getattr(errors, name) is cls
        assert name in errors.__all__, f"{name} missing from errors.__all__"
        assert re.search(rf"^ +[│├└─ ]*{name} ", errors.__doc__, re.M), \
            f"{name} missing from the exception tree in errors.py's docstring"
    for name in errors.__all__:
        assert getattr(errors, name) in ours, f"errors.__all__ names {name}, not an EosError"


def test_wire_api_names_exist():
    for name in wire.__all__:
        assert hasattr(wire, name)


def test_faults_api():
    assert sorted(faults.__all__) == ["ACTIONS", "CRASH_POINTS", "arm", "crash_point", "disarm",
                                      "in_zombie", "is_armed", "on_split", "record_to",
                                      "zombie_armed", "zombie_ended"]
