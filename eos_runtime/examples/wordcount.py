"""Word count, exactly once.

Input: topic ``lines``, UTF-8 text lines. Output: topic ``counts``, one record per word
occurrence: key = the word (UTF-8), value = that word's running count as a decimal
string ("3": a JSON number is its digits). Under exactly-once the committed output for a
word seen n times is exactly "1", "2", ..., "n".

    eos produce lines --lines-from some.txt
    eos run examples/wordcount.py
    eos consume counts --job wordcount

``count()`` is the built-in running count of a keyed stream; docs/api.md shows the same
count as a stateful function of your own, ``.map(count, stateful=True)``.
"""

from eos_runtime import Pipeline

pipeline = Pipeline("wordcount", processing_guarantee="exactly-once", commit_interval=1.0,
                    parallelism=2)

(pipeline.source("lines", value="utf8")
    .flat_map(str.split)
    .key_by(lambda word: word)
    .count()                                  # each word's running count, in RocksDB
    .sink("counts", key="utf8", value="json"))
