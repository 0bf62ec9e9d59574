"""``eos experiment``: run a workload under faults, verify its output, report (docs/experiments.md).

    eos experiment wordcount --seed 7 --faults 3
    eos experiment pageviews --runs 10 --kinds crash,kill,lose-state
    eos experiment my_pipeline.py --schedule faults.toml

Everything the user can get wrong is checked before the first run starts: the workload,
the schedule (each field), the fault kinds against the transport and the guarantee, the
target tasks against the job's plan, the report and data directories.
"""

from __future__ import annotations

import random
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import click

from ..broker import default_run_dir, find_running
from ..errors import ConfigError
from ..limits import option as in_range
from ..redact import MASK, is_secret, redact
from ..runner import check_writable_dir
from ..transport import open_transport
from .options import (
    env_default,
    kafka_client_config,
    kafka_settings_options,
    n_of,
    stdout_to_stderr,
)

# `eos experiment` imports the experiments (experiments.*: workloads, schedules, runs, the
# report) when it runs: `eos --help` and the other commands start without them (0.1 s).

#: Change-log offsets before a task's first snapshot in an experiment (recovery C8).
EXPERIMENT_SNAPSHOT_RECORDS = 4

__all__ = ["experiment_cmd"]


def _report_dir(path: str | None, workload: str) -> Path:
    from ..experiments.report import REPORT_MARKER

    if path is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = Path(workload).stem if workload.endswith(".py") else workload
        path = f".eos/experiments/{name}-{stamp}"
    d = Path(path).absolute()
    if d.exists() and not d.is_dir():
        raise ConfigError(f"report directory {str(d)!r} is not a directory; choose another "
                          f"with --report")
    if d.is_dir() and any(d.iterdir()) and not (d / REPORT_MARKER).is_file():
        raise ConfigError(f"report directory {str(d)!r} is not empty and was not made by eos "
                          f"experiment; give a new or empty --report")
    check_writable_dir(d, "report directory", "--report")
    return d


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """``--duration``: seconds, or a number with s, m or h (``90``, ``30s``, ``10m``, ``1.5h``)."""
    t = text.strip().lower()
    unit = _UNITS.get(t[-1:], None)
    number = t[:-1] if unit is not None else t
    try:
        seconds = float(number) * (unit or 1.0)
    except ValueError:
        raise ConfigError(f"--duration: {text!r} is not a duration: give seconds or a number "
                          f"with s, m or h (30s, 10m)") from None
    if not 0 < seconds < float("inf"):
        raise ConfigError(f"--duration: must be more than 0 seconds, not {text!r}")
    return seconds


def soak_faults(duration: float) -> int:
    """A soak's faults when --faults is not given: one about every SOAK_EVERY seconds."""
    return max(1, round(duration / SOAK_EVERY))


SOAK_EVERY = 15.0


def _kinds(text: str | None, transport: str, guarantee: str) -> list[str]:
    from ..experiments.schedule import check_kinds, kinds_for

    if text is None:
        return list(kinds_for(transport, guarantee))
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    if not kinds:
        raise ConfigError("--kinds: give at least one fault kind (comma-separated)")
    check_kinds(kinds, transport, guarantee)
    return list(dict.fromkeys(kinds))


def _kafka_args() -> list[str]:
    """The Kafka settings options of this command, for its replay line; secrets masked."""
    meta = click.get_current_context().meta
    args = []
    if meta.get("eos.kafka_config") is not None:
        args += ["--kafka-config", str(Path(meta["eos.kafka_config"]).absolute())]
    for pair in meta.get("eos.kafka_setting") or ():
        key = pair.partition("=")[0]
        args += ["-X", f"{key}={MASK}" if is_secret(key) else pair]
    return args


def _broker_run_dir(given: str | None, bootstrap_servers: str) -> Path:
    """The run dir of the broker that broker faults stop: the project's own broker, the
    one at ``bootstrap_servers`` (never another one on this machine)."""
    run_dir = Path(given).absolute() if given else default_run_dir()
    state = find_running(run_dir)
    if state is None:
        raise ConfigError(f"fault kind 'broker' stops and restarts the project's own broker, "
                          f"and none runs from {str(run_dir)!r}: start it with `eos kafka up`, "
                          f"or name its run dir with --broker-dir")
    port = f":{state.port}"
    if not any(s.strip().endswith(port) for s in bootstrap_servers.split(",")):
        raise ConfigError(f"the broker running from {str(run_dir)!r} is at "
                          f"{state.bootstrap_servers}, not at {bootstrap_servers}: broker faults "
                          f"would stop another broker than the run's; give the run dir of the "
                          f"one at {bootstrap_servers} with --broker-dir")
    return run_dir


@click.command("experiment")
@click.argument("workload", metavar="WORKLOAD")
@click.option("--guarantee", type=click.Choice(["exactly-once", "at-least-once"]),
              default="exactly-once", show_default=True, help="Processing guarantee of the job.")
@click.option("--seed", type=click.IntRange(0), default=None, metavar="S",
              help="Seed of the input and of a random schedule (the first of --runs seeds). "
                   "Default: a random one, printed.")
@click.option("--faults", "n_faults", type=in_range("faults"), default=None, metavar="N",
              help="Faults per run in a random schedule. Default: 3; a soak: one per 15 s "
                   "of --duration.")
@click.option("--kinds", default=None, metavar="K1,K2",
              help="Fault kinds a random schedule draws from: crash, torn, lose-state, zombie, "
                   "kill, buffer, lag, broker; an operator's actions startpoint, checkpoint, "
                   "reset, start, stop, cancel, take-over, append (several runs of the job); "
                   "clock. Default: every kind the transport and guarantee can do but broker, "
                   "the operator's and clock, which are drawn only when named.")
@click.option("--schedule", "schedule_file", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", help="An explicit schedule (TOML or JSON) instead of a random one.")
@click.option("--runs", type=in_range("runs"), default=1, show_default=True, metavar="N",
              help="Runs, with seeds S, S+1, ..., S+N-1; a table at the end.")
@click.option("--lines", type=in_range("lines"), default=None, metavar="N",
              help="Input records generated per run (a bounded run). Default: 10000.")
@click.option("--duration", "duration_text", default=None, metavar="TIME",
              help="A soak: an unbounded run this long (seconds, or 30s, 10m, 1h), fed by "
                   "the generator at --rate all along, faults spread over it (default: one "
                   "every ~15 s), then a graceful stop and the verification of every record "
                   "fed.")
@click.option("--rate", type=in_range("rate"), default=None, metavar="N",
              help="A soak's input records per second. Default: 100.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Where the runs' local logs go (each run in a new directory of its own, "
                   "removed when the run passed). Default: <report>/data.")
@click.option("--keep-data", is_flag=True,
              help="Keep every run's local log and task state, and on Kafka the topics it "
                   "made (default: only failing runs').")
@click.option("--bootstrap-servers", default=None, metavar="HOST:PORT",
              help="Run on this Kafka broker instead of the local log.")
@click.option("--broker-dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Run dir of the project's broker (eos kafka up --dir) that broker faults "
                   "stop and restart; it must be the broker at --bootstrap-servers. Default: "
                   "eos kafka up's ($EOS_KAFKA_DIR, else .eos/kafka).")
@click.option("--report", "report", type=click.Path(file_okay=False), default=None,
              metavar="DIR", help="Where the report goes. Default: "
                                  ".eos/experiments/<workload>-<time>.")
@kafka_settings_options
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as JSON on stdout, and nothing else there.")
def experiment_cmd(workload: str, guarantee: str, seed: int | None, n_faults: int | None,
                   kinds: str | None, schedule_file: str | None, runs: int, lines: int | None,
                   duration_text: str | None, rate: float | None,
                   data_dir: str | None, keep_data: bool, bootstrap_servers: str | None,
                   broker_dir: str | None, report: str | None, as_json: bool) -> None:
    """Run WORKLOAD under injected faults and verify its committed output.

    WORKLOAD is wordcount, pageviews, or a pipeline file that defines generate(seed, n)
    and oracle(records) beside its pipeline. Each run generates its input from its seed,
    runs the job on Spark while the schedule's faults fire, reads the committed output
    as a reader would and counts lost, duplicated, unexpected and out-of-order results
    against the oracle. Exit code 0 if every run passed, 1 otherwise; a failing run
    prints the command that replays it.
    """
    from ..experiments.injector import zombie_linger
    from ..experiments.random_schedule import random_schedule
    from ..experiments.report import REPORT_MARKER, table_lines, write_run, write_summary
    from ..experiments.run import run_experiment
    from ..experiments.schedule import OPERATOR, check_schedule, load_schedule
    from ..experiments.setup import RunInterrupted, Settings, task_roles
    from ..experiments.workloads import check_refused, load_workload

    zombie_linger()   # a bad $EOS_ZOMBIE_LINGER fails before any input is written
    if data_dir is not None and bootstrap_servers:
        raise click.UsageError("give --bootstrap-servers (Kafka) or --data-dir (the local log), "
                               "not both")
    if schedule_file is not None and (n_faults is not None or kinds is not None):
        raise click.UsageError("--schedule replaces --faults and --kinds: give one or the other")
    if duration_text is not None and lines is not None:
        raise ConfigError("--lines sizes a bounded run; a soak (--duration) is fed at --rate "
                          "for its duration: give one or the other")
    if rate is not None and duration_text is None:
        raise ConfigError("--rate is a soak's: give --duration too")
    transport_name = "kafka" if bootstrap_servers else "local"
    duration = parse_duration(duration_text) if duration_text is not None else None
    lines = 10_000 if lines is None else lines
    rate = 100.0 if rate is None else rate

    # Everything a user can get wrong, before anything starts.
    w = load_workload(workload)
    fault_kinds = _kinds(kinds, transport_name, guarantee) if schedule_file is None else []
    roles = task_roles(w, guarantee)
    then_roles = task_roles(w, guarantee, then=True) if w.then is not None else None
    if w.then is not None and transport_name == "local":
        raise ConfigError(f"workload {w.name!r} needs Kafka (--bootstrap-servers): its second "
                          f"job reads the first's exactly-once sink, and the local log has no "
                          f"transactions to hide the first job's uncommitted output (eos run "
                          f"refuses such a source there)")
    if w.then is not None and (duration is not None
                               or any(k in OPERATOR for k in fault_kinds)):
        raise ConfigError(f"workload {w.name!r} runs each of its two jobs once, bounded: "
                          f"give --lines, and no operator's action")
    check_refused(w, fault_kinds, duration is not None)
    fixed = None
    if schedule_file is not None:
        fixed = load_schedule(schedule_file)
        check_schedule(fixed, roles, transport_name, guarantee, w.source_partitions,
                       then_roles)
        check_refused(w, [f.kind for f in fixed.faults], False)
        if duration is not None and fixed.multi_run():
            raise ConfigError(f"{fixed.source}: an operator's action runs the job several "
                              f"times, each a bounded run: give --lines, not --duration")
    if duration is not None and any(k in OPERATOR for k in fault_kinds):
        raise ConfigError("--kinds: an operator's action runs the job several times, each a "
                          "bounded run: give --lines, not --duration")
    count = n_faults if n_faults is not None else (
        3 if duration is None else soak_faults(duration))
    report_dir = _report_dir(report, workload)
    transport: dict[str, Any]
    client = kafka_client_config(bootstrap_servers)
    if bootstrap_servers:
        # one line if unreachable
        open_transport(bootstrap_servers=bootstrap_servers, **client).close()
        transport = {"bootstrap_servers": bootstrap_servers, **client}
    run_dir = None
    if "broker" in fault_kinds or (fixed is not None
                                   and any(f.kind == "broker" for f in fixed.faults)):
        assert bootstrap_servers   # the local log refused kind broker above
        run_dir = _broker_run_dir(broker_dir, bootstrap_servers)
    if not bootstrap_servers:
        root = Path(data_dir).absolute() if data_dir else report_dir / "data"
        check_writable_dir(root, "data directory", "--data-dir")
        transport = {"data_dir": str(root)}
    first = seed if seed is not None else random.randrange(1_000_000)

    # A pipeline file by its absolute path, as the schedule: the replay works from anywhere.
    named = workload if w.origin == "built in" else str(Path(workload).absolute())
    base = ["eos", "experiment", named, "--guarantee", guarantee]
    base += (["--lines", str(lines)] if duration is None
             else ["--duration", duration_text or "", "--rate", f"{rate:g}"])
    if fixed is not None:
        base += ["--schedule", str(Path(schedule_file or "").absolute())]
    else:
        base += ["--faults", str(count), "--kinds", ",".join(fault_kinds)]
    if bootstrap_servers:
        base += ["--bootstrap-servers", bootstrap_servers, *_kafka_args()]
    if run_dir is not None:
        base += ["--broker-dir", str(run_dir)]

    def replay(s: int) -> str:
        return shlex.join(base + ["--seed", str(s)])

    # As typed when it came from a command line; else what would have run it. Reports
    # keep it, so a secret given with -X reads ***.
    command = redact(shlex.join(base[:2] + sys.argv[2:]) if sys.argv[1:2] == ["experiment"]
                     else shlex.join(base + ["--seed", str(first), "--runs", str(runs)]))
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / REPORT_MARKER).write_text("made by eos experiment\n")
    settings = Settings(w, report_dir, transport, guarantee=guarantee, lines=lines,
                        replay=replay, keep_data=keep_data, broker_dir=run_dir,
                        duration=duration, rate=rate)

    show = _Progress(as_json, runs)
    results = []
    stopped: dict[str, Any] | None = None   # the run a Ctrl-C interrupted
    for i, s in enumerate(range(first, first + runs)):
        schedule = fixed if fixed is not None else random_schedule(
            s, count, fault_kinds, roles, transport_name, duration=duration,
            then_roles=then_roles)
        show.start(i, s, schedule)
        # Snapshots and cut change logs (recovery C7-C9) every few checkpoints, not every
        # 10 000 records: the faults must meet them. The driver reads it into each task's
        # config; the runs' child processes inherit it.
        try:
            with stdout_to_stderr(), env_default("EOS_CHANGELOG_SNAPSHOT_RECORDS",
                                                 str(EXPERIMENT_SNAPSHOT_RECORDS)):
                result = run_experiment(settings, s, schedule, on_progress=show.progress)
        except RunInterrupted as exc:   # the runs that finished are reported all the same
            stopped = {"run": i + 1, "of": runs, "seed": s, "kept_data": exc.kept_data,
                       "kept_topics": exc.kept_topics}
            break
        write_run(result, report_dir)
        results.append(result)
        show.done(result)
    show.close()
    summary = write_summary(results, report_dir, command=command, settings={
        "workload": w.name, "origin": w.origin, "guarantee": guarantee,
        "transport": "Kafka" if bootstrap_servers else "the local log",
        "lines": lines if duration is None else None,
        "soak": None if duration is None else {"duration": duration, "rate": rate},
        "seeds": [first, first + runs - 1], "faults": count if fixed is None else None,
        "kinds": fault_kinds or None, "schedule": schedule_file}, interrupted=stopped)
    failed = [r for r in results if not r.passed]
    if as_json:
        click.echo((report_dir / "summary.json").read_text(), nl=False)
    else:
        for line in table_lines(results):
            click.echo(line)
        click.echo(f"report: {summary}")
        for r in failed:
            why = r.error or ", ".join(r.verdict.reasons() if r.verdict else [])
            click.echo(f"seed {r.seed} failed ({why}); replay: {r.replay}")
    if stopped is not None:
        left = (f"its data is kept in {stopped['kept_data']}" if stopped["kept_data"]
                else "its data was removed")
        finished = n_of(len(results), "finished run")
        click.echo(f"error: interrupted during run {stopped['run']} of {runs} (seed "
                   f"{stopped['seed']}); {left}; the summary of the {finished} is in "
                   f"{summary}", err=True)
        sys.exit(130)
    if failed:
        seeds = ", ".join(str(r.seed) for r in failed)
        click.echo(f"error: {len(failed)} of {len(results)} runs failed "
                   f"(seed{'s' * (len(failed) > 1)} {seeds}); each replays with the command "
                   f"printed for it", err=True)
        sys.exit(1)


class _Progress:
    """A status line on a terminal (rich); otherwise a line per fault and per run."""

    def __init__(self, quiet: bool, runs: int) -> None:
        self.runs = runs
        self.live = None
        self.quiet = quiet
        self.index = 0
        self.next_line = 30.0
        if not quiet and sys.stderr.isatty():
            from rich.console import Console

            self.console = Console(stderr=True)
            self.live = self.console.status("eos experiment: starting")
            self.live.start()

    def _say(self, text: str) -> None:
        if self.live is not None:
            self.console.log(text)
        else:
            click.echo(text, err=True)

    def start(self, index: int, seed: int, schedule: Any) -> None:
        self.index = index
        self.next_line = 30.0
        faults = "; ".join(f.describe() for f in schedule.faults) or "no faults"
        self._say(f"run {index + 1}/{self.runs}, seed {seed}: {faults}")

    def progress(self, p: dict[str, Any]) -> None:
        for rec in p["events"]:
            # when it fired, as the report says, not when this sample noticed it
            at = rec["time"] if rec.get("time") is not None else p["seconds"]
            self._say(f"  {at:6.2f} s  fault: {rec['describe']}")
        if self.live is None and not self.quiet and p.get("duration") is not None \
                and p["seconds"] >= self.next_line:
            # a soak runs for minutes: a line now and then shows it is alive
            self.next_line = p["seconds"] + 30.0
            click.echo(f"  {p['seconds']:6.1f} s  soak {p['phase']}: {p['fed']:,} fed, "
                       f"{p['input_committed']:,} committed, {p['sink_records']:,} sink records",
                       err=True)
        if self.live is not None:
            soak = ""
            if p.get("duration") is not None:
                doing = {"feed": "feeding", "drain": "draining", "stop": "stopping"}[p["phase"]]
                soak = (f"soak {doing} {min(p['seconds'], p['duration']):.0f}/"
                        f"{p['duration']:.0f} s, {p['fed']:,} fed, {p['input_committed']:,} "
                        f"committed, ")
            self.live.update(
                f"run {self.index + 1}/{self.runs}, seed {p['seed']}: {soak}{p['seconds']:.0f} s, "
                f"{p['sink_records']:,} sink records, tasks {p['tasks_running']} running / "
                f"{p['tasks_finished']} done, {p['failed_attempts']} failed attempts, faults "
                f"{p['faults_fired']}/{p['faults']}")

    def done(self, r: Any) -> None:
        from ..experiments.report import verdict_word

        v = r.verdict
        counts = ("" if v is None else f": {v.lost} lost, {v.duplicated} duplicated, "
                  f"{v.unexpected} unexpected, {v.out_of_order} out of order")
        self._say(f"  seed {r.seed}: {verdict_word(r)}{counts} ({r.fired()}/{len(r.faults)} "
                  f"faults fired, {r.seconds:.1f} s)" + (f"; {r.error}" if r.error else ""))

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
