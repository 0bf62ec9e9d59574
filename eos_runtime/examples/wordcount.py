"""Word count, exactly once.

Input: topic ``lines``, UTF-8 text lines. Output: topic ``counts``, one record per word
occurrence: key = the word (UTF-8), value = that word's running count as a UTF-8 decimal
string. Under exactly-once the committed output for a word seen n times is exactly
"1", "2", ..., "n".

    eos produce lines --lines-from some.txt
    eos run examples/wordcount.py
    eos consume counts --job wordcount
"""

from eos_runtime import Pipeline

pipeline = Pipeline("wordcount", processing_guarantee="exactly-once", commit_interval=1.0,
                    parallelism=2)


def count(word, state):
    n = state.get("count", 0) + 1
    state.set("count", n)
    return str(n)


(pipeline.source("lines", value="utf8")
    .flat_map(str.split)
    .key_by(lambda word: word)
    .map(count, stateful=True)
    .sink("counts", key="utf8", value="utf8"))
