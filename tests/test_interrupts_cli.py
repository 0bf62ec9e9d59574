"""Signals to eos commands as users and their supervisors send them (issue 27 items 3
and 4): SIGTERM to `eos run` is the first Ctrl-C, before the run is watched too; Ctrl-C
in `eos produce` writes what was read. Real processes, the real local log (and Kafka)."""

from __future__ import annotations

import json
import os

import pytest

from test_cli import (
    _reading_stdin,
    assert_exactly_once,
    ok,
    on_terminal,
    signalled_run,
    start_eos,
    word_counts,
)


def test_sigterm_stops_eos_run_as_the_first_ctrl_c_does(tmp_path):
    """Issue 27 item 4: SIGTERM (kill, timeout, systemd, a container's stop) is a graceful
    stop, with the first Ctrl-C's message naming what came, final checkpoints, the summary
    and the lease released."""
    import signal

    data = tmp_path / "data"
    ok("produce", "lines", "--generate", "words", "--count", "300", "--seed", "3",
       "--data-dir", str(data))
    rc, out, err = signalled_run(data, signal.SIGTERM)
    assert rc == 0, err
    assert "stopping run 0 of wordcount (SIGTERM): the sources take a final checkpoint " \
           "where they are;" in err, err
    assert "a second SIGTERM or Ctrl-C cancels at once" in err, err
    assert out.startswith("wordcount run 0 (stopped): 300 input records in "), out
    assert_exactly_once(data, word_counts(data))
    (job,) = json.loads(ok("jobs", "--json", "--data-dir", str(data)).stdout)
    assert job["lease"]["status"] == "free"
    assert job["runs"][0]["stop_reason"] == "terminated (SIGTERM)"


def test_sigterm_before_the_run_is_watched_is_a_ctrl_c_too(tmp_path):
    """Before the run is watched (loading the pipeline, planning, taking the lease)
    SIGTERM ended the process by its default action, leaving whatever it held; now it
    interrupts as Ctrl-C does there: "error: interrupted", exit code 130. The pipeline
    file says when it is being loaded, and waits."""
    import signal
    import time

    loading = tmp_path / "loading"
    (tmp_path / "slow.py").write_text(
        "import pathlib, time\n"
        f"pathlib.Path({str(loading)!r}).touch()\n"
        "time.sleep(600)\n")
    proc = start_eos("run", str(tmp_path / "slow.py"), "--data-dir", str(tmp_path / "data"))
    try:
        deadline = time.monotonic() + 60
        while not loading.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (proc.returncode, err.strip().splitlines()) == (130, ["error: interrupted"]), err


def _read_all_typed(screen: str, pid: int) -> bool:
    """Every typed line was read: the terminal holds none unread (TIOCINQ of the process's
    stdin), and the process sleeps in read(0, ...) again, so it took the last one in."""
    import fcntl
    import struct
    import termios

    try:
        fd = os.open(f"/proc/{pid}/fd/0", os.O_RDWR | os.O_NOCTTY)
        try:
            unread = struct.unpack("i", fcntl.ioctl(fd, termios.TIOCINQ, b"\0" * 4))[0]
        finally:
            os.close(fd)
        with open(f"/proc/{pid}/stat") as f:
            sleeping = f.read().rpartition(")")[2].split()[0] == "S"
    except OSError:
        return False
    return unread == 0 and sleeping and _reading_stdin(screen, pid)


def test_ctrl_c_in_eos_produce_writes_what_was_read_and_says_how_much(tmp_path):
    """Issue 27 item 3: Ctrl-C in `eos produce --lines-from -` wrote nothing of what was
    typed and said only "error: interrupted". The lines read go out, and one line says
    how many; nothing typed: none, in the same words."""
    data = str(tmp_path / "data")
    code, screen = on_terminal(["produce", "clicks", "--lines-from", "-", "--data-dir", data],
                               typed=b"first click\nsecond click\n",
                               ctrl_c_after=[(_read_all_typed, 0.0)], timeout=60)
    assert code == 130, screen
    assert screen.strip().splitlines()[-1] == \
        "error: interrupted: wrote 2 records to clicks (what was read before Ctrl-C)", screen
    assert ok("consume", "clicks", "--all", "--data-dir", data).stdout.splitlines() == [
        "\tfirst click", "\tsecond click"]
    code, screen = on_terminal(["produce", "lines", "--lines-from", "-", "--data-dir", data],
                               ctrl_c_after=[(_reading_stdin, 0.0)], timeout=60)
    assert code == 130 and screen.strip().splitlines()[-1] == \
        "error: interrupted: wrote 0 records to lines (what was read before Ctrl-C)", screen


@pytest.mark.kafka
def test_ctrl_c_in_eos_produce_writes_what_was_read_on_kafka(kafka_bootstrap):
    import uuid

    topic, kafka = f"clicks-{uuid.uuid4().hex[:8]}", ["--bootstrap-servers", kafka_bootstrap]
    code, screen = on_terminal(["produce", topic, "--lines-from", "-", *kafka],
                               typed=b"first click\nsecond click\n",
                               ctrl_c_after=[(_read_all_typed, 0.0)], timeout=60)
    assert (code, screen.strip().splitlines()[-1]) == (
        130, f"error: interrupted: wrote 2 records to {topic} (what was read before Ctrl-C)")
    assert ok("consume", topic, "--all", *kafka).stdout.splitlines() == [
        "\tfirst click", "\tsecond click"]
