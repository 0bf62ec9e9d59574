"""The checkpoint tool's properties file: rendered from checkpoints, parsed back with every
line checked, errors naming the line."""

from __future__ import annotations

import pytest

from eos_runtime import Pipeline
from eos_runtime.checkpoint_tool import parse, render
from eos_runtime.errors import ConfigError
from eos_runtime.joblog.checkpoints import Checkpoint
from eos_runtime.plan import plan_job
from eos_runtime.transport import TopicSpec, open_transport


@pytest.fixture
def plan(tmp_path):
    with open_transport(data_dir=str(tmp_path)) as t:
        t.create_topics([TopicSpec("lines", 2)])
        p = Pipeline("wc")
        p.source("lines").flat_map(str.split).key_by(str).sink("counts")
        return plan_job(p, t)


def bounds(topic, partition):
    return 0, 100


def test_show_then_parse_round_trip(plan):
    text = render(plan, "locallog", {0: Checkpoint({("lines", 0): 40}, 7, 2), 1: None,
                                     2: Checkpoint({("wc.shuffle-1", 0): 9}, 7, 1)})
    assert "tasknames.task-0.systems.locallog.streams.lines.partitions.0=40" in text
    assert "tasknames.task-1.systems.locallog.streams.lines.partitions.1=\n" in text
    assert "# task-0 (stage 0, reads lines): version 7, generation 2" in text
    assert "#   tasknames.task-2" in text              # internal channels: shown only
    edited = text.replace("partitions.0=40", "partitions.0=12").replace("partitions.1=",
                                                                        "partitions.1=5")
    assert parse(edited, plan, "locallog", bounds).offsets == {0: {("lines", 0): 12},
                                                                1: {("lines", 1): 5}}


@pytest.mark.parametrize("line,message", [
    ("garbage", "line 2: expected key=offset"),
    ("tasknames.task-0.systems.locallog.streams.lines.partition.0=1", "is not tasknames"),
    ("tasknames.task-9.systems.locallog.streams.lines.partitions.0=1", "not a source task"),
    ("tasknames.task-2.systems.locallog.streams.wc.shuffle-1.partitions.0=1",
     "internal channels cannot be edited"),
    ("tasknames.task-0.systems.kafka.streams.lines.partitions.0=1", "runs on 'locallog'"),
    ("tasknames.task-0.systems.locallog.streams.lines.partitions.1=1", "reads lines partitions"),
    ("tasknames.task-0.systems.locallog.streams.lines.partitions.0=x", "not an integer"),
    ("tasknames.task-0.systems.locallog.streams.lines.partitions.0=101", r"outside lines\[0\]"),
])
def test_a_bad_line_is_refused_naming_it(plan, line, message):
    with pytest.raises(ConfigError, match=message):
        parse(f"# header\n{line}\n", plan, "locallog", bounds)


def test_a_file_setting_nothing_or_a_partition_twice_is_refused(plan):
    with pytest.raises(ConfigError, match="sets no offset"):
        parse("# nothing\n", plan, "locallog", bounds)
    key = "tasknames.task-0.systems.locallog.streams.lines.partitions.0"
    with pytest.raises(ConfigError, match="line 2: .*given twice"):
        parse(f"{key}=1\n{key}=2\n", plan, "locallog", bounds)
