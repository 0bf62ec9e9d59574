"""What ``eos reset JOB`` deletes, what it keeps, and whether the job is running.

A reset makes a job start from scratch: its next run is run 0 again, reads its source
from the start (``offset_default``) with empty state, and may have another layout. It
deletes only what the job made:

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
* its Startpoints, with their store ``<job>.metadata`` (``startpoints.py``): the next run
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
from dataclasses import dataclass, field
from pathlib import Path

from .checkpoints import checkpoint_topic
from .errors import ConfigError, TopicNotFound
from .protocol.runs import run_end
from .runtime.changelog import last_commit
from .runtime.control import (
    ControlLog,
    control_topic,
    heartbeat_topic,
    layout_checkpoints,
    layout_job_id,
    layout_stages,
)
from .startpoints import MetadataStore, Startpoint, StartpointKey, metadata_topic
from .transport import TopicPartition, Transport

__all__ = ["ResetPlan", "plan_reset", "carry_out", "running_tasks", "unfinished_run"]

#: What a job's tasks leave in ``<state dir>/<job>/`` (runtime/task.py, runtime/progress.py).
_TASK_ENTRY = re.compile(r"^(task-\d+(\.pid|\.progress|\.progress\.\d+\.tmp|\.attempt-\d+-\d+)?"
                         r"|buffer-\d+(-.*)?)$")
#: What ``FileSystemCheckpoints`` writes in its directory (checkpoints.py).
_CHECKPOINT_FILE = re.compile(r"^task-\d+\.json(\.tmp)?$")


@dataclass
class ResetPlan:
    job: str
    topics: list[str] = field(default_factory=list)       # to delete, all named <job>.*
    kept: list[str] = field(default_factory=list)         # the job's other topics, kept
    state_dir: Path | None = None                          # to delete, None: there is none
    runs: int = 0
    checkpoint_files: Path | None = None                   # file-system positions, to delete
    startpoints: dict[StartpointKey, Startpoint] = field(default_factory=dict)  # to delete
    # The Startpoints to delete one by one: their topic holds other records, and is kept.
    startpoint_keys: list[StartpointKey] = field(default_factory=list)


def _own(job: str, topic: str) -> bool:
    return topic.startswith(f"{job}.")


def plan_reset(transport: Transport, job: str, state_root: str | Path) -> ResetPlan:
    """What resetting ``job`` deletes; ``ConfigError`` when there is nothing of it, or
    when its state directory holds something a task did not make."""
    existing = set(transport.list_topics())
    runs = ControlLog(transport, job).runs()
    stages = layout_stages(runs[-1].start.layout) if runs else []
    wanted = [f"{job}.changelog", control_topic(job), heartbeat_topic(job)]
    # Channels are the outputs of every stage but the last; a layout naming a topic
    # outside the job's own names is not trusted with a deletion.
    wanted += [s.output_topic for s in stages[:-1] if _own(job, s.output_topic)]
    wanted += sorted(t for t in existing if re.fullmatch(re.escape(job) + r"\.shuffle-\d+", t))
    layout = runs[-1].start.layout if runs else ()
    store, job_id = layout_checkpoints(layout), layout_job_id(layout)
    if store == "kafka":
        wanted.append(checkpoint_topic(job, job_id))
    startpoints, foreign = MetadataStore(transport, job).contents()
    if not foreign:
        wanted.append(metadata_topic(job))
    topics = [t for t in dict.fromkeys(wanted) if t in existing]
    kept = [t for t in sorted(existing) if _own(job, t) and t not in topics]
    state = Path(state_root).absolute() / job
    files = Path(state_root).absolute() / "checkpoints" / job / job_id
    plan = ResetPlan(job, topics, kept, state if state.is_dir() else None, len(runs),
                     files if store == "filesystem" and files.is_dir() else None,
                     startpoints, sorted(startpoints) if foreign else [])
    _only_made_by_the_job(job, plan.state_dir, _TASK_ENTRY, "state directory")
    _only_made_by_the_job(job, plan.checkpoint_files, _CHECKPOINT_FILE, "checkpoint directory")
    if (not plan.topics and plan.state_dir is None and plan.checkpoint_files is None
            and not plan.startpoint_keys):
        raise ConfigError(f"job {job!r} has nothing to reset: no change log, control topic, "
                          f"channels or state directory {str(state)!r} (is --state-dir the "
                          f"one its runs used?)")
    return plan


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
            with open(lock, "a+b") as f:
                fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.lockf(f, fcntl.LOCK_UN)
        except FileNotFoundError:
            continue
        except OSError:
            held.append(lock.parent.name)
    return held


def unfinished_run(transport: Transport, job: str) -> int | None:
    """The job's last run, if some task did not commit its end (``run_end``): a run that
    failed, was cancelled or killed, or still runs (maybe on other machines). None when
    it ended with final checkpoints everywhere, or never ran."""
    last = ControlLog(transport, job).last_run()
    if last is None:
        return None
    run = last.start.run
    tasks = [t for s in layout_stages(last.start.layout) for t in s.task_ids]
    for task in tasks:
        try:
            commit = last_commit(transport, TopicPartition(f"{job}.changelog", task))
        except TopicNotFound:
            return run
        if commit is None or commit.version < run_end(run):
            return run
    return None


def carry_out(transport: Transport, plan: ResetPlan) -> list[str]:
    """Delete what ``plan`` lists: the state directory first (a reset stopped half-way
    then still shows the job's topics, so it can be reset again); returns the topics
    deleted."""
    if plan.state_dir is not None:
        shutil.rmtree(plan.state_dir)
    if plan.checkpoint_files is not None:
        shutil.rmtree(plan.checkpoint_files)
    MetadataStore(transport, plan.job).write({}, plan.startpoint_keys)
    return transport.delete_topics(plan.topics)
