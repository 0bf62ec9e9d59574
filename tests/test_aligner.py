"""The marker aligner, driven directly: unit cases for each rule, and a hypothesis model in
which several producers (crashing, restarting, leaving zombies behind) write into shared
channels that a downstream task reads in random order, crashing at random too. At every
checkpoint the committed messages must be exactly the valid messages of versions <= V
(invariants 2 and 3), fences must survive the downstream restart (6), and duplicate
markers and restores must change nothing (7)."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from eos_runtime.protocol.aligner import (
    Aligner, Decision, ProtocolViolation, RestoreOutcome, Snapshot,
)
from eos_runtime.protocol.runs import first_version, run_end

A, B = ("ch", 0), ("ch", 1)
END = run_end(0)   # the end-of-run marker of a job's first run


# --------------------------------------------------------------------------- unit cases


def test_current_version_is_processed_later_buffered_earlier_stale():
    al = Aligner([A], [1])
    assert al.version == 1
    assert al.on_data(A, 0, 1, 1, 1, 0) == Decision.PROCESS
    assert al.on_data(A, 1, 1, 1, 2, 1) == Decision.BUFFER
    assert al.on_marker(A, 2, 1, 1, 1) is True
    snap = al.checkpoint()
    assert snap.version == 1 and al.version == 2
    assert snap.inputs[0].offset == 1  # the buffered message is not in checkpoint 1
    assert al.on_release(A, 1, 1, 1, 2) == Decision.PROCESS
    assert al.on_data(A, 3, 1, 1, 1, 2) == Decision.STALE


def test_alignment_needs_every_producer_on_every_channel():
    al = Aligner([A, B], [1, 2])
    for ch, p in [(A, 1), (A, 2), (B, 1)]:
        assert al.on_marker(ch, 10, p, 1, 1) is False
    assert al.lanes_behind() == [(B, 2)]
    assert al.channels_done() == [A]
    assert al.on_marker(B, 11, 2, 1, 1) is True


def test_checkpoint_before_alignment_raises_and_changes_nothing():
    al = Aligner([A], [1, 2])
    al.on_marker(A, 0, 1, 1, 1)
    before = (al.version, al.snapshot, al.lanes_behind())
    with pytest.raises(ProtocolViolation, match="before alignment"):
        al.checkpoint()
    assert (al.version, al.snapshot, al.lanes_behind()) == before


def test_unknown_channel_or_producer_raises():
    al = Aligner([A], [1])
    with pytest.raises(ProtocolViolation, match="not an input"):
        al.on_data(B, 0, 1, 1, 1, 0)
    with pytest.raises(ProtocolViolation, match="producer 9 is not upstream"):
        al.on_marker(A, 0, 9, 1, 1)


def test_restore_fences_old_generation_and_is_idempotent():
    al = Aligner([A, B], [1])
    assert al.on_data(A, 0, 1, 1, 1, 0) == Decision.PROCESS
    assert al.on_restore(B, 0, 1, 2, 1) == RestoreOutcome.FENCE  # P committed v1: all good
    assert al.on_restore(A, 1, 1, 2, 1) == RestoreOutcome.DUPLICATE
    assert al.on_data(B, 1, 1, 1, 2, 5) == Decision.FENCED       # old gen, version > 1
    assert al.on_data(B, 2, 1, 2, 2, 0) == Decision.BUFFER       # new gen, version 2


def test_restore_rewinds_when_the_open_version_used_invalid_messages():
    al = Aligner([A, B], [1])
    al.on_marker(A, 0, 1, 1, 1)
    al.on_marker(B, 0, 1, 1, 1)
    al.checkpoint()                                              # v1 committed
    assert al.on_data(A, 1, 1, 1, 2, 3) == Decision.PROCESS      # v2 of gen 1
    assert al.on_restore(B, 1, 1, 2, 1) == RestoreOutcome.REWIND  # gen 1 never committed v2
    snap = al.rewind()
    assert snap.version == 1 and al.fence_of(1) == (2, 1)
    assert al.resume_offsets() == {A: 1, B: 1}
    assert al.on_data(A, 1, 1, 1, 2, 3) == Decision.FENCED       # re-read: now fenced


def test_restore_to_a_version_below_the_last_checkpoint_is_a_violation():
    al = Aligner([A], [1])
    al.on_marker(A, 0, 1, 1, 1)
    al.checkpoint()
    with pytest.raises(ProtocolViolation, match="restored to version 0"):
        al.on_restore(A, 1, 1, 2, 0)
    assert al.fence_of(1) is None


def test_markers_past_the_resume_point_are_not_counted_in_the_checkpoint():
    """R6: a marker read after a buffered message must be read again after a restart."""
    al = Aligner([A, B], [1, 2])
    al.on_data(A, 0, 2, 1, 2, 0)              # producer 2 is ahead on A: buffered
    al.on_marker(A, 1, 2, 1, 1)               # ...but its marker 1 comes after
    al.on_marker(A, 2, 1, 1, 1)
    al.on_marker(B, 0, 1, 1, 1)
    al.on_marker(B, 1, 2, 1, 1)
    snap = al.checkpoint()
    parents = {p.producer_id: p for p in snap.inputs[0].parents}
    assert snap.inputs[0].offset == 0
    assert parents[2].resume_offset == 0 and parents[2].version == 0
    assert parents[1].version == 1
    restarted = Aligner([A, B], [1, 2], snapshot=snap)
    assert restarted.version == 2 and restarted.resume_offsets() == {A: 0, B: 2}


def test_a_run_end_marker_closes_every_version_below_it_in_one_step():
    al = Aligner([A], [1])
    al.on_marker(A, 0, 1, 1, END)
    assert al.aligned() and not al.reached(END)
    assert al.checkpoint().version == 1
    assert al.version == END          # R2a: versions 2 .. END - 1 were never written
    assert al.checkpoint().version == END
    assert al.reached(END) and not al.aligned()


def test_skipped_versions_stop_at_the_lowest_buffered_one():
    al = Aligner([A, B], [1, 2])
    al.on_data(A, 0, 1, 1, 7, 0)              # producer 1 jumped ahead: buffered
    al.on_marker(A, 1, 1, 1, 9)
    al.on_marker(A, 2, 2, 1, 12)
    al.on_marker(B, 0, 1, 1, 9)
    al.on_marker(B, 1, 2, 1, 12)
    assert al.checkpoint().version == 1
    assert al.version == 7                    # not 2: versions 2..6 hold nothing
    assert al.on_release(A, 0, 1, 1, 7) == Decision.PROCESS
    assert al.checkpoint().version == 7
    assert al.version == 9 and al.aligned()
    assert al.checkpoint().version == 9
    assert al.version == 10 and not al.aligned()


def test_next_run_versions_follow_a_run_end_commit():
    al = Aligner([A], [1])
    al.on_marker(A, 0, 1, 1, END)
    al.checkpoint()
    snap = al.checkpoint()
    again = Aligner([A], [1], snapshot=snap)   # the next run's task
    assert again.version == END + 1 == first_version(1)
    assert again.on_restore(A, 1, 1, 2, END) == RestoreOutcome.FENCE
    assert again.on_data(A, 2, 1, 2, first_version(1), 0) == Decision.PROCESS


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Item:
    kind: str            # data | marker | restore
    producer: int
    generation: int
    version: int
    uid: int = -1        # data only


class Actor:
    """An append sequence: one producer generation's writes to the channels."""

    def __init__(self, appends, after=None):
        self.appends = appends   # list of (channel index, Item)
        self.i = 0
        self.after = after       # (actor, index): may start once that actor passed index

    def ready(self):
        if self.i >= len(self.appends):
            return False
        return self.after is None or self.after[0].i > self.after[1]


uids = itertools.count()


def producer_actors(draw, p, n_channels):
    """Appends of producer p: generation 1, maybe a crash, a successor and a zombie."""
    # Versions need not be consecutive (R2a): a producer may skip some, as a new run does.
    written = sorted(draw(st.sets(st.integers(1, 8), min_size=1, max_size=3)))
    versions = len(written)
    crash = draw(st.none() | st.tuples(st.integers(1, versions),
                                       st.sampled_from(["mid-version", "mid-fanout"])))
    every = list(range(n_channels))
    chans = st.lists(st.integers(0, n_channels - 1), max_size=3)

    def emit(gen, v):
        return [(c, Item("data", p, gen, v, next(uids))) for c in draw(chans)]

    gen1 = [(c, Item("restore", p, 1, 0)) for c in every]
    restores = [(1, 0)]
    for i, v in enumerate(written, start=1):
        gen1 += emit(1, v)
        if crash and crash[0] == i:
            if crash[1] == "mid-version":
                last_commit = written[i - 2] if i > 1 else 0
            else:
                last_commit = v
                sent = draw(st.lists(st.sampled_from(every), unique=True, max_size=n_channels - 1))
                gen1 += [(c, Item("marker", p, 1, v)) for c in sent]
            break
        gen1 += [(c, Item("marker", p, 1, v)) for c in every]
        if draw(st.booleans()) and n_channels:  # a duplicated marker (invariant 7)
            gen1.append((draw(st.sampled_from(every)), Item("marker", p, 1, v)))
    else:
        gen1 += [(c, Item("marker", p, 1, END)) for c in every]
        return [Actor(gen1)], restores
    first = Actor(gen1)
    crash_index = len(gen1) - 1
    succ = []
    if last_commit:
        succ += [(c, Item("marker", p, 2, last_commit)) for c in every]  # SEP-10 1.3.1
    succ += [(c, Item("restore", p, 2, last_commit)) for c in every]     # SEP-10 1.4
    restores.append((2, last_commit))
    for v in (v for v in written if v > last_commit):
        succ += emit(2, v)
        succ += [(c, Item("marker", p, 2, v)) for c in every]
    succ += [(c, Item("marker", p, 2, END)) for c in every]
    zombie_version = last_commit + 1
    zombie = [(c, Item("data", p, 1, zombie_version, next(uids)))
              for c in draw(st.lists(st.integers(0, n_channels - 1), max_size=3))]
    return [first, Actor(succ, after=(first, crash_index)),
            Actor(zombie, after=(first, crash_index))], restores


def valid(item, restores):
    return all(not (g > item.generation and item.version > v) for g, v in restores[item.producer])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_model_exactly_once_under_crashes_restores_and_zombies(data):
    draw = data.draw
    n_channels = draw(st.integers(1, 3), label="channels")
    n_producers = draw(st.integers(1, 3), label="producers")
    channels = [("ch", i) for i in range(n_channels)]
    actors, restores = [], {}
    for p in range(n_producers):
        acts, rs = producer_actors(draw, p, n_channels)
        actors += acts
        restores[p] = rs

    # Interleave every actor's appends into the channel logs.
    logs = [[] for _ in range(n_channels)]
    while any(a.ready() for a in actors):
        a = draw(st.sampled_from([a for a in actors if a.ready()]))
        c, item = a.appends[a.i]
        a.i += 1
        logs[c].append(item)

    all_data = [it for log in logs for it in log if it.kind == "data"]
    expected = Counter(it.uid for it in all_data if valid(it, restores))

    # The downstream task, reading channels in random order and crashing at random.
    al = Aligner(channels, range(n_producers))
    pos = {c: 0 for c in channels}
    open_set, buffer, committed = [], {}, Counter()

    def reset(snapshot):
        nonlocal open_set, buffer
        open_set, buffer = [], {}
        for c, off in al.resume_offsets().items():
            pos[c] = 0 if off is None else off

    def take_checkpoints():
        nonlocal open_set
        while al.aligned():
            snap = al.checkpoint()
            committed.update(open_set)
            open_set = []
            want = Counter(it.uid for it in all_data
                           if valid(it, restores) and it.version <= snap.version)
            assert committed == want, f"checkpoint {snap.version} holds the wrong messages"
            held = [e for v in sorted(buffer) if v <= al.version for e in buffer.pop(v)]
            for c, off, it in held:
                if al.on_release(c, off, it.producer, it.generation, it.version) == Decision.PROCESS:
                    open_set.append(it.uid)

    steps = 0
    while True:
        unread = [c for c in channels if pos[c] < len(logs[c[1]])]
        if not unread:
            break
        steps += 1
        if steps < 200 and draw(st.integers(0, 15), label="crash?") == 0:
            al = Aligner(channels, range(n_producers), snapshot=al.snapshot)  # restart
            reset(al.snapshot)
            continue
        c = draw(st.sampled_from(unread))
        off = pos[c]
        it = logs[c[1]][off]
        pos[c] += 1
        if it.kind == "data":
            d = al.on_data(c, off, it.producer, it.generation, it.version, 0)
            if d == Decision.PROCESS:
                open_set.append(it.uid)
            elif d == Decision.BUFFER:
                buffer.setdefault(it.version, []).append((c, off, it))
        elif it.kind == "marker":
            if al.on_marker(c, off, it.producer, it.generation, it.version):
                take_checkpoints()
        else:
            outcome = al.on_restore(c, off, it.producer, it.generation, it.version)
            if outcome == RestoreOutcome.REWIND:
                al.rewind()
                reset(al.snapshot)
        assert not set(open_set) & set(committed), "a message processed twice"

    take_checkpoints()
    assert al.reached(END) and not buffer
    assert committed == expected, "lost or duplicated messages at the end"
    assert all(n == 1 for n in committed.values())


def test_snapshot_round_trips_through_the_commit_record():
    from eos_runtime.protocol import wire

    al = Aligner([A, B], [1, 2])
    for ch in (A, B):
        for p in (1, 2):
            al.on_marker(ch, 3, p, 1, 1)
    snap = al.checkpoint()
    record = wire.ChangeLogCommit(1, snap.version, (), snap.inputs, snap.fences)
    back = wire.decode_changelog(wire.encode(record))
    again = Aligner([A, B], [1, 2], snapshot=Snapshot(back.version, back.inputs, back.fences))
    assert again.snapshot == snap
