"""What a live run keeps up beside its work, each on its own reading of the job's logs:
the driver's lease (``LeaseKeeper``: renewed from a thread into ``<job>.heartbeats``,
released at the end) and each source task's look-out for a stop request naming its run
(``StopWatcher``, reading the control topic from the run's start record). What the
records mean and how the lease is decided: ``control.py``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

from .. import clock
from ..outage import is_transient
from ..protocol import wire
from ..transport import TopicPartition, Transport, open_transport
from .control import ControlLog, LeaseRequest, control_topic

__all__ = ["LeaseKeeper", "StopWatcher"]

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews a driver's lease from a thread (its own transport) and releases it on
    ``close``. A renewal that fails is retried at the next beat: the lease only lapses
    after ``timeout`` seconds of failures.

    In a broker outage renewals fail, each after waiting out its timeout: that is the
    outage, which the run's driver reports (its progress, its error past the budget), so
    the keeper says nothing of it until the lease has gone unrenewed for half its timeout
    (when it may lapse before the broker is back). A failure that is not an outage's is
    a warning at once."""

    def __init__(self, transport_opts: dict[str, Any], job: str, run: int,
                 lease: LeaseRequest, every: float | None = None) -> None:
        self.opts, self.job, self.run, self.lease = transport_opts, job, run, lease
        self.every = min(lease.timeout / 3, 10.0) if every is None else every
        self.renewals = 0            # renewals that went through (tests, diagnosis)
        self.failures = 0            # and that failed
        self._renewed = time.monotonic()   # the acquire was as good as a renewal
        self._beats_made = False
        self._warned = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"eos-lease-{job}", daemon=True)
        self._thread.start()

    def _record(self, action: str) -> wire.Lease:
        return wire.Lease(self.run, action, self.lease.owner, os.getpid(), socket.gethostname(),
                          clock.stamp_ms(), int(self.lease.timeout * 1000))

    def renew(self, transport: Transport) -> None:
        """One heartbeat: the lease holds ``timeout`` seconds from now."""
        # The heartbeat topic (an older job's control topic came without one) is made
        # once: in an outage each creation waits out its own timeout.
        ControlLog(transport, self.job).append_lease(self._record("renew"),
                                                     make_topic=not self._beats_made)
        self._beats_made = True

    def _beat(self) -> None:
        transport = None
        try:
            while not self._done.wait(self.every):
                try:
                    if transport is None:
                        transport = open_transport(**self.opts)
                    self.renew(transport)
                    self.renewals += 1
                    self._renewed = time.monotonic()
                    self._warned = False
                except Exception as exc:   # the next beat tries again; expiry is the limit
                    self.failures += 1
                    self._failed(exc)
        finally:
            if transport is not None:
                transport.close()

    def _failed(self, exc: Exception) -> None:
        unrenewed = time.monotonic() - self._renewed
        if self._done.is_set() or (is_transient(exc) and (
                self._warned or unrenewed < self.lease.timeout / 2)):
            log.debug("job %r: renewing the lease failed (%s); retrying", self.job, exc)
        elif is_transient(exc):
            self._warned = True
            log.warning("job %r: the lease has not been renewed for %.0f s (%s); it lapses "
                        "after %g s without a renewal, and another run may then take the "
                        "job", self.job, unrenewed, exc, self.lease.timeout)
        else:
            log.warning("job %r: renewing the lease failed (%s); retrying", self.job, exc)

    def close(self, end: tuple[str, str] | None = None, *, unreachable: bool = False) -> None:
        """Stop renewing and release the lease (the next run may start at once); first,
        ``end`` (outcome, detail: ``wire.RunEnd``), how the run ended, if known.
        ``unreachable``: the driver gave up on a broker outage; a renewal waiting out its
        timeout in it is not waited for, and the lease is left to lapse (a release sent
        beside it could be overtaken by that renewal once the broker is back)."""
        if self._done.is_set():
            return
        self._done.set()
        self._thread.join(1.0 if unreachable else None)
        if self._thread.is_alive():
            log.warning("job %r: the lease was not released (the broker is unreachable); it "
                        "lapses %g s after its last renewal", self.job, self.lease.timeout)
            return
        try:
            with open_transport(**self.opts) as transport:
                control = ControlLog(transport, self.job)
                if end is not None:
                    control.record_end(wire.RunEnd(self.run, clock.stamp_ms(), *end))
                control.append_lease(self._record("release"))
        except Exception as exc:   # the lease then lapses after its timeout
            log.warning("job %r: the lease was not released (%s); it lapses %g s after its "
                        "last renewal", self.job, exc, self.lease.timeout)


class StopWatcher:
    """A source task's look-out for a stop request naming its run; reads at most every
    ``every`` seconds, so the hot loop pays a clock read per batch."""

    def __init__(self, transport: Transport, job: str, run: int, from_offset: int,
                 every: float = 0.25) -> None:
        self.run = run
        self.every = every
        self.tp = TopicPartition(control_topic(job), 0)
        self.consumer = transport.consumer(read_committed=False)
        self.consumer.assign({self.tp: from_offset})
        self._next = 0.0
        self.stop: wire.StopRequest | None = None

    def requested(self) -> bool:
        if self.stop is not None:
            return True
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.every
        for r in self.consumer.poll(100, 0):
            rec = wire.decode_control(r.value, topic=r.topic, partition=r.partition,
                                      offset=r.offset)
            if isinstance(rec, wire.StopRequest) and rec.run == self.run:
                self.stop = rec
                return True
        return False

    def close(self) -> None:
        self.consumer.close()
