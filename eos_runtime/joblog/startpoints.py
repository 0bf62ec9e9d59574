"""Startpoints (Samza's Startpoints proposal): where a job's source partitions start at its
next run, beating the checkpoint.

    from eos_runtime.joblog.startpoints import Startpoint, set_startpoint, list_startpoints

    set_startpoint("wordcount", "lines", 0, Startpoint.offset(120), data_dir=".eos/data")
    set_startpoint("wordcount", "lines", 1, Startpoint.timestamp(1763790000000), task=1)
    list_startpoints("wordcount", data_dir=".eos/data")   # {StartpointKey: Startpoint}
    clear_startpoints("wordcount", data_dir=".eos/data")

Kinds: a specific offset, a timestamp (the first record at or after it), oldest,
upcoming, and custom (a resolver function the source names in
``source(..., startpoint_resolvers={...})``, called with the partition's bounds at the
task's start). Keys: stream-partition, or stream-partition + task.

Where they live: the job's metadata store, the compacted topic ``<job>.metadata`` (the
same on the local log, which keeps a compacted topic's records and lets readers take the
last per key), apart from the checkpoints. Records are JSON (operators read them with
``eos consume <job>.metadata --all``), keyed ``startpoint/<topic>/<partition>`` or
``startpoint/<topic>/<partition>/task-<n>``; a record without a value deletes its key.

Life of a Startpoint (the rules are ``protocol/positions.py``, P1-P1b):

1. set while the job is stopped (refused while a driver holds the job's lease, and for
   anything but the job's source stream: internal channels are positioned by the
   protocol's markers and restores, and moving one would break alignment);
2. at a run's start the driver fans partition keys out to the task reading the partition
   and tags each with the run (``fan_out_startpoints``);
3. the task applies it at its start, unless it already committed in that run;
4. after the task's next checkpoint commit (which records where it led) the task deletes
   it. A crash before that commit applies it again; a crash after the commit but before
   the deletion does not (step 3's rule), and the next run deletes it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ConfigError, TopicNotFound
from ..protocol.positions import fan_out
from ..topic_rules import kept_for
from ..transport import TopicPartition, TopicSpec, Transport, open_transport
from .committed import read_topic
from .control import ControlLog
from .layout import layout_sources, layout_stages

__all__ = ["KINDS", "Startpoint", "StartpointKey", "MetadataStore", "metadata_topic",
           "set_startpoint", "list_startpoints", "clear_startpoints", "fan_out_startpoints",
           "fan_out_sources",
           "check_source_partition", "check_stream_read", "delete_applied", "resolve_startpoint"]

KINDS = ("offset", "timestamp", "oldest", "upcoming", "custom")


def metadata_topic(job: str) -> str:
    return f"{job}.metadata"


@dataclass(frozen=True)
class Startpoint:
    """Where to start one partition. ``run``: set by the driver, the run it was fanned out
    for (None: not yet)."""

    kind: str
    value: int | None = None          # the offset, or the timestamp in ms
    resolver: str | None = None       # custom: a name in the source's startpoint_resolvers
    argument: str = ""                # custom: passed to the resolver
    created_ms: int = 0
    run: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"startpoint kind {self.kind!r}: use one of {', '.join(KINDS)}")
        needs_value = self.kind in ("offset", "timestamp")
        if needs_value and (type(self.value) is not int or self.value < 0):
            raise ConfigError(f"a startpoint of kind {self.kind} needs a value >= 0, "
                              f"not {self.value!r}")
        if not needs_value and self.value is not None:
            raise ConfigError(f"a startpoint of kind {self.kind} takes no value")
        if (self.kind == "custom") != bool(self.resolver):
            raise ConfigError("a custom startpoint names its resolver (and only it does)")

    @classmethod
    def offset(cls, offset: int) -> Startpoint:
        return cls("offset", offset, created_ms=_now())

    @classmethod
    def timestamp(cls, ms: int) -> Startpoint:
        return cls("timestamp", ms, created_ms=_now())

    @classmethod
    def oldest(cls) -> Startpoint:
        return cls("oldest", created_ms=_now())

    @classmethod
    def upcoming(cls) -> Startpoint:
        return cls("upcoming", created_ms=_now())

    @classmethod
    def custom(cls, resolver: str, argument: str = "") -> Startpoint:
        return cls("custom", None, resolver, argument, created_ms=_now())

    def describe(self) -> str:
        if self.kind == "offset":
            return f"offset {self.value}"
        if self.kind == "timestamp":
            assert self.value is not None
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.value / 1000))
            return f"timestamp {self.value} ({when})"
        if self.kind == "custom":
            return f"custom {self.resolver}({self.argument!r})"
        return self.kind

    def to_json(self) -> bytes:
        return json.dumps({"kind": self.kind, "value": self.value, "resolver": self.resolver,
                           "argument": self.argument, "created_ms": self.created_ms,
                           "run": self.run}, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Startpoint:
        try:
            doc = json.loads(raw)
            return cls(doc["kind"], doc.get("value"), doc.get("resolver"),
                       doc.get("argument", ""), int(doc.get("created_ms", 0)), doc.get("run"))
        except (ValueError, KeyError, TypeError, ConfigError) as exc:
            raise ConfigError(f"startpoint at {where} is not readable: {exc}") from None


@dataclass(frozen=True)
class StartpointKey:
    """A source partition, or a source partition as one task reads it. Keys sort by
    partition, the partition's own key before its task keys (both may be set)."""

    topic: str
    partition: int
    task: int | None = None

    def __lt__(self, other: StartpointKey) -> bool:
        return self._order() < other._order()

    def _order(self) -> tuple[str, int, int]:
        return (self.topic, self.partition, -1 if self.task is None else self.task)

    def encode(self) -> bytes:
        tail = "" if self.task is None else f"/task-{self.task}"
        return f"startpoint/{self.topic}/{self.partition}{tail}".encode()

    @classmethod
    def decode(cls, raw: bytes) -> StartpointKey | None:
        parts = raw.decode(errors="replace").split("/")
        try:
            if parts[0] != "startpoint" or len(parts) not in (3, 4):
                return None
            task = int(parts[3].removeprefix("task-")) if len(parts) == 4 else None
            return cls(parts[1], int(parts[2]), task)
        except ValueError:
            return None

    def describe(self) -> str:
        return f"{self.topic}[{self.partition}]" + ("" if self.task is None
                                                    else f" task {self.task}")


class MetadataStore:
    """The job's metadata topic: the last record per key holds; an empty value deletes."""

    def __init__(self, transport: Transport, job: str) -> None:
        self.t = transport
        self.job = job
        self.topic = metadata_topic(job)

    def create(self) -> None:
        self.t.create_topics([TopicSpec(self.topic, 1, compacted=True, keep_forever=True)])

    def startpoints(self) -> dict[StartpointKey, Startpoint]:
        """The Startpoints in force; ``ConfigError`` for one that is not readable."""
        return self._fold(strict=True)[0]

    def contents(self) -> tuple[dict[StartpointKey, Startpoint], list[str]]:
        """The Startpoints in force, and where the topic holds records that are no
        Startpoint's (``topic[p]@offset``: other keys, unreadable values); both empty
        without the topic. What ``eos reset`` needs to know whether the topic is all the
        store's."""
        return self._fold(strict=False)

    def _fold(self, strict: bool) -> tuple[dict[StartpointKey, Startpoint], list[str]]:

        try:
            records = read_topic(self.t, self.topic, read_committed=False)
        except TopicNotFound:
            return {}, []
        out: dict[StartpointKey, Startpoint] = {}
        foreign = []
        for r in records:
            where = f"{self.topic}[{r.partition}]@{r.offset}"
            key = StartpointKey.decode(r.key) if r.key is not None else None
            if key is None:
                foreign.append(where)
            elif r.value is None or not r.value:
                out.pop(key, None)
            else:
                try:
                    out[key] = Startpoint.from_json(r.value, where)
                except ConfigError:
                    if strict:
                        raise
                    foreign.append(where)
        return out, foreign

    def write(self, puts: Mapping[StartpointKey, Startpoint],
              deletes: Iterable[StartpointKey] = ()) -> None:
        """Puts first, then deletes: a crash between leaves a key twice, never none."""
        deletes = list(deletes)
        if not puts and not deletes:
            return
        self.create()
        with self.t.producer() as p:
            for key, sp in sorted(puts.items()):
                p.produce(self.topic, 0, sp.to_json(), key=key.encode())
            for key in deletes:
                p.produce(self.topic, 0, None, key=key.encode())
            p.flush()


def _now() -> int:
    return int(time.time() * 1000)


def _sources_of(transport: Transport, job: str) -> dict[str, tuple[int, dict[int, int]]] | None:
    """The job's source topics, each with its partitions and the task reading each (from
    its last run's layout), or None if the job never ran."""
    last = ControlLog(transport, job).last_run()
    stages = layout_stages(last.start.layout) if last is not None else []
    if not stages:
        return None
    out = {}
    for src in layout_sources(stages):
        tasks = src.task_ids
        readers = ({p: tasks[p % len(tasks)] for p in range(src.input_partitions)}
                   if tasks else {})
        out[src.input_topic] = (src.input_partitions, readers)
    return out


def check_stream_read(transport: Transport, job: str, stream: str) -> None:
    """Refuse ``stream`` for a job whose last run read other sources (a typo in
    ``eos startpoint clear --stream``, which found nothing to clear)."""
    known = _sources_of(transport, job)
    if known is not None and stream not in known:
        named = " and ".join(repr(t) for t in known)
        raise ConfigError(f"job {job!r} reads {named}, not {stream!r}, and has no Startpoint "
                          f"of it")


def check_source_partition(transport: Transport, job: str, key: StartpointKey) -> None:
    """Refuse a Startpoint for anything but a partition of the job's source stream."""
    known = _sources_of(transport, job)
    if kept_for(job, key.topic) is not None:
        raise ConfigError(f"{key.topic!r} is an internal topic of job {job!r}: Startpoints apply "
                          f"to the job's source stream only (a channel's position follows its "
                          f"producers' markers and restores; moving it would break alignment)")
    if known is not None:
        if key.topic not in known:
            named = " and ".join(repr(t) for t in known)
            raise ConfigError(f"job {job!r} reads {named}, not {key.topic!r}: Startpoints apply "
                              f"to the job's source streams only")
        topic = key.topic
        parts, readers = known[topic]
        if not 0 <= key.partition < parts:
            raise ConfigError(f"{topic!r} has partitions 0..{parts - 1}, not {key.partition}")
        if key.task is not None and readers.get(key.partition) != key.task:
            raise ConfigError(f"task {key.task} does not read {topic}[{key.partition}]: task "
                              f"{readers.get(key.partition)} does")
        return
    try:
        parts = transport.describe(key.topic).partitions
    except TopicNotFound:
        raise ConfigError(f"topic {key.topic!r} does not exist on the {transport.name} "
                          f"transport") from None
    if not 0 <= key.partition < parts:
        raise ConfigError(f"{key.topic!r} has partitions 0..{parts - 1}, not {key.partition}")


def _transport(transport: Transport | None, opts: dict[str, Any]) -> tuple[Transport, bool]:
    if transport is not None:
        return transport, False
    return open_transport(**opts), True


def set_startpoint(job: str, topic: str, partition: int, startpoint: Startpoint, *,
                   task: int | None = None, transport: Transport | None = None,
                   **transport_opts: Any) -> StartpointKey:
    """Set a Startpoint for the job's next run (refused while the job runs). A partition
    key replaces the partition's task keys, so the newest setting holds."""
    t, close = _transport(transport, transport_opts)
    try:
        key = StartpointKey(topic, partition, task)
        ControlLog(t, job).refuse_if_running("Startpoints can be set")
        check_source_partition(t, job, key)
        if startpoint.kind == "offset":   # not at the run: it would fail there, retried
            low, high = t.watermarks(TopicPartition(topic, partition))
            if startpoint.value is None or not low <= startpoint.value <= high:
                raise ConfigError(f"offset {startpoint.value} is outside {topic}[{partition}]'s "
                                  f"offsets {low}..{high}: give one of them ({high} is the "
                                  f"end: the next record written)")
        store = MetadataStore(t, job)
        stale = [k for k in store.startpoints() if task is None and k.task is not None
                 and (k.topic, k.partition) == (topic, partition)]
        store.write({key: replace(startpoint, run=None)}, stale)
        return key
    finally:
        if close:
            t.close()


def list_startpoints(job: str, *, transport: Transport | None = None,
                     **transport_opts: Any) -> dict[StartpointKey, Startpoint]:
    t, close = _transport(transport, transport_opts)
    try:
        return MetadataStore(t, job).startpoints()
    finally:
        if close:
            t.close()


def clear_startpoints(job: str, topic: str | None = None, partition: int | None = None, *,
                      transport: Transport | None = None,
                      **transport_opts: Any) -> list[StartpointKey]:
    """Delete the job's Startpoints (of ``topic``, of its ``partition``); returns them.
    Refused while the job runs."""
    t, close = _transport(transport, transport_opts)
    try:
        ControlLog(t, job).refuse_if_running("Startpoints can be cleared")
        store = MetadataStore(t, job)
        gone = [k for k in store.startpoints()
                if (topic is None or k.topic == topic)
                and (partition is None or k.partition == partition)]
        store.write({}, gone)
        return gone
    finally:
        if close:
            t.close()


def fan_out_startpoints(transport: Transport, job: str, topic: str,
                        readers: Mapping[int, int], run: int, *,
                        write: bool = True) -> dict[int, dict[int, Startpoint]]:
    """``fan_out_sources`` for a job of one source."""
    return fan_out_sources(transport, job, {topic: readers}, run, write=write)


def fan_out_sources(transport: Transport, job: str, readers: Mapping[str, Mapping[int, int]],
                    run: int, *, write: bool = True) -> dict[int, dict[int, Startpoint]]:
    """At run ``run``'s start (the driver holds the lease): per source task, the Startpoint
    of each partition it reads (P1a), tagged with the run that first carries it; the
    metadata store then holds them under task keys only. ``readers``: per source topic,
    the task reading each partition. Keys of topics or partitions no task reads are
    refused. ``write=False`` only checks (before the run is recorded)."""
    store = MetadataStore(transport, job)
    found = store.startpoints()
    if not found:
        return {}
    others = sorted(k.describe() for k in found if k.topic not in readers)
    chosen_by_topic = {}
    unread: list[str] = []
    for topic, of_topic in readers.items():
        part_keys = {k.partition: sp for k, sp in found.items()
                     if k.task is None and k.topic == topic}
        task_keys = {(k.task, k.partition): sp for k, sp in found.items()
                     if k.task is not None and k.topic == topic}
        chosen, missed = fan_out(part_keys, task_keys, of_topic)
        chosen_by_topic[topic] = (chosen, part_keys)
        unread += [f"{topic}[{p}]" for p in missed]
    if others or unread:
        named = " and ".join(repr(t) for t in readers)
        raise ConfigError(f"job {job!r} has Startpoints for {', '.join(others + unread)}, which "
                          f"no task of this run reads (it reads {named}): clear them with `eos "
                          f"startpoint clear {job}`")
    out: dict[int, dict[int, Startpoint]] = {}
    puts: dict[StartpointKey, Startpoint] = {}
    gone: list[StartpointKey] = []
    for topic, (chosen, part_keys) in chosen_by_topic.items():
        for (task, partition), sp in chosen.items():
            tagged = sp if sp.run is not None or not write else replace(sp, run=run)
            out.setdefault(task, {})[partition] = tagged
            key = StartpointKey(topic, partition, task)
            if found.get(key) != tagged:
                puts[key] = tagged
        gone += [StartpointKey(topic, p) for p in part_keys]
    if write:
        store.write(puts, gone)
    return out


def delete_applied(transport: Transport, job: str, topic: str, task: int,
                   partitions: Iterable[int]) -> None:
    """After the task's commit that recorded where its Startpoints led."""
    MetadataStore(transport, job).write({}, [StartpointKey(topic, p, task) for p in partitions])



def resolve_startpoint(sp: Startpoint, transport: Transport, topic: str, partition: int,
                       resolvers: Mapping[str, Any], *,
                       run_start_end: int | None = None) -> tuple[str, int | None]:
    """The (kind, value) of ``protocol/positions.Start`` that ``sp`` means: a custom one
    asks its resolver now (the consumer-side visitor of the proposal), with the
    partition's bounds, its end as the run started (``run_start_end``, P5: a task that
    starts again in the run starts where its first attempt did); the others pass through
    (the transport resolves them)."""
    if sp.kind != "custom":
        return sp.kind, sp.value
    fn = resolvers.get(sp.resolver or "")
    if fn is None:
        raise ConfigError(f"custom startpoint of {topic}[{partition}] names resolver "
                          f"{sp.resolver!r}, but source {topic!r} has "
                          f"{', '.join(map(repr, resolvers)) or 'none'}: pass it in "
                          f"source(..., startpoint_resolvers=...)")
    low, high = transport.watermarks(TopicPartition(topic, partition))
    if run_start_end is not None:
        high = min(high, run_start_end)
    try:
        offset = fn(topic, partition, sp.argument, low, high)
    except Exception as exc:
        raise ConfigError(f"custom startpoint resolver {sp.resolver!r} raised on "
                          f"{topic}[{partition}]: {type(exc).__name__}: {exc}") from exc
    if type(offset) is not int:
        raise ConfigError(f"custom startpoint resolver {sp.resolver!r} returned {offset!r} "
                          f"for {topic}[{partition}]: return an offset (int)")
    return "offset", offset
