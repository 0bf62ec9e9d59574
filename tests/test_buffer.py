"""The early-arrival buffer on its own: order, draining, and its bound on disk."""

from __future__ import annotations

import os

from eos_runtime.runtime.buffer import EarlyArrivalBuffer

RAW = b"x" * 100


def test_versions_drain_in_append_order_lowest_first_and_are_forgotten(tmp_path):
    buf = EarlyArrivalBuffer(tmp_path / "b", 1 << 20)
    buf.append(7, 0, 10, b"seven-a")
    buf.append(5, 1, 11, b"five")
    buf.append(7, 1, 12, b"seven-b")
    buf.append(9, 0, 13, b"nine")
    assert buf.versions() == [5, 7, 9] and len(buf) == 4
    assert list(buf.drain_through(7)) == [(1, 11, b"five"), (0, 10, b"seven-a"),
                                          (1, 12, b"seven-b")]
    assert buf.versions() == [9]
    assert list(buf.drain(7)) == []
    assert list(buf.drain(9)) == [(0, 13, b"nine")]
    assert buf.size == 0 and os.path.getsize(buf.directory / "early-arrivals") == 0


def test_space_of_drained_versions_is_reclaimed_while_later_ones_wait(tmp_path):
    """A producer always a few versions ahead: the buffer never empties, yet what waits
    stays small. The file must not grow with what has passed through it, or the buffer
    overflows (and channels are read again) while little is waiting."""
    buf = EarlyArrivalBuffer(tmp_path / "b", 40 * (len(RAW) + 16))
    ahead = 3
    for v in range(ahead):
        for i in range(5):
            buf.append(v, 0, v * 5 + i, RAW)
    for v in range(ahead, 200):
        drained = list(buf.drain(v - ahead))
        assert [off for _, off, _ in drained] == [(v - ahead) * 5 + i for i in range(5)]
        for i in range(5):
            assert buf.fits(len(RAW)), f"no room at version {v} with {len(buf)} waiting"
            buf.append(v, 0, v * 5 + i, RAW)
        assert buf.size <= 40 * (len(RAW) + 16)
        assert os.path.getsize(buf.directory / "early-arrivals") <= buf.max_bytes
    assert buf.versions() == [197, 198, 199]
    assert [off for _, off, raw in buf.drain_through(199) if raw == RAW] == list(range(985, 1000))
