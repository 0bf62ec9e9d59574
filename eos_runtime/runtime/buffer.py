"""The early-arrival buffer (SEP-10 "Message Disk Buffer", solution 3 of the shared
channel problem): messages of a version later than the open one wait here on local
disk until their version opens.

The buffer is not durable state. After a restart the task re-reads its channels from
the checkpoint's resume offsets, which lie before every buffered message (aligner rule
R6), so the directory is wiped at open: a torn last record of a crashed run is never
read. Records are appended per version to one file each and read back in append order.
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path
from typing import Iterator

__all__ = ["EarlyArrivalBuffer"]

# channel index | offset | raw length
_HEAD = struct.Struct("<iqi")


class EarlyArrivalBuffer:
    """Per-version append files under ``directory``; ``size`` counts the bytes held."""

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True)
        self._files: dict[int, object] = {}
        self._counts: dict[int, int] = {}
        self.size = 0

    @property
    def full(self) -> bool:
        return self.size >= self.max_bytes

    def __len__(self) -> int:
        return sum(self._counts.values())

    def versions(self) -> list[int]:
        return sorted(self._counts)

    def append(self, version: int, channel: int, offset: int, raw: bytes) -> None:
        f = self._files.get(version)
        if f is None:
            f = self._files[version] = open(self.directory / f"v{version}", "ab")
            self._counts[version] = 0
        f.write(_HEAD.pack(channel, offset, len(raw)))
        f.write(raw)
        self._counts[version] += 1
        self.size += _HEAD.size + len(raw)

    def drain_through(self, version: int) -> Iterator[tuple[int, int, bytes]]:
        """``drain`` every version up to ``version``, lowest first. Versions the aligner
        skipped (R2a) hold only fenced messages; they come out here to be dropped."""
        for v in sorted(v for v in self._counts if v <= version):
            yield from self.drain(v)

    def drain(self, version: int) -> Iterator[tuple[int, int, bytes]]:
        """Yield (channel, offset, raw) of ``version`` in append order, then forget them."""
        f = self._files.pop(version, None)
        if f is None:
            return
        f.close()
        self._counts.pop(version)
        path = self.directory / f"v{version}"
        with open(path, "rb") as r:
            data = r.read()
        path.unlink()
        self.size -= len(data)
        at, unpack, head = 0, _HEAD.unpack_from, _HEAD.size
        while at < len(data):
            channel, offset, n = unpack(data, at)
            at += head
            yield channel, offset, data[at:at + n]
            at += n

    def clear(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
        self._counts.clear()
        self.size = 0
        for p in self.directory.iterdir():
            p.unlink()

    def close(self) -> None:
        self.clear()
