"""An experiment of several runs of one job, with an operator's actions between and in them.

    result = run_scenario(settings, seed, schedule, new_job(settings, seed))   # as run.py

The schedule names the runs (field ``run``). Before run k the experiment carries out the
actions for it, as an operator does, with the ``eos`` commands themselves (``eos
startpoint set``, ``eos checkpoint show`` then ``write``, ``eos reset --yes``) or the run's
start options (``start``: ``offset_default``, ``reset_offset``), then writes run k's share of
the input (the input split evenly over the runs) and starts the run, bounded. Inside a
run, faults act as in a one-run experiment; a pause holds its task at its crash point
(SIGSTOP) while the experiment runs ``eos stop``, cancels the run, starts a second
driver with ``--take-over`` (a process of its own, ``experiments/driver.py``), or appends
input to the partitions the task reads, and then lets the task go on. A run that ended
early, or that input arrived in after it started, is followed by one more run that reads
what is left.

``scenario.InputModel`` follows, from the documented rules alone, what each run must have
read, per topic the job reads (a graph's sources and tables: ``scenario.Inputs``); each
epoch (the runs between two resets) is verified against the workload's oracle over its
input, every sink of a graph against its own: the output before a reset is judged just
before the reset (it is the job's committed output then), the output after it from the
offsets each sink had at the reset. An operator's action names the pipeline's first
source stream (clickstream: ``clicks``), never a table (``eos run --reset-offset`` takes
streams only; a table moved back would show lookups older rows than they already saw).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import EosError
from ..joblog.changelog import last_commit
from ..joblog.control import ControlLog
from ..protocol.runs import run_of
from ..runner import start_pipeline
from ..transport import TopicPartition, TopicSpec, open_transport
from .injector import Injector, resume
from .scenario_input import PlannedInput
from .scenario_plan import check_offsets, check_scenario, fill_offsets, input_stamp0
from .schedule import BETWEEN_RUNS, Fault, Schedule, TaskRole
from .setup import (
    SAMPLE_EVERY,
    NewJob,
    RunResult,
    Settings,
    fault_dicts,
    job_pipeline,
    job_topic,
    keep_or_remove,
    max_attempts_for,
    recovery_times,
    task_roles,
)
from .verify import Verdict, check_dead_letters, merge, verify_output, verify_sinks
from .workloads import sink_formats

__all__ = ["run_scenario"]

TAKE_OVER_WAIT = 120.0   # seconds a take-over driver has to record its run
CLI_TIMEOUT = 120.0
CANCEL_WAIT = 60.0       # seconds a cancel has to end the run while its task is held


class _Cli:
    """The operator's commands, run as the operator runs them."""

    def __init__(self, opts: dict[str, Any], state_dir: Path) -> None:
        self.opts = opts
        self.state_dir = state_dir
        self.calls: list[dict[str, Any]] = []

    def where(self) -> list[str]:
        if "data_dir" in self.opts:
            return ["--data-dir", str(self.opts["data_dir"])]
        args = ["--bootstrap-servers", str(self.opts["bootstrap_servers"])]
        for key, value in (self.opts.get("client_config") or {}).items():
            args += ["-X", f"{key}={value}"]
        return args

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        cmd = [sys.executable, "-c", "import sys; from eos_runtime.cli import run; "
               "sys.argv[0] = 'eos'; run()", *args]
        t0 = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=CLI_TIMEOUT,
                              input=stdin)
        shown = ["eos", *(a if not a.startswith(("sasl.", "ssl.")) else "***" for a in args)]
        self.calls.append({"command": " ".join(shown), "exit": done.returncode,
                           "seconds": round(time.monotonic() - t0, 2),
                           **({"stderr": done.stderr.strip()[-500:]} if done.returncode else {})})
        if done.returncode != 0:
            raise EosError(f"`{' '.join(shown[:3])} ...` failed: "
                           f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}")
        return done.stdout


def _ends(t: Any, topic: str) -> dict[int, int]:
    """Each partition's end (uncommitted records included); {} for a topic not made yet."""
    if topic not in t.list_topics():
        return {}
    return {p: t.watermarks(TopicPartition(topic, p), read_committed=False)[1]
            for p in range(t.describe(topic).partitions)}


_LINE = re.compile(r"^tasknames\.task-\d+\.systems\.\w+\.streams\.(.+)\.partitions\.(\d+)"
                   r"=(\d+)\s*$", re.M)


def _checkpoint_lines(text: str) -> list[tuple[str, int, int]]:
    """The (topic, partition, offset) of each line of a checkpoint file that gives an
    offset (comments and empty values, which keep a partition where it is, left out)."""
    return [(m[1], int(m[2]), int(m[3])) for m in _LINE.finditer(text)]


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:500]


def run_scenario(settings: Settings, seed: int, schedule: Schedule, made: NewJob, *,
                 on_progress: Callable[[dict[str, Any]], None] | None = None) -> RunResult:
    w = settings.workload
    job, pipeline, opts, root, topics = made
    state = root / "state"
    job_dir = state / job
    roles = task_roles(w, settings.guarantee)
    runs = schedule.runs()
    extra = sum(f.records or 0 for f in schedule.faults if f.kind == "append")
    values = w.generate(seed, settings.lines + extra)
    planned = PlannedInput(w, pipeline, values, settings.lines, job, settings.transport_name)
    sizes = planned.sizes(runs)
    # the offsets an action names are the stream's: drawn and checked against its shares
    stream_sizes, stream_parts = sizes[planned.stream], planned.stream_partitions()
    schedule = fill_offsets(schedule, seed, stream_sizes, stream_parts)
    check_offsets(schedule, stream_sizes, stream_parts)
    check_scenario(schedule)
    scene = _Scene(settings, seed, schedule, pipeline, job, opts, root, state, job_dir, roles,
                   planned, on_progress)
    scene.go(sizes, runs)
    attempts = sorted(scene.attempts, key=lambda a: (a["run"], a["task"], a["attempt"]))
    recovery_times(scene.faults, attempts, scene.timeline)
    result = RunResult(seed, job, settings.guarantee, settings.transport_name, schedule,
                       scene.faults, attempts, scene.timeline, scene.tasks, scene.verdict,
                       scene.error, scene.now(), settings.replay(seed),
                       generations=scene.generations, runs=scene.runs)
    keep_or_remove(settings, result, root, topics)
    return result


class _Scene:
    """The runs of one experiment, the model of what they must read, their verdicts."""

    def __init__(self, settings: Settings, seed: int, schedule: Schedule, pipeline: Any,
                 job: str, opts: dict[str, Any], root: Path, state: Path, job_dir: Path,
                 roles: list[TaskRole], planned: PlannedInput,
                 on_progress: Callable[[dict[str, Any]], None] | None) -> None:
        self.s, self.seed, self.schedule = settings, seed, schedule
        self.pipeline, self.job, self.opts = pipeline, job, opts
        self.root, self.state, self.job_dir, self.roles = root, state, job_dir, roles
        # the experiment's own files (fault logs, a take-over's spec, a checkpoint file):
        # not in the job's state directory, which eos reset refuses to delete with them
        self.own = root / "experiment"
        self.own.mkdir(parents=True, exist_ok=True)
        self.planned = planned
        self.on_progress = on_progress
        self.source = planned.stream
        self.sinks = [s.topic for s in pipeline.sinks]
        self.model = planned.model()
        self.cli = _Cli(opts, state)
        # increasing, unique
        self.stamp0 = input_stamp0(int(time.time() * 1000), len(planned.values))
        self.t0, self.wall0 = time.monotonic(), time.time()
        self.faults: list[dict[str, Any]] = []
        self.attempts: list[dict[str, Any]] = []
        self.generations: list[dict[str, Any]] = []
        self.timeline: list[dict[str, Any]] = []
        self.tasks: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []
        self.verdicts: list[Verdict] = []
        # why the epoch cannot be judged if a reset comes before a run that drains it
        self.cancelled: str | None = None
        self.verdict: Verdict | None = None
        self.error: str | None = None
        # per sink, the offsets where the epoch's output begins
        self.marks: dict[str, dict[int, int]] = {sink: {} for sink in self.sinks}
        self.letter_marks: dict[int, int] = {}   # the same in the dead letters
        self.sink_seen = 0                       # sink records of earlier runs (timeline)

    def now(self) -> float:
        return time.monotonic() - self.t0

    # ------------------------------------------------------------------ input

    def write(self, topic: str, count: int, partitions: list[int] | None = None) -> int:
        """The next ``count`` records of ``topic`` (only ``partitions``', when given), each
        with a timestamp of its own (a timestamp Startpoint names one)."""
        return self.planned.write(self.opts, self.model, self.stamp0, topic, count, partitions)

    # ------------------------------------------------------------------ the runs

    def go(self, sizes: dict[str, list[int]], planned: int) -> None:
        with open_transport(**self.opts) as t:
            t.create_topics([TopicSpec(topic, self.planned.partitions) for topic in sizes])
        k = 0
        try:
            while True:
                k += 1
                calls = len(self.cli.calls)
                options = self.before(k)
                if self.cli.calls[calls:]:
                    self.runs.append({"before_run": k, "commands": self.cli.calls[calls:]})
                if k <= planned:
                    for topic, shares in sizes.items():
                        self.write(topic, shares[k - 1])
                calls = len(self.cli.calls)
                info = self.one_run(k, options)
                info["commands"] = self.cli.calls[calls:]   # eos stop during the run
                self.runs.append(info)
                if info.get("error"):
                    self.error = f"run {k}: {info['error']}"
                    break
                if k >= planned and not info["early"] and not info["appended"]:
                    break
                if k >= planned + 3:
                    self.error = (f"run {k}: the job still had input to read after "
                                  f"{k - planned} runs beyond the schedule's")
                    break
        except EosError as exc:
            self.error = f"run {k}: {_one_line(exc)}"
        self.finish_epoch()
        self.verdict = merge(self.verdicts, self.s.guarantee) if self.verdicts else None

    def before(self, k: int) -> dict[str, Any]:
        """The actions that come before run ``k``; the run's start options."""
        options: dict[str, Any] = {}
        for f in self.schedule.faults:
            if f.run != k or f.kind not in BETWEEN_RUNS:
                continue
            rec = {**f.as_dict(), "describe": f.describe(), "fired": True,
                   "time": round(self.now(), 3), "run": k}
            self.faults.append(rec)
            if f.kind == "start":
                options = ({"offset_default": f.to} if f.via == "offset-default"
                           else {"reset_offset": True, "offset_default": f.to})
                rec["note"] = f"run {k} is started with {options}"
                continue
            if f.kind == "reset":
                if self.cancelled is not None:   # only a reset cuts the drain short
                    self.model.unjudged(self.cancelled)
                self.finish_epoch()
                self.cli("reset", self.job, "--yes", *self.cli.where(),
                         "--state-dir", str(self.state))
                self.model.reset()
                self.cancelled = None
                with open_transport(**self.opts) as t:
                    self.marks = {sink: _ends(t, sink) for sink in self.sinks}
                    if self.pipeline.dead_letter_topic:
                        self.letter_marks = _ends(t, self.pipeline.dead_letter_topic)
                rec["marks"] = self.marks
                rec["note"] = "the epoch's output begins at sink offsets " + "; ".join(
                    f"{sink} {marks}" for sink, marks in self.marks.items())
                continue
            assert f.partition is not None
            kind, value = self.model.main.set_startpoint(f.partition, f.to or "offset", f.offset)
            rec["stream"] = self.source
            if f.kind == "checkpoint":
                self.checkpoint_write(f.partition, value)
                continue
            flag = {"offset": ["--offset", str(value)], "timestamp": ["--timestamp", str(value)],
                    "oldest": ["--oldest"], "upcoming": ["--upcoming"]}[kind]
            self.cli("startpoint", "set", self.job, self.source, str(f.partition), *flag,
                     *self.cli.where())
        return options

    def checkpoint_write(self, partition: int, value: int | None) -> None:
        """``eos checkpoint show``, the stream partition's line set to ``value``, ``eos
        checkpoint write``. Every line with an offset becomes a Startpoint, the unchanged
        ones too (at their committed offsets, a table's among them); a partition with a
        Startpoint pending is shown empty and keeps it, unless it is the one edited."""
        shown = self.cli("checkpoint", "show", self.job, *self.cli.where())
        line = re.compile(rf"^(tasknames\.task-\d+\.systems\.\w+\.streams\."
                          rf"{re.escape(self.source)}\.partitions\.{partition})=.*$", re.M)
        if not line.search(shown):
            raise EosError(f"eos checkpoint show has no line for {self.source}[{partition}]")
        edited = line.sub(rf"\g<1>={value}", shown)
        with tempfile.NamedTemporaryFile("w", suffix=".properties", delete=False,
                                         dir=self.own) as fh:
            fh.write(edited)
        self.cli("checkpoint", "write", self.job, fh.name, *self.cli.where())
        for topic, p, offset in _checkpoint_lines(edited):
            if topic in self.model.models:
                self.model.models[topic].set_startpoint(p, "offset", offset)

    def one_run(self, k: int, options: dict[str, Any]) -> dict[str, Any]:
        mine = self.schedule.of_run(k)
        log = self.own / f"faults-run-{k}.log"
        for task in range(len(self.roles)):   # an earlier run's attempts must not pass for its
            for name in (f"task-{task}.pid", f"task-{task}.progress"):
                try:
                    (self.job_dir / name).unlink()
                except OSError:
                    pass
        ends = self.model.ends()
        starts = self.model.starts(ends, options.get("offset_default", "oldest"),
                                   bool(options.get("reset_offset")))
        info: dict[str, Any] = {"run": k, "options": options, "starts": self.shown(starts),
                                "ends": self.shown(ends),
                                "early": False, "appended": 0, "error": None,
                                "started": round(self.now(), 3)}
        ctx: dict[str, Any] = {"run": None, "driver": None, "ended": None}

        def on_pause(f: Fault, rec: dict[str, Any], note: dict[str, Any]) -> None:
            try:
                self.pause(f, rec, ctx, info)
            except Exception as exc:   # noted; the task must go on whatever happened
                rec["error"] = _one_line(exc)
            finally:
                resume(int(note["pid"]))

        injector = Injector(mine, self.job_dir, log, len(self.roles), self.s.broker_dir,
                            on_pause=on_pause)
        injector.t0, injector.wall0 = self.t0, self.wall0
        buffer = mine.buffer_max_bytes()
        extra: dict[str, Any] = {**self.opts, "offset_default": options.get("offset_default")}
        if buffer:
            extra["buffer_max_bytes"] = buffer
        pipeline = self.pipeline
        if options.get("reset_offset"):   # as `eos run --reset-offset STREAM`: it alone
            pipeline = job_pipeline(self.s.workload, self.job, self.s.transport_name)
            pipeline.reset_source(self.source)
        run = start_pipeline(pipeline, guarantee=self.s.guarantee,
                             commit_every=self.s.commit_every,
                             commit_interval=self.s.commit_interval,
                             poll_records=self.s.poll_records, state_dir=str(self.state),
                             max_attempts=max_attempts_for(mine), bounded=True,
                             fault=fault_dicts(mine, log, self.wall0),
                             **extra)
        ctx["run"] = run
        info["job_run"] = run.run
        try:
            next_sample = 0.0
            deadline = self.now() + self.s.timeout
            while not run.wait(0.05):
                injector.tick()
                now = self.now()
                if now >= next_sample:
                    next_sample = now + SAMPLE_EVERY
                    self.sample(run, k, injector)
                if now > deadline:
                    info["error"] = f"timed out after {self.s.timeout:.0f} s; cancelled"
                    run.cancel()
                    run.wait()
                    break
            try:
                summary = run.summary()
                self.tasks = summary.tasks
                info["early"] = bool(summary.stopped)
                if summary.stopped:
                    info["ended"] = "stopped"
            except EosError as exc:
                if ctx["ended"] in ("cancel", "take-over"):
                    info["early"] = True
                    info["ended"] = f"{ctx['ended']}: {_one_line(exc)}"
                elif info["error"] is None:
                    info["error"] = _one_line(exc)
        finally:
            self.sample(run, k, injector)
            run.close()
            injector.finish()
            if self.timeline:   # the next run's sink count goes on from here
                self.sink_seen = self.timeline[-1]["sink"]
        for rec in injector.records:
            rec["run"] = k
        self.faults += injector.records
        self.attempts += [{**a, "run": k} for a in injector.attempts.values()]
        self.generations += [{**g, "run": k} for g in injector.generations.values()]
        if ctx["driver"] is not None:
            self.take_over_ended(ctx, info)
        if info["error"] is None:
            self.account(k, info, run.run, starts, ends, ctx)
        info["appended"] = info["appended"] or 0
        info["seconds"] = round(self.now() - info["started"], 3)
        return info

    def shown(self, per_topic: dict[str, Any]) -> Any:
        """Per-topic positions as run.json shows them: a one-source job's as a list."""
        return per_topic[self.source] if len(per_topic) == 1 else per_topic

    def account(self, k: int, info: dict[str, Any], job_run: int,
                starts: dict[str, list[int]], ends: dict[str, list[int]],
                ctx: dict[str, Any]) -> None:
        """What the run read, into the model."""
        if ctx["ended"] != "cancel":
            self.cancelled = None   # it drained what a cancelled run left downstream
        if ctx["driver"] is not None:
            # the take-over run went on from whatever the first one committed, to its ends
            self.model.ran(k, starts, info["take_over"].pop("model_ends"))
            return
        if not info["early"]:
            self.model.ran(k, starts, ends)
            return
        reached = self.committed_positions(job_run)
        info["committed"] = self.shown(reached)
        self.model.ran(k, starts, reached)
        if ctx["ended"] == "cancel":
            self.cancelled = (f"run {k} was cancelled: output of input its sources committed "
                              f"may be downstream still, which a reset would delete")

    def committed_positions(self, job_run: int) -> dict[str, list[int | None]]:
        """Per input topic and partition, where its task's last commit of job run
        ``job_run`` left it (None: the task committed nothing in that run)."""
        out: dict[str, list[int | None]] = {
            topic: [None] * m.partitions for topic, m in self.model.models.items()}
        with open_transport(**self.opts) as t:
            for role in self.roles:
                if not role.source:
                    continue
                commit = last_commit(t, TopicPartition(f"{self.job}.changelog", role.task))
                if commit is None or run_of(commit.version) != job_run:
                    continue
                for pos in commit.inputs:
                    if pos.topic in out:
                        out[pos.topic][pos.partition] = pos.offset
        return out

    # ------------------------------------------------------------------ pauses

    def pause(self, f: Fault, rec: dict[str, Any], ctx: dict[str, Any],
              info: dict[str, Any]) -> None:
        """The action of a pause while its task is held; the caller lets the task go on."""
        rec["run"] = info["run"]
        if f.kind == "append":
            assert f.task is not None and f.records is not None
            role = self.roles[f.task]
            parts, topic = list(role.partitions), job_topic(role.topic, self.job,
                                                            self.s.transport_name)
            n = self.write(topic, f.records, parts)
            info["appended"] += n
            rec["note"] = f"{n} records appended to {topic} partitions {parts}"
        elif f.kind == "stop":
            self.cli("stop", self.job, *self.cli.where())
            ctx["ended"] = "stop"
        elif f.kind == "cancel":
            # The held task stays held until the cancel has ended the run, then dies where
            # it is: let go at once, or killed at once (Spark then retries it before the
            # asynchronous cancel arrives), it would finish its step, its commit, first.
            ctx["run"].cancel()
            ctx["ended"] = "cancel"
            ctx["run"].wait(CANCEL_WAIT)
            try:
                os.kill(int(rec["pid"]), signal.SIGKILL)
            except ProcessLookupError:
                pass
        elif f.kind == "take-over":
            ctx["ended"] = "take-over"
            self.start_take_over(ctx, info, rec)

    def start_take_over(self, ctx: dict[str, Any], info: dict[str, Any],
                        rec: dict[str, Any]) -> None:
        """A second driver of the job with --take-over, in a process of its own (one Spark
        job per process); returns once it recorded its run."""
        ends = self.model.ends()
        w = self.s.workload
        spec = {"workload": w.name if w.origin == "built in" else w.origin, "job": self.job,
                "transport": self.s.transport_name, "opts": self.opts,
                "state_dir": str(self.state), "guarantee": self.s.guarantee,
                "commit_every": self.s.commit_every, "commit_interval": self.s.commit_interval,
                "poll_records": self.s.poll_records}
        path = self.own / f"take-over-run-{info['run']}.json"
        path.write_text(json.dumps(spec))
        out = self.own / f"take-over-run-{info['run']}.out"
        with open(out, "w") as fh:
            proc = subprocess.Popen([sys.executable, "-m", "eos_runtime.experiments.driver",
                                     str(path)], stdout=fh, stderr=subprocess.STDOUT)
        ctx["driver"] = proc
        info["take_over"] = {"ends": self.shown(ends), "model_ends": ends, "output": str(out)}
        first = ctx["run"].run
        deadline = time.monotonic() + TAKE_OVER_WAIT
        with open_transport(**self.opts) as t:
            while time.monotonic() < deadline and proc.poll() is None:
                runs = ControlLog(t, self.job).runs()
                if runs and runs[-1].start.run > first:
                    rec["note"] = f"run {runs[-1].start.run} took the job over"
                    return
                time.sleep(0.2)
        rec["note"] = "the take-over driver had not recorded its run in time"

    def take_over_ended(self, ctx: dict[str, Any], info: dict[str, Any]) -> None:
        proc: subprocess.Popen[bytes] = ctx["driver"]
        try:
            proc.wait(self.s.timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        text = Path(info["take_over"]["output"]).read_text()
        last = (text.strip().splitlines() or ["{}"])[-1]
        try:
            got = json.loads(last)
        except ValueError:
            got = {"error": f"the take-over driver ended with exit code {proc.returncode}: "
                            f"{last[:300]}"}
        info["take_over"].update(got)
        if got.get("error"):
            info["error"] = f"the take-over run failed: {got['error']}"
        else:
            info["early"] = False   # the second driver read the run's input to its end

    # ------------------------------------------------------------------ verdicts

    def finish_epoch(self) -> None:
        """Judge the epoch that ends (at a reset, or at the end) on its committed output."""
        epoch = self.model.epoch()
        if not epoch.runs:
            return
        if not epoch.judged:
            self.runs.append({"epoch": len(self.model.main.epochs), "judged": False,
                              "why": epoch.why_not})
            return
        w = self.s.workload
        values = self.model.values()
        with open_transport(**self.opts) as t:
            if w.sinks_oracle is not None:   # a graph: every sink from its own marks
                verdict = verify_sinks(t, self.pipeline, w.sinks_oracle(values), self.s.guarantee,
                                       self.job, self.s.transport_name, marks=self.marks)
                self.verdicts.append(verdict)
                return
            key_decode, value_decode = sink_formats(self.pipeline)
            sink = self.sinks[0]
            verdict = verify_output(t, sink, self.job, w.oracle(values), self.s.guarantee,
                                    key_decode=key_decode, value_decode=value_decode,
                                    marks=self.marks[sink])
            if w.judge is not None:   # its own judgment beside the oracle's
                letters = self.pipeline.dead_letter_topic
                verdict = merge([verdict, w.judge(
                    t, self.pipeline, self.job, values, self.s.guarantee,
                    {sink: self.marks[sink], **({letters: self.letter_marks} if letters else {})})],
                    self.s.guarantee)
            letters = self.pipeline.dead_letter_topic
            if w.dead_letters is not None and letters:
                flags = w.dead_letters(values)
                bad = Counter(place for place, b in zip(epoch.processed, flags, strict=True)
                              if b)
                check_dead_letters(verdict, t, letters, self.job, self.source, bad,
                                   self.letter_marks)
            self.verdicts.append(verdict)

    def sample(self, run: Any, k: int, injector: Injector) -> None:
        try:
            p = run.progress()
        except EosError:
            return
        self.timeline.append({"t": round(self.now(), 3), "run": k,
                              "sink": self.sink_seen + p["sink_records"],
                              "source": p["source_new_records"], "running": p["tasks_running"],
                              "finished": p["tasks_finished"], "failed": p["failed_attempts"]})
        if self.on_progress is not None:
            self.on_progress({"seed": self.seed, "seconds": self.now(),
                              "sink_records": p["sink_records"],
                              "tasks_running": p["tasks_running"],
                              "tasks_finished": p["tasks_finished"],
                              "failed_attempts": p["failed_attempts"],
                              "faults_fired": sum(1 for r in self.faults + injector.records
                                                  if r.get("fired")),
                              "faults": len(self.schedule.faults), "events": injector.drain(),
                              "phase": f"run {k}", "duration": None,
                              "fed": p["source_new_records"],
                              "input_committed": p["input_committed"]})
