"""The record path: decode -> the stage's steps against staged state -> emit -> dead letters.

One record at a time, for sources (a raw input record) and channel tasks (a data
envelope, or a data batch: each of its messages in turn). Output goes to the next
stage's channels (``ChannelWriter``: batched, stamped with the writer's generation and
the version the caller gives) or is held for the sink
(``SinkWriter``) until the committer hands it on. A user function that raises stops the
task naming the record, or with dead letters on, records the record and the error as
output of the open version and goes on. No protocol rule lives here.

A record's output and state writes are all or nothing. Its output is one write, made
after every step ran, and each writer's write keeps nothing when any value of it
cannot be encoded (msgpack for a channel, the sink's format); its state writes are
staged from a savepoint (``TaskStore.savepoint``) that a failing record rolls back to.
So a dead letter is all a failing record leaves; without dead letters the task stops
and the staging dies with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from operator import is_
from typing import Any, cast

import msgpack

from .. import clock
from ..api import FORMATS
from ..errors import EosError, TaskFailed, UserFunctionError
from ..plan import JobPlan, StagePlan
from ..protocol import wire
from ..state import TaskStore
from ..transport import Record
from ..user_code import cannot_cross, crossing_text, function_error, short, value_origin
from ..values import unpack
from . import letters
from .operators import Chain, Program, decode_key, encode_key, event_time_of
from .outputs import ChannelWriter, SinkWriter, check_timestamp
from .stats import TaskStats

__all__ = ["RecordPath"]

# FORMATS["msgpack"]'s decoder (values.unpack: msgpack's plain call, told int map keys
# only when it refused them; a partial with keyword arguments took 270 ns a message, where
# the plain call takes 110)
_unpack = unpack

#: How much less ahead than the sinks' bound an event time must be: the broker checks it
#: against its own clock, which may be behind this task's.
_CLOCK_MARGIN_MS = 60_000


def too_far_ahead(topic: str, t: int, ahead: int, bound: int) -> str:
    """The error of an event time the sinks' broker would refuse, with the likeliest cause."""
    unit = (" (a time in microseconds or nanoseconds? event times are milliseconds)"
            if t > 10**14 else "")
    return (f"source {topic!r} timestamp function returned {t}, {ahead / 3_600_000:.1f} h "
            f"ahead of this clock{unit}: the job's sink and dead-letter topics take a "
            f"record's event time as its timestamp, and accept one at most {bound} ms "
            f"ahead (message.timestamp.after.max.ms)")


#: A source record without a value: no format decodes one (bytes passed it on as None).
NULL_VALUE = ("its value is null (a tombstone), and a source's records need one: give "
              "every record a value, or read the topic as a table, where a null value "
              "deletes its key")
_PACKED_NONE = msgpack.packb(None)              # a table row that deletes its key


class RecordPath:
    def __init__(self, job: str, task_id: int, stage: StagePlan,
                 writers: Sequence[ChannelWriter | SinkWriter], dead: SinkWriter | None,
                 stats: TaskStats, lag: float = 0.0, store: TaskStore | None = None,
                 max_record_bytes: int | None = None, event_time: bool = False,
                 plan: JobPlan | None = None, tracebacks: bool = False,
                 timestamps_ahead_ms: int | None = None) -> None:
        """``writers``: one per output of the stage, in its order. ``max_record_bytes``:
        the largest record the transport's producers send (None: not known), which a dead
        letter must fit. ``event_time``: the job keeps watermarks, so a source task notes
        the highest event time read per partition (``event_highs``, W2). ``plan``: the
        job's, for errors that name the stages a record came from and goes to.
        ``tracebacks``: a dead letter carries the user's frames. ``timestamps_ahead_ms``:
        how far past the wall clock the sinks take a record's time (None: no bound)."""
        self.job, self.task_id, self.stage = job, task_id, stage
        self.tracebacks = tracebacks
        self._ahead_ms = timestamps_ahead_ms
        self._stream = _stream_of(stage, plan)
        # Per output: how an error names the values crossing its key_by, and the key_by.
        self._crossings = [(value_origin(stage.program, k, stage.source),
                            _crossing_of(o.topic, o.shuffle.key_fn, plan))
                           if o.shuffle is not None else None
                           for k, o in enumerate(stage.outputs)]
        self.lag = lag   # fault injection: seconds slept per record (a lagging producer)
        self.writers = tuple(writers)
        self.dead, self.stats = dead, stats
        self.channels: ChannelWriter | None = None
        self.sink: SinkWriter | None = None
        self.chain: Chain | Program
        if stage.is_chain:   # the fast path: one list of values to one writer
            self.chain = Chain(stage.steps, store)
            only = self.writers[0]
            if isinstance(only, ChannelWriter):
                self.channels = only
                # looked up once: the stage's properties are not free per record
                shuffle = stage.outputs[0].shuffle
                assert shuffle is not None
                self._key_fn = shuffle.key_fn
            else:
                self.sink = only
        else:
            self.chain = Program(stage.program, len(stage.outputs), store, stats)
            self._emit = self._emit_each   # type: ignore[method-assign]
        self._letter_bound = letters.letter_bound(max_record_bytes)
        # A stage with windows: each record's event time to its program, late ones set aside
        self._windows = self.chain if isinstance(self.chain, Program) and self.chain.windows \
            else None
        self.event_highs: dict[int, int] | None = {} if event_time else None
        # Only a record set aside (dead letters) must take back its state writes, and
        # only a stateful step or a window makes any.
        undoable = (dead is not None and store is not None
                    and any(op.stateful or op.window is not None for op in stage.program))
        self._savepoint = store.savepoint if undoable and store is not None else None
        self._rollback = store.rollback if undoable and store is not None else None
        if not lag and self._savepoint is None and self._windows is None \
                and isinstance(self.chain, Chain):
            self._messages = self._chain_messages   # type: ignore[method-assign]
            if self.chain.aggregate is not None and self.sink is not None and dead is None:
                self._messages = self._aggregate_messages   # type: ignore[method-assign]
            elif self.channels is not None and self._key_fn is not None:
                self._messages = self._channel_batch   # type: ignore[method-assign]
        if stage.source is not None:
            src = stage.source
            self._src_key = FORMATS[src.key_format][1] if src.key_format else None
            self._src_value = FORMATS[src.value_format][1]
            self._src_time = src.timestamp
            if src.table:
                self.source_record = self._table_record   # type: ignore[method-assign]
            elif self.channels is not None and self._key_fn is not None and not lag \
                    and self._savepoint is None and self._windows is None \
                    and self.event_highs is None:
                self.source_records = self._source_batch   # type: ignore[method-assign]
        # The table rows this task keeps, by the producer that sends them (a table's task).
        self._rows: dict[int, tuple[Any, Any]] = {}
        if stage.table_rows:
            assert store is not None
            for producer, table_store in stage.table_rows:
                _, put, delete = store.accessors(table_store)
                self._rows[producer] = (put, delete)
        for k, w in enumerate(self.writers):
            if isinstance(w, SinkWriter):
                w.value_origin, w.key_origin = _origins(stage, k)

    def source_record(self, r: Record, version: int) -> None:
        """A raw input record of a source task, processed in ``version``."""
        if self.lag:
            time.sleep(self.lag)
        key_de = self._src_key
        if self._savepoint is not None:
            self._savepoint()
        try:
            try:
                key = key_de(r.key) if key_de is not None and r.key is not None else None
            except Exception as exc:
                raise self._undecodable("key", exc) from exc
            kb = encode_key(key) if key is not None else None
            if r.value is None:
                raise UserFunctionError(NULL_VALUE)
            try:
                value = self._src_value(r.value)
            except Exception as exc:
                raise self._undecodable("value", exc) from exc
            t = r.timestamp if self._src_time is None else self._event_time(value)
            if self.event_highs is not None:
                high = self.event_highs.get(r.partition)
                if high is None or t > high:
                    self.event_highs[r.partition] = t
            windows = self._windows
            if windows is not None:
                windows.event_time = t
            self._emit(kb, self.chain.run(kb, value), t, version)
            if windows is not None and windows.late:
                self._late(windows, r.topic, r.partition, r.offset, t, r.key, r.value)
        except Exception as exc:
            if not isinstance(exc, UserFunctionError) and isinstance(exc, EosError):
                raise  # the runtime's own failure, not the user's function
            self._user_error(exc, r.topic, r.partition, r.offset, r.timestamp, r.key, r.value)

    def source_records(self, records: Sequence[Record], version: int) -> None:
        """A poll batch of raw input records of a source task, in turn, processed in
        ``version``."""
        process = self.source_record
        for r in records:
            process(r, version)

    def _source_batch(self, records: Sequence[Record], version: int) -> None:
        """``source_records`` for the common source stage: a chain into the next stage's
        channels, with no lag, savepoint, windows or watermarks. The batch's output is
        gathered, a record's all or nothing, and goes to the channels in one call: the
        calls per record (``_emit``, ``_shuffle``, the writer's) were most of the cost of
        a one-value record (4.7 of 16.6 µs under cProfile in ``append_packed`` alone)."""
        key_de, value_de, time_fn = self._src_key, self._src_value, self._src_time
        run, for_channels = self.chain.run, self._for_channels
        out_keys: list[bytes | None] = []
        out_values: list[bytes] = []
        out_stamps: list[int] = []
        for r in records:
            try:
                try:
                    key = key_de(r.key) if key_de is not None and r.key is not None else None
                except Exception as exc:
                    raise self._undecodable("key", exc) from exc
                kb = encode_key(key) if key is not None else None
                if r.value is None:
                    raise UserFunctionError(NULL_VALUE)
                try:
                    value = value_de(r.value)
                except Exception as exc:
                    raise self._undecodable("value", exc) from exc
                t = r.timestamp if time_fn is None else self._event_time(value)
                outs = run(kb, value)
                if not outs:
                    continue
                encoded, packed = for_channels(outs)
                check_timestamp(t)
            except Exception as exc:
                if not isinstance(exc, UserFunctionError) and isinstance(exc, EosError):
                    raise
                self._user_error(exc, r.topic, r.partition, r.offset, r.timestamp, r.key,
                                 r.value)
                continue
            out_keys += encoded
            out_values += packed
            out_stamps += [t] * len(packed)
        self._send_gathered(out_keys, out_values, out_stamps, version)

    def _undecodable(self, what: str, exc: Exception) -> UserFunctionError:
        """A source record's key or value its format cannot decode: the record's error,
        whose fix is in what wrote it or in the format, not in a function."""
        src = self.stage.source
        assert src is not None
        fmt = src.key_format if what == "key" else src.value_format
        err = UserFunctionError(f"its {what} is not {fmt} ({type(exc).__name__}: {exc})")
        err.undecodable = True   # type: ignore[attr-defined]
        return err

    def _send_gathered(self, keys: list[bytes | None], values: list[bytes],
                       stamps: list[int], version: int) -> None:
        """A batch's gathered channel output into the channels, in one call."""
        if keys:
            channels = self.channels
            assert channels is not None
            channels.append_stamped(channels.generation, version, keys, values, stamps)
            self.stats.emitted += len(keys)

    def _event_time(self, value: Any) -> int:
        src = self.stage.source
        assert src is not None and src.timestamp is not None
        t = event_time_of(src.timestamp, src.topic, value)
        if self._ahead_ms is not None:
            ahead = t - round(clock.wall() * 1000)
            # the sink would refuse it, and every retry with it; a minute's margin for a
            # broker whose clock is behind this one
            if ahead > self._ahead_ms - min(_CLOCK_MARGIN_MS, self._ahead_ms // 10):
                raise UserFunctionError(too_far_ahead(src.topic, t, ahead, self._ahead_ms))
        return t

    def _late(self, windows: Program, topic: str, partition: int, offset: int,
              timestamp: int, key: bytes | None, value: bytes | None) -> None:
        """W6: a record in no open window is counted, and a dead letter when those are on."""
        n, windows.late = len(windows.late), []
        self.stats.late += n
        if self.dead is not None:
            self.dead.write(None, [letters.build(
                job=self.job, task=self.task_id, topic=topic, partition=partition,
                offset=offset, error=f"late: event time {timestamp} is in no open window "
                f"(the task's watermark {windows.watermark} closed them)", key=key,
                value=value, channel=not self.stage.is_source,
                bound=self._letter_bound, stream=self._stream)], timestamp)

    def fire(self, watermark: int | None, version: int) -> None:
        """W5 at the checkpoint of ``version``, before its output is flushed: every window
        ``watermark`` closes sends its result, as output of ``version``; from here on
        records are late against ``watermark``."""
        windows = self._windows
        if windows is None:
            return

        def emit(key_bytes: bytes, outs: list[list[Any]], timestamp: int) -> None:
            self._emit(key_bytes, outs, timestamp, version)

        undo = ((self._savepoint, self._rollback)
                if self._savepoint is not None and self._rollback is not None else None)
        windows.fire(watermark, emit, self._firing_failed, undo, self._fired_late)
        self.set_watermark(watermark)

    def _fired_late(self, key_bytes: bytes, values: list[Any], at: int) -> None:
        """A window's results a later window of the stage had closed: counted, and set
        aside as one letter when dead letters are on."""
        self.stats.late += len(values)
        if self.dead is not None:
            self.dead.write(None, [letters.build(
                job=self.job, task=self.task_id, topic=self.stage.input_topic, partition=-1,
                offset=-1, error=f"late: a window's result at event time {at} (key "
                f"{decode_key(key_bytes)!r}) is in no open window of a later window (the "
                f"task's watermark {self._windows.watermark if self._windows else None} "
                f"closed it): give the later window at least the earlier one's grace",
                key=key_bytes, value=None, channel=True, bound=self._letter_bound,
                stream=self._stream)], at)

    def _firing_failed(self, exc: Exception, key_bytes: bytes, at: int) -> None:
        """A window's or timer's firing raised: the task stops (the retry would fire it
        again), or with dead letters on, a letter of it, and the task goes on."""
        error = str(exc) if isinstance(exc, UserFunctionError) else f"{type(exc).__name__}: {exc}"
        what = f"firing a window or timer at event time {at} (key {decode_key(key_bytes)!r})"
        if self.dead is None:
            failed = TaskFailed(f"task {self.task_id}: {error}, {what}; nothing of this "
                                f"checkpoint was committed: fix the function, or run with "
                                f"--dead-letters to set such firings aside in "
                                f"{self.job}.dead-letters and go on")
            failed.user_traceback = getattr(exc, "user_traceback", None)
            raise failed from exc
        frames = exc.user_traceback if isinstance(exc, UserFunctionError) else None
        self.dead.write(None, [letters.build(
            job=self.job, task=self.task_id, topic=self.stage.input_topic,
            partition=-1, offset=-1, error=f"{error} ({what})", key=key_bytes, value=None,
            channel=True, bound=self._letter_bound, stream=self._stream,
            traceback=frames if self.tracebacks else None)], at)

    def set_watermark(self, watermark: int | None) -> None:
        """The watermark of the task's last checkpoint (a start, a rewind, a commit)."""
        if self._windows is not None:
            self._windows.watermark = watermark

    def _table_record(self, r: Record, version: int) -> None:
        """A record of a table's topic: its key and value (None: the key is deleted) to the
        tasks that look the table up. A record without a key cannot be a row."""
        try:
            if r.key is None:
                raise UserFunctionError(f"table {r.topic!r}: a record without a key cannot be "
                                        f"a row (the table's rows are its records' keys)")
            key_de = self._src_key
            assert key_de is not None
            try:
                key = key_de(r.key)
            except Exception as exc:
                raise self._undecodable("key", exc) from exc
            kb = encode_key(key)   # a key of a kind keys cannot be: its own error
            try:
                value = None if r.value is None else self._src_value(r.value)
            except Exception as exc:
                raise self._undecodable("value", exc) from exc
            self._emit(kb, self.chain.run(kb, value), r.timestamp, version)
        except Exception as exc:
            if not isinstance(exc, UserFunctionError) and isinstance(exc, EosError):
                raise
            self._user_error(exc, r.topic, r.partition, r.offset, r.timestamp, r.key, r.value)

    def _table_rows(self, msg: wire.Envelope | wire.DataBatch) -> None:
        """Rows a table's task sent: each key's row staged in its table store (a row of
        None deletes the key), with the task's other state writes of the version."""
        put, delete = self._rows[msg.producer_id]
        if type(msg) is wire.DataBatch:
            rows = zip(msg.keys, msg.values, strict=True)
        else:
            assert type(msg) is wire.Envelope
            rows = zip((msg.key,), (msg.value,), strict=True)
        n = 0
        for key, value in rows:
            n += 1
            if key is None:
                continue   # never sent: a keyless row is refused where it is read
            if value is None or value == _PACKED_NONE:
                delete(key)
            else:
                put(key, value)
        self.stats.processed += n

    def data(self, msg: wire.Envelope | wire.DataBatch, topic: str, partition: int,
             offset: int, version: int) -> None:
        """A data record read from a channel (an envelope, or a batch of messages: each
        one in turn), processed in ``version``."""
        if self._rows and msg.producer_id in self._rows:
            self._table_rows(msg)
        elif type(msg) is wire.DataBatch:
            self.batch(msg, topic, partition, offset, version)
        else:
            assert type(msg) is wire.Envelope
            self.envelope(msg, topic, partition, offset, version)

    def envelope(self, msg: wire.Envelope, topic: str, partition: int, offset: int,
                 version: int) -> None:
        """A data envelope read from a channel, processed in ``version``."""
        self._messages((msg.key,), (msg.value,), (msg.timestamp,), topic, partition, offset,
                       version)

    def batch(self, msg: wire.DataBatch, topic: str, partition: int, offset: int,
              version: int) -> None:
        """The messages of a data batch, one after the other, processed in ``version``."""
        self._messages(msg.keys, msg.values, msg.timestamps, topic, partition, offset, version)

    def _messages(self, keys: tuple[bytes | None, ...], values: tuple[bytes | None, ...],
                  stamps: tuple[int, ...], topic: str, partition: int, offset: int,
                  version: int) -> None:
        """Channel messages in turn; one whose function raises is named by its record's
        offset (a batch's messages share it) and its key."""
        lag, run, emit, savepoint = self.lag, self.chain.run, self._emit, self._savepoint
        windows = self._windows
        for key_bytes, value, timestamp in zip(keys, values, stamps, strict=True):
            if lag:
                time.sleep(lag)
            if savepoint is not None:
                savepoint()
            try:
                if windows is not None:
                    windows.event_time = timestamp
                outs = run(key_bytes, _unpack(cast(bytes, value)))
                if outs:
                    emit(key_bytes, outs, timestamp, version)
                if windows is not None and windows.late:
                    self._late(windows, topic, partition, offset, timestamp, key_bytes, value)
            except Exception as exc:
                if not isinstance(exc, UserFunctionError) and isinstance(exc, EosError):
                    raise
                self._user_error(exc, topic, partition, offset, timestamp, key_bytes, value)
        self.stats.processed += len(keys)

    def _chain_messages(self, keys: tuple[bytes | None, ...],
                        values: tuple[bytes | None, ...], stamps: tuple[int, ...], topic: str,
                        partition: int, offset: int, version: int) -> None:
        """``_messages`` for the common channel stage, a chain with no lag, no savepoint
        and no windows: nothing else per message (those checks, a ``cast`` and the call
        to ``_emit`` were about a fifth of the loop's own time under cProfile)."""
        run, sink, shuffle = self.chain.run, self.sink, self._shuffle
        emitted = 0
        try:
            for key_bytes, value, timestamp in zip(keys, values, stamps, strict=True):
                try:
                    outs = run(key_bytes, _unpack(cast(bytes, value)))
                    if outs:
                        if sink is not None:
                            sink.write(key_bytes, outs, timestamp)
                        else:
                            shuffle(key_bytes, outs, timestamp, version)
                        emitted += len(outs)
                except Exception as exc:
                    if not isinstance(exc, UserFunctionError) and isinstance(exc, EosError):
                        raise
                    self._user_error(exc, topic, partition, offset, timestamp, key_bytes,
                                     value)
        finally:
            self.stats.emitted += emitted
        self.stats.processed += len(keys)

    def _aggregate_messages(self, keys: tuple[bytes | None, ...],
                            values: tuple[bytes | None, ...], stamps: tuple[int, ...],
                            topic: str, partition: int, offset: int, version: int) -> None:
        """``_chain_messages`` for a stage that is one built-in running aggregate into a
        sink (``.count().sink(...)``), with no dead letters: each message's aggregate
        straight to the sink, one value a record, and for ``count()`` no value decoded.
        Without dead letters any error stops the task, so one ``try`` covers the loop."""
        chain, sink = cast(Chain, self.chain), self.sink
        aggregate, write = chain.aggregate, cast(SinkWriter, sink).write_one
        assert aggregate is not None
        reads_value = cast(Any, chain.aggregate_step.fn).reads_value
        key_bytes: bytes | None = None
        value: bytes | None = None
        timestamp = 0
        try:
            for key_bytes, value, timestamp in zip(keys, values, stamps, strict=True):
                read = _unpack(cast(bytes, value)) if reads_value else None
                try:
                    acc = aggregate(key_bytes, read)
                except Exception as exc:
                    raise chain.aggregate_error(exc) from exc
                write(key_bytes, acc, timestamp)
        except Exception as exc:
            if not isinstance(exc, UserFunctionError) and isinstance(exc, EosError):
                raise
            self._user_error(exc, topic, partition, offset, timestamp, key_bytes, value)
        self.stats.processed += len(keys)
        self.stats.emitted += len(keys)

    def _emit(self, key_bytes: bytes | None, outs: list[Any], timestamp: int,
              version: int) -> None:
        """The record's output, in one write (which keeps all of it or nothing)."""
        if not outs:
            return
        if self.channels is not None:
            self._shuffle(key_bytes, outs, timestamp, version)
        elif self.sink is not None:
            self.sink.write(key_bytes, outs, timestamp)
        self.stats.emitted += len(outs)

    def _shuffle(self, key_bytes: bytes | None, outs: list[Any], timestamp: int,
                 version: int) -> None:
        channels = self.channels
        assert channels is not None
        if self._key_fn is None:
            encoded, packed = _keys(None, outs, key_bytes), self._pack(0, outs)
        else:
            encoded, packed = self._for_channels(outs)
        channels.append_packed(channels.generation, version, encoded, packed, timestamp)

    def _for_channels(self, outs: list[Any]) -> tuple[list[bytes], list[bytes]]:
        """A record's output values' key_by keys, encoded, and the values packed, as the
        channels carry them; the key_by's or the packing's error is the record's."""
        key_fn = self._key_fn
        keys = _key_values(key_fn, outs)
        if all(map(is_, keys, outs)) and set(map(type, keys)) == _STR:
            # Each value its own key, a str (key_by(lambda word: word)): a str key is
            # encoded as its value is, so one encoding serves both
            packed = self._pack(0, outs)
            return packed, packed
        encoded = _encoded_keys(key_fn, keys)
        return encoded, self._pack(0, outs)

    def _channel_batch(self, keys: tuple[bytes | None, ...], values: tuple[bytes | None, ...],
                       stamps: tuple[int, ...], topic: str, partition: int, offset: int,
                       version: int) -> None:
        """``_chain_messages`` for a chain into the next stage's channels: as
        ``_source_batch`` does, the batch's output is gathered, a message's all or
        nothing, and goes to the channels in one call (its timestamps are the batch's
        own, which its reader checked)."""
        run, for_channels = self.chain.run, self._for_channels
        out_keys: list[bytes | None] = []
        out_values: list[bytes] = []
        out_stamps: list[int] = []
        for key_bytes, value, timestamp in zip(keys, values, stamps, strict=True):
            try:
                outs = run(key_bytes, _unpack(cast(bytes, value)))
                if not outs:
                    continue
                encoded, packed = for_channels(outs)
            except Exception as exc:
                if not isinstance(exc, UserFunctionError) and isinstance(exc, EosError):
                    raise
                self._user_error(exc, topic, partition, offset, timestamp, key_bytes, value)
                continue
            out_keys += encoded
            out_values += packed
            out_stamps += [timestamp] * len(packed)
        self._send_gathered(out_keys, out_values, out_stamps, version)
        self.stats.processed += len(keys)

    def _pack(self, output: int, values: list[Any]) -> list[bytes]:
        """``values`` as output ``output``'s channels carry them; a value msgpack cannot
        encode is the user's error, naming the value, its step and the key_by it crosses."""
        try:
            return ChannelWriter.pack(values)
        except Exception:
            origin, crossing = cast(tuple[str, str], self._crossings[output])
            for value in values:
                try:
                    ChannelWriter.pack([value])
                except Exception as exc:
                    raise cannot_cross(value, f"{type(exc).__name__}: {exc}", origin,
                                       crossing) from None
            raise

    def _emit_each(self, key_bytes: bytes | None, outs: list[list[Any]], timestamp: int,
                   version: int) -> None:
        """A graph stage's output of one record, to each of its writers: every value of
        every output encoded first, then all held, so the record's output is all or
        nothing across its outputs as it is for one."""
        holds: list[tuple[Callable[[], None], int]] = []
        for k, (spec, writer, values) in enumerate(zip(self.stage.outputs, self.writers, outs,
                                                       strict=True)):
            if not values:
                continue
            if spec.shuffle is not None:
                assert isinstance(writer, ChannelWriter)
                keys = _keys(spec.shuffle.key_fn, values, key_bytes)
                holds.append((partial(writer.append_packed, writer.generation, version, keys,
                                      self._pack(k, values), timestamp), len(values)))
            else:
                assert isinstance(writer, SinkWriter)
                holds.append((partial(writer.hold, writer.encode(key_bytes, values, timestamp)),
                              len(values)))
        for hold, n in holds:
            hold()
            self.stats.emitted += n

    def _user_error(self, exc: Exception, topic: str, partition: int, offset: int,
                    timestamp: int, key: bytes | None, value: bytes | None) -> None:
        """A record (its key and value as the task read them) whose function raised, or
        whose output could not be encoded."""
        if self._windows is not None:
            self._windows.late = []   # the record's: what it did is undone or set aside
        channel = not self.stage.is_source
        frames = exc.user_traceback if isinstance(exc, UserFunctionError) else None
        if self.dead is None:
            cause = exc if isinstance(exc, UserFunctionError) else UserFunctionError(
                f"{type(exc).__name__}: {exc}")
            at = f"topic={topic!r} partition={partition} offset={offset}"
            if channel:   # a channel's offset means nothing to the user: the stream does
                at = f"a record of {self._stream} ({at})"
            at += f", {self._record_text(key, value)}"
            if getattr(exc, "sink_format", False):
                # The fix is in the pipeline, not in the record: say that first.
                failed = TaskFailed(f"{cause}; task {self.task_id} stopped at {at}, nothing "
                                    f"past this record was committed")
            elif getattr(exc, "undecodable", False) or str(exc) == NULL_VALUE:
                # No function saw it: the fix is in what wrote the topic, or its format.
                failed = TaskFailed(f"task {self.task_id} stopped at {at}: {cause}; nothing "
                                    f"past this record was committed: fix what writes the "
                                    f"topic or read it with the format it holds, or run "
                                    f"with --dead-letters to set such records aside in "
                                    f"{self.job}.dead-letters and go on")
            else:
                failed = TaskFailed(f"task {self.task_id} stopped at {at}: {cause}; nothing "
                                    f"past this record was committed: fix the function, or "
                                    f"run with --dead-letters to set such records aside in "
                                    f"{self.job}.dead-letters and go on")
            failed.user_traceback = frames
            raise failed from exc
        if self._rollback is not None:
            self._rollback()   # the state writes of the record set aside
        error = str(exc) if isinstance(exc, UserFunctionError) else f"{type(exc).__name__}: {exc}"
        self.dead.write(None, [letters.build(
            job=self.job, task=self.task_id, topic=topic, partition=partition, offset=offset,
            error=error, key=key, value=value, channel=channel,
            bound=self._letter_bound, stream=self._stream,
            traceback=frames if self.tracebacks else None)], timestamp)

    def _record_text(self, key: bytes | None, value: bytes | None) -> str:
        """The record's key (where the stage has keys) and value as its functions saw
        them, each shortened; bytes that do not decode as they are."""
        src = self.stage.source
        key_de = decode_key if src is None else self._src_key
        value_de = _unpack if src is None else self._src_value
        shown = []
        for name, raw, decode in (("key", key, key_de), ("value", value, value_de)):
            if raw is None or decode is None:
                if name == "value":
                    shown.append("value None")
                continue
            try:
                shown.append(f"{name} {short(decode(raw))}")
            except Exception:
                shown.append(f"{name} {short(raw)}")
        return ", ".join(shown)


def _stream_of(stage: StagePlan, plan: JobPlan | None) -> str:
    """What a stage reads, in the pipeline's words: "source 'lines'", or "stage 1, from
    .key_by(word) of stage 0"."""
    src = stage.source
    if src is not None:
        return f"{'table' if src.table else 'source'} {src.topic!r}"
    if plan is None:
        return f"stage {stage.index}"
    senders = [(up.index, o.shuffle.key_fn) for up in plan.stages for o in up.outputs
               if o.topic == stage.input_topic and o.shuffle is not None]
    key_bys = dict.fromkeys(
        f".key_by({getattr(fn, '__name__', None) or 'key_by'})" if fn is not None
        else "its rows" for _, fn in senders)
    ups = [str(i) for i, _ in senders]
    return (f"stage {stage.index}, from {' and '.join(key_bys)} of "
            f"stage{'s' if len(ups) > 1 else ''} {', '.join(ups)}")


def _crossing_of(topic: str, key_fn: Any, plan: JobPlan | None) -> str:
    """How an error names a key_by into ``topic``'s channels: ".key_by(word) to stage 1"."""
    to = next((st.index for st in plan.stages if st.input_topic == topic), None) if plan else None
    return crossing_text(key_fn, to) if to is not None else f"the key_by into {topic!r}"


def _keys(key_fn: Any, values: list[Any], key_bytes: bytes | None) -> list[bytes]:
    """Each value's key_by key, encoded; every key first, so a record whose key_by raises
    sends nothing downstream. No ``key_fn`` (a table's rows): the record's own key."""
    if key_fn is None:
        assert key_bytes is not None
        return [key_bytes] * len(values)
    return _encoded_keys(key_fn, _key_values(key_fn, values))


def _key_values(key_fn: Any, values: list[Any]) -> list[Any]:
    """``key_fn`` of each value; one that raises is the user's error, naming the key_by."""
    try:
        return [key_fn(value) for value in values]
    except Exception as exc:
        raise function_error(f"key_by({_key_by_name(key_fn)})", key_fn, exc) from exc


def _encoded_keys(key_fn: Any, keys: list[Any]) -> list[bytes]:
    """``keys`` (what ``key_fn`` returned) encoded; a key of a type keys cannot be is the
    user's error, naming the key_by."""
    try:
        return [encode_key(key) for key in keys]
    except UserFunctionError as exc:
        raise UserFunctionError(f"key_by({_key_by_name(key_fn)}) returned a bad key: "
                                f"{exc}") from None


def _key_by_name(key_fn: Any) -> str:
    return getattr(key_fn, "__name__", None) or "key_by"


_STR = {str}


def _origins(stage: StagePlan, output: int) -> tuple[str, str]:
    """Where a sink's values and keys come from, as its format error names them."""
    value = value_origin(stage.program, output, stage.source)
    src = stage.source
    if src is not None:
        key = f"the key read from source {src.topic!r} as {src.key_format}"
    else:
        key = "the key key_by returned"
    return value, key


# --------------------------------------------------------------------------- progress
