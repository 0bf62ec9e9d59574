"""``LocalLogTransport``: topics, partitions, watermarks, appends and fences on the files.

The writer's rules that make the log safe for several processes:

* **One commit point per append.** A writer takes an exclusive ``flock`` on the
  partition's ``.end`` file, writes its frames after the committed end, then writes
  the commit pointer (next offset, end position). Only then is the batch
  acknowledged. Readers read the pointer first and never look past it, so a batch is
  visible whole or not at all.
* **A torn tail repairs itself.** A writer killed mid-append leaves bytes past the
  committed end, and maybe index entries pointing there; the next writer truncates
  both under the lock before appending, so a dead writer's index entry never ends up
  below a committed end. Readers trust only index entries below the committed end.
* **Deleting records moves a low watermark, never an offset.** ``delete_records``
  writes ``<p>.low`` (replaced atomically, under the partition lock) and then frees the
  file's bytes below it by punching a hole (Linux; elsewhere the bytes stay and only the
  watermark moves). Readers check the watermark before reading a partition, so nothing
  reads the hole: a position below it is ``OffsetOutOfRange``, as on Kafka.
* **A fence is a generation in a file.** ``fenced_producer`` registers a generation
  under ``fences/<id>``; its appends check it under the partition lock, so once a newer
  generation registered, the older one's appends are refused (``ProducerFenced``).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import struct
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

from ...errors import (
    ConfigError,
    LogCorrupted,
    OffsetOutOfRange,
    ProducerFenced,
    TopicExists,
    TopicNotFound,
    TransportError,
)
from ...faults import crash_point, is_armed
from ..base import Consumer, Producer, TopicPartition, TopicSpec, Transport
from .clients import _LocalConsumer, _LocalProducer
from .files import (
    _FRAME,
    _FRAME_BODY_START,
    _INDEX,
    _READ_ONLY_ERRNOS,
    INDEX_INTERVAL,
    _PartitionFiles,
    _Pointer,
    _punch_hole,
    _pwrite_all,
    _pwritev_all,
    _scan,
    _write_pointer,
)

__all__ = ["LocalLogTransport"]

#: Partitions whose files a transport keeps open (3 descriptors each), the ones used
#: last: a process touching more reopens the others when it uses them again (three
#: opens). Kept open for good, 300 partitions used up a limit of 1024 files.
OPEN_PARTITIONS = 64
# Not led by a dot: "." and "..", and the directories a topic is made and deleted in
# (".creating-*", ".deleting-*"), which list_topics passes over.
_TOPIC_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,248}")
_NAME_RULE = "use 1-249 of A-Z a-z 0-9 . _ -, not led by a dot"


_FENCE = struct.Struct("<q")


def _check_topic_name(name: str) -> None:
    if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name):
        raise ConfigError(f"invalid topic name {name!r}: {_NAME_RULE}")


def _lock_partitions(topic_dir: Path) -> list[int]:
    """Every partition of a topic locked as an append locks it (its .end file), in
    partition order; the descriptors, whose close releases them."""
    fds: list[int] = []
    try:
        for end in sorted(topic_dir.glob("*.end"), key=lambda f: int(f.stem)):
            fd = os.open(end, os.O_RDONLY)
            fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
    except (OSError, ValueError):
        pass   # what cannot be locked (a topic half deleted): the rename decides
    return fds


def _still_named(files: _PartitionFiles) -> bool:
    """Whether a partition's open files are still the ones its path names."""
    try:
        return os.stat(f"{files.name}.end").st_ino == os.fstat(files.end).st_ino
    except FileNotFoundError:
        return False


class LocalLogTransport(Transport):
    """The embedded log under ``data_dir``. Safe for several processes at once."""

    name = "local"
    supports_transactions = False

    @property
    def location(self) -> str:
        return f"the local log in {self.root}"

    def __init__(self, data_dir: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.root = Path(data_dir)
        # Made by the first write (a topic, a fence), not here: a read of a mistyped
        # --data-dir leaves nothing behind, and a read-only directory without a log in it
        # has no topics to read.
        self.topics_dir = self.root / "topics"
        self.fsync = fsync
        self._specs: dict[str, TopicSpec] = {}
        # The partitions used last, most recent last (OPEN_PARTITIONS at most).
        self._files: OrderedDict[TopicPartition, _PartitionFiles] = OrderedDict()

    # ------------------------------------------------------------------ topics

    def create_topics(self, specs: Iterable[TopicSpec]) -> None:
        for spec in specs:
            _check_topic_name(spec.name)
            if spec.partitions < 1:
                raise ConfigError(f"topic {spec.name!r}: partitions must be >= 1, "
                                  f"not {spec.partitions}")
            try:
                existing = self.describe(spec.name)
            except TopicNotFound:
                existing = None
            if existing is None:
                # Build the topic aside and rename it in: atomic, so concurrent creators
                # cannot leave a half-made topic, and the loser of the race just checks.
                tmp = self.topics_dir / f".creating-{uuid.uuid4().hex}"
                try:
                    tmp.mkdir(parents=True)
                except OSError as exc:
                    raise self._not_writable(f"cannot create topic {spec.name!r}", exc) from None
                meta = {"format": 1, "partitions": spec.partitions, "compacted": spec.compacted}
                try:
                    (tmp / "topic.json").write_text(json.dumps(meta))
                    for p in range(spec.partitions):
                        for suffix in (".log", ".end", ".idx"):
                            (tmp / f"{p}{suffix}").touch()
                except OSError as exc:   # a full disk, say: one line, and nothing half made
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise self._not_writable(f"cannot create topic {spec.name!r}", exc) from None
                try:
                    os.rename(tmp, self.topics_dir / spec.name)
                except OSError:
                    for f in tmp.iterdir():
                        f.unlink()
                    tmp.rmdir()
                existing = self.describe(spec.name)
            if existing.partitions != spec.partitions:
                raise TopicExists(f"topic {spec.name!r} exists with {existing.partitions} "
                                  f"partitions, not {spec.partitions}")

    def describe(self, topic: str) -> TopicSpec:
        spec = self._specs.get(topic)
        if spec is not None:
            return spec
        _check_topic_name(topic)   # "../x" would be read outside the log
        try:
            meta = json.loads((self.topics_dir / topic / "topic.json").read_text())
        except FileNotFoundError:
            raise TopicNotFound(f"topic {topic!r} does not exist in "
                                f"local log {self.root}") from None
        except (OSError, ValueError) as exc:
            raise LogCorrupted(f"topic {topic!r}: unreadable topic.json ({exc})") from None
        spec = TopicSpec(topic, int(meta["partitions"]), bool(meta.get("compacted", False)))
        self._specs[topic] = spec
        return spec

    def list_topics(self) -> list[str]:
        if not self.topics_dir.is_dir():
            return []                    # a read-only directory that holds no log yet
        return sorted(p.name for p in self.topics_dir.iterdir()
                      if not p.name.startswith(".") and (p / "topic.json").exists())

    def delete_topics(self, names: Iterable[str]) -> list[str]:
        deleted = []
        for name in dict.fromkeys(names):
            _check_topic_name(name)
            self._forget(name)
            path = self.topics_dir / name
            if not (path / "topic.json").exists():
                continue
            # Renamed out of the way first: the name is free at once and readers never see
            # half a topic, whatever happens to the removal after it. Under every
            # partition's lock: an append is then wholly before the rename (deleted with
            # the topic, as on Kafka), or finds its files gone (_append), never
            # acknowledged into files already on their way out.
            doomed = self.topics_dir / f".deleting-{uuid.uuid4().hex}"
            locks = _lock_partitions(path)
            try:
                os.rename(path, doomed)
            except FileNotFoundError:
                continue                      # another process deleted it first
            except OSError as exc:
                raise self._not_writable(f"cannot delete topic {name!r}", exc) from None
            finally:
                for fd in locks:
                    os.close(fd)
            shutil.rmtree(doomed, ignore_errors=True)
            deleted.append(name)
        return deleted

    def _forget(self, topic: str) -> None:
        self._specs.pop(topic, None)
        for tp in [tp for tp in self._files if tp.topic == topic]:
            self._files.pop(tp).close()

    def _partition(self, tp: TopicPartition) -> _PartitionFiles:
        files = self._files.get(tp)
        if files is not None:
            self._files.move_to_end(tp)
        else:
            spec = self.describe(tp.topic)
            if not 0 <= tp.partition < spec.partitions:
                raise TopicNotFound(f"topic {tp.topic!r} has no partition {tp.partition} "
                                    f"(it has {spec.partitions})")
            try:
                files = _PartitionFiles(self.topics_dir / tp.topic, tp.partition)
            except FileNotFoundError as exc:
                raise LogCorrupted(f"topic {tp.topic!r} in local log {self.root}: partition "
                                   f"file {exc.filename} is missing") from None
            except OSError as exc:
                raise TransportError(f"local log {self.root}: cannot open the files of "
                                     f"{tp.topic}[{tp.partition}] ({exc.strerror}: "
                                     f"{exc.filename})") from None
            self._files[tp] = files
            if len(self._files) > OPEN_PARTITIONS:
                # Dropped, not closed: a user still holding it closes it when done.
                self._files.popitem(last=False)
        return files

    def _not_writable(self, what: str, exc: OSError | str) -> TransportError:
        """The one error of any write to a log this process may only read."""
        why = exc if isinstance(exc, str) else f"{exc.strerror}: {exc.filename}"
        if isinstance(exc, OSError) and exc.errno not in _READ_ONLY_ERRNOS:
            return TransportError(f"local log {self.root}: {what} ({why})")
        return TransportError(f"local log {self.root} is read-only: {what} ({why})")

    def _writable_partition(self, tp: TopicPartition) -> _PartitionFiles:
        files = self._partition(tp)
        if files.read_only is not None:
            raise self._not_writable(f"cannot write to {tp.topic}[{tp.partition}]",
                                     files.read_only)
        return files

    # ------------------------------------------------------------------ positions

    def watermarks(self, tp: TopicPartition, *, read_committed: bool = True) -> tuple[int, int]:
        files = self._partition(tp)
        return files.low()[0], files.pointer().next_offset

    def delete_records(self, tp: TopicPartition, before: int) -> int:
        files = self._writable_partition(tp)
        fcntl.flock(files.end, fcntl.LOCK_EX)
        try:
            low, _ = files.low()
            high = files.pointer().next_offset
            if not 0 <= before <= high:
                raise OffsetOutOfRange(f"{tp.topic}[{tp.partition}]: cannot delete records "
                                       f"below {before}: the partition holds {low}..{high}")
            if before <= low:
                return low
            pos = self._position_of(tp, before)
            tmp = f"{files.name}.low.{uuid.uuid4().hex}"
            with open(tmp, "wb") as f:
                body = struct.pack("<qq", before, pos)
                f.write(body + struct.pack("<I", zlib.crc32(body)))
            os.replace(tmp, f"{files.name}.low")
            _punch_hole(files.log, pos)
            return before
        finally:
            fcntl.flock(files.end, fcntl.LOCK_UN)

    def offset_for_timestamp(self, tp: TopicPartition, timestamp: int) -> int:
        files = self._partition(tp)
        pointer = files.pointer()
        if pointer.max_ts < timestamp:
            return pointer.next_offset
        # The last index entry whose "max timestamp before" is below the target still
        # precedes the answer; scan from there (never from below the low watermark).
        start_offset, start_pos = files.low()
        for offset, pos, max_before in files.index(pointer.end):
            if max_before >= timestamp:
                break
            if offset > start_offset:
                start_offset, start_pos = offset, pos
        for offset, _pos, ts, _k, _v in _scan(files, start_pos, pointer.end, start_offset):
            if ts >= timestamp:
                return offset
        return pointer.next_offset

    def _position_of(self, tp: TopicPartition, offset: int) -> int:
        """The file position of the frame with ``offset`` (or the end, for the high mark)."""
        files = self._partition(tp)
        pointer = files.pointer()
        low, low_pos = files.low()
        if offset == pointer.next_offset:
            return pointer.end
        if not low <= offset < pointer.next_offset:
            raise OffsetOutOfRange(f"{tp.topic}[{tp.partition}]: offset {offset} is outside "
                                   f"[{low}, {pointer.next_offset}]")
        start_offset, start_pos = low, low_pos
        for entry_offset, pos, _ in files.index(pointer.end):
            if entry_offset > offset:
                break
            if entry_offset > start_offset:
                start_offset, start_pos = entry_offset, pos
        if start_offset == offset:
            return start_pos
        for frame_offset, pos, _ts, _k, _v in _scan(files, start_pos, pointer.end, start_offset):
            if frame_offset == offset:
                return pos
        raise LogCorrupted(f"{files.name}.log: offset {offset} not found below the committed end")

    # ------------------------------------------------------------------ clients

    def producer(self, *, transactional_id: str | None = None) -> Producer:
        if transactional_id is not None:
            raise ConfigError("the local log has no transactions; exactly-once on it goes through "
                              "the protocol, not a transactional producer")
        return _LocalProducer(self)

    def fenced_producer(self, fence_id: str, generation: int) -> Producer:
        if not _TOPIC_NAME.fullmatch(fence_id):
            raise ConfigError(f"invalid fence id {fence_id!r}: {_NAME_RULE}")
        fences = self.root / "fences"
        try:
            fences.mkdir(parents=True, exist_ok=True)
            fd = os.open(fences / fence_id, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise self._not_writable(f"cannot register fence {fence_id!r}", exc) from None
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            raw = os.pread(fd, _FENCE.size, 0)
            current = _FENCE.unpack(raw)[0] if len(raw) == _FENCE.size else -(2**63)
            if current >= generation:  # two instances of one generation would both write
                raise ProducerFenced(f"fence {fence_id!r}: generation {generation} is not newer "
                                     f"than the registered {current}")
            _pwrite_all(fd, _FENCE.pack(generation), 0)
            if self.fsync:
                os.fsync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        return _LocalProducer(self, fence=(fd, fence_id, generation))

    def fence_generation(self, fence_id: str) -> int:
        try:
            raw = (self.root / "fences" / fence_id).read_bytes()
        except FileNotFoundError:
            return 0
        return _FENCE.unpack(raw[:_FENCE.size])[0] if len(raw) >= _FENCE.size else 0

    def consumer(self, *, read_committed: bool = True) -> Consumer:
        return _LocalConsumer(self)

    def close(self) -> None:
        for files in self._files.values():
            files.close()
        self._files.clear()

    # ------------------------------------------------------------------ append

    def _append(self, tp: TopicPartition, records: list[tuple[bytes | None, bytes | None, int]],
                fence: tuple[int, str, int] | None = None) -> int:
        """Append records atomically; return the offset of the last one. With a fence
        (fd, id, generation), refuse once a newer generation registered that id: the check
        runs under the partition lock, so an append that passed it precedes, in this
        partition, every append of the newer generation."""
        files = self._writable_partition(tp)
        fcntl.flock(files.end, fcntl.LOCK_EX)
        gone = False
        try:
            if not _still_named(files):   # deleted (and maybe made again) by another process
                gone = True
                raise TopicNotFound(f"topic {tp.topic!r} was deleted from local log "
                                    f"{self.root} while this process wrote to it")
            if fence is not None:
                current = _FENCE.unpack(os.pread(fence[0], _FENCE.size, 0))[0]
                if current != fence[2]:
                    raise ProducerFenced(f"fence {fence[1]!r}: generation {fence[2]} was replaced "
                                         f"by generation {current}")
            pointer = files.pointer()
            size = os.fstat(files.log).st_size
            if size < pointer.end:   # committed bytes gone: nothing to append after
                raise LogCorrupted(f"{files.name}.log: {size} bytes, below its committed "
                                   f"end {pointer.end}")
            if size != pointer.end:
                os.ftruncate(files.log, pointer.end)  # a dead writer's uncommitted tail
            index_count, last_indexed = files.index_tail(pointer.end)
            index_size = index_count * _INDEX.size
            if os.fstat(files.idx).st_size != index_size:
                # A dead writer's entries point into the tail just cut. Left in place, they
                # would fall below the committed end once this or a later append passes
                # them without adding an entry, and send seeks into the middle of a frame.
                os.ftruncate(files.idx, index_size)
            next_index_pos = 0 if last_indexed is None else last_indexed + INDEX_INTERVAL
            offset, pos, max_ts = pointer.next_offset, pointer.end, pointer.max_ts
            parts: list[bytes] = []
            new_index: list[bytes] = []
            pack, crc32 = _FRAME.pack, zlib.crc32
            for key, value, ts in records:
                if pos >= next_index_pos:
                    new_index.append(_INDEX.pack(offset, pos, max_ts))
                    next_index_pos = pos + INDEX_INTERVAL
                klen = -1 if key is None else len(key)
                vlen = -1 if value is None else len(value)
                header = pack(0, offset, ts, klen, vlen)
                crc = crc32(header[_FRAME_BODY_START:])
                if key:
                    crc = crc32(key, crc)
                if value:
                    crc = crc32(value, crc)
                parts.append(pack(crc, offset, ts, klen, vlen))
                if key:
                    parts.append(key)
                if value:
                    parts.append(value)
                pos += _FRAME.size + max(klen, 0) + max(vlen, 0)
                offset += 1
                if ts > max_ts:
                    max_ts = ts
            if is_armed("locallog.append.mid_data"):  # tear the batch the way a kill can
                data = b"".join(parts)
                _pwrite_all(files.log, memoryview(data)[:len(data) // 2], pointer.end)
                crash_point("locallog.append.mid_data")
            _pwritev_all(files.log, parts, pointer.end)
            if new_index:
                _pwrite_all(files.idx, b"".join(new_index), index_size)
            if self.fsync:
                os.fsync(files.log)
                os.fsync(files.idx)
            crash_point("locallog.append.after_data")
            _write_pointer(files.end, _Pointer(pointer.seq + 1, offset, pos, max_ts))
            if self.fsync:
                os.fsync(files.end)
            return offset - 1
        except OSError as exc:
            raise TransportError(f"{files.name}: append failed ({exc})") from exc
        finally:
            fcntl.flock(files.end, fcntl.LOCK_UN)
            if gone:   # its files are closed only once unlocked
                self._forget(tp.topic)
