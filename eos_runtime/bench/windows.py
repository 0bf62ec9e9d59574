"""The ``windows`` bench workload: views per page per tumbling window, each window's count
once, when it closes (issue 25, item 6). Its input, oracle, eos_runtime pipeline, and the
window-close latency every system's run is timed by.

Input: views ``{"page": "/p0".."/p9", "ts": ms}`` as JSON, keyed by page, each in the
partition Kafka's default partitioner gives its page, as a producer keyed by page puts
it: every view of a page in one partition, in the order made. Event time is ``ts``: it
advances ``STEP_MS`` per record, each record up to ``JITTER_MS`` behind (out of order,
never late: the jitter is below the grace), so windows close all through a run, not only
at its end. The last ``TAIL`` records are far in the future (``FAR_MS`` past the last
ordinary one), every page 16 times: they push every system's watermark past every
ordinary window, whether it is kept per partition (eos_runtime: a task's lowest over its
inputs), per key (Quix's default closing strategy) or over the whole stream (Spark);
their own windows never close and are not counted.

Keyed, not regrouped by each system: with unkeyed views round-robin over two partitions,
Quix (two processes, ``group_by`` page, then the window) dropped views of one process as
late once the other, ahead of it, had sent the tail through the regroup: a window after
``group_by`` closes by the highest time its key has seen, from whichever upstream process,
with no watermark over them (measured: 779 of 5 000 views dropped, the oracle failed).
eos_runtime's window after a ``key_by`` waits for the lowest over its producers, so
skew between them makes nothing late.

The oracle: each (page, window) of the ordinary records, its count once, in window order
per page. Outputs are compared on ``start|end|count`` (``value_part``), whatever JSON
each system writes.

Window-close latency (``close_latency``): per window result, when it was readable to a
read_committed reader (the first 20 ms sample at which its output partition's last
stable offset had passed it, as for a probe) minus when its page's input partition's
watermark passed the window's end plus grace: the broker append time of the first record
appended to that partition whose event time is at least ``end + grace`` (the highest
event time appended there so far first reached it). That watermark is the input's, the
same for every system: eos_runtime's own (a task reads one partition), Quix's per key
closely (the page's later views are in that partition), Spark's runs ahead of it by the
skew between partitions (its watermark is the highest time over the whole stream, less
the delay).
"""

from __future__ import annotations

import bisect
import json
import random
import time
from collections import Counter
from typing import Any

from ..api import Pipeline
from ..experiments.window_workloads import recent_epoch
from ..experiments.workloads import Expected
from ..runtime.outputs import kafka_partition
from ..transport import Record
from ..windows import tumbling
from .percentiles import percentiles

__all__ = ["WINDOW_MS", "GRACE_MS", "STEP_MS", "JITTER_MS", "FAR_MS", "TAIL", "PAGES", "T0_MS",
           "views", "view_partition", "windows_oracle", "windows_pipeline", "window_part",
           "watermark_steps", "close_latencies", "close_latency", "read_source", "markdown_section"]

InputRecord = tuple[bytes | None, bytes]

WINDOW_MS = 1000            # tumbling windows of 1 s
GRACE_MS = 2000             # a window closes 2 s (event time) after its end
STEP_MS = 1                 # event time per record: 1 000 records a window
JITTER_MS = 250             # a record up to this much behind its place: out of order
#: The tail's distance past the last ordinary record: far beyond every ordinary window's
#: end plus grace, so a watermark at the tail closes them all, and the tail's own windows
#: never close.
FAR_MS = 3_600_000
PAGES = [f"/p{i}" for i in range(10)]
#: Tail records: every page 16 times, so every partition (up to 160, record i in
#: partition i mod N) and every page gets one.
TAIL = len(PAGES) * 16
#: Event time of the first record: yesterday's midnight (UTC), the same for every system
#: of a bench run. Recent, because a result carries its window's time as its timestamp
#: and a broker deletes records older than retention.ms (7 days by default) by it; a
#: fixed date (1 Nov 2026) had the results of a run 26 days later deleted, at the
#: broker's retention checks.
T0_MS = recent_epoch()


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _view(page: str, ts: int) -> InputRecord:
    return page.encode(), _compact({"page": page, "ts": ts})


def views(n: int, seed: int) -> list[InputRecord]:
    """``n`` views: ``n - TAIL`` ordinary ones (at least one), then the far-future tail."""
    rng = random.Random(f"windows:{seed}")
    ordinary = max(n - TAIL, 1)
    out = [_view(rng.choice(PAGES), T0_MS + i * STEP_MS - rng.randrange(JITTER_MS))
           for i in range(ordinary)]
    far = T0_MS + ordinary * STEP_MS + FAR_MS
    return out + [_view(PAGES[j % len(PAGES)], far + j) for j in range(TAIL)]


def view_partition(record: InputRecord, partitions: int) -> int:
    """Where a producer keyed by page puts a view (Kafka's default partitioner)."""
    return kafka_partition(record[0] or b"", partitions)


def _window_text(start: int, end: int, count: int) -> str:
    return f"{start}|{end}|{count}"


def window_part(value: bytes) -> bytes:
    """A window result's ``start|end|count``, from any system's JSON
    ``{"start", "end", "value"}``."""
    try:
        w = json.loads(value)
        return _window_text(int(w["start"]), int(w["end"]), int(w["value"])).encode()
    except (ValueError, TypeError, KeyError):
        return value   # not a window result: the oracle counts it unexpected


def _window_identity(value: str) -> str:
    return window_part(value.encode()).decode()


def windows_oracle(records: list[InputRecord]) -> Expected:
    """Per page, each window of its ordinary views with its count, in window order."""
    parsed = [json.loads(v) for _, v in records]
    far = max(int(v["ts"]) for v in parsed) - FAR_MS // 2 if parsed else 0
    counts: Counter[tuple[str, int]] = Counter()
    for v in parsed:
        ts = int(v["ts"])
        if ts < far:   # not the tail
            counts[(str(v["page"]), ts - ts % WINDOW_MS)] += 1
    results: dict[str, list[str]] = {}
    for (page, start), n in sorted(counts.items()):
        results.setdefault(page, []).append(_window_text(start, start + WINDOW_MS, n))
    return Expected(results, identity=_window_identity)


def _view_time(view: dict[str, Any]) -> int:
    return int(view["ts"])


def windows_pipeline() -> Pipeline:
    """Views per page per tumbling second, final: each window's count once, when the
    watermark passes its end plus grace."""
    pipeline = Pipeline("windows", processing_guarantee="exactly-once", commit_interval=1.0,
                        parallelism=2)
    (pipeline.source("views", key="utf8", value="json", timestamp=_view_time)
        .window(tumbling(WINDOW_MS), grace=GRACE_MS)
        .count()
        .final()
        .sink("views-per-window", key="utf8", value="json"))
    return pipeline


# --------------------------------------------------------------------------- latency
# These read the broker: they import the Kafka client (bench.kafka) when called, as
# bench.workloads, which every system imports, imports this module.

def read_source(bootstrap: str, topic: str, partitions: int,
                timeout: float = 30.0) -> list[Record]:
    """Every record of ``topic`` to its current end, with its broker append time."""
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import TopicPartition as _TP

    from .kafka import _consumer, partition_ends

    out: list[Record] = []
    with _consumer(bootstrap, read_committed=False) as c:
        ends = dict(enumerate(partition_ends(c, topic, partitions, timeout)))
        c.assign([_TP(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout
        while len(done) < partitions and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                part = m.partition()
                if m.error() is not None or part is None:
                    continue
                out.append(Record(topic, part, m.offset() or 0, m.key(), m.value(),
                                  m.timestamp()[1]))
                if (m.offset() or 0) + 1 >= ends[part]:
                    done.add(part)
    return out


def watermark_steps(source: list[Record]) -> dict[int, tuple[list[int], list[int]]]:
    """Per source partition, its watermark over time: (watermarks, append ms), both
    rising, one pair per record that raised it. A partition's watermark after a record's
    append is the highest event time appended to it so far."""
    steps: dict[int, tuple[list[int], list[int]]] = {}
    for r in sorted(source, key=lambda r: (r.partition, r.offset)):
        marks, times = steps.setdefault(r.partition, ([], []))
        ts = _view_time(json.loads(r.value or b"{}"))
        if not marks or ts > marks[-1]:
            marks.append(ts)
            times.append(int(r.timestamp or 0))
    return steps


def close_latencies(source: list[Record], output: list[Record], partitions: int,
                    samples: list[tuple[int, list[int]]]) -> tuple[list[int], int, int]:
    """Per window result first committed in ``output``: when it was readable (``samples``)
    minus when its page's partition of ``source`` first held a record at or past the
    window's end plus grace. Returns the latencies (ms), and how many results were left
    out: their window not closed by the input; no sample saw them readable."""
    from .kafka import readable_at

    steps = watermark_steps(source)
    seen: set[tuple[bytes | None, bytes]] = set()
    latencies: list[int] = []
    unclosed = unseen = 0
    for r in output:
        pair = (r.key, window_part(r.value or b""))
        if pair in seen:
            continue
        seen.add(pair)
        try:
            end = int(json.loads(r.value or b"{}")["end"])
        except (ValueError, TypeError, KeyError):
            continue
        marks, times = steps.get(kafka_partition(r.key or b"", partitions), ([], []))
        i = bisect.bisect_left(marks, end + GRACE_MS)
        if i == len(marks):
            unclosed += 1
            continue
        readable = readable_at(samples, {r.partition: r.offset})
        if readable is None:
            unseen += 1
            continue
        latencies.append(readable - times[i])
    return latencies, unclosed, unseen


def close_latency(bootstrap: str, source_topic: str, partitions: int, output: list[Record],
                  samples: list[tuple[int, list[int]]]) -> dict[str, Any]:
    """The run's window-close latencies (``close_latencies``, the module's docstring), from
    its source topic as the broker holds it: ``close_latency_ms``, their percentiles
    (``percentiles``), and the results left out, counted."""
    source = read_source(bootstrap, source_topic, partitions)
    latencies, unclosed, unseen = close_latencies(source, output, partitions, samples)
    return {"close_latency_ms": percentiles(latencies),
            "close_latency_left_out": {"not_closed_by_the_input": unclosed,
                                       "never_sampled_readable": unseen}}


def markdown_section(runs: list[dict[str, Any]]) -> list[str]:
    """The report's *Window-close latency* section: per system and measure, the median over
    its verified runs of their p50 and p99, and their input rate."""
    mine = [r for r in runs if r.get("close_latency_ms", {}).get("count")]
    if not mine:
        return []
    lines = ["## Window-close latency", "",
             "From the input's watermark passing a window's end plus grace (the append of "
             "the first record of its page's source partition at or past that event time) "
             "to the window's result being readable to a read_committed reader (20 ms "
             "samples). In a burst (throughput) it includes "
             "working through the backlog; at a steady rate (latency) it does not. Median "
             "over verified runs.", "",
             "| measure | system | runs | windows | p50 ms | p99 ms | max ms | input records/s |",
             "|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in mine:
        groups.setdefault((r.get("measure", "throughput"), r["system"]), []).append(r)

    def med(xs: list[Any]) -> str:
        xs = sorted(x for x in xs if x is not None)
        return "–" if not xs else f"{xs[len(xs) // 2]:,.0f}"
    for (measure, system), rs in groups.items():
        ok = [r for r in rs if r["verified"]]
        lat = [r["close_latency_ms"] for r in ok]
        lines.append(f"| {measure} | {system} | {len(ok)} of {len(rs)} verified | "
                     f"{med([x['count'] for x in lat])} | {med([x['p50'] for x in lat])} | "
                     f"{med([x['p99'] for x in lat])} | {med([x['max'] for x in lat])} | "
                     f"{med([r.get('input_per_second') or r.get('rate') for r in ok])} |")
    return lines + [""]
