"""A record's output and state writes are all or nothing, and a rewind drops everything
of the version it discards (issue 22, case 4).

With dead letters on, a record whose function raises, or whose output cannot leave the
task (a value msgpack cannot carry through a shuffle, or the sink's format cannot
write), becomes a dead letter and nothing else: none of its other output goes out, and
the state writes it staged are undone. The task under test is the real one, in this
process (``_Task``: its record path, committer, RocksDB store and writers on the local
log), driven step by step: records, checkpoints, a rewind as a restore from upstream
makes it.

The job: ``in`` -> key_by -> flat_map(explode, stateful) -> [key_by ->] sink. The task
under test is stage 1's; its output is the next stage's channel or the sink.
"""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest

from eos_runtime import Pipeline
from eos_runtime.joblog.committed import read_output, read_topic
from eos_runtime.joblog.control import ControlLog
from eos_runtime.plan import plan_job
from eos_runtime.protocol import wire
from eos_runtime.runner import create_job_topics, task_configs
from eos_runtime.runtime.task import _Task
from eos_runtime.transport import TopicSpec, open_transport

PRODUCER = 0   # the one upstream producer (stage 0's task), scripted here


def same_key(value: Any) -> str:
    return "k"


def explode(value: str, state: Any) -> list[Any]:
    """Counts the records it saw (one counter: every record has the key "k"), then
    yields two values, and a third one no shuffle or JSON sink can carry for "bad"; a
    "boom" raises after the count was staged."""
    state.set("n", state.get("n", 0) + 1)
    if value == "boom":
        raise ValueError("boom")
    out: list[Any] = [f"{value}-1", f"{value}-2"]
    return [*out, {value}] if value == "bad" else out


class Job:
    def __init__(self, tmp_path, then: str) -> None:
        self.opts = {"data_dir": str(tmp_path / "data")}
        self.t = open_transport(**self.opts)
        self.name = f"atomic-{then}"
        self.t.create_topics([TopicSpec(f"{self.name}.in", 1)])
        p = Pipeline(self.name, commit_interval=1e9, dead_letters=True)
        stream = (p.source(f"{self.name}.in", value="utf8").key_by(same_key, partitions=1)
                  .flat_map(explode, stateful=True))
        if then == "shuffle":
            stream = stream.key_by(same_key, partitions=1).map(str)
        stream.sink(f"{self.name}.out", value="json")
        self.plan = plan_job(p, self.t)
        create_job_topics(self.t, self.plan)
        ControlLog(self.t, self.name).start_run(self.plan, bounded=True)
        self.stage = self.plan.stages[1]
        task_id = self.stage.task_ids[0]
        cfg = task_configs(self.plan, self.t, self.opts, str(tmp_path / "state"))[task_id]
        self.task = _Task(cfg, self.t, 0)
        self.committer = self.task.committer
        self.committer.announce(self.committer.recover().version)
        self.offset = 0   # of the next input record (scripted: nothing is read from it)
        self.seq = 0

    def process(self, value: str, generation: int, version: int) -> None:
        """One channel record of the upstream producer, then the end of the poll batch."""
        env = wire.Envelope(PRODUCER, generation, version, self.seq, msgpack.packb("k"),
                            msgpack.packb(value), 0)
        self.task.records.data(env, self.stage.input_topic, 0, self.offset, version)
        self.offset += 1
        self.seq += 1

    def send(self) -> None:
        self.committer.send_output()

    def checkpoint(self, version: int) -> None:
        self.send()
        self.committer.checkpoint(version, (wire.InputPosition(self.stage.input_topic, 0,
                                                               self.offset),))

    def channel(self) -> list[tuple[str, int, int, Any]]:
        """What went into the next stage's channel, in order: ("data", generation,
        version, value) per message, (kind, generation, version, None) per command."""
        out: list[tuple[str, int, int, Any]] = []
        for r in read_topic(self.t, self.stage.output_topic, read_committed=False):
            msg = wire.decode_channel(r.value)
            if type(msg) is wire.DataBatch:
                out += [("data", msg.generation, msg.version, msgpack.unpackb(v))
                        for v in msg.values]
            else:
                out.append((type(msg).__name__, msg.generation, msg.version, None))
        return out

    def data(self) -> list[tuple[int, int, Any]]:
        return [(g, v, value) for kind, g, v, value in self.channel() if kind == "data"]

    def sink(self, committed: bool = True) -> list[Any]:
        topic = f"{self.name}.out"
        records = (read_output(self.t, topic, job=self.name) if committed
                   else read_topic(self.t, topic, read_committed=False))
        return [json.loads(r.value) for r in records]

    def letters(self) -> list[dict[str, Any]]:
        return [json.loads(r.value) for r in read_output(self.t, f"{self.name}.dead-letters",
                                                          job=self.name)]

    def count(self) -> int | None:
        """The committed counter (state of stage 1's stateful step)."""
        raw = dict(self.task.store.items("step0")).get(msgpack.packb("k") + b"n")
        return None if raw is None else msgpack.unpackb(raw)

    def close(self) -> None:
        self.task.close()
        self.t.close()


@pytest.fixture
def make_job(tmp_path):
    made: list[Job] = []

    def make(then: str) -> Job:
        made.append(Job(tmp_path / then, then))
        return made[-1]

    yield make
    for job in made:
        job.close()


@pytest.mark.parametrize("then", ["shuffle", "sink"])
def test_a_failing_record_leaves_a_dead_letter_and_nothing_else(then, make_job):
    """"bad" yields two values, then one its output cannot carry; "boom" raises after it
    staged its count. Each becomes a dead letter: none of its values go out, not beside
    its letter and not in a later version (a channel writer kept them pending, unsent,
    and the next version's first write sent them), and its count is undone, also where
    it overwrote the count "good" had staged in the same version."""
    job = make_job(then)
    job.process("good", 1, 1)
    job.process("bad", 1, 1)
    job.process("boom", 1, 1)
    job.checkpoint(1)
    job.process("bad", 1, 2)      # the only record of version 2 before its first send
    job.send()
    job.process("later", 1, 2)
    job.checkpoint(2)
    if then == "shuffle":
        assert job.data() == [(1, 1, "good-1"), (1, 1, "good-2"), (1, 2, "later-1"),
                              (1, 2, "later-2")]
    else:
        assert job.sink() == ["good-1", "good-2", "later-1", "later-2"]
    assert sorted(d["offset"] for d in job.letters()) == [1, 2, 3]
    assert job.count() == 2       # "good" and "later"


@pytest.mark.parametrize("then", ["shuffle", "sink"])
def test_a_rewind_drops_the_output_of_the_version_it_discards(then, make_job):
    """Output of the open version is pending in the task when a restore from upstream
    makes it rewind (the rest of its poll batch had not been sent): "good", and "bad"
    whose first values were kept. None of it may go out, under the old generation or
    the new one, and the records read again count once."""
    job = make_job(then)
    job.checkpoint(1)
    job.process("good", 1, 2)
    job.process("bad", 1, 2)
    job.committer.rewind(1)       # upstream restarted: version 2 is read again
    assert job.committer.generation == 2
    job.process("good", 2, 2)
    job.process("bad", 2, 2)
    job.checkpoint(2)
    if then == "shuffle":
        assert job.data() == [(2, 2, "good-1"), (2, 2, "good-2")]
    else:   # nothing of generation 1 reached the topic, committed or not
        assert job.sink(committed=False) == ["good-1", "good-2"]
    assert len(job.letters()) == 1
    assert job.count() == 1
