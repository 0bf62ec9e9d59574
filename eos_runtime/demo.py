"""The main job of the README: word count end to end, verified.

Generates text lines into the ``lines`` topic of a fresh data directory, runs
``eos_runtime/examples/wordcount.py`` on Spark (exactly-once by default), reads the committed
output and checks it record by record against counts computed here from the input:
each word seen n times must have exactly the values 1..n, in order.

The demo clears its data directory before each run, but only a directory it made
itself (one holding ``DEMO_MARKER``) or an empty one: a command never deletes what
it did not make.
"""

from __future__ import annotations

import logging
import random
import shutil
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError, DemoFailed, EosError
from .joblog.committed import read_output
from .runner import RunSummary, load_pipeline, run_pipeline, state_root
from .scratch_topics import ScratchTopics
from .transport import TopicSpec, open_transport

__all__ = ["DemoResult", "DemoFailed", "run_demo", "prepare_demo_dir", "DEMO_MARKER",
           "WORDCOUNT", "WORDS", "generate_words"]

#: The demo's pipeline, inside the package so an installed wheel has it (the checkout's
#: ``examples/`` links to these files).
WORDCOUNT = Path(__file__).resolve().parent / "examples" / "wordcount.py"
logger = logging.getLogger(__name__)

#: The file that marks a directory as the demo's own, so the demo may clear it.
DEMO_MARKER = ".eos-demo"


#: The fixed vocabulary of ``eos produce --generate words``.
WORDS: tuple[str, ...] = (
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
    "india", "juliett", "kilo", "lima", "mike", "november", "oscar", "papa",
    "quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey", "xray",
    "yankee", "zulu", "stream", "log", "offset", "marker", "checkpoint", "state",
)


def generate_words(count: int, seed: int = 0, *, min_words: int = 1,
                   max_words: int = 10) -> Iterator[str]:
    """``count`` text lines of ``min_words``..``max_words`` words drawn from ``WORDS``.

    Deterministic: the same ``count`` and ``seed`` give the same lines (and a shorter
    ``count`` gives a prefix of a longer one).
    """
    rng = random.Random(seed)
    for _ in range(count):
        n = rng.randint(min_words, max_words)
        yield " ".join(rng.choice(WORDS) for _ in range(n))


def prepare_demo_dir(data_dir: str | Path) -> Path:
    """Make ``data_dir`` an empty directory holding only ``DEMO_MARKER``.

    A missing or empty directory is taken; one holding the marker is cleared; any
    other is refused with a ``ConfigError`` naming it, so a mistyped ``--data-dir``
    cannot wipe a user's topics and job state."""
    path = Path(data_dir).absolute()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"demo data directory {str(path)!r} is not a directory")
    marker = path / DEMO_MARKER
    if path.is_dir() and not marker.is_file():
        if any(path.iterdir()):
            raise ConfigError(
                f"demo data directory {str(path)!r} is not empty and was not made by eos demo; "
                f"it is left as it is: give a new or empty --data-dir (or remove it yourself)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        # The marker goes first so that a demo killed halfway still owns what it left.
        marker.write_text("made by eos demo; eos demo clears this directory at its start\n")
        for child in path.iterdir():
            if child.name == DEMO_MARKER:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    except OSError as exc:
        raise ConfigError(f"demo data directory {str(path)!r}: {exc.strerror or exc}") from None
    return path


@dataclass
class DemoResult:
    summary: RunSummary
    lines: int
    words: int
    output_records: int
    duplicates: int
    # on Kafka: the topics the run made, deleted after the verification unless kept
    removed_topics: list[str] = field(default_factory=list)
    kept_topics: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"lines": self.lines, "distinct_words": self.words,
                "output_records": self.output_records, "duplicates": self.duplicates,
                "verified": True, "removed_topics": self.removed_topics,
                "kept_topics": self.kept_topics, "run": self.summary.as_dict()}


def run_demo(*, data_dir: str | None = ".eos/demo", bootstrap_servers: str | None = None,
             client_config: dict[str, Any] | None = None,
             lines: int = 20_000, guarantee: str = "exactly-once",
             on_progress: Callable[[dict[str, Any]], None] | None = None,
             keep_topics: bool = False, **run_options: Any) -> DemoResult:
    """Run and verify the demo. On Kafka the job is a new one (``wordcount-<random>``)
    whose topics are deleted, with its task state, once its output is verified, unless
    ``keep_topics``; a demo that fails keeps them for inspection and says so. On the local
    log everything stays in ``data_dir`` until the next demo clears it."""
    pipeline = load_pipeline(WORDCOUNT)
    opts: dict[str, Any]
    if bootstrap_servers:
        name = f"wordcount-{uuid.uuid4().hex[:8]}"  # one broker, many demo runs
        pipeline.rename(name, source=f"{name}-lines", sink=f"{name}-counts")
        opts = {"bootstrap_servers": bootstrap_servers}
        if client_config:
            opts["client_config"] = client_config
    else:
        opts = {"data_dir": str(prepare_demo_dir(data_dir or ".eos/demo"))}
    topics = ScratchTopics(opts, pipeline.name)   # before it makes any
    try:
        result = _run_and_verify(pipeline, opts, lines, guarantee, on_progress, run_options)
    except BaseException:
        if bootstrap_servers:
            try:
                kept = ", ".join(topics.made())
            except EosError:   # the broker is gone: the run's own error is what counts
                kept = f"those named after {pipeline.name}"
            logger.warning("the demo's topics are kept on the broker for inspection: %s",
                           kept)
        raise
    if bootstrap_servers and keep_topics:
        result.kept_topics = topics.made()
    elif bootstrap_servers:
        shutil.rmtree(Path(state_root(None, run_options.get("state_dir"))) / pipeline.name,
                      ignore_errors=True)   # the job's task state, made by this run
        result.removed_topics = topics.remove()
    return result


def _run_and_verify(pipeline: Any, opts: dict[str, Any], lines: int, guarantee: str,
                    on_progress: Callable[[dict[str, Any]], None] | None,
                    run_options: dict[str, Any]) -> DemoResult:
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
        records = read_output(t, sink, job=pipeline.name)
    want = Counter(w for line in text for w in line.split())
    got: dict[str, list[int]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        if r.key is None or r.value is None:
            raise DemoFailed(f"output record at partition {r.partition} offset {r.offset} "
                             f"has no key or no value")
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
