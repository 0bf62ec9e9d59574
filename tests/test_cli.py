"""``eos run``, ``eos produce``, ``eos consume`` as a user runs them: real processes, the real
local log, real Spark (two ``eos run`` invocations in all, ~12 s each)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import traceback
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from eos_runtime.demo import WORDS, generate_words
from eos_runtime.faults import CRASH_POINTS

ROOT = Path(__file__).resolve().parent.parent
WORDCOUNT = str(ROOT / "examples" / "wordcount.py")
COUNT = 3_000


def eos(*args: str, cwd: Path | None = None, stdin: str | bytes | None = None,
        env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """The ``eos`` console entry point (``eos_runtime.cli:run``) in a child process."""
    full_env = {k: v for k, v in os.environ.items() if k != "EOS_BOOTSTRAP_SERVERS"}
    full_env.update(env or {})
    data = stdin.encode() if isinstance(stdin, str) else stdin
    p = subprocess.run([sys.executable, "-c", "from eos_runtime.cli import run; run()", *args],
                       cwd=cwd, input=data, capture_output=True, env=full_env, timeout=timeout)
    return subprocess.CompletedProcess(p.args, p.returncode, p.stdout.decode(),
                                       p.stderr.decode(errors="replace"))


def ok(*args: str, **kw) -> subprocess.CompletedProcess:
    return _succeeded(eos(*args, **kw), args)


def _succeeded(p: subprocess.CompletedProcess, args: tuple[str, ...]
               ) -> subprocess.CompletedProcess:
    assert p.returncode == 0, f"eos {' '.join(args)}: rc={p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def here(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
         stdin: str | None = None, timeout: float = 0) -> subprocess.CompletedProcess:
    """``eos ARGS`` in this process, returned as ``eos`` returns it: the console entry
    point (its error lines and exit codes) in click's test isolation. For a test whose
    subject is what the command did, not its process: the JVM of this worker's first Spark
    run serves it, where a child ``eos`` starts a Python and a JVM of its own (7-10 s
    each time). Like ``eos``, it sees no EOS_BOOTSTRAP_SERVERS unless ``env`` gives it.
    ``timeout`` is the child's only (pytest's own timeout covers this process)."""
    from click.testing import CliRunner

    from eos_runtime.cli import run

    before, argv = Path.cwd(), sys.argv
    root = logging.getLogger()
    handlers = root.handlers[:]
    code, stderr = 0, ""
    with CliRunner().isolation(input=stdin, env={"EOS_BOOTSTRAP_SERVERS": None,
                                                **(env or {})}) as (out, err, _):
        sys.stdin.buffer.name = "<stdin>"   # as a real stdin is named (``--lines-from -``)
        os.chdir(cwd or before)
        sys.argv = ["eos", *args]
        # no handler of pytest's: the entry point then adds its own, as in a child, and
        # the project's warnings come out as ``warning: ...`` lines on stderr
        root.handlers = []
        try:
            run()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        except Exception as exc:   # a crash: its traceback, as a child's stderr shows it
            code, stderr = 1, "".join(traceback.format_exception(exc))
        finally:
            root.handlers = handlers
            sys.argv = argv
            os.chdir(before)
        return subprocess.CompletedProcess(["eos", *args], code, out.getvalue().decode(),
                                           err.getvalue().decode(errors="replace") + stderr)


def ok_here(*args: str, **kw) -> subprocess.CompletedProcess:
    """``ok`` in this process (``here``)."""
    return _succeeded(here(*args, **kw), args)


def run_here(pipeline_file: str | Path, *, name: str | None = None,
             source: str | None = None, sink: str | None = None, **options):
    """What ``eos run PIPELINE_FILE [--name --source --sink] [options]`` runs, in this
    process (``run_pipeline``): for a test whose runs set the scene for the command it
    tests. The JVM this process started for its first run serves every later one, where
    each ``eos run`` starts its own. Returns the ``RunSummary``."""
    from eos_runtime.runner import load_pipeline, run_pipeline

    pipeline = load_pipeline(str(pipeline_file))
    if name is not None or source is not None or sink is not None:
        pipeline.rename(pipeline.name if name is None else name, source=source, sink=sink)
    return run_pipeline(pipeline, **options)


def error_line(p: subprocess.CompletedProcess) -> str:
    """The one ``error: ...`` line of a failed command (and nothing else on stderr)."""
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    return lines[0]


def word_counts(data_dir: Path) -> Counter:
    """How often each word occurs in topic ``lines``, read back with ``eos consume --all``."""
    out = ok("consume", "lines", "--all", "--data-dir", str(data_dir)).stdout
    counts: Counter = Counter()
    for line in out.splitlines():
        key, _, value = line.partition("\t")
        assert key == ""  # eos produce writes no keys
        counts.update(value.split())
    return counts


def assert_exactly_once(data_dir: Path, expected: Counter) -> list[str]:
    """The committed ``counts`` of each word w are exactly "1".."n(w)", in offset order."""
    out = ok("consume", "counts", "--job", "wordcount", "--data-dir", str(data_dir)).stdout
    lines = out.splitlines()
    seen: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        word, _, value = line.partition("\t")
        seen[word].append(value)
    assert set(seen) == set(expected)
    for word, n in expected.items():
        assert seen[word] == [str(i) for i in range(1, n + 1)], word
    return lines


# --------------------------------------------------------------------------- the real runs

@pytest.fixture(scope="module")
def wordcount_run(tmp_path_factory):
    data = tmp_path_factory.mktemp("wc") / "data"
    produced = ok("produce", "lines", "--generate", "words", "--count", str(COUNT), "--seed", "11",
                  "--data-dir", str(data))
    assert produced.stdout.startswith(f"wrote {COUNT:,} records to lines (2 partitions)")
    run = ok("run", WORDCOUNT, "--data-dir", str(data), "--json")
    return data, run


@pytest.mark.slow
def test_run_json_summary(wordcount_run):
    data, run = wordcount_run
    summary = json.loads(run.stdout)  # stdout holds the JSON document and nothing else
    assert summary["job"] == "wordcount" and summary["transport"] == "local"
    assert summary["guarantee"] == "exactly-once"
    assert summary["input_records"] == COUNT
    assert [t["task_id"] for t in summary["tasks"]] == [0, 1, 2, 3]
    assert sum(t["processed"] for t in summary["tasks"][:2]) == COUNT
    # each stage's work: its tasks' counters added up
    stages = summary["stages"]
    assert [(st["stage"], st["input"], st["output"], st["tasks"]) for st in stages] == [
        (0, "lines", "wordcount.shuffle-1", 2), (1, "wordcount.shuffle-1", "counts", 2)]
    assert stages[0]["processed"] == COUNT
    assert stages[1]["processed"] == stages[0]["emitted"] == stages[1]["emitted"] > COUNT
    assert (data / "state").is_dir()  # --state-dir defaults to under the data dir
    # per-checkpoint metrics, as distributions: every task times its checkpoints; the
    # counting tasks (stage 1) also waited for alignment and wrote state changes
    for t in summary["tasks"]:
        m = t["checkpoint_metrics"]
        assert m["duration_ms"]["count"] == m["commit_ms"]["count"] == t["checkpoints"] > 0
        assert 0 <= m["commit_ms"]["p50"] <= m["duration_ms"]["max"]
        # each step timed on its own, within the whole; the thread's CPU beside it
        steps = ("flush_ms", "changelog_ms", "commit_ms", "store_ms", "markers_ms")
        assert {m[s]["count"] for s in (*steps, "cpu_ms")} == {t["checkpoints"]}
        assert sum(m[s]["mean"] for s in steps) <= m["duration_ms"]["mean"] + 0.01, m
        stage = 0 if t["task_id"] < 2 else 1
        assert ("alignment_ms" in m) == ("start_delay_ms" in m) == (stage == 1), m
        if stage == 1:
            assert 0 < m["alignment_ms"]["count"] <= t["checkpoints"]
            assert m["buffered_bytes"]["count"] == t["checkpoints"]
            assert m["changelog_bytes"]["max"] > 0


@pytest.mark.slow
def test_consume_committed_counts_are_one_to_n(wordcount_run):
    data, _ = wordcount_run
    expected = word_counts(data)
    assert sum(expected.values()) > COUNT and set(expected) <= set(WORDS)
    lines = assert_exactly_once(data, expected)
    count = ok("consume", "counts", "--job", "wordcount", "--count", "--data-dir", str(data))
    assert count.stdout.strip() == str(len(lines)) == str(sum(expected.values()))
    records = json.loads(ok("consume", "counts", "--job", "wordcount", "--json",
                            "--data-dir", str(data)).stdout)
    assert len(records) == len(lines)
    assert set(records[0]) == {"partition", "offset", "key", "value"}
    assert [(r["partition"], r["offset"]) for r in records] == \
        sorted((r["partition"], r["offset"]) for r in records)


@pytest.mark.slow
def test_run_with_a_crash_point_stays_exactly_once(tmp_path):
    data = tmp_path / "data"
    ok("produce", "lines", "--generate", "words", "--count", "2000", "--seed", "5",
       "--data-dir", str(data))
    run = ok("run", WORDCOUNT, "--data-dir", str(data), "--crash-at",
             "task.checkpoint.before_commit", "--crash-task", "2", "--commit-every", "500")
    # the human summary: totals, then one line per task; task 2 needed a second attempt
    assert run.stdout.startswith("wordcount run 0 (bounded): 2,000 input records in ")
    assert "records/s" in run.stdout.splitlines()[0]
    task2 = [line for line in run.stdout.splitlines() if line.strip().startswith("task 2:")]
    assert len(task2) == 1 and "attempt 2" in task2[0] and "checkpoints" in task2[0]
    committed = assert_exactly_once(data, word_counts(data))
    everything = int(ok("consume", "counts", "--all", "--count", "--data-dir", str(data)).stdout)
    assert everything >= len(committed)


def start_eos(*args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "EOS_BOOTSTRAP_SERVERS"}
    return subprocess.Popen([sys.executable, "-c", "from eos_runtime.cli import run; run()", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_counts(data: Path, at_least: int, proc: subprocess.Popen, timeout=120.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while True:
        got = eos("consume", "counts", "--job", "wordcount", "--count", "--data-dir", str(data))
        if got.returncode == 0 and int(got.stdout) >= at_least:
            return
        assert proc.poll() is None, f"eos run ended early:\n{proc.communicate()}"
        assert time.monotonic() < deadline, "no committed output in time"
        time.sleep(0.5)


@pytest.mark.slow
def test_unbounded_runs_stop_with_eos_stop_and_with_ctrl_c(tmp_path):
    import signal

    data = tmp_path / "data"
    ok("produce", "lines", "--generate", "words", "--count", "500", "--seed", "3",
       "--data-dir", str(data))
    first = word_counts(data)
    proc = start_eos("run", WORDCOUNT, "--unbounded", "--commit-interval", "0.3",
                     "--data-dir", str(data))
    try:
        wait_for_counts(data, sum(first.values()), proc)
        ok("produce", "lines", "--generate", "words", "--count", "300", "--seed", "4",
           "--data-dir", str(data))
        wait_for_counts(data, sum(word_counts(data).values()), proc)
        stopped = ok("stop", "wordcount", "--data-dir", str(data))
        assert stopped.stdout.strip() == f"asked run 0 of job 'wordcount' on the local log in " \
                                         f"{data} to stop"
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.startswith("wordcount run 0 (stopped): 800 input records in "), out
    assert_exactly_once(data, word_counts(data))

    ok("produce", "lines", "--generate", "words", "--count", "200", "--seed", "5",
       "--data-dir", str(data))
    rc, out, err = signalled_run(data, signal.SIGINT)   # what Ctrl-C does: a graceful stop
    assert rc == 0, err
    assert out.startswith("wordcount run 1 (stopped): 200 input records in "), out
    assert_exactly_once(data, word_counts(data))


def signalled_run(data: Path, sig: int) -> tuple[int, str, str]:
    """An unbounded ``eos run`` of wordcount sent ``sig`` once it committed all there is:
    its exit code, stdout and stderr."""
    proc = start_eos("run", WORDCOUNT, "--unbounded", "--commit-interval", "0.3",
                     "--data-dir", str(data))
    try:
        wait_for_counts(data, sum(word_counts(data).values()), proc)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, out, err


def test_stop_of_a_job_that_never_ran(tmp_path):
    p = eos("stop", "nosuchjob", "--data-dir", str(tmp_path / "data"))
    assert error_line(p) == ("error: job 'nosuchjob' has never run on this transport: "
                             "nothing to stop")


# --------------------------------------------------------------------------- errors of eos run

def test_run_missing_pipeline_file(tmp_path):
    line = error_line(eos("run", "no_such_pipeline.py", "--data-dir", str(tmp_path), cwd=tmp_path))
    assert "no_such_pipeline.py" in line and "does not exist" in line


def test_run_unknown_crash_point_lists_the_known_ones(tmp_path):
    p = eos("run", WORDCOUNT, "--data-dir", str(tmp_path), "--crash-at", "no.such.point")
    line = error_line(p)
    assert "no.such.point" in line
    assert all(point in line for point in CRASH_POINTS)
    assert "hit count" in error_line(eos("run", WORDCOUNT, "--crash-at", "task.rewind@0",
                                         "--data-dir", str(tmp_path)))


def test_run_crash_task_outside_the_plan(tmp_path):
    ok("produce", "lines", "--lines-from", "-", "--data-dir", str(tmp_path), stdin="a b\n")
    line = error_line(eos("run", WORDCOUNT, "--data-dir", str(tmp_path), "--crash-at",
                          "task.rewind", "--crash-task", "9"))
    assert "--crash-task 9" in line and "0..3" in line


def test_run_usage_errors(tmp_path):
    p = eos("run", WORDCOUNT, "--guarantee", "maybe", "--data-dir", str(tmp_path))
    assert p.returncode == 2 and "Invalid value for '--guarantee'" in p.stderr
    p = eos("run", WORDCOUNT, "--crash-task", "1", "--data-dir", str(tmp_path))
    assert p.returncode == 2 and "--crash-task needs --crash-at" in p.stderr


def test_run_without_source_topic_names_it(tmp_path):
    line = error_line(eos("run", WORDCOUNT, "--data-dir", str(tmp_path / "empty")))
    assert "'lines'" in line and "eos produce" in line


# --------------------------------------------------------------------------- produce / consume

def test_produce_lines_round_trip_through_consume_all(tmp_path):
    lines = ["héllo wörld", "second line", "", "tabs\tinside", "last"]
    src = tmp_path / "in.txt"
    src.write_bytes(("\n".join(lines[:2]) + "\r\n" + "\n".join(lines[2:])).encode())
    data = str(tmp_path / "data")
    p = ok("produce", "text", "--lines-from", str(src), "--data-dir", data)
    assert p.stdout.startswith("wrote 5 records to text (2 partitions)")
    records = json.loads(ok("consume", "text", "--all", "--json", "--data-dir", data).stdout)
    # round-robin: partition 0 holds lines 0, 2, 4 and partition 1 lines 1, 3
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in records] == [
        (0, 0, None, lines[0]), (0, 1, None, lines[2]), (0, 2, None, lines[4]),
        (1, 0, None, lines[1]), (1, 1, None, lines[3])]
    text = ok("consume", "text", "--all", "--data-dir", data).stdout
    assert text == "".join(f"\t{v}\n" for v in (lines[0], lines[2], lines[4], lines[1], lines[3]))
    assert ok("consume", "text", "--all", "--count", "--data-dir", data).stdout == "5\n"
    # stdin, appended to the same topic; --partitions must match an existing topic
    ok("produce", "text", "--lines-from", "-", "--data-dir", data, stdin="x\ny\n")
    assert ok("consume", "text", "--all", "--count", "--data-dir", data).stdout == "7\n"
    line = error_line(eos("produce", "text", "--partitions", "3", "--lines-from", "-",
                          "--data-dir", data, stdin="z\n"))
    assert "'text'" in line and "2 partitions" in line


def test_produce_rejects_non_utf8_lines(tmp_path):
    data = str(tmp_path / "data")
    line = error_line(eos("produce", "raw", "--lines-from", "-", "--data-dir", data,
                          stdin=b"good\n\xff\xfe\n"))
    assert "line 2" in line and "UTF-8" in line and "1 records before it" in line
    assert ok("consume", "raw", "--all", "--data-dir", data).stdout == "\tgood\n"


def test_consume_shows_undecodable_bytes_as_repr(tmp_path):
    from eos_runtime.transport import TopicSpec, open_transport

    with open_transport(data_dir=str(tmp_path)) as t:
        t.create_topics([TopicSpec("bin", 1)])
        with t.producer() as p:
            p.produce("bin", 0, b"\xff\x00", key=b"k")
            p.flush()
    assert ok("consume", "bin", "--all", "--data-dir", str(tmp_path)).stdout == "k\tb'\\xff\\x00'\n"


def test_consume_on_the_local_log_needs_job_or_all(tmp_path):
    ok("produce", "lines", "--lines-from", "-", "--data-dir", str(tmp_path), stdin="a\n")
    line = error_line(eos("consume", "lines", "--data-dir", str(tmp_path)))
    assert "--job" in line and "--all" in line and "'lines'" in line
    line = error_line(eos("consume", "lines", "--job", "nojob", "--data-dir", str(tmp_path)))
    assert "nojob" in line
    line = error_line(eos("consume", "nosuch", "--all", "--data-dir", str(tmp_path)))
    assert "'nosuch'" in line


def test_transport_option_rules(tmp_path):
    data = str(tmp_path)
    p = eos("produce", "t", "--generate", "words", "--bootstrap-servers", "127.0.0.1:1",
            "--data-dir", data)
    assert p.returncode == 2 and "not both" in p.stderr
    # an explicit --data-dir wins over EOS_BOOTSTRAP_SERVERS from the environment
    p = ok("produce", "t", "--generate", "words", "--count", "7", "--data-dir", data,
           env={"EOS_BOOTSTRAP_SERVERS": "127.0.0.1:1"})
    assert "wrote 7 records" in p.stdout and "local log" in p.stdout
    p = eos("produce", "t", "--data-dir", data)
    assert p.returncode == 2 and "--lines-from" in p.stderr


def test_generate_words_is_deterministic():
    a = list(generate_words(200, seed=3))
    assert a == list(generate_words(200, seed=3))
    assert a[:50] == list(generate_words(50, seed=3))
    assert a != list(generate_words(200, seed=4))
    words = [w for line in a for w in line.split()]
    assert set(words) <= set(WORDS)
    assert all(1 <= len(line.split()) <= 10 for line in a)


# --------------------------------------------------------------------------- on a terminal

def on_terminal(args: list[str], *, ctrl_c_after: list[tuple[str, float]],
                timeout: float = 180.0, cols: int = 160, typed: bytes = b"") -> tuple[int, str]:
    """``eos ARGS`` on a pseudo-terminal, as a user runs it, ``typed`` typed at once. For
    each ``(text, seconds)`` of ``ctrl_c_after``: once the screen has shown ``text`` since
    the last Ctrl-C, and ``seconds`` later, Ctrl-C is typed (the terminal sends SIGINT to
    the foreground process group, as a real Ctrl-C does). Returns the exit code and the
    screen output without its escape sequences."""
    import fcntl
    import pty
    import select
    import struct
    import termios
    import time

    env = {k: v for k, v in os.environ.items() if k != "EOS_BOOTSTRAP_SERVERS"}
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execve(sys.executable, [sys.executable, "-c", "from eos_runtime.cli import run; run()",
                                   *args], env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    os.write(fd, typed)
    pending, raw, seen, shown_at = list(ctrl_c_after), b"", 0, None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if pending and shown_at is None and _shows(pending[0][0], _screen(raw[seen:]), pid):
                shown_at = time.monotonic()
            if pending and shown_at is not None and time.monotonic() - shown_at >= pending[0][1]:
                pending.pop(0)
                seen, shown_at = len(raw), None
                os.write(fd, b"\x03")
            ready, _, _ = select.select([fd], [], [], 0.1)
            if fd in ready:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    break
                if not data:
                    break
                raw += data
        else:
            os.kill(pid, 9)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert not pending, f"never saw {pending[0][0]!r} on the screen:\n{_screen(raw)}"
    return os.waitstatus_to_exitcode(status), _screen(raw)


def _shows(wanted, screen: str, pid: int) -> bool:
    """``wanted``: a text the screen must contain, or a test of the screen and the pid."""
    return wanted(screen, pid) if callable(wanted) else wanted in screen


def _reading_stdin(screen: str, pid: int) -> bool:
    """The process is blocked in read(0, ...): its imports are done and it waits for input
    (a Ctrl-C before that, while Python still starts, is not what the test is about)."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().startswith("0 0x0 ")
    except OSError:
        return False


def _slow_wordcount(name: str, sink: str, *, split_s: float, count_s: float) -> str:
    """The example's word count as job ``name``, its splitting stage sleeping ``split_s``
    a line and its counting stage ``count_s`` a word."""
    return f"""
import time

from eos_runtime import Pipeline

pipeline = Pipeline({name!r}, commit_interval=1.0, parallelism=2)


def split(line):
    time.sleep({split_s})
    return line.split()


def slowly(word):
    time.sleep({count_s})
    return word


(pipeline.source("lines", value="utf8")
    .flat_map(split)
    .key_by(lambda word: word)
    .map(slowly)
    .count()
    .sink({sink!r}, key="utf8", value="json"))
"""


def _read_at_least(n: int):
    """The live view says the sources read ``n`` records or more."""
    import re

    def shown(screen: str, pid: int) -> bool:
        read = [int(m.replace(",", "")) for m in re.findall(r"input ([\d,]+) read", screen)]
        return any(r >= n for r in read[-1:])
    return shown


def _some_input_committed(screen: str, pid: int) -> bool:
    """The live view says some, not all, of the 300,000 words are committed: the run has
    checkpointed and is still reading (what a Ctrl-C must interrupt, on any machine)."""
    import re

    counts = [int(n.replace(",", "")) for n in re.findall(r"([\d,]+) of 300,000 committed",
                                                          screen)]
    return any(0 < n < 300_000 for n in counts[-1:])


def _screen(raw: bytes) -> str:
    import re

    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw.decode(errors="replace"))
    return text.replace("\r\n", "\n").replace("\r", "\n")


@pytest.mark.slow
def test_ctrl_c_on_a_terminal_says_what_the_stop_does_and_a_second_one_cancels(tmp_path):
    data = tmp_path / "data"
    ok("produce", "lines", "--generate", "words", "--count", "300000", "--data-dir", str(data))
    # The live view shows the stages as they move; a first Ctrl-C says what it does. The
    # splitting stage sleeps 1 ms a line, so the run cannot read all its input before the
    # view shows a first commit: at the example's own speed, a fast machine read it all
    # between two looks and the run ended before the Ctrl-C (CI, 2026-11-29).
    slow_split = tmp_path / "wordcount.py"
    slow_split.write_text(_slow_wordcount("wordcount", "counts", split_s=0.001, count_s=0))
    code, screen = on_terminal(["run", str(slow_split), "--data-dir", str(data)],
                               ctrl_c_after=[(_some_input_committed, 0.0)])
    assert code == 0, screen
    assert "reads -> writes" in screen and "processed" in screen and "checkpoints" in screen
    assert "of 300,000 committed" in screen, screen
    stop = screen[screen.index("stopping run 0 of wordcount (Ctrl-C)"):]
    assert "the sources take a final checkpoint" in stop and "Ctrl-C again cancels" in stop
    summary = screen[screen.index("wordcount run 0 (stopped): "):]
    assert " input records in " in summary.splitlines()[0]
    assert "stage 1 (wordcount.shuffle-1 -> counts, 2 tasks): " in summary

    # A second Ctrl-C cancels, and says so: one error line, exit code 130. The counting
    # stage sleeps 10 ms a word, so the stop the first Ctrl-C asks for (the counting tasks
    # finish what was sent to them) lasts minutes, and the second comes while it runs;
    # with the example's own speed, a machine fast enough finished the stop first (CI).
    slow = tmp_path / "slow_wordcount.py"
    slow.write_text(_slow_wordcount("slow-wordcount", "slow-counts", split_s=0, count_s=0.01))
    code, screen = on_terminal(["run", str(slow), "--unbounded", "--data-dir", str(data)],
                               ctrl_c_after=[(_read_at_least(1_000), 0.0), ("stopping", 0.0)])
    assert code == 130, screen
    # (a "cancelling ..." status line may or may not be drawn before the process ends:
    # the Ctrl-C came at once; the last line is what must always say it)
    last = screen.strip().splitlines()[-1]
    assert last == ("error: run 0 of job 'slow-wordcount' cancelled by a second Ctrl-C: its "
                    "tasks stopped where they were, without final checkpoints; the next run "
                    "recovers from their last ones"), screen
    assert "Traceback" not in screen


# --------------------------------------------------------------------------- summaries and progress

def _summary(input_records: int, tasks: list[dict]):
    from eos_runtime.runner import RunSummary

    plan = [{"stage": 0, "input": "lines", "tasks": [0], "steps": [],
             "output": "wc.shuffle-1", "output_partitions": 1},
            {"stage": 1, "input": "wc.shuffle-1", "tasks": [1, 2], "steps": [],
             "output": "counts", "output_partitions": 1}]
    return RunSummary("wc", "exactly-once", "local", 2.5, input_records, tasks, plan, run=3)


def test_a_summary_counts_the_work_with_singular_and_plural_right():
    from eos_runtime.cli.run_command import _summary_lines

    one = {"task_id": 0, "checkpoints": 1, "rewinds": 1, "processed": 1, "emitted": 1,
           "dead_letters": 1, "attempt": 0}
    two = {"task_id": 1, "checkpoints": 2, "rewinds": 0, "processed": 5, "emitted": 5,
           "max_buffer_bytes": 2048, "overflowed": 3, "lookup_misses": 1}
    three = {"task_id": 2, "checkpoints": 0, "rewinds": 2, "processed": 0, "emitted": 0,
             "attempt": 1}
    lines = _summary_lines(_summary(1, [one, two, three]))
    assert lines[0] == ("wc run 3 (bounded): 1 input record in 2.50 s (0.4 records/s), "
                        "exactly-once on the local log")
    assert lines[1] == ("  stage 0 (lines -> wc.shuffle-1, 1 task): 1 processed, 1 emitted, "
                        "1 checkpoint, 1 rewind, 1 dead letter")
    assert lines[2] == ("  stage 1 (wc.shuffle-1 -> counts, 2 tasks): 5 processed, 5 emitted, "
                        "2 checkpoints, 2 rewinds, buffer up to 2.0 KB (3 overflowed)")
    assert lines[3] == "  task 0: 1 checkpoint, 1 rewind, 1 processed, 1 emitted, 1 dead letter"
    assert lines[4] == ("  task 1: 2 checkpoints, 0 rewinds, 5 processed, 5 emitted, "
                        "1 lookup miss")
    assert lines[5] == "  task 2: 0 checkpoints, 2 rewinds, 0 processed, 0 emitted, attempt 2"


def test_a_run_with_no_new_input_still_shows_the_work_done_downstream():
    from eos_runtime.cli.run_command import _summary_lines

    tasks = [{"task_id": 0, "checkpoints": 1}, {"task_id": 1, "processed": 7000,
                                                 "emitted": 7000, "checkpoints": 3},
             {"task_id": 2, "processed": 5000, "emitted": 5000, "checkpoints": 3}]
    lines = _summary_lines(_summary(0, tasks))
    assert lines[0] == ("wc run 3 (bounded): no new input records, 2.50 s, exactly-once on the "
                        "local log")
    assert lines[2] == ("  stage 1 (wc.shuffle-1 -> counts, 2 tasks): 12,000 processed, "
                        "12,000 emitted, 6 checkpoints")


def test_progress_reads_the_counters_the_tasks_write(tmp_path):
    from eos_runtime.cli.run_command import _progress_line
    from eos_runtime.runner import stage_totals
    from eos_runtime.runtime.progress import TaskProgress, read_task_progress

    class Stats:
        def __init__(self, **kw):
            self.__dict__.update(kw)

        def as_dict(self):
            return dict(self.__dict__)

    stats = Stats(task_id=1, processed=10, emitted=10, checkpoints=1, rewinds=0)
    progress = TaskProgress(tmp_path / "task-1.progress", stats, every=60)
    assert read_task_progress(tmp_path / "task-1.progress") is None
    progress.tick()                       # the first tick writes
    stats.processed = 99
    progress.tick()                       # within `every`: nothing new
    assert read_task_progress(tmp_path / "task-1.progress")["processed"] == 10
    progress.write(done=True)
    got = read_task_progress(tmp_path / "task-1.progress")
    assert got["processed"] == 99 and got["done"] is True and got["pid"] == os.getpid()
    assert [f.name for f in tmp_path.iterdir()] == ["task-1.progress"]   # no temp file left

    plan = _summary(0, []).plan
    stages = stage_totals(plan, {0: {"processed": 40, "emitted": 200, "checkpoints": 2},
                                 1: got})
    assert [(s["reporting"], s["tasks"], s["processed"], s["emitted"]) for s in stages] == \
        [(1, 1, 40, 200), (1, 2, 99, 10)]
    line = _progress_line("wc", {
        "seconds": 12.2, "run": 3, "bounded": True, "stopping": True, "stages": stages,
        "in_flight": [None, None], "input_read": 40, "input_committed": 30, "input_total": 50,
        "sink_records": 8, "sink_known": True, "tasks_running": 3, "tasks_finished": 0,
        "failed_attempts": 1})
    assert line == ("eos run wc (run 3, bounded): 12 s; input 40 of 50 read, 30 of 50 committed; "
                    "sink 8 committed; "
                    "stage 0: 40 processed, 200 emitted, 2 checkpoints; stage 1: 99 processed, "
                    "10 emitted, 1 checkpoint (1 of 2 tasks reporting); tasks 3 "
                    "running / 0 done, 1 failed attempt; stopping: the stages after the sources "
                    "finish what was sent to them (Ctrl-C again cancels)")


def test_a_run_with_another_state_dir_says_its_stores_were_rebuilt(tmp_path):
    """Issue 27, small item: the state rebuilt from the change log because the local store
    was elsewhere (another --state-dir than the last run's) went unmentioned."""
    data = str(tmp_path / "data")
    ok("produce", "lines", "--generate", "words", "--count", "100", "--data-dir", data)
    first = run_here(WORDCOUNT, data_dir=data, state_dir=str(tmp_path / "here"))
    assert not any(t.get("rebuilt_store") for t in first.tasks)
    ok("produce", "lines", "--generate", "words", "--count", "100", "--seed", "1",
       "--data-dir", data)
    summary = run_here(WORDCOUNT, data_dir=data, state_dir=str(tmp_path / "elsewhere"))
    assert all(t.get("rebuilt_store") for t in summary.tasks), summary.tasks
    from eos_runtime.cli.run_command import _summary_lines

    lines = _summary_lines(summary)
    assert sum("store rebuilt" in line for line in lines) == len(summary.tasks), lines


def test_the_progress_says_at_once_when_the_broker_went_away_and_came_back(capsys):
    """Issue 27 item 11: no progress line appeared during a 32 s outage (a line every 10 s,
    and the outage's first look came between two). An outage's start and end get a line
    at once; the line says for how long, against the budget."""
    from eos_runtime.cli.run_command import _RunView

    stages = [{"stage": 0, "input": "lines", "output": "counts", "tasks": 1, "reporting": 1,
               "processed": 40, "emitted": 40, "checkpoints": 2, "rewinds": 0,
               "max_buffer_bytes": 0, "overflowed": 0, "dead_letters": 0}]
    frame = {"seconds": 12.2, "run": 0, "bounded": True, "stopping": False, "stages": stages,
             "in_flight": [None], "input_read": 40, "input_committed": 30, "input_total": 50,
             "sink_records": 8, "sink_known": True, "tasks_running": 1, "tasks_finished": 0,
             "failed_attempts": 0, "outage_seconds": 0.0, "outage_budget": 15.0}
    view = _RunView("wc", 0, "Kafka", live=False, every=3600)   # no line due by the clock
    view.progress(frame)
    assert capsys.readouterr().err == ""
    view.progress({**frame, "outage_seconds": 5.2})
    view.progress({**frame, "outage_seconds": 10.4})
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].endswith("; broker unreachable for 5 s (budget 15 s)"), err
    view.progress(frame)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "unreachable" not in err[0], err


@pytest.mark.slow
def test_commit_every_0_turns_the_pipelines_record_count_checkpoints_off(tmp_path):
    path = tmp_path / "every.py"
    path.write_text('from eos_runtime import Pipeline\n\n'
                    # no timer checkpoint: the commit grid's lines of 1e9 s are in 2001, 2033
                    'pipeline = Pipeline("every", commit_interval=1e9, commit_every=10)\n'
                    'pipeline.source("lines").map(str.upper).sink("out")\n')
    data = str(tmp_path / "data")
    ok("produce", "lines", "--generate", "words", "--count", "100", "--partitions", "1",
       "--data-dir", data)
    summary = json.loads(ok("run", str(path), "--commit-every", "0", "--json",
                            "--data-dir", data).stdout)
    assert [t["checkpoints"] for t in summary["tasks"]] == [1]   # the run's final one only


def test_a_library_logging_an_exception_prints_no_traceback(tmp_path):
    """py4j calls logging.exception when a cancel closes its gateway; with no root handler
    Python printed that traceback on the user's terminal (the Ctrl-C test saw it on a busy
    machine). Under eos the project's own warnings still show, as one line each."""
    code = ("import logging, sys\n"
            "from eos_runtime import cli\n"
            "cli._quiet_third_party_logging()\n"
            "try:\n"
            "    raise OSError('gateway closed')\n"
            "except OSError:\n"
            "    logging.exception('Exception while sending command.')\n"
            "logging.getLogger('eos_runtime.runner').warning('a warning of ours')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "Traceback" not in proc.stderr and "gateway closed" not in proc.stderr
    assert proc.stderr == "warning: a warning of ours\n"


def test_a_summary_says_how_many_records_went_to_dead_letters():
    """Issue 27 item 15: a run that set records aside says so at the end, and where."""
    from eos_runtime.cli.run_command import _summary_lines

    summary = _summary(5, [{"task_id": 0, "processed": 5, "dead_letters": 5},
                           {"task_id": 1}, {"task_id": 2}])
    summary.dead_letter_topic = "wc.dead-letters"
    assert _summary_lines(summary)[-1] == ("5 records went to dead letters (topic "
                                           "wc.dead-letters): eos consume wc.dead-letters")


def test_reads_of_a_mistyped_data_dir_leave_no_directory(tmp_path):
    typo = tmp_path / "typo"
    for args in (["jobs"], ["topics"], ["consume", "lines", "--all"],
                 ["checkpoint", "show", "wordcount"], ["startpoint", "list", "wordcount"]):
        here(*args, "--data-dir", str(typo))
        assert not typo.exists(), args
