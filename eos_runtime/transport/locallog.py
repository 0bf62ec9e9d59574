"""The embedded local log: durable, multi-process partitioned log in plain files.

It is the default transport, so a pipeline runs on a fresh machine with no broker.
Several processes (Spark's Python workers) may write and read the same partitions.

Layout under the data directory::

    topics/<topic>/topic.json     partition count and cleanup policy (written once)
    topics/<topic>/<p>.log        frames, back to back
    topics/<topic>/<p>.end        the commit pointer: two checksummed slots
    topics/<topic>/<p>.idx        sparse index: (offset, position, max timestamp before)
    topics/<topic>/<p>.low        the low watermark (offset, position), once records were
                                  deleted below it (``delete_records``); absent: 0

Rules that make it safe:

* **One commit point per append.** A writer takes an exclusive ``flock`` on the
  partition's ``.end`` file, writes its frames after the committed end, then writes
  the commit pointer (next offset, end position). Only then is the batch
  acknowledged. Readers read the pointer first and never look past it, so a batch is
  visible whole or not at all.
* **A torn tail repairs itself.** A writer killed mid-append leaves bytes past the
  committed end, and maybe index entries pointing there; the next writer truncates
  both under the lock before appending, so a dead writer's index entry never ends up
  below a committed end. Readers trust only index entries below the committed end.
* **The pointer cannot tear.** It alternates between two slots, each with a sequence
  number and a CRC; a reader takes the valid slot with the higher sequence.
* **Frames carry their offset and a CRC**, so damage below the committed end is
  detected (``LogCorrupted``) instead of being read as data.
* **Deleting records moves a low watermark, never an offset.** ``delete_records``
  writes ``<p>.low`` (replaced atomically, under the partition lock) and then frees the
  file's bytes below it by punching a hole (Linux; elsewhere the bytes stay and only the
  watermark moves). Readers check the watermark before reading a partition, so nothing
  reads the hole: a position below it is ``OffsetOutOfRange``, as on Kafka.

**Reading needs no write access.** A partition whose files cannot be opened for
writing (a read-only file system, or files or directories the user may not write) is
opened read-only; reading it works as usual (readers never lock), and any attempt to
write to it, or to create a topic or register a fence in such a log, is one
``TransportError`` naming the data directory.

Durability: an acknowledged record survives the death of any process (SIGKILL
included) since the kernel holds the written pages. With ``fsync=True`` each
append is also fsynced and survives a machine crash.

There are no transactions here: the exactly-once protocol does not need them.
Compaction is recorded as the topic's policy but not carried out (a compacted
topic keeps every record, which readers of a compacted topic must tolerate anyway).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import struct
import time
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..errors import (
    ConfigError,
    LogCorrupted,
    OffsetOutOfRange,
    ProducerFenced,
    TopicExists,
    TopicNotFound,
    TransportError,
)
from ..faults import crash_point, is_armed
from .base import Consumer, Producer, Record, TopicPartition, TopicSpec, Transport

__all__ = ["LocalLogTransport"]

# frame: crc32 | offset | timestamp | key length (-1: None) | value length (-1: None)
_FRAME = struct.Struct("<Iqqii")
_FRAME_BODY_START = 4  # the CRC covers everything after itself
# commit pointer slot: seq | next offset | end position | max timestamp | crc32
_SLOT = struct.Struct("<QqqqI")
_SLOT_SIZE = 40
# index entry: offset | position | max timestamp of all records before it
_INDEX = struct.Struct("<qqq")
# low watermark: offset | position | crc32
_LOW = struct.Struct("<qqI")
INDEX_INTERVAL = 64 * 1024
#: Partitions whose files a transport keeps open (3 descriptors each), the ones used
#: last: a process touching more reopens the others when it uses them again (three
#: opens). Kept open for good, 300 partitions used up a limit of 1024 files.
OPEN_PARTITIONS = 64
_NO_TS = -(2**63)
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_READ_CHUNK = 1 << 20
_FENCE = struct.Struct("<q")
#: What opening a file for writing fails with where only reading is allowed: a read-only
#: file system, permissions, an immutable file.
_READ_ONLY_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _pwrite_all(fd: int, data: bytes | memoryview, pos: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        view = view[n:]
        pos += n


class _Pointer:
    """The committed state of a partition, read from its ``.end`` file."""

    __slots__ = ("seq", "next_offset", "end", "max_ts")

    def __init__(self, seq: int, next_offset: int, end: int, max_ts: int) -> None:
        self.seq, self.next_offset, self.end, self.max_ts = seq, next_offset, end, max_ts


def _read_pointer(fd: int) -> _Pointer:
    raw = os.pread(fd, 2 * _SLOT_SIZE, 0)
    best = _Pointer(0, 0, 0, _NO_TS)
    for i in (0, 1):
        slot = raw[i * _SLOT_SIZE:(i + 1) * _SLOT_SIZE]
        if len(slot) < _SLOT.size:
            continue
        seq, next_offset, end, max_ts, crc = _SLOT.unpack_from(slot)
        if crc == zlib.crc32(slot[:_SLOT.size - 4]) and seq >= best.seq and seq > 0:
            best = _Pointer(seq, next_offset, end, max_ts)
    return best


def _write_pointer(fd: int, p: _Pointer) -> None:
    body = _SLOT.pack(p.seq, p.next_offset, p.end, p.max_ts, 0)[:_SLOT.size - 4]
    slot = body + struct.pack("<I", zlib.crc32(body))
    _pwrite_all(fd, slot, (p.seq % 2) * _SLOT_SIZE)


class _PartitionFiles:
    """Open file descriptors of one partition, shared by this process's readers/writers.

    Opened read-write; where that is not allowed (``_READ_ONLY_ERRNOS``), read-only, with
    the reason in ``read_only``: such a partition can be read but not appended to.

    Closed by ``close()`` or, once the transport let go of it (``OPEN_PARTITIONS``), when
    the last user drops it: an append or a read holding it keeps its descriptors (and
    its lock) until it is done, never a number the system may give to another file.
    """

    def __init__(self, directory: Path, partition: int) -> None:
        base = directory / str(partition)
        self.name = str(base)
        self.closed = True
        #: why the files are open read-only (None: they are open read-write)
        self.read_only: str | None = None
        try:
            self.log, self.end, self.idx = self._open(os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            if exc.errno not in _READ_ONLY_ERRNOS:
                raise
            self.read_only = f"{exc.strerror}: {exc.filename}"
            self.log, self.end, self.idx = self._open(os.O_RDONLY)
        self.closed = False

    def _open(self, flags: int) -> tuple[int, int, int]:
        """The .log, .end and .idx files opened with ``flags``: all three or none."""
        fds: list[int] = []
        try:
            for suffix in (".log", ".end", ".idx"):
                fds.append(os.open(f"{self.name}{suffix}", flags, 0o644))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return fds[0], fds[1], fds[2]

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for fd in (self.log, self.end, self.idx):
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:   # at interpreter exit, or the descriptors went with a fork
            pass

    def low(self) -> tuple[int, int]:
        """(low watermark, its file position): (0, 0) until records were deleted."""
        try:
            with open(f"{self.name}.low", "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return 0, 0
        if len(raw) != _LOW.size:
            raise LogCorrupted(f"{self.name}.low: {len(raw)} bytes, not {_LOW.size}")
        offset, pos, crc = _LOW.unpack(raw)
        if zlib.crc32(raw[:16]) != crc:
            raise LogCorrupted(f"{self.name}.low: checksum mismatch")
        return offset, pos

    def pointer(self) -> _Pointer:
        return _read_pointer(self.end)

    def index(self, committed_end: int) -> list[tuple[int, int, int]]:
        """The index entries a reader may trust: the leading run that points below the
        committed end, in increasing order. Entries past the end belong to an append in
        progress or to a dead writer (the next writer cuts those before it commits)."""
        size = os.fstat(self.idx).st_size
        raw = os.pread(self.idx, size - size % _INDEX.size, 0)
        # The file can shrink between fstat and pread (a writer cutting a dead writer's
        # entries) and a concurrent append can be seen half done: whole entries only.
        raw = raw[:len(raw) - len(raw) % _INDEX.size]
        entries = []
        last_offset = last_pos = -1
        for entry in _INDEX.iter_unpack(raw):
            offset, pos, _ = entry
            if pos >= committed_end or offset <= last_offset or pos <= last_pos:
                break
            entries.append(entry)
            last_offset, last_pos = offset, pos
        return entries

    def index_tail(self, committed_end: int) -> tuple[int, int | None]:
        """(valid index length in entries, position of the last valid entry) without
        reading the whole index: appends need only its tail. Only the tail can be past
        the committed end, since every append cuts a dead writer's entries first."""
        count = os.fstat(self.idx).st_size // _INDEX.size
        while count:
            _, pos, _ = _INDEX.unpack(os.pread(self.idx, _INDEX.size, (count - 1) * _INDEX.size))
            if pos < committed_end:
                return count, pos
            count -= 1
        return 0, None


class LocalLogTransport(Transport):
    """The embedded log under ``data_dir``. Safe for several processes at once."""

    name = "local"
    supports_transactions = False

    def __init__(self, data_dir: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.root = Path(data_dir)
        self.topics_dir = self.root / "topics"
        try:
            self.topics_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if exc.errno not in _READ_ONLY_ERRNOS:
                raise
            # A read-only directory without a log in it: it has no topics to read, and
            # creating one is an error naming it (create_topics).
        self.fsync = fsync
        self._specs: dict[str, TopicSpec] = {}
        # The partitions used last, most recent last (OPEN_PARTITIONS at most).
        self._files: OrderedDict[TopicPartition, _PartitionFiles] = OrderedDict()

    # ------------------------------------------------------------------ topics

    def create_topics(self, specs: Iterable[TopicSpec]) -> None:
        for spec in specs:
            if not _TOPIC_NAME.match(spec.name) or spec.name in (".", ".."):
                raise ConfigError(f"invalid topic name {spec.name!r}: "
                                  f"use 1-249 of A-Z a-z 0-9 . _ -")
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
                (tmp / "topic.json").write_text(json.dumps(meta))
                for p in range(spec.partitions):
                    for suffix in (".log", ".end", ".idx"):
                        (tmp / f"{p}{suffix}").touch()
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
            if not _TOPIC_NAME.match(name) or name in (".", ".."):
                raise ConfigError(f"invalid topic name {name!r}: use 1-249 of A-Z a-z 0-9 . _ -")
            self._forget(name)
            path = self.topics_dir / name
            if not (path / "topic.json").exists():
                continue
            # Renamed out of the way first: the name is free at once and readers never see
            # half a topic, whatever happens to the removal after it.
            doomed = self.topics_dir / f".deleting-{uuid.uuid4().hex}"
            try:
                os.rename(path, doomed)
            except FileNotFoundError:
                continue                      # another process deleted it first
            except OSError as exc:
                raise self._not_writable(f"cannot delete topic {name!r}", exc) from None
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
        if not _TOPIC_NAME.match(fence_id):
            raise ConfigError(f"invalid fence id {fence_id!r}: use 1-249 of A-Z a-z 0-9 . _ -")
        fences = self.root / "fences"
        try:
            fences.mkdir(exist_ok=True)
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
        try:
            if fence is not None:
                current = _FENCE.unpack(os.pread(fence[0], _FENCE.size, 0))[0]
                if current != fence[2]:
                    raise ProducerFenced(f"fence {fence[1]!r}: generation {fence[2]} was replaced "
                                         f"by generation {current}")
            pointer = files.pointer()
            if os.fstat(files.log).st_size != pointer.end:
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
            data = b"".join(parts)
            if is_armed("locallog.append.mid_data"):  # tear the batch the way a kill can
                _pwrite_all(files.log, memoryview(data)[:len(data) // 2], pointer.end)
                crash_point("locallog.append.mid_data")
            _pwrite_all(files.log, data, pointer.end)
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


_FALLOC_PUNCH_HOLE = 0x02 | 0x01    # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE


def _punch_hole(fd: int, length: int) -> None:
    """Free the first ``length`` bytes of ``fd``'s file, keeping its size and every later
    byte where it is. Best effort: where the system cannot, the bytes stay."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fallocate = libc.fallocate
    except (OSError, AttributeError):
        return
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    fallocate(fd, _FALLOC_PUNCH_HOLE, 0, length)


def _scan(files: _PartitionFiles, pos: int, end: int, expected_offset: int):
    """Yield (offset, position, timestamp, key, value) for frames in [pos, end)."""
    unpack = _FRAME.unpack_from
    while pos < end:
        chunk = os.pread(files.log, min(_READ_CHUNK, end - pos), pos)
        at = 0
        progressed = False
        while at + _FRAME.size <= len(chunk):
            crc, offset, ts, klen, vlen = unpack(chunk, at)
            size = _FRAME.size + max(klen, 0) + max(vlen, 0)
            if at + size > len(chunk):
                break
            _check_frame(files, chunk, at, size, crc, offset, expected_offset, pos + at)
            body = at + _FRAME.size
            key = None if klen < 0 else chunk[body:body + klen]
            value = None if vlen < 0 else chunk[body + max(klen, 0):at + size]
            yield offset, pos + at, ts, key, value
            expected_offset = offset + 1
            at += size
            progressed = True
        if not progressed:
            if at + _FRAME.size <= len(chunk):  # one frame larger than the chunk
                crc, offset, ts, klen, vlen = unpack(chunk, at)
                size = _FRAME.size + max(klen, 0) + max(vlen, 0)
                if pos + size > end or size > 1 << 31:
                    raise LogCorrupted(f"{files.name}.log: frame at position {pos} runs past "
                                       f"the committed end {end}")
                chunk = os.pread(files.log, size, pos)
                _check_frame(files, chunk, 0, size, crc, offset, expected_offset, pos)
                body = _FRAME.size
                key = None if klen < 0 else chunk[body:body + klen]
                value = None if vlen < 0 else chunk[body + max(klen, 0):size]
                yield offset, pos, ts, key, value
                expected_offset = offset + 1
                pos += size
                continue
            raise LogCorrupted(f"{files.name}.log: truncated frame at position {pos + at} below "
                               f"the committed end {end}")
        pos += at


def _check_frame(files: _PartitionFiles, chunk: bytes, at: int, size: int, crc: int,
                 offset: int, expected_offset: int, position: int) -> None:
    body = memoryview(chunk)[at + _FRAME_BODY_START:at + size]
    if zlib.crc32(body) != crc or offset != expected_offset:
        raise LogCorrupted(f"{files.name}.log: damaged frame at position {position} "
                           f"(expected offset {expected_offset}, found {offset})")


class _LocalProducer(Producer):
    """Buffers per partition; every flush is one atomic append per partition."""

    #: records buffered per partition before they are appended without waiting for flush
    MAX_PENDING = 10_000

    def __init__(self, log: LocalLogTransport, fence: tuple[int, str, int] | None = None) -> None:
        self._log = log
        self._fence = fence
        self._pending: dict[TopicPartition, list[tuple[bytes | None, bytes | None, int]]] = {}
        self._written: dict[TopicPartition, int] = {}

    def produce(self, topic: str, partition: int, value: bytes | None,
                key: bytes | None = None, timestamp: int | None = None) -> None:
        tp = TopicPartition(topic, partition)
        batch = self._pending.get(tp)
        if batch is None:
            # An unknown topic or partition, or a read-only log, fails here, not at flush.
            self._log._writable_partition(tp)
            batch = self._pending[tp] = []
        if key is not None and type(key) is not bytes:
            key = bytes(key)
        if value is not None and type(value) is not bytes:
            value = bytes(value)
        batch.append((key, value, _now_ms() if timestamp is None else timestamp))
        if len(batch) >= self.MAX_PENDING and self._fence is None:
            self._written[tp] = self._log._append(tp, batch)
            self._pending[tp] = []

    def _append_pending(self) -> None:
        for tp, batch in self._pending.items():
            if batch:
                self._written[tp] = self._log._append(tp, batch, self._fence)
        self._pending.clear()

    def send(self) -> None:
        if self._fence is None:  # a fenced producer keeps one append per partition per flush
            self._append_pending()

    def flush(self, timeout: float = 30.0) -> dict[TopicPartition, int]:
        self._append_pending()
        written, self._written = self._written, {}
        return written

    def close(self) -> None:
        self._pending.clear()
        if self._fence is not None:
            os.close(self._fence[0])
            self._fence = None


class _LocalConsumer(Consumer):
    """Reads committed frames straight from the files; waits by polling the pointers."""

    _IDLE_SLEEP = (0.001, 0.05)  # first and longest pause between empty looks

    def __init__(self, log: LocalLogTransport) -> None:
        self._log = log
        # partition -> [next offset, file position]
        self._cursor: dict[TopicPartition, list[int]] = {}
        self._paused: set[TopicPartition] = set()
        self._rr = 0

    def assign(self, positions: Mapping[TopicPartition, int]) -> None:
        cursors = {}
        for tp, offset in positions.items():
            tp = TopicPartition(*tp)
            cursors[tp] = [offset, self._log._position_of(tp, offset)]
        self._cursor = cursors
        # The contract: a new assignment starts unpaused (callers re-position after
        # backpressure and forget their pauses).
        self._paused = set()

    def _assigned(self, tp: TopicPartition | tuple[str, int]) -> TopicPartition:
        tp = TopicPartition(*tp)
        if tp not in self._cursor:
            raise TransportError(f"{tp.topic}[{tp.partition}] is not assigned")
        return tp

    def seek(self, tp: TopicPartition, offset: int) -> None:
        tp = self._assigned(tp)
        self._cursor[tp] = [offset, self._log._position_of(tp, offset)]

    def pause(self, tps: Iterable[TopicPartition]) -> None:
        # All checked before any is paused, as on Kafka.
        self._paused.update([self._assigned(tp) for tp in tps])

    def resume(self, tps: Iterable[TopicPartition]) -> None:
        self._paused.difference_update([self._assigned(tp) for tp in tps])

    def position(self, tp: TopicPartition) -> int:
        return self._cursor[self._assigned(tp)][0]

    def assignment(self) -> list[TopicPartition]:
        return list(self._cursor)

    def poll(self, max_records: int = 10_000, timeout: float = 1.0) -> list[Record]:
        deadline = time.monotonic() + timeout
        sleep = self._IDLE_SLEEP[0]
        while True:
            out = self._read(max_records)
            if out or time.monotonic() >= deadline:
                return out
            time.sleep(min(sleep, max(0.0, deadline - time.monotonic())))
            sleep = min(sleep * 2, self._IDLE_SLEEP[1])

    def _read(self, max_records: int) -> list[Record]:
        active = [tp for tp in self._cursor if tp not in self._paused]
        out: list[Record] = []
        if not active:
            return out
        self._rr = (self._rr + 1) % len(active)
        for tp in active[self._rr:] + active[:self._rr]:
            budget = max_records - len(out)
            if budget <= 0:
                break
            files = self._log._partition(tp)
            cursor = self._cursor[tp]
            end = files.pointer().end
            if cursor[1] >= end:
                continue
            low = files.low()[0]
            if cursor[0] < low:   # deleted under this reader: its bytes may be a hole now
                raise OffsetOutOfRange(f"{tp.topic}[{tp.partition}]: position {cursor[0]} was "
                                       f"deleted (the partition starts at {low})")
            topic, partition = tp
            for offset, pos, ts, key, value in _scan(files, cursor[1], end, cursor[0]):
                out.append(Record(topic, partition, offset, key, value, ts))
                cursor[0] = offset + 1
                cursor[1] = pos + _FRAME.size + (len(key) if key is not None else 0) + (
                    len(value) if value is not None else 0)
                budget -= 1
                if budget == 0:
                    break
        return out

    def close(self) -> None:
        self._cursor.clear()
        self._paused.clear()
