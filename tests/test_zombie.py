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

from eos_runtime.joblog.committed import read_output
from eos_runtime.plan import plan_job
from eos_runtime.processes import alive, state
from eos_runtime.protocol.runs import run_end
from eos_runtime.runner import create_job_topics, task_configs
from eos_runtime.runtime.task import run_task
from eos_runtime.transport import open_transport

from pipeline_oracles import check_wordcount_exactly_once, encode_lines, produce, word_lines
from test_pipelines import fresh_pipeline

ZOMBIE = ("import sys\n"
          "from eos_runtime.runtime.task import run_task_payload\n"
          "run_task_payload(open(sys.argv[1], 'rb').read(), 0)\n")


def stopped(pid: int) -> bool:
    return state(pid) == "T"


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


# --------------------------------------------------------------------------- a forked Kafka zombie

SPLIT = '''
import sys
import time
from eos_runtime import faults
from eos_runtime.transport import TopicPartition, open_transport
servers, topic, log = sys.argv[1:4]
faults.record_to(log, task=0, attempt=0)
faults.arm("task.mid_version", 1, "zombie")
t = open_transport(bootstrap_servers=servers)
p = t.producer(transactional_id=topic + "-txn")
c = t.consumer()
c.assign({TopicPartition(topic, 0): 0})
p.begin_transaction()
p.produce(topic, 0, b"before the split")
p.flush()
faults.crash_point("task.mid_version")      # only the zombie goes on, after SIGCONT
try:
    p.produce(topic, 0, b"late")
    p.commit_transaction()
    polled = []   # a fresh consumer's first fetch can take seconds on a busy machine
    deadline = time.monotonic() + 60
    while len(polled) < 2 and time.monotonic() < deadline:
        polled += [r.value for r in c.poll(10, timeout=1)]
    faults.zombie_ended(None)
    print("committed; read", polled, flush=True)
except Exception as exc:
    faults.zombie_ended(exc)
'''


@pytest.mark.kafka
@pytest.mark.parametrize("first", ["successor", "zombie"])
def test_a_kafka_zombie_gets_new_clients_and_the_broker_fences_it(first, kafka_bootstrap,
                                                                  tmp_path):
    """A zombie split off a process whose transaction was open: the split makes its
    clients anew (librdkafka's threads stay behind in a fork), opening the transaction
    again with what it held. If the successor's producer starts before the zombie goes
    on, the broker fences the zombie and nothing of its transaction is ever committed;
    if the zombie goes on first, its commit holds everything, the records from before the
    split included (none lost to the split), and its consumer reads on where it was."""
    import json
    import uuid

    from eos_runtime.joblog.committed import read_topic
    from eos_runtime.transport import TopicSpec

    topic = f"zombie-split-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "faults.log"
    with open_transport(bootstrap_servers=kafka_bootstrap) as t:
        t.create_topics([TopicSpec(topic, 1)])
        proc = subprocess.Popen([sys.executable, "-c", SPLIT, kafka_bootstrap, topic, str(log)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.wait(60) == -signal.SIGKILL          # the parent died once the zombie was ready
        zombie = json.loads(log.read_text().splitlines()[0])["pid"]
        # it lets its parent die, then stops itself: the stop may come a moment later
        deadline = time.monotonic() + 60
        while not stopped(zombie) and alive(zombie) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stopped(zombie), f"the zombie never stopped itself (state {state(zombie)})"
        successor = None
        if first == "successor":
            successor = t.producer(transactional_id=topic + "-txn")   # fences the zombie
        os.kill(zombie, signal.SIGCONT)
        # it ends, and does not hang on exit (its read alone may take up to 60 s)
        deadline = time.monotonic() + 120
        while alive(zombie) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(zombie), (f"the zombie had not ended 120 s after its SIGCONT "
                                   f"(state {state(zombie)})")
        end = json.loads(log.read_text().splitlines()[1])
        committed = [r.value for r in read_topic(t, topic)]
        if first == "successor":
            assert end["action"] == "zombie-end" and end["error"].startswith("ProducerFenced")
            assert "fenced" in end["error"] and committed == []
            successor.close()
        else:
            assert end["error"] is None
            assert committed == [b"before the split", b"late"]
        assert proc.stdout is not None
        out = proc.stdout.read()   # the zombie's, through the pipe it inherited
        proc.stdout.close()
        if first == "zombie":
            assert out == "committed; read [b'before the split', b'late']\n"


@pytest.mark.parametrize("kind", ["local", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_a_zombie_s_rewind_does_not_take_the_task_back_from_its_successor(kind, tmp_path,
                                                                         request):
    """A zombie of a channel task rewinds (a restore reached it) after its successor
    registered a newer generation: its rewind must fail fenced, and the successor keep
    writing. Found by `eos experiment wordcount --schedule zombies.toml --seed 1` on
    Kafka (tests/test_experiments.py) on a loaded machine: a sink task's zombie, released
    before its successor had recovered, rewound after it; on Kafka every new generation
    made a new transactional producer, whose init_transactions fenced the successor.
    The zombie (as a "generation 2" beside the successor's 2 and 3) committed the job's
    last versions; the successor's next attempt recovered past them and committed them
    again: 231 sink records duplicated."""
    from eos_runtime.errors import ProducerFenced
    from eos_runtime.protocol.runs import guarantee_named
    from eos_runtime.runtime.checkpoint import Committer
    from eos_runtime.runtime.outputs import SinkWriter
    from eos_runtime.runtime.task import TaskStats
    from eos_runtime.state import TaskStore

    from scripted import ScriptedJob

    opts = ({"data_dir": str(tmp_path / "data")} if kind == "local"
            else {"bootstrap_servers": request.getfixturevalue("kafka_bootstrap")})
    job = ScriptedJob(tmp_path, opts)
    stores = []

    def instance(name: str) -> Committer:
        cfg = task_configs(job.plan, job.t, opts, str(tmp_path / "state"))[job.task_id]
        stage = job.plan.stage_of(job.task_id)
        stores.append(TaskStore(tmp_path / name, stage.stores))
        assert stage.sink is not None
        return Committer(job.t, job.plan, stage, job.task_id, cfg.run, stores[-1], None,
                         [SinkWriter(stage.sink, stage.output_partitions)], None,
                         TaskStats(job.task_id),
                         guarantee=guarantee_named(job.plan.guarantee))

    old, new = instance("zombie"), instance("successor")
    try:
        old.recover()                       # generation 1
        new.recover()                       # generation 2: the zombie is fenced
        assert (old.generation, new.generation) == (1, 2)
        with pytest.raises(ProducerFenced):
            old.rewind(0)                   # the zombie's rewind takes nothing back
        assert new.log is not None
        new.log.start_generation(0)         # the successor still holds its fence
        new.rewind(0)                       # and a rewind of its own is its own
        assert new.generation == 3
    finally:
        for c in (old, new):
            try:
                c.close()
            except Exception:
                pass
        for s in stores:
            s.close()
        job.close()


@pytest.mark.parametrize("zombie", [True, False])
def test_a_zombie_leaves_its_consumers_unclosed(zombie, monkeypatch):
    """A zombie's consumer close was seen to block in librdkafka for over a minute (its
    experiment then killed it, 60 s after the run): in a zombie, closing a consumer gives
    its handle up instead (it holds no group; the process ends right after)."""
    from eos_runtime import faults
    from eos_runtime.transport.kafka.consumer import KafkaConsumer

    class Handle:
        closed = False

        def close(self) -> None:
            Handle.closed = True

    consumer = KafkaConsumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "unused"})
    real, consumer._c = consumer._c, Handle()  # type: ignore[assignment]
    if zombie:
        monkeypatch.setattr(faults, "_zombie", ["task.checkpoint.before_commit"])
    consumer.close()
    assert Handle.closed is not zombie
    assert consumer._c is None
    real.close()
