"""A broker outage in the middle of a run, on a real broker of the test's own: SIGKILLed
(its pid from the run dir's state file) once the run has made progress, and restarted on
the same ports a few seconds later. The run rides through it and its committed output is
exactly the oracle's; an outage longer than the budget fails the run with one line that
names the broker and how long it was gone.

The kill is triggered by observed progress (the sources' first checkpoints, seen by the
driver's progress callback, as ``eos run`` watches a run), never by a sleep. The runs are
unbounded, so the kill cannot come after the run ended: a bounded run's sources, once
faster than the machine's start of the sink tasks, had committed all their input before
the trigger (CI, 2026-11-29). The run that rides through is stopped once the broker is
back and every line is committed."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

from eos_runtime.broker import KafkaBroker, find_running, free_port, stop_running
from eos_runtime.errors import OutageBudgetExceeded
from eos_runtime.joblog.committed import read_output
from eos_runtime.runner import load_pipeline, start_pipeline, watch_run
from eos_runtime.transport import open_transport

from pipeline_oracles import check_wordcount_exactly_once, encode_lines, produce, word_lines

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(900)]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _ports() -> tuple[int, int]:
    """The broker's ports: fixed for its restart. ``EOS_TEST_OUTAGE_PORTS=P,C`` picks
    them (a shared machine may reserve some); else two free ones."""
    env = os.environ.get("EOS_TEST_OUTAGE_PORTS", "").strip()
    if env:
        port, cport = (int(p) for p in env.split(","))
        return port, cport
    port = free_port()
    return port, free_port(avoid=(port,))


@pytest.fixture
def broker(tmp_path):
    port, cport = _ports()
    run_dir = tmp_path / "kafka"
    b = KafkaBroker(run_dir, port=port, controller_port=cport, die_with_parent=True)
    b.start()
    holder = {"broker": b}
    yield holder
    # First by its state file: a broker an experiment restarted is no object of this test's
    # (and a stop of the old object would clean the run dir under the running one).
    stop_running(run_dir)
    holder["broker"].stop()


def _kill(run_dir: Path, sig: int = signal.SIGKILL) -> None:
    """Signal the broker found in its run dir's state file (SIGKILL, or SIGTERM: a
    controlled shutdown), and wait until it is gone."""
    state = find_running(run_dir)
    assert state is not None, "no running broker in its run dir"
    os.kill(state.pid, sig)
    # A controlled shutdown on a very busy machine was seen to hang for 15 minutes with
    # its listener already closed; as an init system would, SIGKILL follows a SIGTERM
    # that has not ended the broker in 30 s (the outage is the same to the run).
    escalate = time.monotonic() + 30 if sig != signal.SIGKILL else None
    deadline = time.monotonic() + 90
    while find_running(run_dir) is not None:
        assert time.monotonic() < deadline, "the broker survived SIGKILL"
        if escalate is not None and time.monotonic() >= escalate:
            os.kill(state.pid, signal.SIGKILL)
            escalate = None
        time.sleep(0.05)


def _restart(old: KafkaBroker) -> KafkaBroker:
    """The same broker again: its run dir (data kept), the same two ports. Not
    ``die_with_parent``: the kernel's parent-death signal follows the *thread* that
    started the JVM, and the outage thread ends at once (the fixture stops it)."""
    b = KafkaBroker(old.run_dir, port=old.state.port if old.state else old.port,
                    controller_port=old.state.controller_port if old.state else None)
    b.start()
    return b


def _wordcount(tag: str, bootstrap: str, lines: list[str]):
    suffix = f"{tag}-{uuid.uuid4().hex[:6]}"
    pipeline = load_pipeline(EXAMPLES / "wordcount.py")
    pipeline.rename(f"{pipeline.name}-{suffix}", source=f"{pipeline.source_topic}-{suffix}",
                    sink=f"{pipeline.sink_topic}-{suffix}")
    with open_transport(bootstrap_servers=bootstrap) as t:
        produce(t, pipeline.source_topic, encode_lines(lines))
    return pipeline


class Outage:
    """Kills the broker once every source task has committed a checkpoint, as seen in the
    run's progress (``watch_run``'s ``on_progress``, as ``eos run`` watches), while the
    driver goes on watching; then, with ``down`` seconds, starts it again."""

    def __init__(self, holder: dict, down: float | None, sig: int = signal.SIGKILL) -> None:
        self.holder = holder
        self.down = down
        self.sig = sig
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.unfinished: dict | None = None       # the progress when the kill came
        self.killed = threading.Event()
        self.killed_at = 0.0                      # time.monotonic() once the broker was gone
        self.restarted = threading.Event()

    def on_progress(self, p: dict) -> None:
        # The sources' first checkpoints, not the sink's: a source commits every 2 000 of
        # its 30 000 lines, so the kill comes with most input left however slow the
        # machine. Waiting for the sink let a busy machine's sources finish first.
        source, sink = p["stages"][0], p["stages"][-1]
        if (self.thread is None and sink["reporting"] == sink["tasks"]
                and source["checkpoints"] >= source["tasks"]):
            self.unfinished = p
            self.thread = threading.Thread(target=self._outage, daemon=True)
            self.thread.start()

    def _outage(self) -> None:
        try:
            old: KafkaBroker = self.holder["broker"]
            _kill(old.run_dir, self.sig)
            self.killed_at = time.monotonic()
            self.killed.set()
            if self.down is not None:
                time.sleep(self.down)   # how long does not matter, only that it is an outage
                self.holder["broker"] = _restart(old)
                self.restarted.set()
        except BaseException as exc:
            self.error = exc

    def check(self, *, restarted: bool) -> None:
        """The kill came in the middle of the run, and the restart happened."""
        if self.thread is not None:
            self.thread.join(120)
        assert self.error is None, f"the outage thread failed: {self.error!r}"
        assert self.killed.is_set(), "the broker was never killed: the run ended first"
        p = self.unfinished
        assert p is not None and not p["bounded"] and p["state"] == "running", p
        assert self.restarted.is_set() == restarted


# SIGTERM's ride-through is a long run (scripts/test-long), for the suite's time: the suite
# keeps SIGKILL's, the harder case, and eos experiment's broker fault (tested below)
@pytest.mark.parametrize("sig", [signal.SIGKILL,
                                 pytest.param(signal.SIGTERM, marks=pytest.mark.long)],
                         ids=["kill", "term"])
def test_a_run_rides_through_a_broker_killed_and_restarted(sig, broker, tmp_path):
    b: KafkaBroker = broker["broker"]
    lines = word_lines(60_000)
    pipeline = _wordcount("outage", b.bootstrap_servers, lines)
    # SIGTERM: the broker's controlled shutdown first leaves every partition without a
    # leader, which the driver's offset look-ups remembered past the restart (found by
    # eos experiment, fault broker with signal term).
    outage = Outage(broker, down=6, sig=sig)
    run = start_pipeline(pipeline, bootstrap_servers=b.bootstrap_servers, commit_every=2_000,
                         state_dir=str(tmp_path / "state"), outage_budget=120, bounded=False)

    def on_progress(p: dict) -> None:
        outage.on_progress(p)
        if outage.restarted.is_set() and p["input_committed"] >= len(lines):
            run.stop()   # once: a second request is not sent

    summary = watch_run(run, on_progress=on_progress)
    outage.check(restarted=True)
    assert summary.input_records == len(lines)
    with open_transport(bootstrap_servers=broker["broker"].bootstrap_servers) as t:
        check_wordcount_exactly_once(read_output(t, pipeline.sink_topic, job=pipeline.name),
                                     lines)


def test_an_outage_longer_than_the_budget_fails_the_run_naming_the_broker(broker, tmp_path,
                                                                         caplog):
    b: KafkaBroker = broker["broker"]
    bootstrap = b.bootstrap_servers
    lines = word_lines(60_000)
    pipeline = _wordcount("gone", bootstrap, lines)
    outage = Outage(broker, down=None)
    frames: list[dict] = []

    def on_progress(p: dict) -> None:
        frames.append(p)
        outage.on_progress(p)

    run = start_pipeline(pipeline, bootstrap_servers=bootstrap, commit_every=2_000,
                         state_dir=str(tmp_path / "state"), outage_budget=12, bounded=False)
    with pytest.raises(OutageBudgetExceeded) as info:
        watch_run(run, on_progress=on_progress)
    failed_at = time.monotonic()
    outage.check(restarted=False)
    line = str(info.value)
    assert "\n" not in line
    assert f"Kafka at {bootstrap} was unreachable for " in line
    assert "longer than the outage budget of 12 s" in line
    # Issue 27 item 11: the progress said how long the broker was gone while it was ...
    gone = [p["outage_seconds"] for p in frames if p.get("outage_seconds")]
    assert gone and gone == sorted(gone), gone
    # ... the error states the outage's true length when it comes (it said 16 s of 32:
    # the driver then waited for a lease renewal stuck in the outage), ...
    said = int(line.split("was unreachable for ")[1].split(" s,")[0])
    lasted = failed_at - outage.killed_at
    assert said >= lasted - 8, f"said {said} s, the broker had been gone {lasted:.0f} s"
    # ... and no lease warning came before it (a renewal failing in the outage is the
    # outage, which the run reports).
    lease = [r.getMessage() for r in caplog.records if "lease" in r.getMessage()
             and r.levelno >= logging.WARNING and "released" not in r.getMessage()]
    assert not lease, lease


# ------------------------------------------------------------ eos experiment, fault broker

def test_an_experiment_stops_and_restarts_the_broker_and_the_run_passes(broker, tmp_path):
    import json

    from test_cli import here

    b: KafkaBroker = broker["broker"]
    schedule = tmp_path / "broker.toml"
    schedule.write_text('[[fault]]\nkind = "broker"\nafter = 0.5\ndown = 2.0\n'
                        'signal = "kill"\n')
    report = tmp_path / "report"
    # A soak, fed for 10 s from before Spark starts: a bounded run of a few thousand
    # lines could end within the fault's half second on a fast machine, and the outage
    # would never start.
    p = here("experiment", "wordcount", "--schedule", str(schedule), "--seed", "4",
             "--duration", "10s", "--rate", "300", "--bootstrap-servers", b.bootstrap_servers,
             "--broker-dir", str(b.run_dir), "--report", str(report), "--json",
             cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    run = json.loads((report / "seed-4" / "run.json").read_text())
    assert run["passed"], run["verdict"]
    (fault,) = run["faults"]
    assert fault["kind"] == "broker" and fault["fired"], fault
    assert fault.get("error") is None, fault
    assert fault["back"] > fault["gone"] >= fault["time"], fault
    assert find_running(b.run_dir) is not None, "the broker is not back after the experiment"


def test_broker_faults_refuse_a_run_dir_without_the_broker_of_the_run(kafka_bootstrap,
                                                                        tmp_path):
    # refused before anything runs: the session's broker serves, none of its own is started
    from test_cli import eos, error_line

    empty = tmp_path / "elsewhere"
    empty.mkdir()
    p = eos("experiment", "wordcount", "--kinds", "crash,broker", "--bootstrap-servers",
            kafka_bootstrap, "--broker-dir", str(empty), "--report", str(tmp_path / "r"),
            cwd=tmp_path)
    assert error_line(p).startswith(
        f"error: fault kind 'broker' stops and restarts the project's own broker, and none "
        f"runs from '{empty}'")
    assert not (tmp_path / "r").exists()
