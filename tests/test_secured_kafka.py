"""Secured Kafka as a user meets it (issue 11, item 11): the project's own broker started
with a SASL/PLAIN listener (`eos kafka up --sasl-plain`), a whole job run on it with the
settings from a properties file, -X and a pipeline's kafka_config, and the password
nowhere in what any command printed, the control topic or the tasks' files; a wrong
password is one clear line. Real processes, the real broker, real Spark."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from eos_runtime.broker import free_port, stop_running

from test_cli import WORDCOUNT, eos, error_line, ok

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

USER = "alice"
PASSWORD = "pw-Zq8k2-secured-kafka"       # long and odd: found only where it leaked
WRONG = "pw-not-alices-9x7"


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    """(SASL address, output of `eos kafka up`): a broker of its own, stopped at the end."""
    run_dir = tmp_path_factory.mktemp("kafka-sasl")
    try:
        up = ok("kafka", "up", "--dir", str(run_dir), "--port", str(free_port()),
                "--sasl-plain", f"{USER}:{PASSWORD}", timeout=240)
        state = json.loads((run_dir / "state.json").read_text())
        assert up.stdout.strip() == f"127.0.0.1:{state['sasl_port']}"
        yield up.stdout.strip(), up.stdout + up.stderr
    finally:
        stop_running(run_dir)


def settings_file(tmp_path: Path, password: str | None = None) -> Path:
    f = tmp_path / "client.properties"
    lines = ["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=PLAIN",
             f"sasl.username={USER}"] + ([f"sasl.password={password}"] if password else [])
    f.write_text("\n".join(lines) + "\n")
    return f


def test_a_job_runs_on_a_sasl_broker_and_the_password_shows_nowhere(sasl_broker, tmp_path):
    servers, up_output = sasl_broker
    conf = settings_file(tmp_path)           # no password in the file: -X gives it
    kafka = ["--bootstrap-servers", servers, "--kafka-config", str(conf),
             "-X", f"sasl.password={PASSWORD}"]
    state = tmp_path / "state"
    said = [up_output]

    def run(*args: str) -> str:
        p = ok(*args, timeout=300)
        said.append(p.stdout + p.stderr)
        return p.stdout

    run("produce", "lines", "--generate", "words", "--count", "300", *kafka)
    summary = json.loads(run("run", WORDCOUNT, *kafka, "--state-dir", str(state), "--json"))
    assert summary["input_records"] == 300 and summary["transport"] == "kafka"
    run("run", WORDCOUNT, *kafka, "--state-dir", str(state))       # the human summary too
    counts = run("consume", "counts", *kafka).splitlines()
    assert len(counts) == sum(len(line.split()) for line in
                              run("consume", "lines", "--all", *kafka).splitlines())
    control = run("consume", "wordcount.control", "--all", "--json", *kafka)
    assert json.loads(control)
    run("jobs", "--json", *kafka)
    run("topics", *kafka)
    stop = eos("stop", "wordcount", *kafka, timeout=300)    # over: no live run to stop
    said.append(stop.stdout + stop.stderr)
    assert "error: job 'wordcount' has no live run" in error_line(stop)

    # The same settings as a pipeline's kafka_config (the password from the environment),
    # under another job name: every task reaches the SASL listener with them.
    pipeline = tmp_path / "secured.py"
    pipeline.write_text(textwrap.dedent(f"""
        import os
        from eos_runtime import Pipeline

        pipeline = Pipeline("secured-wc", kafka_config={{
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "{USER}", "sasl.password": os.environ["TEST_KAFKA_PASSWORD"]}})

        def count(word, state):
            n = state.get("n", 0) + 1
            state.set("n", n)
            return str(n)

        (pipeline.source("lines").flat_map(str.split).key_by(lambda w: w)
            .map(count, stateful=True).sink("secured-counts", key="utf8"))
        """))
    p = ok("run", str(pipeline), "--bootstrap-servers", servers, "--state-dir", str(state),
           "--json", env={"TEST_KAFKA_PASSWORD": PASSWORD}, timeout=300)
    said.append(p.stdout + p.stderr)
    assert json.loads(p.stdout)["input_records"] == 300
    run("reset", "secured-wc", "--yes", *kafka, "--state-dir", str(state))

    for text in said:
        assert PASSWORD not in text
    for f in state.rglob("*"):                     # progress and pid files, stores
        if f.is_file():
            assert PASSWORD.encode() not in f.read_bytes(), f


@pytest.mark.parametrize("command", [
    ["topics"],
    ["produce", "lines", "--generate", "words", "--count", "10"],
    ["run", WORDCOUNT, "--json"],
], ids=["topics", "produce", "run-json"])
def test_a_wrong_password_is_one_line_naming_the_user(sasl_broker, tmp_path, command):
    servers, _ = sasl_broker
    extra = ["--state-dir", str(tmp_path / "state")] if command[0] == "run" else []
    p = eos(*command, *extra, "--bootstrap-servers", servers,
            "--kafka-config", str(settings_file(tmp_path, WRONG)), timeout=120)
    line = error_line(p)
    assert line.startswith(f"error: Kafka at {servers} refused the credentials of user "
                           f"'{USER}' (SASL PLAIN authentication failed"), line
    assert WRONG not in p.stdout + p.stderr and "Traceback" not in p.stderr
    if "--json" in command:
        err = json.loads(p.stdout)
        assert err["ok"] is False and err["type"] == "AuthenticationFailed"


def test_without_sasl_settings_the_error_names_the_protocol(sasl_broker):
    servers, _ = sasl_broker
    line = error_line(eos("topics", "--bootstrap-servers", servers, timeout=120))
    assert f"cannot reach Kafka at {servers}" in line and "PLAINTEXT" in line
