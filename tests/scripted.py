"""A scripted upstream: channel records written by hand, read by a real task.

The tests of the protocol's hard cases need exact interleavings of data, markers and
restores from producers that crash, restart and linger as zombies. Driving real source
tasks cannot promise an order; writing the channel topic by hand can. The downstream
task is the real one (``run_task``): its loop, aligner, buffer, change log, RocksDB
store and sink, on the local log or Kafka. It runs in a child process, so that a crash
point kills the child and not the test, and so that a hang is reported instead of
hanging the suite.

The job: ``in`` (one partition per scripted producer) -> key_by -> ``out``. Stage 0's
tasks are the producers (task ids 0 .. producers - 1), never run; stage 1 is the task
under test, reading ``channels`` partitions of ``<job>.shuffle-1``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import cloudpickle
import msgpack

from eos_runtime.api import Pipeline
from eos_runtime.joblog.committed import read_output
from eos_runtime.joblog.control import ControlLog
from eos_runtime.plan import plan_job
from eos_runtime.protocol import wire
from eos_runtime.protocol.runs import run_end
from eos_runtime.runner import create_job_topics, task_configs
from eos_runtime.transport import TopicSpec, open_transport

END = run_end(0)
ROOT = Path(__file__).resolve().parent.parent

CHILD = ("import sys, cloudpickle\n"
         "from eos_runtime.runtime.task import run_task\n"
         "config = cloudpickle.load(open(sys.argv[1], 'rb'))\n"
         "stats = run_task(config, int(sys.argv[2]))\n"
         "cloudpickle.dump(stats.as_dict(), open(sys.argv[3], 'wb'))\n")


class TaskHung(AssertionError):
    """The task under test did not end: a liveness bug."""


def identity_key(value: Any) -> Any:
    return value


@dataclass
class Data:
    producer: int
    generation: int
    version: int
    value: str
    seq: int = 0


@dataclass
class Marker:
    producer: int
    generation: int
    version: int


@dataclass
class Restore:
    producer: int
    generation: int
    version: int


def encode(item: Data | Marker | Restore) -> bytes:
    if isinstance(item, Data):
        key = msgpack.packb(item.value)
        return wire.encode_data(item.producer, item.generation, item.version, item.seq, key,
                                msgpack.packb(item.value), 0)
    if isinstance(item, Marker):
        return wire.encode(wire.Marker(item.producer, item.generation, item.version, 0))
    return wire.encode(wire.Restore(item.producer, item.generation, item.version))


def _limit_files(n: int) -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


class ScriptedJob:
    def __init__(self, tmp_path: Path, transport: dict[str, Any], *, name: str = "scripted",
                 guarantee: str = "exactly-once", producers: int = 2, channels: int = 1,
                 buffer_max_bytes: int = 64 << 20, commit_every: int = 0,
                 commit_interval: float = 1e9) -> None:
        self.tmp = tmp_path
        # Unique on a broker shared by a whole session (id() of a collected job is reused).
        self.name = f"{name}-{uuid.uuid4().hex[:10]}"
        self.transport_opts = transport
        self.t = open_transport(**transport)
        self.t.create_topics([TopicSpec(f"{self.name}.in", producers),
                              TopicSpec(f"{self.name}.out", 1)])
        # By default no timer checkpoint ever: the commit grid's lines of 1e9 s are in 2001
        # and 2033.
        pipeline = Pipeline(self.name, processing_guarantee=guarantee,
                            commit_interval=commit_interval,
                            commit_every=commit_every)
        (pipeline.source(f"{self.name}.in", value="utf8")
         .key_by(identity_key, partitions=channels, parallelism=1)
         .map(str)
         .sink(f"{self.name}.out", value="utf8"))
        self.plan = plan_job(pipeline, self.t)
        create_job_topics(self.t, self.plan)
        # Record run 0 as the driver does: readers learn the job's guarantee from it.
        ControlLog(self.t, self.name).start_run(self.plan, bounded=True)
        self.channel_topic = self.plan.stages[1].input_topic
        self.task_id = self.plan.stages[1].task_ids[0]
        self.producer = self.t.producer()
        self.buffer_max_bytes = buffer_max_bytes
        self.attempts: dict[int, int] = {}

    def write(self, *items: Data | Marker | Restore, channel: int = 0) -> None:
        for item in items:
            self.producer.produce(self.channel_topic, channel, encode(item))
        self.producer.flush()

    def feed_source(self, partition: int, *values: str) -> None:
        """Input for a scripted producer run as a real source task (``run_task(task_id=p)``)."""
        for value in values:
            self.producer.produce(f"{self.name}.in", partition, value.encode())
        self.producer.flush()

    def channel_records(self, channel: int = 0) -> list[Any]:
        """Everything written to a channel, decoded (committed or not)."""
        from eos_runtime.joblog.committed import read_topic
        return [wire.decode_channel(r.value) for r in
                read_topic(self.t, self.channel_topic, read_committed=False)
                if r.partition == channel]

    def run_task(self, *, task_id: int | None = None,
                 fault: dict[str, Any] | list[dict[str, Any]] | None = None,
                 timeout: float = 120.0, max_open_files: int | None = None,
                 **config: Any) -> dict[str, Any] | None:
        """Run a task (default: the one under test) as its next attempt, in a child process;
        returns its stats, or None if a crash point killed it."""
        task_id = self.task_id if task_id is None else task_id
        attempt = self.attempts.get(task_id, 0)
        self.attempts[task_id] = attempt + 1
        cfg = task_configs(self.plan, self.t, self.transport_opts, str(self.tmp / "state"))[task_id]
        cfg = replace(cfg, buffer_max_bytes=self.buffer_max_bytes, **config)
        if fault is not None:
            cfg = replace(cfg, fault=[{"task": task_id, "attempt": attempt, **f}
                                      for f in (fault if isinstance(fault, list) else [fault])])
        cfg_path = self.tmp / f"config-{task_id}-{attempt}.pkl"
        out_path = self.tmp / f"stats-{task_id}-{attempt}.pkl"
        cfg_path.write_bytes(cloudpickle.dumps(cfg))
        env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
        try:
            proc = subprocess.run([sys.executable, "-c", CHILD, str(cfg_path), str(attempt),
                                   str(out_path)], env=env, timeout=timeout,
                                  capture_output=True, text=True,
                                  preexec_fn=None if max_open_files is None
                                  else lambda: _limit_files(max_open_files))
        except subprocess.TimeoutExpired:
            raise TaskHung(f"attempt {attempt} of task {task_id} did not end within "
                           f"{timeout:.0f} s") from None
        if proc.returncode == -9:
            return None
        if proc.returncode != 0:
            raise AssertionError(f"attempt {attempt} failed:\n{proc.stderr[-3000:]}")
        return cloudpickle.loads(out_path.read_bytes())

    def state_dir(self) -> Path:
        return self.tmp / "state" / self.name

    def output(self) -> list[str]:
        records = read_output(self.t, f"{self.name}.out", job=self.name)
        return sorted(r.value.decode() for r in records)

    def close(self) -> None:
        self.producer.close()
        self.t.close()
