"""A task asks for its change-log writer's producer before it reads its change log.

On Kafka a new producer is not ready at once: an idempotent one waits 500 ms for its
producer id, and a restarted task's fenced one waits while the broker aborts the
transaction its killed predecessor left open (librdkafka retries every 500 ms). Asked
for first (``Transport.start_producer``), that wait passes while the task opens its
store and reads its change log, instead of after: recovery sits on the path from a
crash to output resuming (issue 10's recovery target). The order is checked, not the
time, so a busy machine cannot fail the test."""

from __future__ import annotations

import pytest

from eos_runtime.plan import plan_job
from eos_runtime.runner import create_job_topics, task_configs
from eos_runtime.runtime import task as task_module
from eos_runtime.transport import open_transport

from pipeline_oracles import encode_lines, produce, word_lines
from test_pipelines import fresh_pipeline


class _Recorder:
    """Wraps a transport's producers and consumers to note, in order, when each producer
    was asked for and when each consumer was assigned which topics."""

    def __init__(self, transport, changelog: str) -> None:
        self.events: list[tuple[str, object]] = []
        self.changelog = changelog
        self.writer: object | None = None   # the producer that wrote the change log
        for name in ("producer", "fenced_producer", "start_producer"):
            if hasattr(transport, name):   # start_producer: not before this test's fix
                setattr(transport, name, self._asked(getattr(transport, name), name))
        consumer = transport.consumer

        def watched_consumer(*a, **k):
            c = consumer(*a, **k)
            assign = c.assign

            def noted_assign(positions):
                self.events.append(("assign", {tp.topic for tp in positions}))
                return assign(positions)

            c.assign = noted_assign
            return c

        transport.consumer = watched_consumer

    def _asked(self, make, name):
        def asked(*a, **k):
            token = object()
            self.events.append(("asked", token))
            made = make(*a, **k)
            if name == "start_producer":
                take = made.take
                made.take = lambda generation: self._watch(take(generation), token)
                return made
            return self._watch(made, token)
        return asked

    def _watch(self, producer, token):
        produce = producer.produce

        def noted_produce(topic, *a, **k):
            if topic == self.changelog and self.writer is None:
                self.writer = token
            return produce(topic, *a, **k)

        producer.produce = noted_produce
        return producer

    def writer_asked_before_the_changelog_read(self) -> bool:
        assert self.writer is not None, "nothing wrote the change log"
        asked = next(i for i, (kind, v) in enumerate(self.events)
                     if kind == "asked" and v is self.writer)
        read = next(i for i, (kind, v) in enumerate(self.events)
                    if kind == "assign" and self.changelog in v)
        return asked < read


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
@pytest.mark.parametrize("task_id", [0, 2], ids=["source", "channel"])
def test_the_change_log_writer_is_asked_for_before_the_change_log_is_read(
        guarantee, task_id, tmp_path, monkeypatch):
    opts = {"data_dir": str(tmp_path / "data")}
    pipeline, source, _ = fresh_pipeline("wordcount", "writer")
    with open_transport(**opts) as t:
        produce(t, source, encode_lines(word_lines(200)))
        plan = plan_job(pipeline, t, guarantee=guarantee, commit_every=50)
        create_job_topics(t, plan)
        configs = task_configs(plan, t, opts, str(tmp_path / "state"), poll_records=50)
    recorders = []

    def recording_transport(**kwargs):
        t = open_transport(**kwargs)
        recorders.append(_Recorder(t, plan.changelog_topic))
        return t

    for c in configs[:2]:   # the sources to their end: the channel task has input
        if c.task_id != task_id:
            task_module.run_task(c)
    monkeypatch.setattr(task_module, "open_transport", recording_transport)
    task_module.run_task(configs[task_id])
    assert recorders[0].writer_asked_before_the_changelog_read()
