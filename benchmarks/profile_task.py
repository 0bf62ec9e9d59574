"""Profile the hot path of a wordcount task with cProfile: where each message's Python goes.

A bounded run of ``examples/wordcount.py`` (the bench's wordcount workload: lines of 1
to 8 words) is planned and recorded as the driver does it, but its tasks run here
without Spark, each in a forked process of its own under cProfile, all at once as on
Spark (``--staged``: the sources first, then the channel tasks). So the profile is the
tasks' own Python cost, with nothing else in their processes; the CPU time per word is
each process's own (``time.process_time``), taken with cProfile off (``--no-profile``)
for the real cost, since cProfile multiplies a call-heavy path's time.

    .venv/bin/python benchmarks/profile_task.py --lines 50000                     # local log
    .venv/bin/python benchmarks/profile_task.py --bootstrap-servers HOST:PORT     # Kafka
    .venv/bin/python benchmarks/profile_task.py --guarantee at-least-once --top 30
    .venv/bin/python benchmarks/profile_task.py --no-profile                      # CPU µs only
    .venv/bin/python benchmarks/profile_task.py --keys 1000000 --lines 2000000     # big state
    .venv/bin/python benchmarks/profile_task.py --keys 1000000 --no-profile --memory  # its memory

``--keys N`` makes the input the bench's aggregate workload instead: one word a line, drawn
uniformly from N keys, so the counting stage's state grows to N keys (``eos bench
--measures memory`` measures that curve; this says where its time goes).

Prints, per stage: wall and CPU seconds, messages in and out, CPU µs per word, how far the
resident set of its most-grown task rose above what it had at the fork, and the top
functions by own time and by cumulative time; ``--memory``: what that task's resident set
held at its peak (RocksDB's memtables, cache and index and filter blocks, the staged and
recent bytes, glibc's heap in use and freed but kept). ``--dump DIR`` keeps the ``.prof`` files
(for snakeviz or ``python -m pstats``). Measured, never asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import io
import multiprocessing as mp
import os
import pstats
import resource
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from eos_runtime.bench.vocabulary import KINDS, Vocabulary
from eos_runtime.bench.workloads import aggregate_input
from eos_runtime.joblog.control import ControlLog
from eos_runtime.plan import plan_job
from eos_runtime.runner import create_job_topics, load_pipeline, task_configs
from eos_runtime.runtime.task import run_task
from eos_runtime.transport import TopicSpec, open_transport

ROOT = Path(__file__).resolve().parent
EXAMPLE = ROOT.parent / "examples" / "wordcount.py"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=50_000)
    ap.add_argument("--pipeline", default=str(EXAMPLE),
                    help="a wordcount of your own (a source 'lines', a sink 'counts')")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--guarantee", default="exactly-once",
                    choices=("exactly-once", "at-least-once"))
    ap.add_argument("--commit-interval", type=float, default=1.0)
    ap.add_argument("--bootstrap-servers", default=None, help="Kafka; default: the local log")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--no-profile", action="store_true", help="time the tasks only")
    ap.add_argument("--staged", action="store_true",
                    help="run the sources first, then the channel tasks (default: all at once)")
    ap.add_argument("--dump", default=None, help="directory to keep the .prof files in")
    ap.add_argument("--keys", type=int, default=None,
                    help="one word a line from this many keys (the aggregate workload)")
    ap.add_argument("--vocabulary", choices=KINDS, default="small",
                    help="the lines' words, as eos bench's --vocabulary (zipf: 8 words a line "
                         "from 5 000, the bench's default; small: 1 to 8 words from 12)")
    ap.add_argument("--threads", action="store_true",
                    help="each task's CPU by thread: Python's and librdkafka's own (rdk:*), "
                         "sampled every 0.05 s from /proc")
    ap.add_argument("--memory", action="store_true",
                    help="break each task's resident set down at its peak (RocksDB, staged "
                         "changes, recent values, malloc's free pages), sampled every 0.2 s")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="eos-profile-"))
    opts: dict[str, Any] = ({"bootstrap_servers": args.bootstrap_servers}
                            if args.bootstrap_servers else {"data_dir": str(work / "data")})
    suffix = uuid.uuid4().hex[:8]
    pipeline = load_pipeline(Path(args.pipeline))
    pipeline.rename(f"prof-{suffix}", source=f"prof-lines-{suffix}",
                    sink=f"prof-counts-{suffix}")
    lines = ([value for _, value in aggregate_input(args.lines, args.keys, seed=1)]
             if args.keys else [line.encode() for line in
                               Vocabulary.of(args.vocabulary, None).lines(args.lines, seed=1)])
    words = sum(len(line.split()) for line in lines)
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec(pipeline.source_topic, args.partitions)])
        with t.producer() as p:
            for i, line in enumerate(lines):
                p.produce(pipeline.source_topic, i % args.partitions, line)
            p.flush()
        n_lines = len(lines)
        del lines   # the forked tasks need none of it
        plan = plan_job(pipeline, t, guarantee=args.guarantee,
                        commit_interval=args.commit_interval, parallelism=args.partitions)
        info = ControlLog(t, plan.name).start_run(plan, bounded=True)
        create_job_topics(t, plan)
        configs = task_configs(plan, t, opts, str(work / "state"), bounded=True,
                               run=info.start.run, run_started_ms=info.start.started_ms,
                               control_offset=info.offset)
    print(f"# {args.guarantee}, {'Kafka' if args.bootstrap_servers else 'local log'}, "
          f"{n_lines} lines, {words} words"
          f"{f' from {args.keys:,} keys' if args.keys else ''}, {args.partitions} partitions, "
          f"{'all tasks at once' if not args.staged else 'one stage after the other'}")
    dump = Path(args.dump) if args.dump else work / "prof"
    dump.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("fork")
    waves = ([[c for c in configs if plan.stage_of(c.task_id) is s] for s in plan.stages]
             if args.staged else [configs])
    results: dict[int, dict[str, Any]] = {}
    for wave in waves:
        queue = ctx.Queue()
        procs = [ctx.Process(target=_one_task,
                             args=(c, queue, dump, not args.no_profile, args.memory,
                                   args.threads))
                 for c in wave]
        for p in procs:
            p.start()
        for _ in procs:
            got = queue.get()
            results[got["task_id"]] = got
        for p in procs:
            p.join()
    for index, stage in enumerate(plan.stages):
        mine = [results[t] for t in stage.task_ids]
        cpu = sum(r["cpu"] for r in mine)
        wall = max(r["wall"] for r in mine)
        processed = sum(r["processed"] for r in mine)
        emitted = sum(r["emitted"] for r in mine)
        print(f"\n## stage {index}: {len(mine)} tasks, {wall:.2f} s wall (slowest task), "
              f"{cpu:.2f} s CPU (all tasks); processed {processed}, emitted {emitted}, "
              f"checkpoints {sum(r['checkpoints'] for r in mine)}; "
              f"{cpu / max(1, words) * 1e6:.2f} µs CPU per word; peak resident set "
              f"{max(r['rss_growth'] for r in mine) / 2**20:,.0f} MiB above the fork's "
              f"(the task that grew most)"
              f"{' (under cProfile)' if not args.no_profile else ''}")
        if args.threads:
            by: dict[str, float] = {}
            for r in mine:
                for name, seconds in r["threads"].items():
                    by[name] = by.get(name, 0.0) + seconds
            print("\nCPU µs per word by thread (all the stage's tasks): " + ", ".join(
                f"{name} {seconds / max(1, words) * 1e6:.2f}"
                for name, seconds in sorted(by.items(), key=lambda kv: -kv[1])))
        if args.memory:
            grown = max(mine, key=lambda r: r["rss_growth"])
            print("\nat that task's peak (MiB): "
                  + ", ".join(f"{k} {v / 2**20:,.1f}" for k, v in grown["memory"].items()))
        if args.no_profile:
            continue
        merged = pstats.Stats(*[str(dump / f"task{t}.prof") for t in stage.task_ids],
                              stream=io.StringIO())
        for key in ("tottime", "cumulative"):
            out = io.StringIO()
            merged.stream = out   # type: ignore[attr-defined]
            merged.strip_dirs().sort_stats(key).print_stats(args.top)
            text = out.getvalue()
            body = text[text.index("   ncalls"):] if "   ncalls" in text else text
            print(f"\n### by {key}\n\n```\n{body.rstrip()}\n```")
    return 0


def _resident_bytes() -> int:
    """This process's resident set now (/proc/self/statm; 0 where there is none)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _MemorySampler(threading.Thread):
    """Where a task's resident set is at its peak: a sample every 0.2 s of the resident
    set, RocksDB's own accounts (memtables, block cache, index and filter blocks outside
    it), the stores' staged changes and recent values (their keys' and values' bytes, not
    the dicts'), and how far glibc's heap grew: in use, and free but kept (``mallinfo2``;
    RocksDB, librdkafka and Python's larger objects, such as a big dict's table, all
    allocate there). What the resident growth has beyond malloc's is Python's small
    objects (its own arenas) and the mapped files."""

    def __init__(self, rss0: int) -> None:
        super().__init__(daemon=True)
        self.rss0, self.peak = rss0, 0
        self._kinds0 = _resident_kinds()
        self.at_peak: dict[str, int] = {}
        self.stop = threading.Event()
        self._mallinfo = _mallinfo2()
        info = self._mallinfo() if self._mallinfo is not None else None
        self._malloc0 = (info.uordblks + info.hblkhd, info.fordblks) if info else (0, 0)

    def run(self) -> None:
        while not self.stop.wait(0.2):
            rss = _resident_bytes()
            if rss > self.peak:
                self.peak, self.at_peak = rss, self.sample(rss)

    def sample(self, rss: int) -> dict[str, int]:
        from eos_runtime.state.store import _open_stores
        kinds = _resident_kinds()
        out = {"resident growth": rss - self.rss0,
               **{f"{k} growth": v - self._kinds0.get(k, 0) for k, v in kinds.items()},
               "memtables": 0, "block cache": 0,
               "index and filters": 0, "staged": 0, "recent values": 0}
        for task_store in list(_open_stores):
            stores = list(getattr(task_store, "_stores", {}).values())
            for i, st in enumerate(stores):
                cf = st.cf
                if cf is None:
                    continue
                out["memtables"] += cf.property_int_value("rocksdb.size-all-mem-tables") or 0
                out["index and filters"] += (
                    cf.property_int_value("rocksdb.estimate-table-readers-mem") or 0)
                if i == 0:   # one cache a task
                    out["block cache"] += cf.property_int_value("rocksdb.block-cache-usage") or 0
                for name, d in (("staged", st.staged), ("recent values", st.recent)):
                    items = list(d.items())
                    out[name] += sum(len(k) + len(v or b"") for k, v in items)
        if self._mallinfo is not None:
            info = self._mallinfo()
            # growth since the fork, as the resident set's
            out["malloc in use"] = info.uordblks + info.hblkhd - self._malloc0[0]
            out["malloc free, kept"] = info.fordblks - self._malloc0[1]
        return out


def _resident_kinds() -> dict[str, int]:
    """The resident set's anonymous and file-backed parts (/proc/self/status)."""
    out = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(("RssAnon:", "RssFile:")):
                name, kib = line.split()[:2]
                out[name[3:-1].lower()] = int(kib) * 1024
    except (OSError, ValueError):
        pass
    return out


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _mallinfo2() -> Any:
    """glibc's ``mallinfo2`` (2.33+), or None."""
    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    return fn


class _ThreadCPU(threading.Thread):
    """Each thread's CPU seconds (/proc/self/task/*/stat), by thread name: the last sample
    of a thread that ended counts (one shorter than a sample period may be missed). The
    sampler's own thread is left out."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self._seen: dict[int, tuple[str, float]] = {}
        self._tick = os.sysconf("SC_CLK_TCK")

    def run(self) -> None:
        me = threading.get_native_id()
        while True:
            for entry in Path("/proc/self/task").iterdir():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue   # ended between the listing and the read
                tid = int(entry.name)
                if tid == me:
                    continue
                name = stat[stat.index("(") + 1:stat.rindex(")")]
                fields = stat[stat.rindex(")") + 2:].split()
                self._seen[tid] = (name, (int(fields[11]) + int(fields[12])) / self._tick)
            if self.stop.wait(0.05):
                return

    def by_name(self) -> dict[str, float]:
        """CPU seconds by thread name, librdkafka's brokers' threads as one."""
        out: dict[str, float] = {}
        for name, seconds in self._seen.values():
            name = "rdk:broker" if name.startswith("rdk:broker") else name
            out[name] = out.get(name, 0.0) + seconds
        return out


def _one_task(config: Any, queue: Any, dump: Path, profile: bool, memory: bool,
              threads: bool = False) -> None:
    # what the fork brought along (the parent's input among it) is not the task's
    rss0 = _resident_bytes()
    sampler = _MemorySampler(rss0) if memory else None
    if sampler is not None:
        sampler.start()
    thread_cpu = _ThreadCPU() if threads else None
    if thread_cpu is not None:
        thread_cpu.start()
    cpu0, started = time.process_time(), time.perf_counter()
    if profile:
        prof = cProfile.Profile()
        stats = prof.runcall(run_task, config)
        prof.dump_stats(str(dump / f"task{config.task_id}.prof"))
    else:
        stats = run_task(config)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # KiB on Linux
    if sampler is not None:
        sampler.stop.set()
        sampler.join()
    by_thread: dict[str, float] = {}
    if thread_cpu is not None:
        thread_cpu.stop.set()
        thread_cpu.join()
        by_thread = thread_cpu.by_name()
    queue.put({**stats.as_dict(), "cpu": time.process_time() - cpu0, "threads": by_thread,
               "wall": time.perf_counter() - started, "rss_growth": max(0, peak - rss0),
               "memory": sampler.at_peak if sampler is not None else {}})


if __name__ == "__main__":
    raise SystemExit(main())
