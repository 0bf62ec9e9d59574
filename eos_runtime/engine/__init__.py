"""The Spark engine: runs the runtime's long-lived tasks as one Spark job.

``eos_runtime.engine.spark`` (the job's launch) is the only module of the project that
imports pyspark (lazily: importing this package does not start or import Spark);
``cluster`` holds the set-up (master, slots, SparkConf) and ``watch`` what the driver
learns of a running job (progress, stall, failed attempts). See docs/engine.md.
"""

from __future__ import annotations

from ..errors import EngineError, JobCancelled
from .cluster import EngineConfig, available_slots, check_slots
from .spark import RunningJob, TaskAttempt, run_tasks, start_tasks
from .watch import JobStatus

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
