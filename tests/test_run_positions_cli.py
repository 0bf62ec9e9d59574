"""``eos run --reset-offset``, ``--offset-default`` and ``--checkpoints`` through the CLI:
its entry point in this process (``here``: the worker's JVM serves every run), the real
local log, real Spark."""

from __future__ import annotations

import json
from collections import Counter

from test_checkpoint_cli import lines_by_partition, words_in
from test_cli import WORDCOUNT, assert_exactly_once, error_line, here, ok_here, run_here


def summary(p) -> dict:
    return json.loads(p.stdout)


def test_reset_offset_reads_everything_again_and_the_job_keeps_its_state(tmp_path):
    data = tmp_path / "data"
    d = ("--data-dir", str(data))
    ok_here("produce", "lines", "--generate", "words", "--count", "200", *d)
    run_here(WORDCOUNT, data_dir=str(data))   # the scene: the flags below are the test
    assert error_line(here("run", WORDCOUNT, "--reset-offset", "counts", *d)) == (
        "error: --reset-offset counts: job 'wordcount' reads 'lines' (its only source "
        "stream); give that")
    # upcoming after a reset: a bounded run then reads nothing
    nothing = summary(ok_here("run", WORDCOUNT, "--reset-offset", "lines", "--offset-default",
                              "upcoming", "--json", *d))
    assert nothing["stages"][0]["processed"] == 0
    again = summary(ok_here("run", WORDCOUNT, "--reset-offset", "lines", "--json", *d))
    assert again["stages"][0]["processed"] == 200
    parts = lines_by_partition(data)
    everything = parts[0] + parts[1]
    assert_exactly_once(data, words_in(everything + everything))   # counted on top


def test_checkpoints_in_files_for_at_least_once_are_where_sources_start(tmp_path):
    data = tmp_path / "data"
    d = ("--data-dir", str(data))
    alo = ("--guarantee", "at-least-once", "--checkpoints", "filesystem")
    ok_here("produce", "lines", "--generate", "words", "--count", "100", *d)
    for store in ("kafka", "filesystem"):
        line = error_line(here("run", WORDCOUNT, "--checkpoints", store, *d))
        assert line == (f"error: checkpoints '{store}' is for at-least-once jobs: an "
                        f"exactly-once job's checkpoint is its change-log commit, atomic with "
                        f"its state and output; use --guarantee at-least-once or the change "
                        f"log")
    first = summary(ok_here("run", WORDCOUNT, *alo, "--json", *d))
    assert first["stages"][0]["processed"] == 100
    store = data / "state" / "checkpoints" / "wordcount" / "1"
    task0 = json.loads((store / "task-0.json").read_text())
    assert task0 == {"offsets": [["lines", 0, 50]]}
    # The files are the sources' positions: moving task 0's back makes it read again.
    (store / "task-0.json").write_text(json.dumps({"offsets": [["lines", 0, 10]]}))
    ok_here("produce", "lines", "--generate", "words", "--count", "20", "--seed", "1", *d)
    second = summary(ok_here("run", WORDCOUNT, *alo, "--json", *d))
    assert second["stages"][0]["processed"] == 40 + 20
    assert json.loads((store / "task-0.json").read_text()) == {"offsets": [["lines", 0, 60]]}
    # at-least-once: no count lost (duplicates allowed)
    out = ok_here("consume", "counts", "--job", "wordcount", *d).stdout
    highest: Counter = Counter()
    for row in out.splitlines():
        word, _, value = row.partition("\t")
        highest[word] = max(highest[word], int(value))
    parts = lines_by_partition(data)
    for word, n in words_in(parts[0] + parts[1]).items():
        assert highest[word] >= n, word
    # the store is part of the job's layout: a run that drops it is refused
    assert "ran before (run 1) with another layout" in here(
        "run", WORDCOUNT, "--guarantee", "at-least-once", *d).stderr


def test_checkpoints_in_the_checkpoint_topic_of_the_job_id(tmp_path):
    data = tmp_path / "data"
    d = ("--data-dir", str(data))
    ok_here("produce", "lines", "--generate", "words", "--count", "60", *d)
    run = ("run", WORDCOUNT, "--name", "wct", "--sink", "counts-t", "--guarantee",
           "at-least-once", "--checkpoints", "kafka", "--json", *d)
    assert summary(ok_here(*run, "--job-id", "5"))["stages"][0]["processed"] == 60
    assert "__eos_checkpoint_wct_1" not in ok_here("topics", *d).stdout
    records = json.loads(ok_here("consume", "__eos_checkpoint_wct_5", "--all", "--json", *d).stdout)
    last = {}
    for r in records:                        # one partition per task, keyed by the task
        assert r["key"] == str(r["partition"])
        last[r["partition"]] = json.loads(r["value"])
    assert last[0] == {"offsets": [["lines", 0, 30]]}
    assert last[1] == {"offsets": [["lines", 1, 30]]}
    assert sorted(last) == [0, 1]            # the tasks after the shuffle keep the change log
    ok_here("produce", "lines", "--generate", "words", "--count", "10", "--seed", "2", *d)
    assert summary(ok_here(*run, "--job-id", "5"))["stages"][0]["processed"] == 10
    # the job id selects where the positions are: another one (the default "1" here) is
    # another layout, refused before the run is recorded
    refused = here(*run)
    assert refused.returncode != 0 and "job id 5" in refused.stdout + refused.stderr


def test_offset_default_none_refuses_a_partition_without_checkpoint_or_startpoint(tmp_path):
    data = tmp_path / "data"
    d = ("--data-dir", str(data))
    ok_here("produce", "lines", "--generate", "words", "--count", "10", *d)
    assert error_line(here("run", WORDCOUNT, "--offset-default", "none", *d)) == (
        "error: source lines[0]: it has no checkpoint and no Startpoint, and offset_default "
        "is 'none' (no fallback): give the source offset_default='oldest' or 'upcoming' (eos "
        "run --offset-default oldest|upcoming), or the partition a Startpoint (eos startpoint "
        "set wordcount lines 0 --oldest)")


def test_a_reset_forgets_the_positions_of_the_checkpoint_topic_and_the_files(tmp_path):
    # An at-least-once job that keeps its positions outside the change log: a reset must
    # delete them too, or its "start from scratch" run resumes where the old job stood.
    data = tmp_path / "data"
    d = ("--data-dir", str(data))
    ok_here("produce", "lines", "--generate", "words", "--count", "40", *d)
    # the runs in this process (the --checkpoints option through the CLI: the tests above)
    for store, name in (("filesystem", "wcf"), ("kafka", "wck")):
        run = dict(name=name, sink=f"counts-{name}", guarantee="at-least-once",
                   checkpoints=store, data_dir=str(data))
        assert run_here(WORDCOUNT, **run).stages[0]["processed"] == 40
        done = ok_here("reset", name, "--yes", *d).stdout
        where = (f"__eos_checkpoint_{name}_1" if store == "kafka"
                 else str(data / "state" / "checkpoints" / name / "1"))
        assert where in done, done
        assert run_here(WORDCOUNT, **run).stages[0]["processed"] == 40, store
    from eos_runtime.transport import open_transport

    with open_transport(data_dir=str(data)) as t:   # made again by the second run
        assert "__eos_checkpoint_wck_1" in t.list_topics()


def test_checkpoint_show_prints_the_positions_of_the_jobs_checkpoint_store(tmp_path):
    from eos_runtime.joblog.checkpoints import Checkpoint, TopicCheckpoints
    from eos_runtime.transport import open_transport

    data = tmp_path / "data"
    d = ("--data-dir", str(data))
    ok_here("produce", "lines", "--generate", "words", "--count", "40", *d)
    key = "tasknames.task-0.systems.local.streams.lines.partitions.0"
    # The stores are where the sources start: moved behind the change log's commit, the
    # tool must show the store's position, not the commit's.
    # the runs in this process: the tool is tested (--checkpoints through the CLI: above)
    run_here(WORDCOUNT, name="wcf", sink="counts-f", guarantee="at-least-once",
             checkpoints="filesystem", data_dir=str(data))
    (data / "state" / "checkpoints" / "wcf" / "1" / "task-0.json").write_text(
        json.dumps({"offsets": [["lines", 0, 7]]}))
    shown = ok_here("checkpoint", "show", "wcf", *d).stdout
    assert f"\n{key}=7\n" in shown, shown
    assert "file-system checkpoints in " in shown
    elsewhere = tmp_path / "elsewhere"
    # no files there: the tasks would start from the change log's commit (P3a), shown
    assert f"\n{key}=20\n" in ok_here("checkpoint", "show", "wcf", *d, "--state-dir",
                                      str(elsewhere)).stdout

    run_here(WORDCOUNT, name="wck", sink="counts-k", guarantee="at-least-once",
             checkpoints="kafka", job_id="3", data_dir=str(data))
    with open_transport(data_dir=str(data)) as t:
        store = TopicCheckpoints(t, "wck", 4, "3")
        store.start()
        store.register(0)
        store.write_checkpoint(0, Checkpoint({("lines", 0): 5}))
    shown = ok_here("checkpoint", "show", "wck", *d).stdout
    assert f"\n{key}=5\n" in shown, shown
    assert "checkpoint topic __eos_checkpoint_wck_3" in shown
    # Only reads: a checkpoint topic that is gone is not made again; the tasks would then
    # start from the change log's commit (P3a), which is shown.
    with open_transport(data_dir=str(data)) as t:
        t.delete_topics(["__eos_checkpoint_wck_3"])
    assert f"\n{key}=20\n" in ok_here("checkpoint", "show", "wck", *d).stdout
    with open_transport(data_dir=str(data)) as t:
        assert "__eos_checkpoint_wck_3" not in t.list_topics()
