"""``max_dead_letters`` (``eos run --max-dead-letters N|P%``, issue 27 item 15): the rule
alone, then real runs on the local log: an unbounded run stopped gracefully once its
committed dead letters pass N, a share checked at the run's end (at the limit passes,
past it fails), and the refusals. No timing: an unbounded run ends only by the limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from eos_runtime.dead_letter_limit import DeadLetterLimit, parse_limit
from eos_runtime.errors import ConfigError, DeadLetterLimitExceeded

from test_cli import eos, error_line

PIPELINE = '''from eos_runtime import Pipeline


def upper(word):
    if int(word[1:]) % 10 == 0:
        raise ValueError(f"no tenths ({word})")
    return word.upper()


pipeline = Pipeline("tenths", commit_every=100)
pipeline.source("words", value="utf8").map(upper).sink("upper")
'''
WORDS = 600   # w0 .. w599: every tenth raises, 60 dead letters


# ------------------------------------------------------------------ the rule

@pytest.mark.parametrize("spec, limit", [
    ("10", DeadLetterLimit(count=10)), (0, DeadLetterLimit(count=0)),
    (" 7 ", DeadLetterLimit(count=7)), ("1%", DeadLetterLimit(percent=1.0)),
    ("0.5%", DeadLetterLimit(percent=0.5)), ("100%", DeadLetterLimit(percent=100.0)),
    ("0%", DeadLetterLimit(percent=0.0))])
def test_a_limit_is_a_count_or_a_share(spec, limit):
    assert parse_limit(spec) == limit
    assert str(limit) in ("10", "0", "7", "1%", "0.5%", "100%", "0%")


@pytest.mark.parametrize("spec", ["", "ten", "-1", -1, "1.5", "101%", "-1%", "nan%", "%",
                                  "inf%", True, 2.5])
def test_anything_else_is_refused_in_one_line_saying_what_to_give(spec):
    with pytest.raises(ConfigError) as err:
        parse_limit(spec)
    assert str(err.value) == (f"--max-dead-letters {spec!r}: give a count of records (0 or "
                              f"more, such as 100) or a share of the records read (0% to "
                              f"100%, such as 1% or 0.5%)")


def test_more_than_the_limit_passes_it():
    ten, share = DeadLetterLimit(count=10), DeadLetterLimit(percent=10.0)
    assert not ten.passed(10, 50) and ten.passed(11, 10_000)
    assert not share.passed(60, 600) and share.passed(61, 600)
    assert not DeadLetterLimit(count=0).passed(0, 0) and DeadLetterLimit(count=0).passed(1, 9)
    assert not DeadLetterLimit(percent=0).passed(0, 0)


def test_a_look_at_a_running_run_stops_at_a_count_never_at_a_share():
    stages = [{"dead_letters": 8}, {"dead_letters": 3}]
    assert DeadLetterLimit(count=10).passed_live(stages) == 11
    assert DeadLetterLimit(count=11).passed_live(stages) is None
    # 11 of what was read so far is noise early in a run: a share waits for the end
    assert DeadLetterLimit(percent=0.0).passed_live(stages) is None


# ------------------------------------------------------------------ runs

def _setup(tmp_path: Path) -> tuple[Path, str]:
    from eos_runtime.transport import open_transport

    from pipeline_oracles import produce

    data = str(tmp_path / "data")
    with open_transport(data_dir=data) as t:
        produce(t, "words", [f"w{i}".encode() for i in range(WORDS)], partitions=1)
    path = tmp_path / "tenths.py"
    path.write_text(PIPELINE)
    return path, data


def _committed(data: str, topic: str, job: str) -> int:
    from eos_runtime.joblog.committed import read_output
    from eos_runtime.transport import open_transport

    with open_transport(data_dir=data) as t:
        return len(read_output(t, topic, job=job))


def test_an_unbounded_run_past_n_dead_letters_is_stopped_and_fails_after_its_summary(tmp_path):
    """The run would read on forever: only the limit ends it. It is stopped gracefully
    (what it committed is consistent: every record it consumed is in the sink or in the
    dead letters, once), prints its summary, then fails naming the count, the limit and
    the topic."""
    from click.testing import CliRunner

    from eos_runtime.cli import main

    path, data = _setup(tmp_path)
    result = CliRunner().invoke(main, ["run", str(path), "--data-dir", data, "--unbounded",
                                       "--dead-letters", "--max-dead-letters", "10"])
    failed = result.exception
    assert isinstance(failed, DeadLetterLimitExceeded), (result.output, result.exception)
    summary = failed.summary
    dead = summary.dead_letters
    assert summary.stopped and dead > 10
    assert str(failed) == (
        f"{dead} records went to dead letters (topic tenths.dead-letters), more than "
        f"--max-dead-letters 10 allows: the run was stopped there (final checkpoints), and "
        f"what it committed stands (the next run goes on from there); eos consume "
        f"tenths.dead-letters shows them")
    assert dead == _committed(data, "tenths.dead-letters", "tenths")
    assert summary.sink_records == _committed(data, "upper", "tenths")
    assert summary.sink_records + dead == summary.input_records
    # said at once on stderr; the summary on stdout, its last line the dead letters'
    assert ("stopping run 0 of tenths (" in result.stderr
            and "records went to dead letters, more than --max-dead-letters 10 allows): "
                "the sources take a final checkpoint" in result.stderr), result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("tenths run 0 (stopped): ")
    assert lines[-1] == (f"{dead} records went to dead letters (topic tenths.dead-letters): "
                         f"eos consume tenths.dead-letters")


def test_a_share_is_checked_at_the_end_at_it_passes_past_it_fails(tmp_path):
    """60 of 600 records read is 10%: ``10%`` lets the run pass, ``9.9%`` fails it once it
    ended, saying the share (a share early in a run is noise: no stop on it)."""
    from eos_runtime.runner import load_pipeline, run_pipeline

    path, data = _setup(tmp_path)
    summary = run_pipeline(load_pipeline(str(path)), data_dir=data, dead_letters=True,
                           max_dead_letters="10%")
    assert (summary.dead_letters, summary.input_records) == (60, 600)
    pipeline = load_pipeline(str(path))
    pipeline.rename("tenths2", sink="upper2")   # another job: it reads the 600 again
    with pytest.raises(DeadLetterLimitExceeded) as err:
        run_pipeline(pipeline, data_dir=data, dead_letters=True, max_dead_letters="9.9%")
    assert str(err.value) == (
        "60 records went to dead letters (topic tenths2.dead-letters), 10% of the 600 records "
        "read, more than --max-dead-letters 9.9% allows: the run ended, and what it committed "
        "stands (the next run goes on from there); eos consume tenths2.dead-letters shows "
        "them")
    assert not err.value.summary.stopped and err.value.summary.sink_records == 540


def test_a_limit_without_dead_letters_or_that_is_no_limit_is_refused_in_one_line(tmp_path):
    path, data = _setup(tmp_path)
    line = error_line(eos("run", str(path), "--data-dir", data, "--max-dead-letters", "10"))
    assert line == ("error: --max-dead-letters 10: job 'tenths' has no dead letters (a record "
                    "whose function raises stops the run): turn them on with --dead-letters "
                    "or --dead-letter-topic (Pipeline(dead_letters=True))")
    line = error_line(eos("run", str(path), "--data-dir", data, "--dead-letters",
                          "--max-dead-letters", "ten"))
    assert line.startswith("error: --max-dead-letters 'ten': give a count of records")
