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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eos_runtime.protocol.aligner import (
    Aligner,
    Decision,
    ProtocolViolation,
    RestoreOutcome,
    Snapshot,
)
from eos_runtime.protocol.runs import first_version, markers_awaited, run_end

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
    assert al.checkpoint().version == END   # R2b: versions 2 .. END - 1 were never written
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
    assert al.checkpoint().version == 9       # R2b: 7 and the empty 8, 9 in one
    assert al.version == 10 and not al.aligned()


def test_a_version_whose_marker_names_a_later_one_closes_in_one_checkpoint():
    """R2b: sources send data in their open version V+1 and close it under the commit
    grid's line, a later version M. Every producer's marker is then at M and nothing of
    the versions between waits: one checkpoint, named M, covers it all. Two (V+1, then an
    empty M) cost a second commit, transaction and marker fan-out each interval."""
    al = Aligner([A, B], [1, 2])
    for c, p, off in [(A, 1, 0), (A, 2, 1), (B, 1, 0), (B, 2, 1)]:
        assert al.on_data(c, off, p, 1, 1, 0) == Decision.PROCESS
    for c, p, off in [(A, 1, 2), (A, 2, 3), (B, 1, 2)]:
        assert al.on_marker(c, off, p, 1, 1000) is False
    assert al.on_marker(B, 3, 2, 1, 1000) is True
    assert al.checkpoint().version == 1000
    assert al.version == 1001 and not al.aligned()


def test_a_buffered_message_a_restore_voided_stays_void_after_its_fence_is_pruned():
    """Producer 2's generation-1 message of version 3 waits in the buffer; restores of
    generations 2 (to version 1) and 3 (to version 4) void it; the checkpoint named 5 (R2b)
    prunes the first fence (F3), the only one that voided it. Released afterwards, the
    message is still void: it was dropped from its lane at the restore."""
    al = Aligner([A], [1, 2])
    assert al.on_data(A, 0, 2, 1, 3, 0) == Decision.BUFFER
    assert al.on_restore(A, 1, 2, 2, 1) == RestoreOutcome.FENCE
    assert al.on_restore(A, 2, 2, 3, 4) == RestoreOutcome.FENCE
    al.on_marker(A, 3, 2, 3, 5)
    assert al.on_marker(A, 4, 1, 1, 5) is True
    assert al.checkpoint().version == 5
    assert al.fences_of(2) == ((3, 4),)
    assert al.on_release(A, 0, 2, 1, 3) == Decision.FENCED


def test_next_run_versions_follow_a_run_end_commit():
    al = Aligner([A], [1])
    al.on_marker(A, 0, 1, 1, END)
    snap = al.checkpoint()
    again = Aligner([A], [1], snapshot=snap)   # the next run's task
    assert again.version == END + 1 == first_version(1)
    assert again.on_restore(A, 1, 1, 2, END) == RestoreOutcome.FENCE
    assert again.on_data(A, 2, 1, 2, first_version(1), 0) == Decision.PROCESS


def test_a_marker_of_a_fenced_generation_never_aligns():
    """Defence in depth: a fenced producer cannot commit, so it should send no marker
    above its successor's restore; if one came anyway (a transport that failed to fence),
    counting it would close versions before the successor's messages for them arrived."""
    al = Aligner([A], [1])
    assert al.on_restore(A, 0, 1, 2, 0) == RestoreOutcome.FENCE
    assert al.on_marker(A, 1, 1, 1, 3) is False
    assert al.version == 1 and al.lanes_behind() == [(A, 1)]
    assert al.on_marker(A, 2, 1, 2, 1) is True


def test_a_restore_takes_back_markers_its_fence_voids():
    """A marker read before the restore that fences it stops counting at the restore."""
    al = Aligner([A], [1, 2])
    al.on_marker(A, 0, 1, 1, 3)
    assert al.lanes_behind() == [(A, 2)]
    assert al.on_restore(A, 1, 1, 2, 0) == RestoreOutcome.FENCE
    assert sorted(al.lanes_behind()) == [(A, 1), (A, 2)]
    assert al.on_marker(A, 2, 2, 1, 1) is False


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


def producer_actors(draw, p, n_channels, written=None, idle=False):
    """Appends of producer p: generations 1, 2, 3, ... each of which may crash (mid-version,
    mid-marker-fan-out, or mid-restore-fan-out) and linger as a zombie that writes any of
    its uncommitted versions late, in any order with its successors. ``written``: the
    versions it closes (its stage's, on one commit grid); ``idle``: it sends no data, only
    markers and restores (a source with nothing to read, a table nobody updates)."""
    # Versions need not be consecutive (R2a): a producer may skip some, as a new run does.
    if written is None:
        written = sorted(draw(st.sets(st.integers(1, 8), min_size=1, max_size=4)))
    every = list(range(n_channels))
    chans = st.lists(st.integers(0, n_channels - 1), max_size=0 if idle else 3)
    crashes_left = draw(st.integers(0, 3), label="crashes")

    def emit(gen, v):
        return [(c, Item("data", p, gen, v, next(uids))) for c in draw(chans)]

    actors, restores = [], []
    gen, committed, after = 1, 0, None
    while True:
        appends = []
        if committed:
            appends += [(c, Item("marker", p, gen, committed)) for c in every]  # SEP-10 1.3.1
        restores.append((gen, committed))
        if crashes_left and draw(st.integers(0, 5)) == 0:  # dies while announcing
            sent = draw(st.lists(st.sampled_from(every), unique=True, max_size=n_channels - 1))
            appends += [(c, Item("restore", p, gen, committed)) for c in sent]
            crash = ("announce", committed)
        else:
            appends += [(c, Item("restore", p, gen, committed)) for c in every]  # SEP-10 1.4
            crash = None
            for v in (v for v in written if v > committed):
                appends += emit(gen, v)
                if crashes_left and draw(st.booleans()):
                    kind = draw(st.sampled_from(["mid-version", "mid-fanout"]))
                    if kind == "mid-fanout":
                        sent = draw(st.lists(st.sampled_from(every), unique=True,
                                             max_size=n_channels - 1))
                        appends += [(c, Item("marker", p, gen, v)) for c in sent]
                        crash = (kind, v)
                    else:
                        crash = (kind, committed)
                    break
                appends += [(c, Item("marker", p, gen, v)) for c in every]
                committed = v
                if draw(st.booleans()):  # a duplicated marker (invariant 7)
                    appends.append((draw(st.sampled_from(every)), Item("marker", p, gen, v)))
        actor = Actor(appends, after=after)
        actors.append(actor)
        if crash is None:
            # It ends the run and exits; nothing restarts it to send its end again. Markers
            # handed on unacknowledged (``markers_awaited``) die with its producer on some
            # channels, and the run never ends.
            ends = every if markers_awaited(END, 0) else draw(st.lists(
                st.sampled_from(every), unique=True, max_size=n_channels - 1))
            actor.appends += [(c, Item("marker", p, gen, END)) for c in ends]
            return actors, restores
        crashes_left -= 1
        committed = crash[1]
        crash_index = len(appends) - 1
        # The zombie: this generation goes on writing any uncommitted version, late.
        late = draw(st.lists(st.tuples(st.integers(0, n_channels - 1),
                                       st.sampled_from([v for v in written if v > committed]
                                                       or [committed + 1])), max_size=3))
        actors.append(Actor([(c, Item("data", p, gen, v, next(uids))) for c, v in late],
                            after=(actor, crash_index)))
        after = (actor, crash_index)
        gen += 1


def watermark_of(producer, version):
    """What producer ``producer``'s marker of ``version`` says (W3): any watermark that grows
    with the versions, as W2 and W4 make every producer's."""
    return 1000 * producer + 10 * version


def idle_of(producer, version, idle_producers):
    """Whether producer ``producer``'s marker of ``version`` says idle (W7): an idle
    producer's do at odd versions, so it goes quiet and comes back, again and again."""
    return producer in idle_producers and version % 2 == 1


def valid(item, restores):
    """The reference for invariant 6: every restore a producer ever made applies."""
    return all(not (g > item.generation and item.version > v) for g, v in restores[item.producer])


class Downstream:
    """The task loop's part of the protocol, as ``runtime/task.py`` carries it out: feed what
    is read, checkpoint when aligned (on a marker, and after every start and rewind: R9),
    release buffered messages, seek where the aligner says (R4 rewinds, R8 rereads)."""

    def __init__(self, draw, channels, producers, all_data, restores, *, room,
                 check_after_restart=True):
        self.draw, self.channels, self.producers = draw, channels, producers
        self.all_data, self.restores, self.room = all_data, restores, room
        self.check_after_restart = check_after_restart
        self.al = Aligner(channels, producers)
        self.pos = {c: 0 for c in channels}
        self.open_set, self.buffer, self.committed = [], {}, Counter()
        self.crashes = 0
        self.idle_producers: frozenset[int] = frozenset()   # W7: those that say idle
        self.highest_said: int | None = None   # the highest watermark any marker said

    def seek_to_resume(self):
        self.open_set, self.buffer = [], {}
        for c, off in self.al.resume_offsets().items():
            self.pos[c] = 0 if off is None else off

    def restart(self):
        self.crashes += 1
        self.al = Aligner(self.channels, self.producers, snapshot=self.al.snapshot)
        self.seek_to_resume()
        if self.check_after_restart:
            self.take_checkpoints()

    def take_checkpoints(self):
        al = self.al
        while al.aligned():
            snap = al.checkpoint()
            self.committed.update(self.open_set)
            self.open_set = []
            want = Counter(it.uid for it in self.all_data
                           if valid(it, self.restores) and it.version <= snap.version)
            assert self.committed == want, f"checkpoint {snap.version} holds the wrong messages"
            for c, off in al.rereads().items():
                self.pos[c] = off
            held = [e for v in sorted(self.buffer) if v <= al.version for e in self.buffer.pop(v)]
            for c, off, it in held:
                d = al.on_release(c, off, it.producer, it.generation, it.version)
                if d == Decision.PROCESS:
                    self.processed(it)
            crash = self.draw(st.integers(0, 7), label="crash in checkpoints?") == 0
            if self.crashes < 20 and crash:
                self.restart()  # between two checkpoints (e.g. after the last markers)
                return

    def processed(self, it):
        """W4: the task's watermark when it processes a message of version v is at most what
        the message's producer said at v - 1. A source's watermark at v - 1 is at most the
        highest event time of an active partition then (W2), so a record within the grace
        of that is never late, however the producers' markers interleave."""
        w, said = self.al.watermark, watermark_of(it.producer, it.version - 1)
        # W7's price: a producer that was idle may find the watermark past what it said
        if it.producer not in self.idle_producers:
            assert w is None or w <= said, \
                f"watermark {w} passed producer {it.producer}'s {said} before version {it.version}"
        # and with idle producers too, never past what some marker said
        assert w is None or (self.highest_said is not None and w <= self.highest_said), w
        self.open_set.append(it.uid)

    def read(self, c, off, it):
        al = self.al
        self.pos[c] = off + 1
        if it.kind == "data":
            room = sum(len(v) for v in self.buffer.values()) < self.room
            d = al.on_data(c, off, it.producer, it.generation, it.version, 0, room=room)
            if d == Decision.PROCESS:
                self.processed(it)
            elif d == Decision.BUFFER:
                self.buffer.setdefault(it.version, []).append((c, off, it))
        elif it.kind == "marker":
            said = watermark_of(it.producer, it.version)
            self.highest_said = said if self.highest_said is None else max(self.highest_said,
                                                                           said)
            if al.on_marker(c, off, it.producer, it.generation, it.version, said,
                            idle_of(it.producer, it.version, self.idle_producers)):
                self.take_checkpoints()
        else:
            outcome = al.on_restore(c, off, it.producer, it.generation, it.version)
            if outcome == RestoreOutcome.REWIND:
                al.rewind()
                self.seek_to_resume()
                self.take_checkpoints()   # R9
        assert not set(self.open_set) & set(self.committed), "a message processed twice"


def restart_from_a_commit_every_marker_is_past(*, check_after_restart=True):
    """R9 after R2b: a runtime before R2b committed the data version 1 and, the markers of
    END already read, was to take an empty checkpoint of END next; it crashed in between.
    The restart reads nothing more (every marker lies before its resume point), so only
    the check right after the start ends the run. (Under R2b that commit is one
    checkpoint, named END, so the model itself never reaches this state.)"""
    from eos_runtime.protocol.wire import InputPosition, ParentCheckpoint

    snap = Snapshot(1, (InputPosition("ch", 0, 2, (ParentCheckpoint(1, 1, END, 0, 2),)),), ())
    task = Downstream(lambda *a, **k: 1, [A], [1], [], {1: []}, room=1000,
                      check_after_restart=check_after_restart)
    task.al = Aligner([A], [1], snapshot=snap)
    task.restart()
    assert task.al.reached(END), "the run never ended"


def test_a_restart_whose_markers_are_all_read_checkpoints_at_once():
    restart_from_a_commit_every_marker_is_past()


def run_model(draw, *, check_after_restart=True):
    n_channels = draw(st.integers(1, 3), label="channels")
    channels = [("ch", i) for i in range(n_channels)]
    # The producers of one or two upstream stages (a chain; a merge or a lookup of two,
    # docs/protocol.md, Graphs): a stage's producers close the same versions (one commit
    # grid), stages close different ones, and the second may be idle.
    n_stages = draw(st.integers(1, 2), label="stages")
    actors, restores = [], {}
    p = 0
    for stage in range(n_stages):
        shared = draw(st.booleans(), label="one version set per stage")
        written = (sorted(draw(st.sets(st.integers(1, 8), min_size=1, max_size=4)))
                   if shared else None)
        idle = stage > 0 and draw(st.booleans(), label="an idle stage")
        most = 3 if n_stages == 1 else 2
        for _ in range(draw(st.integers(1, most), label="producers")):
            acts, rs = producer_actors(draw, p, n_channels, written, idle)
            actors += acts
            restores[p] = rs
            p += 1
    n_producers = p

    # Interleave every actor's appends into the channel logs.
    logs = [[] for _ in range(n_channels)]
    while any(a.ready() for a in actors):
        a = draw(st.sampled_from([a for a in actors if a.ready()]))
        c, item = a.appends[a.i]
        a.i += 1
        logs[c].append(item)

    all_data = [it for log in logs for it in log if it.kind == "data"]
    expected = Counter(it.uid for it in all_data if valid(it, restores))
    room = draw(st.sampled_from([0, 1, 2, 1000]), label="buffer bound")
    task = Downstream(draw, channels, list(range(n_producers)), all_data, restores, room=room,
                      check_after_restart=check_after_restart)
    task.idle_producers = frozenset(draw(st.sets(st.integers(0, n_producers - 1), max_size=2),
                                         label="producers that go idle (W7)"))
    task.take_checkpoints()        # R9 at the first start too
    steps = 0
    while True:
        unread = [c for c in channels if task.pos[c] < len(logs[c[1]])]
        if not unread:
            break
        steps += 1
        assert steps < 5000, "no progress"
        if task.crashes < 20 and draw(st.integers(0, 15), label="crash?") == 0:
            task.restart()
            continue
        c = draw(st.sampled_from(unread))
        off = task.pos[c]
        task.read(c, off, logs[c[1]][off])

    # Liveness: the run ended by itself, with nothing left buffered (no extra nudge here).
    assert task.al.reached(END), "the run never ended"
    assert not task.buffer
    assert task.committed == expected, "lost or duplicated messages at the end"
    assert all(n == 1 for n in task.committed.values())
    # W4's liveness: every run-end marker read, the watermark is the lowest they carry
    # (W7: or more, where idle producers let it move past one, as it never goes back).
    lowest_end = min(watermark_of(p, END) for p in range(n_producers))
    if task.idle_producers:
        assert task.al.watermark >= lowest_end
    else:
        assert task.al.watermark == lowest_end


MODEL_SETTINGS = settings(max_examples=400, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@MODEL_SETTINGS
@given(st.data())
def test_model_exactly_once_under_crashes_restores_and_zombies(data):
    run_model(data.draw)


def test_snapshot_round_trips_through_the_commit_record():
    from eos_runtime.protocol import wire

    al = Aligner([A, B], [1, 2])
    for ch in (A, B):
        for p in (1, 2):
            al.on_marker(ch, 3, p, 1, 1, watermark_of(p, 1))
    al.on_marker(A, 4, 1, 1, 5, watermark_of(1, 5))   # before the resume point: not read again
    snap = al.checkpoint()
    assert (snap.version, snap.watermark) == (1, watermark_of(1, 1))
    record = wire.ChangeLogCommit(1, snap.version, (), snap.inputs, snap.fences,
                                  watermark=snap.watermark)
    back = wire.decode_changelog(wire.encode(record))
    again = Aligner([A, B], [1, 2], snapshot=Snapshot(back.version, back.inputs, back.fences,
                                                      back.watermark))
    assert again.snapshot == snap
    # W4 after a restart: the marker of 5 on (A, 1) still says what it said.
    for ch, p in ((B, 1), (A, 2), (B, 2)):
        again.on_marker(ch, 5, p, 1, 5, watermark_of(p, 5))
    assert again.checkpoint().watermark == watermark_of(1, 5)


def test_at_the_run_s_end_a_producer_that_read_nothing_holds_no_window_open():
    """W4 at the end: a producer whose run-end marker carries no watermark (a source task
    whose partitions were all empty) brings nothing more this run; the others' lowest
    counts. Before the end such a producer holds the watermark back, as W4 says."""
    al = Aligner([A], [1, 2])
    al.on_marker(A, 0, 1, 1, 1, 500)
    al.on_marker(A, 1, 2, 1, 1, None)
    assert al.checkpoint().watermark is None
    al.on_marker(A, 2, 1, 1, END, 900)
    al.on_marker(A, 3, 2, 1, END, None)
    assert al.checkpoint().watermark == 900


def test_the_tracker_at_the_run_s_end_also_ignores_a_producer_that_read_nothing():
    from eos_runtime.protocol.tracker import Tracker

    tr = Tracker([A], (1, 2), END)
    tr.on_marker(A, 0, 1, 1, 500)
    tr.on_marker(A, 1, 2, 1, None)
    assert tr.watermark is None
    tr.on_marker(A, 2, 1, END, 900)
    tr.on_marker(A, 3, 2, END, None)
    assert tr.finished() and tr.watermark == 900


def test_an_idle_producer_holds_no_window_back_until_it_is_busy_again():
    """W7 inside a run: producer 2 (a source task with an empty partition, or gone quiet)
    says idle; the task's watermark follows producer 1. Back and behind, producer 2 does
    not take the watermark back; every lane idle, the task is idle and stays where it
    was. Before W7, producer 2's None held the watermark at None for the whole run."""
    al = Aligner([A], [1, 2])
    al.on_marker(A, 0, 1, 1, 1, 500)
    al.on_marker(A, 1, 2, 1, 1, None, True)
    assert (al.checkpoint().watermark, al.idle) == (500, False)
    al.on_marker(A, 2, 1, 1, 2, 900)
    al.on_marker(A, 3, 2, 1, 2, 100)          # busy again, far behind: it holds the
    assert (al.checkpoint().watermark, al.idle) == (500, False)   # watermark, not back
    al.on_marker(A, 4, 1, 1, 3, 1_000, True)
    al.on_marker(A, 5, 2, 1, 3, 950)
    assert al.checkpoint().watermark == 950
    al.on_marker(A, 6, 1, 1, 4, 1_000, True)
    al.on_marker(A, 7, 2, 1, 4, 990, True)
    assert (al.checkpoint().watermark, al.idle) == (1_000, True)   # the highest read
    # a restore starts every lane busy at the snapshot's watermark, idle or not before
    back = Aligner([A], [1, 2], snapshot=al.snapshot)
    assert (back.watermark, back.idle) == (1_000, False)


def test_the_tracker_passes_over_idle_producers_too():
    from eos_runtime.protocol.tracker import Tracker

    tr = Tracker([A], (1, 2), END)
    tr.on_marker(A, 0, 1, 1, 500)
    tr.on_marker(A, 1, 2, 1, None, True)
    assert (tr.watermark, tr.idle) == (500, False)
    tr.on_marker(A, 2, 2, 2, 100)             # busy again, far behind: no going back
    assert (tr.watermark, tr.idle) == (500, False)
    tr.on_marker(A, 3, 1, 3, 700, True)
    tr.on_marker(A, 4, 2, 3, 600, True)
    assert (tr.watermark, tr.idle) == (700, True)    # every lane idle: the highest read
    tr.on_marker(A, 5, 1, END, 800)
    tr.on_marker(A, 6, 2, END, 650)
    assert (tr.watermark, tr.idle) == (700, False)   # the run's end: never back


def test_a_lookup_stage_whose_stream_goes_idle_keeps_its_watermark_below_no_bound():
    """Producer 9 is a table's source task (NO_BOUND on every marker, never idle), producer
    1 the stream's; the stream goes idle. The aligner and the tracker took the table's
    NO_BOUND as the watermark (the only busy lane), for good."""
    from eos_runtime.protocol.tracker import Tracker
    from eos_runtime.protocol.watermarks import NO_BOUND

    al = Aligner([A], [1, 9])
    al.on_marker(A, 0, 1, 1, 1, 500)
    al.on_marker(A, 1, 9, 1, 1, NO_BOUND)
    assert al.checkpoint().watermark == 500
    al.on_marker(A, 2, 1, 1, 2, 600, True)
    al.on_marker(A, 3, 9, 1, 2, NO_BOUND)
    assert (al.checkpoint().watermark, al.idle) == (600, True)
    tr = Tracker([A], (1, 9), END)
    tr.on_marker(A, 0, 9, 1, NO_BOUND)
    tr.on_marker(A, 1, 1, 1, 600, True)
    assert (tr.watermark, tr.idle) == (600, True)
    # a run's end where the stream read nothing: the table's NO_BOUND is no watermark
    end = Aligner([A], [1, 9])
    end.on_marker(A, 0, 1, 1, END, None)
    end.on_marker(A, 1, 9, 1, END, NO_BOUND)
    assert end.checkpoint().watermark is None


def test_an_at_least_once_task_restarted_remembers_which_producers_are_idle():
    """An idle at-least-once source takes no checkpoint, so sends no marker, until it
    reads again. A channel task retried from its checkpoint had forgotten the lane was
    idle and held every window open at the checkpoint's watermark."""
    from eos_runtime.protocol import wire
    from eos_runtime.protocol.tracker import Tracker

    tr = Tracker([A], (1, 2), END)
    tr.on_marker(A, 0, 1, 1, 500, True)        # producer 1 goes quiet at 500
    tr.on_marker(A, 1, 2, 1, 5_000)
    assert (tr.watermark, tr.idle) == (5_000, False)
    record = wire.ChangeLogCommit(1, 7, (), tr.inputs(), watermark=tr.watermark)
    back = wire.decode_changelog(wire.encode(record))
    again = Tracker([A], (1, 2), END, inputs=back.inputs, watermark=back.watermark)
    again.on_marker(A, 2, 2, 2, 9_000)         # producer 1 sends nothing more
    assert (again.watermark, again.idle) == (9_000, False)
