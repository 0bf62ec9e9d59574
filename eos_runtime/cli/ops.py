"""``eos checkpoint show|write`` and ``eos startpoint set|list|clear``: see and move where a
job's source tasks start (docs/operations.md).

Both write only through Startpoints (``joblog/startpoints.py``): a position an operator gives is
applied at each task's next start and recorded by its next commit, never written behind a
running task's back, and both are refused while a driver holds the job's lease.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from .. import checkpoint_tool
from ..errors import ConfigError, WireFormatError
from ..joblog.checkpoints import ChangeLogCheckpoints
from ..joblog.control import ControlLog, jobs_on
from ..joblog.startpoints import (
    MetadataStore,
    Startpoint,
    StartpointKey,
    check_stream_read,
    clear_startpoints,
    list_startpoints,
    set_startpoint,
)
from ..runner import state_root
from ..runtime.source import position_store
from ..transport import TopicPartition, open_transport
from .options import (
    absolute_paths,
    check_writable,
    json_option,
    log_named,
    n_of,
    reading_local_log,
    resolve_transport,
    transport_options,
)

__all__ = ["checkpoint_group", "startpoint_group"]


def _job_plan(transport: Any, job: str, opts: dict[str, str]) -> Any:
    last = ControlLog(transport, job).last_run()
    if last is None:
        raise ConfigError(f"job {job!r} has never run on {log_named(opts)}: it has no checkpoints "
                          f"(`eos jobs` lists the jobs there)")
    return checkpoint_tool.plan_from_layout(job, last.start.layout)


@click.group("checkpoint")
def checkpoint_group() -> None:
    """Show a job's checkpoints as a properties file; write an edited one back as the
    starting positions of its next run."""


@checkpoint_group.command("show")
@click.argument("job")
@transport_options
@click.option("--state-dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Where the job's tasks kept their state (as given to eos run): an "
                   "at-least-once job with --checkpoints filesystem keeps its positions "
                   "there. Default: <data dir>/state; .eos/state on Kafka.")
def checkpoint_show(job: str, bootstrap_servers: str | None, data_dir: str | None,
                    state_dir: str | None) -> None:
    """Print the latest checkpoint of every task of JOB as a properties file (Samza's
    checkpoint tool): one editable line per source partition; versions, generations and
    the positions of internal channels as comments. Edit an offset, then `eos checkpoint
    write JOB FILE`. Refused while a run holds the job."""
    opts = resolve_transport(bootstrap_servers, data_dir)
    with reading_local_log(opts), open_transport(**opts) as t:
        plan = _job_plan(t, job, opts)
        # A running job's positions move with every commit: a file shown now would be
        # stale by the time it is written back, and writing is refused until the run ends
        # anyway (issue 8: both halves of the tool are refused while the job runs).
        ControlLog(t, job).refuse_if_running("the checkpoint tool shows positions")
        manager = ChangeLogCheckpoints(t, job)
        manager.start()
        checkpoints = {}
        for task in plan.tasks:
            manager.register(task.task_id)
            checkpoints[task.task_id] = manager.read_last_checkpoint(task.task_id)
        # An at-least-once job's sources start from its checkpoint store when it has one
        # (runtime/source.py): those positions, with the change log's version details.
        store = (position_store(t, plan, state_root(opts.get("data_dir"), state_dir),
                                create=False)
                 if plan.checkpoints != "changelog" else None)
        kept = {}
        if store is not None:
            for task in plan.tasks:
                if plan.stages[task.stage].is_source:
                    store.register(task.task_id)
                    kept[task.task_id] = store.read_last_checkpoint(task.task_id)
            store.stop()
        pending = list_startpoints(job, transport=t)
        text = checkpoint_tool.render(
            plan, t.name, checkpoints, plan.job_id, kept=kept,
            store=None if store is None else store.describe(),
            pending={(k.topic, k.partition): sp.describe() for k, sp in pending.items()})
    notes = []
    for key, sp in sorted(pending.items()):
        who = "" if key.task is None else f" (task-{key.task})"
        notes.append(f"# startpoint pending for the next run: {key.topic}[{key.partition}]{who}"
                     f" -> {sp.describe()}")
    click.echo(text + "".join(f"{n}\n" for n in notes), nl=False)


@checkpoint_group.command("write")
@click.argument("job")
@click.argument("file", type=click.File("r"))
@transport_options
def checkpoint_write(job: str, file: Any, bootstrap_servers: str | None,
                     data_dir: str | None) -> None:
    """Make the offsets in FILE (from `eos checkpoint show JOB`, edited; - reads stdin) the
    starting positions of JOB's next run. Every line is checked first (task, system,
    stream, partition, offset within the partition's earliest and latest offsets) and a bad
    one is refused naming it. Refused while a run holds the job. The positions are written
    as Startpoints: each task applies them at its next start and records them with its
    next commit; under exactly-once the job keeps its state."""
    text = file.read()
    opts = absolute_paths(resolve_transport(bootstrap_servers, data_dir))
    check_writable(opts)
    with open_transport(**opts) as t:
        plan = _job_plan(t, job, opts)
        ControlLog(t, job).refuse_if_running("the checkpoint tool writes positions")

        def bounds(topic: str, partition: int) -> tuple[int, int]:
            return t.watermarks(TopicPartition(topic, partition))

        parsed = checkpoint_tool.parse(text, plan, t.name, bounds)
        store = MetadataStore(t, job)
        old = store.startpoints()
        puts = {StartpointKey(topic, p, task): Startpoint.offset(offset)
                for task, offsets in parsed.offsets.items()
                for (topic, p), offset in offsets.items()}
        # The file is the newest word on these partitions: earlier Startpoints of them go.
        given = {(k.topic, k.partition) for k in puts}
        replaced = {k: sp for k, sp in old.items() if (k.topic, k.partition) in given}
        store.write(puts, [k for k in replaced if k not in puts])
    click.echo(f"wrote {n_of(len(puts), 'starting position')} for the next run of job {job!r} "
               f"on {log_named(opts)}: each task applies them at its start and records them with "
               f"its next commit (`eos startpoint list {job}` shows them until then)")
    for key in sorted(puts):
        click.echo(f"  task-{key.task} {key.topic}[{key.partition}] -> offset "
                   f"{puts[key].value}")
    for key, sp in sorted(replaced.items()):
        click.echo(f"  replaced the Startpoint pending for {key.describe()}: {sp.describe()}")


@click.group("startpoint")
def startpoint_group() -> None:
    """Set, list and clear the Startpoints of a job's source partitions: where its next
    run starts reading them, ahead of the checkpoint."""


def _timestamp(text: str) -> int:
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--timestamp {text!r}: give milliseconds since the epoch or an ISO "
                          f"date-time such as 2026-11-22T07:00:00Z") from None
    return int(when.timestamp() * 1000)


def _known_job(t: Any, job: str, where: str, *, new_job: bool | None) -> None:
    """A job that never ran here and has no Startpoints is most likely a typo: a
    Startpoint for it would wait, unused, in a metadata topic of its own. ``new_job``
    (``--new-job``) lets one be set for a job's first run; None: a command without it."""
    if new_job or list_startpoints(job, transport=t):
        return
    try:
        if ControlLog(t, job).last_run() is not None:
            return
    except WireFormatError:   # a user's topic of that name: no job
        pass
    jobs = jobs_on(t)
    ran = f"jobs that ran there: {', '.join(jobs)}" if jobs else "no job has run there"
    hint = ", or give --new-job to set one for its first run" if new_job is not None else ""
    raise ConfigError(f"job {job!r} has no run on {where} (it never ran, or was reset) and "
                      f"no Startpoints ({ran}): "
                      f"check the name{hint}")


@startpoint_group.command("set")
@click.argument("job")
@click.argument("stream")
@click.argument("partition", type=click.IntRange(0))
@click.option("--offset", type=click.IntRange(0), default=None, metavar="N",
              help="Start at offset N: refused unless the partition holds it or it is the "
                   "partition's end (and checked again at the task's start).")
@click.option("--timestamp", default=None, metavar="TIME",
              help="Start at the first record at or after TIME: milliseconds since the epoch, "
                   "or an ISO date-time (2026-11-22T07:00:00Z; without a zone, local time).")
@click.option("--oldest", is_flag=True, help="Start at the oldest offset the partition holds.")
@click.option("--upcoming", is_flag=True,
              help="Start at the end the partition had when the run started: only records "
                   "that arrive after it (every attempt of the run starts there).")
@click.option("--task", type=click.IntRange(0), default=None, metavar="N",
              help="Key it by partition and task N (which must read the partition). Default: "
                   "keyed by the partition, given to the task reading it when the next run "
                   "starts.")
@click.option("--new-job", "new_job", is_flag=True,
              help="JOB has not run yet: set it for its first run (a name that never ran and "
                   "has no Startpoints is refused as a likely typo).")
@transport_options
def startpoint_set(job: str, stream: str, partition: int, offset: int | None,
                   timestamp: str | None, oldest: bool, upcoming: bool, task: int | None,
                   new_job: bool, bootstrap_servers: str | None, data_dir: str | None) -> None:
    """Set where JOB's next run starts reading partition PARTITION of its source STREAM,
    ahead of the checkpoint (one of --offset, --timestamp, --oldest, --upcoming). It is
    applied at the task's start and deleted after its next commit. Refused while a run
    holds the job, and for internal channels."""
    chosen = [name for name, on in (("--offset", offset is not None),
                                    ("--timestamp", timestamp is not None),
                                    ("--oldest", oldest), ("--upcoming", upcoming)) if on]
    if len(chosen) != 1:
        raise click.UsageError("give one of --offset, --timestamp, --oldest, --upcoming"
                               + (f" (not {' and '.join(chosen)})" if chosen else ""))
    if offset is not None:
        sp = Startpoint.offset(offset)
    elif timestamp is not None:
        sp = Startpoint.timestamp(_timestamp(timestamp))
    else:
        sp = Startpoint.oldest() if oldest else Startpoint.upcoming()
    opts = absolute_paths(resolve_transport(bootstrap_servers, data_dir))
    check_writable(opts)

    with open_transport(**opts) as t:
        _known_job(t, job, log_named(opts), new_job=new_job)
        key = set_startpoint(job, stream, partition, sp, task=task, transport=t)
    click.echo(f"startpoint of job {job!r}: {key.describe()} -> {sp.describe()} (applied when "
               f"the next run starts)")


@startpoint_group.command("list")
@click.argument("job")
@transport_options
@json_option("Print a JSON list of {stream, partition, task, kind, value, resolver, argument, "
             "run} (a failed command: a JSON error object).")
def startpoint_list(job: str, bootstrap_servers: str | None, data_dir: str | None,
                    as_json: bool) -> None:
    """List JOB's Startpoints: those set and not yet used up (a task deletes its own after
    the commit that recorded where it led)."""
    opts = resolve_transport(bootstrap_servers, data_dir)

    with reading_local_log(opts), open_transport(**opts) as t:
        _known_job(t, job, log_named(opts), new_job=None)
        found = list_startpoints(job, transport=t)
    if as_json:
        click.echo(json.dumps([{"stream": k.topic, "partition": k.partition, "task": k.task,
                                "kind": sp.kind, "value": sp.value, "resolver": sp.resolver,
                                "argument": sp.argument, "run": sp.run}
                               for k, sp in sorted(found.items())], indent=1))
        return
    if not found:
        click.echo(f"no startpoints for job {job!r} on {log_named(opts)}")
        return
    for k, sp in sorted(found.items()):
        run = "" if sp.run is None else f" (given to run {sp.run})"
        click.echo(f"{k.describe()}: {sp.describe()}{run}")


@startpoint_group.command("clear")
@click.argument("job")
@click.option("--stream", default=None, metavar="STREAM",
              help="Only the Startpoints of STREAM. Default: all of the job's.")
@click.option("--partition", type=click.IntRange(0), default=None, metavar="N",
              help="Only those of partition N (with --stream). Default: every partition.")
@transport_options
def startpoint_clear(job: str, stream: str | None, partition: int | None,
                     bootstrap_servers: str | None, data_dir: str | None) -> None:
    """Delete JOB's Startpoints (all, or those of --stream and --partition) before its next
    run uses them. Refused while a run holds the job."""
    if partition is not None and stream is None:
        raise click.UsageError("--partition goes with --stream")
    opts = absolute_paths(resolve_transport(bootstrap_servers, data_dir))
    check_writable(opts)

    with open_transport(**opts) as t:
        _known_job(t, job, log_named(opts), new_job=None)
        gone = clear_startpoints(job, stream, partition, transport=t)
        if stream is not None and not gone:
            check_stream_read(t, job, stream)
    click.echo(f"cleared {n_of(len(gone), 'startpoint')} of job {job!r}"
               + "".join(f"\n  {k.describe()}" for k in sorted(gone)))
