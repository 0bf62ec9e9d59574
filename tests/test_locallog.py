"""The embedded local log's own promises: several writer processes at once, and no
acknowledged record lost or torn when a writer is SIGKILLed, wherever it dies."""

from __future__ import annotations

import errno
import fcntl
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from eos_runtime.errors import ConfigError, LogCorrupted, TopicNotFound, TransportError
from eos_runtime.transport import TopicPartition, TopicSpec, open_transport

TP = TopicPartition("t", 0)

# A writer process: appends batches of self-checking records (writer id, sequence number,
# padding derived from both) and prints "ACK <last seq>" once each batch is acknowledged.
WRITER = textwrap.dedent("""
    import sys
    from eos_runtime.transport import open_transport
    data_dir, writer, batches, batch_size, pad = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    t = open_transport(data_dir=data_dir)
    p = t.producer()
    seq = 0
    for _ in range(batches):
        for _ in range(batch_size):
            body = f"{writer}:{seq}:".encode()
            p.produce("t", 0, body + bytes([seq % 251]) * pad, key=writer.encode())
            seq += 1
        p.flush()
        print("ACK", seq - 1, flush=True)
""")


def spawn_writer(data_dir: Path, writer: str, batches: int, batch_size: int, pad: int,
                 crash_at: str | None = None) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("EOS_CRASH_AT", None)
    if crash_at:
        env["EOS_CRASH_AT"] = crash_at
    return subprocess.Popen([sys.executable, "-c", WRITER, str(data_dir), writer, str(batches),
                             str(batch_size), str(pad)], stdout=subprocess.PIPE, text=True, env=env)


def read_log(data_dir: Path) -> list:
    with open_transport(data_dir=str(data_dir)) as t:
        high = t.watermarks(TP)[1]
        out = []
        with t.consumer() as c:
            c.assign({TP: 0})
            while len(out) < high:
                out.extend(c.poll(100_000, 1.0))
        return out


def check_records(records, pad: int) -> dict[str, list[int]]:
    """Every record is whole and self-consistent; offsets are dense. Returns seqs per writer."""
    assert [r.offset for r in records] == list(range(len(records)))
    seqs: dict[str, list[int]] = {}
    for r in records:
        writer, seq, rest = r.value.split(b":", 2)
        assert r.key == writer
        assert rest == bytes([int(seq) % 251]) * pad, f"record {r.offset} is torn"
        seqs.setdefault(writer.decode(), []).append(int(seq))
    return seqs


@pytest.fixture
def log_dir(tmp_path):
    d = tmp_path / "log"
    with open_transport(data_dir=str(d)) as t:
        t.create_topics([TopicSpec("t", 1)])
    return d


def test_concurrent_writer_processes_lose_nothing_and_keep_their_order(log_dir):
    procs = [spawn_writer(log_dir, f"w{i}", batches=20, batch_size=50, pad=20) for i in range(4)]
    for p in procs:
        p.communicate(timeout=60)
        assert p.returncode == 0
    seqs = check_records(read_log(log_dir), pad=20)
    assert seqs == {f"w{i}": list(range(1000)) for i in range(4)}


@pytest.mark.parametrize("point", ["locallog.append.mid_data", "locallog.append.after_data"])
def test_a_writer_killed_inside_an_append_leaves_only_whole_acknowledged_batches(log_dir, point):
    """The crash lands at a named point of the append (deterministic), on the 3rd batch."""
    proc = spawn_writer(log_dir, "w", batches=5, batch_size=100, pad=500, crash_at=f"{point}@3")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert out.split() == ["ACK", "99", "ACK", "199"]
    assert (log_dir / "topics/t/0.log").stat().st_size > 200 * 500, "the dead batch left bytes"
    assert check_records(read_log(log_dir), pad=500) == {"w": list(range(200))}
    # The next writer cuts the dead batch's tail and appends after the acknowledged ones.
    proc = spawn_writer(log_dir, "v", batches=2, batch_size=100, pad=500)
    proc.communicate(timeout=60)
    seqs = check_records(read_log(log_dir), pad=500)
    assert seqs == {"w": list(range(200)), "v": list(range(200))}


def test_sigkill_at_random_moments_never_loses_or_tears_an_acknowledged_record(log_dir):
    """Real SIGKILLs from outside, at random times, of writers appending 2 MB batches."""
    rng = random.Random(7)
    acked: dict[str, int] = {}
    for round_ in range(6):
        writer = f"w{round_}"
        proc = spawn_writer(log_dir, writer, batches=1000, batch_size=400, pad=5000)
        line = proc.stdout.readline()  # at least one batch acknowledged
        assert line.startswith("ACK")
        time.sleep(rng.uniform(0.0, 0.2))
        proc.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate(timeout=30)
        acks = [int(x) for x in (line + rest).split() if x != "ACK"]
        acked[writer] = acks[-1]
    seqs = check_records(read_log(log_dir), pad=5000)
    for writer, last in acked.items():
        got = seqs[writer]
        assert got == list(range(len(got))), f"{writer}: gap or reorder"
        assert len(got) - 1 >= last, f"{writer}: acknowledged up to {last}, found {len(got) - 1}"
        assert len(got) % 400 == 0, f"{writer}: a partial batch is visible"


def test_a_torn_tail_is_invisible_to_readers_and_cut_by_the_next_writer(log_dir):
    with open_transport(data_dir=str(log_dir)) as t, t.producer() as p:
        p.produce("t", 0, b"one")
        p.flush()
    with open(log_dir / "topics/t/0.log", "ab") as f:
        f.write(b"\xde\xad\xbe\xef" * 10)  # what a writer killed mid-frame leaves
    with open_transport(data_dir=str(log_dir)) as t:
        assert t.watermarks(TP) == (0, 1)
        with t.consumer() as c:
            c.assign({TP: 0})
            assert [r.value for r in c.poll(10, 0.5)] == [b"one"]
            assert c.poll(10, 0.2) == []
        with t.producer() as p:
            p.produce("t", 0, b"two")
            assert p.flush() == {TP: 1}
    assert [r.value for r in read_log(log_dir)] == [b"one", b"two"]


def test_damage_below_the_committed_end_is_reported_not_read(log_dir):
    with open_transport(data_dir=str(log_dir)) as t, t.producer() as p:
        p.produce("t", 0, b"A" * 100)
        p.flush()
    path = log_dir / "topics/t/0.log"
    raw = bytearray(path.read_bytes())
    raw[-10] ^= 0xFF
    path.write_bytes(bytes(raw))
    with open_transport(data_dir=str(log_dir)) as t, t.consumer() as c:
        c.assign({TP: 0})
        with pytest.raises(LogCorrupted, match="damaged frame at position 0"):
            c.poll(10, 0.5)


def test_a_torn_commit_pointer_slot_falls_back_to_the_other(log_dir):
    with open_transport(data_dir=str(log_dir)) as t, t.producer() as p:
        p.produce("t", 0, b"one")
        p.flush()   # pointer seq 1 -> slot 1
        p.produce("t", 0, b"two")
        p.flush()   # pointer seq 2 -> slot 0
    end = log_dir / "topics/t/0.end"
    raw = bytearray(end.read_bytes())
    raw[0:8] = b"\xff" * 8  # tear slot 0: its CRC no longer matches
    end.write_bytes(bytes(raw))
    with open_transport(data_dir=str(log_dir)) as t:
        assert t.watermarks(TP) == (0, 1)  # back to the state the intact slot records


def test_seek_far_into_a_long_partition_uses_the_index(log_dir):
    with open_transport(data_dir=str(log_dir)) as t:
        with t.producer() as p:
            for i in range(30_000):
                p.produce("t", 0, b"%d" % i + b"." * 40, timestamp=i)
            p.flush()
        assert (log_dir / "topics/t/0.idx").stat().st_size > 0
        with t.consumer() as c:
            for target in (0, 1, 12_345, 29_999):
                c.assign({TP: target})
                assert c.poll(1, 1.0)[0].value.startswith(b"%d." % target)
        assert t.offset_for_timestamp(TP, 22_222) == 22_222


def test_a_dead_writers_index_entry_never_sends_a_seek_into_the_middle_of_a_frame(log_dir):
    """A writer killed after its frames and index entry, before its commit pointer, leaves
    an index entry past the committed end. Later appends that pass that position without
    adding an index entry of their own must not make it trusted: seeks at and past it
    would land inside another writer's frame and fail with LogCorrupted on every retry."""
    from eos_runtime.transport.locallog import _INDEX, INDEX_INTERVAL

    idx = log_dir / "topics/t/0.idx"
    base_ts = 10**13  # later than the dead writer's (wall clock) timestamps
    values: list[bytes] = []

    def produce(p, value: bytes) -> None:
        p.produce("t", 0, value, key=b"k", timestamp=base_ts + len(values))
        values.append(value)

    with open_transport(data_dir=str(log_dir)) as t, t.producer() as p:
        produce(p, b"first")  # the index entry at position 0, committed
        p.flush()
    # ~100 KB in one batch: it crosses INDEX_INTERVAL, so it adds an index entry.
    proc = spawn_writer(log_dir, "dead", batches=1, batch_size=20, pad=5000,
                        crash_at="locallog.append.after_data")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL and out == ""
    entries = list(_INDEX.iter_unpack(idx.read_bytes()))
    assert len(entries) == 2, "the dead writer left its index entry"
    stale_offset, stale_pos, _ = entries[1]
    assert stale_pos >= INDEX_INTERVAL

    with open_transport(data_dir=str(log_dir)) as t, t.producer() as p:
        for batch in range(3):  # small batches: no index entry of their own
            for i in range(10):
                produce(p, b"small-%d-%d:" % (batch, i) + b"." * 100)
            p.flush()
        end = t._partition(TP).pointer().end
        assert end < INDEX_INTERVAL
        assert stale_offset < len(values), "the stale entry names a committed offset"
        # One frame from below INDEX_INTERVAL to past the stale entry: the committed end
        # passes it, yet no frame starts where an index entry is due.
        produce(p, b"B" * (stale_pos - end + 1000))
        p.flush()
        assert t._partition(TP).pointer().end > stale_pos
        for batch in range(5):
            for i in range(40):
                produce(p, b"later-%d-%d:" % (batch, i) + b"L" * 1000)
            p.flush()

    high = len(values)
    with open_transport(data_dir=str(log_dir)) as t:
        assert t.watermarks(TP) == (0, high)
        with t.consumer() as c:
            for target in range(stale_offset - 1, high + 1):
                c.assign({TP: target})
                got = []
                while len(got) < high - target:
                    batch = c.poll(100_000, 1.0)
                    assert batch, f"nothing read from offset {target}"
                    got.extend(batch)
                assert [r.offset for r in got] == list(range(target, high))
                assert [r.value for r in got] == values[target:], f"from offset {target}"
        for target in range(stale_offset - 1, high):
            assert t.offset_for_timestamp(TP, base_ts + target) == target


def test_a_reader_racing_a_writer_that_cuts_the_index_uses_whole_entries_only(log_dir, monkeypatch):
    """A reader sizes the index, then a writer cuts a dead writer's entries and starts
    writing its own: the reader gets fewer bytes than it asked for, ending mid-entry."""
    from eos_runtime.transport import locallog
    from eos_runtime.transport.locallog import files as log_files

    with open_transport(data_dir=str(log_dir)) as t:
        with t.producer() as p:
            for i in range(3):
                p.produce("t", 0, b"%d" % i)
            p.flush()
        idx = log_dir / "topics/t/0.idx"
        whole = idx.stat().st_size
        assert whole == locallog._INDEX.size
        with open(idx, "ab") as f:
            f.write(b"\x07" * 10)  # the first bytes of the next writer's entry
        files = t._partition(TP)
        real_fstat = os.fstat

        def fstat_before_the_cut(fd):  # the size the reader saw before the writer's cut
            st = real_fstat(fd)
            if fd != files.idx:
                return st
            return os.stat_result((*st[:6], 3 * locallog._INDEX.size, *st[7:]))

        monkeypatch.setattr(log_files.os, "fstat", fstat_before_the_cut)  # where the index is read
        with t.consumer() as c:
            c.assign({TP: 1})
            assert [r.value for r in c.poll(10, 1.0)] == [b"1", b"2"]
        assert t.offset_for_timestamp(TP, 0) == 0


def test_fsync_mode_appends_and_reads_back(tmp_path):
    with open_transport(data_dir=str(tmp_path), fsync=True) as t:
        t.create_topics([TopicSpec("t", 1)])
        with t.producer() as p:
            p.produce("t", 0, b"durable")
            assert p.flush() == {TP: 0}


def test_no_transactions_on_the_local_log(log_dir):
    with open_transport(data_dir=str(log_dir)) as t:
        assert t.supports_transactions is False
        with pytest.raises(ConfigError, match="no transactions"):
            t.producer(transactional_id="x")


@pytest.mark.parametrize("name", ["", "a/b", "..", "x" * 250, "sp ace"])
def test_invalid_topic_names_are_refused(tmp_path, name):
    with open_transport(data_dir=str(tmp_path)) as t, pytest.raises(ConfigError, match="topic"):
        t.create_topics([TopicSpec(name, 1)])


def test_a_fenced_producer_of_an_older_generation_cannot_even_start(log_dir):
    from eos_runtime.errors import ProducerFenced

    with open_transport(data_dir=str(log_dir)) as t:
        t.fenced_producer("task-1", 5).close()
        with pytest.raises(ProducerFenced, match="generation 4 is not newer than the registered 5"):
            t.fenced_producer("task-1", 4)
        with pytest.raises(ProducerFenced, match="generation 5 is not newer"):
            t.fenced_producer("task-1", 5)  # two instances of one generation: refused
        with t.fenced_producer("task-1", 6) as same:
            same.produce("t", 0, b"x")
            assert same.flush() == {TP: 0}


# --------------------------------------------------------------------------- a read-only log

def read_only_fs(monkeypatch, root: Path, err: int = errno.EROFS,
                 only: str | None = None) -> None:
    """Make ``root`` act, for this process, like a read-only file system (``err`` EROFS) or
    one the user may not write (EACCES): an open for writing or a mkdir under it fails.
    With ``only``, just files whose name ends so fail, and for reading too."""
    real_open, real_mkdir = os.open, os.mkdir
    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    root = root.absolute()

    def under(path) -> bool:
        return Path(os.fsdecode(path)).absolute().is_relative_to(root)

    def fake_open(path, flags, mode=0o777, *, dir_fd=None):
        if under(path) and (os.fsdecode(path).endswith(only) if only else flags & writing):
            raise OSError(err, os.strerror(err), os.fsdecode(path))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def fake_mkdir(path, mode=0o777, *, dir_fd=None):
        if under(path) and not only:
            if Path(path).exists():
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fsdecode(path))
            raise OSError(err, os.strerror(err), os.fsdecode(path))
        return real_mkdir(path, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(os, "mkdir", fake_mkdir)


def files_of(path: Path) -> dict[str, bytes]:
    return {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*"))
            if f.is_file()}


@pytest.mark.parametrize("err", [errno.EROFS, errno.EACCES], ids=["EROFS", "EACCES"])
def test_a_read_only_log_is_read_and_every_write_is_one_error_naming_it(tmp_path, monkeypatch,
                                                                          err):
    data = tmp_path / "log"
    with open_transport(data_dir=str(data)) as t:
        t.create_topics([TopicSpec("t", 2)])
        with t.producer() as p:
            for i in range(300):
                p.produce("t", i % 2, f"v{i}".encode(), key=b"k", timestamp=1000 + i)
            p.flush()
    before = files_of(data)
    # A writer of the log (elsewhere) holds the partition lock: a reader does not need it.
    holder = os.open(data / "topics" / "t" / "0.end", os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    read_only_fs(monkeypatch, data, err)
    try:
        with open_transport(data_dir=str(data)) as t:
            assert t.list_topics() == ["t"] and t.describe("t").partitions == 2
            tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
            assert [t.watermarks(tp) for tp in tps] == [(0, 150), (0, 150)]
            assert t.offset_for_timestamp(tps[1], 1101) == 50
            got = []
            with t.consumer() as c:
                c.assign({tp: 0 for tp in tps})
                deadline = time.monotonic() + 10
                while len(got) < 300 and time.monotonic() < deadline:
                    got.extend(c.poll(1000, 0.1))
            assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(300))

            t.create_topics([TopicSpec("t", 2)])         # exists as asked: nothing to write
            for write in (lambda: t.producer().produce("t", 0, b"x"),
                          lambda: t.create_topics([TopicSpec("new", 1)]),
                          lambda: t.fenced_producer("task-0", 1)):
                with pytest.raises(TransportError) as info:
                    write()
                assert f"local log {data} is read-only" in str(info.value), info.value
                assert "\n" not in str(info.value)
            with pytest.raises(TransportError, match="read-only"):
                t._append(tps[0], [(None, b"x", 0)])
    finally:
        os.close(holder)
    assert files_of(data) == before

    # A read-only directory that holds no log yet: it has no topics.
    empty = tmp_path / "empty"
    empty.mkdir()
    read_only_fs(monkeypatch, empty, err)
    with open_transport(data_dir=str(empty)) as t:
        assert t.list_topics() == []
        with pytest.raises(TopicNotFound):
            t.describe("t")
    assert list(empty.iterdir()) == []


def test_a_partition_whose_files_fail_to_open_halfway_leaves_no_descriptor_open(log_dir,
                                                                                monkeypatch):
    read_only_fs(monkeypatch, log_dir, errno.EACCES, only="0.idx")   # .log, .end open first
    with open_transport(data_dir=str(log_dir)) as t:
        for _ in range(3):
            with pytest.raises(TransportError, match=r"0\.idx"):
                t.watermarks(TP)
    # the log's own descriptors only: another test's thread in this process (a Kafka
    # client's, a sampler's) may open and close descriptors of its own meanwhile
    assert _open_under(log_dir) == []


def _open_under(directory) -> list[str]:
    """The files under ``directory`` this process holds open."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue   # closed meanwhile
        if target.startswith(str(directory)):
            held.append(target)
    return held


MANY_PARTITIONS = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    from eos_runtime.transport import TopicPartition, TopicSpec, open_transport
    t = open_transport(data_dir=sys.argv[1])
    t.create_topics([TopicSpec("wide", 400)])
    with t.producer() as p:
        for rnd in range(2):
            for part in range(400):
                p.produce("wide", part, f"{part}-{rnd}".encode())
            p.flush()
    c = t.consumer()
    c.assign({TopicPartition("wide", part): 0 for part in range(400)})
    seen = []
    for _ in range(100):
        seen += c.poll(10_000, 0.1)
        if len(seen) >= 800:
            break
    assert sorted(r.value.decode() for r in seen) == sorted(
        f"{part}-{rnd}" for part in range(400) for rnd in range(2)), len(seen)
    assert all(t.watermarks(TopicPartition("wide", part)) == (0, 2) for part in range(400))
    t.delete_records(TopicPartition("wide", 7), 1)
    assert t.watermarks(TopicPartition("wide", 7)) == (1, 2)
    print("ok")
""")


def test_a_process_with_a_low_open_file_limit_writes_and_reads_400_partitions(log_dir):
    """Found by reading (issue 22): the log kept 3 open files per partition a process ever
    touched and never closed them, so about 300 partitions exhausted a limit of 1024 (here
    256, the limit of the child process: 400 partitions, 1200 files)."""
    proc = subprocess.run([sys.executable, "-c", MANY_PARTITIONS, str(log_dir)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_a_partition_dropped_from_the_open_ones_stays_open_while_in_use(tmp_path):
    """The transport keeps the files of the partitions used last; one it drops while an
    append or a read still holds it is closed only when that user lets go, so its
    descriptors never become another file's under it."""
    from eos_runtime.transport import locallog

    with open_transport(data_dir=str(tmp_path / "log")) as t:
        t.create_topics([TopicSpec("wide", locallog.OPEN_PARTITIONS + 1)])
        held = t._partition(TopicPartition("wide", 0))
        for part in range(1, locallog.OPEN_PARTITIONS + 1):
            t.watermarks(TopicPartition("wide", part))
        assert TopicPartition("wide", 0) not in t._files
        assert held.pointer().next_offset == 0          # still open for its user
        fd = held.log
        del held
        with pytest.raises(OSError) as closed:
            os.fstat(fd)
        assert closed.value.errno == errno.EBADF


def test_reading_a_log_that_is_not_there_makes_no_directory(tmp_path):
    """A mistyped --data-dir given to a read (``eos jobs``, ``consume``, ``checkpoint
    show``...) must not leave a directory behind: the log is made by its first write."""
    missing = tmp_path / "typo" / "data"
    with open_transport(data_dir=str(missing)) as t:
        assert t.list_topics() == []
        with pytest.raises(TopicNotFound):
            t.describe("lines")
    assert not (tmp_path / "typo").exists()
    with open_transport(data_dir=str(missing)) as t:   # a write makes it
        t.create_topics([TopicSpec("lines", 1)])
        with t.fenced_producer("job.task-0", 1) as p:
            p.produce("lines", 0, b"x")
            p.flush()
    assert t.describe("lines").partitions == 1


def test_a_fence_is_registered_on_a_log_not_made_yet(tmp_path):
    with open_transport(data_dir=str(tmp_path / "new")) as t:
        t.fenced_producer("job.task-0", 1).close()
    assert (tmp_path / "new" / "fences" / "job.task-0").exists()


def test_records_deleted_under_a_scan_are_out_of_range_not_a_damaged_log(tmp_path):
    """A reader checks the low watermark, then scans; another process's delete_records (a
    change log cut below a snapshot, C9) may punch the hole under the scan. The callers
    re-read on OffsetOutOfRange; a damaged-log error told them the data was corrupt."""
    from eos_runtime.errors import OffsetOutOfRange
    from eos_runtime.transport.locallog.files import _scan

    with open_transport(data_dir=str(tmp_path)) as t:
        t.create_topics([TopicSpec("log", 1)])
        tp = TopicPartition("log", 0)
        with t.producer() as p:
            for i in range(3000):
                p.produce("log", 0, b"%04d" % i + b"x" * 1020)
            p.flush()
        files = t._partition(tp)
        scan = _scan(files, files.low()[1], files.pointer().end, 0)
        assert next(scan)[0] == 0            # the first 1 MiB is read
        t.delete_records(tp, 2500)           # ... and the next is freed under it
        with pytest.raises(OffsetOutOfRange, match=r"log\[0\]|deleted"):
            for _ in scan:
                pass
        assert t.watermarks(tp) == (2500, 3000)
        # a damaged frame where nothing was deleted is still one
        pos = t._position_of(tp, 2600)
        os.pwrite(files.log, b"\xff" * 8, pos + 12)
        with pytest.raises(LogCorrupted, match="damaged frame"):
            for _ in _scan(files, files.low()[1], files.pointer().end, 2500):
                pass


@pytest.mark.parametrize("damage", ["end-deleted", "log-cut-short"])
def test_a_partition_missing_a_file_or_its_committed_bytes_is_refused_not_wiped(tmp_path,
                                                                                damage):
    """A reader made a deleted .end again, empty: the next writer then saw a partition
    with nothing committed, cut its log to nothing and wrote offset 0 again under the
    offsets every consumer and commit record had seen."""
    with open_transport(data_dir=str(tmp_path)) as t, t.producer() as p:
        t.create_topics([TopicSpec("t", 1)])
        for i in range(100):
            p.produce("t", 0, b"%d" % i)
        p.flush()
    log = tmp_path / "topics/t/0.log"
    size = log.stat().st_size
    if damage == "end-deleted":
        (tmp_path / "topics/t/0.end").unlink()
    else:
        os.truncate(log, size - 5)
    with open_transport(data_dir=str(tmp_path)) as t:
        with pytest.raises(LogCorrupted, match=r"0\.end|missing|0\.log"):
            t.watermarks(TP)
            with t.producer() as p:
                p.produce("t", 0, b"again")
                p.flush()
    assert log.stat().st_size == (size if damage == "end-deleted" else size - 5)


def test_a_record_that_is_not_bytes_or_its_time_not_64_bits_is_refused_at_produce(tmp_path):
    with open_transport(data_dir=str(tmp_path)) as t, t.producer() as p:
        t.create_topics([TopicSpec("t", 1)])
        for value, key, ts, what in ((5, None, None, "value must be bytes, not int"),
                                     (b"v", "k", None, "key must be bytes, not str"),
                                     (b"v", None, 2**63, "outside 64 bits")):
            with pytest.raises(TransportError, match=what):
                p.produce("t", 0, value, key=key, timestamp=ts)
        p.produce("t", 0, bytearray(b"v"), key=memoryview(b"k"))
        assert p.flush() == {TP: 0}
        with t.consumer() as c:
            c.assign({TP: 0})
            [r] = c.poll(10, 1)
        assert (r.key, r.value) == (b"k", b"v")


@pytest.mark.parametrize("name", ["lines\n", ".hidden", "..", "../x", "a/b", ""])
def test_a_topic_name_the_log_cannot_hold_is_refused_everywhere(tmp_path, name):
    with open_transport(data_dir=str(tmp_path)) as t:
        for act in (lambda: t.create_topics([TopicSpec(name, 1)]),
                    lambda: t.describe(name), lambda: t.delete_topics([name])):
            with pytest.raises(ConfigError, match="invalid topic name"):
                act()
        with pytest.raises(ConfigError, match="invalid fence id"):
            t.fenced_producer(name, 1)
    assert not (tmp_path / "topics").exists() or t.list_topics() == []


def test_a_flush_that_fails_at_one_partition_appends_the_others_once(tmp_path, monkeypatch):
    """A flush appends partition by partition; one failing at the second partition kept
    the first's batch pending, and the flush tried again appended it twice."""
    from eos_runtime.transport.locallog.transport import LocalLogTransport

    with open_transport(data_dir=str(tmp_path)) as t, t.producer() as p:
        t.create_topics([TopicSpec("t", 2)])
        real, failed = LocalLogTransport._append, []

        def append(self, tp, records, fence=None):
            if tp.partition == 1 and not failed:
                failed.append(tp)
                raise TransportError("no space left (once)")
            return real(self, tp, records, fence)

        monkeypatch.setattr(LocalLogTransport, "_append", append)
        p.produce("t", 0, b"a")
        p.produce("t", 1, b"b")
        with pytest.raises(TransportError, match="once"):
            p.flush()
        p.flush()
        assert t.watermarks(TopicPartition("t", 0)) == (0, 1)
        assert t.watermarks(TopicPartition("t", 1)) == (0, 1)


def test_a_write_to_a_topic_another_process_deleted_is_refused_not_acknowledged(tmp_path):
    """A process's open files outlive another's delete_topics: its flush was acknowledged
    (offsets 0 and 1) into files already removed, lost, and kept being after the topic
    was made again (a fresh reader saw it empty)."""
    writer = open_transport(data_dir=str(tmp_path))
    other = open_transport(data_dir=str(tmp_path))
    try:
        writer.create_topics([TopicSpec("t", 1)])
        with writer.producer() as p:
            p.produce("t", 0, b"before")
            p.flush()
            other.delete_topics(["t"])
            p.produce("t", 0, b"lost")
            with pytest.raises(TopicNotFound, match="was deleted"):
                p.flush()
        other.create_topics([TopicSpec("t", 1)])
        with writer.producer() as p:   # the writer finds the new topic
            p.produce("t", 0, b"new")
            assert p.flush() == {TP: 0}
        assert other.watermarks(TP) == (0, 1)
    finally:
        writer.close()
        other.close()


def test_a_large_flush_is_written_without_a_second_copy_of_it(tmp_path):
    """A fenced producer (exactly-once on the local log) appends a version in one flush; a
    big state's snapshot is one. The flush joined its frames into one bytes object, so it
    held the version twice (a review measured 80 MiB of memory for 40 MiB of records): a
    state over half the free memory could never snapshot. Counted, not timed."""
    import tracemalloc

    with open_transport(data_dir=str(tmp_path)) as t:
        t.create_topics([TopicSpec("t", 1)])
        p = t.fenced_producer("job.task-0", 1)
        try:
            for i in range(40):
                p.produce("t", 0, bytes([i]) * (1 << 20))
            tracemalloc.start()
            try:
                assert p.flush() == {TP: 39}
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        finally:
            p.close()
        assert peak < 8 << 20, f"the flush allocated {peak >> 20} MiB for 40 MiB"
        with t.consumer() as c:
            c.assign({TP: 39})
            [last] = c.poll(1, 5)
        assert last.value == bytes([39]) * (1 << 20)


def test_a_topic_the_disk_cannot_hold_is_one_error_and_leaves_nothing_half_made(
        tmp_path, monkeypatch):
    """A full disk while a topic was made gave a bare OSError traceback, and left its
    half-made directory behind."""
    import errno as errnos
    from pathlib import Path as P

    real = P.touch

    def full(self, *a, **k):
        if self.name == "1.idx":
            raise OSError(errnos.ENOSPC, "No space left on device", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(P, "touch", full)
    with open_transport(data_dir=str(tmp_path)) as t:
        with pytest.raises(TransportError, match=r"cannot create topic 't' \(No space left"):
            t.create_topics([TopicSpec("t", 2)])
        assert list((tmp_path / "topics").iterdir()) == []
