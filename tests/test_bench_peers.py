"""The Kafka Streams peer of ``eos bench``: a machine that cannot build it gets a clear reason
(the bench reports the peer skipped with it), and, as a long run, the peer verified on
every workload. What it measures is never asserted here (benchmarks/README.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

KS_SYSTEMS = ["kafka-streams-exactly-once-100ms", "kafka-streams-exactly-once-1s"]


def _path_with(tmp_path: Path, *tools: str) -> str:
    """A PATH of one directory holding only ``tools``, linked to this machine's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in tools:
        found = shutil.which(tool)
        if found is None:
            pytest.skip(f"this machine has no {tool}")
        (bin_dir / tool).symlink_to(Path(found).resolve())
    return str(bin_dir)


def _why_not(monkeypatch, tmp_path: Path, *tools: str) -> str:
    from eos_runtime.bench.lineup import all_systems

    monkeypatch.setenv("PATH", _path_with(tmp_path, *tools))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("EOS_CACHE_DIR", str(tmp_path / "cache"))   # nothing built yet
    why = all_systems()["kafka-streams-exactly-once-1s"].unavailable()
    assert why is not None
    assert why.startswith("the Kafka Streams peer could not be built: "), why
    return why


def test_without_java_the_kafka_streams_peer_says_to_install_a_jdk(monkeypatch, tmp_path):
    why = _why_not(monkeypatch, tmp_path)
    assert "Java 17+ not found on PATH" in why and "openjdk-17" in why


def test_with_a_jre_alone_the_kafka_streams_peer_asks_for_javac(monkeypatch, tmp_path):
    why = _why_not(monkeypatch, tmp_path, "java")
    assert "javac not found on PATH" in why and "JDK 17+" in why


def test_without_maven_the_kafka_streams_peer_says_to_install_it(monkeypatch, tmp_path):
    why = _why_not(monkeypatch, tmp_path, "java", "javac")
    assert "Maven not found on PATH" in why and "apt-get install maven" in why
    assert not any((tmp_path / "cache").glob("kafka-streams-*")), "no half-built cache"


def test_a_cache_without_the_peers_jar_is_built_anew_not_run(monkeypatch, tmp_path):
    """A cache that lost the application's jar (a cleaned directory, a copy cut short) is
    no cache: the peer is built again, and here, without Maven, says so, where running
    it would have failed inside the JVM (ClassNotFoundException) with the run."""
    from eos_runtime.bench.kafka_streams import _app_source, _cache_dir

    monkeypatch.setenv("EOS_CACHE_DIR", str(tmp_path / "cache"))
    cached = _cache_dir(_app_source())
    (cached / "libs").mkdir(parents=True)
    (cached / "libs" / "kafka-streams-4.1.1.jar").write_bytes(b"")
    (cached / ".eos-complete").write_text("kafka-streams 4.1.1\n")
    why = _why_not(monkeypatch, tmp_path, "java", "javac")
    assert "Maven not found on PATH" in why


@pytest.mark.kafka
def test_a_bench_reports_a_peer_it_cannot_build_with_the_reason(kafka_bootstrap, tmp_path):
    """Kafka Streams and PyFlink without Java: skipped, the reason in results.json and
    report.md."""
    from test_cli import ok

    env = {"PATH": _path_with(tmp_path), "EOS_CACHE_DIR": str(tmp_path / "cache"),
           "JAVA_HOME": ""}
    ok("bench", "--measures", "throughput", "--workloads", "wordcount", "--systems",
       ",".join([*KS_SYSTEMS, "pyflink-exactly-once"]), "--records", "10", "--rounds", "1",
       "--no-warm-up", "--bootstrap-servers", kafka_bootstrap, "--out", "out", "--json",
       cwd=tmp_path, env=env)
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert result["runs"] == []
    for name in [*KS_SYSTEMS, "pyflink-exactly-once"]:
        assert "Java 17+ not found on PATH" in result["skipped"][name]
        assert name in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(900)
def test_kafka_streams_is_verified_on_every_workload(kafka_bootstrap, tmp_path):
    from test_cli import ok

    # the first run on a machine builds the peer into its cache (Maven Central)
    workloads = ["wordcount", "pageviews", "passthrough", "aggregate", "enrich"]
    ok("bench", "--measures", "throughput", "--workloads", ",".join(workloads),
       "--systems", ",".join(KS_SYSTEMS), "--records", "300", "--rounds", "1", "--no-warm-up",
       "--commit-interval", "0.5", "--idle-timeout", "60", "--bootstrap-servers",
       kafka_bootstrap, "--out", "out", "--json", cwd=tmp_path, timeout=800)
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert not result["skipped"], result["skipped"]
    assert {(r["workload"], r["system"]) for r in result["runs"]} == \
        {(w, s) for w in workloads for s in KS_SYSTEMS}
    for r in result["runs"]:
        assert r["verified"], (r["system"], r["workload"], r.get("error"))
        assert r["lost"] == 0 and r["unexpected"] == 0 and r["duplicated"] == 0
    assert result["versions"]["kafka-streams (Kafka Streams peer)"] == "4.1.1"


def test_the_kafka_streams_target_compares_the_peer_at_the_benchs_commit_interval():
    from eos_runtime.bench.targets import judge

    from test_bench import _bench_result

    target = "exactly-once ≥ Kafka Streams exactly-once at the same commit interval"
    result = _bench_result({"eos-exactly-once": [90.0, 45.0],
                            "kafka-streams-exactly-once-100ms": [300.0, 150.0],
                            "kafka-streams-exactly-once-1s": [100.0, 50.0]})
    got = {r["target"]: r for r in judge(result)}[target]
    assert got["met"] is False and got["value"] == 0.9   # against the 1 s peer, per round
    result["settings"]["commit_interval"] = 0.1
    assert {r["target"]: r for r in judge(result)}[target]["value"] == 0.3
    result["settings"]["commit_interval"] = 0.5
    got = {r["target"]: r for r in judge(result)}[target]
    assert got["met"] is None and "neither of the Kafka Streams peer's" in got["measured"]


def test_the_short_interval_target_compares_exactly_once_at_100_ms_with_itself_at_1_s():
    """One bench at --commit-interval 0.1 runs eos-exactly-once-1s beside it, round by round."""
    from eos_runtime.bench.lineup import all_systems
    from eos_runtime.bench.targets import judge

    from test_bench import _bench_result

    assert all_systems()["eos-exactly-once-1s"].commit_interval == 1.0
    target = "exactly-once at a 100 ms commit interval ≥ 0.9 × at 1 s"
    result = _bench_result({"eos-exactly-once": [85.0, 46.0],
                            "eos-exactly-once-1s": [100.0, 50.0]})
    result["settings"]["commit_interval"] = 0.1
    got = {r["target"]: r for r in judge(result)}[target]
    assert got["value"] == pytest.approx(0.885) and got["met"] is False   # per round: .85, .92
    result = _bench_result({"eos-exactly-once": [90.0, 46.0],
                            "eos-exactly-once-1s": [100.0, 50.0]})
    result["settings"]["commit_interval"] = 0.1
    assert {r["target"]: r for r in judge(result)}[target]["met"] is True
    result["settings"]["commit_interval"] = 1.0
    got = {r["target"]: r for r in judge(result)}[target]
    assert got["met"] is None and "not 0.1" in got["measured"]


def test_the_kafka_streams_latency_target_compares_the_peer_at_the_benchs_commit_interval():
    from eos_runtime.bench.targets import judge

    from test_bench import _bench_result

    target = "exactly-once p99 latency ≤ Kafka Streams exactly-once's at the same commit " \
             "interval and load"
    base = {"workload": "wordcount", "round": 1, "error": None, "verified": True,
            "measure": "latency", "rate": 4_000}
    lat = [{**base, "system": s, "guarantee": "exactly-once",
            "latency_ms": {"p50": p99 / 2, "p99": p99, "cdf": []}}
           for s, p99 in (("eos-exactly-once", 180), ("kafka-streams-exactly-once-100ms", 200),
                          ("kafka-streams-exactly-once-1s", 150))]
    result = _bench_result({}, runs=lat)
    result["settings"]["commit_interval"] = 0.1
    got = {r["target"]: r for r in judge(result)}[target]
    assert got["met"] is True and got["value"] == 0.9 and "4,000" in got["note"]
    result["settings"]["commit_interval"] = 1.0   # against the 1 s peer: 180 > 150
    got = {r["target"]: r for r in judge(result)}[target]
    assert got["met"] is False and got["value"] == 1.2
    result["settings"]["commit_interval"] = 0.5
    assert {r["target"]: r for r in judge(result)}[target]["met"] is None


# ------------------------------------------------------------------ Python peers

def _without_pypi(monkeypatch, tmp_path: Path, system: str) -> str:
    """Why ``system`` is unavailable with an empty cache and an index nothing listens on."""
    from eos_runtime.bench.lineup import all_systems

    monkeypatch.setenv("EOS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    why = all_systems()[system].unavailable()
    assert why is not None, system
    return why


def _verified_bench(kafka_bootstrap, tmp_path: Path, system: str, workloads: list[str],
                    timeout: float) -> dict:
    """A 300-record round of ``system`` on each of ``workloads``; every run it made must
    match the oracle exactly. The first run on a machine installs the peer."""
    from test_cli import ok

    ok("bench", "--measures", "throughput", "--workloads", ",".join(workloads),
       "--systems", system, "--records", "300", "--rounds", "1", "--no-warm-up",
       "--commit-interval", "0.5", "--idle-timeout", "60", "--bootstrap-servers",
       kafka_bootstrap, "--out", "out", "--json", cwd=tmp_path, timeout=timeout)
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    for r in result["runs"]:
        assert r["verified"], (r["workload"], r.get("error"))
        assert r["lost"] == 0 and r["unexpected"] == 0 and r["duplicated"] == 0
    return result


# ------------------------------------------------------------------ faust-streaming

def test_faust_not_installable_says_why(monkeypatch, tmp_path):
    """No PyPI: the peer is skipped, pip's failure named, and no half venv is taken for a
    whole one next time."""
    from eos_runtime.bench.faust_peer import venv_dir

    why = _without_pypi(monkeypatch, tmp_path, "faust-exactly-once")
    assert why.startswith("faust-streaming could not be installed: "), why
    assert "installing faust-streaming" in why and "is PyPI reachable?" in why
    assert not (venv_dir() / ".eos-complete").exists()


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(900)
def test_faust_is_verified_on_the_workloads_it_is_written_for(kafka_bootstrap, tmp_path):
    result = _verified_bench(kafka_bootstrap, tmp_path, "faust-exactly-once",
                             ["wordcount", "pageviews", "passthrough", "aggregate"], 800)
    assert "not written for faust" in result["skipped"]["faust-exactly-once on pageviews"]
    assert {r["workload"] for r in result["runs"]} == {"wordcount", "passthrough", "aggregate"}
    assert result["versions"]["faust-streaming (faust peer)"] == "0.15.3"


# ------------------------------------------------------------------ PyFlink

PYFLINK = "pyflink-exactly-once"


def test_without_java_the_pyflink_peer_says_to_install_a_jdk(monkeypatch, tmp_path):
    """PyFlink runs Flink in a JVM it starts: without one the peer is skipped with what to
    install, before anything is downloaded."""
    from eos_runtime.bench.lineup import all_systems

    monkeypatch.setenv("PATH", _path_with(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("EOS_CACHE_DIR", str(tmp_path / "cache"))
    why = all_systems()[PYFLINK].unavailable()
    assert why is not None and why.startswith("PyFlink could not be set up: "), why
    assert "Java 17+ not found on PATH" in why and "openjdk-17" in why
    assert not (tmp_path / "cache").exists(), "nothing fetched"


def test_pyflink_not_installable_says_why(monkeypatch, tmp_path):
    """No PyPI: the peer is skipped, pip's failure named, no half venv taken for a whole one
    next time, and no connector fetched for nothing."""
    from eos_runtime.bench.peer_venv import venv_dir
    from eos_runtime.bench.pyflink_peer import FLINK_VERSION, connector_jar

    if shutil.which("java") is None or shutil.which("mvn") is None:
        pytest.skip("this machine has no java or mvn: the peer stops before pip")
    why = _without_pypi(monkeypatch, tmp_path, PYFLINK)
    assert why.startswith("PyFlink could not be set up: "), why
    assert f"installing apache-flink {FLINK_VERSION}" in why and "is PyPI reachable?" in why
    assert not (venv_dir("apache-flink", FLINK_VERSION) / ".eos-complete").exists()
    assert not connector_jar().exists()


def test_pyflink_checkpoints_into_files_not_the_jobmanagers_memory(monkeypatch, tmp_path):
    """Flink's default checkpoint storage holds at most 5 MiB of state a task: at 10^6 keys
    every checkpoint of the aggregate failed and its sink never committed again. The job
    asks for file checkpoints in the run's scratch directory. (PyFlink is not in this
    venv: its modules are stand-ins that record the configuration the job builds.)"""
    import sys
    import types
    from unittest import mock

    from eos_runtime.bench import pyflink_app

    settings: dict[str, str] = {}

    class Configuration:
        def set_string(self, key: str, value: str) -> None:
            settings[key] = value

    names = ["pyflink", "pyflink.common", "pyflink.common.serialization",
             "pyflink.datastream", "pyflink.datastream.connectors",
             "pyflink.datastream.connectors.kafka"]
    for name in names:
        module = types.ModuleType(name)
        module.__getattr__ = lambda attr: mock.MagicMock(name=attr)   # type: ignore[method-assign]
        monkeypatch.setitem(sys.modules, name, module)
    sys.modules["pyflink.common"].Configuration = Configuration   # type: ignore[attr-defined]
    monkeypatch.setattr(pyflink_app, "_functions", lambda: mock.MagicMock())
    args = pyflink_app.argparse.Namespace(
        workload="aggregate", bootstrap_servers="b", name="run", source="s", sink="t",
        parallelism=2, checkpoint_interval_ms=1000, checkpoint_dir=str(tmp_path / "cp"),
        connector=str(tmp_path / "connector.jar"))
    pyflink_app._job(args, 8081)
    assert settings["execution.checkpointing.storage"] == "filesystem"
    assert settings["execution.checkpointing.dir"] == (tmp_path / "cp").as_uri()


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(1200)
def test_pyflink_is_verified_on_the_workloads_it_is_written_for(kafka_bootstrap, tmp_path):
    # a PyFlink job takes 30-60 s to start on a busy 2-core machine
    result = _verified_bench(kafka_bootstrap, tmp_path, PYFLINK,
                             ["wordcount", "pageviews", "aggregate", "passthrough"], 1100)
    assert "not written for PyFlink" in result["skipped"][f"{PYFLINK} on passthrough"]
    assert {r["workload"] for r in result["runs"]} == {"wordcount", "pageviews", "aggregate"}
    assert result["versions"]["apache-flink (PyFlink peer)"] == "2.2.1"
    assert result["versions"]["flink-sql-connector-kafka (PyFlink peer)"] == "5.0.0-2.2"


# Issue 26: exactly-once ≥ 2 × each Python peer's exactly-once, on the median of the
# per-round ratios (the faust row came later: the report had not even computed its ratio).
@pytest.mark.parametrize("peer,target,theirs,met,ratio", [
    (PYFLINK, "exactly-once ≥ 2 × PyFlink exactly-once", [50.0, 20.0, 50.0],
     False, 1.8),    # the median of 1.8, 2.25 and 1.6
    ("faust-exactly-once", "exactly-once ≥ 2 × faust-streaming exactly-once",
     [40.0, 20.0, 50.0], True, 2.25),   # the median of 2.25, 2.25 and 1.6
])
def test_a_python_peer_s_target_asks_for_twice_its_throughput(peer, target, theirs, met,
                                                                ratio):
    from eos_runtime.bench.targets import judge

    from test_bench import _bench_result

    result = _bench_result({"eos-exactly-once": [90.0, 45.0, 80.0], peer: theirs})
    got = {r["target"]: r for r in judge(result)}[target]
    assert got["met"] is met and got["value"] == ratio
    result = _bench_result({"eos-exactly-once": [90.0, 45.0]})
    assert {r["target"]: r for r in judge(result)}[target]["met"] is None


# Issue 26: exactly-once's CPU per result ≤ 1.2 × the raw dataflow's, on wordcount,
# pageviews and aggregate alike: each the median of its rounds' ratios, since a slow round
# slows both systems of it (CPU µs per result; lower is better).
def test_the_cpu_target_compares_exactly_once_with_the_raw_dataflow_per_workload_by_round():
    from eos_runtime.bench.report import summarize
    from eos_runtime.bench.targets import judge

    from test_bench import _bench_result

    def runs(workload: str, unit: str, eo: list[float], raw: list[float]) -> list[dict]:
        return [{"workload": workload, "unit": unit, "round": n, "system": system,
                 "guarantee": system, "verified": True, "throughput": 100.0,
                 "measure": "throughput", "results_expected": 1_000_000,
                 "cpu_seconds": cpu}      # 1 s of CPU for 10^6 results: 1 µs a result
                for system, cpus in (("eos-exactly-once", eo), ("raw-kafka", raw))
                for n, cpu in enumerate(cpus, 1)]

    every = (runs("wordcount", "words", [6.0, 11.0, 5.6], [4.0, 10.0, 4.0])      # 1.5, 1.1, 1.4
             + runs("pageviews", "views", [4.0, 13.0, 6.0], [4.0, 10.0, 5.0])    # 1.0, 1.3, 1.2
             + runs("aggregate", "events", [5.0, 5.0, 5.0], []))                 # no raw run
    result = _bench_result({}, runs=every)
    result["summary"] = summarize(every, skipped={})
    got = {r["target"]: r for r in judge(result)}
    wordcount = got["exactly-once CPU per result ≤ 1.2 × the raw dataflow's (wordcount)"]
    assert wordcount["met"] is False and wordcount["value"] == 1.4
    assert "range 1.10 – 1.50, 3 rounds" in wordcount["measured"]
    pageviews = got["exactly-once CPU per result ≤ 1.2 × the raw dataflow's (pageviews)"]
    assert pageviews["met"] is True and pageviews["value"] == 1.2   # at most 1.2: met
    aggregate = got["exactly-once CPU per result ≤ 1.2 × the raw dataflow's (aggregate)"]
    assert aggregate["met"] is None and aggregate["measured"].startswith("not measured")
    # A round whose CPU was not sampled (no /proc) pairs with nothing.
    for r in every:
        if r["workload"] == "wordcount" and r["round"] == 3:
            r["cpu_seconds"] = None
    result["summary"] = summarize(every, skipped={})
    wordcount = {r["target"]: r for r in judge(result)}[
        "exactly-once CPU per result ≤ 1.2 × the raw dataflow's (wordcount)"]
    assert wordcount["value"] == 1.3 and "2 rounds" in wordcount["measured"]   # 1.5, 1.1


def test_faust_and_pyflink_wait_600_s_for_new_output_unless_told_otherwise() -> None:
    """Their output stands still for over a minute at a time at 10⁵ keys: at the bench's
    60 s their runs failed (docs/benchmarks.md); a given --idle-timeout stands for all."""
    from eos_runtime.bench.measure import Settings, idle_timeout_of
    from eos_runtime.bench.peers import FaustSystem, PyFlinkSystem
    from eos_runtime.bench.systems import RawSystem

    default = Settings(bootstrap="127.0.0.1:9")
    assert idle_timeout_of(FaustSystem(), default) == 600.0
    assert idle_timeout_of(PyFlinkSystem(), default) == 600.0
    assert idle_timeout_of(RawSystem(), default) == 60.0
    given = Settings(bootstrap="127.0.0.1:9", idle_timeout=5.0)
    assert idle_timeout_of(FaustSystem(), given) == idle_timeout_of(RawSystem(), given) == 5.0
