"""``eos run``, ``eos produce``, ``eos consume``: run a pipeline, feed its input, read its output.

    eos produce lines --generate words --count 10000
    eos run examples/wordcount.py
    eos consume counts --job wordcount

All three talk to the same log: Kafka with ``--bootstrap-servers`` (or env
``EOS_BOOTSTRAP_SERVERS``), else the embedded local log in ``--data-dir`` (default
``.eos/data``). An explicit ``--data-dir`` wins over ``EOS_BOOTSTRAP_SERVERS`` from the
environment; both on the command line is a usage error.

Results go to stdout, progress to stderr. User errors are ``EosError`` subclasses, which
``eos_runtime.cli.run`` turns into one ``error: ...`` line and exit code 1.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from ..demo import generate_words
from ..errors import ConfigError, DeliveryFailed, TopicNotFound
from ..limits import option as in_range
from ..runtime.outputs import kafka_partition

__all__ = ["run_cmd", "produce_cmd", "consume_cmd", "DEFAULT_DATA_DIR", "PRODUCE_BATCH"]

DEFAULT_DATA_DIR = ".eos/data"
#: Records ``eos produce`` hands to the producer between two flushes.
PRODUCE_BATCH = 10_000

# --------------------------------------------------------------------------- --json

#: Set once a command's ``--json`` flag is on: ``eos_runtime.cli.run`` then prints a
#: failure as a JSON error object on stdout too, so ``eos ... --json | jq`` always gets one.
json_mode = {"on": False}


def _note_json(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        json_mode["on"] = True
    return value


def json_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--json``: a machine-readable result on stdout, and on failure a JSON error object
    (``{"ok": false, "error": ..., "type": ...}``)."""
    return click.option("--json", "as_json", is_flag=True, callback=_note_json, help=help)


def json_error(message: str, kind: str) -> str:
    """The JSON error object a failed ``--json`` command prints on stdout."""
    from ..redact import redact

    return json.dumps({"ok": False, "error": redact(message), "type": kind})


# --------------------------------------------------------------------------- transport options

def _keep_kafka_setting(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    ctx.meta[f"eos.{param.name}"] = value
    ctx.meta[f"eos.{param.name}.source"] = ctx.get_parameter_source(param.name or "")
    return value


def kafka_settings_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--kafka-config FILE`` and ``-X KEY=VALUE``: librdkafka settings for every Kafka
    client of the command (``kafka_settings.py``). Kept in the click context, not passed
    as arguments: ``resolve_transport`` picks them up, so every command that takes the
    transport options has them without a parameter of its own."""
    fn = click.option(
        "-X", "--kafka-setting", "kafka_setting", multiple=True, metavar="KEY=VALUE",
        expose_value=False, callback=_keep_kafka_setting,
        help="One librdkafka setting for every Kafka client (repeatable; -X for short, as in "
             "kcat; wins over --kafka-config), e.g. -X security.protocol=SASL_SSL.")(fn)
    fn = click.option(
        "--kafka-config", "kafka_config", metavar="FILE", envvar="EOS_KAFKA_CONFIG",
        expose_value=False, callback=_keep_kafka_setting, type=click.Path(dir_okay=False),
        help="librdkafka settings for every Kafka client, key=value a line (Java properties; "
             "# comments): SASL and TLS settings, say (env EOS_KAFKA_CONFIG).")(fn)
    return fn


def kafka_settings() -> dict[str, Any] | None:
    """The settings ``--kafka-config`` and ``-X`` gave this command (None: none)."""
    from ..kafka_settings import merge, parse_assignments, read_properties

    meta = click.get_current_context().meta
    path, pairs = meta.get("eos.kafka_config"), meta.get("eos.kafka_setting") or ()
    if path is None and not pairs:
        return None
    return merge(read_properties(path) if path is not None else None, parse_assignments(pairs))


def _explicit_kafka_settings() -> bool:
    meta = click.get_current_context().meta
    return bool(meta.get("eos.kafka_setting")) or (
        meta.get("eos.kafka_config") is not None
        and meta.get("eos.kafka_config.source") != ParameterSource.ENVIRONMENT)


def transport_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--bootstrap-servers`` / ``--data-dir`` and the Kafka settings, shared by the
    commands that read or write a job's topics.

    Every option's help is its meaning in docs/cli.md, word for word, and a trailing
    ``Default: ...`` sentence is its default there (tests/test_cli_docs.py)."""
    fn = kafka_settings_options(fn)
    fn = click.option(
        "--data-dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
        help=f"Directory of the embedded local log, used when no Kafka broker is given; an "
             f"explicit --data-dir wins over EOS_BOOTSTRAP_SERVERS from the environment. "
             f"Default: {DEFAULT_DATA_DIR}.")(fn)
    fn = click.option(
        "--bootstrap-servers", envvar="EOS_BOOTSTRAP_SERVERS", default=None, metavar="HOST:PORT",
        help="Kafka at HOST:PORT[,HOST:PORT...] (env EOS_BOOTSTRAP_SERVERS); without it, the "
             "embedded local log.")(fn)
    return fn


def resolve_transport(bootstrap_servers: str | None, data_dir: str | None) -> dict[str, Any]:
    """The ``open_transport`` keywords the options select (see the module docstring): on
    Kafka with ``client_config`` when ``--kafka-config`` or ``-X`` gave settings."""
    ctx = click.get_current_context()
    bootstrap_servers = (bootstrap_servers or "").strip() or None
    if data_dir is not None and bootstrap_servers:
        if ctx.get_parameter_source("bootstrap_servers") == ParameterSource.ENVIRONMENT:
            bootstrap_servers = None  # an explicit --data-dir beats the environment
        else:
            raise click.UsageError("give --bootstrap-servers (Kafka) or --data-dir (the local "
                                   "log), not both")
    if bootstrap_servers:
        return {"bootstrap_servers": bootstrap_servers, **kafka_client_config(bootstrap_servers)}
    kafka_client_config(None)
    return {"data_dir": data_dir or DEFAULT_DATA_DIR}


def kafka_client_config(bootstrap_servers: str | None) -> dict[str, Any]:
    """``{"client_config": settings}`` when ``--kafka-config`` or ``-X`` gave settings
    (``{}`` when not); a usage error when they were given without a Kafka broker."""
    if not bootstrap_servers:
        if _explicit_kafka_settings():
            raise click.UsageError("--kafka-config and -X are Kafka client settings: give them "
                                   "with --bootstrap-servers (the local log takes none)")
        return {}
    settings = kafka_settings()
    return {"client_config": settings} if settings else {}


def with_pipeline_settings(opts: dict[str, Any], pipeline: Any) -> dict[str, Any]:
    """``opts`` with the pipeline's ``kafka_config`` under the command's own settings."""
    from ..kafka_settings import merge

    if "bootstrap_servers" not in opts or not getattr(pipeline, "kafka_config", None):
        return opts
    return {**opts, "client_config": merge(pipeline.kafka_config, opts.get("client_config"))}


def _check_writable(opts: dict[str, Any]) -> None:
    """A command that writes to the local log fails here, naming the directory, instead
    of over an OSError traceback halfway through."""
    if "data_dir" in opts:
        from ..runner import check_writable_dir

        root = Path(opts["data_dir"])
        for d in (root, root / "topics"):
            check_writable_dir(d, "data directory", "--data-dir")


@contextlib.contextmanager
def _reading_local_log(opts: dict[str, Any]) -> Iterator[None]:
    """Reads work on a read-only local log; a file the reader cannot open at all (no
    permission) is still one line naming it, not a traceback."""
    try:
        yield
    except OSError as exc:
        if "data_dir" not in opts or exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        raise ConfigError(f"cannot read the local log in {opts['data_dir']!r}: {exc.strerror}: "
                          f"{exc.filename!r}") from None


def _where(opts: dict[str, Any]) -> str:
    if "bootstrap_servers" in opts:
        return f"Kafka at {opts['bootstrap_servers']}"
    return f"the local log in {opts['data_dir']}"


def _explicit(name: str) -> bool:
    src = click.get_current_context().get_parameter_source(name)
    return src not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


# --------------------------------------------------------------------------- --name/--source/--sink

def override_options(name_help: str, topic_help: str) -> Callable[[Callable[..., Any]],
                                                                   Callable[..., Any]]:
    """``--name``, ``--source``, ``--sink``: run (or stop) a pipeline file under another job
    name and other topics, without editing it (``Pipeline.rename``)."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = click.option("--sink", "sink_override", multiple=True, metavar="TOPIC",
                          help=f"Write TOPIC instead of the pipeline's sink topic{topic_help}; "
                               f"a pipeline with several sinks names the one to move, "
                               f"OLD=NEW, once per sink. Default: the pipeline's.")(fn)
        fn = click.option("--source", "source_override", multiple=True, metavar="TOPIC",
                          help=f"Read TOPIC instead of the pipeline's source topic{topic_help}; "
                               f"a pipeline with several sources names the one to move, "
                               f"OLD=NEW, once per source. Default: the pipeline's.")(fn)
        fn = click.option("--name", "name_override", default=None, metavar="NAME",
                          help=f"{name_help} Default: the pipeline's name.")(fn)
        return fn
    return wrap


def apply_overrides(pipeline: Any, name: str | None, sources: Sequence[str] = (),
                    sinks: Sequence[str] = ()) -> None:
    """Rename ``pipeline`` and retarget its sources and sinks as the options ask: each
    ``--source`` or ``--sink`` a TOPIC (the one source's or sink's) or OLD=NEW (one named by
    its topic)."""
    if name is None and not sources and not sinks:
        return
    if name is not None and not name.strip():
        raise ConfigError("--name: give a non-empty value")
    source, source_moves = _moves("--source", sources, [t.topic for t in pipeline.sources])
    sink, sink_moves = _moves("--sink", sinks, [t.topic for t in pipeline.sinks])
    pipeline.rename(pipeline.name if name is None else name, source=source, sink=sink,
                    sources=source_moves, sinks=sink_moves)


def _moves(option: str, given: Sequence[str],
           topics: list[str]) -> tuple[str | None, dict[str, str]]:
    """One plain TOPIC (for a pipeline with one such topic), or OLD=NEW moves."""
    what = option.lstrip("-")
    moves: dict[str, str] = {}
    plain = []
    for value in given:
        if not value.strip():
            raise ConfigError(f"{option}: give a non-empty value")
        if "=" in value:
            old, new = value.split("=", 1)
            if not old or not new:
                raise ConfigError(f"{option} {value!r}: give OLD=NEW, both topics")
            moves[old] = new
        else:
            plain.append(value)
    if plain and (len(plain) > 1 or moves or len(topics) > 1):
        raise ConfigError(f"{option} {plain[0]!r}: the pipeline has {len(topics)} {what}s "
                          f"({', '.join(topics)}): name the one to move, {option} OLD=NEW, "
                          f"once per {what}")
    return (plain[0] if plain else None), moves


# --------------------------------------------------------------------------- eos run

def parse_crash_at(spec: str) -> tuple[str, int]:
    """``POINT`` or ``POINT@HIT`` -> (point, hit); ``ConfigError`` naming the known points."""
    from ..faults import CRASH_POINTS

    point, sep, hit_text = spec.strip().partition("@")
    known = ", ".join(sorted(CRASH_POINTS))
    if point not in CRASH_POINTS:
        raise ConfigError(f"--crash-at: unknown crash point {point!r}; known points: {known}")
    hit = 1
    if sep:
        try:
            hit = int(hit_text)
        except ValueError:
            hit = 0
        if hit < 1:
            raise ConfigError(f"--crash-at {spec!r}: the part after @ must be a hit count >= 1")
    return point, hit


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout (Python, the JVM, pipeline code) to stderr.

    ``eos run --json`` keeps stdout for the one JSON document.
    """
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    saved = os.dup(fd) if fd is not None else None
    try:
        if fd is not None:
            os.dup2(sys.stderr.fileno(), fd)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        try:
            sys.stderr.flush()
        finally:
            if saved is not None and fd is not None:  # saved is None when fd is
                os.dup2(saved, fd)
                os.close(saved)


def _summary_lines(summary: Any) -> list[str]:
    """The human summary of a run: what came in, each stage's work, each task's."""
    where = "Kafka" if summary.transport == "kafka" else "the local log"
    how = "stopped" if summary.stopped else ("bounded" if summary.bounded else "unbounded")
    came = (f"{_n(summary.input_records, 'input record')} in {summary.seconds:.2f} s "
            f"({summary.records_per_second:,.1f} records/s)" if summary.input_records else
            f"no new input records, {summary.seconds:.2f} s")
    lines = [f"{summary.job} run {summary.run} ({how}): {came}, {summary.guarantee} on {where}"]
    for st in summary.stages:
        lines.append(f"  stage {st['stage']} ({st['input']} -> {st['output']}, "
                     f"{_n(st['tasks'], 'task')}): {_stage_text({**st, 'reporting': st['tasks']})}")
    for t in summary.tasks:
        extra = ""
        if t.get("attempt"):
            extra += f", attempt {t['attempt'] + 1}"
        if t.get("rebuilt_store"):
            extra += ", store rebuilt"
        if t.get("dead_letters"):
            extra += f", {_n(t['dead_letters'], 'dead letter')}"
        lines.append(f"  task {t.get('task_id')}: {_n(t.get('checkpoints', 0), 'checkpoint')}, "
                     f"{_n(t.get('rewinds', 0), 'rewind')}, {t.get('processed', 0):,} processed, "
                     f"{t.get('emitted', 0):,} emitted{extra}")
    return lines


@click.command("run")
@click.argument("pipeline_file", metavar="PIPELINE.py", type=click.Path(dir_okay=False))
@transport_options
@click.option("--state-dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Where the tasks keep their RocksDB state. Default: <data dir>/state; "
                   ".eos/state on Kafka.")
@click.option("--guarantee", type=click.Choice(["exactly-once", "at-least-once"]), default=None,
              help="Processing guarantee. Default: the pipeline's.")
@click.option("--commit-interval", type=in_range("commit_interval"), default=None,
              metavar="SECONDS", help="Checkpoint every SECONDS (> 0). Default: the pipeline's.")
@click.option("--commit-every", type=in_range("commit_every"), default=None, metavar="N",
              help="Also checkpoint after N records of a task; 0 turns that off (the commit "
                   "interval alone). Default: the pipeline's.")
@click.option("--parallelism", type=in_range("parallelism"), default=None, metavar="N",
              help="Tasks per stage: of every stage after a key_by that sets no parallelism, "
                   "and of the source stage if its source() sets none (at most the source "
                   "topic's partitions). Default: the pipeline's for the stages after a key_by, "
                   "the source topic's partition count for the source stage.")
@click.option("--sink-partitions", type=in_range("sink_partitions"), default=None, metavar="N",
              help="Partitions of the sink topic when the run creates it (ignored if it exists). "
                   "Default: 1.")
@click.option("--master", default=None, metavar="MASTER",
              help="Spark master: local[...], spark://..., yarn or k8s://...; local[N,F] runs N "
                   "tasks at once, F attempts each. Default: local[N,F] with N = the plan's "
                   "tasks, F = --max-attempts.")
@click.option("--max-attempts", type=in_range("max_attempts"), default=4, show_default=True,
              metavar="N",
              help="Attempts per task before the run fails (a user function's error is not "
                   "retried: it ends the run at once).")
@click.option("--no-progress-timeout", type=in_range("no_progress_timeout"), default=300.0,
              show_default=True, metavar="SECONDS",
              help="Fail the run when some task has had no running attempt for SECONDS (a "
                   "cluster that lost its workers, or has fewer free slots than tasks: Spark "
                   "would wait forever). 0: wait forever.")
@click.option("--dead-letters", "dead_letters_on", is_flag=True,
              help="A record whose function raises goes to topic <job>.dead-letters (with the "
                   "error) instead of ending the run. Default: the pipeline's setting.")
@click.option("--dead-letter-topic", default=None, metavar="TOPIC",
              help="Like --dead-letters, to TOPIC.")
@click.option("--unbounded", is_flag=True,
              help="Run until eos stop or Ctrl-C instead of to the end of the input present at "
                   "the start.")
@click.option("--outage-budget", type=in_range("outage_budget"), default=None, metavar="SECONDS",
              help="Ride through a broker outage of up to SECONDS: the driver and every task "
                   "wait for the broker and go on (tasks restart in place and recover); past "
                   "it the run fails, naming the broker and how long it was gone. 0: fail at "
                   "the first transient error. Default: the pipeline's (60).")
@click.option("--crash-at", default=None, metavar="POINT[@HIT]",
              help="Fault injection: kill the first attempt of task --crash-task at this crash "
                   "point (at its HIT-th hit, default 1); docs/faults.md lists the points.")
@click.option("--crash-task", type=click.IntRange(0), default=None, metavar="N",
              help="The task --crash-at arms. Default: 0.")
@click.option("--reset-offset", "reset_stream", default=None, metavar="STREAM",
              help="Ignore the checkpoint an earlier run left for the source STREAM and start "
                   "at --offset-default (a retry inside this run still resumes from its own "
                   "checkpoints); under exactly-once the job keeps its state.")
@click.option("--offset-default", type=click.Choice(["oldest", "upcoming", "none"]),
              default=None,
              help="Where a source partition without a checkpoint (or reset) starts: oldest "
                   "(all the topic holds), upcoming (only what arrives after the run's start, "
                   "the same for every attempt of the run) or "
                   "none (no fallback: the run is refused, naming the partition, unless every "
                   "partition has a checkpoint or a Startpoint). Default: the source's (oldest "
                   "unless it says otherwise).")
@click.option("--checkpoints", "checkpoint_store",
              type=click.Choice(["changelog", "kafka", "filesystem"]), default=None,
              help="Where the source tasks keep their input positions: the change log, the "
                   "checkpoint topic __eos_checkpoint_<job>_<job id> (on the local log too), "
                   "or files under <state dir>/checkpoints/<job>/<job id>; the last two only "
                   "for at-least-once jobs. Default: the pipeline's (the change log unless it "
                   "says otherwise).")
@click.option("--job-id", "job_id", default=None, metavar="ID",
              help="The job's id (a job has a name and an id, as in Samza): it names the "
                   "checkpoint topic and the file-system store of --checkpoints kafka and "
                   "filesystem, and is part of such a job's layout. Default: the pipeline's "
                   "(1 unless it says otherwise).")
@click.option("--take-over", "take_over", is_flag=True,
              help="Run even though another driver holds the job's lease (a run in progress, "
                   "or a driver that died less than its lease timeout ago): that run is asked "
                   "to stop, and this one takes the job.")
@click.option("--lease-timeout", type=in_range("lease_timeout"), default=60.0,
              show_default=True, metavar="SECONDS",
              help="Seconds without a heartbeat from this driver before its lease on the job "
                   "lapses and another run may start (it renews every third of it, at most "
                   "every 10 s).")
@override_options("Run the pipeline as job NAME instead of under the name PIPELINE.py gives "
                  "it: a new name is a new job (its own change log, control topic, channels "
                  "and state), so a pipeline whose layout changed can run without editing "
                  "the file.", "")
@json_option("Print the run summary as JSON at the end, and nothing else on stdout (a "
             "failed run: a JSON error object).")
def run_cmd(pipeline_file: str, bootstrap_servers: str | None, data_dir: str | None,
            state_dir: str | None, guarantee: str | None, commit_interval: float | None,
            commit_every: int | None, parallelism: int | None, sink_partitions: int | None,
            master: str | None, max_attempts: int, no_progress_timeout: float,
            dead_letters_on: bool, dead_letter_topic: str | None, unbounded: bool,
            outage_budget: float | None, crash_at: str | None,
            crash_task: int | None, reset_stream: str | None, offset_default: str | None,
            checkpoint_store: str | None, job_id: str | None, take_over: bool,
            lease_timeout: float,
            name_override: str | None, source_override: tuple[str, ...],
            sink_override: tuple[str, ...], as_json: bool) -> None:
    """Run the pipeline defined in PIPELINE.py on Spark.

    A bounded run (the default) reads what the source topic holds when it starts, takes
    a final checkpoint in every task and ends. With --unbounded the run reads on until
    `eos stop` or Ctrl-C (once: a graceful stop with final checkpoints; twice: cancel).
    Each run continues the job where its last run left off: state, input positions and
    output carry over.

    The file must define a Pipeline (named `pipeline`, or the only one). Progress goes to
    stderr (a live table of the stages on a terminal, a line every 10 s otherwise); a
    summary of the work (input records, each stage's and each task's counters) goes to
    stdout. docs/cli.md describes every option.
    """
    from ..runner import load_pipeline, start_pipeline, watch_run

    opts = resolve_transport(bootstrap_servers, data_dir)
    fault: dict[str, Any] | None = None
    if crash_at is not None:
        point, hit = parse_crash_at(crash_at)
        fault = {"point": point, "hit": hit, "task": crash_task or 0, "attempt": 0}
    elif crash_task is not None:
        raise click.UsageError("--crash-task needs --crash-at")

    pipeline = load_pipeline(pipeline_file)
    apply_overrides(pipeline, name_override, source_override, sink_override)
    opts = with_pipeline_settings(opts, pipeline)
    if fault is not None:
        _check_crash_task(pipeline, opts, fault["task"], parallelism=parallelism,
                          sink_partitions=sink_partitions)
    topics = [src.topic for src in pipeline.sources]
    if reset_stream is not None and reset_stream not in topics:
        which = (f"{topics[0]!r} (its only source stream); give that" if len(topics) == 1
                 else f"{' and '.join(repr(t) for t in topics)}; give one of them")
        raise ConfigError(f"--reset-offset {reset_stream}: job {pipeline.name!r} reads {which}")
    if reset_stream is not None and len(topics) > 1:
        pipeline.reset_source(reset_stream)   # that stream only, not every source
        reset_stream = None

    kwargs: dict[str, Any] = dict(
        state_dir=state_dir, guarantee=guarantee, commit_interval=commit_interval,
        commit_every=commit_every, parallelism=parallelism, sink_partitions=sink_partitions,
        master=master, max_attempts=max_attempts, fault=fault, bounded=not unbounded,
        no_progress_timeout=no_progress_timeout,
        take_over=take_over, lease_timeout=lease_timeout, checkpoints=checkpoint_store,
        job_id=job_id,
        reset_offset=True if reset_stream is not None else None, offset_default=offset_default,
        outage_budget=outage_budget,
        dead_letters=dead_letter_topic or (True if dead_letters_on else None), **opts)
    name = pipeline.name

    where = _where(opts)
    with contextlib.ExitStack() as stack:
        if as_json:   # stdout keeps the one JSON document
            stack.enter_context(_stdout_to_stderr())
        run = start_pipeline(pipeline, **kwargs)
        view = stack.enter_context(_RunView(name, run.run, where,
                                            live=sys.stderr.isatty() and not as_json))
        try:
            summary = watch_run(run, on_progress=view.progress, on_interrupt=view.interrupted)
        except KeyboardInterrupt:
            raise RunCancelled(f"run {run.run} of job {name!r} cancelled by a second Ctrl-C: "
                               f"its tasks stopped where they were, without final "
                               f"checkpoints; the next run recovers from their last ones") from None
    if as_json:
        click.echo(json.dumps(summary.as_dict(), indent=2))
        return
    for line in _summary_lines(summary):
        click.echo(line)


class RunCancelled(click.ClickException):
    """A second Ctrl-C cancelled ``eos run``: one ``error:`` line, exit code 130."""

    exit_code = 130

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


class _Every:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._next = time.monotonic() + seconds

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.seconds
        return True


def _n(count: int, noun: str, plural: str | None = None) -> str:
    """``1 checkpoint``, ``2 checkpoints``, ``1,000 input records``."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def _input_text(p: dict[str, Any]) -> str:
    """What the sources did: records read (when their tasks report), committed, of how many."""
    src = p["stages"][0] if p.get("stages") else None
    total = p.get("input_total")
    of = f" of {total:,}" if total is not None else ""
    committed = f"{p['input_committed']:,}{of} committed"
    if src is not None and src["reporting"] == src["tasks"]:
        return f"input {src['processed']:,}{of} read, {committed}"
    return f"input {committed}"


def _stage_text(st: dict[str, Any]) -> str:
    text = (f"{st['processed']:,} processed, {st['emitted']:,} emitted, "
            f"{_n(st['checkpoints'], 'checkpoint')}")
    if st["rewinds"]:
        text += f", {_n(st['rewinds'], 'rewind')}"
    if st["max_buffer_bytes"]:
        text += f", buffer up to {_bytes(st['max_buffer_bytes'])}"
    if st["overflowed"]:
        text += f" ({st['overflowed']:,} overflowed)"
    if st["dead_letters"]:
        text += f", {_n(st['dead_letters'], 'dead letter')}"
    if st["reporting"] < st["tasks"]:
        text += f" ({st['reporting']} of {_n(st['tasks'], 'task')} reporting)"
    return text


def _draining(p: dict[str, Any]) -> str:
    """What a stopping run still does: the records in flight to each stage."""
    flights = [(i, n) for i, n in enumerate(p.get("in_flight") or []) if n]
    if not flights:
        return "the stages after the sources finish what was sent to them"
    return "draining " + ", ".join(f"{n:,} records in flight to stage {i}" for i, n in flights)


def _outage_text(p: dict[str, Any]) -> str:
    return (f"the broker has not answered for {p['outage_seconds']:.0f} s (the run waits "
            f"for it up to the outage budget, {p.get('outage_budget', 0):g} s)")


def _progress_line(name: str, p: dict[str, Any]) -> str:
    """One progress line (stderr without a terminal, every 10 s)."""
    kind = "unbounded" if not p["bounded"] else "bounded"
    parts = [f"eos run {name} (run {p['run']}, {kind}): {p['seconds']:.0f} s", _input_text(p)]
    for st in p.get("stages", []):
        if st["reporting"]:
            parts.append(f"stage {st['stage']}: {_stage_text(st)}")
    parts.append(f"sink {p['sink_records']:,} written")
    failed = f", {_n(p['failed_attempts'], 'failed attempt')}" if p["failed_attempts"] else ""
    parts.append(f"tasks {p['tasks_running']} running / {p['tasks_finished']} done{failed}")
    if p.get("outage_seconds"):
        parts.append(_outage_text(p))
    if p["stopping"]:
        parts.append(f"stopping: {_draining(p)} (Ctrl-C again cancels)")
    elif not p["bounded"]:
        parts.append("Ctrl-C stops")
    return "; ".join(parts)


class _RunView:
    """What ``eos run`` shows on stderr while the run goes on: a live table of the stages
    on a terminal (rich), else a line every 10 s; and at once, what a Ctrl-C does."""

    def __init__(self, name: str, run: int, where: str, *, live: bool,
                 every: float = 10.0) -> None:
        self.name, self.run, self.where = name, run, where
        self.last: dict[str, Any] | None = None
        self.every = _Every(every)
        self.started = time.monotonic()
        self._live: Any = None
        if live:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self._render(None), console=Console(stderr=True),
                              refresh_per_second=4, transient=True)

    def __enter__(self) -> _RunView:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()

    def progress(self, p: dict[str, Any]) -> None:
        self.last = p
        if self._live is not None:
            self._live.update(self._render(p))
        elif self.every.due():
            click.echo(_progress_line(self.name, p), err=True)

    def interrupted(self, what: str) -> None:
        if what == "stop":
            p = self.last or {}
            self._say(f"stopping run {self.run} of {self.name} (Ctrl-C): the sources take a "
                      f"final checkpoint where they are; the stages after them finish the "
                      f"records already sent to them and take theirs"
                      f"{' (' + _draining(p) + ')' if any(p.get('in_flight') or []) else ''}"
                      f", then the "
                      f"summary follows. Ctrl-C again cancels at once (no final checkpoints; "
                      f"the next run recovers from the last ones)")
        else:
            self._say(f"cancelling run {self.run} of {self.name} (second Ctrl-C): stopping "
                      f"Spark and the tasks where they are ...")

    def _say(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            click.echo(text, err=True)

    def _render(self, p: dict[str, Any] | None) -> Any:
        from rich.console import Group
        from rich.spinner import Spinner
        from rich.table import Table
        from rich.text import Text

        if p is None or p.get("state") == "starting":
            seconds = time.monotonic() - self.started
            return Spinner("dots", Text(f"eos run {self.name} (run {self.run}): starting Spark "
                                        f"on {self.where} ... {seconds:.0f} s"))
        kind = "unbounded" if not p["bounded"] else "bounded"
        head = Text(f"eos run {self.name} · run {p['run']} ({kind}) · {p['seconds']:.0f} s · "
                    f"{self.where}", style="bold")
        table = Table(box=None, pad_edge=False, header_style="dim")
        for col, right in (("stage", False), ("tasks", True), ("reads -> writes", False),
                           ("processed", True), ("emitted", True), ("checkpoints", True),
                           ("rewinds", True), ("buffer", True)):
            table.add_column(col, justify="right" if right else "left")
        for st in p.get("stages", []):
            tasks = str(st["tasks"])
            if st["reporting"] == 0:
                nums = ["-"] * 5
            else:
                if st["reporting"] < st["tasks"]:
                    tasks = f"{st['reporting']}/{st['tasks']}"
                buffer = _bytes(st["max_buffer_bytes"]) if st["max_buffer_bytes"] else "-"
                if st["overflowed"]:
                    buffer += f" ({st['overflowed']:,} over)"
                nums = [f"{st['processed']:,}", f"{st['emitted']:,}", f"{st['checkpoints']:,}",
                        f"{st['rewinds']:,}", buffer]
            table.add_row(str(st["stage"]), tasks, f"{st['input']} -> {st['output']}", *nums)
        failed = f", {_n(p['failed_attempts'], 'failed attempt')}" if p["failed_attempts"] else ""
        lines = [f"{_input_text(p)} · sink {p['sink_records']:,} written · tasks "
                 f"{p['tasks_running']} running / {p['tasks_finished']} done{failed}"]
        if p.get("outage_seconds"):
            lines.append(_outage_text(p))
        if p["stopping"]:
            lines.append(f"stopping: {_draining(p)}; Ctrl-C again cancels at once")
        else:
            lines.append("Ctrl-C: stop gracefully (final checkpoints, then the summary)")
        return Group(head, table, *(Text(line, style="dim") for line in lines))


@click.command("stop")
@click.argument("job_or_pipeline", metavar="JOB|PIPELINE.py")
@transport_options
@override_options("With PIPELINE.py: stop job NAME, the one eos run --name NAME started from "
                  "that file.", " (with PIPELINE.py, as given to eos run; the job is known "
                  "by its name alone)")
def stop_cmd(job_or_pipeline: str, bootstrap_servers: str | None, data_dir: str | None,
             name_override: str | None, source_override: tuple[str, ...],
             sink_override: tuple[str, ...]) -> None:
    """Ask the live run of a job (the one holding its lease) to stop gracefully.

    JOB is the pipeline's name, or a pipeline file (with eos run's --name, --source and
    --sink if it ran with them). The run's sources take a final checkpoint and end the
    run; every task follows once it has aligned on their end-of-run markers, and `eos
    run` prints its summary. The next run continues from there. With no live run,
    says so and exits 1 (nothing is asked).
    """
    from ..joblog.control import ControlLog
    from ..transport import open_transport

    job = job_or_pipeline
    opts = _absolute(resolve_transport(bootstrap_servers, data_dir))
    if job.endswith(".py"):
        from ..runner import load_pipeline

        pipeline = load_pipeline(job)
        apply_overrides(pipeline, name_override, source_override, sink_override)
        job = pipeline.name
        opts = with_pipeline_settings(opts, pipeline)
    elif name_override is not None or source_override or sink_override:
        raise click.UsageError("--name, --source and --sink go with a PIPELINE.py (a JOB is "
                               "already a name)")
    _check_writable(opts)
    with open_transport(**opts) as transport:
        stop, earlier = ControlLog(transport, job).request_stop(f"eos stop (pid {os.getpid()})")
    again = " (it had been asked before)" if earlier is not None else ""
    click.echo(f"asked run {stop.run} of job {job!r} on {_where(opts)} to stop{again}")


def _check_crash_task(pipeline: Any, opts: dict[str, Any], task: int, *,
                      parallelism: int | None, sink_partitions: int | None) -> None:
    """A --crash-task the plan does not have would never fire: fail loudly instead."""
    from ..plan import plan_job
    from ..transport import open_transport

    with open_transport(**_absolute(opts)) as transport:
        plan = plan_job(pipeline, transport, parallelism=parallelism,
                        sink_partitions=sink_partitions)
    if task >= len(plan.tasks):
        raise ConfigError(f"--crash-task {task}: the plan of {plan.name!r} has tasks "
                          f"0..{len(plan.tasks) - 1}")


def _absolute(opts: dict[str, Any]) -> dict[str, Any]:
    if "data_dir" in opts:
        return {"data_dir": str(Path(opts["data_dir"]).absolute())}
    return opts


# --------------------------------------------------------------------------- eos produce

def _read_lines(stream: Any, source: str) -> Iterator[bytes]:
    """Lines of a binary stream without their line ending, each checked to be UTF-8."""
    for number, line in enumerate(stream, 1):
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{source}, line {number}: not UTF-8 ({exc.reason} at byte "
                              f"{exc.start})") from None
        yield line


def produce_records(transport: Any, topic: str, values: Iterable[bytes], partitions: int, *,
                    batch: int = PRODUCE_BATCH, key_separator: bytes | None = None,
                    null_value: bytes | None = None) -> int:
    """Write ``values`` round-robin over ``partitions`` partitions of ``topic``; flush in
    batches of ``batch`` records. Returns how many were written. With ``key_separator``
    each value is ``KEY SEP VALUE``, written keyed where Kafka's default partitioner puts
    the key (so a key's records stay in order, as a table needs), a VALUE equal to
    ``null_value`` as a null value (a table's delete)."""
    written = 0
    with transport.producer() as producer:
        try:
            for value in values:
                if key_separator is None:
                    producer.produce(topic, written % partitions, value)
                else:
                    key, row = _keyed(value, key_separator, written + 1)
                    producer.produce(topic, kafka_partition(key, partitions),
                                     None if row == null_value else row, key=key)
                written += 1
                if written % batch == 0:
                    producer.flush()
        except ConfigError as exc:  # a bad input line: keep what came before it, say so
            try:
                producer.flush()
            except DeliveryFailed as failed:
                raise _stopped(topic, written, failed, at_end=True) from None
            raise ConfigError(f"{exc}; the {written:,} records before it were written to "
                              f"{topic!r}") from None
        except DeliveryFailed as exc:  # e.g. a record too large for Kafka: say what got in
            raise _stopped(topic, written, exc, at_end=False) from None
        try:
            producer.flush()
        except DeliveryFailed as exc:
            raise _stopped(topic, written, exc, at_end=True) from None
    return written


def _keyed(line: bytes, separator: bytes, number: int) -> tuple[bytes, bytes]:
    """A ``KEY SEP VALUE`` line as its key and value; ``ConfigError`` naming the record when
    it has no separator or no key."""
    key, sep, value = line.partition(separator)
    if not sep or not key:
        raise ConfigError(f"record {number}: {line[:60].decode('utf-8', 'replace')!r} has no "
                          f"key before {separator.decode()!r} (--key-separator: each line is "
                          f"KEY{separator.decode()}VALUE)")
    return key, value


def _stopped(topic: str, handed: int, exc: DeliveryFailed, *, at_end: bool) -> DeliveryFailed:
    """``eos produce`` stopped on records the log refused: how many were written and how
    many not, why (the transport names the setting to raise), and where reading stopped."""
    lost = getattr(exc, "failure_count", 0) + getattr(exc, "outstanding", 0)
    written = max(handed - lost, 0)
    rest = "" if at_end else f"; the input after record {handed:,} was not read"
    return DeliveryFailed(f"{written:,} record{_s(written)} {_were(written)} written to "
                          f"{topic!r} and {lost:,} {_were(lost)} not: {exc}{rest}")


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _were(n: int) -> str:
    return "was" if n == 1 else "were"


@click.command("produce")
@click.argument("topic")
@transport_options
@click.option("--lines-from", "lines_from", type=click.File("rb"), default=None, metavar="FILE",
              help="One record per line of FILE (UTF-8; - reads stdin); the line ending is "
                   "not part of the record.")
@click.option("--generate", type=click.Choice(["words"]), default=None,
              help="Generate the records instead: words = text lines of 1 to 10 words drawn "
                   "from a fixed vocabulary of 32 (the same --seed, the same lines).")
@click.option("--count", type=click.IntRange(0), default=None, metavar="N",
              help="How many records --generate writes. Default: 10,000.")
@click.option("--seed", type=int, default=None, metavar="S",
              help="Seed of --generate. Default: 0.")
@click.option("--partitions", type=click.IntRange(1), default=2, show_default=True, metavar="N",
              help="Partitions of the topic when eos produce creates it (when it is missing).")
@click.option("--key-separator", "key_separator", default=None, metavar="SEP",
              help="Each line is KEY SEP VALUE: keyed records, each in the partition Kafka's "
                   "default partitioner gives its key (a table's topic, say).")
@click.option("--null-value", "null_value", default=None, metavar="TEXT",
              help="With --key-separator, a VALUE equal to TEXT is written as a null value "
                   "(deletes its key from a table).")
def produce_cmd(topic: str, bootstrap_servers: str | None, data_dir: str | None,
                lines_from: Any, generate: str | None, count: int | None, seed: int | None,
                partitions: int, key_separator: str | None, null_value: str | None) -> None:
    """Write records to TOPIC (a pipeline's input), creating it if missing.

    Records have no key and values go round-robin over the topic's partitions, unless
    --key-separator splits each line into a key and a value. Prints how many records
    were written.
    """
    from ..transport import TopicSpec, open_transport

    if (lines_from is None) == (generate is None):
        raise click.UsageError("give exactly one of --lines-from FILE and --generate words")
    if lines_from is not None and (count is not None or seed is not None):
        raise click.UsageError("--count and --seed go with --generate")
    if key_separator is not None and (not key_separator or lines_from is None):
        raise click.UsageError("--key-separator takes a non-empty SEP and goes with "
                               "--lines-from")
    if null_value is not None and key_separator is None:
        raise click.UsageError("--null-value goes with --key-separator")
    opts = resolve_transport(bootstrap_servers, data_dir)
    _check_writable(opts)
    started = time.monotonic()
    with open_transport(**opts) as transport:
        try:
            parts = transport.describe(topic).partitions
        except TopicNotFound:
            transport.create_topics([TopicSpec(topic, partitions)])
            parts = partitions
        else:
            if _explicit("partitions") and parts != partitions:
                raise ConfigError(f"topic {topic!r} exists with {parts} partitions, not "
                                  f"{partitions} (--partitions only applies to a topic eos "
                                  f"produce creates)")
        if generate is not None:
            values: Iterable[bytes] = (line.encode() for line in generate_words(
                10_000 if count is None else count, 0 if seed is None else seed))
        else:
            name = "stdin" if lines_from.name in ("-", "<stdin>") else repr(lines_from.name)
            values = _read_lines(lines_from, name)
        written = produce_records(
            transport, topic, values, parts,
            key_separator=None if key_separator is None else key_separator.encode(),
            null_value=None if null_value is None else null_value.encode())
    seconds = time.monotonic() - started
    click.echo(f"wrote {written:,} records to {topic} ({parts} partition{'s' * (parts != 1)}) "
               f"on {_where(opts)} in {seconds:.2f} s")


# --------------------------------------------------------------------------- eos consume

def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return repr(data)


@click.command("consume")
@click.argument("topic")
@transport_options
@click.option("--job", default=None, metavar="NAME",
              help="The job (pipeline name) whose sink wrote TOPIC: on the local log, only "
                   "what its checkpoints committed is shown (Kafka reads read_committed "
                   "anyway). Default: on the local log, the one job whose sink is TOPIC "
                   "(from the jobs' control topics).")
@click.option("--all", "read_all", is_flag=True,
              help="Read every record, uncommitted ones too.")
@json_option("Print a JSON list of {partition, offset, key, value} (a failed command: a "
             "JSON error object).")
@click.option("--count", "only_count", is_flag=True, help="Print only the number of records.")
def consume_cmd(topic: str, bootstrap_servers: str | None, data_dir: str | None,
                job: str | None, read_all: bool, as_json: bool, only_count: bool) -> None:
    """Print the records of TOPIC up to its current end, as key<TAB>value lines.

    Partition by partition, in offset order. Keys and values are shown as UTF-8 text
    where they decode, else as the repr of the bytes; a missing key is an empty field.

    By default only committed records are shown: on Kafka through read_committed, on
    the local log (which has no transactions) through the commit records of the job
    named by --job (an at-least-once job's output is all committed, as on Kafka). On the
    local log without --job, the one job whose sink is TOPIC is read; with several, pass
    --job (or --all).
    """
    from ..joblog.committed import read_output
    from ..transport import open_transport

    if job is not None and read_all:
        raise click.UsageError("--job and --all exclude each other")
    if as_json and only_count:
        raise click.UsageError("--json and --count exclude each other")
    opts = resolve_transport(bootstrap_servers, data_dir)
    with _reading_local_log(opts), open_transport(**opts) as transport:
        transport.describe(topic)  # TopicNotFound names the topic
        if not read_all and not transport.supports_transactions:
            if job is None:
                job = _sink_job(transport, topic, opts)
                if not as_json:
                    click.echo(f"committed output of job {job!r} (its sink is {topic!r})",
                               err=True)
            try:
                transport.describe(f"{job}.changelog")
            except TopicNotFound:
                raise ConfigError(f"job {job!r} has no change log ({job}.changelog) on "
                                  f"{_where(opts)}: --job must name the pipeline that wrote "
                                  f"{topic!r}") from None
        records = read_output(transport, topic, job=job, committed=not read_all)
    if only_count:
        click.echo(str(len(records)))
    elif as_json:
        click.echo(json.dumps([{"partition": r.partition, "offset": r.offset,
                                "key": _text(r.key), "value": _text(r.value)}
                               for r in records], indent=1, ensure_ascii=False))
    else:
        _write_lines(f"{_field(r.key)}\t{_field(r.value)}" for r in records)


def _sink_job(transport: Any, topic: str, opts: dict[str, Any]) -> str:
    """The one job whose sink is ``topic``, from the jobs' control topics; an error naming
    them when there are several, or saying what to pass when there is none."""
    from ..joblog.control import jobs_with_sink

    jobs = jobs_with_sink(transport, topic)
    if len(jobs) == 1:
        return jobs[0]
    if jobs:
        names = ", ".join(repr(j) for j in jobs)
        raise ConfigError(f"{topic!r} is the sink of {len(jobs)} jobs on {_where(opts)}: "
                          f"{names}; pass --job NAME to say whose commits to read (or --all "
                          f"to read every record)")
    raise ConfigError(f"no job on {_where(opts)} has {topic!r} as its sink, and the local log "
                      f"has no transactions: pass --job NAME (the job whose sink wrote it), or "
                      f"--all to read every record, uncommitted too")


def _field(data: bytes | None) -> str:
    text = _text(data)
    return "" if text is None else text


def _write_lines(lines: Iterable[str], chunk: int = 5_000) -> None:
    """Write to stdout in chunks; a closed pipe (``eos consume ... | head``) ends quietly."""
    out = sys.stdout
    try:
        buf: list[str] = []
        for line in lines:
            buf.append(line)
            if len(buf) >= chunk:
                out.write("\n".join(buf) + "\n")
                buf.clear()
        if buf:
            out.write("\n".join(buf) + "\n")
        out.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's exit flush must not fail again
