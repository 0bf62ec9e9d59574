"""Large frees go back to the system: glibc's mmap threshold, fixed once a process.

glibc serves an allocation of at least ``M_MMAP_THRESHOLD`` (128 KiB) from a mapping of
its own and unmaps it on free. But it raises the threshold to the size of each such
block freed (up to 32 MiB), so after RocksDB's first flushed memtable its 1 MiB arena
blocks (``arena_block_size``) came from the heap instead, and a flushed memtable stayed
there as free memory that glibc kept: at 10^7 keys, 154 MiB of a counting task's 264 MiB growth
(``benchmarks/profile_task.py --memory``). Setting the threshold stops glibc moving it
(and the trim threshold with it), so every block of 1 MiB or more is mapped and given
back. A 1 MiB allocation then costs a mapping and its page faults, about the cost of
writing it once; nothing of that size is allocated per record.
"""

from __future__ import annotations

import ctypes
import platform

__all__ = ["return_large_frees", "LARGE_BLOCK"]

#: Blocks of at least this many bytes are mapped and unmapped, never kept in the heap.
LARGE_BLOCK = 1 << 20
_M_MMAP_THRESHOLD = -3      # glibc's malloc.h
_done = False


def return_large_frees() -> bool:
    """Fix glibc's mmap threshold at ``LARGE_BLOCK`` in this process (once; a fork keeps
    it). False where the C library is not glibc, or refuses."""
    global _done
    if _done:
        return True
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _done = bool(mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK) == 1)
    return _done
