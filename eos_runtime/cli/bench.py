"""``eos bench``: workloads on several systems, side by side, verified (docs/benchmarks.md).

    eos bench                                        # every workload and system, 3 rounds
    eos bench --workloads wordcount --rounds 5 --records 400000
    eos bench --systems eos-exactly-once,raw-kafka --bootstrap-servers 127.0.0.1:9092
    eos bench --measures latency,recovery --rate 2000 --steady-seconds 30
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from ..broker import KafkaBroker, default_run_dir, find_running
from ..errors import ConfigError
from ..limits import LIMITS
from ..limits import option as in_range
from ..runner import check_writable_dir
from .options import sigterm_interrupts, stdout_to_stderr

# `eos bench` imports the bench (bench.*: the Kafka client, the systems, the report) when
# it runs: `eos --help` and the other commands start without it (0.1 s).

__all__ = ["bench_cmd"]


def _names(text: str, known: list[str], what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ConfigError(f"--{what}: unknown {', '.join(unknown) or '(none given)'}; "
                          f"choose from {', '.join(known)}")
    return list(dict.fromkeys(names))


def parse_rounds(text: str, measures: list[str]) -> dict[str, int]:
    """``--rounds``: a number for every measure, and ``measure=N`` for one (``5,memory=1``;
    a measure given no number gets 3); rounds of each of ``measures``."""
    default, given = 3, {}
    for part in (p.strip() for p in text.split(",")):
        name, sep, number = part.rpartition("=")
        try:
            n = int(number)
        except ValueError:
            n = 0
        if n < 1 or (sep and name.strip() not in MEASURES):
            raise ConfigError(f"--rounds: {part!r} is not a number of rounds (at least 1) or "
                              f"measure=N with a measure of {', '.join(MEASURES)}")
        if sep:
            given[name.strip()] = n
        else:
            default = n
    return {m: given.get(m, default) for m in measures}


def parse_state_keys(text: str) -> list[int]:
    """``--state-keys``: the key spaces of the memory runs, smallest first. One number N
    means N and 10×N (the memory measure's first form: state grown 10×)."""
    sizes = []
    for part in (p.strip() for p in text.split(",")):
        try:
            n = int(part.replace("_", ""))
        except ValueError:
            n = 0
        if not LIMITS["state_keys"].accepts(n):
            raise ConfigError(f"--state-keys: {part!r} is not a key count "
                              f"({LIMITS['state_keys'].text()})")
        sizes.append(n)
    if len(sizes) == 1:
        sizes.append(10 * sizes[0])
    return sorted(set(sizes))


@contextlib.contextmanager
def _broker(bootstrap: str | None, say: Any) -> Iterator[str]:
    """The broker to measure on: the one given, else the project's running one, else the
    project's broker started for this bench alone (and stopped after it)."""
    if bootstrap:
        yield bootstrap
        return

    running = find_running(default_run_dir())
    if running is not None:
        yield running.bootstrap_servers
        return
    with tempfile.TemporaryDirectory(prefix="eos-bench-kafka-") as d:
        say(f"starting the project's Kafka broker in {d} for this bench")
        broker = KafkaBroker(d, die_with_parent=True)
        try:
            yield broker.start()
        finally:
            broker.stop()


def _out_dir(path: str | None) -> Path:
    d = Path(path or f".eos/bench/{time.strftime('%Y%m%d-%H%M%S')}").absolute()
    if d.exists() and not d.is_dir():
        raise ConfigError(f"--out {str(d)!r} is not a directory")
    check_writable_dir(d, "report directory", "--out")
    return d


MEASURES = ["throughput", "latency", "recovery", "memory"]

#: Input records of a system's warm-up run (unrecorded, before round 1). Measured: the
#: first exactly-once run on a broker started for the bench had p99 2.9 s and 9.7 s where
#: the next rounds had 1.1 s and 1.5 s.
WARM_UP_RECORDS = 20_000


@click.command("bench")
@click.option("--measures", default=",".join(MEASURES), show_default=True, metavar="M1,M2",
              help="What to measure: throughput (a burst), latency (a steady rate with "
                   "probes), recovery (the same, one task SIGKILLed), memory (peak RSS, "
                   "throughput and CPU on the aggregate workload as its state grows).")
@click.option("--workloads", default="wordcount,pageviews,passthrough,enrich",
              show_default=True, metavar="W1,W2",
              help="Workloads of the throughput, latency and recovery runs: wordcount, "
                   "pageviews, passthrough, enrich (clicks looked up in a users table), "
                   "aggregate, windows (views per page per tumbling window, final; timed "
                   "also by its window-close latency).")
@click.option("--systems", default=None, metavar="S1,S2",
              help="Systems to compare: eos-exactly-once, eos-at-least-once, "
                   "eos-exactly-once-1s (at a 1 s commit interval whatever the bench's), "
                   "raw-kafka, quix-exactly-once, quix-at-least-once, "
                   "spark-structured-streaming, kafka-streams-exactly-once-100ms, "
                   "kafka-streams-exactly-once-1s (Kafka Streams at its own commit interval, "
                   "built on first use), faust-exactly-once, pyflink-exactly-once (installed "
                   "on first use); one that is not installed is skipped with the reason. "
                   "Default: all of them but eos-exactly-once-1s.")
@click.option("--records", type=in_range("records"), default=None, metavar="N",
              help="Input records in each run's burst (lines for wordcount); a workload's own "
                   "is about 800 000 results (wordcount 100 000 lines of 8 words, the "
                   "others 800 000 records). Default: each workload's own.")
@click.option("--rounds", default="3", show_default=True, metavar="N|M=N,...",
              help="Rounds; each runs every system once, in turn, so drift hits all alike. "
                   "Per measure too: 5,memory=1 runs 5 rounds of each measure but memory, "
                   "which gets 1 (a measure given no number gets 3).")
@click.option("--partitions", type=in_range("partitions"), default=2, show_default=True,
              metavar="N", help="Partitions of every topic; tasks or processes per stage.")
@click.option("--commit-interval", type=in_range("bench_commit_interval"), default=1.0,
              show_default=True, metavar="S", help="Seconds between checkpoints (commits).")
@click.option("--rate", type=in_range("bench_rate"), default=2000.0, show_default=True,
              metavar="N", help="Latency and recovery runs: input records per second, "
                                "steadily.")
@click.option("--probe-every", type=in_range("probe_every"), default=100.0, show_default=True,
              metavar="MS", help="Latency and recovery runs: a probe record every MS ms "
                                 "among the steady input.")
@click.option("--steady-seconds", type=in_range("steady_seconds"), default=20.0,
              show_default=True, metavar="S",
              help="Latency and recovery runs: seconds of steady input (recovery kills a "
                   "task a third into it).")
@click.option("--state-keys", default="100000", show_default=True, metavar="N|N1,N2,...",
              help="Memory runs: the aggregate workload with a key space of each size given "
                   "(one number N: N, then 10×N), each run's burst two records a key, at "
                   "least --records (default: aggregate's 800 000). The state-growth "
                   "curve: --state-keys 1000,100000,1000000,10000000 --records 2000000.")
@click.option("--vocabulary", type=click.Choice(["zipf", "small"]), default="zipf",
              show_default=True,
              help="Wordcount's text: zipf, 8 words a line from a Zipf vocabulary of "
                   "--vocabulary-size made-up words (like real text: a few words most of it, "
                   "most words rare); small, 1 to 8 words a line uniformly from the 12 "
                   "words of eos experiment (tiny state and sink keys).")
@click.option("--vocabulary-size", type=in_range("vocabulary_size"), default=None,
              metavar="N", help="Words in the zipf vocabulary. Default: 5000.")
@click.option("--seed", type=click.IntRange(0), default=1, show_default=True, metavar="S",
              help="Seed of the generated input.")
@click.option("--idle-timeout", type=in_range("idle_timeout"), default=None, metavar="S",
              help="Give a run up (marked failed) after S seconds without new output while "
                   "results are missing (faust's and PyFlink's output stands still for over "
                   "a minute at a time at 10^5 keys). Default: 60, and 600 for faust and "
                   "PyFlink.")
@click.option("--bootstrap-servers", envvar="EOS_BOOTSTRAP_SERVERS", default=None,
              metavar="HOST:PORT",
              help="Kafka broker to measure on (env EOS_BOOTSTRAP_SERVERS). Default: the "
                   "project's running broker, else one started for the bench.")
@click.option("--quix-python", type=click.Path(dir_okay=False), default=None, metavar="PATH",
              help="Python interpreter of a venv with Quix Streams (its own: Quix pins an "
                   "older confluent-kafka than the runtime's). Default: "
                   "$EOS_BENCH_QUIX_PYTHON, else .venv-quix/bin/python if it exists.")
@click.option("--out", "out", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Where results.json, the plots (throughput.png, latency_cdf.png, "
                   "recovery.png, memory.png: those measured) and report.md go. Default: "
                   ".eos/bench/<time>.")
@click.option("--no-warm-up", is_flag=True,
              help="Skip the warm-up: before round 1 every system runs once on a small "
                   "burst of the first workload, unrecorded, so that no round is the "
                   "broker's or a system's first.")
@click.option("--json", "as_json", is_flag=True,
              help="Print results.json on stdout, and nothing else there.")
@click.option("--report-from", type=click.Path(exists=True, path_type=Path), default=None,
              metavar="PATH",
              help="Measure nothing: write report.md and the plots again from a bench's "
                   "results.json (PATH, or the directory holding it), with this release's "
                   "summaries and targets; into --out if given, else beside it. A bench "
                   "stopped halfway keeps a results.json of the runs it finished (the report then "
                   "says it is incomplete).")
@sigterm_interrupts
def bench_cmd(measures: str, workloads: str, systems: str | None, records: int | None,
              rounds: str,
              partitions: int, commit_interval: float, rate: float, probe_every: float,
              steady_seconds: float, state_keys: str, vocabulary: str,
              vocabulary_size: int | None, seed: int, idle_timeout: float | None,
              bootstrap_servers: str | None, quix_python: str | None, out: str | None,
              no_warm_up: bool, as_json: bool, report_from: Path | None) -> None:
    """Measure workloads on eos_runtime and its peers, side by side on one Kafka broker.

    Each run starts a system on empty topics and waits until it is warm, produces a burst
    of input, and times it by the broker's append times: from the first input record to
    the output record that completed the answer. Latency runs feed a steady rate with
    probe records instead; recovery runs kill one task in one; memory runs sample every
    process of the system. Every output is checked against an oracle; a wrong or failed
    run is marked and never ranked. Writes results.json, PNG plots and report.md, and
    prints the report's tables.
    """
    from ..bench.kafka import BenchKafka
    from ..bench.latency import steady_input
    from ..bench.lineup import DEFAULT_SYSTEMS, SYSTEM_NAMES, all_systems
    from ..bench.measure import Load, Settings, measure
    from ..bench.report import summarized, write_report
    from ..bench.vocabulary import Vocabulary
    from ..bench.workloads import aggregate_input, with_vocabulary

    if report_from is not None:
        _report_again(report_from, out, as_json)
        return
    words = Vocabulary.of(vocabulary, vocabulary_size)
    bench_workloads = with_vocabulary(words)
    chosen_m = _names(measures, MEASURES, "measures")
    chosen_w = _names(workloads, list(bench_workloads), "workloads")
    chosen_s = _names(systems, SYSTEM_NAMES, "systems") if systems else DEFAULT_SYSTEMS
    rounds_of = parse_rounds(rounds, chosen_m)
    key_spaces = parse_state_keys(state_keys)
    by_name = all_systems(quix_python=_quix_python(quix_python))
    out_dir = _out_dir(out)

    def say(text: str) -> None:
        click.echo(text, err=True)

    def burst(workload: str) -> int:
        return records if records is not None else bench_workloads[workload].burst

    skipped = {}
    for name in chosen_s:
        why = by_name[name].unavailable()
        if why is not None:
            skipped[name] = why
            say(f"skipping {name}: {why}")
    active = [by_name[n] for n in chosen_s if n not in skipped]
    versions = _versions(active)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    tag = time.strftime("%H%M%S", time.gmtime())
    runs: list[dict[str, Any]] = []
    warm_ups: list[dict[str, Any]] = []
    machine = {"python": platform.python_version(), "cpus": os.cpu_count(),
               "platform": platform.platform()}

    def result(bootstrap: str, complete: bool) -> dict[str, Any]:
        return summarized({
            "benchmark": "eos bench", "command": _command(), "started": started,
            "complete": complete, "machine": machine,
            "settings": {"measures": chosen_m, "workloads": chosen_w, "systems": chosen_s,
                         "records": records, "rounds": rounds_of, "partitions": partitions,
                         "bursts": {w: burst(w) for w in chosen_w + (
                             ["aggregate"] if "memory" in chosen_m else [])},
                         "commit_interval": commit_interval, "rate": rate,
                         "probe_every_ms": probe_every, "steady_seconds": steady_seconds,
                         "state_keys": key_spaces if "memory" in chosen_m else [],
                         "seed": seed, "bootstrap_servers": bootstrap,
                         "vocabulary": {"kind": words.kind, "size": words.size,
                                        "text": words.describe()}},
            "versions": versions, "skipped": skipped, "warm_up": warm_ups, "runs": runs})

    with stdout_to_stderr(), _broker(bootstrap_servers, say) as bootstrap:
        BenchKafka(bootstrap).check()
        settings = Settings(bootstrap=bootstrap, partitions=partitions,
                            commit_interval=commit_interval, idle_timeout=idle_timeout,
                            work_root=out_dir / "work")
        # (measure, workload, load, extra row fields) and a maker of its input and
        # expected answer. The state-growth curve's inputs are made when their runs come
        # and dropped after: 2 × 10⁷ records held from the start took the memory (and the
        # broker's page cache) the smaller key spaces' runs measure.
        plan: list[tuple[str, str, Load, dict[str, Any], Callable[[], tuple[Any, Any]]]] = []
        for m in chosen_m:
            if m == "throughput":
                for w in chosen_w:
                    got = bench_workloads[w].generate(burst(w), seed)
                    plan.append((m, w, Load(m), {},
                                 _kept(got, bench_workloads[w].oracle(got))))
            elif m in ("latency", "recovery"):
                for w in chosen_w:
                    steady = steady_input(bench_workloads[w], rate=rate, seconds=steady_seconds,
                                          probe_every_ms=probe_every, partitions=partitions,
                                          seed=seed)
                    load = Load(m, steady=steady, kill_after=steady_seconds / 3
                                if m == "recovery" else None)
                    plan.append((m, w, load, {}, _kept(
                        steady.records, bench_workloads[w].oracle(steady.records))))
            else:
                for keys in key_spaces:
                    def curve_input(keys: int = keys) -> tuple[Any, Any]:
                        got = aggregate_input(max(2 * keys, burst("aggregate")), keys, seed)
                        return got, bench_workloads["aggregate"].oracle(got)
                    plan.append((m, "aggregate", Load(m, memory=True), {"key_space": keys},
                                 curve_input))
        if not no_warm_up and plan:
            w = plan[0][1]
            got = bench_workloads[w].generate(min(burst(w), WARM_UP_RECORDS), seed)
            for system in active:
                if system.cannot_run(bench_workloads[w]) is not None:
                    continue
                say(f"warm-up: {w} on {system.name} (not recorded) ...")
                workload = bench_workloads[w]
                row = measure(system, workload, got, workload.oracle(got), settings,
                              round_no=0, tag=tag, say=say, load=Load("throughput"))
                warm_ups.append({k: row.get(k) for k in ("system", "workload", "input_records",
                                                         "verified", "error", "seconds")})
        for r in range(max(rounds_of.values())):
            for m, w, load, extra, make in plan:
                if r >= rounds_of[m]:
                    continue
                made: tuple[Any, Any] | None = None
                for system in active:
                    why = system.cannot_run(bench_workloads[w])
                    if why is not None:
                        if r == 0 and f"{system.name} on {w}" not in skipped:
                            skipped[f"{system.name} on {w}"] = why
                            say(f"skipping {w} on {system.name}: {why}")
                        continue
                    if made is None:
                        made = make()
                    inputs, expected = made
                    say(f"round {r + 1}/{rounds_of[m]}: {m} of {w} on {system.name} ...")
                    row = measure(system, bench_workloads[w], inputs, expected, settings,
                                  round_no=r + 1, tag=tag, say=say, load=load)
                    row.update(extra)
                    if load.memory:
                        row["state_keys"] = len({v for _, v in inputs})
                    runs.append(row)
                    say(_row_line(row))
                    # after every run: a long bench stopped halfway keeps what it measured
                    (out_dir / "results.json").write_text(
                        json.dumps(result(bootstrap, complete=False), indent=2) + "\n")
                # the next entry's input is made without this one beside it
                made = inputs = expected = None
        final = result(bootstrap, complete=True)
    with contextlib.suppress(OSError):
        (out_dir / "work").rmdir()
    _show(write_report(final, out_dir), as_json)


def _report_again(path: Path, out: str | None, as_json: bool) -> None:
    from ..bench.report import load_results, summarized, write_report

    try:
        result = load_results(path)
    except ValueError as exc:
        raise click.UsageError(f"--report-from: {exc}") from None
    out_dir = Path(out) if out else (path if path.is_dir() else path.parent)
    _show(write_report(summarized(result), out_dir), as_json)


def _show(paths: dict[str, Path], as_json: bool) -> None:
    if as_json:
        click.echo(paths["json"].read_text(), nl=False)
    else:
        body = paths["markdown"].read_text()
        click.echo(body[body.index("\n## ") + 1:] if "\n## " in body else body)
        click.echo(f"report: {paths['markdown']}")


def _kept(inputs: Any, expected: Any) -> Callable[[], tuple[Any, Any]]:
    """A plan entry's maker of an input made once and kept (small ones)."""
    return lambda: (inputs, expected)


def _versions(active: list[Any]) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for dist in ("eos_runtime", "confluent-kafka", "pyspark"):
        with contextlib.suppress(PackageNotFoundError):
            found[dist] = version(dist)
    for system in active:
        if getattr(system, "version", None) and system.name.startswith("quix"):
            found[f"quixstreams ({system.name})"] = system.version
        if system.name.startswith("kafka-streams") and getattr(system, "version", None):
            found["kafka-streams (Kafka Streams peer)"] = system.version
        if system.name == "faust-exactly-once":
            found["faust-streaming (faust peer)"] = system.version
        if system.name == "pyflink-exactly-once":
            from ..bench.pyflink_peer import CONNECTOR_VERSION

            found["apache-flink (PyFlink peer)"] = system.version
            found["flink-sql-connector-kafka (PyFlink peer)"] = CONNECTOR_VERSION
        if system.name == "spark-structured-streaming":
            from ..bench.spark_jars import CONNECTOR_VERSION, TOKEN_PROVIDER_SOURCE_VERSION

            found["spark-sql-kafka-0-10 (Spark peer)"] = CONNECTOR_VERSION
            found["spark-token-provider-kafka-0-10, built from source"] = \
                TOKEN_PROVIDER_SOURCE_VERSION
    return found


def _quix_python(given: str | None) -> str | None:
    found = given or os.environ.get("EOS_BENCH_QUIX_PYTHON") or None
    if found is None and Path(".venv-quix/bin/python").exists():
        found = ".venv-quix/bin/python"
    # absolute: the bench's processes run in other directories
    return str(Path(found).absolute()) if found else None


def _row_line(row: dict[str, Any]) -> str:
    if "recovery" in row:
        what = f"longest wait after the kill {row['recovery'].get('recovery_ms', '?')} ms"
    elif "latency_ms" in row:
        lat = row["latency_ms"]
        what = f"latency p50 {lat.get('p50', '?')} ms, p99 {lat.get('p99', '?')} ms"
    elif row.get("peak_rss_bytes"):
        what = f"peak RSS {row['peak_rss_bytes'] / 2**20:,.0f} MB"
    elif "throughput" in row:
        what = (f"{row['throughput']:,.0f} {row['unit']}/s in {row['seconds']:.2f} s "
                f"(warm after {row.get('ready_seconds', 0):.1f} s)")
    else:
        what = "no throughput"
    mark = "verified" if row["verified"] else f"NOT VERIFIED: {row['error']}"
    dup = f", {row['duplicated']:,} duplicates" if row.get("duplicated") else ""
    return f"  {what}; {mark}{dup}"


def _command() -> str:
    if sys.argv[1:2] == ["bench"]:
        return shlex.join(["eos", *sys.argv[1:]])
    return "eos bench"
