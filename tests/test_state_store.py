"""The task store's promises, on real RocksDB (rocksdict), no mocks:

1. a process SIGKILLed before commit leaves RocksDB exactly as of the last commit;
2. a process SIGKILLed right after commit() returns keeps the whole batch (WAL);
3. state and checkpoint data never disagree (property test against a dict model, with
   reopens, plus a writer killed at random moments while committing);
4. a second open of the same path raises StateLocked, and the first keeps working;
5. wipe() then restore() rebuilds exactly the given state.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import rocksdict
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from eos_runtime.errors import ConfigError, EosError
from eos_runtime.protocol.wire import CheckpointData
from eos_runtime.state import (
    CHECKPOINT_KEY,
    META_FAMILY,
    StateError,
    StateLocked,
    TaskStore,
)

CP1 = CheckpointData(changelog_offset=10, generation=1, version=1)
CP2 = CheckpointData(changelog_offset=20, generation=1, version=2)


def state_of(store: TaskStore) -> dict[str, dict[bytes, bytes]]:
    return {name: dict(store.items(name)) for name in store.stores}


def run_child(script: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args],
                          capture_output=True, text=True, timeout=timeout)


# --------------------------------------------------------------------------- basics


def test_staging_reads_your_writes_and_keeps_first_touch_order(tmp_path: Path) -> None:
    with TaskStore(tmp_path / "db", ["a", "b"]) as s:
        assert not s.dirty and s.staged() == [] and s.checkpoint_data() is None
        s.put("a", b"k1", b"v1")
        s.delete("b", b"k2")
        s.put("a", b"k0", b"x")
        s.put("a", b"k1", b"v1'")        # last write wins, first-touch position kept
        s.delete("a", b"k0")
        assert s.dirty
        assert s.staged() == [("a", b"k1", b"v1'"), ("b", b"k2", None), ("a", b"k0", None)]
        assert s.get("a", b"k1") == b"v1'"
        assert s.get("a", b"k0") is None and s.get("b", b"k2") is None
        assert s.get("b", b"k1") is None  # same key, other store
        s.commit(CP1)
        assert not s.dirty and s.staged() == []
        assert s.checkpoint_data() == CP1
        assert state_of(s) == {"a": {b"k1": b"v1'"}, "b": {}}
        # a staged delete hides a committed value; discard brings it back
        s.delete("a", b"k1")
        s.put("a", b"k2", b"new")
        assert s.get("a", b"k1") is None
        assert list(s.items("a")) == [(b"k2", b"new")]
        s.discard()
        assert not s.dirty and s.get("a", b"k1") == b"v1'" and s.get("a", b"k2") is None


def test_a_rollback_takes_the_staging_back_to_its_savepoint(tmp_path: Path) -> None:
    """What a record set aside as a dead letter staged goes, and nothing else: a key it
    overwrote gets the earlier record's staged value back, one it staged first is gone."""
    with TaskStore(tmp_path / "db", ["a"]) as s:
        s.put("a", b"n", b"0")
        s.commit(CP1)
        s.put("a", b"n", b"1")           # an earlier record of the version
        s.put("a", b"x", b"x")
        s.savepoint()
        s.put("a", b"n", b"2")           # the failing record overwrites, twice
        s.put("a", b"n", b"3")
        s.delete("a", b"x")
        s.put("a", b"new", b"v")
        s.rollback()
        assert s.staged() == [("a", b"n", b"1"), ("a", b"x", b"x")]
        s.put("a", b"n", b"4")           # the savepoint stays for the next record
        s.rollback()
        assert s.get("a", b"n") == b"1"
        s.discard()                       # a commit or discard ends it
        with pytest.raises(StateError, match="without a savepoint"):
            s.rollback()


def test_items_merges_committed_and_staged_in_key_order(tmp_path: Path) -> None:
    with TaskStore(tmp_path / "db", ["a"]) as s:
        for k in (b"b", b"d", b"f", b"\xff"):
            s.put("a", k, b"c" + k)
        s.commit(CP1)
        s.put("a", b"a", b"s")           # before all
        s.put("a", b"d", b"sd")          # overrides
        s.delete("a", b"f")              # hides
        s.put("a", b"e", b"se")          # between
        s.put("a", b"\xff\x00", b"sz")   # after all
        s.delete("a", b"zz-never-there")
        assert list(s.items("a")) == [(b"a", b"s"), (b"b", b"cb"), (b"d", b"sd"), (b"e", b"se"),
                                      (b"\xff", b"c\xff"), (b"\xff\x00", b"sz")]


@pytest.mark.parametrize("sync", [False, True])
def test_commit_persists_state_and_checkpoint_across_reopen(tmp_path: Path, sync: bool) -> None:
    path = tmp_path / "db"
    with TaskStore(path, ["a", "b"], sync=sync) as s:
        s.put("a", b"k", b"v")
        s.put("b", b"k", b"w")
        s.commit(CP1)
        s.put("a", b"uncommitted", b"x")   # staged only: close drops it
    with TaskStore(path, ["a", "b"]) as s:
        assert s.checkpoint_data() == CP1
        assert state_of(s) == {"a": {b"k": b"v"}, "b": {b"k": b"w"}}
        s.commit(CP2)                       # an empty commit still moves the pointer
    with TaskStore(path, ["a", "b"]) as s:
        assert s.checkpoint_data() == CP2


def test_families_layout_and_checkpoint_record(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with TaskStore(path, ["counts", "sums"]) as s:
        s.put("counts", b"k", b"1")
        s.commit(CP1)
    assert sorted(rocksdict.Rdict.list_cf(str(path))) == sorted(
        ["default", META_FAMILY, "counts", "sums"])
    # read with plain rocksdict: the checkpoint record is the wire-encoded CheckpointData
    from eos_runtime.protocol.wire import decode_checkpoint_data, encode
    opts = rocksdict.Options(raw_mode=True)
    db = rocksdict.Rdict(str(path), opts, column_families={
        n: rocksdict.Options(raw_mode=True) for n in (META_FAMILY, "counts", "sums")})
    meta = db.get_column_family(META_FAMILY)
    counts = db.get_column_family("counts")
    try:
        assert meta.get(CHECKPOINT_KEY) == encode(CP1)
        assert decode_checkpoint_data(meta.get(CHECKPOINT_KEY)) == CP1
        assert counts.get(b"k") == b"1" and db.get(b"k") is None
    finally:
        del meta, counts
        db.close()


def test_every_store_is_tuned_for_point_reads(tmp_path: Path) -> None:
    """RocksDB writes the options it opened with to OPTIONS-*: each store's family has
    Bloom filters (its SST files and its memtable), a hash index in its data blocks and
    two 64 MiB memtables, also after a wipe recreated the families (docs/state.md,
    "Memory")."""
    path = tmp_path / "db"

    def families() -> dict[str, str]:
        """Each ``[CFOptions "name"]`` or ``[TableOptions/BlockBasedTable "name"]``
        section of the newest OPTIONS file, by "kind name"."""
        text = max(path.glob("OPTIONS-*")).read_text()
        return {f"{section.split()[0]} {section.split(chr(34))[1]}": section
                for section in text.split("[") if section.startswith(
                    ("CFOptions ", "TableOptions/BlockBasedTable "))}

    with TaskStore(path, ["counts", "sums"]) as s:
        for reopened in (False, True):
            if reopened:
                s.wipe()
            found = families()
            for name in ("counts", "sums"):
                family = found[f"CFOptions {name}"]
                assert "memtable_whole_key_filtering=true" in family
                assert "memtable_prefix_bloom_size_ratio=0.020000" in family
                assert "write_buffer_size=67108864" in family
                assert "max_write_buffer_number=2" in family
                table = found[f"TableOptions/BlockBasedTable {name}"]
                assert "filter_policy=bloomfilter" in table
                assert "data_block_index_type=kDataBlockBinaryAndHash" in table


def test_errors_are_project_errors_naming_the_problem(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with pytest.raises(ConfigError, match="reserved"):
        TaskStore(path, ["__eos_meta"])
    with pytest.raises(ConfigError, match="reserved"):
        TaskStore(path, ["__eosx"])
    with pytest.raises(ConfigError, match="RocksDB's own"):
        TaskStore(path, ["default"])
    with pytest.raises(ConfigError, match="twice"):
        TaskStore(path, ["a", "a"])
    with pytest.raises(ConfigError, match="sequence"):
        TaskStore(path, "abc")
    s = TaskStore(path, ["a", "b"])
    with pytest.raises(ConfigError, match="known stores: 'a', 'b'"):
        s.get("c", b"k")
    with pytest.raises(ConfigError, match="unknown store 'c'"):
        s.put("c", b"k", b"v")
    with pytest.raises(ConfigError, match="store 'a': key must be bytes, not str"):
        s.put("a", "k", b"v")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="store 'a': value must be bytes, not int"):
        s.put("a", b"k", 1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="key must be bytes"):
        s.get("a", "k")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="key must be bytes"):
        s.get("a", bytearray(b"k"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="key must be bytes"):
        s.delete("b", 3)  # type: ignore[arg-type]
    assert not s.dirty  # refused writes staged nothing
    s.put("a", b"k", b"v")
    with pytest.raises(ConfigError, match="CheckpointData"):
        s.commit((1, 2, 3))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="cannot be stored"):
        s.commit(CheckpointData(-1, 2**31, 0))
    assert s.staged() == [("a", b"k", b"v")]  # a refused commit keeps the staging
    with pytest.raises(StateError, match="discard"):
        s.restore([], CP1)
    s.discard()
    with pytest.raises(ConfigError, match="unknown store 'zz'"):
        s.restore([("a", b"1", b"x"), ("zz", b"k", b"v")], CP1)
    with pytest.raises(ConfigError, match="value must be bytes"):
        s.restore([("a", b"1", b"x"), ("a", b"k", "v")], CP1)
    assert state_of(s) == {"a": {}, "b": {}} and s.checkpoint_data() is None  # nothing applied
    s.close()
    s.close()  # idempotent
    with pytest.raises(StateError, match="closed"):
        s.get("a", b"k")
    with pytest.raises(StateError, match="closed"):
        s.commit(CP1)
    assert issubclass(StateLocked, StateError) and issubclass(StateError, EosError)


def test_undeclared_families_are_kept_unreachable_and_wiped(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with TaskStore(path, ["a", "old"]) as s:
        s.put("old", b"k", b"v")
        s.put("a", b"k", b"v")
        s.commit(CP1)
    with TaskStore(path, ["a", "new"]) as s:      # "old" dropped from the pipeline, "new" added
        assert s.stores == ("a", "new")
        with pytest.raises(ConfigError, match="unknown store 'old'"):
            s.get("old", b"k")
        assert state_of(s) == {"a": {b"k": b"v"}, "new": {}}
        assert "old" in rocksdict.Rdict.list_cf(str(path))
        s.wipe()
    assert "old" not in rocksdict.Rdict.list_cf(str(path))


def test_destroy_removes_a_closed_store_and_refuses_an_open_one(tmp_path: Path) -> None:
    path = tmp_path / "db"
    s = TaskStore(path, ["a"])
    s.put("a", b"k", b"v")
    s.commit(CP1)
    with pytest.raises(StateLocked):
        TaskStore.destroy(path)
    assert s.get("a", b"k") == b"v"
    s.close()
    TaskStore.destroy(path)
    assert not path.exists()
    TaskStore.destroy(path)  # nothing there: fine
    with TaskStore(path, ["a"]) as s:
        assert s.checkpoint_data() is None and state_of(s) == {"a": {}}


def test_undecodable_checkpoint_data_is_a_state_error_naming_the_remedy(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with TaskStore(path, ["a"]) as s:
        s.commit(CP1)
    db = rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True), column_families={
        n: rocksdict.Options(raw_mode=True) for n in (META_FAMILY, "a")})
    meta = db.get_column_family(META_FAMILY)
    meta.put(CHECKPOINT_KEY, b"\x01\x20garbage")
    del meta
    db.close()
    with pytest.raises(StateError, match=r"does not decode.*TaskStore\.destroy"):
        TaskStore(path, ["a"])
    TaskStore.destroy(path)  # works: the failed open released the LOCK
    assert not path.exists()


# --------------------------------------------------------------------------- 4. LOCK


def test_second_open_is_refused_and_the_first_keeps_working(tmp_path: Path) -> None:
    path = tmp_path / "db"
    first = TaskStore(path, ["a"])
    first.put("a", b"k", b"v")
    with pytest.raises(StateLocked) as info:
        TaskStore(path, ["a"])
    assert info.value.path == str(path) and str(path) in str(info.value)
    # another process is refused as well
    child = run_child("""
        import sys
        from eos_runtime.state import TaskStore, StateLocked
        try:
            TaskStore(sys.argv[1], ["a"])
        except StateLocked as e:
            print("LOCKED", e)
            sys.exit(3)
        sys.exit(0)
    """, str(path))
    assert child.returncode == 3, child.stderr
    assert str(path) in child.stdout
    # the first instance is untouched by the failed opens
    assert first.get("a", b"k") == b"v"
    first.commit(CP1)
    assert first.get("a", b"k") == b"v" and first.checkpoint_data() == CP1
    first.close()
    with TaskStore(path, ["a"]) as again:      # close released the LOCK
        assert again.get("a", b"k") == b"v"


def test_close_releases_the_lock_with_an_items_iterator_half_read(tmp_path: Path) -> None:
    # rocksdict keeps the DB (and its LOCK) alive while any of its iterators lives
    path = tmp_path / "db"
    s = TaskStore(path, ["a", "b"])
    for i in range(3000):
        s.put("a", b"%05d" % i, b"v")
    s.commit(CP1)
    it = s.items("a")
    assert next(it) == (b"00000", b"v")
    s.wipe()   # drops and recreates families: handles are re-taken
    s.put("a", b"x", b"y")
    s.commit(CP2)
    s.close()
    with TaskStore(path, ["a", "b"]) as again:
        assert state_of(again) == {"a": {b"x": b"y"}, "b": {}}
    del it


def test_items_spans_several_iterator_chunks(tmp_path: Path) -> None:
    with TaskStore(tmp_path / "db", ["a"]) as s:
        for i in range(0, 5000, 2):
            s.put("a", b"%05d" % i, b"c")
        s.commit(CP1)
        for i in range(0, 5000, 3):         # overwrites, deletes and new keys, interleaved
            if i % 2:
                s.put("a", b"%05d" % i, b"s")
            else:
                s.delete("a", b"%05d" % i)
        expected = {b"%05d" % i: b"c" for i in range(0, 5000, 2) if i % 3}
        expected.update({b"%05d" % i: b"s" for i in range(0, 5000, 3) if i % 2})
        got = list(s.items("a"))
        assert got == sorted(expected.items())


# --------------------------------------------------------------------------- 1 + 2: SIGKILL

CHILD = """
    import os, signal, sys, time
    from eos_runtime.protocol.wire import CheckpointData
    from eos_runtime.state import TaskStore
    path, mode = sys.argv[1], sys.argv[2]
    s = TaskStore(path, ["a", "b"])
    for i in range(1000):
        s.put("a", b"c%04d" % i, b"committed-%d" % i)
    s.delete("b", b"gone")
    if mode != "none":
        s.commit(CheckpointData(1234, 2, 7))
    if mode == "kill_after_commit":
        os.kill(os.getpid(), signal.SIGKILL)
    # uncommitted work: overwrites, deletes and new keys, in both stores
    for i in range(0, 1000, 2):
        s.put("a", b"c%04d" % i, b"uncommitted")
    for i in range(1, 1000, 4):
        s.delete("a", b"c%04d" % i)
    for i in range(5000):
        s.put("b", b"u%05d" % i, b"x" * 100)
    assert s.get("a", b"c0000") == b"uncommitted"
    if mode == "wait":
        print("STAGED", flush=True)
        time.sleep(60)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def committed_by_child() -> dict[str, dict[bytes, bytes]]:
    return {"a": {b"c%04d" % i: b"committed-%d" % i for i in range(1000)}, "b": {}}


@pytest.mark.parametrize("mode", ["none", "commit", "kill_after_commit"])
def test_sigkill_leaves_exactly_the_last_commit(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "db"
    if mode != "kill_after_commit":
        # a state from before the child, which the child's commit (if any) builds on
        with TaskStore(path, ["a", "b"]) as s:
            s.put("b", b"gone", b"old")
            s.put("b", b"kept", b"old")
            s.commit(CP1)
    child = run_child(CHILD, str(path), mode)
    assert child.returncode == -signal.SIGKILL, child.stderr
    with TaskStore(path, ["a", "b"]) as s:
        if mode == "none":
            assert s.checkpoint_data() == CP1
            assert state_of(s) == {"a": {}, "b": {b"gone": b"old", b"kept": b"old"}}
        else:
            assert s.checkpoint_data() == CheckpointData(1234, 2, 7)
            expected = committed_by_child()
            if mode == "commit":
                expected["b"][b"kept"] = b"old"
            assert state_of(s) == expected


def test_sigkill_from_outside_while_staged(tmp_path: Path) -> None:
    path = tmp_path / "db"
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD), str(path), "wait"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "STAGED"
    finally:
        proc.kill()  # SIGKILL
        proc.wait()
    with TaskStore(path, ["a", "b"]) as s:
        assert s.checkpoint_data() == CheckpointData(1234, 2, 7)
        assert state_of(s) == committed_by_child()


# A writer that commits version after version; every commit rewrites the same keys of both
# stores with the version number, so any torn batch shows as keys that disagree with each
# other or with the checkpoint data. It reports each commit after commit() returns.
LOOP_WRITER = """
    import sys
    from eos_runtime.protocol.wire import CheckpointData
    from eos_runtime.state import TaskStore
    path, keys = sys.argv[1], int(sys.argv[2])
    s = TaskStore(path, ["a", "b"])
    cp = s.checkpoint_data()
    v = 0 if cp is None else cp.version
    while True:
        v += 1
        tag = b"%d" % v
        for i in range(keys):
            s.put("a", b"k%05d" % i, tag)
            s.put("b", b"k%05d" % i, tag * 3)
        if v % 3 == 0:
            s.delete("b", b"k00000")
        s.commit(CheckpointData(v * 10, 1, v))
        print(v, flush=True)
"""


@pytest.mark.parametrize("keys, rounds", [(2000, 5), (10, 30)])
def test_sigkill_at_random_moments_during_commits_never_tears_a_batch(
        tmp_path: Path, keys: int, rounds: int) -> None:
    path = tmp_path / "db"
    rng = random.Random(keys)
    acked = 0
    for _ in range(rounds):
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(LOOP_WRITER), str(path),
                                 str(keys)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        first = proc.stdout.readline()             # the writer is past its open
        assert first.strip(), "writer died before its first commit"
        time.sleep(rng.uniform(0.0, 0.15))
        proc.kill()
        out, _ = proc.communicate()
        reported = [int(x) for x in (first + out).split()]
        acked = max(acked, max(reported))
        with TaskStore(path, ["a", "b"]) as s:
            cp = s.checkpoint_data()
            assert cp is not None
            v = cp.version
            # rule 2: every commit that returned is there; at most one more got in
            assert acked <= v <= acked + 1, (acked, v)
            acked = v
            assert cp == CheckpointData(v * 10, 1, v)
            tag = b"%d" % v
            a, b = dict(s.items("a")), dict(s.items("b"))
            assert a == {b"k%05d" % i: tag for i in range(keys)}
            expected_b = {b"k%05d" % i: tag * 3 for i in range(keys)}
            if v % 3 == 0:
                del expected_b[b"k00000"]
            assert b == expected_b


# --------------------------------------------------------------------------- 5. wipe + restore


def test_wipe_then_restore_rebuilds_exactly_the_given_state(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with TaskStore(path, ["a", "b"]) as s:
        for i in range(100):
            s.put("a", b"%03d" % i, b"old")
            s.put("b", b"%03d" % i, b"old")
        s.commit(CP1)
        s.put("a", b"staged", b"x")
        s.wipe()
        assert not s.dirty and s.checkpoint_data() is None
        assert state_of(s) == {"a": {}, "b": {}}
        # the change log's committed changes, in log order (later ones win)
        changes = [("a", b"k1", b"1"), ("b", b"k1", b"one"), ("a", b"k2", b"2"),
                   ("a", b"k1", b"1'"), ("b", b"k1", None), ("b", b"k3", b"three"),
                   ("a", b"k4", b"4"), ("a", b"k4", None)]
        s.restore(changes[:3], CheckpointData(5, 1, 1))
        assert s.checkpoint_data() == CheckpointData(5, 1, 1)
        assert state_of(s) == {"a": {b"k1": b"1", b"k2": b"2"}, "b": {b"k1": b"one"}}
        s.restore(iter(changes[3:]), CP2)
        final = {"a": {b"k1": b"1'", b"k2": b"2"}, "b": {b"k3": b"three"}}
        assert state_of(s) == final and s.checkpoint_data() == CP2
    with TaskStore(path, ["a", "b"]) as s:
        assert state_of(s) == final and s.checkpoint_data() == CP2


def test_reads_after_a_restore_or_a_wipe_are_not_the_recent_commits_values(
        tmp_path: Path) -> None:
    """A store answers reads of recently committed keys from memory; a restore or a wipe
    writes RocksDB without a commit, so what it kept must go."""
    with TaskStore(tmp_path / "db", ["a"]) as s:
        get = s.accessors("a")[0]
        s.put("a", b"k", b"committed")
        s.put("a", b"gone", b"committed")
        s.commit(CP1)
        s.restore([("a", b"k", b"restored"), ("a", b"gone", None)], CP2)
        assert s.get("a", b"k") == get(b"k") == b"restored"
        assert s.get("a", b"gone") is None and get(b"gone") is None
        s.put("a", b"k", b"again")
        s.commit(CP1)
        s.wipe()
        assert s.get("a", b"k") is None and get(b"k") is None


def test_a_store_keeps_a_bounded_number_of_recent_values(tmp_path: Path) -> None:
    with TaskStore(tmp_path / "db", ["a"], recent_kept=3) as s:
        get = s.accessors("a")[0]
        for version in range(4):
            for i in range(2):
                s.put("a", b"k%d" % (2 * version + i), b"v%d" % version)
            s.commit(CheckpointData(version, 1, version))
            kept = s._stores["a"].recent
            assert len(kept) == min(3, 2 * version + 2)
        # the newest stay in memory; the oldest are read from RocksDB again
        assert list(kept) == [b"k5", b"k6", b"k7"]
        assert [get(b"k%d" % i) for i in range(8)] == [b"v%d" % (i // 2) for i in range(8)]


def test_a_store_of_large_values_keeps_fewer_recent_keys(tmp_path: Path) -> None:
    """The recent values are bounded in bytes too: keys and values of about 100 bytes,
    1 050 bytes kept, are 10 keys, however many keys the bound allows; small values fill
    it."""
    with TaskStore(tmp_path / "db", ["a"], recent_kept=50, recent_bytes=1_050) as s:
        for i in range(30):
            s.put("a", b"big%02d" % i, b"x" * 100)
        s.put("a", b"gone", b"x" * 100)
        s.delete("a", b"gone")      # a delete weighs its key
        s.commit(CP1)
        assert list(s._stores["a"].recent) == [b"big%02d" % i for i in range(21, 30)] \
            + [b"gone"]
        for i in range(60):
            s.put("a", b"small%02d" % i, b"1")
        s.commit(CP2)
        assert len(s._stores["a"].recent) == 50
        get = s.accessors("a")[0]
        assert get(b"big00") == b"x" * 100 and get(b"gone") is None


def test_an_interrupted_wipe_is_finished_by_the_next_open(tmp_path: Path) -> None:
    """A crash after wipe's first step (checkpoint data deleted) and before its families
    were dropped leaves state without checkpoint data: opening empties it."""
    path = tmp_path / "db"
    with TaskStore(path, ["a"]) as s:
        s.put("a", b"k", b"v")
        s.commit(CP1)
    db = rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True), column_families={
        n: rocksdict.Options(raw_mode=True) for n in (META_FAMILY, "a")})
    meta = db.get_column_family(META_FAMILY)
    del meta[CHECKPOINT_KEY]
    del meta
    db.close()
    with TaskStore(path, ["a"]) as s:
        assert s.checkpoint_data() is None and state_of(s) == {"a": {}}


# --------------------------------------------------------------------------- 3. property test

KEYS = st.sampled_from([b"", b"a", b"b", b"\x00", b"\xff", b"ab"])
VALUES = st.binary(max_size=6)
STORES = st.sampled_from(["s1", "s2"])
CHECKPOINTS = st.builds(CheckpointData, st.integers(0, 2**40), st.integers(0, 5),
                        st.integers(0, 2**40))


class StoreModel(RuleBasedStateMachine):
    """A dict model of committed + staged state; the real store must match it at every
    step and after every reopen."""

    @initialize()
    def open_store(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="eos-state-")
        self.store = self.opened()
        self.committed: dict[str, dict[bytes, bytes]] = {"s1": {}, "s2": {}}
        self.staged: dict[tuple[str, bytes], bytes | None] = {}
        self.checkpoint: CheckpointData | None = None
        self.saved: dict[tuple[str, bytes], bytes | None] | None = None   # at the savepoint

    def opened(self) -> TaskStore:
        # A store keeps 2 keys' recent values, of the 6 keys here: reads go to the recent
        # commits' values, and past them to RocksDB.
        return TaskStore(os.path.join(self.dir, "db"), ["s1", "s2"], recent_kept=2)

    def view(self, store: str) -> dict[bytes, bytes]:
        out = dict(self.committed[store])
        for (s, k), v in self.staged.items():
            if s == store:
                if v is None:
                    out.pop(k, None)
                else:
                    out[k] = v
        return out

    @rule(store=STORES, key=KEYS, value=VALUES)
    def put(self, store: str, key: bytes, value: bytes) -> None:
        self.store.put(store, key, value)
        self.staged[(store, key)] = value

    @rule(store=STORES, key=KEYS)
    def delete(self, store: str, key: bytes) -> None:
        self.store.delete(store, key)
        self.staged[(store, key)] = None

    @rule()
    def savepoint(self) -> None:
        self.store.savepoint()
        self.saved = dict(self.staged)

    @precondition(lambda self: self.saved is not None)
    @rule()
    def rollback(self) -> None:
        self.store.rollback()
        assert self.saved is not None
        self.staged = dict(self.saved)

    @rule(checkpoint=CHECKPOINTS)
    def commit(self, checkpoint: CheckpointData) -> None:
        self.store.commit(checkpoint)
        self.committed = {s: self.view(s) for s in self.committed}
        self.staged = {}
        self.checkpoint = checkpoint
        self.saved = None

    @rule()
    def discard(self) -> None:
        self.store.discard()
        self.staged = {}
        self.saved = None

    @rule(now=st.booleans())
    def reopen(self, now: bool) -> None:
        if not now:  # opening RocksDB costs ~20 ms (it writes and syncs files): every other time
            return
        self.store.close()
        self.store = self.opened()
        self.staged = {}
        self.saved = None
        assert self.store.checkpoint_data() == self.checkpoint
        assert state_of(self.store) == self.committed

    @precondition(lambda self: not self.staged)
    @rule(changes=st.lists(st.tuples(STORES, KEYS, st.none() | VALUES), max_size=8),
          checkpoint=CHECKPOINTS, wipe_first=st.booleans())
    def restore(self, changes: list, checkpoint: CheckpointData, wipe_first: bool) -> None:
        if wipe_first:
            self.store.wipe()
            self.committed = {"s1": {}, "s2": {}}
            self.saved = None
            assert self.store.checkpoint_data() is None
        self.store.restore(changes, checkpoint)
        for store, key, value in changes:
            if value is None:
                self.committed[store].pop(key, None)
            else:
                self.committed[store][key] = value
        self.checkpoint = checkpoint

    @invariant()
    def matches_model(self) -> None:
        s = self.store
        assert s.dirty == bool(self.staged)
        # in first-touch order (the model's dict keeps the order keys were first set)
        assert s.staged() == [(st_, k, v) for (st_, k), v in self.staged.items()]
        by_store = [(name, [k for (st_, k) in self.staged if st_ == name],
                     [v for (st_, _), v in self.staged.items() if st_ == name])
                    for name in ("s1", "s2")]
        assert s.staged_by_store() == [group for group in by_store if group[1]]
        assert s.checkpoint_data() == self.checkpoint
        for store in ("s1", "s2"):
            view = self.view(store)
            assert dict(s.items(store)) == view
            assert [k for k, _ in s.items(store)] == sorted(view)
            get = s.accessors(store)[0]   # a stateful step's reads
            for key in (b"", b"a", b"b", b"\x00", b"\xff", b"ab"):
                assert s.get(store, key) == view.get(key)
                assert get(key) == view.get(key)

    def teardown(self) -> None:
        store = getattr(self, "store", None)
        if store is not None:
            store.close()
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)


StoreModel.TestCase.settings = settings(
    max_examples=50, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_store_matches_dict_model = StoreModel.TestCase
