"""``eos run`` and ``eos stop``: run a pipeline on Spark (its progress live on stderr, a
summary at the end) and ask a job's live run to stop gracefully.

    eos run examples/wordcount.py
    eos stop wordcount

Results go to stdout, progress to stderr. User errors are ``EosError`` subclasses, which
``eos_runtime.cli`` turns into one ``error: ...`` line and exit code 1.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from ..dead_letter_limit import parse_limit
from ..errors import ConfigError, DeadLetterLimitExceeded, EosError, PipelineFileError
from ..faults import CRASH_POINTS
from ..joblog.control import ControlLog
from ..limits import option as in_range
from ..plan import plan_job
from ..run_watch import watch_run
from ..runner import load_pipeline, start_pipeline
from ..transport import open_transport
from ..user_code import TRACEBACK_ENV, user_frames
from .options import (
    Interrupted,
    absolute_paths,
    apply_overrides,
    check_writable,
    env_default,
    json_option,
    log_named,
    n_of,
    override_options,
    resolve_transport,
    sigterm_interrupts,
    stdout_to_stderr,
    transport_options,
    with_pipeline_settings,
)

__all__ = ["run_cmd", "stop_cmd"]


# --------------------------------------------------------------------------- eos run

def _shows_user_frames(command: Callable[..., None]) -> Callable[..., None]:
    """``--traceback``: the frames of the user's own files behind a failed run (a user
    function's error, a pipeline file that raised), printed above its error line; the run
    has EOS_TRACEBACK set, so its dead letters carry their frames too."""
    @functools.wraps(command)
    def wrapper(*args: Any, show_traceback: bool, **kwargs: Any) -> None:
        if not show_traceback:
            return command(*args, **kwargs)
        try:
            with env_default(TRACEBACK_ENV, "1"):
                return command(*args, **kwargs)
        except EosError as exc:
            frames = getattr(exc, "user_traceback", None)
            cause = exc.__cause__
            if frames is None and isinstance(exc, PipelineFileError) and cause is not None:
                frames = user_frames(cause)
            if frames:
                click.echo(frames.rstrip(), err=True)
            raise
    return wrapper


def parse_crash_at(spec: str) -> tuple[str, int]:
    """``POINT`` or ``POINT@HIT`` -> (point, hit); ``ConfigError`` naming the known points."""
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


def _summary_lines(summary: Any) -> list[str]:
    """The human summary of a run: what came in, each stage's work, each task's."""
    where = "Kafka" if summary.transport == "kafka" else "the local log"
    how = "stopped" if summary.stopped else ("bounded" if summary.bounded else "unbounded")
    came = (f"{n_of(summary.input_records, 'input record')} in {summary.seconds:.2f} s "
            f"({summary.records_per_second:,.1f} records/s)" if summary.input_records else
            f"no new input records, {summary.seconds:.2f} s")
    lines = [f"{summary.job} run {summary.run} ({how}): {came}, {summary.guarantee} on {where}"]
    if summary.input_read is not None and summary.sink_records is not None:
        lines.append(f"  input {summary.input_read:,} read, {summary.input_records:,} committed; "
                     f"sink {n_of(summary.sink_records, 'record')} committed")
    for st in summary.stages:
        counts = _stage_text({**st, "reporting": st["tasks"]})
        lines.append(f"  stage {st['stage']} ({st['input']} -> {st['output']}, "
                     f"{n_of(st['tasks'], 'task')}): {counts}")
    for t in summary.tasks:
        extra = ""
        if t.get("attempt"):
            extra += f", attempt {t['attempt'] + 1}"
        if t.get("rebuilt_store"):
            extra += ", store rebuilt"
        if t.get("dead_letters"):
            extra += f", {n_of(t['dead_letters'], 'dead letter')}"
        if t.get("late"):
            extra += f", {t['late']:,} late"
        if t.get("lookup_misses"):
            extra += f", {n_of(t['lookup_misses'], 'lookup miss', 'lookup misses')}"
        lines.append(f"  task {t.get('task_id')}: {n_of(t.get('checkpoints', 0), 'checkpoint')}, "
                     f"{n_of(t.get('rewinds', 0), 'rewind')}, {t.get('processed', 0):,} processed, "
                     f"{t.get('emitted', 0):,} emitted{extra}")
    dead = summary.dead_letters
    if dead:
        topic = summary.dead_letter_topic or f"{summary.job}.dead-letters"
        lines.append(f"{n_of(dead, 'record')} went to dead letters (topic {topic}): "
                     f"eos consume {topic}")
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
@click.option("--max-dead-letters", default=None, metavar="N|P%",
              help="Fail the run when more than N records, or more than P% of the source "
                   "records it read, went to dead letters: the summary, then the error. Past "
                   "N the run is stopped at once, gracefully (final checkpoints); P% is "
                   "checked at the run's end. Needs dead letters on. Default: no limit.")
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
@click.option("--traceback", "show_traceback", is_flag=True, envvar=TRACEBACK_ENV,
              help="When a function of the pipeline raises, print the frames of the "
                   "pipeline's own files (not the runtime's) above the error line, and put "
                   "them in dead letters too (env EOS_TRACEBACK=1).")
@json_option("Print the run summary as JSON at the end, and nothing else on stdout (a "
             "failed run: a JSON error object).")
@_shows_user_frames
@sigterm_interrupts
def run_cmd(pipeline_file: str, bootstrap_servers: str | None, data_dir: str | None,
            state_dir: str | None, guarantee: str | None, commit_interval: float | None,
            commit_every: int | None, parallelism: int | None, sink_partitions: int | None,
            master: str | None, max_attempts: int, no_progress_timeout: float,
            dead_letters_on: bool, dead_letter_topic: str | None,
            max_dead_letters: str | None, unbounded: bool,
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
    opts = resolve_transport(bootstrap_servers, data_dir)
    limit = parse_limit(max_dead_letters) if max_dead_letters is not None else None
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
    if reset_stream is not None:
        # that stream only: not another source, nor a table (a run option would reset
        # every topic the job reads, a table's too)
        pipeline.reset_source(reset_stream)
        reset_stream = None

    kwargs: dict[str, Any] = dict(
        state_dir=state_dir, guarantee=guarantee, commit_interval=commit_interval,
        commit_every=commit_every, parallelism=parallelism, sink_partitions=sink_partitions,
        master=master, max_attempts=max_attempts, fault=fault, bounded=not unbounded,
        no_progress_timeout=no_progress_timeout,
        take_over=take_over, lease_timeout=lease_timeout, checkpoints=checkpoint_store,
        job_id=job_id,
        offset_default=offset_default,
        outage_budget=outage_budget,
        dead_letters=dead_letter_topic or (True if dead_letters_on else None),
        max_dead_letters=limit, **opts)
    name = pipeline.name

    where = log_named(opts)
    failed: DeadLetterLimitExceeded | None = None
    with contextlib.ExitStack() as stack:
        if as_json:   # stdout keeps the one JSON document
            stack.enter_context(stdout_to_stderr())
        run = start_pipeline(pipeline, **kwargs)
        view = stack.enter_context(_RunView(name, run.run, where,
                                            live=sys.stderr.isatty() and not as_json))
        try:
            summary = watch_run(run, on_progress=view.progress, on_interrupt=view.interrupted)
        except KeyboardInterrupt:
            raise Interrupted(f"run {run.run} of job {name!r} cancelled by "
                               f"{view.cancelled_by}: "
                               f"its tasks stopped where they were, without final "
                               f"checkpoints; the next run recovers from their last ones") from None
        except DeadLetterLimitExceeded as exc:   # the summary, then the error's one line
            failed, summary = exc, exc.summary
    if failed is not None:
        if not as_json and summary is not None:   # --json: the error object alone
            for line in _summary_lines(summary):
                click.echo(line)
        raise failed
    if as_json:
        click.echo(json.dumps(summary.as_dict(), indent=2))
        return
    for line in _summary_lines(summary):
        click.echo(line)


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


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def _input_text(p: dict[str, Any]) -> str:
    """What the sources did: records read (when their tasks report), committed, of how many;
    and the records committed to the sinks (when every sink task reports)."""
    total = p.get("input_total")
    of = f" of {total:,}" if total is not None else ""
    committed = f"{p['input_committed']:,}{of} committed"
    read = p.get("input_read")
    text = f"input {read:,}{of} read, {committed}" if read is not None else f"input {committed}"
    return text + (f"; sink {p['sink_records']:,} committed" if p.get("sink_known") else "")


def _stage_text(st: dict[str, Any]) -> str:
    text = (f"{st['processed']:,} processed, {st['emitted']:,} emitted, "
            f"{n_of(st['checkpoints'], 'checkpoint')}")
    if st["rewinds"]:
        text += f", {n_of(st['rewinds'], 'rewind')}"
    if st["max_buffer_bytes"]:
        text += f", buffer up to {_bytes(st['max_buffer_bytes'])}"
    if st["overflowed"]:
        text += f" ({st['overflowed']:,} overflowed)"
    if st["dead_letters"]:
        text += f", {n_of(st['dead_letters'], 'dead letter')}"
    if st["reporting"] < st["tasks"]:
        text += f" ({st['reporting']} of {n_of(st['tasks'], 'task')} reporting)"
    return text


def _draining(p: dict[str, Any]) -> str:
    """What a stopping run still does: the records in flight to each stage."""
    flights = [(i, n) for i, n in enumerate(p.get("in_flight") or []) if n]
    if not flights:
        return "the stages after the sources finish what was sent to them"
    return "draining " + ", ".join(f"{n:,} records in flight to stage {i}" for i, n in flights)


def _outage_text(p: dict[str, Any]) -> str:
    return (f"broker unreachable for {p['outage_seconds']:.0f} s "
            f"(budget {p.get('outage_budget', 0):g} s)")


def _progress_line(name: str, p: dict[str, Any]) -> str:
    """One progress line (stderr without a terminal, every 10 s)."""
    kind = "unbounded" if not p["bounded"] else "bounded"
    parts = [f"eos run {name} (run {p['run']}, {kind}): {p['seconds']:.0f} s", _input_text(p)]
    for st in p.get("stages", []):
        if st["reporting"]:
            parts.append(f"stage {st['stage']}: {_stage_text(st)}")
    failed = f", {n_of(p['failed_attempts'], 'failed attempt')}" if p["failed_attempts"] else ""
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
    on a terminal (rich), else a line every 10 s; and at once, what a Ctrl-C or SIGTERM
    does."""

    def __init__(self, name: str, run: int, where: str, *, live: bool,
                 every: float = 10.0) -> None:
        self.name, self.run, self.where = name, run, where
        self.last: dict[str, Any] | None = None
        self.cancelled_by = "a second Ctrl-C"
        self.stopped_by = ""   # what asked for the graceful stop: Ctrl-C, SIGTERM, a limit
        self.every = _Every(every)
        self.started = time.monotonic()
        self._live: Any = None
        if live:
            # rich only for the live view on a terminal, not at `eos` start
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
        # An outage's start and end are news at once, not at the next line due.
        news = bool(p.get("outage_seconds")) != bool((self.last or {}).get("outage_seconds"))
        self.last = p
        if self._live is not None:
            self._live.update(self._render(p))
        elif self.every.due() or news:
            click.echo(_progress_line(self.name, p), err=True)

    def interrupted(self, what: str, by: str) -> None:
        """``by``: "Ctrl-C" or "SIGTERM", which a run takes alike (run_watch.watch_run)."""
        again = ("Ctrl-C again" if by == "Ctrl-C" else "a second SIGTERM or Ctrl-C"
                 if by == "SIGTERM" else "Ctrl-C or SIGTERM")   # else: a limit stopped it
        if what == "stop":
            self.stopped_by = by
            p = self.last or {}
            self._say(f"stopping run {self.run} of {self.name} ({by}): the sources take a "
                      f"final checkpoint where they are; the stages after them finish the "
                      f"records already sent to them and take theirs"
                      f"{' (' + _draining(p) + ')' if any(p.get('in_flight') or []) else ''}"
                      f", then the "
                      f"summary follows. {again} cancels at once (no final checkpoints; "
                      f"the next run recovers from the last ones)")
        else:
            self.cancelled_by = ("a second Ctrl-C" if by == self.stopped_by == "Ctrl-C"
                                 else f"{by} while stopping")
            self._say(f"cancelling run {self.run} of {self.name} ({self.cancelled_by}): "
                      f"stopping Spark and the tasks where they are ...")

    def _say(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            click.echo(text, err=True)

    def _render(self, p: dict[str, Any] | None) -> Any:
        # rich, as in __init__
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
        failed = f", {n_of(p['failed_attempts'], 'failed attempt')}" if p["failed_attempts"] else ""
        lines = [f"{_input_text(p)} · tasks "
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
    job = job_or_pipeline
    opts = absolute_paths(resolve_transport(bootstrap_servers, data_dir))
    if job.endswith(".py"):
        pipeline = load_pipeline(job)
        apply_overrides(pipeline, name_override, source_override, sink_override)
        job = pipeline.name
        opts = with_pipeline_settings(opts, pipeline)
    elif name_override is not None or source_override or sink_override:
        raise click.UsageError("--name, --source and --sink go with a PIPELINE.py (a JOB is "
                               "already a name)")
    check_writable(opts)
    with open_transport(**opts) as transport:
        stop, earlier = ControlLog(transport, job).request_stop(f"eos stop (pid {os.getpid()})")
    again = " (it had been asked before)" if earlier is not None else ""
    click.echo(f"asked run {stop.run} of job {job!r} on {log_named(opts)} to stop{again}")


def _check_crash_task(pipeline: Any, opts: dict[str, Any], task: int, *,
                      parallelism: int | None, sink_partitions: int | None) -> None:
    """A --crash-task the plan does not have would never fire: fail loudly instead."""
    with open_transport(**absolute_paths(opts)) as transport:
        plan = plan_job(pipeline, transport, parallelism=parallelism,
                        sink_partitions=sink_partitions)
    if task >= len(plan.tasks):
        raise ConfigError(f"--crash-task {task}: the plan of {plan.name!r} has tasks "
                          f"0..{len(plan.tasks) - 1}")
