"""The bench's wordcount text: a Zipf vocabulary by default, the small one on request; seeded,
so every system of a bench reads the same lines."""

from __future__ import annotations

from collections import Counter

import pytest

from eos_runtime.bench.vocabulary import WORDS_A_LINE, Vocabulary, zipf_words
from eos_runtime.bench.workloads import WORKLOADS, with_vocabulary
from eos_runtime.errors import ConfigError
from eos_runtime.experiments.workloads import WORDS, word_lines


def test_the_same_seed_gives_the_same_lines_and_another_seed_others():
    zipf = Vocabulary()
    assert zipf.lines(500, 3) == zipf.lines(500, 3)
    assert zipf.lines(500, 3) != zipf.lines(500, 4)
    assert WORKLOADS["wordcount"].generate(200, 1) == with_vocabulary(zipf)["wordcount"] \
        .generate(200, 1)


def test_zipf_lines_have_eight_words_of_a_vocabulary_of_the_size_given():
    lines = Vocabulary.of("zipf", 300).lines(4000, 1)
    words = [w for line in lines for w in line.split()]
    assert all(len(line.split()) == WORDS_A_LINE for line in lines)
    assert set(words) <= set(zipf_words(300)[0]) and len(set(zipf_words(300)[0])) == 300
    assert all(w.isalpha() for w in words)   # never a probe's word, which has digits
    # Zipf: the most frequent word about twice the second's, ten times the tenth's
    ranked = [n for _, n in Counter(words).most_common()]
    assert 1.6 < ranked[0] / ranked[1] < 2.5 and 6 < ranked[0] / ranked[9] < 15


def test_the_default_is_zipf_of_5000_words_and_the_small_vocabulary_is_eos_experiments():
    assert Vocabulary.of("zipf", None) == Vocabulary("zipf", 5000)
    assert "5,000-word Zipf vocabulary" in WORKLOADS["wordcount"].description
    small = Vocabulary.of("small", None)
    assert small.lines(100, 7) == word_lines(100, 7) and small.size == len(WORDS)
    assert "uniformly from a vocabulary of 12" in with_vocabulary(small)["wordcount"].description
    with pytest.raises(ConfigError, match="--vocabulary-size: the small vocabulary has 12"):
        Vocabulary.of("small", 5000)


def test_the_oracle_counts_every_word_of_the_zipf_lines():
    workload = WORKLOADS["wordcount"]
    records = workload.generate(50, 2)
    expected = workload.oracle(records)
    assert sum(len(v) for v in expected.results.values()) == 50 * WORDS_A_LINE
