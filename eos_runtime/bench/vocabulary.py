"""The words of the bench's wordcount: a Zipf vocabulary like real text's, or the small one.

Real text has many distinct words whose frequencies fall off as a power of their rank
(Zipf's law): a few words are most of the text, and most words are rare. The state a
wordcount keeps, its sink's keys and the shuffle's spread over tasks all follow from that.
The ``zipf`` vocabulary gives lines of ``WORDS_A_LINE`` words drawn with probability
proportional to 1 / rank from ``size`` made-up words (default 5 000): pronounceable, of
letters only (so no word is ever a probe's, which has digits), and the frequent ones
short, as in real text. The ``small`` vocabulary is ``eos experiment``'s: 1 to 8 words a
line, uniformly from 12, so every word is counted many times and state stays tiny.

Both are seeded: the same seed gives the same lines, for every system of a bench.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate

from ..errors import ConfigError
from ..experiments.workloads import WORDS, word_lines

__all__ = ["Vocabulary", "KINDS", "DEFAULT_SIZE", "WORDS_A_LINE", "zipf_words"]

KINDS = ("zipf", "small")
DEFAULT_SIZE = 5000
WORDS_A_LINE = 8
#: Zipf's exponent: 1 is the classic fit of word frequencies in natural language.
ZIPF_EXPONENT = 1.0

_CONSONANTS = "bcdfghjklmnprstvz"
_VOWELS = "aeiou"
_SYLLABLES = [c + v for c in _CONSONANTS for v in _VOWELS]
_ENDINGS = ("", "n", "s", "t", "r", "l")


def _word(rank: int) -> str:
    """The word of ``rank`` (0: the most frequent): ``rank + 1`` in bijective base
    len(_SYLLABLES), a syllable a digit, so lower ranks have fewer syllables, then an
    ending by rank. Unique: a word without an ending ends in a vowel, one with it in a
    consonant, and the syllables alone are unique."""
    n, out = rank + 1, []
    while n > 0:
        n, digit = divmod(n - 1, len(_SYLLABLES))
        out.append(_SYLLABLES[digit])
    return "".join(reversed(out)) + _ENDINGS[rank % len(_ENDINGS)]


@lru_cache(maxsize=4)
def zipf_words(size: int) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """The ``size`` words by rank, and their cumulative Zipf weights (for ``choices``)."""
    words = tuple(_word(r) for r in range(size))
    weights = tuple(accumulate(1.0 / (r + 1) ** ZIPF_EXPONENT for r in range(size)))
    return words, weights


@dataclass(frozen=True)
class Vocabulary:
    kind: str = "zipf"
    size: int = DEFAULT_SIZE

    @classmethod
    def of(cls, kind: str, size: int | None) -> Vocabulary:
        """``--vocabulary`` and ``--vocabulary-size`` as given (``size`` None: the default)."""
        if kind not in KINDS:
            raise ConfigError(f"--vocabulary: unknown {kind!r}; choose from {', '.join(KINDS)}")
        if kind == "small":
            if size is not None and size != len(WORDS):
                raise ConfigError(f"--vocabulary-size: the small vocabulary has "
                                  f"{len(WORDS)} words; give a size with --vocabulary zipf")
            return cls("small", len(WORDS))
        return cls("zipf", DEFAULT_SIZE if size is None else size)

    def describe(self) -> str:
        """What the report says of the wordcount input."""
        if self.kind == "small":
            return f"1 to 8 words a line, uniformly from a vocabulary of {self.size}"
        return (f"{WORDS_A_LINE} words a line from a {self.size:,}-word Zipf vocabulary "
                f"(exponent {ZIPF_EXPONENT:g})")

    def lines(self, n: int, seed: int) -> list[str]:
        """``n`` lines; the same for the same seed."""
        if self.kind == "small":
            return word_lines(n, seed)
        words, weights = zipf_words(self.size)
        drawn = random.Random(f"zipf:{seed}").choices(words, cum_weights=weights,
                                                       k=n * WORDS_A_LINE)
        return [" ".join(drawn[i:i + WORDS_A_LINE]) for i in range(0, len(drawn), WORDS_A_LINE)]
