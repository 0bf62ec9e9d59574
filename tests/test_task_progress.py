"""Tasks report their counters beside their pid file for the driver's live view: written
while they run and once more, marked done, when they end (not timed: the final write is
checked)."""

from __future__ import annotations

from eos_runtime.runtime.progress import read_task_progress

from scripted import END, Data, Marker, Restore, ScriptedJob


def test_a_task_leaves_its_final_counters(tmp_path):
    job = ScriptedJob(tmp_path, {"data_dir": str(tmp_path / "data")})
    try:
        job.write(Restore(0, 1, 0), Restore(1, 1, 0), Data(0, 1, 1, "a"), Data(1, 1, 2, "b"),
                  Marker(0, 1, 1), Marker(1, 1, END), Marker(0, 1, END))
        stats = job.run_task()
        progress = read_task_progress(job.state_dir() / f"task-{job.task_id}.progress")
        assert progress is not None and progress["done"] is True
        assert progress["processed"] == stats["processed"] == 2
        assert progress["checkpoints"] == stats["checkpoints"] >= 2
        assert progress["buffered"] == 1     # "b" of version 2 came before version 1 closed
        # the generations it took, with when (experiments' timelines draw them)
        assert [g for g, _ in progress["generations"]] == [stats["generation"]]
        assert progress["generations"][0][1] <= progress["time"]
    finally:
        job.close()


def test_a_retried_task_carries_its_sink_count_on(tmp_path):
    """Issue 27 item 10: the sink records a run committed, counted by its tasks, stay
    exact when a task dies right after a commit and its retry goes on: the count that
    commit made was noted before it (``sink_pending``), and the retry recovers it."""
    from eos_runtime import Pipeline
    from eos_runtime.runner import run_pipeline
    from eos_runtime.transport import open_transport

    from pipeline_oracles import produce

    data = str(tmp_path / "data")
    with open_transport(data_dir=data) as t:
        produce(t, "words", [f"w{i}".encode() for i in range(600)], partitions=1)
    pipeline = Pipeline("carry")
    pipeline.source("words").map(str.upper).sink("upper")
    summary = run_pipeline(pipeline, data_dir=data, commit_every=100, poll_records=50,
                           fault={"point": "task.checkpoint.after_commit", "hit": 2,
                                  "task": 0, "attempt": 0})
    assert summary.tasks[0]["attempt"] == 1           # the fault fired; the retry finished
    assert (summary.input_records, summary.input_read, summary.sink_records) == (600, 600, 600)


def _upper_but_every_tenth(word):
    if int(word[1:]) % 10 == 0:
        raise ValueError(f"no tenths ({word})")
    return word.upper()


def test_a_retried_task_carries_its_dead_letter_count_on(tmp_path):
    """Issue 27 item 15: the dead letters a run committed are counted as its sink records
    are: a task that dies right after a commit and is retried still reports every dead
    letter of the run (it reported only its last attempt's: 40 of 60), and the run's
    total is what the dead-letter topic holds."""
    from eos_runtime import Pipeline
    from eos_runtime.joblog.committed import read_output
    from eos_runtime.runner import run_pipeline
    from eos_runtime.transport import open_transport

    from pipeline_oracles import produce

    data = str(tmp_path / "data")
    with open_transport(data_dir=data) as t:
        produce(t, "words", [f"w{i}".encode() for i in range(600)], partitions=1)
    pipeline = Pipeline("carrydead", dead_letters=True)
    pipeline.source("words", value="utf8").map(_upper_but_every_tenth).sink("upper")
    summary = run_pipeline(pipeline, data_dir=data, commit_every=100, poll_records=50,
                           fault={"point": "task.checkpoint.after_commit", "hit": 2,
                                  "task": 0, "attempt": 0})
    assert summary.tasks[0]["attempt"] == 1           # the fault fired; the retry finished
    with open_transport(data_dir=data) as t:
        letters = read_output(t, "carrydead.dead-letters", job=pipeline.name)
    assert len(letters) == 60
    assert (summary.sink_records, summary.tasks[0]["dead_letters"],
            summary.as_dict()["dead_letters"]) == (540, 60, 60)
