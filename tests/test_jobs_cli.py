"""Jobs and topics as a user manages them (issue 11, item 7): ``eos consume`` finds the job
that wrote a topic, ``eos jobs``, ``eos topics``, and the ``--name``/``--source``/``--sink``
overrides of ``eos run`` and ``eos stop``. Real processes, the real local log, one real
Spark run of word count (~12 s); other jobs' control topics are written directly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from eos_runtime.protocol import wire
from eos_runtime.runtime.control import ControlLog, layout_stages
from eos_runtime.transport import open_transport

from test_cli import WORDCOUNT, eos, error_line, ok

COUNT = 500


@pytest.fixture(scope="module")
def wordcount(tmp_path_factory):
    """A local log where word count ran once, bounded, exactly-once."""
    data = tmp_path_factory.mktemp("jobs") / "data"
    ok("produce", "lines", "--generate", "words", "--count", str(COUNT), "--data-dir", str(data))
    ok("run", WORDCOUNT, "--data-dir", str(data), "--json")
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
    with_job = ok("consume", "counts", "--job", "wordcount", "--data-dir", str(wordcount))
    without = ok("consume", "counts", "--data-dir", str(wordcount))
    assert without.stdout == with_job.stdout and with_job.stdout
    assert "wordcount" in without.stderr
    counted = ok("consume", "counts", "--count", "--data-dir", str(wordcount)).stdout
    assert int(counted) == len(with_job.stdout.splitlines())


def test_consume_without_job_names_the_jobs_when_several_wrote_the_topic(wordcount, tmp_path):
    data = copy_log(wordcount, tmp_path / "data")
    fake_job(data, "wordcount-b", wordcount_layout(data))
    line = error_line(eos("consume", "counts", "--data-dir", str(data)))
    assert "'wordcount'" in line and "'wordcount-b'" in line and "--job" in line
    picked = ok("consume", "counts", "--job", "wordcount", "--data-dir", str(data))
    assert picked.stdout


def test_consume_without_job_of_a_topic_no_job_wrote_asks_for_all(wordcount):
    line = error_line(eos("consume", "lines", "--data-dir", str(wordcount)))
    assert "--all" in line and "lines" in line


def test_layout_lines_read_back(wordcount):
    stages = layout_stages(wordcount_layout(wordcount))
    assert [(s.input_topic, s.output_topic) for s in stages] == \
        [("lines", "wordcount.shuffle-1"), ("wordcount.shuffle-1", "counts")]
