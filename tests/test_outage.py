"""The outage clock (eos_runtime/outage.py, rules O1-O5) and the Kafka transport's one
classification of transient errors. No broker, no sleeping: time is injected."""

from __future__ import annotations

import pytest

from eos_runtime.errors import (
    BrokerUnavailable,
    DeliveryFailed,
    OffsetOutOfRange,
    ProducerFenced,
    TopicNotFound,
    TransactionError,
    TransportError,
)
from eos_runtime.outage import (
    FIRST_DELAY,
    MAX_DELAY,
    OutageClock,
    check_budget,
    gone_too_long,
    is_transient,
    task_failed,
    verdict,
)


class FakeTime:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_a_failure_inside_the_budget_is_retried_with_growing_delays():
    now = FakeTime()
    clock = OutageClock(60, now=now)
    delays = []
    for _ in range(6):
        v = clock.failed()
        assert v.retry
        delays.append(v.delay)
        now.t += v.delay
    assert delays[0] == FIRST_DELAY
    assert delays == sorted(delays)
    assert max(delays) == MAX_DELAY


def test_o3_a_failure_at_or_past_the_budget_gives_up():
    now = FakeTime()
    clock = OutageClock(10, now=now)
    assert clock.failed().retry
    now.t += 9.99
    assert clock.failed().retry
    now.t += 0.01
    v = clock.failed()
    assert not v.retry and v.delay == 0
    assert v.down_for == pytest.approx(10.0)


def test_o1_an_outage_begins_when_the_failing_call_began():
    # A look-up that waits 30 s for a frozen broker and then fails: the broker was gone
    # for those 30 s too (seen with a SIGSTOPped broker: a 15 s budget given up 75 s in, as "16 s").
    now = FakeTime()
    clock = OutageClock(15, now=now)
    now.t = 30.0
    v = clock.failed(since=0.0)
    assert not v.retry and v.down_for == pytest.approx(30.0)
    clock.ok()
    now.t = 100.0
    assert clock.failed(since=95.0).down_for == pytest.approx(5.0)
    now.t = 130.0   # a later call's start does not move the outage's beginning
    v = clock.failed(since=125.0)
    assert not v.retry and v.down_for == pytest.approx(35.0)


def test_o2_the_last_delay_never_reaches_past_the_budget():
    v = verdict(began=0.0, now=9.9, budget=10.0, retries=10)
    assert v.retry and v.delay == pytest.approx(0.1)


def test_o1_a_success_ends_the_outage_and_the_next_failure_starts_a_new_one():
    now = FakeTime()
    clock = OutageClock(10, now=now)
    clock.failed()
    now.t += 9
    clock.ok()
    assert clock.down_for == 0
    now.t += 5                       # 14 s after the first failure, 5 after the success
    v = clock.failed()
    assert v.retry and v.down_for == 0 and v.delay == FIRST_DELAY
    assert clock.outages == 2
    now.t += 10
    assert not clock.failed().retry


def test_without_a_success_the_outage_goes_on_across_failures():
    now = FakeTime()
    clock = OutageClock(10, now=now)
    clock.failed()
    now.t += 6
    clock.failed()
    assert clock.down_for == 6
    now.t += 4
    assert not clock.failed().retry
    assert clock.outages == 1


def test_o5_a_restarted_task_is_back_only_once_it_commits():
    now = FakeTime()
    clock = OutageClock(10, now=now)
    assert task_failed(clock, committed=False).retry      # the outage begins
    for _ in range(3):                                     # restarts that recover, then fail
        now.t += 3
        v = task_failed(clock, committed=False)
        assert v.retry
    assert v.down_for == pytest.approx(9)                  # one outage all along
    now.t += 1
    assert not task_failed(clock, committed=False).retry
    assert clock.outages == 1
    # An incarnation that committed ended the outage: its failure opens a new one.
    v = task_failed(clock, committed=True)
    assert v.retry and v.down_for == 0 and clock.outages == 2


def test_o4_budget_zero_gives_up_at_the_first_failure():
    assert not OutageClock(0, now=FakeTime()).failed().retry


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "60", None, True])
def test_a_bad_budget_is_refused(bad):
    with pytest.raises(ValueError, match="outage budget"):
        check_budget(bad)


def test_the_give_up_line_names_the_broker_and_how_long_it_was_gone():
    line = gone_too_long("Kafka at 127.0.0.1:19209", 61.4, 60, "watermarks of t[0]: down")
    assert "\n" not in line
    assert line.startswith("Kafka at 127.0.0.1:19209 was unreachable for 61 s")
    assert "outage budget of 60 s (--outage-budget)" in line
    assert line.endswith("last error: watermarks of t[0]: down")


def test_is_transient_reads_the_flag_the_transport_set():
    assert is_transient(BrokerUnavailable("x"))
    assert not is_transient(TransportError("x"))
    failed = DeliveryFailed("x")
    assert not is_transient(failed)
    failed.transient = True
    assert is_transient(failed)
    assert not is_transient(ValueError("x"))


# ------------------------------------------------------- Kafka: one place classifies

kafka = pytest.importorskip("confluent_kafka")
KE = kafka.KafkaError


@pytest.mark.parametrize("code", [
    KE._TRANSPORT, KE._ALL_BROKERS_DOWN, KE._TIMED_OUT, KE._MSG_TIMED_OUT,
    KE.NOT_COORDINATOR, KE.COORDINATOR_NOT_AVAILABLE, KE.COORDINATOR_LOAD_IN_PROGRESS,
    KE.NOT_LEADER_FOR_PARTITION, KE.LEADER_NOT_AVAILABLE, KE.REQUEST_TIMED_OUT,
    KE.NETWORK_EXCEPTION,
    # a broker handle librdkafka dropped while the broker restarted (seen from the driver's
    # watermark look-up in a broker-kill experiment, which then failed the run)
    KE._DESTROY_BROKER,
])
def test_kafka_outage_codes_are_transient(code):
    from eos_runtime.transport.kafka.errors import _map_error, _transient

    assert _transient(KE(code))
    mapped = _map_error(KE(code), "watermarks of t[0]")
    assert isinstance(mapped, BrokerUnavailable) and is_transient(mapped)
    txn = _map_error(KE(code), "commit_transaction", transactional=True)
    assert isinstance(txn, TransactionError) and is_transient(txn)


@pytest.mark.parametrize("code, cls", [
    (KE.UNKNOWN_TOPIC_OR_PART, TopicNotFound),
    (KE.OFFSET_OUT_OF_RANGE, OffsetOutOfRange),
    (KE.PRODUCER_FENCED, ProducerFenced),
    (KE.MSG_SIZE_TOO_LARGE, TransportError),
    (KE.TOPIC_AUTHORIZATION_FAILED, TransportError),
])
def test_kafka_permanent_codes_are_not(code, cls):
    from eos_runtime.transport.kafka.errors import _map_error, _transient

    assert not _transient(KE(code))
    mapped = _map_error(KE(code), "ctx")
    assert type(mapped) is cls and not is_transient(mapped)


def test_a_fatal_error_is_never_transient_even_with_an_outage_code():
    from eos_runtime.transport.kafka.errors import _map_error, _transient

    fatal = KE(KE._TRANSPORT, fatal=True)
    assert not _transient(fatal)
    assert not is_transient(_map_error(fatal, "ctx", transactional=True))


def test_a_retriable_code_not_in_the_list_is_transient_unless_it_is_a_missing_topic():
    from eos_runtime.transport.kafka.errors import _transient

    assert _transient(KE(KE.UNKNOWN, retriable=True))
    assert not _transient(KE(KE.UNKNOWN_TOPIC_OR_PART, retriable=True))


# ------------------------------------------------------------ where a run takes its budget

def test_the_budget_is_a_pipeline_setting_and_a_run_option():
    from eos_runtime import Pipeline
    from eos_runtime.errors import ConfigError
    from eos_runtime.runner import plan_budget

    assert Pipeline("p").outage_budget == 60.0
    assert Pipeline("p", outage_budget=5).outage_budget == 5.0
    with pytest.raises(ConfigError, match="outage_budget -1: give a number of seconds >= 0"):
        Pipeline("p", outage_budget=-1)
    assert plan_budget(None) == 60.0 and plan_budget(0) == 0.0
    with pytest.raises(ConfigError, match="not inf"):
        plan_budget(float("inf"))
