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

from . import errors
from .api import Pipeline, State
from .errors import EosError
from .runner import PipelineRun, RunSummary, load_pipeline, run_pipeline, start_pipeline
from .transport import open_transport

__version__ = "0.1.0"

__all__ = ["EosError", "Pipeline", "PipelineRun", "RunSummary", "State", "errors",
           "load_pipeline", "open_transport", "run_pipeline", "start_pipeline", "__version__"]
