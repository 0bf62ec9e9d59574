"""How a task's sink output (and its dead letters) leaves: one of three output modes,
chosen once where the task opens from the guarantee and the change log's kind
(``runs.Guarantee.output_mode``). The committer makes the same two calls whatever the
mode: ``after_batch`` after each poll batch, ``at_checkpoint`` at checkpoint step 1.

- ``JoinTransaction`` (exactly-once on Kafka): the output goes into the version's open
  transaction, where the commit shows it to read_committed readers and a rewind aborts
  it. Held until a writer holds ``chunk`` records (``checkpoint.TRANSACTION_CHUNK``,
  which says why), then as it is made until the checkpoint.
- ``HoldForAppend`` (exactly-once on the local log, which has no transactions): held
  for one append per partition at the checkpoint, whose offset ranges the commit record
  lists; the committed reader shows only those (``committed.read_output``).
- ``Stream`` (at-least-once): sent as it is made, flushed at the checkpoint before the
  positions are committed. Nothing it promises waits for the commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..joblog.changelog import ChangeLogWriter
from ..protocol import wire
from ..protocol.runs import OutputMode
from ..transport import TopicPartition
from .outputs import SinkWriter

__all__ = ["HoldForAppend", "JoinTransaction", "Output", "Stream", "output_for"]


class Output(Protocol):
    def after_batch(self, log: ChangeLogWriter) -> None:
        """What a poll batch made, out now where the mode lets it go before the commit."""

    def at_checkpoint(self, log: ChangeLogWriter) -> tuple[wire.OutputRange, ...]:
        """Checkpoint step 1: everything held goes to the log's producer, and is durable
        or in the open transaction when this returns; the output ranges for the commit
        record (``runs.Guarantee.output_ranges``: only ``HoldForAppend`` has any)."""

    def discard(self) -> None:
        """A rewind: the open version's output goes (held output; the transaction's is
        aborted by the log)."""


class _Held:
    def __init__(self, held: Sequence[SinkWriter]) -> None:
        self.held = held

    def discard(self) -> None:
        for w in self.held:
            w.discard()


class JoinTransaction(_Held):
    """Exactly-once on Kafka: into the version's open transaction, a chunk at a time."""

    def __init__(self, held: Sequence[SinkWriter], chunk: int) -> None:
        super().__init__(held)
        self.chunk = chunk
        # A chunk went into the open transaction: until it ends, output joins as made.
        self.joined = False

    def after_batch(self, log: ChangeLogWriter) -> None:
        least = 1 if self.joined else self.chunk
        if any([w.produce_into(log.producer, reported=False) for w in self.held
                if len(w) >= least]):
            self.joined = True

    def at_checkpoint(self, log: ChangeLogWriter) -> tuple[wire.OutputRange, ...]:
        # Unreported but each partition's last record: a record that fails fails the
        # commit, and the commit's report (what ``Committer.await_readable`` waits past)
        # still holds each partition's last offset.
        for w in self.held:
            w.produce_into(log.producer, reported=False)
        self.joined = False   # the commit (step 3) ends the transaction
        return ()

    def discard(self) -> None:
        super().discard()
        self.joined = False   # the log aborts the transaction


class HoldForAppend(_Held):
    """Exactly-once on the local log: one append per partition at the checkpoint."""

    def after_batch(self, log: ChangeLogWriter) -> None:
        pass   # the checkpoint's one append per partition is the committed view

    def at_checkpoint(self, log: ChangeLogWriter) -> tuple[wire.OutputRange, ...]:
        counts = [(w.topic, w.produce_counted(log.producer)) for w in self.held]
        if not any(c for _, c in counts):
            return ()
        # One append per partition per flush: the fenced producer's (G3), whose appends
        # no other writer interleaves.
        report = log.producer.flush()
        return tuple(wire.OutputRange(topic, p, report[tp] - n + 1, report[tp])
                     for topic, c in counts for p, n in sorted(c.items())
                     for tp in [TopicPartition(topic, p)])


class Stream(_Held):
    """At-least-once: out as made, flushed at the checkpoint."""

    def __init__(self, held: Sequence[SinkWriter]) -> None:
        super().__init__(held)
        self.unflushed = False   # output sent since the last flush

    def after_batch(self, log: ChangeLogWriter) -> None:
        if any([w.produce_into(log.producer) for w in self.held if len(w)]):
            log.producer.send()
            self.unflushed = True

    def at_checkpoint(self, log: ChangeLogWriter) -> tuple[wire.OutputRange, ...]:
        counts = [w.produce_into(log.producer) for w in self.held]
        if self.unflushed or any(counts):
            log.producer.flush()
            self.unflushed = False
        return ()


def output_for(mode: OutputMode, held: Sequence[SinkWriter], chunk: int) -> Output:
    """The output mode ``mode`` over the writers whose output it carries."""
    if mode is OutputMode.JOIN:
        return JoinTransaction(held, chunk)
    if mode is OutputMode.HOLD:
        return HoldForAppend(held)
    return Stream(held)
