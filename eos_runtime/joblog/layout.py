"""A job's layout: what must not change between its runs, one readable line per stage
(input, tasks, stores, outputs) plus its guarantee and checkpoint store.

The driver stores the layout in each run's ``RunStart`` record (``control.py``) and refuses
a run whose layout differs from the last run's: checkpoints are per task and channel, so a
changed layout would read them wrongly. The job tools (``eos jobs``, ``eos reset``, the
checkpoint tool, Startpoints) read a job's stages, sources, sinks and channels back from
it. No I/O.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from ..aggregates import RunningAggregate
from ..api_windows import WindowOp
from ..graph import Op
from ..plan import JobPlan

__all__ = ["StageLayout", "job_layout", "layout_changes", "layout_channels", "layout_checkpoints",
           "layout_guarantee", "layout_job_id", "layout_sinks", "layout_sources",
           "layout_stages", "layouts_differ"]

#: A stage's table stores and the table each holds: "lookups of stage 2: table0=users".
#: Store names are positional (the order of first lookup), so without it two lookups
#: written the other way round kept the layout, and each read the other table's rows.
_LOOKUPS = "lookups of stage "
#: A stage's stateful steps' and windows' stores and what each holds, by the step that
#: writes it: "state of stage 1: step1=map(count), window2=window Tumbling(size=60000)
#: count". Stage indices and store names are positional too, so two stateful branches
#: (or two key_by stages) written the other way round swapped their states. Only a state
#: moving to another store, of its stage or another, is refused: a function renamed, or
#: another function on the same store, keeps it, as before.
_STATE = "state of stage "


def job_layout(plan: JobPlan) -> tuple[str, ...]:
    """What must not change between runs of a job: one line per stage (readable, because
    the refusal shows it)."""
    lines = []
    for st in plan.stages:
        tasks = ",".join(str(t) for t in st.task_ids)
        outputs = " + ".join(f"{o.topic} x{o.partitions}" for o in st.outputs)
        lines.append(f"stage {st.index}: input {st.input_topic} x{st.input_partitions}, "
                     f"tasks {tasks}, stores [{', '.join(st.stores)}], output {outputs}")
        tables = sorted({store: plan.stages[plan.tasks[t].stage].input_topic
                         for t, store in st.table_rows}.items())
        if tables:
            lines.append(f"{_LOOKUPS}{st.index}: "
                         + ", ".join(f"{store}={topic}" for store, topic in tables))
        held = [f"{op.store}={_held_by(op)}" for op in st.program
                if op.store is not None and op.lookup is None]
        if held:
            lines.append(f"{_STATE}{st.index}: " + ", ".join(held))
    lines.append(f"guarantee {plan.guarantee}")
    if plan.checkpoints != "changelog":   # (a line only then: older jobs' layouts stay equal)
        lines.append(f"checkpoints {plan.checkpoints}")
        # The id selects where those positions are; with the change log it selects nothing.
        if plan.job_id != "1":
            lines.append(f"job id {plan.job_id}")
    return tuple(lines)


def _held_by(op: Op) -> str:
    """What a store's state is, as the layout names it: the step or window writing it."""
    w = op.window
    if isinstance(w, WindowOp):
        return f"window {w.spec!r} {w.name}"
    if w is not None:
        return f"join within {w.within} {w.name}"
    assert op.step is not None
    step = op.step
    return step.name if isinstance(step.fn, RunningAggregate) else f"{step.kind}({step.name})"


def _layout_entry(layout: tuple[str, ...], name: str) -> str | None:
    """The value of a ``<name> <value>`` line of a layout from ``job_layout`` (None: no
    such line)."""
    prefix = f"{name} "
    for line in layout:
        if line.startswith(prefix):
            return line[len(prefix):]
    return None


def layout_job_id(layout: tuple[str, ...]) -> str:
    """The job id a layout from ``job_layout`` records ("1" when it names none)."""
    return _layout_entry(layout, "job id") or "1"


def layout_checkpoints(layout: tuple[str, ...]) -> str:
    """Where a layout from ``job_layout`` keeps its source positions ("changelog" when it
    names no other store)."""
    return _layout_entry(layout, "checkpoints") or "changelog"


def layout_guarantee(layout: tuple[str, ...]) -> str | None:
    """The processing guarantee a layout from ``job_layout`` records (None: it names none)."""
    return _layout_entry(layout, "guarantee")


@dataclass(frozen=True)
class StageLayout:
    """One stage line of a layout from ``job_layout``, read back (for the job tools)."""

    index: int
    input_topic: str
    input_partitions: int
    task_ids: tuple[int, ...]
    stores: tuple[str, ...]
    outputs: tuple[tuple[str, int], ...]   # (topic, partitions), channels and sinks

    @property
    def output_topic(self) -> str:
        return self.outputs[0][0]

    @property
    def output_partitions(self) -> int:
        return self.outputs[0][1]


_STAGE_LINE = re.compile(r"^stage (?P<index>\d+): input (?P<input>\S+) x(?P<inparts>\d+), "
                         r"tasks (?P<tasks>[\d,]*), stores \[(?P<stores>[^\]]*)\], "
                         r"output (?P<outputs>\S+ x\d+(?: \+ \S+ x\d+)*)$")


def layout_sinks(stages: list[StageLayout]) -> list[str]:
    """The sink topics of a layout's stages: the outputs no stage reads (the others are
    the job's channels), in the order the stages name them."""
    inputs = {st.input_topic for st in stages}
    return list(dict.fromkeys(t for st in stages for t, _ in st.outputs if t not in inputs))


def layout_sources(stages: list[StageLayout]) -> list[StageLayout]:
    """The source stages of a layout: those whose input no stage writes."""
    outputs = {t for st in stages for t, _ in st.outputs}
    return [st for st in stages if st.input_topic not in outputs]


def layout_channels(stages: list[StageLayout]) -> list[str]:
    """The channel topics of a layout's stages: outputs that a stage reads."""
    inputs = {st.input_topic for st in stages}
    return list(dict.fromkeys(t for st in stages for t, _ in st.outputs if t in inputs))


def layout_changes(was: tuple[str, ...], now: tuple[str, ...]) -> str:
    """What changed from layout ``was`` to ``now`` (both from ``job_layout``), in one line:
    "stage 1's partitions 4 -> 8, its tasks 4 -> 8; guarantee exactly-once -> ...". A
    channel's partitions are named once, as its reading stage's; a sink's, as its stage's
    sinks."""
    old, new = layout_stages(was), layout_stages(now)
    changes = [] if len(old) == len(new) else [f"stages {len(old)} -> {len(new)}"]
    inputs = {st.input_topic for st in old + new}
    for a, b in zip(old, new, strict=False):   # the stages both have
        # the task ids only when their count stayed (a new count moves them anyway)
        tasks = (("tasks", len(a.task_ids), len(b.task_ids)) if len(a.task_ids) != len(b.task_ids)
                 else ("task ids", _ids(a.task_ids), _ids(b.task_ids)))
        said = [f"{what} {x} -> {y}" for what, x, y in (
            ("input", a.input_topic, b.input_topic),
            ("partitions", a.input_partitions, b.input_partitions), tasks,
            ("stores", list(a.stores), list(b.stores)),
            ("sinks", _sinks(a, inputs), _sinks(b, inputs))) if x != y]
        if said:
            changes.append(f"stage {a.index}'s {', its '.join(said)}")
    for name, default in (("guarantee", None), ("checkpoints", "changelog"), ("job id", "1")):
        x, y = _layout_entry(was, name) or default, _layout_entry(now, name) or default
        if x != y:
            changes.append(f"{name} {x} -> {y}")
    if any(line.startswith(_LOOKUPS) for line in was):   # (older layouts name none)
        old_l, new_l = _lookups(was), _lookups(now)
        for stage in sorted(old_l.keys() | new_l.keys(), key=int):
            x, y = old_l.get(stage, "none"), new_l.get(stage, "none")
            if x != y:
                changes.append(f"stage {stage}'s lookups {x} -> {y}")
    moved = _state_moves(was, now)
    if moved:
        changes.append("state moved: " + ", ".join(
            f"{what} stage {a[0]} {a[1]} -> stage {b[0]} {b[1]}" for what, a, b in moved))
    return "; ".join(changes) or "its stages are written differently"


def layouts_differ(was: tuple[str, ...], now: tuple[str, ...]) -> bool:
    """Whether a run of layout ``now`` is refused after one of ``was``. A layout recorded
    before lookups were named in it (no such line at all) is compared without them. The
    states' lines differ only where a state moved to another store (``_state_moves``)."""
    if not any(line.startswith(_LOOKUPS) for line in was):
        now = tuple(line for line in now if not line.startswith(_LOOKUPS))
    if _state_moves(was, now):
        return True
    return _without_states(was) != _without_states(now)


def _without_states(layout: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(line for line in layout if not line.startswith(_STATE))


def _states(layout: tuple[str, ...]) -> dict[tuple[str, str], str]:
    """What each store of the layout's states lines holds, by (stage as written, store)."""
    out = {}
    for line in layout:
        if line.startswith(_STATE):
            stage, held = line[len(_STATE):].split(": ", 1)
            # a name may hold ", " ("Hopping(size=2, every=1)"): split before a store
            for entry in re.split(r", (?=(?:step|window)\d+=)", held):
                store, what = entry.split("=", 1)
                out[stage, store] = what
    return out


def _state_moves(was: tuple[str, ...], now: tuple[str, ...]
                 ) -> list[tuple[str, tuple[str, str], tuple[str, str]]]:
    """Each state now held in another store than before, of its stage or another: (what,
    its (stage, store) in ``was``, in ``now``). Only states one store alone holds in each
    layout: two steps of one name (two lambdas) cannot be told apart. Empty for a layout
    recorded before states were named in it."""
    a, b = _store_of(_states(was)), _store_of(_states(now))
    return [(what, a[what], b[what]) for what in a if what in b and a[what] != b[what]]


def _store_of(held: dict[tuple[str, str], str]) -> dict[str, tuple[str, str]]:
    counts = Counter(held.values())
    return {what: where for where, what in held.items() if counts[what] == 1}


def _lookups(layout: tuple[str, ...]) -> dict[str, str]:
    """Per stage (its index as written), the "table0=users, ..." of its lookups line."""
    return dict(line[len(_LOOKUPS):].split(": ", 1) for line in layout
                if line.startswith(_LOOKUPS))


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(str(i) for i in ids)


def _sinks(st: StageLayout, inputs: set[str]) -> str:
    return " + ".join(f"{t} x{n}" for t, n in st.outputs if t not in inputs) or "none"


def layout_stages(layout: tuple[str, ...]) -> list[StageLayout]:
    """The stages a layout from ``job_layout`` records, in order (lines it does not
    recognise are skipped)."""
    stages = []
    for line in layout:
        m = _STAGE_LINE.match(line)
        if m is None:
            continue
        stages.append(StageLayout(
            int(m["index"]), m["input"], int(m["inparts"]),
            tuple(int(t) for t in m["tasks"].split(",") if t),
            tuple(s for s in m["stores"].split(", ") if s),
            tuple((t, int(n)) for t, n in (o.rsplit(" x", 1)
                                           for o in m["outputs"].split(" + ")))))
    return stages
