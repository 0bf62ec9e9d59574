"""The main job of the README: word count end to end, verified.

Generates text lines into the ``lines`` topic of a fresh data directory, runs
``examples/wordcount.py`` on Spark (exactly-once by default), reads the committed
output and checks it record by record against counts computed here from the input:
each word seen n times must have exactly the values 1..n, in order.
"""

from __future__ import annotations

import shutil
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import EosError
from .runner import RunSummary, load_pipeline, run_pipeline
from .runtime.committed import read_output
from .transport import TopicSpec, open_transport

__all__ = ["DemoResult", "DemoFailed", "run_demo", "WORDCOUNT"]

WORDCOUNT = Path(__file__).resolve().parent.parent / "examples" / "wordcount.py"


class DemoFailed(EosError):
    """The committed output differs from the oracle."""


@dataclass
class DemoResult:
    summary: RunSummary
    lines: int
    words: int
    output_records: int
    duplicates: int

    def as_dict(self) -> dict[str, Any]:
        return {"lines": self.lines, "distinct_words": self.words,
                "output_records": self.output_records, "duplicates": self.duplicates,
                "verified": True, "run": self.summary.as_dict()}


def run_demo(*, data_dir: str | None = ".eos/demo", bootstrap_servers: str | None = None,
             lines: int = 20_000, guarantee: str = "exactly-once",
             on_progress: Callable[[dict[str, Any]], None] | None = None,
             **run_options: Any) -> DemoResult:
    from .cli_pipeline import generate_words

    pipeline = load_pipeline(WORDCOUNT)
    opts: dict[str, Any]
    if bootstrap_servers:
        import uuid
        name = f"wordcount-{uuid.uuid4().hex[:8]}"  # one broker, many demo runs
        pipeline.rename(name, source=f"{name}-lines", sink=f"{name}-counts")
        opts = {"bootstrap_servers": bootstrap_servers}
    else:
        shutil.rmtree(data_dir, ignore_errors=True)  # the demo's own data: start afresh
        opts = {"data_dir": data_dir}
    source, sink = pipeline.source_topic, pipeline.sink_topic
    text = list(generate_words(lines, seed=42))
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec(source, 2)])
        with t.producer() as p:
            for i, line in enumerate(text):
                p.produce(source, i % 2, line.encode())
            p.flush()
    summary = run_pipeline(pipeline, guarantee=guarantee, on_progress=on_progress, **opts,
                           **run_options)
    with open_transport(**opts) as t:
        records = read_output(t, sink, job=pipeline.name, committed=guarantee == "exactly-once")
    want = Counter(w for line in text for w in line.split())
    got: dict[str, list[int]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        got[r.key.decode()].append(int(r.value))
    for word, n in want.items():
        values = got.get(word, [])
        ok = (values == list(range(1, n + 1)) if guarantee == "exactly-once"
              else set(values) >= set(range(1, n + 1)))
        if not ok:
            raise DemoFailed(f"word {word!r}: seen {n} times, committed output has {len(values)} "
                             f"values starting {values[:10]}")
    if set(got) - set(want):
        raise DemoFailed(f"output has words not in the input: {sorted(set(got) - set(want))[:5]}")
    return DemoResult(summary, len(text), len(want), len(records),
                      len(records) - sum(want.values()))
