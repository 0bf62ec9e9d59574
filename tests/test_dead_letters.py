"""A dead letter keeps the failing record's key and value once each (as text where that is
them exactly, else their bytes in base64), cut to what its topic accepts."""

from __future__ import annotations

import base64
import json

import msgpack
import pytest

from eos_runtime import Pipeline
from eos_runtime.api import FORMATS
from eos_runtime.joblog.committed import read_output
from eos_runtime.runner import run_pipeline
from eos_runtime.runtime import letters
from eos_runtime.runtime.letters import exact_bytes
from eos_runtime.transport import TopicSpec, open_transport


def test_a_value_that_is_not_utf8_is_recoverable_from_its_dead_letter(tmp_path):
    opts = {"data_dir": str(tmp_path / "data")}
    bad = b"\xff\xfe caf\xe9"
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec("raw", 1)])
        with t.producer() as p:
            p.produce("raw", 0, b"fine", key=b"k\xff")
            p.produce("raw", 0, bad, key=b"k2")
            p.flush()
    p = Pipeline("dl-bytes", dead_letters=True)
    p.source("raw", key="utf8", value="utf8").map(str.upper).sink("up", value="utf8")
    run_pipeline(p, state_dir=str(tmp_path / "state"), **opts)
    with open_transport(**opts) as t:
        found = [json.loads(r.value) for r in read_output(t, "dl-bytes.dead-letters",
                                                           job="dl-bytes")]
    by_value = {exact_bytes(d, "value"): d for d in found}
    assert set(by_value) == {b"fine", bad}          # the bad key, and the bad value
    assert by_value[bad]["value"] is None           # not UTF-8: in base64 only
    assert by_value[bad]["value_base64"] == base64.b64encode(bad).decode()
    assert by_value[b"fine"]["value"] == "fine" and by_value[b"fine"]["value_base64"] is None
    assert exact_bytes(by_value[b"fine"], "key") == b"k\xff"
    assert by_value[bad]["key"] == "k2" and by_value[bad]["key_base64"] is None


# --------------------------------------------------------------------------- size (issue 22)

def fail_on_long(value: str) -> str:
    if len(value) > 1000:
        raise ValueError(f"too long: {len(value)} characters")
    return value


FAIL_LINE = fail_on_long.__code__.co_firstlineno + 2   # the line that raises


def _run_one_task(tmp_path, opts: dict, name: str, values: list[bytes]) -> list[dict]:
    """A one-stage job (source -> map(fail_on_long) -> sink, dead letters on) over
    ``values``, its one task run in this process to the end of its input; returns the
    committed dead letters, each with its record's encoded size as "_bytes"."""
    from eos_runtime.joblog.control import ControlLog
    from eos_runtime.plan import plan_job
    from eos_runtime.runner import create_job_topics, task_configs
    from eos_runtime.runtime.task import run_task

    with open_transport(**{k: v for k, v in opts.items() if k != "producer_config"}) as t:
        t.create_topics([TopicSpec(f"{name}.in", 1)])
        with t.producer() as p:
            for v in values:
                p.produce(f"{name}.in", 0, v)
            p.flush()
        pipeline = Pipeline(name, dead_letters=True)
        pipeline.source(f"{name}.in", value="utf8").map(fail_on_long).sink(f"{name}.out")
        plan = plan_job(pipeline, t)
        create_job_topics(t, plan)
        ControlLog(t, name).start_run(plan, bounded=True)
        [config] = task_configs(plan, t, opts, str(tmp_path / "state"))
        stats = run_task(config)
        assert stats.processed == len(values)
        assert [r.value for r in read_output(t, f"{name}.out", job=name)] == [b"small"]
        return [{**json.loads(r.value), "_bytes": len(r.value)}
                for r in read_output(t, f"{name}.dead-letters", job=name)]


def test_a_large_failing_record_becomes_a_letter_that_fits_the_default_bound(tmp_path):
    """Issue 22, case 7: a 600 KB record that fails became a 1.4 MB letter (the value
    readable and in base64), which a Kafka producer of default settings refuses, at
    every retry. The letter holds the value once; a value that cannot fit (900 KB of
    bytes that are not UTF-8, 1.2 MB in base64) is cut, and the letter says so and
    where the whole record is. The local log takes any size: the bound is Kafka's
    default, so such letters fit a Kafka topic too."""
    text = ("0123456789" * 60_000).encode()             # 600 KB of UTF-8
    binary = bytes(range(256)) * 3515 + b"\xff" * 160   # 900 KB, not UTF-8
    letters = _run_one_task(tmp_path, {"data_dir": str(tmp_path / "data")}, "big",
                            [text, b"small", binary])
    whole, cut = sorted(letters, key=lambda d: d["offset"])
    assert all(d["_bytes"] <= 1_000_000 for d in letters)
    assert whole["value"] == text.decode() and whole["value_base64"] is None
    assert whole["value_size"] == len(text) and whole["truncated"] == []
    assert whole["error"] == (f"step map(fail_on_long) at test_dead_letters.py:{FAIL_LINE} "
                              f"raised ValueError: too long: 600000 characters")
    assert cut["value"] is None and cut["truncated"] == ["value_base64"]
    assert cut["value_size"] == len(binary) and cut["offset"] == 2
    assert cut["topic"] == "big.in" and cut["partition"] == 0
    kept = exact_bytes(cut, "value")
    assert kept is not None and 600_000 < len(kept) < len(binary)
    assert binary.startswith(kept)
    assert cut["error"].startswith("UnicodeDecodeError") or "utf" in cut["error"]


def test_a_letter_s_reason_names_the_function_s_line_and_with_eos_traceback_its_frames(
        tmp_path, monkeypatch):
    """Issue 27 item 7: a letter's error named no file or line; with EOS_TRACEBACK=1 (read
    by the driver, as --traceback sets it) it carries the user's frames too."""
    monkeypatch.setenv("EOS_TRACEBACK", "1")
    [letter] = _run_one_task(tmp_path, {"data_dir": str(tmp_path / "data")}, "traced",
                             [b"x" * 1001, b"small"])
    assert letter["error"] == (f"step map(fail_on_long) at test_dead_letters.py:{FAIL_LINE} "
                               f"raised ValueError: too long: 1001 characters")
    assert letter["stream"] == "source 'traced.in'"
    frames = letter["traceback"]
    assert f'test_dead_letters.py", line {FAIL_LINE}, in fail_on_long' in frames, frames
    assert frames.endswith("ValueError: too long: 1001 characters\n")
    assert "eos_runtime" not in frames   # the runtime's own frames are left out


@pytest.mark.kafka
def test_a_letter_fits_the_producer_s_message_max_bytes_on_kafka(tmp_path, kafka_bootstrap):
    """On Kafka the bound is the producer's message.max.bytes (here 400 000): the letter
    of a 600 KB record is cut to fit it, and the run goes on (it failed at every
    checkpoint: MSG_SIZE_TOO_LARGE)."""
    import uuid

    text = ("0123456789" * 60_000).encode()
    opts = {"bootstrap_servers": kafka_bootstrap,
            "producer_config": {"message.max.bytes": 400_000}}
    [letter] = _run_one_task(tmp_path, opts, f"big-{uuid.uuid4().hex[:8]}", [text, b"small"])
    assert letter["_bytes"] <= 400_000 and letter["truncated"] == ["value"]
    assert letter["value_size"] == len(text) and text.decode().startswith(letter["value"])
    assert len(letter["value"]) > 390_000


def test_a_letter_holds_key_and_value_once_in_the_form_that_keeps_them():
    source = letters.build(job="j", task=0, topic="in", partition=0, offset=7, error="E: x",
                           key=b"k\xff", value="café".encode(), channel=False, bound=10_000)
    assert (source["key"], source["key_base64"]) == (None, base64.b64encode(b"k\xff").decode())
    assert (source["value"], source["value_base64"]) == ("café", None)
    assert (source["key_size"], source["value_size"]) == (2, 5)
    assert exact_bytes(source, "key") == b"k\xff"
    assert exact_bytes(source, "value") == "café".encode()
    channel = letters.build(job="j", task=1, topic="j.shuffle-1", partition=0, offset=3,
                            error="E: x", key=msgpack.packb(12), value=msgpack.packb([1, "a"]),
                            channel=True, bound=10_000)
    assert (channel["key"], channel["value"]) == ("12", "[1, 'a']")
    assert channel["key_base64"] is None and channel["value_base64"] is None
    assert channel["channel"] is True and channel["format"] == letters.FORMAT
    # A letter of the first format (both forms, no "format") is read the same way.
    old = {"key": "k\\xff", "key_base64": base64.b64encode(b"k\xff").decode(),
           "value": "x", "value_base64": base64.b64encode(b"x").decode()}
    assert exact_bytes(old, "key") == b"k\xff" and exact_bytes(old, "value") == b"x"


@pytest.mark.parametrize("bound", [2_000, 50_000])
def test_a_letter_is_cut_to_its_bound_largest_fields_first(bound):
    """Text JSON escapes six bytes a character (non-ASCII), a huge key, a huge error:
    whatever makes the letter large is cut, largest first, until it fits; base64 keeps
    whole groups, so what is kept decodes to the first bytes."""
    value = "é" * 100_000            # 200 KB of UTF-8, 600 KB as JSON
    key = b"\x00\xff" * 40_000       # 80 KB, not UTF-8: base64
    error = "RuntimeError: " + "e" * 30_000
    d = letters.build(job="j", task=0, topic="in", partition=0, offset=1, error=error,
                      key=key, value=value.encode(), channel=False, bound=bound)
    assert len(FORMATS["json"][0](d)) <= bound
    assert d["truncated"][:2] == ["value", "key_base64"]
    assert value.startswith(d["value"]) and error.startswith(d["error"])
    assert key.startswith(exact_bytes(d, "key") or b"")
    assert (d["key_size"], d["value_size"]) == (len(key), 200_000)
    small = letters.build(job="j", task=0, topic="in", partition=0, offset=1, error="E: x",
                          key=None, value=b"v", channel=False, bound=bound)
    assert small["truncated"] == [] and small["key_size"] is None


def test_the_bound_is_the_producer_s_limit_or_kafka_s_default():
    assert letters.letter_bound(None) == letters.letter_bound(1_000_000) < 1_000_000
    assert 399_000 < letters.letter_bound(400_000) < 400_000


def _first(value, row):
    return value


@pytest.mark.parametrize("topic", ["j.in", "j.out", "j.users", "j.changelog", "j.control",
                                   "j.heartbeats", "j.metadata", "j.shuffle-1",
                                   "__eos_checkpoint_j_1"])
def test_dead_letters_may_not_go_to_a_topic_the_job_reads_writes_or_keeps(tmp_path, topic):
    """``eos run --dead-letter-topic j.changelog`` was taken: letters would have been
    appended to the change log, which recovery then could not decode. A table topic and
    the runtime's own topics are refused too, not only the sources and sinks."""
    from eos_runtime.errors import ConfigError
    from eos_runtime.plan import plan_job

    pipeline = Pipeline("j")
    users = pipeline.table("j.users", value="json")
    (pipeline.source("j.in", value="utf8").key_by(str).lookup(users, join=_first)
     .sink("j.out"))
    with open_transport(data_dir=str(tmp_path)) as t:
        t.create_topics([TopicSpec("j.in", 1), TopicSpec("j.users", 1)])
        with pytest.raises(ConfigError, match=rf"dead-letter topic '{topic}'"):
            plan_job(pipeline, t, dead_letters=topic)
        assert plan_job(pipeline, t, dead_letters="j.letters").dead_letter_topic == "j.letters"


@pytest.mark.parametrize("topic", ["j.changelog", "j.control", "j.heartbeats", "j.metadata",
                                   "j.shuffle-1", "j.dead-letters", "__eos_checkpoint_j_1"])
def test_a_sink_may_not_write_a_topic_the_runtime_keeps_for_the_job(tmp_path, topic):
    from eos_runtime.errors import ConfigError
    from eos_runtime.plan import plan_job

    pipeline = Pipeline("j", dead_letters=True)
    pipeline.source("j.in", value="utf8").key_by(str).map(str).sink(topic)
    with open_transport(data_dir=str(tmp_path)) as t:
        with pytest.raises(ConfigError, match=rf"sink '{topic}'.*job 'j'"):
            plan_job(pipeline, t)


def _order(order, state):
    state.set("order", order)
    state.timer(order["ts"] + 1_000)
    return None


def _unpaid(at, state):
    order = state.get("order")
    if order["id"] == "bad":
        raise ValueError(f"cannot bill {order['id']}")
    return {"unpaid": order["id"]}


def _something(out) -> bool:
    return out is not None


def _orders_job(name: str, **pipeline) -> Pipeline:
    p = Pipeline(name, parallelism=1, **pipeline)
    (p.source(f"{name}.in", value="json", timestamp=lambda o: o["ts"])
        .key_by(lambda o: o["id"])
        .map(_order, stateful=True, on_timer=_unpaid)
        .filter(_something)
        .sink(f"{name}.out", key="utf8", value="json"))
    return p


def _orders(tmp_path, name):
    opts = {"data_dir": str(tmp_path / "data")}
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec(f"{name}.in", 1)])
        with t.producer() as p:
            for i, oid in enumerate(["ok", "bad", "late-ok", "tick"]):
                p.produce(f"{name}.in", 0,
                          json.dumps({"id": oid, "ts": [0, 0, 100, 5_000][i]}).encode())
            p.flush()
    return opts


def test_a_timer_that_raises_is_a_dead_letter_and_the_run_goes_on(tmp_path):
    """An error while windows or timers fired skipped the dead letters: the task failed,
    its retry fired the same stored timer and failed again, for good."""
    opts = _orders(tmp_path, "fires")
    summary = run_pipeline(_orders_job("fires", dead_letters=True), **opts,
                           state_dir=str(tmp_path / "state"))
    assert summary.dead_letters == 1
    with open_transport(**opts) as t:
        out = sorted(json.loads(r.value)["unpaid"] for r in read_output(t, "fires.out",
                                                                         job="fires"))
        [letter] = [json.loads(r.value) for r in read_output(t, "fires.dead-letters",
                                                              job="fires")]
    assert out == ["late-ok", "ok"]
    assert (letter["partition"], letter["offset"], letter["key"]) == (-1, -1, "'bad'")
    assert "cannot bill bad" in letter["error"] and "at event time 1000" in letter["error"]


def test_a_timer_that_raises_without_dead_letters_stops_the_run_naming_it(tmp_path):
    from eos_runtime.errors import EngineError

    opts = _orders(tmp_path, "stops")
    with pytest.raises(EngineError, match=r"TaskFailed: .*cannot bill bad, firing a window "
                                          r"or timer at event time 1000 \(key 'bad'\).*not "
                                          r"retried"):
        run_pipeline(_orders_job("stops"), **opts, state_dir=str(tmp_path / "state"))


@pytest.mark.kafka
def test_a_letter_fits_the_dead_letter_topics_own_max_message_bytes(tmp_path, kafka_bootstrap):
    """A letter was cut to the producer's limit only: a dead-letter topic made with a
    smaller max.message.bytes (20 000) refused the letter of a 600 KB record on every
    commit, so the one record meant to be set aside stopped the job."""
    import uuid

    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"small-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    made = admin.create_topics([NewTopic(f"{name}.dead-letters", 1, 1,
                                         config={"max.message.bytes": "20000"})])
    made[f"{name}.dead-letters"].result(30)
    text = ("0123456789" * 60_000).encode()
    [letter] = _run_one_task(tmp_path, {"bootstrap_servers": kafka_bootstrap}, name,
                             [text, b"small"])
    assert letter["_bytes"] <= 20_000 and letter["truncated"] == ["value"]


@pytest.mark.parametrize("which", ["dead letters", "unkeyed sink"])
def test_a_compacted_topic_for_records_without_a_key_is_refused_at_plan(tmp_path, which):
    """Kafka refuses a record without a key on a compacted topic: a compacted dead-letter
    topic, or a sink without a key format on one, failed every commit."""
    from eos_runtime.errors import ConfigError
    from eos_runtime.plan import plan_job

    pipeline = Pipeline("c")
    pipeline.source("c.in", value="utf8").map(str.upper).sink("c.out")
    compacted = "c.letters" if which == "dead letters" else "c.out"
    with open_transport(data_dir=str(tmp_path)) as t:
        t.create_topics([TopicSpec("c.in", 1), TopicSpec(compacted, 1, compacted=True)])
        with pytest.raises(ConfigError, match=rf"'{compacted}' is compacted"):
            plan_job(pipeline, t, dead_letters="c.letters")


@pytest.mark.parametrize("topic", ["j.shuffle-1", "j.changelog", "j.dead-letters",
                                   "__eos_checkpoint_j_1"])
@pytest.mark.parametrize("what", ["source", "table"])
def test_a_job_may_not_read_a_topic_the_runtime_keeps_for_it(tmp_path, topic, what):
    """A source or table could be the job's own channel (a loop through its own output),
    change log or dead letters; planned, it read records of the runtime's as its input.
    Another job may read them (its name differs)."""
    from eos_runtime.errors import ConfigError
    from eos_runtime.plan import plan_job

    def pipeline(name: str) -> Pipeline:
        p = Pipeline(name)
        if what == "source":
            p.source(topic, value="bytes").key_by(bytes).sink("j.out", value="bytes")
        else:
            users = p.table(topic, value="bytes")
            (p.source("j.in", value="utf8").key_by(str).lookup(users, join=_first)
             .sink("j.out"))
        return p

    with open_transport(data_dir=str(tmp_path)) as t:
        t.create_topics([TopicSpec(topic, 1), TopicSpec("j.in", 1)])
        with pytest.raises(ConfigError, match=rf"{what} '{topic}' is the .* of job 'j' itself"):
            plan_job(pipeline("j"), t)
        assert plan_job(pipeline("other"), t).name == "other"
