"""What a newcomer meets when something is wrong (issue 11): the command keeps their data,
and a mistake ends with one ``error: ...`` line and exit code 1, not a traceback."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def eos(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 180) -> subprocess.CompletedProcess:
    """The ``eos`` console entry point in a child process, as a user runs it."""
    full_env = {k: v for k, v in os.environ.items() if k != "EOS_BOOTSTRAP_SERVERS"}
    full_env.update(env or {})
    p = subprocess.run([sys.executable, "-c", "from eos_runtime.cli import run; run()", *args],
                       cwd=cwd, capture_output=True, env=full_env, timeout=timeout)
    return subprocess.CompletedProcess(p.args, p.returncode, p.stdout.decode(),
                                       p.stderr.decode(errors="replace"))


def error_line(p: subprocess.CompletedProcess) -> str:
    """The one ``error: ...`` line of a failed command (and nothing else on stderr)."""
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    return lines[0]


def tree(path: Path) -> dict[str, bytes]:
    return {str(f.relative_to(path)): f.read_bytes()
            for f in sorted(path.rglob("*")) if f.is_file()}


# --------------------------------------------------------------------------- eos demo keeps data

def test_demo_refuses_a_directory_it_did_not_make(tmp_path):
    users = tmp_path / "mydata"
    (users / "topics" / "orders").mkdir(parents=True)
    (users / "topics" / "orders" / "0.log").write_bytes(b"the user's records")
    (users / "state").mkdir()
    (users / "state" / "job.db").write_bytes(b"the user's job state")
    before = tree(users)
    line = error_line(eos("demo", "--data-dir", str(users), "--lines", "10"))
    assert str(users) in line and "not empty" in line
    assert tree(users) == before


def test_demo_dir_is_cleared_only_when_the_demo_made_it(tmp_path):
    from eos_runtime.demo import DEMO_MARKER, prepare_demo_dir

    fresh = tmp_path / "new" / "demo"
    prepare_demo_dir(fresh)
    assert [p.name for p in fresh.iterdir()] == [DEMO_MARKER]

    (fresh / "topics").mkdir()
    (fresh / "topics" / "old").write_bytes(b"an earlier demo's log")
    (fresh / "stray-file").write_bytes(b"x")
    prepare_demo_dir(fresh)   # its own: started afresh
    assert [p.name for p in fresh.iterdir()] == [DEMO_MARKER]

    empty = tmp_path / "empty"
    empty.mkdir()
    prepare_demo_dir(empty)   # nothing in it to lose
    assert (empty / DEMO_MARKER).is_file()

    from eos_runtime.errors import ConfigError

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="not empty"):
        prepare_demo_dir(theirs)
    assert (theirs / "notes.txt").read_text() == "keep me"


def test_smoke_leaves_the_demo_directory_to_the_demo(tmp_path):
    # The smoke run's topics in .eos/demo would make the next `eos demo` refuse its own default.
    p = eos("smoke", "--records", "10", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert not (tmp_path / ".eos" / "demo").exists()


# --------------------------------------------------------------------------- a broken pipeline file

@pytest.mark.parametrize("source, line, what", [
    ('from eos_runtime import Pipeline\npipeline = Pipeline("x"\n', 2,
     "SyntaxError: '(' was never closed"),
    ('from eos_runtime import Pipeline\n\nTOPIC = "lines"\n'
     'raise ValueError("no config for TOPIC")\n', 4,
     "ValueError: no config for TOPIC"),
    ('import json\nimport no_such_module_for_eos_tests\n', 2,
     "ModuleNotFoundError: No module named 'no_such_module_for_eos_tests'"),
    # raised in a library the file calls: the user's line that called it is what to fix
    ('import json\n\ndef settings():\n    return json.loads("{oops")\n\nCONFIG = settings()\n', 4,
     "JSONDecodeError: Expecting property name enclosed in double quotes"),
], ids=["syntax", "raise", "import", "in-a-library"])
@pytest.mark.parametrize("command", ["run", "stop"])
def test_a_broken_pipeline_file_is_one_error_line(tmp_path, command, source, line, what):
    path = tmp_path / "my_pipeline.py"
    path.write_text(source)
    p = eos(command, str(path), "--data-dir", str(tmp_path / "data"))
    err = error_line(p)
    assert f"{path}, line {line}: " in err and what in err, err



@pytest.mark.parametrize("defines, says", [
    ("", "defines no Pipeline object: make one, e.g. pipeline = Pipeline(\"my-job\")"),
    ("a = Pipeline('a')\nb = Pipeline('b')\n",
     "defines 2 Pipeline objects (a, b); name the one to run `pipeline`"),
])
def test_a_pipeline_file_without_one_pipeline_says_what_to_write(tmp_path, defines, says):
    """Issue 27 item 13: '0 Pipeline objects; name the one to run' was wrong advice when
    there are none."""
    from eos_runtime.errors import ConfigError
    from eos_runtime.runner import load_pipeline

    path = tmp_path / "p.py"
    path.write_text("from eos_runtime import Pipeline\n" + defines)
    with pytest.raises(ConfigError) as err:
        load_pipeline(path)
    assert str(err.value) == f"{path} {says}"


# --------------------------------------------------------------------------- read-only directories

WORDCOUNT = str(ROOT / "examples" / "wordcount.py")


def _can_mount_privately() -> bool:
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount --bind / /"], capture_output=True)
    return probe.returncode == 0


def eos_read_only(read_only: list[Path], *args: str,
                  timeout: float = 120) -> subprocess.CompletedProcess:
    """``eos`` with the ``read_only`` directories unwritable for it, the way a user meets them.

    As root chmod does not stop writes, so the directories are bind-mounted read-only in
    a private mount namespace of the child only (nothing outside it sees the mounts).
    """
    if os.geteuid() != 0:
        modes = {d: d.stat().st_mode for d in read_only}
        for d in read_only:
            d.chmod(0o555)
        try:
            return eos(*args, timeout=timeout)
        finally:
            for d, mode in modes.items():
                d.chmod(mode)
    if shutil.which("unshare") is None or not _can_mount_privately():
        pytest.skip("running as root, where chmod does not stop writes, and a private read-only "
                    "bind mount (unshare -m, mount --bind) is not allowed here")
    mounts = " && ".join(f'mount --bind "{d}" "{d}" && mount -o remount,ro,bind "{d}" "{d}"'
                         for d in read_only)
    env = {k: v for k, v in os.environ.items() if k != "EOS_BOOTSTRAP_SERVERS"}
    p = subprocess.run(["unshare", "-m", "sh", "-c", f'{mounts} && exec "$@"', "sh",
                        sys.executable, "-c", "from eos_runtime.cli import run; run()", *args],
                       capture_output=True, env=env, timeout=timeout)
    return subprocess.CompletedProcess(p.args, p.returncode, p.stdout.decode(),
                                       p.stderr.decode(errors="replace"))


@pytest.fixture
def produced(tmp_path):
    data = tmp_path / "data"
    p = eos("produce", "lines", "--generate", "words", "--count", "50", "--data-dir", str(data))
    assert p.returncode == 0, p.stderr
    return data


def test_run_on_a_read_only_data_dir_fails_before_it_starts(produced):
    before = tree(produced)
    p = eos_read_only([produced], "run", WORDCOUNT, "--data-dir", str(produced),
                      "--state-dir", str(produced.parent / "state"), timeout=60)
    err = error_line(p)
    assert f"data directory '{produced}'" in err and "not writable" in err, err
    assert "Spark" not in p.stderr and tree(produced) == before


def test_run_with_a_read_only_state_dir_fails_before_it_starts(produced):
    state = produced.parent / "state"
    state.mkdir()
    p = eos_read_only([state], "run", WORDCOUNT, "--data-dir", str(produced),
                      "--state-dir", str(state), timeout=60)
    err = error_line(p)
    assert f"state directory '{state}'" in err and "not writable" in err, err
    # refused before a run was recorded: the job's control topic was never made
    assert not (produced / "topics" / "wordcount.control").exists()


def test_produce_and_stop_on_a_read_only_data_dir_are_one_error_line(produced):
    for args in (["produce", "lines", "--generate", "words", "--count", "5"],
                 ["stop", "wordcount"]):
        err = error_line(eos_read_only([produced], *args, "--data-dir", str(produced)))
        assert f"data directory '{produced}'" in err and "not writable" in err, err


def test_consume_reads_a_read_only_local_log(produced):
    before = tree(produced)
    p = eos_read_only([produced], "consume", "lines", "--all", "--count",
                      "--data-dir", str(produced))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "50"
    assert tree(produced) == before


def test_writable_dir_check_names_the_directory_and_the_reason(tmp_path, monkeypatch):
    from eos_runtime.errors import ConfigError
    from eos_runtime.runner import check_writable_dir

    missing = tmp_path / "a" / "b"           # made later by the run: its parent decides
    check_writable_dir(missing, "state directory", "--state-dir")
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(ConfigError, match=f"state directory '{not_a_dir}' is not a directory"):
        check_writable_dir(not_a_dir, "state directory", "--state-dir")
    with pytest.raises(ConfigError, match=f"'{not_a_dir}' is not a directory"):
        check_writable_dir(not_a_dir / "sub", "state directory", "--state-dir")

    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: (
        False if Path(p) == tmp_path and mode & os.W_OK else real_access(p, mode, **kw)))
    with pytest.raises(ConfigError, match=f"data directory '{tmp_path}' is not writable"):
        check_writable_dir(tmp_path, "data directory", "--data-dir")
    with pytest.raises(ConfigError, match=f"data directory '{missing}' is not writable"):
        check_writable_dir(missing, "data directory", "--data-dir")   # nor can it be made


# --------------------------------------------------------------------------- an unreachable broker

#: Seconds an ``eos`` child process that cannot reach the broker may take to fail. The
#: bound is on the whole process (its Python's start and imports, up to a 5 s connect
#: timeout, its exit), which a busy 2-core machine can slow several times over: it is
#: there to show that the command fails instead of retrying for ever. Which timeout
#: applied is the message's to say ("no answer within 5 s").
SLOW_CHILD = 60


@pytest.fixture
def closed_port():
    """A loopback port nothing listens on: bound (so nobody else takes it), never listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@pytest.mark.parametrize("args", [
    ["produce", "lines", "--generate", "words", "--count", "5"],
    ["consume", "lines", "--all"],
    ["stop", "wordcount"],
    ["run", WORDCOUNT],
    ["demo", "--lines", "10"],
    ["smoke", "--records", "10"],
], ids=["produce", "consume", "stop", "run", "demo", "smoke"])
def test_an_unreachable_broker_fails_fast_in_one_line(tmp_path, closed_port, args):
    started = time.monotonic()
    p = eos(*args, "--bootstrap-servers", f"127.0.0.1:{closed_port}", cwd=tmp_path, timeout=120)
    seconds = time.monotonic() - started
    err = error_line(p)   # and no librdkafka line of its own on the terminal
    assert f"cannot reach Kafka at 127.0.0.1:{closed_port}" in err, err
    assert seconds < SLOW_CHILD, f"took {seconds:.1f} s"   # it fails, not retries for ever


def test_a_port_that_never_answers_fails_after_the_connect_timeout(tmp_path):
    # the kernel completes the handshake, nobody ever reads or answers
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        port = s.getsockname()[1]
        started = time.monotonic()
        p = eos("consume", "lines", "--all", "--bootstrap-servers", f"127.0.0.1:{port}",
                cwd=tmp_path, timeout=120)
        seconds = time.monotonic() - started
    err = error_line(p)
    # the message says the 5 s timeout was the one applied; the bound, that it failed
    assert f"cannot reach Kafka at 127.0.0.1:{port} (no answer within 5 s)" in err, err
    assert seconds < SLOW_CHILD, f"took {seconds:.1f} s"


@pytest.mark.parametrize("servers, bad", [
    ("nonsense", "nonsense"),
    ("127.0.0.1", "127.0.0.1"),
    ("127.0.0.1:port", "127.0.0.1:port"),
    ("127.0.0.1:70000", "127.0.0.1:70000"),
    (":9092", ":9092"),
    ("127.0.0.1:9092,,127.0.0.1:9093", "''"),
    ("127.0.0.1:9092 127.0.0.1:9093", "127.0.0.1:9092 127.0.0.1:9093"),
])
def test_bootstrap_servers_must_be_host_port(tmp_path, servers, bad):
    started = time.monotonic()
    for via_env in (False, True):
        args = ["consume", "lines", "--all"]
        p = (eos(*args, env={"EOS_BOOTSTRAP_SERVERS": servers}, cwd=tmp_path) if via_env else
             eos(*args, "--bootstrap-servers", servers, cwd=tmp_path))
        err = error_line(p)
        assert "HOST:PORT" in err and bad in err, err
    assert time.monotonic() - started < SLOW_CHILD   # two child processes


@pytest.mark.parametrize("servers", [
    "127.0.0.1:9092", "localhost:9092,broker-2.example:19092", "[::1]:9092",
    "PLAINTEXT://127.0.0.1:9092", " 127.0.0.1:9092 "])
def test_valid_bootstrap_servers_pass_the_syntax_check(servers):
    from eos_runtime.transport.kafka import check_bootstrap_servers

    check_bootstrap_servers(servers)


def test_librdkafka_logs_go_through_python_logging(closed_port, caplog):
    from eos_runtime.errors import TransportError
    from eos_runtime.transport.kafka import KafkaTransport

    caplog.set_level(logging.DEBUG, logger="eos_runtime.transport.kafka.librdkafka")
    started = time.monotonic()
    with pytest.raises(TransportError, match=f"cannot reach Kafka at 127.0.0.1:{closed_port}"):
        KafkaTransport(f"127.0.0.1:{closed_port}")
    assert time.monotonic() - started < 10
    assert any("Connection refused" in r.getMessage() for r in caplog.records
               if r.name == "eos_runtime.transport.kafka.librdkafka")


# ------------------------------------------------------------- errors that say what to change

def run_error_line(p: subprocess.CompletedProcess) -> str:
    """The ``error: ...`` line that ends a failed ``eos run``: the last line on stderr, with
    no traceback before it (Spark's JVM may have printed its start-up warning)."""
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("error: "), p.stderr
    assert "Traceback" not in p.stderr and sum(ln.startswith("error: ") for ln in lines) == 1, \
        p.stderr
    return lines[-1]


def task_attempt(state: Path, job: str, task: int) -> int:
    """The attempt number the task's last process ran as (from its pid file)."""
    return int((state / job / f"task-{task}.pid").read_text().split()[1])


WORDS_BY = '''
from eos_runtime import Pipeline

pipeline = Pipeline("{name}")

def count(word, state):
    n = state.get("n", 0) + 1
    state.set("n", n)
    {ret}

(pipeline.source("lines", value="utf8")
    .flat_map(str.split)
    .key_by({key})
    .map(count, stateful=True)
    .sink("counts", key="utf8", value="utf8"))
'''


@pytest.fixture
def fifty_lines(tmp_path):
    data = tmp_path / "data"
    p = eos("produce", "lines", "--generate", "words", "--count", "50", "--data-dir", str(data))
    assert p.returncode == 0, p.stderr
    return data


def test_a_map_that_forgets_to_return_names_the_step_the_sink_and_the_format(tmp_path,
                                                                           fifty_lines):
    path = tmp_path / "noreturn.py"
    path.write_text(WORDS_BY.format(name="noreturn", key="lambda w: w", ret="# no return"))
    state = tmp_path / "state"
    p = eos("run", str(path), "--data-dir", str(fifty_lines), "--state-dir", str(state))
    err = run_error_line(p)
    assert ("sink 'counts' value format utf8 cannot encode None (returned by map(count)): "
            "return a str, or choose value='json'/'msgpack'") in err, err
    assert "NoneType" not in err and "nothing past this record was committed" in err
    # a retry would fail the same way: the first attempt was the only one
    assert "not retried" in err and task_attempt(state, "noreturn", 2) == 0


def test_an_int_key_into_a_utf8_key_sink_names_key_by_and_the_format(tmp_path, fifty_lines):
    path = tmp_path / "intkey.py"
    path.write_text(WORDS_BY.format(name="intkey", key="len", ret="return str(n)"))
    p = eos("run", str(path), "--data-dir", str(fifty_lines),
            "--state-dir", str(tmp_path / "state"))
    err = run_error_line(p)
    assert "sink 'counts' key format utf8 cannot encode int " in err, err
    assert "(the key key_by returned): make the key a str, or choose key='json'/'msgpack'" in err


def test_a_raising_function_stops_the_run_at_once_and_suggests_dead_letters(tmp_path,
                                                                           fifty_lines):
    path = tmp_path / "raises.py"
    path.write_text(WORDS_BY.format(
        name="raises", key="lambda w: w",
        ret='if word == "alpha":\n        raise ValueError("no alpha")\n    return str(n)'))
    state = tmp_path / "state"
    p = eos("run", str(path), "--data-dir", str(fifty_lines), "--state-dir", str(state),
            "--json")
    err = run_error_line(p)
    assert "step map(count) at raises.py:10 raised ValueError: no alpha" in err, err
    assert "--dead-letters" in err and "not retried" in err
    failed = int(err.split("task ", 1)[1].split()[0])
    assert task_attempt(state, "raises", failed) == 0
    # --json: stdout still holds one JSON document, the error
    doc = json.loads(p.stdout)
    assert doc["ok"] is False and doc["error"] == err[len("error: "):]
    assert doc["type"] == "EngineError"


@pytest.mark.parametrize("fmt, what, value, says", [
    ("utf8", "value", None, "value format utf8 cannot encode None (returned by map(f)): return "
                            "a str, or choose value='json'/'msgpack'"),
    ("utf8", "value", b"raw", "value format utf8 cannot encode bytes b'raw' (returned by "
                              "map(f)): return a str, or choose value='bytes'"),
    ("bytes", "value", "text", "value format bytes cannot encode str 'text' (returned by "
                               "map(f)): return bytes, or choose value='utf8'"),
    ("json", "value", {1, 2}, "value format json cannot encode set {1, 2} (returned by map(f)) "
                              "(TypeError: Object of type set is not JSON serializable): "
                              "return JSON values"),
    ("msgpack", "value", object, "value format msgpack cannot encode type <class 'object'>"),
    ("utf8", "key", 7, "key format utf8 cannot encode int 7 (the key key_by returned): make the "
                       "key a str, or choose key='json'/'msgpack'"),
    ("json", "key", b"k", "key format json cannot encode bytes b'k' (the key key_by returned) "
                          "(TypeError: Object of type bytes is not JSON serializable): make the "
                          "key a str or an int, or choose key='msgpack'"),
])
def test_a_sink_format_error_names_the_sink_the_format_and_the_fix(fmt, what, value, says):
    from eos_runtime.api import Sink
    from eos_runtime.errors import UserFunctionError
    from eos_runtime.runtime.operators import encode_key
    from eos_runtime.runtime.outputs import SinkWriter

    sink = SinkWriter(Sink("out", fmt if what == "key" else None,
                           fmt if what == "value" else "utf8"), 1)
    sink.value_origin, sink.key_origin = "returned by map(f)", "the key key_by returned"
    ok = b"ok" if fmt == "bytes" else "ok"
    key, values = (value, [ok]) if what == "key" else (None, [ok, value])
    with pytest.raises(UserFunctionError) as info:
        sink.write(None if key is None else encode_key(key), values, 0)
    assert f"sink 'out' {says}" in str(info.value), str(info.value)
    assert len(sink) == 0   # nothing of the record is held


@pytest.mark.kafka
def test_a_record_too_large_for_kafka_says_what_was_written_and_what_to_raise(tmp_path,
                                                                            kafka_bootstrap):
    import uuid

    topic = f"big-{uuid.uuid4().hex[:8]}"
    lines = [f"before {i}" for i in range(30)] + ["y" * 2_000_000] + [f"after {i}"
                                                                      for i in range(30)]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    p = eos("produce", topic, "--lines-from", str(src), "--bootstrap-servers", kafka_bootstrap)
    err = error_line(p)
    written = eos("consume", topic, "--all", "--count", "--bootstrap-servers", kafka_bootstrap)
    assert written.returncode == 0, written.stderr
    n = int(written.stdout)
    assert n == len(lines) - 1    # one batch: everything but the one record Kafka refused
    assert err.startswith(f"error: {n:,} records were written to {topic!r} and 1 was not: "), err
    assert "a record of 2,000,000 bytes" in err and "message.max.bytes" in err, err
    assert "max.request.size" in err


@pytest.mark.kafka
def test_a_produce_stopped_in_a_later_batch_says_where_it_stopped_reading(
        tmp_path, kafka_bootstrap):
    import uuid

    from eos_runtime.cli.produce import produce_records
    from eos_runtime.errors import DeliveryFailed
    from eos_runtime.transport import TopicPartition, TopicSpec, open_transport

    topic = f"big-{uuid.uuid4().hex[:8]}"
    values = [b"small"] * 25 + [b"y" * 2_000_000] + [b"small"] * 25
    with open_transport(bootstrap_servers=kafka_bootstrap) as t:
        t.create_topics([TopicSpec(topic, 1)])
        with pytest.raises(DeliveryFailed) as info:
            produce_records(t, topic, iter(values), 1, batch=10)
        assert t.watermarks(TopicPartition(topic, 0))[1] == 29
    assert str(info.value).startswith(f"29 records were written to {topic!r} and 1 was not: ")
    assert str(info.value).endswith("; the input after record 30 was not read")


# ------------------------------------------------ a user function's error in the user's terms

LABELS = '''from eos_runtime import Pipeline

pipeline = Pipeline("{name}")


def shout(line):
    if len(line) > 100:
        raise ValueError(f"a line of {{len(line)}} characters")
    return line.upper()


def label(word):
    return {{"word": word, "label": "x" + len(word)}}


(pipeline.source("lines", value="utf8")
    .map(shout)
    .flat_map(str.split)
    .key_by(lambda w: w)
    .map({last})
    .sink("labelled", key="utf8", value="json"))
'''


def produce_lines(tmp_path: Path, *lines: str) -> Path:
    """A local log whose one-partition topic ``lines`` holds ``lines``."""
    data = tmp_path / "data"
    src = tmp_path / "lines.txt"
    src.write_text("".join(f"{line}\n" for line in lines))
    p = eos("produce", "lines", "--lines-from", str(src), "--partitions", "1",
            "--data-dir", str(data))
    assert p.returncode == 0, p.stderr
    return data


def run_labels(tmp_path: Path, name: str, last: str, *lines: str) -> str:
    """The error line of ``eos run`` of job ``name`` (LABELS, its last step ``last``) over
    ``lines``."""
    data = produce_lines(tmp_path, *lines)
    path = tmp_path / "labels.py"
    path.write_text(LABELS.format(name=name, last=last))
    return run_error_line(eos("run", str(path), "--data-dir", str(data),
                              "--state-dir", str(tmp_path / "state")))


def test_a_function_that_raises_after_a_shuffle_names_its_line_the_record_and_the_stream(
        tmp_path):
    """Issue 27 item 7: the error named neither the function's file and line nor the
    record's value, and after a shuffle only an internal channel offset."""
    err = run_labels(tmp_path, "labels", "label", "fine", "hello world")
    assert "step map(label) at labels.py:13 raised TypeError: can only concatenate str" in err
    # which stage, and the stream it reads in the pipeline's own words
    assert "a record of stage 1, from .key_by(<lambda>) of stage 0" in err, err
    assert "key 'FINE', value 'FINE'" in err, err
    assert "nothing past this record was committed" in err and "--dead-letters" in err


def test_a_function_that_raises_on_a_source_record_shows_the_record_shortened(tmp_path):
    long_line = " ".join(f"w{i}" for i in range(60))   # 229 characters
    err = run_labels(tmp_path, "shouts", "str", "fine", long_line)
    assert "step map(shout) at labels.py:8 raised ValueError: a line of 229 characters" in err
    assert "topic='lines' partition=0 offset=1" in err, err
    shown = err.split("value ", 1)[1].split(": step", 1)[0]
    # reprlib's way: the head and the tail, "..." between
    assert shown.startswith("'w0 w1 w2") and shown.endswith("w59'"), shown
    assert "..." in shown and len(shown) <= 80, shown


def test_traceback_shows_the_pipeline_s_own_frames_only(tmp_path):
    """``eos run --traceback``: the frames of the user's files, none of the runtime's, then
    the same one error line."""
    data = produce_lines(tmp_path, "hello")
    helpers = tmp_path / "labelling.py"
    helpers.write_text("def tag(word):\n    return word + 1\n")
    path = tmp_path / "labels.py"
    path.write_text(LABELS.format(name="traced", last="lambda w: tag(w)")
                    .replace("from eos_runtime import Pipeline",
                             "from eos_runtime import Pipeline\nfrom labelling import tag"))
    p = eos("run", str(path), "--traceback", "--data-dir", str(data),
            "--state-dir", str(tmp_path / "state"))
    assert p.returncode == 1, p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "at labels.py:21 raised TypeError" in lines[-1]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("Traceback"))
    frames = [ln.strip() for ln in lines[start + 1:-1] if ln.strip().startswith("File ")]
    assert frames == [f'File "{path}", line 21, in <lambda>',
                      f'File "{helpers}", line 2, in tag'], p.stderr
    assert lines[-2] == 'TypeError: can only concatenate str (not "int") to str', p.stderr
    assert "eos_runtime" not in "\n".join(lines[start:-1])


SETS = '''from eos_runtime import Pipeline

pipeline = Pipeline("sets")

(pipeline.source("lines", value="utf8")
    .map(lambda line: set(map(int, line.split())))
    .key_by(len)
    .map(sorted)
    .sink("sorted", key="json", value="json"))
'''


def test_a_value_that_cannot_cross_key_by_is_named_as_the_test_helper_names_it(tmp_path):
    """Issue 27 item 8: `eos run` said "TypeError: can not serialize 'set' object"; the
    in-process helper said what was wrong and where. Both say the same now."""
    from eos_runtime.errors import UserFunctionError
    from eos_runtime.runner import load_pipeline
    from eos_runtime.testing import run_steps

    data = produce_lines(tmp_path, "2 1")
    path = tmp_path / "sets.py"
    path.write_text(SETS)
    with pytest.raises(UserFunctionError) as info:
        run_steps(load_pipeline(path), ["2 1"])
    helper = str(info.value)
    assert helper.startswith("the set {1, 2} (returned by map(<lambda>)) cannot cross "
                             ".key_by(len) to stage 1: values travel between stages as "
                             "msgpack, which takes None, bool, int, float, str, bytes, or "
                             "lists and dicts of those"), helper
    err = run_error_line(eos("run", str(path), "--data-dir", str(data),
                             "--state-dir", str(tmp_path / "state")))
    assert helper in err, err
    assert "topic='lines' partition=0 offset=0, value '2 1'" in err, err


# --------------------------------------------------------- a module beside the pipeline file

BESIDE = '''from eos_runtime import Pipeline
from wordhelpers import norm

pipeline = Pipeline("{name}")

(pipeline.source("lines", value="utf8")
    .flat_map(str.split)
    .map(norm)
    .key_by(norm)
    .sink("normed", key="utf8", value="utf8"))
'''


def write_beside(directory: Path, name: str) -> Path:
    """A pipeline file that imports a module of its own directory, in the workers too."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "wordhelpers.py").write_text("def norm(word):\n    return word.lower()\n")
    path = directory / "beside.py"
    path.write_text(BESIDE.format(name=name))
    return path


def test_a_pipeline_file_imports_a_module_beside_it(tmp_path):
    """Issue 27 item 9: ``from helpers import norm`` failed, even run from that directory;
    the file's directory is on sys.path of the driver and every worker, as for
    ``python file.py``."""
    data = produce_lines(tmp_path, "Hello World")
    path = write_beside(tmp_path / "project", "beside")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = eos("run", str(path), "--data-dir", str(data), "--state-dir", str(tmp_path / "state"),
            cwd=elsewhere)
    assert p.returncode == 0, p.stderr
    out = eos("consume", "normed", "--all", "--data-dir", str(data))
    assert sorted(out.stdout.splitlines()) == ["hello\thello", "world\tworld"], out
