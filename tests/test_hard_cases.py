"""The protocol's hard cases, each as an exact interleaving read by a real task.

Each test writes a channel's records by hand (``scripted.py``): producers that restart
several times, zombies writing late, markers that end a run. The task under test is the
real one, on both transports; its committed output is compared with what the script
says must count. A hang is a failure (``TaskHung``), not a stuck suite.
"""

from __future__ import annotations

import pytest

from scripted import END, Data, Marker, Restore, ScriptedJob

TRANSPORTS = ["local", pytest.param("kafka", marks=pytest.mark.kafka)]


@pytest.fixture
def job_factory(tmp_path, request):
    made = []

    def make(kind: str, **options) -> ScriptedJob:
        opts = ({"data_dir": str(tmp_path / "data")} if kind == "local"
                else {"bootstrap_servers": request.getfixturevalue("kafka_bootstrap")})
        job = ScriptedJob(tmp_path, opts, **options)
        made.append(job)
        return job

    yield make
    for job in made:
        job.close()


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_every_fence_a_producer_caused_still_applies_after_its_second_restart(kind, job_factory):
    """Case 1: producer 0 restarts twice (generation 1 -> 2 -> 3) while producer 1 lags, so
    version 2 is still open downstream when generation 3's restore (3, 2) arrives. A zombie of
    generation 1 then writes version 2 late. Only the first restore, (2, 1), fences it:
    keeping the last fence alone would count the zombie's record."""
    job = job_factory(kind)
    job.write(
        Restore(0, 1, 0), Restore(1, 1, 0),
        Data(0, 1, 1, "a"), Marker(0, 1, 1), Marker(1, 1, 1),     # version 1 aligns
        Data(0, 1, 2, "b-gen1"),                                   # generation 1 dies in v2
        Marker(0, 2, 1), Restore(0, 2, 1),                         # -> rewind, fence (2, 1)
        Data(0, 2, 2, "b"), Marker(0, 2, 2),                       # v2 waits for producer 1
        Data(0, 2, 3, "c-gen2"),                                   # generation 2 dies in v3
        Marker(0, 3, 2), Restore(0, 3, 2),                         # fence (3, 2)
        Data(0, 1, 2, "zombie"),                                   # generation 1, late
        Data(0, 3, 3, "c"), Data(1, 1, 2, "p1"),
        Marker(1, 1, END), Marker(0, 3, END))
    stats = job.run_task()
    assert stats["rewinds"] == 1            # generation 1's "b" was processed, then fenced
    assert job.output() == sorted(["a", "b", "c", "p1"])


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_fences_survive_the_downstream_restart(kind, job_factory):
    """Case 1, second form: the downstream task commits after the second restore, crashes,
    and re-reads from its checkpoint a channel still holding generation 1's late record."""
    job = job_factory(kind)
    job.write(
        Restore(0, 1, 0), Restore(1, 1, 0),
        Data(0, 1, 1, "a"), Marker(0, 1, 1), Marker(1, 1, 1),
        Data(0, 1, 3, "early-gen1"),                               # buffered: v3 not open
        Marker(0, 2, 1), Restore(0, 2, 1),                         # fence (2, 1)
        Data(0, 2, 2, "b"), Marker(0, 2, 2),
        Marker(0, 3, 2), Restore(0, 3, 2),                         # fence (3, 2)
        Data(0, 1, 3, "zombie-v3"), Data(0, 1, 2, "zombie-v2"),
        Data(1, 1, 2, "p1"), Marker(1, 1, 2),                      # v2 commits here
        Data(0, 3, 3, "c"), Marker(1, 1, END), Marker(0, 3, END))
    # The first attempt dies right after committing version 2; the retry re-reads from it.
    assert job.run_task(fault={"point": "task.checkpoint.after_commit", "hit": 2}) is None
    job.run_task()
    assert job.output() == sorted(["a", "b", "c", "p1"])


@pytest.mark.parametrize("kind", TRANSPORTS)
@pytest.mark.parametrize("point", ["task.checkpoint.after_commit",
                                   "task.checkpoint.after_store"])
def test_a_restart_after_the_last_markers_still_ends_the_run(kind, point, job_factory):
    """Case 2: every end-of-run marker is in; the task commits the version they close, in
    one checkpoint named for the run's end (aligner R2b), and dies right after it. No
    marker will come again: its retry must see that its run is over. (Before R2b the data
    version and the run's end were two commits; a restart between them found its lanes
    aligned already and had to check before waiting: R9, tests/test_aligner.py.)"""
    job = job_factory(kind)
    job.write(Restore(0, 1, 0), Restore(1, 1, 0), Data(0, 1, 1, "a"), Data(1, 1, 1, "b"),
              Marker(0, 1, END), Marker(1, 1, END))
    assert job.run_task(fault={"point": point, "hit": 1}) is None
    stats = job.run_task(timeout=60)
    assert stats["checkpoints"] == 0
    assert job.output() == ["a", "b"]


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_at_least_once_source_killed_after_its_final_commit_still_ends_the_run(kind, job_factory):
    """Case 3, first form: an at-least-once source commits its run-end checkpoint and dies
    before sending its end-of-run markers. Its retry finds the run finished; it must still
    announce the end, or every downstream task waits for it forever."""
    job = job_factory(kind, guarantee="at-least-once", producers=1, channels=2)
    job.feed_source(0, "x", "y", "z")
    assert job.run_task(task_id=0, fault={"point": "task.checkpoint.after_store", "hit": 1}) is None
    job.run_task(task_id=0, timeout=60)
    for channel in (0, 1):
        ends = [r for r in job.channel_records(channel)
                if type(r).__name__ == "Marker" and r.version == END]
        assert ends, f"channel {channel} never got the source's end-of-run marker"


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_at_least_once_restart_remembers_end_markers_behind_its_checkpoint(kind, job_factory):
    """Case 3, second form: an at-least-once task reads producer 0's end-of-run marker, a
    timer checkpoint moves its offsets past it, and the task dies. Producer 1 ends later.
    The retry re-reads only what follows the checkpoint: it must know from the checkpoint
    that producer 0 already ended."""
    job = job_factory(kind, guarantee="at-least-once", commit_every=1)
    job.write(Marker(0, 1, END), Data(1, 1, 1, "b"))
    assert job.run_task(fault={"point": "task.checkpoint.after_store", "hit": 1}) is None
    job.write(Data(1, 1, 1, "c"), Marker(1, 1, END))
    job.run_task(timeout=60)
    assert set(job.output()) == {"b", "c"}


def lagging_script(versions: range, per_version: int, size: int) -> list:
    """Producer 0 runs ahead through ``versions`` while producer 1 gives no marker until the
    end: everything producer 0 writes past version 1 arrives early."""
    items: list = [Restore(0, 1, 0), Restore(1, 1, 0)]
    for v in versions:
        items += [Data(0, 1, v, f"v{v}-{i}-" + "x" * size) for i in range(per_version)]
        items.append(Marker(0, 1, v))
    items += [Data(1, 1, 1, "p1"), Marker(1, 1, END), Marker(0, 1, END)]
    return items


def expected_values(items: list) -> list[str]:
    return sorted(i.value for i in items if isinstance(i, Data))


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_the_early_arrival_buffer_stays_within_its_bound_on_a_shared_channel(kind, job_factory):
    """Case 6 (invariant 8): one producer lags on a channel every producer shares, so no
    channel can be paused. The buffer must stop keeping early arrivals at its bound and read
    them again later, losing and duplicating nothing."""
    bound = 8 << 10
    job = job_factory(kind, buffer_max_bytes=bound)
    items = lagging_script(range(2, 30), per_version=20, size=200)
    job.write(*items)
    stats = job.run_task()
    assert stats["max_buffer_bytes"] <= bound
    assert stats["overflowed"] > 0           # the overflow path ran
    assert job.output() == expected_values(items)


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_many_small_buffered_versions_use_few_open_files(kind, job_factory):
    """Case 7: a lagging producer and many small versions once held one open file per
    buffered version, and the task died of EMFILE."""
    job = job_factory(kind)
    items = lagging_script(range(2, 1200), per_version=1, size=10)
    job.write(*items)
    job.run_task(max_open_files=400)
    assert job.output() == expected_values(items)


def test_restarts_leave_no_stale_buffer_or_store_directories(job_factory):
    """Case 8: buffer directories were named per process and only the current one wiped;
    fallback RocksDB directories (made while a zombie holds the store's lock) were never
    removed."""
    from eos_runtime.state import TaskStore

    job = job_factory("local")
    items = lagging_script(range(2, 6), per_version=5, size=10)
    job.write(*items[:-3])                   # producer 1 has not caught up: v2.. are buffered
    assert job.run_task(fault={"point": "task.aligning", "hit": 3}) is None
    base = job.state_dir()
    stale = base / f"task-{job.task_id}.attempt-7-99999"
    TaskStore(stale, ("step0",)).close()     # what a killed attempt beside a zombie leaves
    zombie = TaskStore(base / f"task-{job.task_id}", ())   # holds the store's lock
    try:
        job.write(*items[-3:])
        job.run_task()
    finally:
        zombie.close()
    assert job.output() == expected_values(items)
    left = sorted(p.name for p in base.iterdir()
                  if p.name.startswith(("buffer", f"task-{job.task_id}.attempt")) and
                  (p.is_file() or any(p.iterdir())))
    assert left == []


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_a_crash_in_the_middle_of_the_marker_fan_out_leaves_channels_apart(kind, job_factory):
    """The fan-out crash point must leave some channels holding the marker and others not
    (once it fired while every marker was still in the producer's memory). The retry
    announces the marker again everywhere, and a downstream task still ends the run."""
    job = job_factory(kind, producers=1, channels=4)
    job.feed_source(0, "x", "y", "z")
    assert job.run_task(task_id=0, fault={"point": "task.checkpoint.mid_marker_fanout"}) is None

    def has_end(channel):
        return any(type(r).__name__ == "Marker" and r.version == END
                   for r in job.channel_records(channel))

    assert [has_end(c) for c in range(4)] == [True, True, False, False]
    job.run_task(task_id=0, timeout=60)
    assert all(has_end(c) for c in range(4))


def test_a_torn_generation_start_does_not_block_the_retries(job_factory):
    """Found by ``eos experiment`` (docs/experiments.md): an attempt registers generation
    g + 1 at the local log's fence, then dies inside the append of its generation-start
    record. The log still says g; a retry that took g + 1 from the log alone was refused
    by the fence on every attempt. Generations come from both (recovery C6)."""
    job = job_factory("local")
    job.write(Restore(0, 1, 0), Restore(1, 1, 0), Data(0, 1, 1, "a"), Data(1, 1, 1, "b"),
              Marker(0, 1, END), Marker(1, 1, END))
    assert job.run_task(fault={"point": "locallog.append.mid_data", "hit": 1}) is None
    stats = job.run_task(timeout=60)
    assert stats["generation"] == 2
    assert job.output() == ["a", "b"]


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
@pytest.mark.parametrize("kind", TRANSPORTS)
def test_sink_output_leaves_as_it_is_made_not_at_the_checkpoint(kind, guarantee, job_factory):
    """Issue 10: sink output was held until the next checkpoint. At-least-once has no
    reason to (nothing it promises waits for the commit: its latency was the commit
    interval); exactly-once on Kafka sends it into the open transaction once a writer
    holds a chunk of it (here 2 records), where only the commit shows it to
    read_committed readers. Here no checkpoint comes until the end-of-run markers
    (commit interval an hour, no record count), and the output must be in the sink
    topic (uncommitted) before they are written. Exactly-once on the local log holds it
    for the checkpoint's one append."""
    if kind == "local" and guarantee == "exactly-once":
        pytest.skip("held for the checkpoint's one contiguous append (the committed view)")
    job = job_factory(kind, guarantee=guarantee)
    seen = _sink_before_the_checkpoint(job, ["a", "b"], transaction_chunk=2)
    assert sorted(seen) == ["a", "b"], f"before the checkpoint the sink held {seen}"


def test_exactly_once_output_below_a_chunk_waits_for_the_checkpoint(job_factory):
    """Exactly-once on Kafka holds less than a chunk of sink output for the checkpoint,
    so between checkpoints no transaction is open: a SIGKILL leaves none for the broker
    to abort (a restarted task's fence waited 0.4-0.9 s for that abort, traced at 3 600
    lines/s), and no task's open transaction holds back the output partitions' last
    stable offset, which every task writes to (a restarted task's catch-up commits were
    readable only at the other tasks' next commit, up to an interval later). Streamed,
    the output was in the sink topic before the checkpoint."""
    job = job_factory("kafka", guarantee="exactly-once")
    seen = _sink_before_the_checkpoint(job, [])
    assert seen == [], f"before the checkpoint the sink held {seen}"


def test_exactly_once_output_streams_once_a_chunk_opened_the_transaction(job_factory):
    """Once a chunk went into the version's transaction, the reasons to hold output
    (no transaction for a SIGKILL to leave open, none holding back the shared last
    stable offset) are gone until the commit: what follows joins the transaction as it
    is made. Held until a second chunk filled, it was sent at the checkpoint: at 27 500
    lines/s that was about 14 000 records a counting task, 100 ms of each checkpoint.
    Here the chunk is 2 records; "c" comes after "a" and "b" filled one. After the
    commit of version 1, version 2's "d" is held again: its transaction has no chunk."""
    job = job_factory("kafka", guarantee="exactly-once")
    seen = _sink_before_the_checkpoint(
        job, ["a", "b", "c"], then=[Data(0, 1, 1, "c"), Marker(0, 1, 1), Marker(1, 1, 1),
                                    Data(0, 1, 2, "d")], transaction_chunk=2)
    assert sorted(seen) == ["a", "b", "c"], f"before the last checkpoint the sink held {seen}"


def _sink_before_the_checkpoint(job, wanted: list[str], then: list = (),
                                **config) -> list[str]:
    """Data "a" and "b" of version 1 on the task's channel, and once it processed them
    the records ``then``; what the sink topic held (committed or not) once the task had
    processed all its data, before the end-of-run markers let it take its last
    checkpoint: read until it holds ``wanted``, then for a second more, for anything
    else to show up; the committed output after it is checked too."""
    import threading
    import time

    from eos_runtime.joblog.committed import read_topic
    from eos_runtime.runtime.progress import read_task_progress

    job.write(Data(0, 1, 1, "a"), Data(1, 1, 1, "b"))
    done: dict = {}
    runner = threading.Thread(
        target=lambda: done.update(stats=job.run_task(timeout=300, **config)))
    runner.start()
    progress = job.state_dir() / f"task-{job.task_id}.progress"
    seen: list[str] = []
    deadline = time.monotonic() + 120

    def processed(n: int) -> None:
        # The task ticks its progress once per poll, after it sent the poll's output on.
        while time.monotonic() < deadline and runner.is_alive() and \
                (read_task_progress(progress) or {}).get("processed", 0) < n:
            time.sleep(0.2)
    processed(2)
    data = [item.value for item in then if isinstance(item, Data)]
    if then:
        job.write(*then)
        processed(2 + len(data))
    # Output it was given, the producer delivers: wanted output is waited for, and a
    # second more is what anything else had to show up.
    until = None
    while runner.is_alive() and time.monotonic() < (until or deadline):
        seen = [r.value.decode() for r in read_topic(job.t, f"{job.name}.out",
                                                     read_committed=False)]
        if until is None and set(wanted) <= set(seen):
            until = time.monotonic() + 1.0
        time.sleep(0.2)
    if job.plan.exactly_once and not any(isinstance(item, Marker) for item in then):
        assert job.output() == [], "read_committed saw output before its commit"
    job.write(Marker(0, 1, END), Marker(1, 1, END))   # now the run may end
    runner.join()
    assert done["stats"] is not None and job.output() == ["a", "b", *data]
    return seen
