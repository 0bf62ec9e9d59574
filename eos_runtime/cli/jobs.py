"""``eos jobs`` and ``eos topics``: what ran on a transport, and what each topic is for;
``eos reset``: start a job from scratch (``reset.py`` says what it deletes and keeps).

Both only read. A job is known by its control topic, ``<job>.control``, and by its records,
not its name alone (``scan_jobs``: a user's topic of that name is no job): its run records
(``RunStart``) number the runs and keep the job's layout (``joblog/layout.py``), one line
per stage naming its input and output topics, and its stop requests say which runs were
asked to stop (``joblog/control.py``). Each task's last committed version is the newest
commit record of its change-log partition (``joblog/changelog.py``: ``last_commit``, read
from the tail).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from .. import reset
from ..errors import ConfigError, TopicNotFound
from ..joblog.changelog import last_commit
from ..joblog.checkpoints import checkpoint_topic
from ..joblog.control import ControlLog, control_topic, heartbeat_topic, scan_jobs
from ..joblog.layout import (
    layout_channels,
    layout_guarantee,
    layout_job_id,
    layout_sinks,
    layout_sources,
    layout_stages,
)
from ..protocol.runs import run_of
from ..runner import state_root
from ..transport import TopicPartition, Transport, open_transport
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

__all__ = ["jobs_cmd", "topics_cmd", "reset_cmd", "job_info", "topic_uses"]


def job_info(transport: Any, job: str, *, commits: bool = True) -> dict[str, Any]:
    """What ``eos jobs --json`` says of one job."""
    log = ControlLog(transport, job)
    runs = log.runs()
    status, holder, last_ms = log.lease()
    layout = runs[-1].start.layout if runs else ()
    stages = layout_stages(layout)
    info: dict[str, Any] = {
        "job": job,
        "guarantee": layout_guarantee(layout),
        "source": (", ".join(s.input_topic for s in layout_sources(stages)) or None)
        if stages else None,
        "sources": [s.input_topic for s in layout_sources(stages)],
        "sink": (", ".join(layout_sinks(stages)) or None) if stages else None,
        "sinks": layout_sinks(stages),
        "stages": [{"stage": s.index, "input": s.input_topic, "output": s.output_topic,
                    "outputs": [t for t, _ in s.outputs],
                    "tasks": list(s.task_ids), "stores": list(s.stores)} for s in stages],
        "runs": [{"run": r.start.run, "started_ms": r.start.started_ms,
                  "bounded": r.start.bounded, "stopped": r.stopped is not None,
                  "stop_reason": r.stopped.reason if r.stopped is not None else None,
                  "outcome": r.ended.outcome if r.ended is not None else None,
                  "ended_ms": r.ended.ended_ms if r.ended is not None else None,
                  "error": (r.ended.detail or None) if r.ended is not None else None}
                 for r in runs],
        "lease": {"status": status, "run": holder.run if holder else None,
                  "pid": holder.pid if holder else None, "host": holder.host if holder else None,
                  "last_ms": last_ms if holder else None},
        "tasks": [],
    }
    if not commits:
        return info
    changelog = f"{job}.changelog"
    try:
        transport.describe(changelog)
        have_changelog = True
    except TopicNotFound:
        have_changelog = False
    for s in stages:
        for task in s.task_ids:
            commit = (last_commit(transport, TopicPartition(changelog, task))
                      if have_changelog else None)
            info["tasks"].append({
                "task_id": task, "stage": s.index,
                "committed_version": None if commit is None else commit.version,
                "committed_run": None if commit is None else run_of(commit.version),
                "generation": None if commit is None else commit.generation})
    return info


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def _ended_text(run: dict[str, Any], lease: dict[str, Any]) -> str:
    """``, finished`` / ``, stopped`` / ``, failed: ERROR`` / ``, cancelled``, as the run's
    driver recorded; ``, running`` for the run holding the lease; else ``, end not
    recorded`` (a driver that was killed, or a run of an older release)."""
    if run.get("outcome") == "failed":
        return f", failed: {run['error']}" if run.get("error") else ", failed"
    if run.get("outcome"):
        return f", {run['outcome']}"
    if lease.get("run") == run["run"] and lease.get("status") in ("held", "expired", "dead"):
        return ""   # the lease line below says whether its driver runs
    return ", end not recorded"


def _job_lines(info: dict[str, Any]) -> list[str]:
    tasks = sum(len(s["tasks"]) for s in info["stages"])
    lines = [f"{info['job']} ({info['guarantee'] or 'guarantee unknown'}): "
             f"{info['source'] or '?'} -> {info['sink'] or '?'}, "
             f"{n_of(len(info['stages']), 'stage')}, {n_of(tasks, 'task')}, "
             f"{n_of(len(info['runs']), 'run')}"]
    lease = info.get("lease") or {}
    for r in info["runs"]:
        kind = "bounded" if r["bounded"] else "unbounded"
        stop = f", stop asked ({r['stop_reason']})" if r["stopped"] else ""
        lines.append(f"  run {r['run']}: {kind}, started {_when(r['started_ms'])}{stop}"
                     f"{_ended_text(r, lease)}")
    if lease.get("status") == "dead":   # protocol/lease.py L4: judged on the holder's host
        lines.append(f"  driver gone: run {lease['run']}, pid {lease['pid']} on this host "
                     f"({lease['host']}) is no longer running; the next run takes the job over")
    elif lease.get("status") in ("held", "expired"):
        ago = max(time.time() * 1000 - lease["last_ms"], 0) / 1000
        what = "running" if lease["status"] == "held" else "lease expired"
        lines.append(f"  {what}: run {lease['run']}, driver pid {lease['pid']} on host "
                     f"{lease['host']}, last heard from {ago:.0f} s ago")
    if info["tasks"]:
        done = [f"task {t['task_id']} version {t['committed_version']} (run "
                f"{t['committed_run']})" if t["committed_version"] is not None
                else f"task {t['task_id']} none" for t in info["tasks"]]
        lines.append(f"  last commits: {', '.join(done)}")
    return lines


@click.command("jobs")
@transport_options
@click.option("--no-commits", "no_commits", is_flag=True,
              help="Skip each task's last committed version (read from the tail of the job's "
                   "change log).")
@json_option("Print a JSON list of the jobs (a failed command: a JSON error object).")
def jobs_cmd(bootstrap_servers: str | None, data_dir: str | None, no_commits: bool,
             as_json: bool) -> None:
    """List the jobs that ran on the transport, from their control topics.

    For each job: its guarantee, source and sink, stages and tasks; each run (number,
    bounded or unbounded, when it started, whether a stop was asked); and each task's last
    committed version, from its change log.
    """
    opts = resolve_transport(bootstrap_servers, data_dir)
    with reading_local_log(opts), open_transport(**opts) as transport:
        scan = scan_jobs(transport)
        infos = [job_info(transport, job, commits=not no_commits) for job in scan.jobs]
    if as_json:
        click.echo(json.dumps(infos, indent=1))
        return
    for topic, why in scan.not_jobs.items():
        click.echo(f"note: topic {topic!r} is not a job's control topic ({why}); skipped",
                   err=True)
    if not infos:
        click.echo(f"no jobs on {log_named(opts)}")
        return
    for info in infos:
        for line in _job_lines(info):
            click.echo(line)


def topic_uses(transport: Any, topics: list[str]) -> dict[str, list[dict[str, str]]]:
    """Per topic, the jobs that use it and as what: source, sink, channel, changelog,
    control, heartbeats, dead-letters, metadata, checkpoints."""
    uses: dict[str, list[dict[str, str]]] = {t: [] for t in topics}

    def use(topic: str, job: str, role: str) -> None:
        if topic in uses and {"job": job, "role": role} not in uses[topic]:
            uses[topic].append({"job": job, "role": role})

    for job, last in scan_jobs(transport).jobs.items():
        stages = layout_stages(last.start.layout) if last is not None else []
        for src in layout_sources(stages):
            use(src.input_topic, job, "source")
        for topic in layout_sinks(stages):
            use(topic, job, "sink")
        for topic in layout_channels(stages):
            use(topic, job, "channel")
        use(f"{job}.changelog", job, "changelog")
        use(control_topic(job), job, "control")
        use(heartbeat_topic(job), job, "heartbeats")
        use(f"{job}.dead-letters", job, "dead-letters")
        use(f"{job}.metadata", job, "metadata")
        # the checkpoint topic of --checkpoints kafka: the last run's job id, and those an
        # earlier run under another id left (``__eos_checkpoint_<job>_<id>``)
        if last is not None:
            use(checkpoint_topic(job, layout_job_id(last.start.layout)), job, "checkpoints")
        for topic in topics:
            if topic.startswith(checkpoint_topic(job, "")) and "_" not in \
                    topic[len(checkpoint_topic(job, "")):]:
                use(topic, job, "checkpoints")
    return uses


def shown_topic(topic: str) -> bool:
    """Whether ``eos topics`` lists ``topic``: not Kafka's own internal topics
    (``__consumer_offsets``, ``__transaction_state``, any ``__`` name), but the project's
    (``__eos_*``: a job's checkpoint topic)."""
    return not topic.startswith("__") or topic.startswith("__eos_")


_ROLE_TEXT = {"source": "source of", "sink": "sink of", "channel": "channel of",
              "changelog": "change log of", "control": "control topic of",
              "heartbeats": "lease heartbeats of", "dead-letters": "dead letters of",
              "metadata": "startpoints of", "checkpoints": "checkpoint topic of"}


@click.command("topics")
@transport_options
@json_option("Print a JSON list of {topic, partitions, uses: [{job, role}]} (a failed "
             "command: a JSON error object).")
def topics_cmd(bootstrap_servers: str | None, data_dir: str | None, as_json: bool) -> None:
    """List the topics on the transport with their partitions and, for each, which job
    uses it as source, sink, channel, change log, control topic, dead letters or checkpoint
    topic (from the jobs' control topics). Kafka's internal topics (__consumer_offsets,
    __transaction_state) are left out; the project's own __eos_* topics are listed."""
    opts = resolve_transport(bootstrap_servers, data_dir)
    with reading_local_log(opts), open_transport(**opts) as transport:
        names = sorted(t for t in transport.list_topics() if shown_topic(t))
        parts = {t: transport.describe(t).partitions for t in names}
        uses = topic_uses(transport, names)
    if as_json:
        click.echo(json.dumps([{"topic": t, "partitions": parts[t], "uses": uses[t]}
                               for t in names], indent=1))
        return
    if not names:
        click.echo(f"no topics on {log_named(opts)}")
        return
    width = max(len(t) for t in names)
    for t in names:
        used = "; ".join(f"{_ROLE_TEXT[u['role']]} {u['job']}" for u in uses[t]) or "-"
        click.echo(f"{t:<{width}}  {n_of(parts[t], 'partition'):>13}  {used}")


def _refuse_if_running(transport: Transport, job: str, plan: reset.ResetPlan) -> None:
    # A run on other machines holds no store lock here, but it holds the job's lease
    # (in a control topic that is the job's: a user's topic of that name holds none).
    if plan.control:
        ControlLog(transport, job).refuse_if_running("eos reset")
    held = reset.running_tasks(plan.state_dir)
    if held:
        raise ConfigError(f"job {job!r} is running: {', '.join(held)} of its tasks "
                          f"{'holds' if len(held) == 1 else 'hold'} state in "
                          f"{str(plan.state_dir)!r}; stop it first (eos stop {job}) and "
                          f"reset once it ended")


@click.command("reset")
@click.argument("job")
@transport_options
@click.option("--state-dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Where the job's tasks kept their RocksDB state (as given to eos run). "
                   "Default: <data dir>/state; .eos/state on Kafka.")
@click.option("--yes", is_flag=True,
              help="Do not ask for confirmation (needed without a terminal).")
def reset_cmd(job: str, bootstrap_servers: str | None, data_dir: str | None,
              state_dir: str | None, yes: bool) -> None:
    """Delete job JOB's change log, control topic, channels, Startpoints (its metadata
    topic) and local state, so that its next run starts from scratch (run 0, empty state,
    the source read from the start).

    Asks for confirmation first. Never deletes the source or sink topic, the dead
    letters, or another job's topics; refuses while a driver holds the job's lease or a
    task of the job runs on this machine.
    """
    opts = absolute_paths(resolve_transport(bootstrap_servers, data_dir))
    check_writable(opts)
    with open_transport(**opts) as transport:
        plan = reset.plan_reset(transport, job, state_root(opts.get("data_dir"), state_dir))
        _refuse_if_running(transport, job, plan)
        unfinished = reset.unfinished_run(transport, plan)
        what = _reset_text(plan, opts)
        caution = (f"run {unfinished} of job {job!r} did not end with final checkpoints (it "
                   f"failed, was cancelled or killed, or still runs on other machines): "
                   f"make sure none of its tasks still runs" if unfinished is not None else None)
        if not yes:
            if not sys.stdin.isatty():
                raise ConfigError(f"eos reset {job} deletes {what}; it asks for confirmation "
                                  f"and stdin is not a terminal: pass --yes to reset anyway")
            click.echo(f"eos reset {job} deletes {what}.", err=True)
            if caution:
                click.echo(f"warning: {caution}", err=True)
            if not click.confirm("Reset?", default=False, err=True):
                raise ConfigError(f"reset of job {job!r} not confirmed: nothing deleted")
        elif caution:
            click.echo(f"warning: {caution}", err=True)
        _refuse_if_running(transport, job, plan)   # again: a run may have started meanwhile
        deleted = reset.carry_out(transport, plan)
    gone = ", ".join(deleted) or "no topics"
    dirs = "".join(f" and {what} {str(d)!r}" for what, d in _reset_dirs(plan))
    cleared = f"; cleared {_startpoints_text(plan)}" if plan.startpoints else ""
    click.echo(f"reset job {job!r} on {log_named(opts)}: deleted {gone}{dirs}{cleared}"
               f"{_unproven_text(plan)}; its next run "
               + ("uses the kept topics as they are" if plan.unproven else "starts from scratch"))


def _unproven_text(plan: Any) -> str:
    """``; kept T (why), which ...``: topics a run of the job uses that its records do not
    prove it made."""
    if not plan.unproven:
        return ""
    each = ", ".join(f"{t} ({why})" for t, why in plan.unproven.items())
    return f"; kept {each}, which no record of the job's proves it made"


def _startpoints_text(plan: Any) -> str:
    """``2 Startpoints (lines[0]: offset 5990; lines[1] task 1: offset 7, given to run 3)``."""
    each = [f"{k.describe()}: {sp.describe()}"
            + ("" if sp.run is None else f", given to run {sp.run}")
            for k, sp in sorted(plan.startpoints.items())]
    return f"{n_of(len(each), 'Startpoint')} ({'; '.join(each)})"


def _reset_dirs(plan: Any) -> list[tuple[str, Any]]:
    """The directories a reset deletes, each with what it is."""
    return [(what, d) for what, d in (("state directory", plan.state_dir),
                                      ("checkpoint directory", plan.checkpoint_files))
            if d is not None]


def _reset_text(plan: Any, opts: dict[str, Any]) -> str:
    parts = [f"topic{'s' * (len(plan.topics) != 1)} {', '.join(plan.topics)}"
             if plan.topics else "no topics"]
    parts += [f"{what} {str(d)!r}" for what, d in _reset_dirs(plan)]
    if plan.startpoints:
        parts.append(_startpoints_text(plan))
    kept = f" (kept: {', '.join(plan.kept)}, and the source and sink)" if plan.kept else (
        " (the source and sink topics are kept)")
    return f"{' and '.join(parts)} on {log_named(opts)}{kept}{_unproven_text(plan)}"
