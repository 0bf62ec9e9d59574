"""What ``eos reset JOB`` deletes, what it keeps, and whether the job is running.

A reset makes a job start from scratch: its next run is run 0 again, reads its source
from the start (``offset_default``) with empty state, and may have another layout. It
deletes only what the job's records prove it made (``plan_reset`` says how; a name
proves nothing):

* ``<job>.changelog`` (state changes and checkpoints), ``<job>.control`` (its runs) and
  ``<job>.heartbeats`` (its drivers' lease heartbeats);
* its channels, ``<job>.shuffle-N``: a fresh job would otherwise read the old run's
  records in them again;
* its local state directory ``<state dir>/<job>/`` (RocksDB stores, buffers, pid and
  progress files), and only if everything in it is a task's;
* an at-least-once job's source positions kept outside the change log (its last run's
  layout says where): the checkpoint topic ``__eos_checkpoint_<job>_<job id>``, or the
  files ``<state dir>/checkpoints/<job>/<job id>/task-N.json``. Kept, they would be where
  the "fresh" run's sources start;
* its Startpoints, with their store ``<job>.metadata`` (``joblog/startpoints.py``): the next run
  is run 0 again and would apply a pending one, and one fanned out for an old, higher run
  number also after its own first commit (P1b), reading committed input again. A
  metadata topic holding records that are no Startpoint's is kept, its Startpoints
  deleted from it one by one.

It keeps the source and sink topics, the dead letters (output, like the sink), and
every other job's topics. It keeps the local log's fences too (``<data dir>/fences/
<job>.task-N``): a new task takes a generation above its fence's, so a zombie of the
old job is fenced at its next change-log append, and the new task's restore command
fences its channel records (an older generation) downstream. Kafka keeps nothing of
the kind: the broker still fences the old transactional producers (change log, sink),
but generations restart at 1, so channel records of a zombie of the old job that
outlived the reset could pass for newer ones.
Hence the refusal while a task of the job holds its state on this machine, and the
docs' rule: on Kafka, reset only a job whose tasks are gone.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError, TransportError, WireFormatError
from .joblog.changelog import last_commit
from .joblog.checkpoints import checkpoint_topic, parse_checkpoint
from .joblog.control import (
    ControlLog,
    RunInfo,
    control_topic,
    fold_runs,
    heartbeat_topic,
)
from .joblog.layout import layout_channels, layout_checkpoints, layout_job_id, layout_stages
from .joblog.startpoints import MetadataStore, Startpoint, StartpointKey, metadata_topic
from .protocol import wire
from .protocol.runs import run_end
from .transport import Record, TopicPartition, Transport

__all__ = ["ResetPlan", "plan_reset", "carry_out", "running_tasks", "unfinished_run"]

#: What a job's tasks leave in ``<state dir>/<job>/`` (runtime/task.py, runtime/progress.py).
_TASK_ENTRY = re.compile(r"^(task-\d+(\.pid|\.progress|\.progress\.\d+\.tmp|\.attempt-\d+-\d+)?"
                         r"|buffer-\d+(-.*)?)$")
#: What ``FileSystemCheckpoints`` writes in its directory (joblog/checkpoints.py).
_CHECKPOINT_FILE = re.compile(r"^task-\d+\.json(\.tmp)?$")


@dataclass
class ResetPlan:
    job: str
    topics: list[str] = field(default_factory=list)       # to delete, the control topic last
    kept: list[str] = field(default_factory=list)         # the job's other topics, kept
    state_dir: Path | None = None                          # to delete, None: there is none
    runs: int = 0
    checkpoint_files: Path | None = None                   # file-system positions, to delete
    startpoints: dict[StartpointKey, Startpoint] = field(default_factory=dict)  # to delete
    # The Startpoints to delete one by one: their topic holds other records, and is kept.
    startpoint_keys: list[StartpointKey] = field(default_factory=list)
    # Kept topics a run of the job would use, each with why it is not proven the job's.
    unproven: dict[str, str] = field(default_factory=dict)
    last_run: RunInfo | None = None                        # None: no run recorded
    control: bool = False                                  # <job>.control is the job's


def _own(job: str, topic: str) -> bool:
    return topic.startswith(f"{job}.")


def _first_records(transport: Transport, topic: str) -> list[Record]:
    """The first record of each partition of ``topic`` that holds one."""
    tps = [TopicPartition(topic, p) for p in range(transport.describe(topic).partitions)]
    ends = {tp: transport.watermarks(tp, read_committed=False) for tp in tps}
    left = {tp for tp, (low, high) in ends.items() if high > low}
    out: list[Record] = []
    with transport.consumer(read_committed=False) as c:
        c.assign({tp: ends[tp][0] for tp in left})
        deadline = time.monotonic() + 60
        while left:
            if time.monotonic() > deadline:
                raise TransportError(f"reading the first records of {topic!r} timed out")
            for r in c.poll(100, 0.5):
                tp = TopicPartition(r.topic, r.partition)
                if tp in left:
                    out.append(r)
                    left.discard(tp)
            # Kafka: a partition may hold only transaction markers, which no poll returns.
            left = {tp for tp in left if c.position(tp) < ends[tp][1]}
    return out


def _not_made_of(transport: Transport, topic: str, decode: Callable[[bytes | None], object],
                 kind: str) -> str | None:
    """Why ``topic`` is not proven to be made of ``kind`` records (None: each partition is
    empty or begins with one). A job's run writes only its own records to its change log,
    channels and heartbeats, so the first record of each partition tells a topic the job
    made from a user's it came upon."""
    for r in _first_records(transport, topic):
        try:
            decode(r.value)
        except (WireFormatError, ConfigError):
            return f"{topic}[{r.partition}]@{r.offset} is no {kind} record"
    return None


def _control(transport: Transport, job: str) -> tuple[list[RunInfo] | None, str]:
    """The runs in ``<job>.control`` when the topic is the job's: it holds records, all of
    them control records (a driver appends its lease before anything else). Otherwise
    None and why not."""
    try:
        records = ControlLog(transport, job).records()
    except WireFormatError as exc:
        return None, f"{exc.topic}[{exc.partition}]@{exc.offset} is no control record"
    if not records:
        return None, f"{control_topic(job)} holds no records"
    return fold_runs(records), ""


def _checkpoint_record(raw: bytes | None) -> object:
    return parse_checkpoint(raw or b"", "the checkpoint topic")


def plan_reset(transport: Transport, job: str, state_root: str | Path) -> ResetPlan:
    """What resetting ``job`` deletes; ``ConfigError`` when there is nothing of it, or
    when its state directory holds something a task did not make.

    A topic is deleted only when the job's records prove it made it: ``<job>.control``
    when all its records are control records; with a run in it (whose layout names the
    channels and the checkpoint topic), the topics that run made, each only when every
    partition is empty or begins with a record of the kind the job writes there; the
    metadata topic when all its records are Startpoints. The control topic goes last, so
    a reset cut short still finds its proof and can be run again."""
    existing = set(transport.list_topics())
    runs, not_ours = _control(transport, job) if control_topic(job) in existing else (None, "")
    last = runs[-1] if runs else None
    layout = last.start.layout if last is not None else ()
    stages = layout_stages(layout)
    store, job_id = layout_checkpoints(layout), layout_job_id(layout)
    made: list[tuple[str, Callable[[bytes | None], object], str]] = []
    if runs is not None:
        made.append((heartbeat_topic(job), wire.decode_control, "heartbeat"))
    if last is not None:
        made.append((f"{job}.changelog", wire.decode_changelog, "change-log"))
        # Channels are the outputs a stage reads; a layout naming a topic outside the
        # job's own names is not trusted with a deletion.
        made += [(topic, wire.decode_channel, "channel")
                 for topic in layout_channels(stages) if _own(job, topic)]
        if store == "kafka":
            made.append((checkpoint_topic(job, job_id), _checkpoint_record, "checkpoint"))
    topics: list[str] = []
    unproven: dict[str, str] = {}
    for topic, decode, kind in made:
        if topic in existing:
            why = _not_made_of(transport, topic, decode, kind)
            if why is None:
                topics.append(topic)
            else:
                unproven[topic] = why
    meta = MetadataStore(transport, job)
    startpoints, foreign = meta.contents()
    if metadata_topic(job) in existing and not foreign and (runs is not None or startpoints
                                                            or not _empty(transport, meta.topic)):
        topics.append(metadata_topic(job))
    if runs is not None:
        topics.append(control_topic(job))
    kept = [t for t in sorted(existing) if _own(job, t) and t not in topics]
    state = Path(state_root).absolute() / job
    files = Path(state_root).absolute() / "checkpoints" / job / job_id
    plan = ResetPlan(job, topics, kept, state if state.is_dir() else None,
                     len(runs or ()),
                     files if store == "filesystem" and files.is_dir() else None,
                     startpoints, sorted(startpoints) if foreign else [], unproven, last,
                     runs is not None)
    if store == "filesystem" and plan.checkpoint_files is None and _committed(
            transport, f"{job}.changelog", existing):
        # Its runs wrote positions into files, under a --state-dir not given here: kept,
        # they would start the next run from there with empty state.
        raise ConfigError(f"job {job!r} keeps its source positions in files (checkpoints "
                          f"filesystem) and its runs checkpointed, but no such files are "
                          f"in {str(files)!r}: give --state-dir as its runs did, so that "
                          f"the reset deletes them with the rest")
    _only_made_by_the_job(job, plan.state_dir, _TASK_ENTRY, "state directory")
    _only_made_by_the_job(job, plan.checkpoint_files, _CHECKPOINT_FILE, "checkpoint directory")
    if (not plan.topics and plan.state_dir is None and plan.checkpoint_files is None
            and not plan.startpoint_keys):
        ran = (f"{not_ours}, so no run of it is recorded" if not_ours
               else f"no run of it is recorded ({control_topic(job)} does not exist)")
        alone = (f"; left alone: {', '.join(kept)} (named like its topics, but no record of "
                 f"the job's shows it made them)" if kept else "")
        raise ConfigError(f"job {job!r} has nothing to reset: {ran}, it has no Startpoints "
                          f"and no state directory {str(state)!r} (is --state-dir the one "
                          f"its runs used?){alone}")
    return plan


def _committed(transport: Transport, changelog: str, existing: set[str]) -> bool:
    """Whether a task of the job committed a checkpoint (a commit record in its log)."""
    if changelog not in existing:
        return False
    return any(last_commit(transport, TopicPartition(changelog, p)) is not None
               for p in range(transport.describe(changelog).partitions))


def _empty(transport: Transport, topic: str) -> bool:
    tps = [TopicPartition(topic, p) for p in range(transport.describe(topic).partitions)]
    return all(low >= high for low, high in
               (transport.watermarks(tp, read_committed=False) for tp in tps))


def _only_made_by_the_job(job: str, directory: Path | None, made: re.Pattern[str],
                          what: str) -> None:
    """``ConfigError`` when ``directory`` holds an entry the job's tasks do not make."""
    if directory is None:
        return
    foreign = sorted(p.name for p in directory.iterdir() if not made.match(p.name))
    if foreign:
        raise ConfigError(f"{what} {str(directory)!r} holds "
                          f"{', '.join(repr(f) for f in foreign[:5])}, which no task of job "
                          f"{job!r} made: reset deletes only what the job made; move it "
                          f"away (or give the right --state-dir)")


def running_tasks(state_dir: Path | None) -> list[str]:
    """The task stores in ``state_dir`` that a live process holds open (RocksDB keeps a
    lock on each store's LOCK file while it is open): tasks of the job running on this
    machine."""
    if state_dir is None or not state_dir.is_dir():
        return []
    held = []
    for lock in sorted(state_dir.glob("task-*/LOCK")):
        try:
            f = open(lock, "a+b")
        except FileNotFoundError:
            continue
        except OSError as exc:   # not a task's lock: the user's permission to look
            raise ConfigError(f"cannot open {str(lock)!r} to see whether a task of the job "
                              f"holds it: {exc.strerror or exc}; reset as the user the "
                              f"job's tasks ran as") from exc
        with f:
            try:
                fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.lockf(f, fcntl.LOCK_UN)
            except OSError:
                held.append(lock.parent.name)
    return held


def unfinished_run(transport: Transport, plan: ResetPlan) -> int | None:
    """The job's last run, if some task did not commit its end (``run_end``): a run that
    failed, was cancelled or killed, or still runs (maybe on other machines). None when
    it ended with final checkpoints everywhere, or never ran."""
    last = plan.last_run
    if last is None:
        return None
    run = last.start.run
    changelog = f"{plan.job}.changelog"
    if changelog not in plan.topics:
        return run          # none, or not proven the job's: no task committed to it
    tasks = [t for s in layout_stages(last.start.layout) for t in s.task_ids]
    for task in tasks:
        commit = last_commit(transport, TopicPartition(changelog, task))
        if commit is None or commit.version < run_end(run):
            return run
    return None


def carry_out(transport: Transport, plan: ResetPlan) -> list[str]:
    """Delete what ``plan`` lists: the state directory first (a reset stopped half-way
    then still shows the job's topics, so it can be reset again); returns the topics
    deleted."""
    for what, directory in (("state directory", plan.state_dir),
                            ("checkpoint directory", plan.checkpoint_files)):
        if directory is None:
            continue
        try:
            shutil.rmtree(directory)
        except OSError as exc:
            on = f" ({exc.filename})" if exc.filename else ""
            raise ConfigError(f"could not delete the {what} {str(directory)!r}: "
                              f"{exc.strerror or exc}{on}; the job's topics are not deleted "
                              f"yet: mend it and run eos reset {plan.job} again") from exc
    MetadataStore(transport, plan.job).write({}, plan.startpoint_keys)
    control = control_topic(plan.job)
    first = [t for t in plan.topics if t != control]
    # The control topic is the proof the rest was the job's: it goes once they are gone.
    return transport.delete_topics(first) + transport.delete_topics(
        [control] if control in plan.topics else [])
