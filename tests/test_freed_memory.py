"""A task's large frees go back to the system (docs/state.md, "Memory").

glibc serves an allocation of 128 KiB or more from a mapping of its own, and gives it
back on free; but after the first such free it raises that threshold to the freed size,
so RocksDB's memtable blocks (1 MiB each), once one memtable was flushed, come from the
heap, and a flushed memtable's 64 MiB then stayed in the heap as free memory that glibc
keeps: 154 MiB of a counting task's 264 MiB growth at 10^7 keys. Opening a task's store
fixes the threshold, which also stops glibc moving it.
"""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc")

_PROBE = textwrap.dedent("""
    import ctypes, sys, tempfile

    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                    "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = Info
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]

    if sys.argv[1] == "store":
        from eos_runtime.state.store import TaskStore
        with tempfile.TemporaryDirectory() as directory:
            TaskStore(directory, ["counts"]).close()
    # The first large free raises glibc's threshold to 4 MiB, unless it was fixed ...
    libc.free(libc.malloc(4 << 20))
    mapped = libc.mallinfo2().hblkhd
    block = libc.malloc(2 << 20)     # ... so this one comes from the heap, or is mapped
    print(libc.mallinfo2().hblkhd - mapped >= 2 << 20)
    libc.free(block)
""")


def _mapped(mode: str) -> bool:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True,
                         text=True, timeout=60, check=True)
    return out.stdout.strip() == "True"


def test_a_task_store_keeps_large_blocks_mapped_after_a_large_free() -> None:
    assert _mapped("store")


def test_the_probe_sees_glibcs_moving_threshold_without_a_store() -> None:
    # Without this, the test above could pass on a glibc that never moves it.
    assert not _mapped("plain")
