"""Every numeric setting is checked against its range where it is given (issue 22, case
8): ``--commit-interval inf`` was accepted, recorded with the run, and every task then
died with ``OverflowError``. One line names the setting and the accepted range. Cheap:
the Pipeline constructor, start_pipeline before it opens anything, click's CliRunner."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from eos_runtime import Pipeline, run_pipeline, start_pipeline
from eos_runtime.cli import main
from eos_runtime.errors import ConfigError

INF, NAN = float("inf"), float("nan")


def keyed(**pipeline) -> Pipeline:
    p = Pipeline("ranges", **pipeline)
    p.source("in").map(str).sink("out")
    return p


@pytest.mark.parametrize("setting,value", [
    ("commit_interval", INF), ("commit_interval", NAN), ("commit_interval", -1.0),
    ("commit_interval", 0), ("commit_interval", 1e12), ("commit_interval", "5"),
    ("commit_every", -1), ("commit_every", 2**63), ("commit_every", 1.5),
    ("parallelism", 0), ("parallelism", 10**9),
    ("outage_budget", INF), ("outage_budget", NAN), ("outage_budget", -1),
    ("outage_budget", 1e300),
])
def test_the_pipeline_refuses_a_setting_out_of_range(setting, value):
    with pytest.raises(ConfigError, match=rf"^{setting}.*: give "):
        Pipeline("ranges", **{setting: value})


@pytest.mark.parametrize("setting,value", [("parallelism", 0), ("parallelism", 10**9),
                                           ("partitions", 10**12), ("partitions", 1.0)])
def test_key_by_refuses_a_count_out_of_range(setting, value):
    stream = Pipeline("ranges").source("in")
    with pytest.raises(ConfigError, match=rf"^key_by {setting}.*: give "):
        stream.key_by(str, **{setting: value})


@pytest.mark.parametrize("setting,value", [
    ("commit_interval", INF), ("commit_interval", NAN), ("commit_every", -5),
    ("parallelism", 10**8), ("sink_partitions", 0), ("max_attempts", 0),
    ("max_attempts", 10**9), ("buffer_max_bytes", 0), ("buffer_max_bytes", 2**70),
    ("poll_records", 0), ("poll_records", INF), ("channel_batch", -1),
    ("channel_batch", 10**12), ("lease_timeout", INF), ("lease_timeout", NAN),
    ("lease_timeout", 0.001), ("outage_budget", INF), ("no_progress_timeout", INF),
    ("no_progress_timeout", -1), ("no_progress_timeout", NAN),
])
def test_start_pipeline_refuses_a_setting_out_of_range_before_it_records_anything(
        setting, value, tmp_path):
    data = tmp_path / "data"
    with pytest.raises(ConfigError, match=rf"^{setting}.*: give "):
        start_pipeline(keyed(), data_dir=str(data), **{setting: value})
    assert not data.exists()


@pytest.mark.parametrize("value", [INF, NAN, -0.5])
def test_run_pipeline_refuses_a_progress_interval_out_of_range(value, tmp_path):
    data = tmp_path / "data"
    with pytest.raises(ConfigError, match=r"^progress_interval .*: give "):
        run_pipeline(keyed(), data_dir=str(data), progress_interval=value)
    assert not data.exists()


@pytest.mark.parametrize("args", [
    ["run", "p.py", "--commit-interval", "inf"], ["run", "p.py", "--commit-interval", "nan"],
    ["run", "p.py", "--commit-interval", "1e300"], ["run", "p.py", "--commit-every", "-1"],
    ["run", "p.py", "--commit-every", str(2**63)], ["run", "p.py", "--parallelism", "10000000"],
    ["run", "p.py", "--sink-partitions", "0"], ["run", "p.py", "--max-attempts", str(10**9)],
    ["run", "p.py", "--no-progress-timeout", "inf"], ["run", "p.py", "--outage-budget", "nan"],
    ["run", "p.py", "--lease-timeout", "inf"], ["run", "p.py", "--lease-timeout", "nan"],
    ["experiment", "wordcount", "--rate", "inf"], ["experiment", "wordcount", "--rate", "nan"],
    ["experiment", "wordcount", "--lines", str(10**12)],
    ["experiment", "wordcount", "--runs", "0"],
    ["bench", "--commit-interval", "inf"], ["bench", "--rate", "nan"],
    ["bench", "--steady-seconds", "inf"], ["bench", "--idle-timeout", "nan"],
    ["bench", "--probe-every", "inf"], ["bench", "--records", str(10**15)],
    ["kafka", "up", "--timeout", "inf"], ["kafka", "up", "--timeout", "nan"],
    ["kafka", "up", "--timeout", "-1"], ["kafka", "up", "--timeout", "0"],
    ["kafka", "down", "--timeout", "nan"], ["kafka", "down", "--timeout", "-1"],
    ["kafka", "down", "--timeout", "inf"],
])
def test_the_command_line_refuses_a_setting_out_of_range(args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    option = next(a for a in args if a.startswith("--"))
    assert f"Invalid value for '{option}'" in result.output
    assert "give " in result.output


def test_every_numeric_option_of_every_command_has_a_range():
    """``eos kafka down --timeout nan`` was taken (a bare float): the broker was killed
    straight after its SIGTERM, its kept data written uncleanly. A numeric option is a
    ``limits.option`` (or a click range that refuses nan and inf)."""
    import click

    from test_cli_docs import commands as every_command

    commands = dict(every_command())
    assert {("run",), ("kafka", "down"), ("bench",)} <= set(commands)
    bare = [f"{' '.join(path)} {param.opts[0]}" for path, command in commands.items()
            for param in command.params
            if isinstance(param, click.Option) and param.type in (click.FLOAT, click.INT)]
    assert not bare, f"numeric options without a range: {bare}"


def test_an_integral_float_interval_and_the_extremes_of_each_range_are_taken():
    p = Pipeline("ranges", commit_interval=0.001, commit_every=0, outage_budget=0)
    assert p.commit_interval == 0.001
    Pipeline("ranges", commit_interval=1e9, commit_every=2**31 - 1, parallelism=10_000)
