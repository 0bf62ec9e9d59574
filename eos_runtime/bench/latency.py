"""Latency and recovery under a steady input rate, timed by probe records.

A steady run's input is the workload's own records at ``rate`` records/s, with a probe
every ``probe_every_ms`` ms in place of a record: an input record whose one result has a
key no other result has (``BenchWorkload.probe``). Probes take turns over the source
partitions, so every partition is probed alike. A probe's latency runs from its input
record's broker append time to the moment its result was readable to a read_committed
reader (the output's last stable offset passed it, sampled every 20 ms by a process of
its own: ``visibility.py``); ``append_ms`` keeps the append-to-append time beside it.

Recovery: one task of the system is killed (SIGKILL) a third into the run and restarted
as its supervisor restarts it. Recovery time is the longest a probe appended in the
window after the kill (``RECOVERY_WINDOW_MS``, or two commit intervals if longer) waited
for its result: for one appended at the kill, the victim's restart, recovery and
catch-up until its output was readable again (``baseline_p50_ms``, the probes before the
kill, is reported beside it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..transport import Record
from .kafka import readable_at
from .percentiles import percentiles
from .workloads import BenchWorkload, InputRecord

__all__ = ["RECOVERY_WINDOW_MS", "SteadyInput", "steady_input", "probe_latencies", "percentiles",
           "recovery"]


@dataclass(frozen=True)
class SteadyInput:
    records: list[InputRecord]
    probes: dict[InputRecord, bytes]   # probe input record -> its result's key
    rate: float


def steady_input(workload: BenchWorkload, *, rate: float, seconds: float,
                 probe_every_ms: float, partitions: int, seed: int) -> SteadyInput:
    total = max(int(rate * seconds), partitions)
    records = workload.generate(total, seed)
    step = max(int(rate * probe_every_ms / 1000), partitions)
    probes: dict[InputRecord, bytes] = {}
    k = 0
    while workload.probe is not None:
        # record i goes to partition i mod partitions: the k-th probe to partition k mod it
        base = k * step
        at = base + (k % partitions - base) % partitions
        if at >= total:
            break
        record, key = workload.probe(k)
        records[at] = record
        probes[record] = key
        k += 1
    return SteadyInput(records, probes, rate)


def probe_latencies(probes: dict[InputRecord, bytes], appended: dict[InputRecord, int],
                    output: list[Record], samples: list[tuple[int, list[int]]]
                    ) -> list[dict[str, int]]:
    """Per probe whose input and result were both seen: ``in_ms`` (input append),
    ``append_ms`` and ``visible_ms`` (its result's append, and when it was readable;
    the append time where no offset sample saw it)."""
    first: dict[bytes, Record] = {}
    for r in output:
        if r.key is not None and r.key not in first:
            first[r.key] = r
    out = []
    for record, key in probes.items():
        result = first.get(key)
        in_ms = appended.get(record)
        if result is None or in_ms is None:
            continue
        seen = readable_at(samples, {result.partition: result.offset})
        out_ms = int(result.timestamp or 0)
        out.append({"in_ms": in_ms, "append_ms": out_ms - in_ms,
                    "visible_ms": (seen if seen is not None else out_ms) - in_ms})
    return sorted(out, key=lambda p: p["in_ms"])


#: Probes appended this long after the kill (or two commit intervals, if longer) are the
#: ones its outage holds longest.
RECOVERY_WINDOW_MS = 2000


def recovery(latencies: list[dict[str, int]], killed_ms: int,
             commit_interval: float = 1.0) -> dict[str, Any]:
    """From the probes around a kill at ``killed_ms`` (this host's clock).

    ``recovery_ms`` is the longest wait of a probe appended in the window after the kill:
    an outage holds every probe appended while it lasts until output resumes, so one
    appended at the kill waits from the kill until then, and one appended later its
    ordinary latency. A slow probe later in the run is ordinary latency, not recovery.
    When the wait ended is no measure: a probe late in the window with an ordinary wait
    ends after output resumed (a 1.0 s wait of a probe appended 1.3 s after the kill,
    where output had resumed after 0.97 s)."""
    window_ms = max(RECOVERY_WINDOW_MS, int(2000 * commit_interval))
    before = [p["visible_ms"] for p in latencies if p["in_ms"] < killed_ms]
    after = [p for p in latencies if p["in_ms"] >= killed_ms]
    out: dict[str, Any] = {
        "baseline_p50_ms": percentiles(before).get("p50"), "probes_after_kill": len(after)}
    held = [p for p in after if p["in_ms"] < killed_ms + window_ms]
    if held:
        out["recovery_ms"] = max(p["visible_ms"] for p in held)
    return out
