"""Checkpoint listeners and the retention helper, on real Spark, on both transports.

A listener is called once per committed checkpoint with the input positions that commit
recorded (checked against the task's commit records in its change log), and the
retention helper deletes a source partition only below what every job reading it
committed, and its own channels below what their reader committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eos_runtime.joblog.changelog import last_commit
from eos_runtime.joblog.listeners import DeleteConsumedInput
from eos_runtime.protocol import wire
from eos_runtime.runner import run_pipeline
from eos_runtime.transport import TopicPartition, open_transport

from pipeline_oracles import encode_lines, produce, word_lines
from test_pipelines import KINDS, fresh_pipeline, transport_opts


class FileListener:
    """Appends each call as a JSON line (the tasks run in Spark's workers)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_checkpoint(self, task, offsets):
        with open(self.path, "a") as f:
            f.write(json.dumps({"task": task, "offsets": sorted(
                [t, p, o] for (t, p), o in offsets.items())}) + "\n")


def commits(t, changelog: str, task: int) -> list[list]:
    """Every commit record of a task's change-log partition, as sorted input positions."""
    tp = TopicPartition(changelog, task)
    low, high = t.watermarks(tp, read_committed=False)
    out = []
    with t.consumer(read_committed=True) as c:
        c.assign({tp: low})
        while c.position(tp) < t.watermarks(tp)[1]:
            for r in c.poll(10_000, 0.5):
                rec = wire.decode_changelog(r.value)
                if isinstance(rec, wire.ChangeLogCommit):
                    out.append(sorted([i.topic, i.partition, i.offset] for i in rec.inputs))
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_a_listener_is_called_once_per_checkpoint_with_the_committed_offsets(
        kind, tmp_path, request):
    opts = transport_opts(kind, tmp_path, request)
    pipeline, source, _ = fresh_pipeline("wordcount", f"listen-{kind}")
    calls = tmp_path / "calls.jsonl"
    pipeline.on_checkpoint(FileListener(str(calls)))
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(word_lines(600, seed=11)))
    run_pipeline(pipeline, commit_every=100, state_dir=str(tmp_path / "state"), **opts)
    got: dict[int, list] = {}
    for line in calls.read_text().splitlines():
        call = json.loads(line)
        got.setdefault(call["task"], []).append(call["offsets"])
    with open_transport(**opts) as t:
        expected = {task: commits(t, f"{pipeline.name}.changelog", task) for task in range(4)}
    assert got == expected
    assert all(len(v) >= 2 for v in got.values()), got     # several checkpoints each


def low(t, topic: str, partition: int) -> int:
    return t.watermarks(TopicPartition(topic, partition), read_committed=False)[0]


@pytest.mark.parametrize("kind", KINDS)
def test_retention_deletes_only_what_every_reader_committed(kind, tmp_path, request):
    opts = transport_opts(kind, tmp_path, request)
    job, source, sink = fresh_pipeline("wordcount", f"keep-{kind}")
    other, _, other_sink = fresh_pipeline("wordcount", f"other-{kind}")
    other.rename(other.name, source=source, sink=other_sink)    # reads the same input
    job.on_checkpoint(DeleteConsumedInput(every=0))
    state = str(Path(tmp_path) / "state")
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(word_lines(200, seed=1)))
    run_pipeline(other, state_dir=state, **opts)          # the other job read the first 200
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(word_lines(200, seed=2)))
        other_at = [last_commit(t, TopicPartition(f"{other.name}.changelog", task)).inputs[0]
                    for task in (0, 1)]
    run_pipeline(job, commit_every=50, state_dir=state, **opts)

    with open_transport(**opts) as t:
        for pos in other_at:                   # the source: as far as the slower reader only
            assert low(t, source, pos.partition) == pos.offset > 0
            assert t.watermarks(TopicPartition(source, pos.partition))[1] > pos.offset
        channel = f"{job.name}.shuffle-1"
        for task in (2, 3):                    # the job's own channel: its reader's position
            commit = last_commit(t, TopicPartition(f"{job.name}.changelog", task))
            for i in commit.inputs:
                assert i.topic == channel and low(t, channel, i.partition) == i.offset > 0
        assert low(t, sink, 0) == 0            # never a sink or a change log
        assert all(low(t, f"{job.name}.changelog", task) == 0 for task in range(4))
    # The other job still finds everything it has not read.
    assert run_pipeline(other, state_dir=state, **opts).input_records == 200


def test_listeners_open_once_a_raising_one_is_logged_and_functions_work_as_decorators(caplog):
    from eos_runtime import Pipeline
    from eos_runtime.errors import ConfigError
    from eos_runtime.joblog.listeners import Listeners

    seen = []

    class Opened:
        def open(self, context):
            seen.append(("open", context.job, context.task))

        def on_checkpoint(self, task, offsets):
            seen.append(("call", task, offsets))

    def boom(task, offsets):
        raise ValueError("listener bug")

    p = Pipeline("lis")
    assert p.on_checkpoint(boom) is boom
    p.on_checkpoint(Opened())
    with pytest.raises(ConfigError, match="on_checkpoint: expected a function"):
        p.on_checkpoint(42)
    ls = Listeners(tuple(p.listeners), "lis", 3, None, None)
    ls.checkpointed({("in", 0): 5})
    ls.checkpointed({("in", 0): 9})
    ls.close()
    assert seen == [("open", "lis", 3), ("call", 3, {("in", 0): 5}), ("call", 3, {("in", 0): 9})]
    assert sum("boom.on_checkpoint raised ValueError: listener bug" in r.getMessage()
               for r in caplog.records) == 2


def test_a_reader_with_a_checkpoint_store_restarts_from_the_lower_of_store_and_commit(tmp_path):
    """A topic or file-system store is written after the commit: a crash in between
    restarts the task from the store. The helper takes the lower; a file-system store,
    out of sight, blocks the cut."""
    from eos_runtime.joblog.checkpoints import ChangeLogCheckpoints, Checkpoint, TopicCheckpoints
    from eos_runtime.joblog.control import ControlLog
    from eos_runtime.joblog.listeners import _other_readers
    from eos_runtime.transport import TopicSpec

    with open_transport(data_dir=str(tmp_path / "data")) as t:
        t.create_topics([TopicSpec("lines", 2)])
        with t.producer() as p:
            for i in range(100):
                p.produce("lines", i % 2, b"x")
            p.flush()
        for job, store in (("tjob", "kafka"), ("fjob", "filesystem")):
            log = ControlLog(t, job)
            log.create()
            log._append(wire.RunStart(0, 1, True, (
                "stage 0: input lines x2, tasks 0,1, stores [], output out x1",
                "guarantee at-least-once", f"checkpoints {store}")))
            t.create_topics([TopicSpec(f"{job}.changelog", 2)])
            manager = ChangeLogCheckpoints(t, job)
            manager.start()
            manager.register(1)
            manager.write_checkpoint(1, Checkpoint({("lines", 1): 40}))
        topic_store = TopicCheckpoints(t, "tjob", 2)
        topic_store.start()
        topic_store.register(1)
        topic_store.write_checkpoint(1, Checkpoint({("lines", 1): 30}))
        readers = _other_readers(t, "me", ("lines", 1))
        assert sorted(readers, key=str) == sorted([40, 30, 40, None], key=str)
        assert _other_readers(t, "fjob", ("lines", 1)) == [40, 30]


def test_retention_leaves_a_source_whose_positions_are_in_files_out_of_sight(tmp_path):
    opts = {"data_dir": str(tmp_path / "data")}
    job, source, _ = fresh_pipeline("wordcount", "fs-store")
    job.on_checkpoint(DeleteConsumedInput(every=0))
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(word_lines(200, seed=3)))
    run_pipeline(job, guarantee="at-least-once", checkpoints="filesystem", commit_every=50,
                 state_dir=str(tmp_path / "state"), **opts)
    with open_transport(**opts) as t:
        assert [low(t, source, p) for p in (0, 1)] == [0, 0]
        assert all(low(t, f"{job.name}.shuffle-1", p) > 0 for p in (0, 1))
