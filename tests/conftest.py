"""Shared pytest fixtures."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis times every example (200 ms by default) and checks that generating data is
# fast: on a busy machine both fail tests that are right. Nothing here is timed.
settings.register_profile("eos", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("eos")

# A developer's own Kafka settings (a secured cluster's) would reach every command the
# tests start; the tests choose their settings themselves.
os.environ.pop("EOS_KAFKA_CONFIG", None)

# The brokers tests start for themselves (outages, SASL, the CLI's own) live for seconds:
# C2's compiles cost them a third of their CPU (10.4-10.8 s for a start and 10 s of work,
# 7.1-7.4 with C1 only, 2026-11-28). CI's session broker, started before the suite, keeps
# the product's options.
os.environ.setdefault("EOS_KAFKA_JVM_OPTS", "-XX:TieredStopAtLevel=1")

# A suite started in the background of a non-interactive shell (nohup ... &, some CI
# runners) inherits SIGINT ignored, and an ignored signal stays ignored across exec: every
# Ctrl-C test would then see its command ignore the Ctrl-C and time out. A handled signal
# is reset to the default at exec, so the commands the tests start get Python's usual one.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# --------------------------------------------------------------------------- Kafka

@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of a real Kafka broker, one for the whole session.

    ``$EOS_BOOTSTRAP_SERVERS`` when set (CI starts the broker with ``eos kafka up`` and
    exports it); else the project's own broker (eos_runtime.broker) started in a temporary
    run dir on a free port and stopped, data removed, when the session ends. Tests that use
    it carry ``@pytest.mark.kafka``.
    """
    env = os.environ.get("EOS_BOOTSTRAP_SERVERS", "").strip()
    if env:
        yield env
        return
    from eos_runtime.broker import KafkaBroker

    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"), die_with_parent=True)
    bootstrap = broker.start()
    try:
        yield bootstrap
    finally:
        broker.stop()
