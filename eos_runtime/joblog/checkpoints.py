"""Checkpoint managers: where a job's tasks keep their input positions (Samza 0.7's contract).

    manager.start()
    manager.register(task)
    manager.write_checkpoint(task, Checkpoint({("in", 0): 42}))
    manager.read_last_checkpoint(task)   # -> Checkpoint | None
    manager.stop()

A checkpoint is a map stream-partition -> offset per task: the offset of the first record
not yet processed. Three implementations pass one contract suite
(``tests/test_checkpoint_managers.py``):

- ``ChangeLogCheckpoints``: the commit records of ``<job>.changelog`` (the default, and the
  only one exactly-once may use: its checkpoint is atomic with state and output because
  it IS the task's commit record). Reading gives the last commit's input positions, its
  version and generation (shown, not editable). Writing (for operators, while the job is
  stopped) appends a new generation's commit of the same version with the new input
  positions and everything else kept: it fences any zombie of the task, and the task's
  next start recovers the same state (the new commit carries no changes) with the new
  positions.
- ``TopicCheckpoints``: a checkpoint topic named like Samza's,
  ``__eos_checkpoint_<job>_<job-id>``, one partition per task (partitioned like the job);
  the last record of a task's partition is its checkpoint.
- ``FileSystemCheckpoints``: one JSON file per task under a directory (Samza's
  ``FileSystemCheckpointManager``), replaced atomically.

The last two are for at-least-once jobs: their write is not atomic with the change log.
"""

from __future__ import annotations

import json
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import ConfigError, TopicNotFound, TransportError
from ..protocol import wire
from ..protocol.recovery import next_generation
from ..transport import TopicPartition, TopicSpec, Transport
from .changelog import ChangeLogWriter, fence_id, fold_log, last_commit
from .control import ControlLog
from .tail import backwards

__all__ = ["Checkpoint", "CheckpointManager", "ChangeLogCheckpoints", "TopicCheckpoints",
           "FileSystemCheckpoints", "checkpoint_topic", "parse_checkpoint"]

StreamPartition = tuple[str, int]


@dataclass(frozen=True)
class Checkpoint:
    """One task's input positions; ``version`` and ``generation`` only where the backend
    knows them (the change log), for display."""

    offsets: Mapping[StreamPartition, int]
    version: int | None = field(default=None, compare=False)
    generation: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for (stream, partition), offset in self.offsets.items():
            if not isinstance(stream, str) or type(partition) is not int or partition < 0:
                raise ConfigError(f"checkpoint key {(stream, partition)!r}: expected "
                                  f"(stream name, partition number)")
            if type(offset) is not int or offset < 0:
                raise ConfigError(f"checkpoint offset of {stream}[{partition}] must be a "
                                  f"non-negative integer, not {offset!r}")


class CheckpointManager(ABC):
    """Samza's ``CheckpointManager``: start, register each task, write and read, stop."""

    name: str = ""

    def __init__(self) -> None:
        self._registered: set[int] = set()
        self._started = False

    def start(self) -> None:
        self._started = True

    def register(self, task: int) -> None:
        if type(task) is not int or task < 0:
            raise ConfigError(f"task {task!r}: expected a task number")
        self._registered.add(task)

    def _check(self, task: int) -> None:
        if not self._started:
            raise ConfigError(f"{self.name} checkpoint manager: call start() first")
        if task not in self._registered:
            raise ConfigError(f"{self.name} checkpoint manager: task {task} is not registered")

    def write_checkpoint(self, task: int, checkpoint: Checkpoint) -> None:
        self._check(task)
        self._write(task, checkpoint)

    def read_last_checkpoint(self, task: int) -> Checkpoint | None:
        self._check(task)
        return self._read(task)

    def stop(self) -> None:
        self._started = False

    @abstractmethod
    def _write(self, task: int, checkpoint: Checkpoint) -> None: ...

    @abstractmethod
    def _read(self, task: int) -> Checkpoint | None: ...


class ChangeLogCheckpoints(CheckpointManager):
    name = "change-log"

    def __init__(self, transport: Transport, job: str) -> None:
        super().__init__()
        self.t = transport
        self.job = job
        self.topic = f"{job}.changelog"

    def _commit(self, task: int) -> wire.ChangeLogCommit | None:
        try:
            return last_commit(self.t, TopicPartition(self.topic, task))
        except TopicNotFound:
            return None

    def _read(self, task: int) -> Checkpoint | None:
        commit = self._commit(task)
        if commit is None:
            return None
        return Checkpoint({(i.topic, i.partition): i.offset for i in commit.inputs},
                          commit.version, commit.generation)

    def _write(self, task: int, checkpoint: Checkpoint) -> None:
        # A running task would be fenced mid-run by this write: refuse as the tool does.
        ControlLog(self.t, self.job).refuse_if_running("checkpoints can be written")
        tp = TopicPartition(self.topic, task)
        try:
            fold = fold_log(self.t, tp)
        except TopicNotFound:
            raise ConfigError(f"{self.topic!r} does not exist: the job never ran, so it has no "
                              f"checkpoint to change") from None
        last = fold.commit
        inputs = tuple(wire.InputPosition(s, p, o)
                       for (s, p), o in sorted(checkpoint.offsets.items()))
        base = last if last is not None else wire.ChangeLogCommit(0, 0)
        fence = fence_id(self.job, task)
        generation = next_generation(fold.generation, self.t.fence_generation(fence))
        writer = ChangeLogWriter.open(self.t, tp, fence, generation, fenced=True)
        try:
            writer.start_generation(base.version)
            offset, _ = writer.commit(replace(base, generation=generation, inputs=inputs))
        finally:
            writer.close()
        # Kafka writes a transaction's commit markers after commit_transaction returns: a
        # read_committed reader (the next read, the task's recovery) sees it once the
        # partition's last stable offset has passed it.
        deadline = time.monotonic() + 60
        while self.t.watermarks(tp)[1] <= offset:
            if time.monotonic() > deadline:
                raise TransportError(f"{tp.topic}[{tp.partition}]: the written checkpoint at "
                                     f"offset {offset} did not become readable within 60 s")
            time.sleep(0.01)


def checkpoint_topic(job: str, job_id: str = "1") -> str:
    """Samza's ``__samza_checkpoint_<job>_<id>``, for this project."""
    return f"__eos_checkpoint_{job}_{job_id}"


class TopicCheckpoints(CheckpointManager):
    name = "topic"

    def __init__(self, transport: Transport, job: str, tasks: int, job_id: str = "1", *,
                 create: bool = True) -> None:
        super().__init__()
        self.t = transport
        self.topic = checkpoint_topic(job, job_id)
        self.tasks = tasks
        self.create = create       # False: a reader's; a missing topic holds no checkpoint
        self._missing = False

    def start(self) -> None:
        try:
            parts = self.t.describe(self.topic).partitions
        except TopicNotFound:
            if not self.create:
                self._missing = True
                super().start()
                return
            self.t.create_topics([TopicSpec(self.topic, self.tasks, compacted=True,
                                            keep_forever=True)])
            parts = self.tasks
        if parts != self.tasks:
            raise ConfigError(f"checkpoint topic {self.topic!r} has {parts} partitions but the "
                              f"job has {self.tasks} tasks: it belongs to another layout")
        super().start()

    def describe(self) -> str:
        return f"checkpoint topic {self.topic}"

    def register(self, task: int) -> None:
        if type(task) is int and task >= self.tasks:
            raise ConfigError(f"task {task}: the job has tasks 0..{self.tasks - 1}")
        super().register(task)

    def _write(self, task: int, checkpoint: Checkpoint) -> None:
        with self.t.producer() as producer:
            producer.produce(self.topic, task, _encode(checkpoint), key=b"%d" % task)
            producer.flush()

    def _read(self, task: int) -> Checkpoint | None:

        if self._missing:
            return None
        # From the tail: at a short commit interval the partition gains ten records a
        # second, and neither the local log nor Kafka's active segment compacts them.
        for window in backwards(self.t, TopicPartition(self.topic, task), first=64,
                                read_committed=True):
            for r in reversed(window):
                if r.value is not None:   # a tombstone is passed over
                    return parse_checkpoint(r.value, f"{self.topic}[{task}]")
        return None


class FileSystemCheckpoints(CheckpointManager):
    name = "file-system"

    def __init__(self, directory: str | os.PathLike[str], job: str, job_id: str = "1") -> None:
        super().__init__()
        self.directory = Path(directory) / job / job_id

    def describe(self) -> str:
        return f"file-system checkpoints in {self.directory}"

    def _path(self, task: int) -> Path:
        return self.directory / f"task-{task}.json"

    def _write(self, task: int, checkpoint: Checkpoint) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(task)
        tmp = path.with_suffix(".json.tmp")
        with open(tmp, "wb") as f:
            f.write(_encode(checkpoint))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)   # a reader sees the old checkpoint or the new, never half

    def _read(self, task: int) -> Checkpoint | None:
        try:
            raw = self._path(task).read_bytes()
        except FileNotFoundError:
            return None
        return parse_checkpoint(raw, str(self._path(task)))


def _encode(checkpoint: Checkpoint) -> bytes:
    return json.dumps({"offsets": [[s, p, o] for (s, p), o in sorted(checkpoint.offsets.items())]},
                      separators=(",", ":")).encode()


def parse_checkpoint(raw: bytes, where: str) -> Checkpoint:
    """A checkpoint record or file's value; ``ConfigError`` naming ``where`` if unreadable."""
    try:
        doc = json.loads(raw)
        return Checkpoint({(s, p): o for s, p, o in doc["offsets"]})
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"checkpoint at {where} is not readable: {exc}") from None
