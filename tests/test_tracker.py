"""The at-least-once tracker, driven directly: unit cases for T1-T3, and a hypothesis model
in which producers end their run on shared channels while the task reads in random order,
checkpoints on a random timer and restarts from its last checkpoint at random. The run
must end by itself (liveness) and every message must be processed at least once."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eos_runtime.protocol.aligner import ProtocolViolation
from eos_runtime.protocol.runs import run_end
from eos_runtime.protocol.tracker import Tracker

A, B = ("ch", 0), ("ch", 1)
END = run_end(0)


def test_the_run_ends_when_every_lane_gave_its_end_marker():
    t = Tracker([A, B], [1, 2], END)
    for c, p in [(A, 1), (A, 2), (B, 1)]:
        t.on_marker(c, 5, p, END)
    assert not t.finished() and t.lanes_behind() == [(B, 2)]
    t.on_marker(B, 6, 2, END)
    assert t.finished()


def test_markers_below_the_run_end_end_nothing():
    t = Tracker([A], [1], END)
    t.on_marker(A, 0, 1, END - 1)
    assert not t.finished()


def test_ended_lanes_survive_a_restart_through_the_checkpoint():
    t = Tracker([A, B], [1], END)
    t.on_marker(A, 3, 1, END)
    t.on_data(B, 7)
    again = Tracker([A, B], [1], END, inputs=t.inputs())
    assert again.resume_offsets() == {A: 4, B: 8}
    assert again.lanes_behind() == [(B, 1)]


def test_an_earlier_runs_end_ends_nothing_in_the_next_run():
    t = Tracker([A], [1], END)
    t.on_marker(A, 3, 1, END)
    later = Tracker([A], [1], run_end(1), inputs=t.inputs())
    assert not later.finished()


def test_t4_the_watermark_is_the_lowest_lanes_latest_and_survives_a_restart():
    t = Tracker([A, B], [1, 2], END)
    assert t.watermark is None and all(not i.parents for i in t.inputs())   # no event time
    for c, p, w in [(A, 1, 100), (A, 2, 300), (B, 1, 200)]:
        t.on_marker(c, 1, p, 5, w)
    assert t.watermark is None                     # (B, 2) said nothing yet: holds it back
    t.on_marker(B, 2, 2, 5, 150)
    assert t.watermark == 100
    t.on_marker(A, 3, 1, 6, 400)
    assert t.watermark == 150
    t.on_marker(A, 4, 1, 7, 90)                    # never back, lane or task
    assert t.watermark == 150
    # the lanes' markers are behind the resume point: their parents keep what they said
    again = Tracker([A, B], [1, 2], END, inputs=t.inputs(), watermark=150)
    assert again.watermark == 150 and not again.finished()
    again.on_marker(B, 5, 2, 8, 500)
    assert again.watermark == 200                  # (B, 1)'s 200, kept by its parent
    floor_only = Tracker([A, B], [1, 2], END, watermark=150)
    floor_only.on_marker(B, 5, 2, 8, 500)
    assert floor_only.watermark == 150             # without the parents: the floor


def test_unknown_channel_or_producer_raises():
    t = Tracker([A], [1], END)
    with pytest.raises(ProtocolViolation, match="not an input"):
        t.on_data(B, 0)
    with pytest.raises(ProtocolViolation, match="producer 9 is not upstream"):
        t.on_marker(A, 0, 9, END)


def run_tracker_model(draw) -> None:
    n_channels = draw(st.integers(1, 3), label="channels")
    n_producers = draw(st.integers(1, 3), label="producers")
    channels = [("ch", i) for i in range(n_channels)]
    logs: list[list[tuple[str, int, int]]] = [[] for _ in channels]
    uid = 0
    # Each producer: some data, then its end marker on every channel; appends interleave.
    pending = []
    for p in range(n_producers):
        seq = []
        for _ in range(draw(st.integers(0, 4))):
            seq.append((draw(st.integers(0, n_channels - 1)), ("data", p, uid)))
            uid += 1
        seq += [(c, ("marker", p, END)) for c in range(n_channels)]
        pending.append(seq)
    while any(pending):
        seq = draw(st.sampled_from([s for s in pending if s]))
        c, item = seq.pop(0)
        logs[c].append(item)
    t = Tracker(channels, range(n_producers), END)
    checkpoint = t.inputs()
    seen: set[int] = set()
    pos = dict.fromkeys(channels, 0)
    steps = 0
    while not t.finished():
        steps += 1
        assert steps < 2000, "the run never ended"
        unread = [c for c in channels if pos[c] < len(logs[c[1]])]
        assert unread, "the run never ended: everything read, lanes behind " \
                       f"{t.lanes_behind()}"
        choice = draw(st.integers(0, 9), label="step")
        if choice == 0:
            checkpoint = t.inputs()
        elif choice == 1:
            t = Tracker(channels, range(n_producers), END, inputs=checkpoint)
            pos = {c: (0 if o is None else o) for c, o in t.resume_offsets().items()}
            continue
        c = draw(st.sampled_from(unread))
        kind, p, x = logs[c[1]][pos[c]]
        if kind == "data":
            seen.add(x)
            t.on_data(c, pos[c])
        else:
            t.on_marker(c, pos[c], p, x)
        pos[c] += 1
    assert seen == set(range(uid)), "a message was never processed"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_model_at_least_once_ends_every_run_and_loses_nothing(data):
    run_tracker_model(data.draw)
