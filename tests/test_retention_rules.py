"""The retention rule (protocol/retention.py, R1-R2), driven directly."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eos_runtime.protocol.retention import retention_cuts


def test_only_eligible_topics_are_cut_at_the_lowest_reader():
    committed = {("lines", 0): 50, ("lines", 1): 70, ("job.shuffle-1", 0): 9, ("other", 0): 5}
    others = {("lines", 0): [40, 80], ("lines", 1): [90]}
    assert retention_cuts(committed, ["lines", "job.shuffle-1"], others) == {
        ("lines", 0): 40, ("lines", 1): 70, ("job.shuffle-1", 0): 9}


def test_a_reader_without_a_position_blocks_the_cut():
    assert retention_cuts({("lines", 0): 50}, ["lines"], {("lines", 0): [60, None]}) == {}


@given(st.dictionaries(st.tuples(st.sampled_from("abc"), st.integers(0, 3)),
                       st.integers(0, 1000)),
       st.dictionaries(st.tuples(st.sampled_from("abc"), st.integers(0, 3)),
                       st.lists(st.one_of(st.none(), st.integers(0, 1000)), max_size=3)),
       st.sets(st.sampled_from("abc")))
def test_a_cut_is_never_above_any_readers_position(committed, others, eligible):
    cuts = retention_cuts(committed, eligible, others)
    for sp, cut in cuts.items():
        assert sp[0] in eligible
        assert cut <= committed[sp]
        assert all(o is not None and cut <= o for o in others.get(sp, []))
