"""The arithmetic and checks of a multi-run experiment, settled from the schedule and the
input size alone: each run's share of the input, the input's first timestamp, the offsets
a random schedule leaves open, and the refusal of offsets and actions the runs cannot
carry out (``multirun.py`` drives the runs).

Kept apart from the driver because none of it touches a transport or a process: tests
check it directly, without running a job.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ..errors import ConfigError
from .schedule import Fault, Schedule

__all__ = ["input_stamp0", "segment_sizes", "fill_offsets", "check_offsets", "check_scenario"]


def input_stamp0(now_ms: int, records: int) -> int:
    """The timestamp of the first of ``records`` input records (record i gets it + i): the
    last one a millisecond before ``now_ms``. Not older: a broker's time retention (Kafka's default
    is 7 days, checked every 5 minutes) deletes what is stamped before it, input no run
    read yet and committed sink records alike (they carry their input's timestamps), and
    the oracle counts on both. Not ahead: a broker refuses records stamped an hour ahead."""
    return now_ms - records


def segment_sizes(lines: int, runs: int) -> list[int]:
    """The input written before each run: ``lines`` split evenly over the runs."""
    return [lines * (k + 1) // runs - lines * k // runs for k in range(runs)]


Partitions = int | Sequence[int]


def _ends_before(sizes: list[int], partitions: Partitions, run: int) -> list[int]:
    """Each partition's end before ``run`` (1-based), from the written shares alone (input
    appended during runs comes on top, so these ends are lower bounds). ``partitions``:
    their count, the records going round robin, or each record's partition in order."""
    written = sum(sizes[:run - 1])
    if isinstance(partitions, int):
        return [len(range(p, written, partitions)) for p in range(partitions)]
    ends = [0] * (max(partitions, default=-1) + 1)
    for p in partitions[:written]:
        ends[p] += 1
    return ends


def _end_before(sizes: list[int], partitions: Partitions, run: int, partition: int) -> int:
    ends = _ends_before(sizes, partitions, run)
    return ends[partition] if partition < len(ends) else 0   # a partition no record goes to


def fill_offsets(schedule: Schedule, seed: int, sizes: list[int],
                 partitions: Partitions) -> Schedule:
    """A random schedule's Startpoint and checkpoint offsets (``-1``), drawn from what the
    partition holds before the action: the schedule as it is carried out and recorded."""
    rng = random.Random(f"offsets:{seed}")
    faults = []
    for f in schedule.faults:
        if f.offset == -1 and f.partition is not None:
            end = _end_before(sizes, partitions, f.run, f.partition)
            f = Fault(**{**f.__dict__, "offset": rng.randint(0, max(0, end - 1))})
        faults.append(f)
    return Schedule(faults, schedule.source)


def check_offsets(schedule: Schedule, sizes: list[int], partitions: Partitions) -> None:
    """An offset an action names must lie in what the partition holds by then."""
    for i, f in enumerate(schedule.faults, 1):
        if f.offset is None or f.partition is None:
            continue
        end = _end_before(sizes, partitions, f.run, f.partition)
        last = end - 1 if f.kind == "startpoint" and f.to == "timestamp" else end
        if not 0 <= f.offset <= last:
            raise ConfigError(f"{schedule.source}: fault {i} ({f.kind}): field 'offset': before "
                              f"run {f.run} partition {f.partition} holds offsets 0..{end - 1} "
                              f"(with --lines {sum(sizes)} over {len(sizes)} runs), not "
                              f"{f.offset}")


def check_scenario(schedule: Schedule) -> None:
    """What the model cannot follow: a take-over in a run that starts at a reset position
    (the second driver would start from the last run's checkpoint instead)."""
    starts = {f.run for f in schedule.faults if f.kind == "start"}
    for i, f in enumerate(schedule.faults, 1):
        if f.kind == "take-over" and f.run in starts:
            raise ConfigError(f"{schedule.source}: fault {i} (take-over): run {f.run} starts "
                              f"at a reset position (a start fault); a second driver takes "
                              f"over from the job's checkpoints: give the take-over another "
                              f"run")
