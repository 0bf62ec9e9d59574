"""The change log's bound (recovery C7-C9): a snapshot lets the log below it go, and a
recovery from what is left ends where a recovery from the whole log does. The rules are
driven directly; then a real committer on the local log and on Kafka, with RocksDB, keeps
an idle task's log short and recovers a fresh store from the cut log."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eos_runtime.protocol.recovery import (
    MAX_CARRIED_RANGES,
    RecoveryFold,
    carried_ranges,
    snapshot_due,
)
from eos_runtime.protocol.wire import (
    ChangeLogAbort,
    ChangeLogBase,
    ChangeLogBatch,
    ChangeLogCommit,
    ChangeLogData,
    OutputRange,
    decode_changelog,
    encode,
)


def fold_into(log, start=0):
    """Fold ``log[start:]`` into a dict store as ``joblog.changelog`` does into RocksDB."""
    fold, state = RecoveryFold(), {}
    for offset in range(start, len(log)):
        batch = fold.feed(offset, log[offset])
        if batch is not None:
            if batch.replace:
                state = {}
            for _, key, value in batch.changes:
                if value is None:
                    state.pop(key, None)
                else:
                    state[key] = value
    return fold, state


def test_a_base_record_round_trips_and_is_a_change_log_record():
    assert decode_changelog(encode(ChangeLogBase(3, 7))) == ChangeLogBase(3, 7)


def test_a_snapshots_commit_replaces_the_state():
    log = [ChangeLogAbort(1, 0), ChangeLogData(1, 1, "s", b"gone", b"1"),
           ChangeLogData(1, 1, "s", b"a", b"1"), ChangeLogCommit(1, 1),
           ChangeLogBase(1, 2), ChangeLogData(1, 2, "s", b"a", b"2"), ChangeLogCommit(1, 2)]
    fold, state = fold_into(log)
    assert state == {b"a": b"2"} and fold.version == 2
    assert fold_into(log, 4)[1] == state          # from the base: the same


def test_an_abort_voids_a_snapshot_that_never_committed():
    log = [ChangeLogAbort(1, 0), ChangeLogData(1, 1, "s", b"a", b"1"), ChangeLogCommit(1, 1),
           ChangeLogBase(1, 2), ChangeLogData(1, 2, "s", b"b", b"2"),      # crashed here
           ChangeLogAbort(2, 1), ChangeLogData(2, 2, "s", b"c", b"3"), ChangeLogCommit(2, 2)]
    fold, state = fold_into(log)
    assert state == {b"a": b"1", b"c": b"3"} and fold.version == 2


def test_a_zombies_base_is_ignored():
    log = [ChangeLogAbort(1, 0), ChangeLogData(1, 1, "s", b"a", b"1"), ChangeLogCommit(1, 1),
           ChangeLogAbort(2, 1), ChangeLogBase(1, 2), ChangeLogCommit(1, 2),   # the zombie
           ChangeLogData(2, 2, "s", b"b", b"2"), ChangeLogCommit(2, 2)]
    fold, state = fold_into(log)
    assert state == {b"a": b"1", b"b": b"2"} and fold.ignored == 2


def test_a_snapshot_is_due_once_the_log_outgrows_the_state():
    assert not snapshot_due(99, 0, 100) and snapshot_due(100, 0, 100)
    assert not snapshot_due(150, 40, 100) and snapshot_due(180, 40, 100)


def test_carried_ranges_cover_exactly_what_the_ranges_covered():
    r = OutputRange
    assert carried_ranges([r("o", 0, 5, 9), r("o", 0, 0, 4), r("o", 1, 0, 0),
                           r("o", 0, 12, 13), r("o", 0, 6, 7)]) == \
        (r("o", 0, 0, 9), r("o", 0, 12, 13), r("o", 1, 0, 0))
    assert carried_ranges([]) == ()
    many = [r("o", 0, 2 * i, 2 * i) for i in range(MAX_CARRIED_RANGES + 1)]
    assert carried_ranges(many) is None and carried_ranges(many[1:]) is not None


# A task's life as events: each writes the records a committer writes.
EVENTS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.sampled_from([b"a", b"b", b"c", b"d"]),
              st.sampled_from([b"1", b"2", None])),
    st.tuples(st.just("put_batch"),
              st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d"]),
                                 st.sampled_from([b"1", b"2", None])), min_size=1, max_size=4)),
    st.just(("commit",)), st.just(("snapshot",)), st.just(("crash",)),
    st.just(("crash_mid_snapshot",))), max_size=40)


def life(events):
    """The log a task writes for ``events``, and the committed state a reader must find."""
    gen, version = 1, 0
    log = [ChangeLogAbort(gen, version)]
    committed: dict[bytes, bytes] = {}
    staged: dict[bytes, bytes | None] = {}

    def image():
        """The snapshot's records: its first change alone, the rest in batches of two."""
        state = sorted((k, v) for k, v in {**committed, **staged}.items() if v is not None)
        head = [ChangeLogData(gen, version + 1, "s", k, v) for k, v in state[:1]]
        return head + [ChangeLogBatch(gen, version + 1, "s", tuple(k for k, _ in pair),
                                      tuple(v for _, v in pair))
                       for pair in (state[i:i + 2] for i in range(1, len(state), 2))]

    for event in events:
        kind = event[0]
        if kind == "put":
            staged[event[1]] = event[2]
            log.append(ChangeLogData(gen, version + 1, "s", event[1], event[2]))
        elif kind == "put_batch":   # a key twice in a batch: the later change wins
            staged.update(event[1])
            log.append(ChangeLogBatch(gen, version + 1, "s", tuple(k for k, _ in event[1]),
                                      tuple(v for _, v in event[1])))
        elif kind in ("commit", "snapshot"):
            if kind == "snapshot":   # a snapshot writes the image instead of the changes
                while log and isinstance(log[-1], (ChangeLogData, ChangeLogBatch)) \
                        and log[-1].generation == gen \
                        and log[-1].version == version + 1:
                    log.pop()
                log.append(ChangeLogBase(gen, version + 1))
                log.extend(image())
            version += 1
            log.append(ChangeLogCommit(gen, version))
            committed = {k: v for k, v in {**committed, **staged}.items() if v is not None}
            staged = {}
        else:
            if kind == "crash_mid_snapshot":
                log.append(ChangeLogBase(gen, version + 1))
                log.extend(image()[:1])
            gen += 1
            staged = {}
            log.append(ChangeLogAbort(gen, version))
    return log, committed, version


@settings(max_examples=300, deadline=None)
@given(EVENTS)
def test_recovery_from_any_sealed_snapshot_equals_recovery_from_the_whole_log(events):
    log, committed, version = life(events)
    whole, state = fold_into(log)
    assert state == committed and whole.version == version
    for base, record in enumerate(log):
        if not isinstance(record, ChangeLogBase):
            continue
        sealed = any(isinstance(r, ChangeLogCommit) and r.version == record.version
                     for r in log[base:])
        aborted_first = next((isinstance(r, ChangeLogAbort) for r in log[base + 1:]
                              if isinstance(r, (ChangeLogAbort, ChangeLogCommit))), True)
        if sealed and not aborted_first:   # only a sealed snapshot's base is ever cut to
            cut, cut_state = fold_into(log, base)
            assert cut_state == committed and cut.version == version
            assert cut.commit == whole.commit


@pytest.fixture(params=["local", pytest.param("kafka", marks=pytest.mark.kafka)])
def scripted_job(request, tmp_path):
    from scripted import ScriptedJob

    opts = ({"data_dir": str(tmp_path / "data")} if request.param == "local"
            else {"bootstrap_servers": request.getfixturevalue("kafka_bootstrap")})
    job = ScriptedJob(tmp_path, opts)
    yield job, opts
    job.close()


def test_an_idle_tasks_log_stays_short_and_a_fresh_store_recovers_from_the_cut_log(
        scripted_job, tmp_path):
    """C8 and C9 on a real change log: a sink task with state writes 5 versions of output
    and state, then idles for 60 checkpoints. Its log is cut again and again (the idle
    growth issue 22 found), stays within the bound, and a task with an empty store
    recovers the same state and version from what is left; on the local log the committed
    reader still shows every output record, whose commit records were deleted."""
    from eos_runtime.joblog.changelog import fold_log, last_commit
    from eos_runtime.joblog.committed import read_output
    from eos_runtime.protocol.runs import guarantee_named
    from eos_runtime.runtime.checkpoint import Committer
    from eos_runtime.runtime.outputs import SinkWriter
    from eos_runtime.runtime.task import TaskStats
    from eos_runtime.state import TaskStore
    from eos_runtime.transport import TopicPartition

    job, _ = scripted_job
    stage = job.plan.stage_of(job.task_id)
    assert stage.sink is not None
    opened = []

    def committer(name):
        store = TaskStore(tmp_path / name, ["s"])
        sink = SinkWriter(stage.sink, stage.output_partitions)
        c = Committer(job.t, job.plan, stage, job.task_id, 0, store, None, [sink], None,
                      TaskStats(job.task_id), guarantee=guarantee_named(job.plan.guarantee),
                      snapshot_min_records=12)
        opened.append((c, store))
        return c, store, sink

    tp = TopicPartition(job.plan.changelog_topic, job.task_id)
    try:
        c, store, sink = committer("first")
        c.recover()
        for v in range(1, 66):
            if v <= 5:
                store.put("s", b"k%d" % (v % 3), b"%d" % v)
                sink.write(None, [f"out-{v}"], 0)
            c.checkpoint(v, ())
        low, high = job.t.watermarks(tp)
        assert c.stats.changelog_cuts >= 3 and low > 0
        assert high - low <= 12 + 2 * 3 + 4   # min_records + twice the state + one version
        expected = dict(store.items("s"))
        assert expected == {b"k1": b"4", b"k2": b"5", b"k0": b"3"}

        fresh, fresh_store, _ = committer("fresh")
        recovered = fresh.recover()
        assert recovered.rebuilt is False and recovered.version == 65   # an empty store
        assert dict(fresh_store.items("s")) == expected
        assert fold_log(job.t, tp).version == 65 and last_commit(job.t, tp).version == 65
        out = read_output(job.t, f"{job.name}.out", job=job.name)
        assert sorted(r.value for r in out) == sorted(b"out-%d" % v for v in range(1, 6))
    finally:
        for c, store in opened:
            c.close()
            store.close()


def test_the_committed_view_shows_an_offset_any_commit_covers_when_snapshots_repeat_ranges(
        tmp_path):
    """Between a snapshot's commit and the cut below it (or where a cut failed), the log
    holds a commit's own range and the snapshot's merged one: an offset inside the merged
    range only must show (a reader that looked only at the nearest range start hid it)."""
    from eos_runtime.joblog.committed import committed_ranges
    from eos_runtime.transport import TopicSpec, open_transport

    r = OutputRange
    with open_transport(data_dir=str(tmp_path)) as t:
        t.create_topics([TopicSpec("j.changelog", 1)])
        with t.producer() as p:
            for rec in (ChangeLogCommit(1, 1, output_ranges=(r("o", 0, 0, 1),)),
                        ChangeLogCommit(1, 2, output_ranges=(r("o", 0, 4, 5),)),
                        ChangeLogCommit(1, 3, output_ranges=(r("o", 0, 0, 5), r("o", 0, 9, 9))),
                        ChangeLogCommit(1, 4, output_ranges=(r("o", 0, 1, 2),))):
                p.produce("j.changelog", 0, encode(rec))
            p.flush()
        assert committed_ranges(t, "j.changelog", "o") == {0: [(0, 5), (9, 9)]}


def test_changes_are_batched_by_count_and_bytes_in_order():
    from eos_runtime.joblog import changelog

    keys = [b"k%d" % i for i in range(5)] + [b"big", b"z", b"y", b"x"]
    values = [b"v"] * 5 + [b"v" * 300, None, b"1" * 60, b"2" * 40]
    old = changelog.CHANGES_PER_RECORD, changelog.CHANGE_BYTES_PER_RECORD
    changelog.CHANGES_PER_RECORD, changelog.CHANGE_BYTES_PER_RECORD = 3, 100
    try:
        batches = list(changelog._batches(keys, values))
    finally:
        changelog.CHANGES_PER_RECORD, changelog.CHANGE_BYTES_PER_RECORD = old
    # 3 a record; a record over 100 bytes is cut before the change that passes them
    assert [len(k) for k, _ in batches] == [3, 2, 1, 2, 1]
    assert [k for ks, _ in batches for k in ks] == keys
    assert [v for _, vs in batches for v in vs] == values


def test_a_busy_tasks_log_stays_within_the_bound_counted_in_changes(scripted_job, tmp_path):
    """C8 counts a batch record as the changes it holds: a task that rewrites its 40 keys
    every checkpoint writes one record a version, and its log is still cut to
    ``min_records`` plus three times its state plus a version, in changes (counting
    offsets alone, it would hold 40 versions of 40 keys before its first snapshot)."""
    from eos_runtime.joblog.changelog import _read, fold_log
    from eos_runtime.protocol import wire
    from eos_runtime.protocol.runs import guarantee_named
    from eos_runtime.runtime.checkpoint import Committer
    from eos_runtime.runtime.outputs import SinkWriter
    from eos_runtime.runtime.task import TaskStats
    from eos_runtime.state import TaskStore
    from eos_runtime.transport import TopicPartition

    job, _ = scripted_job
    stage = job.plan.stage_of(job.task_id)
    store = TaskStore(tmp_path / "busy", ["s"])
    c = Committer(job.t, job.plan, stage, job.task_id, 0, store, None,
                  [SinkWriter(stage.sink, stage.output_partitions)], None,
                  TaskStats(job.task_id), guarantee=guarantee_named(job.plan.guarantee),
                  snapshot_min_records=12)
    tp = TopicPartition(job.plan.changelog_topic, job.task_id)
    try:
        c.recover()
        for v in range(1, 41):
            for k in range(40):
                store.put("s", b"k%d" % k, b"%d" % v)
            c.checkpoint(v, ())
        low, high = job.t.watermarks(tp)
        size = high - low   # an offset counts one (Kafka's transaction markers too) ...
        for r in _read(job.t, tp, low, high):
            rec = wire.decode_changelog(r.value)
            if isinstance(rec, wire.ChangeLogBatch):   # ... a batch as its changes
                size += len(rec.keys) - 1
        assert 5 <= c.stats.changelog_cuts <= 20   # a snapshot every other version or so
        assert size <= 12 + 3 * 40 + 2 * (40 + 3)
        assert fold_log(job.t, tp).version == 40
    finally:
        c.close()
        store.close()
