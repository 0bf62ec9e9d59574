"""The early-arrival buffer (SEP-10 "Message Disk Buffer", solution 3 of the shared
channel problem): messages of a version later than the open one wait here on local
disk until their version opens.

The buffer is not durable state. After a restart the task re-reads its channels from
the checkpoint's resume offsets, which lie before every buffered message (aligner rule
R6), so the directory is wiped at open: a torn last record of a crashed run is never
read.

Bounded in bytes and in open files (invariant 8): one append file for every version,
with an in-memory index of where each version's records lie; the file is truncated
whenever the buffer empties. ``fits`` tells the caller whether a record stays within
``max_bytes`` of file; the aligner's overflow rule (R8) handles the records that do not.
Counting file bytes rather than live bytes keeps the disk bound true even while drained
versions leave holes in the file.

A producer always a few versions ahead keeps the buffer from ever emptying, so holes
are also reclaimed without it: once drained versions leave at least as many bytes of
holes as there are live bytes, the live records move to the front of the file, in
place (each only ever moves to a lower position, so nothing is overwritten before it
is read, and the file never grows for it). Each byte drained is paid for once.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

__all__ = ["EarlyArrivalBuffer"]

# channel index | offset | raw length
_HEAD = struct.Struct("<iqi")


class EarlyArrivalBuffer:
    """One append file under ``directory``; ``size`` is its length in bytes."""

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True)
        self._path = self.directory / "early-arrivals"
        self._file = open(self._path, "w+b")  # held for the buffer's life
        # version -> [(position, length)] of its records, in append order
        self._index: dict[int, list[tuple[int, int]]] = {}
        self.size = 0
        self.live = 0      # bytes of records still indexed; size - live are holes
        self.high_water = 0

    @property
    def full(self) -> bool:
        return self.size >= self.max_bytes

    def fits(self, raw_length: int) -> bool:
        return self.size + _HEAD.size + raw_length <= self.max_bytes

    def __len__(self) -> int:
        return sum(len(v) for v in self._index.values())

    def versions(self) -> list[int]:
        return sorted(self._index)

    def append(self, version: int, channel: int, offset: int, raw: bytes) -> None:
        record = _HEAD.pack(channel, offset, len(raw)) + raw
        self._file.seek(self.size)
        self._file.write(record)
        self._index.setdefault(version, []).append((self.size, len(record)))
        self.size += len(record)
        self.live += len(record)
        self.high_water = max(self.high_water, self.size)

    def drain_through(self, version: int) -> Iterator[tuple[int, int, bytes]]:
        """``drain`` every version up to ``version``, lowest first. Versions the aligner
        skipped (R2a) hold only fenced messages; they come out here to be dropped."""
        for v in sorted(v for v in self._index if v <= version):
            yield from self.drain(v)

    def drain(self, version: int) -> Iterator[tuple[int, int, bytes]]:
        """Yield (channel, offset, raw) of ``version`` in append order, then forget them."""
        spans = self._index.pop(version, None)
        if not spans:
            return
        self._file.flush()
        records = []
        for position, length in spans:
            self._file.seek(position)
            records.append(self._file.read(length))
        self.live -= sum(length for _, length in spans)
        if not self._index:
            self._truncate()
        elif self.size - self.live >= self.live:
            self._compact()
        head = _HEAD.size
        for record in records:
            channel, offset, _ = _HEAD.unpack_from(record)
            yield channel, offset, record[head:]

    def _compact(self) -> None:
        spans = sorted((position, length, version, i)
                       for version, vs in self._index.items()
                       for i, (position, length) in enumerate(vs))
        cursor = 0
        for position, length, version, i in spans:
            if position != cursor:
                self._file.seek(position)
                record = self._file.read(length)
                self._file.seek(cursor)
                self._file.write(record)
                self._index[version][i] = (cursor, length)
            cursor += length
        self._file.truncate(cursor)
        self.size = cursor

    def _truncate(self) -> None:
        self._file.seek(0)
        self._file.truncate()
        self.size = 0
        self.live = 0

    def clear(self) -> None:
        self._index.clear()
        self._truncate()

    def close(self) -> None:
        self._file.close()
        shutil.rmtree(self.directory, ignore_errors=True)
