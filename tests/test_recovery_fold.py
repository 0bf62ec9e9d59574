"""The recovery fold and the other pure rules of a task's start, driven directly:
what a change log says after any crash (C1-C5), what a (re)started task announces, when
its run is already over, and which version a source checkpoints at (S1-S3)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eos_runtime.errors import ProtocolViolation
from eos_runtime.protocol.fences import Fences
from eos_runtime.protocol.recovery import RecoveryFold, continued_seqs, trusts_local_store
from eos_runtime.protocol.runs import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    SourceVersions,
    announcement,
    finished_run,
    first_version,
    run_end,
)
from eos_runtime.protocol.wire import (
    ChangeLogAbort,
    ChangeLogCommit,
    ChangeLogData,
    CheckpointData,
    OutputSeq,
)


def data(gen, version, key):
    return ChangeLogData(gen, version, "s", key, b"v")


def test_changes_count_only_with_their_commit():
    fold = RecoveryFold()
    assert fold.feed(0, ChangeLogAbort(1, 0)) is None
    assert fold.feed(1, data(1, 1, b"a")) is None
    batch = fold.feed(2, ChangeLogCommit(1, 1))
    assert batch is not None and [c[1] for c in batch.changes] == [b"a"]
    assert batch.checkpoint == CheckpointData(2, 1, 1)
    assert fold.version == 1 and fold.commit_offset == 2 and fold.replayed == 1


def test_a_generation_start_voids_the_crashed_generations_tail():
    fold = RecoveryFold()
    for off, rec in enumerate([ChangeLogAbort(1, 0), data(1, 1, b"a"), ChangeLogCommit(1, 1),
                               data(1, 2, b"lost"), ChangeLogAbort(2, 1), data(2, 2, b"b")]):
        fold.feed(off, rec)
    batch = fold.feed(6, ChangeLogCommit(2, 2))
    assert [c[1] for c in batch.changes] == [b"b"]
    assert fold.generation == 2 and fold.version == 2


def test_a_zombies_records_after_its_successor_started_are_ignored():
    fold = RecoveryFold()
    for off, rec in enumerate([ChangeLogAbort(1, 0), ChangeLogAbort(2, 0), data(1, 1, b"z"),
                               ChangeLogCommit(1, 1)]):
        assert fold.feed(off, rec) is None
    assert fold.commit is None and fold.ignored == 2


def test_a_local_store_is_trusted_only_at_a_matching_commit():
    local = CheckpointData(5, 2, 7)
    assert trusts_local_store(local, ChangeLogCommit(2, 7))
    assert not trusts_local_store(local, ChangeLogCommit(3, 7))
    assert not trusts_local_store(local, ChangeLogCommit(2, 6))
    assert not trusts_local_store(local, data(2, 7, b"k"))
    assert not trusts_local_store(None, ChangeLogCommit(2, 7))


def test_sequences_continue_from_the_commit():
    commit = ChangeLogCommit(1, 3, (OutputSeq("t", 0, 9), OutputSeq("t", 2, 4),
                                    OutputSeq("other", 1, 99), OutputSeq("t", 7, 1)))
    assert continued_seqs(commit, "t", 3) == [9, 0, 4]
    assert continued_seqs(None, "t", 2) == [0, 0]


def test_announcements():
    end = run_end(0)
    assert announcement(EXACTLY_ONCE, 0, 0) == (("restore", 0),)
    assert announcement(EXACTLY_ONCE, 5, 0) == (("marker", 5), ("restore", 5))
    assert announcement(EXACTLY_ONCE, end, 0) == (("marker", end), ("restore", end))
    assert announcement(AT_LEAST_ONCE, 5, 0) == ()
    assert announcement(AT_LEAST_ONCE, end, 0) == (("marker", end),)   # the end, again


def test_finished_runs():
    assert not finished_run(5, 0)
    assert finished_run(run_end(0), 0)
    assert not finished_run(run_end(0), 1)
    with pytest.raises(ProtocolViolation, match="control topic lost records"):
        finished_run(first_version(2), 1)


def test_source_versions():
    v = SourceVersions(0, 0, None)
    assert v.open == 1 and v.for_checkpoint(10**6) == 1
    v.committed(1)
    assert v.open == 2
    t = SourceVersions(run_end(0), 1, started_ms=1000)
    assert t.open == first_version(1)
    assert t.for_checkpoint(1500) == first_version(1) + 500   # time-derived (S2)
    assert t.for_checkpoint(900) == first_version(1)          # a clock going back
    late = SourceVersions(run_end(0) - 2, 0, started_ms=0)
    assert late.for_checkpoint(2 ** 41) == run_end(0) - 1   # never the run's end (S2)
    late.committed(run_end(0) - 1)
    with pytest.raises(ProtocolViolation, match="used up"):
        late.for_checkpoint(2 ** 41)


def test_fences_keep_a_staircase():
    f = Fences()
    assert f.add(1, 2, 5)
    assert not f.add(1, 2, 5) and not f.add(1, 1, 9)     # dominated (F2)
    assert f.add(1, 3, 8)
    assert f.of(1) == ((2, 5), (3, 8))
    assert f.fenced(1, 1, 6) and not f.fenced(1, 2, 6) and f.fenced(1, 2, 9)
    assert f.add(1, 4, 8) and f.of(1) == ((2, 5), (4, 8))   # (3, 8) dominated by (4, 8)
    f.prune(7)
    assert f.of(1) == ((2, 5), (4, 8))
    f.prune(8)
    assert f.of(1) == ((4, 8),)                             # F3
    assert not f.add(1, 2, 5, committed=8)                  # re-read after a restart


@given(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 10)), max_size=8),
       st.integers(1, 6), st.integers(0, 12))
def test_fences_decide_like_every_restore_ever_made(restores, gen, version):
    """F1-F2: the staircase fences exactly what the whole history fences."""
    f = Fences()
    for g, v in restores:
        f.add(0, g, v)
    assert f.fenced(0, gen, version) == any(gen < g and version > v for g, v in restores)


def test_start_positions_in_order_of_precedence():
    from eos_runtime.protocol.positions import Start, choose_start, resolve

    sp = Start("timestamp", 1_000, "startpoint")
    assert choose_start(checkpoint=5, checkpoint_run=0, run=0, startpoint=sp).why == "startpoint"
    assert choose_start(checkpoint=5, checkpoint_run=0, run=1) == Start("offset", 5, "checkpoint")
    # reset ignores a checkpoint of an earlier run, never its own run's (a retry)
    assert choose_start(checkpoint=5, checkpoint_run=0, run=1, reset=True,
                        default="upcoming") == Start("upcoming", None, "reset")
    assert choose_start(checkpoint=5, checkpoint_run=1, run=1, reset=True).why == "checkpoint"
    assert choose_start(checkpoint=None, checkpoint_run=None, run=0) == Start("oldest", None,
                                                                               "default")
    with pytest.raises(ValueError, match="offset_default 'latest'"):
        choose_start(checkpoint=None, checkpoint_run=None, run=0, default="latest")
    assert resolve(Start("oldest", None, "default"), 3, 9) == 3
    assert resolve(Start("upcoming", None, "default"), 3, 9) == 9
    assert resolve(Start("offset", 9, "checkpoint"), 3, 9) == 9
    assert resolve(Start("timestamp", 7, "startpoint"), 3, 9, at_timestamp=4) == 4
    with pytest.raises(ValueError, match="offset 2 \\(checkpoint\\) is outside"):
        resolve(Start("offset", 2, "checkpoint"), 3, 9)
    with pytest.raises(ValueError, match="needs a value"):
        Start("offset", None, "startpoint")


def test_a_new_generation_exceeds_the_log_and_the_fence():
    from eos_runtime.protocol.recovery import next_generation

    assert next_generation(0, 0) == 1
    assert next_generation(3, 0) == 4          # Kafka: the broker keeps its own epoch
    assert next_generation(3, 4) == 5          # 4 registered, its start record torn
