"""Jobs and topics as a user manages them (issue 11, item 7): ``eos consume`` finds the job
that wrote a topic, ``eos jobs``, ``eos topics``, and the ``--name``/``--source``/``--sink``
overrides of ``eos run`` and ``eos stop``. The console entry point in this process
(``here``), the real local log, one real Spark run of word count; other jobs' control
topics are written directly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eos_runtime.joblog.control import ControlLog
from eos_runtime.joblog.layout import layout_stages
from eos_runtime.protocol import wire
from eos_runtime.transport import open_transport

from test_cli import WORDCOUNT, error_line, here, ok_here

COUNT = 500


@pytest.fixture(scope="module")
def wordcount(tmp_path_factory):
    """A local log where word count ran once, bounded, exactly-once."""
    data = tmp_path_factory.mktemp("jobs") / "data"
    ok_here("produce", "lines", "--generate", "words", "--count", str(COUNT),
            "--data-dir", str(data))
    ok_here("run", WORDCOUNT, "--data-dir", str(data), "--json")
    return data


def copy_log(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def fake_job(data: Path, job: str, layout: tuple[str, ...], *, bounded: bool = True,
             stop: bool = False) -> None:
    """Append a run of ``job`` with ``layout`` to its control topic (as a driver would)."""
    with open_transport(data_dir=str(data)) as t:
        log = ControlLog(t, job)
        log.create()
        runs = log.runs()
        run = runs[-1].start.run + 1 if runs else 0
        log._append(wire.RunStart(run, 1_700_000_000_000, bounded, layout))
        if stop:
            log._append(wire.StopRequest(run, 1_700_000_001_000, "test"))


def wordcount_layout(data: Path) -> tuple[str, ...]:
    with open_transport(data_dir=str(data)) as t:
        last = ControlLog(t, "wordcount").last_run()
    assert last is not None
    return last.start.layout


# --------------------------------------------------------------------------- eos consume

def test_consume_without_job_reads_the_one_job_whose_sink_the_topic_is(wordcount):
    with_job = ok_here("consume", "counts", "--job", "wordcount", "--data-dir", str(wordcount))
    without = ok_here("consume", "counts", "--data-dir", str(wordcount))
    assert without.stdout == with_job.stdout and with_job.stdout
    assert "wordcount" in without.stderr
    counted = ok_here("consume", "counts", "--count", "--data-dir", str(wordcount)).stdout
    assert int(counted) == len(with_job.stdout.splitlines())


def test_consume_without_job_names_the_jobs_when_several_wrote_the_topic(wordcount, tmp_path):
    data = copy_log(wordcount, tmp_path / "data")
    fake_job(data, "wordcount-b", wordcount_layout(data))
    line = error_line(here("consume", "counts", "--data-dir", str(data)))
    assert "'wordcount'" in line and "'wordcount-b'" in line and "--job" in line
    picked = ok_here("consume", "counts", "--job", "wordcount", "--data-dir", str(data))
    assert picked.stdout


def test_consume_without_job_of_a_topic_no_job_wrote_asks_for_all(wordcount):
    line = error_line(here("consume", "lines", "--data-dir", str(wordcount)))
    assert "--all" in line and "lines" in line


def test_layout_lines_read_back(wordcount):
    stages = layout_stages(wordcount_layout(wordcount))
    assert [(s.input_topic, s.output_topic) for s in stages] == \
        [("lines", "wordcount.shuffle-1"), ("wordcount.shuffle-1", "counts")]


# --------------------------------------------------------------------------- eos jobs

def test_jobs_lists_each_job_its_runs_and_last_commits(wordcount, tmp_path):
    data = copy_log(wordcount, tmp_path / "data")
    layout = wordcount_layout(data)
    fake_job(data, "wordcount", layout, bounded=False, stop=True)     # run 1, stopped
    fake_job(data, "other", tuple(line.replace("wordcount.", "other.").replace("counts", "c2")
                                  for line in layout))
    jobs = json.loads(ok_here("jobs", "--json", "--data-dir", str(data)).stdout)
    assert [j["job"] for j in jobs] == ["other", "wordcount"]
    other, wc = jobs
    assert wc["guarantee"] == "exactly-once" and (wc["source"], wc["sink"]) == ("lines", "counts")
    assert [(r["run"], r["bounded"], r["stopped"]) for r in wc["runs"]] == \
        [(0, True, False), (1, False, True)]
    tasks = [t for s in wc["stages"] for t in s["tasks"]]
    assert [t["task_id"] for t in wc["tasks"]] == tasks
    assert all(t["committed_version"] is not None and t["committed_run"] == 0
               for t in wc["tasks"])
    assert other["sink"] == "c2" and all(t["committed_version"] is None for t in other["tasks"])
    text = ok_here("jobs", "--data-dir", str(data)).stdout
    assert "wordcount (exactly-once): lines -> counts, 2 stages" in text
    assert "run 1: unbounded" in text and "stop asked (test)" in text
    assert "last commits: task 0 version" in text
    assert "task 0 none" in text   # other never committed
    fast = json.loads(ok_here("jobs", "--json", "--no-commits", "--data-dir", str(data)).stdout)
    assert all(j["tasks"] == [] for j in fast)


def test_jobs_on_an_empty_log(tmp_path):
    assert ok_here("jobs", "--data-dir", str(tmp_path)).stdout.startswith(
        "no jobs on the local log")
    assert json.loads(ok_here("jobs", "--json", "--data-dir", str(tmp_path)).stdout) == []


# --------------------------------------------------------------------------- eos topics

def test_topics_says_which_job_uses_each_topic_as_what(wordcount):
    topics = json.loads(ok_here("topics", "--json", "--data-dir", str(wordcount)).stdout)
    by = {t["topic"]: t for t in topics}
    assert by["lines"]["partitions"] == 2
    assert by["lines"]["uses"] == [{"job": "wordcount", "role": "source"}]
    assert by["counts"]["uses"] == [{"job": "wordcount", "role": "sink"}]
    assert by["wordcount.shuffle-1"]["uses"] == [{"job": "wordcount", "role": "channel"}]
    assert by["wordcount.changelog"]["uses"] == [{"job": "wordcount", "role": "changelog"}]
    assert by["wordcount.control"]["uses"] == [{"job": "wordcount", "role": "control"}]
    assert by["wordcount.heartbeats"]["uses"] == [{"job": "wordcount", "role": "heartbeats"}]
    text = ok_here("topics", "--data-dir", str(wordcount)).stdout
    assert any(line.startswith("lines ") and line.endswith("source of wordcount")
               for line in text.splitlines()), text
    assert "change log of wordcount" in text and "control topic of wordcount" in text


def test_topics_of_a_missing_kafka_broker_is_one_line(tmp_path):
    line = error_line(here("topics", "--bootstrap-servers", "not a host"))
    assert "not a host" in line


# --------------------------------------------------------------------------- --name/--source/--sink

def test_run_and_stop_under_another_name_source_and_sink(wordcount, tmp_path):
    data = copy_log(wordcount, tmp_path / "data")
    ok_here("produce", "lines2", "--generate", "words", "--count", "200", "--data-dir", str(data))
    summary = json.loads(ok_here("run", WORDCOUNT, "--name", "wc2", "--source", "lines2",
                                 "--sink", "counts2", "--data-dir", str(data), "--json").stdout)
    assert summary["job"] == "wc2"
    jobs = {j["job"]: j for j in json.loads(ok_here("jobs", "--json", "--no-commits",
                                                "--data-dir", str(data)).stdout)}
    assert (jobs["wc2"]["source"], jobs["wc2"]["sink"]) == ("lines2", "counts2")
    assert (jobs["wordcount"]["source"], jobs["wordcount"]["sink"]) == ("lines", "counts")
    counts = ok_here("consume", "counts2", "--data-dir", str(data))   # found: wc2's sink
    assert "'wc2'" in counts.stderr and counts.stdout
    # eos stop with the same overrides asks the renamed job (a driver of it holds its lease)
    from test_lease_cli import other_driver

    other_driver({"data_dir": str(data)}, "wc2")
    stop = ok_here("stop", WORDCOUNT, "--name", "wc2", "--source", "lines2", "--sink", "counts2",
                   "--data-dir", str(data))
    assert "job 'wc2'" in stop.stdout
    with open_transport(data_dir=str(data)) as t:
        assert ControlLog(t, "wc2").last_run().stopped is not None
        assert ControlLog(t, "wordcount").last_run().stopped is None


def test_override_errors_are_one_line(tmp_path):
    line = error_line(here("run", WORDCOUNT, "--name", "bad name!", "--data-dir", str(tmp_path)))
    assert "bad name!" in line
    line = error_line(here("stop", WORDCOUNT, "--name", "never-ran", "--data-dir", str(tmp_path)))
    assert "never-ran" in line
    p = here("stop", "wordcount", "--sink", "x", "--data-dir", str(tmp_path))
    assert p.returncode == 2 and "PIPELINE.py" in p.stderr


# --------------------------------------------------------------------------- topics named *.control

def test_a_user_topic_named_like_a_control_topic_is_not_a_job(wordcount, tmp_path):
    """Issue 22 case 9: a job is known by its control records, not by a name. A user's
    ``orders.control`` (lines of text) and an empty ``idle.control`` are no jobs: eos jobs,
    topics and consume skip them (jobs says so on stderr) instead of failing on them."""
    data = copy_log(wordcount, tmp_path / "data")
    ok_here("produce", "orders.control", "--lines-from", "-", "--data-dir", str(data),
            stdin="open\nclosed\n")
    with open_transport(data_dir=str(data)) as t:
        from eos_runtime.transport import TopicSpec

        t.create_topics([TopicSpec("idle.control", 1)])
    jobs = ok_here("jobs", "--json", "--data-dir", str(data))
    assert [j["job"] for j in json.loads(jobs.stdout)] == ["wordcount"]
    text = ok_here("jobs", "--data-dir", str(data))
    assert text.stdout.startswith("wordcount (exactly-once)"), text.stdout
    assert "note: topic 'orders.control' is not a job's control topic" in text.stderr
    assert "note: topic 'idle.control' is not a job's control topic" in text.stderr
    by = {t["topic"]: t for t in json.loads(ok_here("topics", "--json", "--data-dir",
                                                str(data)).stdout)}
    assert by["orders.control"]["uses"] == [] and by["idle.control"]["uses"] == []
    assert by["counts"]["uses"] == [{"job": "wordcount", "role": "sink"}]
    counts = ok_here("consume", "counts", "--data-dir", str(data))
    assert "'wordcount'" in counts.stderr and counts.stdout
    assert ok_here("consume", "orders.control", "--all", "--data-dir", str(data)).stdout == \
        "\topen\n\tclosed\n"


# ------------------------------------------------------------------ the project's __eos_* topics

def test_topics_shows_the_checkpoint_topic_and_hides_kafka_s_internal_ones(wordcount, tmp_path):
    """Issue 27 item 19: ``__eos_checkpoint_<job>_<id>`` is the job's (its input positions
    under --checkpoints kafka); Kafka's own ``__consumer_offsets`` and
    ``__transaction_state`` stay hidden."""
    from eos_runtime.transport import TopicSpec

    data = copy_log(wordcount, tmp_path / "data")
    with open_transport(data_dir=str(data)) as t:
        t.create_topics([TopicSpec("__eos_checkpoint_wordcount_1", 2),
                         TopicSpec("__consumer_offsets", 1),
                         TopicSpec("__transaction_state", 1)])
    by = {t["topic"]: t for t in json.loads(ok_here("topics", "--json", "--data-dir",
                                                str(data)).stdout)}
    assert "__consumer_offsets" not in by and "__transaction_state" not in by
    assert by["__eos_checkpoint_wordcount_1"]["uses"] == [{"job": "wordcount",
                                                           "role": "checkpoints"}]
    text = ok_here("topics", "--data-dir", str(data)).stdout
    assert any(line.startswith("__eos_checkpoint_wordcount_1 ")
               and line.endswith("checkpoint topic of wordcount") for line in text.splitlines())


def test_consume_of_a_job_s_dead_letters_without_job_reads_that_job_s(wordcount, tmp_path):
    """Issue 27 (small): ``<job>.dead-letters`` is the job's, as eos topics says; eos
    consume finds the job from the topic's name instead of asking for --job."""
    from eos_runtime.transport import TopicSpec

    data = copy_log(wordcount, tmp_path / "data")
    with open_transport(data_dir=str(data)) as t:
        t.create_topics([TopicSpec("wordcount.dead-letters", 1)])
    got = ok_here("consume", "wordcount.dead-letters", "--data-dir", str(data))
    assert "committed output of job 'wordcount'" in got.stderr and got.stdout == ""
