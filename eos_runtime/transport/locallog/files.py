"""A partition's files: where they are, the formats of their bytes, and reading them.

Layout under the data directory::

    topics/<topic>/topic.json     partition count and cleanup policy (written once)
    topics/<topic>/<p>.log        frames, back to back
    topics/<topic>/<p>.end        the commit pointer: two checksummed slots
    topics/<topic>/<p>.idx        sparse index: (offset, position, max timestamp before)
    topics/<topic>/<p>.low        the low watermark (offset, position), once records were
                                  deleted below it (``delete_records``); absent: 0

What the formats themselves guarantee (the writer's rules are in ``transport.py``):

* **The pointer cannot tear.** It alternates between two slots, each with a sequence
  number and a CRC; a reader takes the valid slot with the higher sequence.
* **Frames carry their offset and a CRC**, so damage below the committed end is
  detected (``LogCorrupted``) instead of being read as data.
* **Readers trust only index entries below the committed end**: past it, an entry
  belongs to an append in progress or to a dead writer.
"""

from __future__ import annotations

import errno
import os
import struct
import zlib
from pathlib import Path

from ...errors import LogCorrupted, OffsetOutOfRange

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
_NO_TS = -(2**63)
_READ_CHUNK = 1 << 20
#: What opening a file for writing fails with where only reading is allowed: a read-only
#: file system, permissions, an immutable file.
_READ_ONLY_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def _pwrite_all(fd: int, data: bytes | memoryview, pos: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        view = view[n:]
        pos += n


#: Buffers one pwritev takes (Linux's IOV_MAX is 1024).
_IOV = 1024


def _pwritev_all(fd: int, parts: list[bytes], pos: int) -> None:
    """``parts`` written back to back from ``pos``, without joining them first: a batch
    as large as a big state's snapshot would otherwise be held twice."""
    for i in range(0, len(parts), _IOV):
        group = parts[i:i + _IOV]
        want = sum(len(b) for b in group)
        n = os.pwritev(fd, group, pos)
        if n < want:   # a short write: the rest as one buffer (rare)
            _pwrite_all(fd, b"".join(group)[n:], pos + n)
        pos += want


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

    Closed by ``close()`` or, once the transport let go of it (``OPEN_PARTITIONS`` in
    ``transport.py``), when the last user drops it: an append or a read holding it keeps
    its descriptors (and its lock) until it is done, never a number the system may give
    to another file.
    """

    def __init__(self, directory: Path, partition: int) -> None:
        base = directory / str(partition)
        self.name = str(base)
        self.closed = True
        #: why the files are open read-only (None: they are open read-write)
        self.read_only: str | None = None
        try:
            # No O_CREAT: create_topics makes every file. A missing one is damage to
            # report (the transport's LogCorrupted); made again empty, a missing .end
            # read as "nothing committed", and the next writer cut the log to nothing.
            self.log, self.end, self.idx = self._open(os.O_RDWR)
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


_FALLOC_PUNCH_HOLE = 0x02 | 0x01    # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE


def _punch_hole(fd: int, length: int) -> None:
    """Free the first ``length`` bytes of ``fd``'s file, keeping its size and every later
    byte where it is. Best effort: where the system cannot, the bytes stay."""
    # ctypes and libc's lookup only when a segment's head is freed
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
    """Yield (offset, position, timestamp, key, value) for frames in [pos, end).

    A scan whose records another process deletes meanwhile (``delete_records`` replaces
    the low watermark, then frees the bytes below it) reads the freed bytes as zeros:
    that is ``OffsetOutOfRange``, which readers answer by reading again, not a damaged
    log."""
    start = expected_offset
    try:
        yield from _frames(files, pos, end, expected_offset)
    except LogCorrupted:
        low = files.low()[0]
        if start < low:
            raise OffsetOutOfRange(f"{files.name}: offset {start} was deleted while it was "
                                   f"read (the partition starts at {low})") from None
        raise


def _frames(files: _PartitionFiles, pos: int, end: int, expected_offset: int):
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

