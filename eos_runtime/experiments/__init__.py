"""Fault-injection experiments: a workload runs under a fault schedule, its committed output
is checked against an independent oracle, and a report says what happened
(docs/experiments.md; the command is ``eos experiment``)."""

from __future__ import annotations

from .verify import Verdict, compare, verify_output
from .workloads import BUILTIN, Expected, Workload, load_workload

__all__ = ["BUILTIN", "Expected", "Verdict", "Workload", "compare", "load_workload",
           "verify_output"]
