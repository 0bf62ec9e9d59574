"""A fenced transactional producer must raise ProducerFenced even when librdkafka's
report of the fence is not what its flush hands back.

Seen in CI under load: the flush of a fenced producer returned a record "purged in
queue" (the fence purges the queue) before the fatal error reached ``error_cb``, or
raised a bare ``SystemError``. Either way the caller saw a delivery failure and could
not know that it was a zombie. The transaction state librdkafka keeps is the truth, and
these tests give the producer a handle whose flush loses the report in those two ways
while that state says "fenced" (or something else), as librdkafka's would.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from eos_runtime.errors import DeliveryFailed, ProducerFenced, TransactionError, TransportError
from eos_runtime.transport.kafka import KafkaProducer


class _Msg:
    def topic(self):
        return "out"

    def partition(self):
        return 0

    def value(self):
        return b"v"

    def key(self):
        return None


class _LostReportHandle:
    """librdkafka as it was seen: the flush loses the report, the state keeps it."""

    def __init__(self, state, flush_does: str, txn_state: KafkaError | None) -> None:
        self._state = state
        self._flush_does = flush_does
        self._txn_state = txn_state
        self.began = 0

    def flush(self, timeout):
        if self._flush_does == "purge":
            self._state.on_delivery(KafkaError(KafkaError._PURGE_QUEUE, "Purged in queue"),
                                    _Msg())
            return 0
        raise SystemError("<built-in method flush> returned NULL without setting an exception")

    def poll(self, timeout):
        return 0

    def begin_transaction(self):
        self.began += 1
        if self._txn_state is not None:
            raise KafkaException(self._txn_state)

    def purge(self, **kw):
        pass


def _producer(flush_does: str, txn_state: KafkaError | None) -> tuple[KafkaProducer, Any]:
    p = KafkaProducer({"bootstrap.servers": "127.0.0.1:1"})
    # What init_transactions and begin_transaction would have left behind.
    p.transactional = True
    p._in_transaction = True
    p._asked_for_id = None   # init_transactions asked for the producer id
    handle = _LostReportHandle(p._state, flush_does, txn_state)
    p._discard()
    p._p = handle
    return p, handle


FENCED = KafkaError(KafkaError._FENCED, "This instance has been fenced by a newer instance",
                    fatal=True)
ABORTABLE = KafkaError(KafkaError._PURGE_QUEUE, "Failed to produce messages",
                       txn_requires_abort=True)
IN_TRANSACTION = KafkaError(KafkaError._STATE, "Operation not valid in state InTransaction")


@pytest.mark.parametrize("flush_does", ["purge", "bare SystemError"])
def test_a_fenced_producer_whose_flush_lost_the_report_raises_producer_fenced(flush_does):
    p, _ = _producer(flush_does, FENCED)
    with pytest.raises(ProducerFenced):
        p.commit_transaction(timeout=1)
    with pytest.raises(ProducerFenced):
        p.flush(timeout=1)


def test_an_abortable_state_behind_a_failed_flush_asks_for_an_abort():
    p, _ = _producer("purge", ABORTABLE)
    with pytest.raises(TransactionError) as info:
        p.commit_transaction(timeout=1)
    assert info.value.requires_abort and not isinstance(info.value, ProducerFenced)


def test_a_failed_delivery_in_a_healthy_transaction_stays_a_delivery_failure():
    p, handle = _producer("purge", IN_TRANSACTION)
    with pytest.raises(DeliveryFailed, match="Purged in queue"):
        p.flush(timeout=1)
    assert handle.began == 1      # the state was asked, and opened nothing


def test_a_bare_system_error_with_no_fatal_state_is_not_called_a_fence():
    p, _ = _producer("bare SystemError", IN_TRANSACTION)
    with pytest.raises(TransportError) as info:
        p.flush(timeout=1)
    assert not isinstance(info.value, ProducerFenced)
    assert "flush" in str(info.value)


class _FatalOnProduce(_LostReportHandle):
    """A produce after the fence, racing its report: librdkafka says only "Local: Fatal
    error" (seen in CI: a zombie's produce raised TransactionError, not ProducerFenced)."""

    def produce(self, *args):
        raise KafkaException(KafkaError(KafkaError._FATAL, "Fatal error", fatal=True))


def test_a_produce_refused_as_fatal_after_a_fence_raises_producer_fenced():
    p, _ = _producer("purge", FENCED)
    handle = _FatalOnProduce(p._state, "purge", FENCED)
    p._p = handle
    with pytest.raises(ProducerFenced):
        p.produce("out", 0, b"late")
