"""eos_runtime: exactly-once stream processing for Python on Spark and Kafka.

    from eos_runtime import Pipeline, run_pipeline

    pipeline = Pipeline("wordcount")
    ...                                             # source, steps, sink: docs/api.md
    summary = run_pipeline(pipeline, data_dir=".eos/data")    # or bootstrap_servers=...

``run_pipeline`` runs a job on Spark until its run ends; ``start_pipeline`` starts it and
returns a ``PipelineRun`` at once; ``load_pipeline`` reads a pipeline file as ``eos run``
does. ``eos_runtime.testing`` runs a pipeline's steps in-process, for unit tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors
from .errors import EosError

if TYPE_CHECKING:
    from .api import Pipeline, State
    from .runner import PipelineRun, RunSummary, load_pipeline, run_pipeline, start_pipeline
    from .transport import open_transport

__version__ = "0.1.0"

__all__ = ["EosError", "Pipeline", "PipelineRun", "RunSummary", "State", "errors",
           "load_pipeline", "open_transport", "run_pipeline", "start_pipeline", "__version__"]

# Imported on first use, not with the package: a Spark worker's daemon or a CLI command
# that needs a task or a tool, not the runner, skips the runner's imports (a third of a
# second a process; docs/engine.md).
_LAZY = {"Pipeline": "api", "State": "api", "PipelineRun": "runner", "RunSummary": "runner",
         "load_pipeline": "runner", "run_pipeline": "runner", "start_pipeline": "runner",
         "open_transport": "transport"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
