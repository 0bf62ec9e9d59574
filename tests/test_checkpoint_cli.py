"""The checkpoint tool and Startpoints as an operator uses them: the console entry point in
this process (``here``; the runs that set the scene: ``run_here``), the real local log, real
Spark. The round trip: a bounded word count, ``eos checkpoint show``, one offset edited
back, ``eos checkpoint write``, another run; the exactly-once output must then equal an
oracle over the input the job was told to read (that partition's records from the edited
offset on, counted a second time, on top of the state the job kept)."""

from __future__ import annotations

import json
import os
import re
import socket
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from eos_runtime.joblog.control import ControlLog
from eos_runtime.protocol import wire
from eos_runtime.transport import TopicPartition, open_transport

from test_cli import WORDCOUNT, assert_exactly_once, error_line, here, ok_here, run_here

COUNT = 400
KEY0 = "tasknames.task-0.systems.local.streams.lines.partitions.0"


def lines_by_partition(data: Path) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for r in json.loads(ok_here("consume", "lines", "--all", "--json", "--data-dir",
                                str(data)).stdout):
        out.setdefault(r["partition"], []).append(r["value"])
    return out


def words_in(lines) -> Counter:
    c: Counter = Counter()
    for line in lines:
        c.update(line.split())
    return c


def test_show_edit_write_run_reads_again_from_the_edited_offset(tmp_path):
    data = tmp_path / "data"
    d = ("--data-dir", str(data))
    ok_here("produce", "lines", "--generate", "words", "--count", str(COUNT), "--seed", "8", *d)
    run_here(WORDCOUNT, data_dir=str(data))
    shown = ok_here("checkpoint", "show", "wordcount", *d).stdout
    half = COUNT // 2
    assert f"{KEY0}={half}\n" in shown, shown
    assert re.search(r"^# task-2 \(stage 1, reads wordcount.shuffle-1\): version \d+, "
                     r"generation \d+$", shown, re.M), shown
    assert re.search(r"^#   tasknames.task-2.systems.local.streams.wordcount.shuffle-1"
                     r".partitions.0=\d+$", shown, re.M), shown

    edited = tmp_path / "wc.properties"
    edited.write_text(shown.replace(f"{KEY0}={half}", f"{KEY0}=150"))
    wrote = ok_here("checkpoint", "write", "wordcount", str(edited), *d).stdout
    assert "task-0 lines[0] -> offset 150" in wrote, wrote
    listed = ok_here("startpoint", "list", "wordcount", *d).stdout
    assert "lines[0] task 0: offset 150" in listed, listed
    shown_again = ok_here("checkpoint", "show", "wordcount", *d).stdout
    assert "# startpoint pending for the next run: lines[0] (task-0) -> offset 150" in \
        shown_again
    # Shown again and written back as it is: the pending Startpoint's line is empty, so it
    # stays (its line held the checkpoint's offset, and the write replaced it with that).
    assert f"{KEY0}=\n" in shown_again, shown_again
    (tmp_path / "again.properties").write_text(shown_again)
    line = error_line(here("checkpoint", "write", "wordcount", str(tmp_path / "again.properties"),
                           *d))
    assert "sets no offset" in line, line
    (tmp_path / "again.properties").write_text(shown_again.replace(f"{KEY0}=", f"{KEY0}=150"))
    wrote = ok_here("checkpoint", "write", "wordcount", str(tmp_path / "again.properties"),
                    *d).stdout
    assert "replaced the Startpoint pending for lines[0]" in wrote and \
        wrote.count("replaced") == 1, wrote
    listed = ok_here("startpoint", "list", "wordcount", *d).stdout
    assert "lines[0] task 0: offset 150" in listed, listed

    run_here(WORDCOUNT, data_dir=str(data))
    parts = lines_by_partition(data)
    told = parts[0] + parts[1] + parts[0][150:]        # partition 0 from offset 150, again
    assert_exactly_once(data, words_in(told))
    assert f"{KEY0}={half}\n" in ok_here("checkpoint", "show", "wordcount", *d).stdout
    assert ok_here("startpoint", "list", "wordcount", *d).stdout.startswith("no startpoints")


def test_write_refuses_a_bad_line_and_show_and_write_refuse_while_a_run_holds_the_job(tmp_path):
    data = tmp_path / "data"
    d = ("--data-dir", str(data))
    ok_here("produce", "lines", "--generate", "words", "--count", "20", *d)
    p = here("checkpoint", "show", "wordcount", *d)
    assert error_line(p) == (f"error: job 'wordcount' has never run on the local log in "
                             f"{data}: it has no checkpoints (`eos jobs` lists the jobs there)")
    run_here(WORDCOUNT, data_dir=str(data))
    bad = tmp_path / "bad.properties"
    bad.write_text(f"# a comment\n{KEY0}=5\n{KEY0.replace('task-0', 'task-1')[:-1]}1=ten\n")
    assert error_line(here("checkpoint", "write", "wordcount", str(bad), *d)) == \
        "error: line 3: offset 'ten' is not an integer"
    bad.write_text(f"{KEY0}=11\n")
    assert error_line(here("checkpoint", "write", "wordcount", str(bad), *d)) == \
        "error: line 1: offset 11 is outside lines[0]'s offsets 0..10"
    # below the earliest offset: retention (here delete_records) moved it above 0
    with open_transport(data_dir=str(data)) as t:
        assert t.delete_records(TopicPartition("lines", 0), 4) == 4
    bad.write_text(f"# a comment\n\n{KEY0}=3\n")
    assert error_line(here("checkpoint", "write", "wordcount", str(bad), *d)) == \
        "error: line 3: offset 3 is outside lines[0]'s offsets 4..10"
    bad.write_text("tasknames.task-2.systems.local.streams.wordcount.shuffle-1.partitions.0=1\n")
    assert "the positions of internal channels cannot be edited" in \
        error_line(here("checkpoint", "write", "wordcount", str(bad), *d))
    assert ok_here("startpoint", "list", "wordcount", *d).stdout.startswith("no startpoints")

    with open_transport(data_dir=str(data)) as t:
        ControlLog(t, "wordcount").append_lease(wire.Lease(
            1, "acquire", "other", os.getpid(), socket.gethostname(), int(time.time() * 1000),
            3_600_000))
    good = tmp_path / "good.properties"
    good.write_text(f"{KEY0}=3\n")
    line = error_line(here("checkpoint", "write", "wordcount", str(good), *d))
    assert re.match(rf"^error: job 'wordcount' is running \(run 1, started .* by pid "
                    rf"{os.getpid()} on host .*\): the checkpoint tool writes positions only "
                    rf"while the job is stopped; wait for the run to end or `eos stop "
                    rf"wordcount` first$", line), line
    line = error_line(here("startpoint", "set", "wordcount", "lines", "0", "--oldest", *d))
    assert "Startpoints can be set only while the job is stopped" in line
    line = error_line(here("checkpoint", "show", "wordcount", *d))
    assert re.match(rf"^error: job 'wordcount' is running \(run 1, started .* by pid "
                    rf"{os.getpid()} on host .*\): the checkpoint tool shows positions only "
                    rf"while the job is stopped; wait for the run to end or `eos stop "
                    rf"wordcount` first$", line), line


def test_startpoint_set_list_clear_and_the_refusals(tmp_path):
    data = tmp_path / "data"
    d = ("--data-dir", str(data))
    ok_here("produce", "lines", "--generate", "words", "--count", "20", *d)
    run_here(WORDCOUNT, data_dir=str(data))
    out = ok_here("startpoint", "set", "wordcount", "lines", "1", "--timestamp",
                  "2026-11-22T07:00:00Z", "--task", "1", *d).stdout
    assert out.startswith("startpoint of job 'wordcount': lines[1] task 1 -> timestamp "
                          "1795330800000"), out
    ok_here("startpoint", "set", "wordcount", "lines", "0", "--offset", "4", *d)
    got = json.loads(ok_here("startpoint", "list", "wordcount", "--json", *d).stdout)
    assert [(g["stream"], g["partition"], g["task"], g["kind"], g["value"]) for g in got] == [
        ("lines", 0, None, "offset", 4), ("lines", 1, 1, "timestamp", 1795330800000)]
    assert error_line(here("startpoint", "set", "wordcount", "wordcount.shuffle-1", "0",
                           "--oldest", *d)).startswith(
        "error: 'wordcount.shuffle-1' is an internal topic of job 'wordcount': Startpoints "
        "apply to the job's source stream only")
    assert error_line(here("startpoint", "set", "wordcount", "lines", "1", "--oldest", "--task",
                           "0", *d)) == "error: task 0 does not read lines[1]: task 1 does"
    p = here("startpoint", "set", "wordcount", "lines", "0", *d)
    assert p.returncode == 2 and "give one of --offset, --timestamp, --oldest" in p.stderr
    # a stream the job does not read, with no Startpoint: a typo, not "cleared 0"
    assert error_line(here("startpoint", "clear", "wordcount", "--stream", "line", *d)) == (
        "error: job 'wordcount' reads 'lines', not 'line', and has no Startpoint of it")
    cleared = ok_here("startpoint", "clear", "wordcount", "--stream", "lines", "--partition", "0",
                      *d).stdout
    assert cleared == "cleared 1 startpoint of job 'wordcount'\n  lines[0]\n"
    assert ok_here("startpoint", "list", "wordcount", *d).stdout == \
        "lines[1] task 1: timestamp 1795330800000 (" + time.strftime(
            "%Y-%m-%d %H:%M:%S", time.localtime(1795330800)) + ")\n"
    ok_here("startpoint", "clear", "wordcount", *d)
    assert ok_here("startpoint", "list", "wordcount", *d).stdout.startswith("no startpoints")


@pytest.mark.kafka
def test_the_round_trip_on_kafka(kafka_bootstrap, tmp_path):
    tag = uuid.uuid4().hex[:8]
    job, source, sink = f"cpt-{tag}", f"cpt-in-{tag}", f"cpt-out-{tag}"
    k = ("--bootstrap-servers", kafka_bootstrap)
    ok_here("produce", source, "--generate", "words", "--count", "200", "--seed", "9", *k)
    run_here(WORDCOUNT, name=job, source=source, sink=sink,
             bootstrap_servers=kafka_bootstrap)
    key0 = f"tasknames.task-0.systems.kafka.streams.{source}.partitions.0"
    shown = ok_here("checkpoint", "show", job, *k).stdout
    assert f"{key0}=100\n" in shown, shown
    edited = tmp_path / "edited.properties"
    edited.write_text(shown.replace(f"{key0}=100", f"{key0}=60"))
    ok_here("checkpoint", "write", job, str(edited), *k)
    run_here(WORDCOUNT, name=job, source=source, sink=sink,
             bootstrap_servers=kafka_bootstrap)
    parts: dict[int, list[str]] = {}
    for r in json.loads(ok_here("consume", source, "--all", "--json", *k).stdout):
        parts.setdefault(r["partition"], []).append(r["value"])
    told = words_in(parts[0] + parts[1] + parts[0][60:])
    seen: dict[str, list[str]] = {}
    for r in json.loads(ok_here("consume", sink, "--json", *k).stdout):
        seen.setdefault(r["key"], []).append(r["value"])
    assert {w: [str(i) for i in range(1, n + 1)] for w, n in told.items()} == seen
    # an offset below the earliest one Kafka still holds is refused, naming the line
    with open_transport(bootstrap_servers=kafka_bootstrap) as t:
        t.delete_records(TopicPartition(source, 0), 50)
        assert t.watermarks(TopicPartition(source, 0))[0] == 50
    edited.write_text(f"# edited\n{key0}=10\n")
    assert error_line(here("checkpoint", "write", job, str(edited), *k)) == \
        f"error: line 2: offset 10 is outside {source}[0]'s offsets 50..100"


def test_startpoint_set_checks_an_offset_against_the_partitions_offsets(tmp_path):
    """Issue 27 item 5: an offset past the partition's end was accepted, and the run
    failed 35 s later after 4 retries. Checked when set, as eos checkpoint write does;
    the end itself (nothing to read yet) is a position."""
    d = ("--data-dir", str(tmp_path / "data"))
    ok_here("produce", "lines", "--lines-from", "-", "--partitions", "1", *d, stdin="a\nb\nc\n")
    assert error_line(here("startpoint", "set", "wordcount", "lines", "0", "--offset", "5990",
                           "--new-job", *d)) == (
        "error: offset 5990 is outside lines[0]'s offsets 0..3: give one of them (3 is the "
        "end: the next record written)")
    ok_here("startpoint", "set", "wordcount", "lines", "0", "--offset", "3", "--new-job", *d)
    assert ok_here("startpoint", "list", "wordcount", *d).stdout == "lines[0]: offset 3\n"


def test_startpoint_commands_refuse_a_job_that_never_ran_unless_new_job(tmp_path):
    """Issue 27 item 6: a typo in the job name (`eos startpoint set sesions ...`) exited 0
    and made a metadata topic for a job that does not exist; `eos startpoint list
    nosuchjob` said "no startpoints". Refused, naming the jobs there are; --new-job sets
    one for a job's first run, after which the name is known."""
    d = ("--data-dir", str(tmp_path / "data"))
    ok_here("produce", "lines", "--lines-from", "-", "--partitions", "1", *d, stdin="a\nb\n")
    never = ("error: job 'sesions' has no run on the local log in {} (it never ran, or was "
             "reset) and no Startpoints (no job has run there): check the name")
    line = error_line(here("startpoint", "set", "sesions", "lines", "0", "--oldest", *d))
    assert line == never.format(d[1]) + ", or give --new-job to set one for its first run"
    for args in (("list", "sesions"), ("clear", "sesions")):
        assert error_line(here("startpoint", *args, *d)) == never.format(d[1])
    assert "sesions.metadata" not in ok_here("topics", *d).stdout
    ok_here("startpoint", "set", "sessions", "lines", "0", "--offset", "1", "--new-job", *d)
    ok_here("startpoint", "set", "sessions", "lines", "0", "--offset", "2", *d)   # known now
    assert ok_here("startpoint", "list", "sessions", *d).stdout == "lines[0]: offset 2\n"
