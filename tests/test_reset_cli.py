"""``eos reset JOB`` as a user runs it (issue 11, item 7): the console entry point in this
process (``here``), the real local log, real Spark runs of word count. A reset deletes the
job's change log, control topic, channels and state, keeps its input, output and other
jobs' topics and the local log's fences, asks before it deletes, and refuses while the
job runs."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from eos_runtime.transport import open_transport

from test_cli import (
    WORDCOUNT,
    assert_exactly_once,
    error_line,
    here,
    ok_here,
    run_here,
    start_eos,
    wait_for_counts,
    word_counts,
)
from test_jobs_cli import fake_job, wordcount_layout

JOB_TOPICS = ["wordcount.changelog", "wordcount.control", "wordcount.heartbeats",
              "wordcount.shuffle-1"]


def topics(data) -> list[str]:
    shown = ok_here("topics", "--json", "--data-dir", str(data)).stdout
    return [t["topic"] for t in json.loads(shown)]


@pytest.mark.slow
def test_reset_deletes_only_what_the_job_made_and_the_next_run_starts_from_scratch(tmp_path):
    data = tmp_path / "data"
    ok_here("produce", "lines", "--generate", "words", "--count", "400", "--seed", "7",
            "--data-dir", str(data))
    run_here(WORDCOUNT, data_dir=str(data))       # the runs in this process: eos reset is tested
    fake_job(data, "other", wordcount_layout(data))          # another job, same topics
    before = topics(data)
    assert set(JOB_TOPICS) <= set(before)
    state = data / "state" / "wordcount"
    assert state.is_dir()

    # Without a terminal and without --yes: one line, nothing deleted.
    line = error_line(here("reset", "wordcount", "--data-dir", str(data)))
    assert "--yes" in line and "wordcount.changelog" in line
    assert topics(data) == before and state.is_dir()

    done = ok_here("reset", "wordcount", "--yes", "--data-dir", str(data))
    assert ("deleted wordcount.heartbeats, wordcount.changelog, wordcount.shuffle-1, "
            "wordcount.control and state directory") in done.stdout, done.stdout
    after = topics(data)
    assert not set(JOB_TOPICS) & set(after)
    assert {"lines", "counts", "other.control"} <= set(after)
    assert not state.exists()
    assert sorted(p.name for p in (data / "fences").iterdir()) == [
        f"wordcount.task-{i}" for i in range(4)]                 # kept against zombies
    jobs = json.loads(ok_here("jobs", "--json", "--data-dir", str(data)).stdout)
    assert [j["job"] for j in jobs] == ["other"]

    # The next run is run 0 again, reads all the input, and counts from empty state.
    again = run_here(WORDCOUNT, data_dir=str(data))
    assert again.run == 0 and again.input_records == 400
    assert_exactly_once(data, word_counts(data))

    line = error_line(here("reset", "nosuchjob", "--yes", "--data-dir", str(data)))
    assert "nothing to reset" in line


def test_reset_refuses_a_state_directory_with_what_no_task_made(tmp_path):
    data = tmp_path / "data"
    ok_here("produce", "lines", "--generate", "words", "--count", "10", "--data-dir", str(data))
    mine = data / "state" / "wordcount" / "notes.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("mine")
    line = error_line(here("reset", "wordcount", "--yes", "--data-dir", str(data)))
    assert "'notes.txt'" in line and "no task" in line
    assert mine.read_text() == "mine"


@pytest.mark.slow
def test_reset_refuses_while_the_job_runs(tmp_path):
    data = tmp_path / "data"
    ok_here("produce", "lines", "--generate", "words", "--count", "200", "--seed", "8",
            "--data-dir", str(data))
    proc = start_eos("run", WORDCOUNT, "--unbounded", "--commit-interval", "0.3",
                     "--data-dir", str(data))
    try:
        wait_for_counts(data, sum(word_counts(data).values()), proc)
        line = error_line(here("reset", "wordcount", "--yes", "--data-dir", str(data)))
        assert "is running" in line and "eos stop wordcount" in line
        assert set(JOB_TOPICS) <= set(topics(data))
        ok_here("stop", "wordcount", "--data-dir", str(data))
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    finally:
        proc.kill()
    deadline = time.monotonic() + 60     # the stores' locks go with the worker processes
    while True:
        p = here("reset", "wordcount", "--yes", "--data-dir", str(data))
        if p.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert p.returncode == 0, p.stderr
    assert not set(JOB_TOPICS) & set(topics(data))


@pytest.mark.kafka
@pytest.mark.slow
def test_reset_on_kafka_keeps_input_output_and_other_topics(kafka_bootstrap, tmp_path):
    job = f"wc-{uuid.uuid4().hex[:8]}"           # one broker, many test runs
    source, sink = f"{job}-lines", f"{job}-counts"
    kafka = ["--bootstrap-servers", kafka_bootstrap]
    state = tmp_path / "state"
    ok_here("produce", source, "--generate", "words", "--count", "200", *kafka)
    # the runs in this process: eos reset is tested
    run = dict(name=job, source=source, sink=sink, state_dir=str(state),
               bootstrap_servers=kafka_bootstrap)
    run_here(WORDCOUNT, **run)
    mine = [f"{job}.changelog", f"{job}.control", f"{job}.heartbeats", f"{job}.shuffle-1"]
    before = [t["topic"] for t in json.loads(ok_here("topics", "--json", *kafka).stdout)]
    assert set(mine) <= set(before)
    committed = int(ok_here("consume", sink, "--count", *kafka).stdout)

    ok_here("reset", job, "--yes", "--state-dir", str(state), *kafka)
    after = [t["topic"] for t in json.loads(ok_here("topics", "--json", *kafka).stdout)]
    assert not set(mine) & set(after)
    assert set(before) - set(mine) <= set(after)            # input, output, other jobs'
    assert not (state / job).exists()

    again = run_here(WORDCOUNT, **run)
    assert again.run == 0 and again.input_records == 200
    # Kafka keeps the old run's committed output; the new run counted again from zero.
    assert int(ok_here("consume", sink, "--count", *kafka).stdout) == 2 * committed


def test_reset_of_a_run_that_did_not_end_warns_that_it_may_still_run_elsewhere(tmp_path):
    data = tmp_path / "data"
    layout = ("stage 0: input lines x1, tasks 0, stores [], output half.shuffle-1 x1",
              "stage 1: input half.shuffle-1 x1, tasks 1, stores [s], output out x1",
              "guarantee exactly-once")
    fake_job(data, "half", layout)           # a run recorded, no task ever committed
    p = ok_here("reset", "half", "--yes", "--data-dir", str(data))
    assert p.stderr.startswith("warning: run 0 of job 'half' did not end with final "
                               "checkpoints"), p.stderr
    assert "deleted half.heartbeats, half.control;" in p.stdout


def test_reset_is_refused_while_a_driver_holds_the_jobs_lease(tmp_path):
    """A run on other machines holds no local store lock, but it holds the job's lease:
    a reset under it would delete the change log its tasks commit to."""
    from test_lease_cli import other_driver

    data = tmp_path / "data"
    layout = ("stage 0: input lines x1, tasks 0, stores [], output half.shuffle-1 x1",
              "stage 1: input half.shuffle-1 x1, tasks 1, stores [s], output out x1",
              "guarantee exactly-once")
    fake_job(data, "half", layout)
    other_driver({"data_dir": str(data)}, "half")
    p = here("reset", "half", "--yes", "--data-dir", str(data))
    line = error_line(p)
    assert line.startswith("error: job 'half' is running (run 0, started ") and \
        "eos reset only while the job is stopped" in line, line
    assert "half.control" in topics(data)


def test_reset_checks_again_after_its_question_that_the_job_did_not_start(tmp_path,
                                                                          monkeypatch):
    """The checks ran before "Reset?" and never again: a run started while the question
    waited (by hand, cron or systemd) had its change log and control topic deleted under
    it when the answer came."""
    import types

    import click

    import eos_runtime.cli.jobs as jobs

    from test_lease_cli import other_driver

    data = tmp_path / "data"
    layout = ("stage 0: input lines x1, tasks 0, stores [], output half.shuffle-1 x1",
              "stage 1: input half.shuffle-1 x1, tasks 1, stores [s], output out x1",
              "guarantee exactly-once")
    fake_job(data, "half", layout)

    def started_meanwhile(*args, **kwargs):
        other_driver({"data_dir": str(data)}, "half")
        return True

    monkeypatch.setattr(jobs, "sys", types.SimpleNamespace(
        stdin=types.SimpleNamespace(isatty=lambda: True)))
    monkeypatch.setattr(click, "confirm", started_meanwhile)
    p = here("reset", "half", "--data-dir", str(data))
    assert p.returncode == 1, p.stderr
    *asked, line = p.stderr.strip().splitlines()   # the question's lines, then the error
    assert asked[0].startswith("eos reset half deletes "), p.stderr
    assert line.startswith("error: job 'half' is running (run 0, started "), p.stderr
    assert "half.control" in topics(data)


@pytest.mark.slow
def test_reset_refuses_to_leave_file_positions_behind_a_state_dir_it_was_not_given(tmp_path):
    """An at-least-once job keeping its positions in files under its --state-dir, reset
    without that --state-dir: the files were left, the change log deleted, and the next
    run resumed from the old positions into empty state, though the reset had said it
    would start from scratch."""
    data, state = tmp_path / "data", tmp_path / "elsewhere"
    ok_here("produce", "lines", "--generate", "words", "--count", "300", "--seed", "5",
            "--data-dir", str(data))
    run_here(WORDCOUNT, data_dir=str(data), state_dir=str(state), guarantee="at-least-once",
             checkpoints="filesystem")
    files = state / "checkpoints" / "wordcount" / "1"
    assert sorted(p.name for p in files.iterdir()) == ["task-0.json", "task-1.json"]
    line = error_line(here("reset", "wordcount", "--yes", "--data-dir", str(data)))
    assert "checkpoints filesystem" in line and str(data / "state") in line and \
        "--state-dir" in line, line
    assert "wordcount.changelog" in topics(data)
    ok_here("reset", "wordcount", "--yes", "--data-dir", str(data), "--state-dir", str(state))
    assert not files.exists()
    again = run_here(WORDCOUNT, data_dir=str(data), state_dir=str(state),
                     guarantee="at-least-once", checkpoints="filesystem")
    assert again.run == 0 and again.input_records == 300


def _half_with_a_store(data):
    layout = ("stage 0: input lines x1, tasks 0, stores [], output half.shuffle-1 x1",
              "stage 1: input half.shuffle-1 x1, tasks 1, stores [s], output out x1",
              "guarantee exactly-once")
    fake_job(data, "half", layout)
    store = data / "state" / "half" / "task-1"
    store.mkdir(parents=True)
    (store / "LOCK").write_bytes(b"")
    return store


def test_a_lock_file_reset_may_not_open_is_named_not_taken_for_a_running_task(tmp_path,
                                                                              monkeypatch):
    """A task's LOCK file the user may not open was reported as "job 'half' is running":
    a false diagnosis sending the user to `eos stop`."""
    import eos_runtime.reset as reset

    data = tmp_path / "data"
    store = _half_with_a_store(data)

    def refused(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(reset, "open", refused, raising=False)   # root may open anything
    line = error_line(here("reset", "half", "--yes", "--data-dir", str(data)))
    assert "is running" not in line and "Permission denied" in line and \
        str(store / "LOCK") in line, line
    assert store.is_dir() and "half.control" in topics(data)


def test_a_state_file_reset_may_not_delete_is_one_error_line_and_the_topics_stay(
        tmp_path, monkeypatch):
    """shutil.rmtree's PermissionError was no project error: a traceback, after part of the
    state was gone."""
    import eos_runtime.reset as reset

    data = tmp_path / "data"
    store = _half_with_a_store(data)

    def refused(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(store / "000007.sst"))

    monkeypatch.setattr(reset.shutil, "rmtree", refused)
    p = here("reset", "half", "--yes", "--data-dir", str(data))
    assert p.returncode == 1, p.stderr
    warning, line = p.stderr.strip().splitlines()   # the unfinished run's warning first
    assert warning.startswith("warning: run 0 of job 'half' did not end") and \
        line.startswith("error: "), p.stderr
    assert "Traceback" not in p.stderr and "Permission denied" in line and \
        str(store / "000007.sst") in line and "eos reset half" in line, line
    assert "half.control" in topics(data)


def small_layout(job: str) -> tuple[str, ...]:
    return (f"stage 0: input lines x2, tasks 0,1, stores [], output {job}.shuffle-1 x2",
            f"stage 1: input {job}.shuffle-1 x2, tasks 2,3, stores [counts], output counts x2",
            "guarantee exactly-once")


def test_reset_clears_every_startpoint_and_the_metadata_topic(tmp_path):
    """Issue 22 case 3, issue 27 item 1: a Startpoint kept by a reset is taken by the next
    run 0, and one fanned out for an old, higher run (tagged 3) is applied again after
    the new task's first commit (P1b: its checkpoint's run 0 < 3), so a crash after that
    commit reads committed input again. A reset deletes them all and says so."""
    from eos_runtime.joblog.startpoints import (
        MetadataStore,
        Startpoint,
        StartpointKey,
        fan_out_startpoints,
    )

    data = tmp_path / "data"
    fake_job(data, "sp", small_layout("sp"))
    with open_transport(data_dir=str(data)) as t:    # lines[1]'s fanned out for run 3, never
        MetadataStore(t, "sp").write({                # used up; no topic lines: written here
            StartpointKey("lines", 0): Startpoint("offset", 5990),
            StartpointKey("lines", 1, 1): Startpoint("offset", 7, run=3)})
    assert "lines[1] task 1: offset 7 (given to run 3)" in ok_here(
        "startpoint", "list", "sp", "--data-dir", str(data)).stdout

    done = ok_here("reset", "sp", "--yes", "--data-dir", str(data))
    assert "sp.metadata" in done.stdout, done.stdout
    assert ("2 Startpoints (lines[0]: offset 5990; lines[1] task 1: offset 7, given to "
            "run 3)") in done.stdout, done.stdout
    assert "sp.metadata" not in topics(data)
    assert error_line(here("startpoint", "list", "sp", "--data-dir", str(data))).startswith(
        "error: job 'sp' has no run on the local log in ")   # nor Startpoints: all gone
    fake_job(data, "sp", small_layout("sp"))               # the next run is run 0 again
    with open_transport(data_dir=str(data)) as t:
        assert fan_out_startpoints(t, "sp", "lines", {0: 0, 1: 1}, 0) == {}


def test_reset_keeps_a_metadata_topic_with_other_records_and_deletes_its_startpoints(tmp_path):
    from eos_runtime.joblog.startpoints import MetadataStore, Startpoint, StartpointKey

    data = tmp_path / "data"
    fake_job(data, "mix", small_layout("mix"))
    with open_transport(data_dir=str(data)) as t:
        store = MetadataStore(t, "mix")
        store.write({StartpointKey("lines", 0): Startpoint("offset", 5)})
        with t.producer() as p:                       # a record no Startpoint's
            p.produce("mix.metadata", 0, b"mine", key=b"note/1")
            p.flush()
    done = ok_here("reset", "mix", "--yes", "--data-dir", str(data))
    assert "cleared 1 Startpoint (lines[0]: offset 5)" in done.stdout, done.stdout
    assert "mix.metadata" in topics(data)
    with open_transport(data_dir=str(data)) as t:
        assert MetadataStore(t, "mix").contents() == ({}, ["mix.metadata[0]@1"])


def test_reset_of_a_job_that_never_ran_deletes_nothing_of_topics_named_like_its(tmp_path):
    """Issue 22 case 6: topics named like a job's are deleted only when the job's records
    prove it made them. ``orders`` never ran: its name's topics are a user's own, with a
    control topic or without, empty or not."""
    data = tmp_path / "data"
    names = ["orders.changelog", "orders.heartbeats", "orders.metadata", "orders.shuffle-1"]
    for control in (None, "", "mine\n"):
        if control == "":
            with open_transport(data_dir=str(data)) as t:
                from eos_runtime.transport import TopicSpec

                t.create_topics([TopicSpec("orders.control", 1)])
            names = sorted(names + ["orders.control"])
        for name in names:
            if control is None or name == "orders.control" and control:
                ok_here("produce", name, "--lines-from", "-", "--data-dir", str(data),
                        stdin="mine\n")
        line = error_line(here("reset", "orders", "--yes", "--data-dir", str(data)))
        assert line.startswith("error: job 'orders' has nothing to reset"), line
        assert "left alone: " + ", ".join(names) in line, line
        assert set(names) <= set(topics(data))
        for name in names:
            assert ok_here("consume", name, "--all", "--data-dir", str(data)).stdout == \
                ("\tmine\n" if name != "orders.control" or control else "")


def test_reset_deletes_only_the_topics_whose_records_are_the_jobs(tmp_path):
    """A job that ran (its control topic records a run) whose change log is a user's topic
    it came upon (its first record is no change-log record): the rest goes, that stays,
    and the output says why. The control topic goes last: a reset cut short can be run
    again."""
    data = tmp_path / "data"
    fake_job(data, "adopted", small_layout("adopted"))
    ok_here("produce", "adopted.changelog", "--lines-from", "-", "--data-dir", str(data),
            stdin="mine\n")
    with open_transport(data_dir=str(data)) as t:
        from eos_runtime.protocol import wire
        from eos_runtime.transport import TopicSpec

        t.create_topics([TopicSpec("adopted.shuffle-1", 2)])
        with t.producer() as p:
            p.produce("adopted.shuffle-1", 1, wire.encode(wire.Restore(0, 1, 5)))
            p.flush()
    done = ok_here("reset", "adopted", "--yes", "--data-dir", str(data))
    assert "deleted adopted.heartbeats, adopted.shuffle-1, adopted.control" in done.stdout, \
        done.stdout
    assert "kept adopted.changelog (adopted.changelog[0]@0 is no change-log record" in \
        done.stdout, done.stdout
    assert {"adopted.changelog"} == {t for t in topics(data) if t.startswith("adopted.")}


@pytest.mark.kafka
def test_reset_on_kafka_deletes_the_jobs_checkpoint_topic(kafka_bootstrap, tmp_path):
    """A job that keeps its positions in __eos_checkpoint_<job>_<id> (at-least-once,
    checkpoints="kafka"): eos topics lists that topic as the job's, eos reset deletes it,
    and the next run reads the input from the start. Kafka's own __ topics stay hidden."""
    job = f"cp-{uuid.uuid4().hex[:8]}"
    source, sink = f"{job}-in", f"{job}-out"
    kafka = ["--bootstrap-servers", kafka_bootstrap]
    (tmp_path / "p.py").write_text(
        "from eos_runtime import Pipeline\n"
        f"pipeline = Pipeline({job!r}, processing_guarantee='at-least-once', "
        "checkpoints='kafka')\n"
        f"pipeline.source({source!r}).map(str.upper).sink({sink!r})\n")
    ok_here("produce", source, "--generate", "words", "--count", "20", *kafka)
    first = run_here(tmp_path / "p.py", state_dir=str(tmp_path / "state"),
                     bootstrap_servers=kafka_bootstrap)
    assert first.input_records == 20
    topic = f"__eos_checkpoint_{job}_1"
    listed = [t["topic"] for t in json.loads(ok_here("topics", "--json", *kafka).stdout)]
    assert topic in listed and "__consumer_offsets" not in listed
    ok_here("reset", job, "--yes", "--state-dir", str(tmp_path / "state"), *kafka)
    listed = [t["topic"] for t in json.loads(ok_here("topics", "--json", *kafka).stdout)]
    assert topic not in listed
    again = run_here(tmp_path / "p.py", state_dir=str(tmp_path / "state"),
                     bootstrap_servers=kafka_bootstrap)
    assert again.input_records == 20          # from the start, not from old positions
