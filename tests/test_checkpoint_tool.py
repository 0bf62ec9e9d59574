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


def test_a_store_position_ahead_of_the_change_log_is_shown_where_the_task_starts(plan):
    """P3a holds a checkpoint store's position to the change log's last commit; the tool
    showed the store's own (50), so an unedited write made a Startpoint at 50 and the
    records from 40 were skipped."""
    text = render(plan, "locallog", {0: Checkpoint({("lines", 0): 40}, 7, 2), 1: None},
                  kept={0: Checkpoint({("lines", 0): 50}), 1: Checkpoint({("lines", 1): 8})},
                  store="checkpoint topic")
    assert "tasknames.task-0.systems.locallog.streams.lines.partitions.0=40\n" in text
    assert "tasknames.task-1.systems.locallog.streams.lines.partitions.1=8\n" in text


def test_a_partition_with_a_pending_startpoint_is_left_empty_so_a_write_keeps_it(plan):
    """show, edit another line, write: the partition's line held the checkpoint's offset,
    and the write made it a Startpoint there, dropping the pending one (--oldest, say)."""
    text = render(plan, "locallog", {0: Checkpoint({("lines", 0): 40}, 7, 2),
                                     1: Checkpoint({("lines", 1): 30}, 7, 2)},
                  pending={("lines", 0): "oldest"})
    assert "tasknames.task-0.systems.locallog.streams.lines.partitions.0=\n" in text
    assert ("# lines[0]: a Startpoint is pending (oldest): left empty, a write keeps it; "
            "give an offset to replace it (the checkpoint: 40)") in text
    edited = text.replace("partitions.1=30", "partitions.1=12")
    assert parse(edited, plan, "locallog", bounds).offsets == {1: {("lines", 1): 12}}
