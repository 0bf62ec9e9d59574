"""A second driver of an experiment's job, in a process of its own (Spark allows one job
per process): ``python -m eos_runtime.experiments.driver SPEC.json``.

It starts a bounded run of the job with ``take_over=True`` (``eos run --take-over``), waits
for it, and prints one JSON line last: ``{"run": N, "error": null | "...", "stopped": b}``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ..errors import EosError
from ..runner import start_pipeline
from .setup import job_pipeline
from .workloads import load_workload


def main(argv: list[str]) -> int:
    spec: dict[str, Any] = json.loads(open(argv[1]).read())
    result: dict[str, Any] = {"run": None, "error": None}
    try:
        pipeline = job_pipeline(load_workload(spec["workload"]), spec["job"], spec["transport"])
        run = start_pipeline(pipeline, guarantee=spec["guarantee"],
                             commit_every=spec["commit_every"],
                             commit_interval=spec["commit_interval"],
                             poll_records=spec["poll_records"], state_dir=spec["state_dir"],
                             bounded=True, take_over=True, **spec["opts"])
        result["run"] = run.run
        try:
            summary = run.summary()
            result["stopped"] = bool(summary.stopped)
        finally:
            run.close()
    except EosError as exc:
        result["error"] = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
