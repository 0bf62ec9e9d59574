"""The project's own Kafka broker (eos_runtime.broker) and the transaction guarantees we rely on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from eos_runtime.broker import KafkaBroker, find_running, free_port, jars, rundir, stop_running
from eos_runtime.errors import BrokerError, SetupError
from eos_runtime.processes import alive

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def eos(*args: str, env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the real console entry point (``eos_runtime.cli:run``) in a child process."""
    return subprocess.run([sys.executable, "-c", "from eos_runtime.cli import run; run()", *args],
                          capture_output=True, text=True, env=env, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def broker_processes(run_dir: Path) -> list[int]:
    """Pids of live processes started with this run dir's server.properties."""
    props = str(run_dir / "server.properties").encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if props in (proc / "cmdline").read_bytes().split(b"\0") and alive(int(proc.name)):
                    pids.append(int(proc.name))
            except OSError:
                pass
    return pids


def new_topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"test-broker-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def read_all(bootstrap: str, topic: str, *, isolation: str, expect: int,
             timeout: float = 20.0) -> list[bytes]:
    """Values of partition 0 from the start, until ``expect`` records came or the end is
    reached (after ``expect`` records, one more poll round to catch extras)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if len(values) >= expect:
                        break
                    continue
                raise KafkaException(msg.error())
            values.append(msg.value())
    finally:
        c.close()
    return values


# --------------------------------------------------------------------------- the launcher

@pytest.mark.kafka
@pytest.mark.slow
def test_cli_up_status_down_round_trip(tmp_path: Path) -> None:
    run_dir = tmp_path / "kafka"
    port = free_port()
    env = {**os.environ}
    env.pop("EOS_KAFKA_DIR", None)
    try:
        t0 = time.monotonic()
        up = eos("kafka", "up", "--dir", str(run_dir), "--port", str(port), env=env)
        assert up.returncode == 0, up.stderr
        bootstrap = f"127.0.0.1:{port}"
        assert up.stdout.strip() == bootstrap
        print(f"eos kafka up took {time.monotonic() - t0:.1f} s")

        # `up` exited; the broker lives on in its own session.
        state = json.loads((run_dir / "state.json").read_text())
        pid = state["pid"]
        assert alive(pid)
        assert os.getsid(pid) == pid
        assert find_running(run_dir).bootstrap_servers == bootstrap  # type: ignore[union-attr]

        status = eos("kafka", "status", "--dir", str(run_dir), env=env)
        assert status.returncode == 0, status.stderr
        assert status.stdout.strip() == bootstrap

        # A second `up` only reports the address.
        again = eos("kafka", "up", "--dir", str(run_dir), env=env)
        assert again.returncode == 0 and again.stdout.strip() == bootstrap
        assert json.loads((run_dir / "state.json").read_text())["pid"] == pid

        # Produce and consume for real.
        topic = new_topic(bootstrap)
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for i in range(10):
            p.produce(topic, key=b"k", value=f"v{i}".encode())
        assert p.flush(30) == 0
        del p                                    # before the broker goes away
        got = read_all(bootstrap, topic, isolation="read_uncommitted", expect=10)
        assert got == [f"v{i}".encode() for i in range(10)]

        assert (run_dir / "data" / "meta.properties").exists()
        down = eos("kafka", "down", "--dir", str(run_dir), env=env)
        assert down.returncode == 0, down.stderr
        assert not alive(pid) and not broker_processes(run_dir)
        assert not (run_dir / "data").exists()
        assert not (run_dir / "state.json").exists()
        assert (run_dir / "logs" / "server.log").stat().st_size > 0

        status = eos("kafka", "status", "--dir", str(run_dir), env=env)
        assert status.returncode == 1
        assert status.stdout == ""
        assert "not running" in status.stderr
    finally:
        stop_running(run_dir)


@pytest.mark.kafka
@pytest.mark.slow
def test_python_api_keep_data_and_restart(tmp_path: Path) -> None:
    """--keep-data keeps the topics; the next start reuses the store (on a new port)."""
    run_dir = tmp_path / "kafka"
    with KafkaBroker(run_dir) as broker:
        assert broker.bootstrap_servers and broker.running
        topic = new_topic(broker.bootstrap_servers)
        p = Producer({"bootstrap.servers": broker.bootstrap_servers})
        p.produce(topic, value=b"kept")
        assert p.flush(30) == 0
        del p                                    # before the broker goes away
        pid = broker.pid
        broker.stop(keep_data=True)
        assert broker.bootstrap_servers is None and not alive(pid)  # type: ignore[arg-type]
        assert find_running(run_dir) is None
        bootstrap = broker.start()
        assert read_all(bootstrap, topic, isolation="read_committed", expect=1) == [b"kept"]
    assert find_running(run_dir) is None
    assert not (run_dir / "data").exists()


@pytest.mark.kafka
def test_a_broker_that_dies_while_starting_is_a_broker_error_with_its_log(tmp_path: Path) -> None:
    run_dir = rundir.claim_run_dir(tmp_path / "kafka")
    (run_dir / "data").mkdir()
    # A kept store of another node: the broker refuses it and exits.
    (run_dir / "data" / "meta.properties").write_text(
        "version=1\nnode.id=7\ncluster.id=eos-runtime-kafka-0001\n")
    with pytest.raises(BrokerError) as info:
        KafkaBroker(run_dir).start()
    msg = str(info.value)
    assert msg.startswith("Kafka broker exited with code 1 while starting")
    assert "server.log (last lines)" in msg and "Stored node id 7" in msg
    assert find_running(run_dir) is None and not (run_dir / "state.json").exists()


@pytest.mark.kafka
def test_a_broker_that_does_not_answer_in_time_is_stopped_and_reported(tmp_path: Path) -> None:
    run_dir = tmp_path / "kafka"
    with pytest.raises(BrokerError, match=r"did not answer at 127\.0\.0\.1:\d+ within") as info:
        KafkaBroker(run_dir, startup_timeout=0.2).start()
    assert "server.log (last lines)" in str(info.value)
    assert find_running(run_dir) is None
    assert not broker_processes(run_dir)


def test_missing_java_is_a_clear_setup_error(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))           # no java (nor anything else) here
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(SetupError, match=r"Java 17\+ not found on PATH: install OpenJDK 17 "
                                         r"\(apt-get install openjdk-17-jre-headless\)"):
        KafkaBroker(tmp_path / "kafka").start()
    assert find_running(tmp_path / "kafka") is None

    # Through the console entry point: one clear line, exit code 1.
    env = {**os.environ, "PATH": str(tmp_path)}
    env.pop("JAVA_HOME", None)
    r = eos("kafka", "up", "--dir", str(tmp_path / "kafka"), env=env)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "error: Java 17+ not found on PATH: install OpenJDK 17 "
        "(apt-get install openjdk-17-jre-headless) or set JAVA_HOME"]


def test_missing_maven_is_a_clear_setup_error(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOS_CACHE_DIR", str(tmp_path / "cache"))   # empty cache: must fetch
    monkeypatch.setattr(jars, "find_java", lambda: "java")
    real_which = jars.shutil.which
    monkeypatch.setattr(jars.shutil, "which",
                        lambda name, *a, **k: None if name == "mvn" else real_which(name, *a, **k))
    with pytest.raises(SetupError, match=r"Maven not found on PATH.*apt-get install maven"):
        jars.fetch()
    assert not (tmp_path / "cache" / f"kafka-{jars.KAFKA_VERSION}" / "libs").exists()


def test_cache_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOS_CACHE_DIR", str(tmp_path))
    assert jars.libs_dir("4.1.1") == tmp_path / "kafka-4.1.1" / "libs"
    monkeypatch.delenv("EOS_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert jars.libs_dir("4.1.1") == Path.home() / ".cache/eos_runtime/kafka-4.1.1/libs"


def test_status_of_nothing(tmp_path: Path) -> None:
    assert find_running(tmp_path / "nowhere") is None
    assert stop_running(tmp_path / "nowhere") is False
    # A stale state file (a dead pid, or a pid that is not this broker) is not "running".
    run_dir = tmp_path / "stale"
    run_dir.mkdir()
    (run_dir / "state.json").write_text(json.dumps({
        "pid": os.getpid(), "bootstrap_servers": "127.0.0.1:1", "port": 1, "controller_port": 2,
        "run_dir": str(run_dir), "data_dir": str(run_dir / "data"), "log_file": "x",
        "version": "4.1.1", "started_at": 0.0}))
    assert find_running(run_dir) is None
    r = eos("kafka", "status", "--dir", str(run_dir))
    assert r.returncode == 1 and "not running" in r.stderr


# --------------------------------------------------------------------------- transactions

@pytest.mark.kafka
def test_read_committed_never_sees_an_aborted_transaction(kafka_bootstrap: str) -> None:
    topic = new_topic(kafka_bootstrap)
    p = Producer({"bootstrap.servers": kafka_bootstrap,
                  "transactional.id": f"tx-{uuid.uuid4().hex}"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=f"aborted-{i}".encode())
    p.flush(30)                                  # on the broker, then aborted
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=f"committed-{i}".encode())
    p.commit_transaction(30)

    committed = read_all(kafka_bootstrap, topic, isolation="read_committed", expect=3)
    assert committed == [b"committed-0", b"committed-1", b"committed-2"]
    # The aborted records are in the log all the same: read_uncommitted sees them.
    everything = read_all(kafka_bootstrap, topic, isolation="read_uncommitted", expect=8)
    assert [v for v in everything if v.startswith(b"aborted")] == [
        f"aborted-{i}".encode() for i in range(5)]


@pytest.mark.kafka
def test_second_producer_with_same_transactional_id_fences_the_first(kafka_bootstrap: str) -> None:
    topic = new_topic(kafka_bootstrap)
    txn_id = f"tx-{uuid.uuid4().hex}"
    quiet = {"log_level": 0}
    zombie = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": txn_id, **quiet})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    zombie.flush(30)

    successor = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": txn_id,
                          **quiet})
    successor.init_transactions(30)              # bumps the epoch, aborts the zombie's txn

    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(30)
    err = info.value.args[0]
    assert err.fatal(), err
    assert err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                          KafkaError.INVALID_PRODUCER_EPOCH), err

    successor.begin_transaction()
    successor.produce(topic, value=b"successor")
    successor.commit_transaction(30)
    assert read_all(kafka_bootstrap, topic, isolation="read_committed", expect=1) == [b"successor"]


def test_cluster_ids_never_look_like_an_option():
    """The storage tool's parser takes a leading '-' for an option (seen failing 1 in 64)."""
    from eos_runtime.broker.kafka import _new_cluster_id

    ids = [_new_cluster_id() for _ in range(5000)]
    assert not any(i.startswith("-") for i in ids)
    assert len(set(ids)) == len(ids) and all(len(i) == 22 for i in ids)


# ------------------------------------------------------- a run dir is the broker's (issue 11)

def tree(path: Path) -> dict[str, bytes | None]:
    """Every entry under ``path`` (files with their bytes, directories as None)."""
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(path.rglob("*"))}


def users_dir(tmp_path: Path) -> Path:
    """A directory no broker ever ran from, holding a user's files (one in ``data/``)."""
    d = tmp_path / "mine"
    (d / "data").mkdir(parents=True)
    (d / "data" / "thesis.tex").write_text("the user's only copy")
    (d / "notes.txt").write_text("keep me")
    return d


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("EOS_KAFKA_DIR", "JAVA_HOME")}
    env.update(extra)
    return env


@pytest.mark.parametrize("how", ["--dir", "EOS_KAFKA_DIR"])
def test_down_never_deletes_a_directory_no_broker_ran_from(tmp_path: Path, how: str) -> None:
    d = users_dir(tmp_path)
    before = tree(d)
    if how == "--dir":
        r = eos("kafka", "down", "--dir", str(d), env=cli_env())
    else:
        r = eos("kafka", "down", env=cli_env(EOS_KAFKA_DIR=str(d)))
    assert tree(d) == before                      # the user's file, and no .lock left behind
    assert r.returncode in (0, 1), r.stderr
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no Kafka broker" in lines[0] and str(d) in lines[0], r.stderr
    assert "not a broker run dir" in lines[0], r.stderr
    assert stop_running(d) is False and tree(d) == before


def fake_java(tmp_path: Path) -> tuple[Path, Path]:
    """A ``java`` on PATH that only records that it was started (then says nothing)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    started = tmp_path / "java-was-started"
    java = bin_dir / "java"
    java.write_text(f"#!/bin/sh\necho \"$@\" >> '{started}'\n")
    java.chmod(0o755)
    return bin_dir, started


@pytest.mark.parametrize("fresh", [False, True], ids=["up", "up-fresh"])
def test_up_refuses_a_foreign_non_empty_data_dir_before_starting_java(tmp_path: Path,
                                                                      fresh: bool) -> None:
    d = users_dir(tmp_path)
    before = tree(d)
    bin_dir, started = fake_java(tmp_path)
    env = cli_env(PATH=f"{bin_dir}:{os.environ['PATH']}", EOS_CACHE_DIR=str(tmp_path / "cache"))
    r = eos("kafka", "up", "--dir", str(d), *(["--fresh"] if fresh else []), env=env)
    assert not started.exists(), "Java was started"
    assert tree(d) == before
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert f"{d / 'data'}" in lines[0] and "not empty" in lines[0], lines[0]


def test_a_run_dir_is_the_brokers_by_its_marker_or_its_own_server_properties(
        tmp_path: Path) -> None:
    assert not rundir.is_run_dir(tmp_path / "missing")
    assert not rundir.is_run_dir(users_dir(tmp_path))

    # Someone else's Kafka config is not ours either.
    theirs = tmp_path / "theirs"
    (theirs / "data").mkdir(parents=True)
    (theirs / "server.properties").write_text("log.dirs=/var/lib/kafka\n")
    assert not rundir.is_run_dir(theirs)
    r = eos("kafka", "down", "--dir", str(theirs), env=cli_env())
    assert (theirs / "data").is_dir() and (theirs / "server.properties").exists(), r.stderr

    # A run dir made before the marker existed: its server.properties names its data dir.
    legacy = tmp_path / "legacy"
    (legacy / "data").mkdir(parents=True)
    (legacy / "data" / "meta.properties").write_text("node.id=1\n")
    (legacy / "server.properties").write_text(f"node.id=1\nlog.dirs={legacy / 'data'}\n")
    assert rundir.is_run_dir(legacy)
    r = eos("kafka", "down", "--dir", str(legacy), env=cli_env())
    assert r.returncode == 0, r.stderr
    assert not (legacy / "data").exists() and (legacy / "server.properties").exists()

    # The marker the broker writes when it takes a directory.
    ours = tmp_path / "ours"
    rundir.claim_run_dir(ours)
    assert rundir.is_run_dir(ours)
    (ours / "data").mkdir()
    (ours / "data" / "meta.properties").write_text("node.id=1\n")
    r = eos("kafka", "down", "--dir", str(ours), "--keep-data", env=cli_env())
    assert r.returncode == 0 and (ours / "data" / "meta.properties").exists(), r.stderr
    r = eos("kafka", "down", "--dir", str(ours), env=cli_env())
    assert r.returncode == 0 and not (ours / "data").exists(), r.stderr
    assert "no Kafka broker was running" in r.stderr

    # A new or empty directory becomes the broker's; a foreign store in it does not.
    empty = tmp_path / "empty"
    empty.mkdir()
    rundir.claim_run_dir(empty)
    assert rundir.is_run_dir(empty)
    mine = users_dir(tmp_path / "x")
    with pytest.raises(BrokerError, match=f"{mine / 'data'}.*not empty"):
        rundir.claim_run_dir(mine)
    assert not rundir.is_run_dir(mine)


def test_waiting_for_a_broker_keeps_one_quiet_log_handler_however_many_clients_it_makes() -> None:
    import logging

    from eos_runtime.broker.kafka import _admin_client

    _admin_client("127.0.0.1:1")
    handlers = list(logging.getLogger("eos_runtime.broker.librdkafka").handlers)
    for _ in range(3):   # the readiness wait makes a client per try
        _admin_client("127.0.0.1:1")
    # (other tests' log capture may have added its own handlers before)
    assert logging.getLogger("eos_runtime.broker.librdkafka").handlers == handlers


def test_the_preferred_port_is_asked_for_at_each_launch_and_passed_over_when_taken() -> None:
    """``eos kafka up`` turned "9092 is free now" into a fixed --port 9092: taken before
    the broker bound it (the first up downloads the jars in between), it failed with
    "pick another with --port", an option never given, and its retry insisted on it."""
    import socket

    from eos_runtime.broker.kafka import free_port, listener_port

    assert listener_port(4242, 9) == 4242                    # the user's --port, always
    preferred = free_port()
    assert listener_port(None, preferred) == preferred       # free now: taken
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", preferred))
        taken.listen()
        other = listener_port(None, preferred)
        assert other != preferred and other > 0             # taken meanwhile: another
