"""A zombie: an old-generation instance of a source task keeps producing beside its
successor. Its output reaches the channels, yet never counts: the successor's restore
command fences it downstream, and its change-log commit is refused (ProducerFenced), so
it dies without a checkpoint. The committed output equals the oracle exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import cloudpickle
import pytest

from eos_runtime.plan import plan_job
from eos_runtime.protocol.runs import run_end
from eos_runtime.runner import create_job_topics, task_configs
from eos_runtime.runtime.committed import read_output
from eos_runtime.runtime.task import run_task
from eos_runtime.transport import open_transport

from pipeline_oracles import check_wordcount_exactly_once, encode_lines, produce, word_lines
from test_pipelines import fresh_pipeline

ZOMBIE = ("import sys\n"
          "from eos_runtime.runtime.task import run_task_payload\n"
          "run_task_payload(open(sys.argv[1], 'rb').read(), 0)\n")


def stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.parametrize("kind", ["local", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_a_zombie_source_never_makes_its_output_count(kind, tmp_path, request):
    opts = ({"data_dir": str(tmp_path / "data")} if kind == "local"
            else {"bootstrap_servers": request.getfixturevalue("kafka_bootstrap")})
    pipeline, source, sink = fresh_pipeline("wordcount", f"zombie-{kind}-{tmp_path.name[-6:]}")
    lines = word_lines(1200)
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(lines))
        plan = plan_job(pipeline, t, commit_every=10_000)
        create_job_topics(t, plan)
        configs = task_configs(plan, t, opts, str(tmp_path / "state"), poll_records=100)

    # The first instance of source task 0 sends two batches downstream, then freezes.
    zombie_cfg = configs[0]
    zombie_cfg.fault = {"point": "task.mid_version", "task": 0, "hit": 2, "attempt": 0,
                        "action": "stop"}
    payload = tmp_path / "zombie.pickle"
    payload.write_bytes(cloudpickle.dumps(zombie_cfg))
    zombie = subprocess.Popen([sys.executable, "-c", ZOMBIE, str(payload)],
                              stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not stopped(zombie.pid):
        assert zombie.poll() is None, zombie.stderr.read()
        assert time.monotonic() < deadline, "the zombie never reached its stop point"
        time.sleep(0.05)

    # Its successor runs the task to the end (and fences the zombie on the way in).
    zombie_cfg.fault = None
    successor = run_task(zombie_cfg, attempt=1)
    assert successor.generation == 2

    # The zombie wakes up, keeps sending, and dies at its checkpoint.
    os.kill(zombie.pid, signal.SIGCONT)
    _, err = zombie.communicate(timeout=60)
    assert zombie.returncode != 0
    assert "ProducerFenced" in err or "fenced" in err.lower()

    # One more restart: it must recover from the successor's last commit, never from
    # anything the zombie wrote after the successor started.
    third = run_task(zombie_cfg, attempt=2)
    assert third.generation == 3 and third.restored_version == run_end(0)  # the successor's last
    assert third.checkpoints == 0    # that run had ended: the third only re-announces it

    # The rest of the job reads channels holding the zombie's output too.
    run_task(configs[1])
    sinks = [run_task(configs[i]) for i in (2, 3)]
    assert sum(s.fenced for s in sinks) > 0, "the zombie's messages never reached the sinks"
    with open_transport(**opts) as t:
        check_wordcount_exactly_once(read_output(t, sink, job=pipeline.name), lines)
