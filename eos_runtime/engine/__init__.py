"""The Spark engine: runs the runtime's long-lived tasks as one Spark job.

``eos_runtime.engine.spark`` is the only module of the project that imports pyspark
(lazily: importing this package does not start or import Spark). See docs/engine.md.
"""

from __future__ import annotations

from .spark import (
    EngineConfig,
    EngineError,
    JobCancelled,
    JobStatus,
    RunningJob,
    TaskAttempt,
    available_slots,
    check_slots,
    run_tasks,
    start_tasks,
)

__all__ = [
    "EngineConfig",
    "EngineError",
    "JobCancelled",
    "JobStatus",
    "RunningJob",
    "TaskAttempt",
    "available_slots",
    "check_slots",
    "run_tasks",
    "start_tasks",
]
