"""Mutation tests: each mutation of a protocol rule must make a model fail.

A model that passes whatever the rules say proves nothing. Each case below changes one
line of the pure core (the source is edited in memory and loaded as a copy of the module;
nothing on disk changes) and runs the hypothesis model of ``test_aligner.py`` or
``test_tracker.py`` against the copy, expecting a failure. docs/protocol.md lists them.
"""

from __future__ import annotations

import inspect
import sys
import types

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from eos_runtime.protocol import aligner, fences, runs, tracker

import test_aligner
import test_tracker

# (name, module, original text, mutated text, which model)
MUTATIONS = [
    ("keep only the last fence per producer", fences,
     "        stairs[:] = sorted([(g, v) for g, v in stairs "
     "if not (g <= generation and v >= version)]\n"
     "                           + [(generation, version)])",
     "        stairs[:] = [(generation, version)]", "aligned"),
    ("no alignment check after restart", None, None, None, "aligned-no-r9"),
    ("forget end-of-run markers", tracker,
     "                if parent.version >= run_end:   # T3",
     "                if False:", "tracker"),
    ("count a marker read past a buffered message", aligner,
     "below = [(v, w) for o, v, w in lane.markers_read if o < resume]",
     "below = [(v, w) for o, v, w in lane.markers_read]", "aligned"),
    ("ignore buffered versions when skipping", aligner,
     "        return min(self._waiting(committed, floor), default=floor)",
     "        return floor", "aligned"),
    ("name a checkpoint past a version that waits (R2b)", aligner,
     "        if floor <= open_version or self._waiting(open_version, floor):",
     "        if floor <= open_version:", "aligned"),
    ("name every checkpoint after the markers' floor (R2b)", aligner,
     "        if floor <= open_version or self._waiting(open_version, floor):\n"
     "            return open_version\n        return floor",
     "        return max(floor, open_version)", "aligned"),
    ("never read an overflowed channel again", aligner,
     "                self._rereads[c] = self._read_pos[c] = from_offset",
     "                pass", "aligned"),
    ("keep markers read past the overflow point", aligner,
     "                    lane.marker = max([lane.committed_marker]\n"
     "                                      + [v for _, v, _ in lane.markers_read])",
     "                    pass", "aligned"),
    ("never rewind on a restore", aligner,
     "            return RestoreOutcome.REWIND",
     "            return RestoreOutcome.FENCE", "aligned"),
    ("prune every fence but the newest", fences,
     "                         if i + 1 == len(stairs) or stairs[i + 1][1] > committed]",
     "                         if i + 1 == len(stairs)]", "aligned"),
    # Defences the model cannot reach (a fenced producer cannot commit, so it sends no
    # marker above its successor's restore): a unit case each.
    ("count markers of fenced generations", aligner,
     "        if self._fenced(producer, generation, version):\n            return self.aligned()\n",
     "", "unit:test_a_marker_of_a_fenced_generation_never_aligns"),
    ("release a message a pruned fence voided (R2b)", aligner,
     "        if dropped or self._fenced(producer, generation, version):",
     "        if self._fenced(producer, generation, version):",
     "unit:test_a_buffered_message_a_restore_voided_stays_void_after_its_fence_is_pruned"),
    ("keep markers a restore voids", aligner,
     "                lane.marker = max(version, lane.committed_marker)",
     "                pass", "unit:test_a_restore_takes_back_markers_its_fence_voids"),
    ("forget on a rewind the fence that caused it", aligner,
     "        self._fences = fences\n        self._snapshot", "        self._snapshot",
     "unit:test_restore_rewinds_when_the_open_version_used_invalid_messages"),
    ("fence the restored version too", fences,
     "        return any(generation < g and version > v for g, v in stairs)",
     "        return any(generation < g and version >= v for g, v in stairs)", "aligned"),
    ("align one version early", aligner,
     "        return all(lane.marker >= v for lanes",
     "        return all(lane.marker >= v - 1 for lanes", "aligned"),
    ("end a lane only past the run's end", tracker,
     "        if version >= self.run_end:\n", "        if version > self.run_end:\n", "tracker"),
    ("take a lane's watermark from a marker of a later version (W4)", aligner,
     "        marks = [lane.settle(version) for lane in lanes_w]",
     "        marks = [lane.settle(2**62) for lane in lanes_w]", "aligned"),
    ("hold a window open at the run's end for a producer that read nothing (W4)", aligner,
     "wm.highest(self.watermark, wm.lowest_at_end(marks))",
     "wm.highest(self.watermark, wm.lowest(marks))",
     "unit:test_at_the_run_s_end_a_producer_that_read_nothing_holds_no_window_open"),
    ("forget at a restart what a marker before the resume point said (W4)", aligner,
     "                lane.watermark.marker(parent.version, parent.watermark)",
     "                pass", "unit:test_snapshot_round_trips_through_the_commit_record"),
    ("let no lane be idle (W7)", aligner,
     "                self.watermark, [(lane.settled, lane.idle) for lane in lanes_w])",
     "                self.watermark, [(lane.settled, False) for lane in lanes_w])",
     "unit:test_an_idle_producer_holds_no_window_back_until_it_is_busy_again"),
    ("pass over every lane as if idle (W7)", aligner,
     "                self.watermark, [(lane.settled, lane.idle) for lane in lanes_w])",
     "                self.watermark, [(lane.settled, True) for lane in lanes_w])", "aligned"),
    ("let the tracker's idle lanes hold the watermark (W7)", tracker,
     "        return [(w, lane in self._idle) for lane, w in self._watermarks.items()]",
     "        return [(w, False) for lane, w in self._watermarks.items()]",
     "unit:test_the_tracker_passes_over_idle_producers_too"),
    ("hand the run's end markers on unacknowledged", runs,
     "    return version >= run_end(run)", "    return False", "aligned"),
    ("drop the stale check", aligner,
     "        if version < self.version:\n            return Decision.STALE",
     "        if False:\n            return Decision.STALE", "aligned"),
]


def mutant(module: types.ModuleType, old: str, new: str) -> types.ModuleType:
    source = inspect.getsource(module)
    assert source.count(old) == 1, f"mutation target not found once in {module.__name__}: {old!r}"
    copy = types.ModuleType(module.__name__ + "_mutant")
    copy.__package__ = module.__package__
    sys.modules[copy.__name__] = copy   # dataclasses look their module up
    exec(compile(source.replace(old, new), module.__file__ + " (mutant)", "exec"), copy.__dict__)
    return copy


def model_fails(run, examples: int = 1500) -> bool:
    @settings(max_examples=examples, deadline=None, phases=[Phase.generate], database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def model(data):
        run(data.draw)

    try:
        model()
    except Exception:
        return True
    return False


@pytest.mark.parametrize("name,module,old,new,which", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_the_model_catches(name, module, old, new, which, monkeypatch):
    if which == "aligned-no-r9":
        # Under R2b the model's own runs never need R9 (a restart always reads a marker
        # again); a commit an older runtime left does (test_aligner's restart case).
        assert model_fails(lambda draw: test_aligner.restart_from_a_commit_every_marker_is_past(
            check_after_restart=False), 1)
        return
    copy = mutant(module, old, new)
    if module is fences:
        monkeypatch.setattr(aligner, "Fences", copy.Fences)
    elif module is runs:
        monkeypatch.setattr(test_aligner, "markers_awaited", copy.markers_awaited)
    elif module is aligner:
        monkeypatch.setattr(test_aligner, "Aligner", copy.Aligner)
    else:
        monkeypatch.setattr(test_tracker, "Tracker", copy.Tracker)
        monkeypatch.setattr(tracker, "Tracker", copy.Tracker)   # a unit case imports it
    if which.startswith("unit:"):
        case = getattr(test_aligner, which[len("unit:"):])
        assert model_fails(lambda draw: case(), 1), f"{which} did not catch: {name}"
        return
    run = test_tracker.run_tracker_model if which == "tracker" else test_aligner.run_model
    assert model_fails(run), f"the model did not catch: {name}"


def test_the_unmutated_core_passes_the_same_runs():
    assert not model_fails(test_aligner.run_model, 300)
    assert not model_fails(test_tracker.run_tracker_model, 300)
