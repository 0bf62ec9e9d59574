"""Experiments: workloads and their oracles, the verifier, fault schedules, `eos experiment`."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from eos_runtime.errors import ConfigError
from eos_runtime.experiments.verify import compare
from eos_runtime.experiments.workloads import (
    BUILTIN,
    Expected,
    load_workload,
    pageviews_expected,
    wordcount_expected,
)
from eos_runtime.plan import describe_plan, plan_job
from eos_runtime.runner import load_pipeline
from eos_runtime.transport import Record, TopicSpec, open_transport

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def rec(key: str, value: str, offset: int, partition: int = 0) -> Record:
    return Record("out", partition, offset, key.encode(), value.encode(), 0)


def check(expected: Expected, pairs, guarantee="exactly-once"):
    records = [rec(k, v, i) for i, (k, v) in enumerate(pairs)]
    return compare(expected, records, guarantee, key_decode=bytes.decode,
                   value_decode=bytes.decode)


# --------------------------------------------------------------------------- workloads

@pytest.mark.parametrize("name", ["pageviews", "wordcount"])   # those with an example file
def test_builtin_workloads_plan_like_the_examples(name, tmp_path):
    """The package ships the examples' pipelines: the same stages, steps and topics."""
    workload = BUILTIN[name]
    with open_transport(data_dir=str(tmp_path)) as t:
        ours, theirs = workload.make_pipeline(), load_pipeline(EXAMPLES / f"{name}.py")
        t.create_topics([TopicSpec(ours.source_topic, 2)])
        assert ours.name == theirs.name
        assert describe_plan(plan_job(ours, t)) == describe_plan(plan_job(theirs, t))


def test_generators_are_seeded():
    wc = BUILTIN["wordcount"]
    assert wc.generate(3, 50) == wc.generate(3, 50) != wc.generate(4, 50)
    assert wc.generate(3, 20) == wc.generate(3, 50)[:20]


def test_wordcount_oracle_counts_from_the_input_alone():
    expected = wordcount_expected(["a b a", "b"])
    assert expected.results == {"a": ["1", "2"], "b": ["1", "2"]}


# --------------------------------------------------------------------------- the verifier

def test_exact_output_passes():
    v = check(wordcount_expected(["a b a"]), [("a", "1"), ("b", "1"), ("a", "2")])
    assert v.passed and v.counts() == {"lost": 0, "duplicated": 0, "unexpected": 0,
                                       "out_of_order": 0}


def test_each_kind_of_wrong_result_is_counted():
    expected = wordcount_expected(["a a a b"])
    v = check(expected, [("a", "1"), ("a", "3"), ("a", "2"), ("a", "3"), ("b", "0"),
                         ("z", "1")])
    assert not v.passed
    assert (v.lost, v.duplicated, v.out_of_order) == (1, 1, 1)   # b's "1"; a's "3"; a's "2"
    assert v.unexpected == 2 and v.unexpected_keys == 1         # b's "0", z
    assert "1 lost" in v.reasons() and "1 duplicated" in v.reasons()


def test_an_input_counted_twice_is_a_duplicate_under_exactly_once_too():
    """A count past a word's last (wordcount's oracle: a replayed input counted again) is
    a duplicate, not a stray value, and fails an exactly-once run."""
    v = check(wordcount_expected(["a a"]), [("a", "1"), ("a", "2"), ("a", "3")])
    assert not v.passed and (v.duplicated, v.unexpected) == (1, 0)
    assert "1 duplicated" in v.reasons()


def test_at_least_once_passes_with_duplicates_and_fails_on_a_loss():
    expected = wordcount_expected(["a a"])
    # "2" again, and "3": a replayed "a" counted again
    v = check(expected, [("a", "1"), ("a", "2"), ("a", "2"), ("a", "3")], "at-least-once")
    assert v.passed and v.duplicated == 2 and v.unexpected == 0
    assert not check(expected, [("a", "2")], "at-least-once").passed
    assert not check(expected, [("a", "1"), ("a", "2"), ("b", "1")], "at-least-once").passed


def test_at_least_once_fails_on_a_value_no_replay_can_write():
    """A replay only counts again (a count past the true one); a wrong value is wrong under
    at-least-once too, or a complete but wrong answer would pass."""
    expected = wordcount_expected(["a a"])
    for wrong in ("0", "-1", "two", ""):
        v = check(expected, [("a", "1"), ("a", "2"), ("a", wrong)], "at-least-once")
        assert not v.passed and v.unexpected == 1 and v.duplicated == 0, wrong
    views = pageviews_expected([{"user": "u1", "page": "/p"}, {"user": "u1", "page": "/p"}])
    replayed = check(views, [("/p", "1:1"), ("/p", "2:1"), ("/p", "3:1")], "at-least-once")
    assert replayed.passed and replayed.duplicated == 1
    wrong = check(views, [("/p", "1:1"), ("/p", "2:1"), ("/p", "0:1")], "at-least-once")
    assert not wrong.passed and wrong.unexpected == 1


def test_pageviews_checks_every_visitor_count():
    views = [{"user": "u1", "page": "/p"}, {"user": "u2", "page": "/p"},
             {"user": "u1", "page": "/p"}]
    expected = pageviews_expected(views)
    assert check(expected, [("/p", "1:1"), ("/p", "2:2"), ("/p", "3:2")]).passed
    assert check(expected, [("/p", "1:1"), ("/p", "2:1"), ("/p", "3:2")]).passed
    bad = check(expected, [("/p", "1:1"), ("/p", "2:1"), ("/p", "3:1")])
    # 3 views by 1 visitor: u1 made one repeat view, not two; and 2 visitors, not 1, at the end
    assert not bad.passed and bad.unexpected == 2


def cross_checked(tmp_path, monkeypatch, view):
    """``verify_output`` over a real local-log topic holding a's "1", "2", "2" (the second
    "2": output of a crashed attempt) and b's "1", with the committed view given by
    ``view(raw records)`` in place of the commit records' ranges."""
    import eos_runtime.joblog.committed as committed_mod
    from eos_runtime.experiments.verify import verify_output

    real = committed_mod.read_output

    def read_output(transport, topic, *, job=None, committed=True):
        raw = real(transport, topic, committed=False)
        return raw if not committed else view(raw)

    monkeypatch.setattr(committed_mod, "read_output", read_output)
    with open_transport(data_dir=str(tmp_path)) as t:
        t.create_topics([TopicSpec("out", 1)])
        with t.producer() as p:
            for key, value in [("a", "1"), ("a", "2"), ("a", "2"), ("b", "1")]:
                p.produce("out", 0, value.encode(), key=key.encode())
            p.flush()
        return verify_output(t, "out", "job", wordcount_expected(["a b a"]), "exactly-once",
                             key_decode=bytes.decode, value_decode=bytes.decode)


def test_the_verifier_cross_checks_the_committed_view_against_the_raw_records(tmp_path,
                                                                              monkeypatch):
    """The committed view leaves out the crashed attempt's record: it is counted as
    hidden, with the duplicate the raw records would have shown; the run passes."""
    v = cross_checked(tmp_path, monkeypatch, lambda raw: [r for r in raw if r.offset != 2])
    assert v.passed and v.counts() == {"lost": 0, "duplicated": 0, "unexpected": 0,
                                       "out_of_order": 0}
    assert v.raw == {"records": 4, "hidden": 1, "phantom": 0, "raw_lost": 0,
                     "raw_duplicated": 1, "raw_unexpected": 0, "raw_out_of_order": 0}
    # The committed view and the raw records agree: nothing hidden, and the duplicate
    # is the reader's, so the run fails on it.
    same = cross_checked(tmp_path / "same", monkeypatch, lambda raw: raw)
    assert same.raw is not None and (same.raw["hidden"], same.raw["phantom"]) == (0, 0)
    assert not same.passed and same.duplicated == 1 and same.raw["raw_duplicated"] == 1


def test_a_committed_record_the_topic_does_not_hold_fails_the_run(tmp_path, monkeypatch):
    """The committed view holds a record that is not in the topic as written: at an
    offset the topic never had, or with another value than the one at its offset. The
    committed view is read from the same records (the local log: a filter of them by the
    commit records' ranges; Kafka: the same offsets, read_committed), so only a wrong
    reader can make one: ``phantom`` is the check on the reader itself, and it fails the
    run even when the counts alone would pass."""
    moved = cross_checked(tmp_path, monkeypatch, lambda raw: [
        raw[0], raw[1]._replace(offset=9), raw[3]])     # a's "2" read from offset 9
    assert moved.counts() == {"lost": 0, "duplicated": 0, "unexpected": 0, "out_of_order": 0}
    assert not moved.passed and moved.raw is not None and moved.raw["phantom"] == 1
    assert moved.raw["hidden"] == 4 - (3 - 1)   # raw records the reader met unchanged: 2
    assert "1 committed records not in the topic" in moved.reasons()
    changed = cross_checked(tmp_path / "changed", monkeypatch, lambda raw: [
        raw[0], raw[1]._replace(value=b"2 "), raw[3]])   # a's "2" with another value
    assert not changed.passed and changed.raw is not None and changed.raw["phantom"] == 1


# --------------------------------------------------------------------------- user workloads

USER_FILE = '''"""Even numbers, counted per parity."""
import random
from eos_runtime import Pipeline

pipeline = Pipeline("parity", parallelism=1)

def count(n, state):
    c = state.get("c", 0) + 1
    state.set("c", c)
    return str(c)

(pipeline.source("numbers", value="json")
    .key_by(lambda n: "even" if n % 2 == 0 else "odd")
    .map(count, stateful=True)
    .sink("parity-counts", key="utf8", value="utf8"))

def generate(seed, n):
    rng = random.Random(seed)
    return [rng.randint(0, 100) for _ in range(n)]

def oracle(records):
    out = {}
    for n in records:
        key = "even" if n % 2 == 0 else "odd"
        out.setdefault(key, []).append(str(len(out.get(key, [])) + 1))
    return out
'''


def test_a_user_pipeline_file_is_a_workload(tmp_path):
    path = tmp_path / "parity.py"
    path.write_text(USER_FILE)
    w = load_workload(str(path))
    assert w.name == "parity" and w.description == "Even numbers, counted per parity."
    records = w.generate(1, 10)
    assert records == w.generate(1, 10)
    expected = w.oracle(records)
    assert sum(len(v) for v in expected.results.values()) == 10


def test_eos_experiment_runs_a_user_pipeline_file(tmp_path, monkeypatch):
    """`eos experiment parity.py` end to end on Spark, in this process (the suite's other
    Spark tests have its JVM up by then; about 30 s alone): the file's generator makes
    the input, its plan gives the random schedule's targets, its oracle judges the
    output, and the report is named after the file."""
    from click.testing import CliRunner

    from eos_runtime.cli import main

    # the generator runs in this process, in the runs' time: it sees what their driver sees
    seen = tmp_path / "threshold.txt"
    (tmp_path / "parity.py").write_text(USER_FILE + f'''
import os
import time
_generate = generate
def generate(seed, n):
    with open({str(seen)!r}, "w") as f:
        f.write(os.environ.get("EOS_CHANGELOG_SNAPSHOT_RECORDS", "unset"))
    return _generate(seed, n)
''')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EOS_CHANGELOG_SNAPSHOT_RECORDS", raising=False)
    result = CliRunner().invoke(main, ["experiment", "parity.py", "--seed", "1", "--lines",
                                       "300", "--faults", "1", "--kinds", "crash"])
    assert result.exit_code == 0, (result.output, result.exception)
    # its low snapshot threshold was its runs' only: a later run in this process (a test's,
    # an API user's) cut its change log every few records, and a listener test that
    # counted commit records failed after this one
    assert "EOS_CHANGELOG_SNAPSHOT_RECORDS" not in os.environ
    assert seen.read_text() == "4"     # while they ran, snapshots every few records
    assert result.stdout.splitlines()[1].split()[:3] == ["1", "pass", "1/1"]
    [report] = (tmp_path / ".eos" / "experiments").glob("parity-*")   # named after the file
    summary = json.loads((report / "summary.json").read_text())
    assert summary["settings"]["workload"] == "parity"
    assert summary["settings"]["origin"] == "parity.py"      # as given
    run = json.loads((report / "seed-1" / "run.json").read_text())
    assert run["job"].startswith("parity-s1-") and run["passed"]
    assert run["verdict"]["expected"] == run["verdict"]["committed"] == 300
    assert run["verdict"]["keys"] == 2                       # even and odd, from the oracle
    (fault,) = run["faults"]   # the file's plan: one source task (0), one sink task (1)
    assert fault["fired"] and fault["kind"] == "crash" and fault["task"] in (0, 1)
    # by its absolute path, as --schedule: the replay works from any directory
    assert run["replay"] == (f"eos experiment {tmp_path / 'parity.py'} --guarantee "
                             "exactly-once --lines 300 --faults 1 --kinds crash --seed 1")


def test_unknown_workloads_and_incomplete_files_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="unknown workload 'wordcont': use one of attribution, "
                                          "chained, clickstream, deadletters, pageviews, "
                                          "windows, wordcount"):
        load_workload("wordcont")
    path = tmp_path / "half.py"
    path.write_text(USER_FILE.split("def generate")[0])
    with pytest.raises(ConfigError, match=r"does not define generate\(seed, n\) and oracle"):
        load_workload(str(path))


# --------------------------------------------------------------------------- fault actions

PROBE = '''
import os, sys, time
from eos_runtime import faults
faults.record_to(sys.argv[1], task=5, attempt=2)
faults.arm("task.mid_version", hit=2, action=sys.argv[2],
           path=sys.argv[3] if sys.argv[2] == "lose-state" else None)
for i in range(3):
    print(i, os.getpid(), flush=True)
    faults.crash_point("task.mid_version")
faults.zombie_ended(None)
'''


def probe(tmp_path, action, *extra):
    import subprocess
    import sys

    log = tmp_path / "faults.log"
    proc = subprocess.Popen([sys.executable, "-c", PROBE, str(log), action, *extra],
                            stdout=subprocess.PIPE, text=True)
    return proc, log


def test_lose_state_deletes_the_store_and_kills(tmp_path):
    import json
    import signal

    store = tmp_path / "task-5"
    (store / "sub").mkdir(parents=True)
    proc, log = probe(tmp_path, "lose-state", str(store))
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL and len(out.split("\n")) == 3   # died at hit 2
    assert not store.exists()
    note = json.loads(log.read_text())
    assert (note["point"], note["action"], note["task"], note["attempt"]) == (
        "task.mid_version", "lose-state", 5, 2)


def test_a_zombie_splits_into_a_dead_parent_and_a_stopped_child_that_goes_on(tmp_path):
    import json
    import os
    import signal
    import time

    from eos_runtime.experiments.injector import alive
    from eos_runtime.processes import state

    # Each wait has a deadline of its own, generous: a busy machine may take seconds for
    # any of them, and none costs more than it takes.
    proc, log = probe(tmp_path, "zombie")
    assert proc.wait(timeout=60) == -signal.SIGKILL     # the parent, as the engine sees it
    deadline = time.monotonic() + 60
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    split = json.loads(log.read_text().splitlines()[0])
    zombie = split["pid"]
    assert split["action"] == "zombie" and zombie != proc.pid and alive(zombie)

    deadline = time.monotonic() + 60
    while state(zombie) != "T" and alive(zombie) and time.monotonic() < deadline:
        time.sleep(0.02)                                      # it notes, then stops
    assert state(zombie) == "T", f"the zombie never stopped itself (state {state(zombie)})"
    os.kill(zombie, signal.SIGCONT)
    deadline = time.monotonic() + 60
    while alive(zombie) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(zombie), (f"the zombie had not ended 60 s after its SIGCONT "
                               f"(state {state(zombie)})")
    notes = [json.loads(line) for line in log.read_text().splitlines()]
    assert [n["action"] for n in notes] == ["zombie", "zombie-end"]   # it went on to its end
    assert notes[1]["error"] is None and proc.stdout.read().split("\n")[2].startswith("2 ")


# --------------------------------------------------------------------------- schedules

def roles_of(name="wordcount"):
    from eos_runtime.experiments.setup import task_roles

    return task_roles(BUILTIN[name], "exactly-once")


def test_a_schedule_file_names_the_fault_and_field_it_cannot_take(tmp_path):
    cases = [
        ('[[fault]]\nkind = "crash"\ntask = 2\n', "fault 1 (crash): field 'point' is missing"),
        ('[[fault]]\nkind = "kill"\ntask = 1\nafter = 0.1\n[[fault]]\nkind = "crash"\ntask = 2\n'
         'point = "task.mid_version"\nhit = 0\n', "fault 2 (crash): field 'hit' must be >= 1"),
        ('[[fault]]\nkind = "crash"\ntask = "two"\npoint = "task.mid_version"\n',
         "field 'task' must be int, not 'two'"),
        ('[[fault]]\nkind = "crash"\ntask = 2\npoint = "task.mid_versoin"\n',
         "unknown crash point 'task.mid_versoin'"),
        ('[[fault]]\nkind = "kill"\ntask = 2\nhit = 3\n', "unknown field 'hit'; a kill fault has"),
        ('[[fault]]\nkind = "broker"\nsignal = "hup"\n',
         "fault 1 (broker): field 'signal' must be one of kill, term, not 'hup'"),
        ('[[fault]]\nkind = "broker"\ndown = -1\n', "field 'down' must be >= 0 seconds"),
        ('[[fault]]\nkind = "lag"\ntask = 2\ndelay = 0\n',
         "fault 1 (lag): field 'delay' must be > 0 and <= 1 second per record"),
        ('[[fault]]\nkind = "lag"\ntask = 2\n', "fault 1 (lag): field 'delay' is missing"),
        ('[[fault]]\nkind = "crash"\ntask = 2\npoint = \n', "not valid TOML"),
        ('{"fault": [{"kind": "crash",\n "task": 2,, }]}', "line 2: not valid JSON"),
    ]
    refused_files(tmp_path, cases)


def refused_files(tmp_path, cases):
    """Each schedule file text is refused with its message, naming the file."""
    from eos_runtime.experiments.schedule import load_schedule

    for i, (text, message) in enumerate(cases):
        path = tmp_path / f"s{i}.{'json' if text.startswith('{') else 'toml'}"
        path.write_text(text)
        with pytest.raises(ConfigError) as e:
            load_schedule(path)
        assert message in str(e.value) and str(path) in str(e.value), (message, str(e.value))


def test_a_schedule_is_checked_against_the_job_and_the_transport():
    from eos_runtime.experiments.schedule import check_schedule, kinds_for, parse_schedule

    roles = roles_of()
    cases = [
        ({"kind": "crash", "task": 9, "point": "task.mid_version"}, "local",
         "the job has tasks 0..3, not 9"),
        ({"kind": "crash", "task": 0, "point": "task.aligning"}, "local",
         "task 0 reads the source: it never aligns"),
        ({"kind": "crash", "task": 2, "point": "task.checkpoint.mid_marker_fanout"}, "local",
         "task 2 writes the sink: it sends no markers"),
        ({"kind": "torn", "task": 0}, "kafka", "fault kind 'torn' needs the local log"),
        ({"kind": "zombie", "task": 0, "point": "task.checkpoint.after_commit"}, "kafka",
         "would write the RocksDB store its successor has open"),
        ({"kind": "broker"}, "local", "fault kind 'broker' needs Kafka"),
        ({"kind": "lag", "task": 9, "delay": 0.01}, "local", "the job has tasks 0..3, not 9"),
        ({"kind": "zombie", "task": 0, "point": "task.checkpoint.after_commit"}, "local",
         "would write the RocksDB store its successor has open"),
    ]
    for fault, transport, message in cases:
        with pytest.raises(ConfigError, match=message):
            check_schedule(parse_schedule({"fault": [fault]}), roles, transport, "exactly-once")
    # a zombie on Kafka: its clients are made anew after the split (transport/kafka/zombie.py)
    check_schedule(parse_schedule({"fault": [{"kind": "zombie", "task": 0,
                                              "point": "task.mid_version"}]}), roles, "kafka",
                   "exactly-once")
    assert "zombie" in kinds_for("kafka", "exactly-once")
    with pytest.raises(ConfigError, match="'zombie' needs exactly-once"):
        check_schedule(parse_schedule({"fault": [{"kind": "zombie", "task": 0,
                                                  "point": "task.mid_version"}]}), roles,
                       "local", "at-least-once")
    with pytest.raises(ConfigError, match="no early-arrival buffer"):
        check_schedule(parse_schedule({"fault": [{"kind": "buffer", "max_bytes": 1}]}), roles,
                       "local", "at-least-once")
    twice = parse_schedule({"fault": [{"kind": "kill", "task": 1}, {"kind": "kill", "task": 1}]})
    with pytest.raises(ConfigError, match="faults 1 and 2 both target task 1 attempt 0"):
        check_schedule(twice, roles, "local", "exactly-once")


@pytest.mark.parametrize("transport", ["local", "kafka"])
def test_random_schedules_follow_their_seed_and_chain_a_task_s_attempts(transport):
    from eos_runtime.experiments.random_schedule import random_schedule
    from eos_runtime.experiments.schedule import check_schedule, kinds_for

    roles = roles_of("pageviews")
    kinds = list(kinds_for(transport, "exactly-once"))
    if transport == "kafka":
        assert "broker" not in kinds   # it stops the broker for everyone: only when named
        kinds.append("broker")
    assert "lag" in kinds
    one = random_schedule(5, 12, kinds, roles, transport)
    assert one.as_dict() == random_schedule(5, 12, kinds, roles, transport).as_dict()
    assert one.as_dict() != random_schedule(6, 12, kinds, roles, transport).as_dict()
    check_schedule(one, roles, transport, "exactly-once")   # only what can happen
    for task in {f.task for f in one.task_faults()}:
        attempts = [f.attempt for f in one.task_faults() if f.task == task]
        assert attempts == list(range(len(attempts)))
    assert sum(f.kind == "buffer" for f in one.faults) <= 1
    assert sum(f.kind == "broker" for f in one.faults) <= 1
    many = [random_schedule(s, 6, kinds, roles, transport) for s in range(30)]
    drawn = {f.kind for sch in many for f in sch.faults}
    assert {"lag", *(["broker"] if transport == "kafka" else [])} <= drawn
    for f in (f for sch in many for f in sch.faults if f.kind == "lag"):
        assert f.task is not None and 0 < (f.delay or 0) <= 1
        assert f.describe().startswith(f"lag task {f.task} attempt {f.attempt} ")
    for f in (f for sch in many for f in sch.faults if f.kind == "broker"):
        assert f.signal in ("kill", "term") and f.after is not None and f.down is not None


def test_a_soak_schedule_spreads_its_faults_over_the_duration():
    """Soak faults get moments in order, one per slice of the run's middle; each task's
    attempts still chain, so the moments of one task's faults rise with its attempts."""
    import random

    from eos_runtime.experiments.random_schedule import random_schedule, soak_times
    from eos_runtime.experiments.schedule import check_schedule, kinds_for

    times = soak_times(random.Random(1), 8, 100.0)
    assert times == sorted(times) and 10.0 <= times[0] and times[-1] <= 80.0
    assert [int((t - 10.0) // 8.75) for t in times] == list(range(8))   # one per slice
    roles = roles_of("pageviews")
    kinds = [*kinds_for("kafka", "exactly-once"), "broker"]
    soak = random_schedule(3, 20, kinds, roles, "kafka", duration=600.0)
    assert soak.as_dict() == random_schedule(3, 20, kinds, roles, "kafka",
                                             duration=600.0).as_dict()
    check_schedule(soak, roles, "kafka", "exactly-once")
    moments = [f.after if f.kind == "broker" else f.at for f in soak.faults
               if f.kind not in ("buffer", "lag")]
    assert len(moments) >= 15 and moments == sorted(moments)
    assert all(60.0 <= (m or 0) <= 480.0 for m in moments)
    assert all(f.point != "task.recovery" for f in soak.faults)   # reached before its moment
    assert all(f.after == 0.0 for f in soak.faults if f.kind == "kill")
    for task in {f.task for f in soak.task_faults()}:
        mine = [f for f in soak.task_faults() if f.task == task]
        assert [f.attempt for f in mine] == list(range(len(mine)))
    many = [random_schedule(s, 20, kinds, roles, "kafka", duration=600.0) for s in range(10)]
    assert max(sum(f.kind == "broker" for f in sch.faults) for sch in many) > 1
    # without a duration, the same seed draws what it always drew
    assert random_schedule(3, 20, kinds, roles, "kafka").as_dict() == random_schedule(
        3, 20, kinds, roles, "kafka", duration=None).as_dict()
    assert all(f.at is None for f in random_schedule(3, 20, kinds, roles, "kafka").faults)


def test_a_moment_is_a_field_of_task_faults():
    from eos_runtime.experiments.schedule import parse_schedule

    s = parse_schedule([{"kind": "crash", "task": 1, "point": "task.mid_version", "at": 12.5},
                        {"kind": "kill", "task": 0, "at": 3}])
    assert [f.at for f in s.faults] == [12.5, 3]
    assert s.faults[0].describe() == "crash task 1 attempt 0 at task.mid_version@1, from 12.5 s"
    assert parse_schedule(s.as_dict()).as_dict() == s.as_dict()
    with pytest.raises(ConfigError, match="field 'at' must be >= 0 seconds, not -1"):
        parse_schedule([{"kind": "kill", "task": 0, "at": -1}])
    with pytest.raises(ConfigError, match="unknown field 'at'; a lag fault has"):
        parse_schedule([{"kind": "lag", "task": 0, "delay": 0.001, "at": 1}])


def test_a_lag_shares_its_attempt_with_a_fault_that_ends_it():
    from eos_runtime.experiments.schedule import check_schedule, parse_schedule

    both = parse_schedule([{"kind": "lag", "task": 1, "delay": 0.001},
                           {"kind": "crash", "task": 1, "point": "task.mid_version"}])
    check_schedule(both, roles_of(), "local", "exactly-once")
    assert [f.kind for f in both.task_faults()] == ["crash"]


# --------------------------------------------------------------------------- bad input (the CLI)

BAD_INPUT = [
    (["wordcont"], "error: unknown workload 'wordcont': use one of attribution, chained, "
                   "clickstream, deadletters, pageviews, windows, wordcount"),
    (["wordcount", "--schedule", "{dir}/s.toml"],
     "error: {dir}/s.toml: fault 1 (crash): field 'task': the job has tasks 0..3, not 7"),
    (["wordcount", "--schedule", "{dir}/h.toml"],
     "error: {dir}/h.toml: fault 1 (crash): field 'hit' must be int, not 'two'"),
    (["pageviews", "--kinds", "crash,torn", "--bootstrap-servers", "127.0.0.1:1"],
     "error: --kinds: fault kind 'torn' needs the local log"),
    (["pageviews", "--kinds", "crash,broker"],
     "error: --kinds: fault kind 'broker' needs Kafka: it stops and restarts the broker"),
    (["pageviews", "--guarantee", "at-least-once", "--kinds", "buffer"],
     "error: --kinds: fault kind 'buffer': an at-least-once job has no early-arrival buffer"),
    (["pageviews", "--report", "{dir}/theirs"],
     "error: report directory '{dir}/theirs' is not empty and was not made by eos experiment"),
    (["wordcount", "--duration", "ten minutes"],
     "error: --duration: 'ten minutes' is not a duration: give seconds or a number with s, m"),
    (["wordcount", "--duration", "0s"], "error: --duration: must be more than 0 seconds"),
    (["wordcount", "--duration", "30s", "--lines", "100"],
     "error: --lines sizes a bounded run; a soak (--duration) is fed at --rate"),
    (["wordcount", "--rate", "50"], "error: --rate is a soak's: give --duration too"),
    (["chained"], "error: workload 'chained' needs Kafka (--bootstrap-servers): its second "
                  "job reads the first's exactly-once sink, and the local log has no"),
    (["windows", "--duration", "30s"],
     "error: workload 'windows' refuses a soak (--duration): an unbounded run's last "
     "watermark depends on where the stop finds the sources"),
    (["attribution", "--duration", "30s"],
     "error: workload 'attribution' refuses a soak (--duration): an unbounded run's last "
     "watermark depends on where the stop finds the sources"),
]


@pytest.mark.parametrize("args,message", BAD_INPUT)
def test_bad_input_is_refused_before_anything_starts(args, message, tmp_path):
    from test_cli import eos, error_line

    (tmp_path / "s.toml").write_text('[[fault]]\nkind = "crash"\ntask = 7\n'
                                     'point = "task.mid_version"\n')
    (tmp_path / "h.toml").write_text('[[fault]]\nkind = "crash"\ntask = 2\n'
                                     'point = "task.mid_version"\nhit = "two"\n')
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "notes.txt").write_text("mine\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    p = eos("experiment", *[a.format(dir=tmp_path) for a in args], cwd=tmp_path)
    assert error_line(p).startswith(message.format(dir=tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == before   # no report, no data, no run


# --------------------------------------------------------------------------- experiments that run

SCHEDULE = """
# each of these fires on every run (checkpoints come by record count, never by timer)
[[fault]]
kind = "crash"
task = 0
point = "task.mid_version"
hit = 2

[[fault]]
kind = "crash"
task = 2
point = "task.checkpoint.before_commit"
hit = 2

[[fault]]
kind = "lose-state"
task = 2
attempt = 1
point = "task.checkpoint.after_store"
hit = 1

[[fault]]
kind = "buffer"
max_bytes = 1
"""


def test_a_short_experiment_passes_and_reports(tmp_path):
    """Two seeds under a schedule of four faults, on the local log, through the CLI."""
    from test_cli import ok_here

    (tmp_path / "faults.toml").write_text(SCHEDULE)
    p = ok_here("experiment", "wordcount", "--schedule", "faults.toml", "--seed", "21",
                "--runs", "2", "--lines", "1200", "--report", "report", cwd=tmp_path, timeout=400)
    table = [line.split() for line in p.stdout.splitlines()]
    assert table[0][:3] == ["seed", "verdict", "faults"]
    assert [row[:3] for row in table[1:3]] == [["21", "pass", "4/4"], ["22", "pass", "4/4"]]
    report = tmp_path / "report"
    for seed in (21, 22):
        run = json.loads((report / f"seed-{seed}" / "run.json").read_text())
        assert run["passed"] and run["verdict"]["lost"] == run["verdict"]["duplicated"] == 0
        assert all(f["fired"] for f in run["faults"])
        assert all(f["time"] is not None for f in run["faults"])
        crashed = {t["task_id"]: t for t in run["tasks"]}
        assert crashed[0]["attempt"] == 1 and crashed[2]["attempt"] == 2
        assert crashed[2]["replayed_changes"] > 0          # the lost store came from the log
        assert sum(t["overflowed"] for t in run["tasks"]) > 0   # the 1-byte buffer overflowed
        assert (report / f"seed-{seed}" / "timeline.png").stat().st_size < 80_000
        # recovery per fault: from the fault to its task's next attempt, and to sink output
        # growing again after that (so never sooner)
        for f in run["faults"]:
            if f["kind"] == "buffer":
                assert "restarted_after" not in f   # a setting, not a failure
                continue
            assert 0 <= f["restarted_after"] <= f["output_resumed_after"], f
        # the counters of every task's last attempt
        for t in run["tasks"]:
            for counter in ("checkpoints", "rewinds", "fenced", "stale", "buffered",
                            "max_buffer_bytes", "overflowed", "rereads", "generation"):
                assert isinstance(t[counter], int) and t[counter] >= 0, (counter, t)
            assert t["checkpoints"] > 0
            assert t["max_buffer_bytes"] <= 1   # the high-water mark kept the buffer's bound
        # every generation on the timeline: each attempt's, from its first to the last one
        # its counters name (a rewind takes a new one in the same attempt)
        gens: dict[tuple[int, int], list[int]] = {}
        for g in run["generations"]:
            gens.setdefault((g["task"], g["attempt"]), []).append(g["generation"])
        assert set(gens) == {(a["task"], a["attempt"]) for a in run["attempts"]}
        assert gens[2, 0] == [1, 2]   # task 2 rewound on task 0's restore, then crashed
        for t in run["tasks"]:
            mine = gens[t["task_id"], t["attempt"]]
            assert mine[-1] == t["generation"] and mine == sorted(mine)
            assert len(mine) == 1 + t["rewinds"], (t, mine)
        sinks = [t for t in run["tasks"] if t["task_id"] in (2, 3)]
        # task 0's open version reached the sinks before its crash: the restore of its
        # next generation rewinds a sink that took it, and its records are fenced after
        assert sum(t["rewinds"] for t in sinks) > 0 and sum(t["fenced"] for t in sinks) > 0
    summary = (report / "summary.md").read_text()
    assert "| 21 | pass | 4/4 |" in summary and "seed-22/timeline.png" in summary
    # the histogram of recovery times across runs: 3 task faults a run, each restarted
    assert (report / "recovery.png").stat().st_size > 0
    assert "![recovery times](recovery.png)" in summary
    assert summary.count(", restarted after ") == 6
    results = json.loads((report / "summary.json").read_text())["results"]
    assert [(r["seed"], r["faults_fired"], r["faults"]) for r in results] == [(21, 4, 4),
                                                                              (22, 4, 4)]
    assert all(r["raw"]["phantom"] == 0 and r["raw"]["hidden"] >= 0 for r in results)
    assert not any((report / "data").iterdir())   # passing runs leave no data behind


@pytest.mark.kafka
def test_a_short_experiment_on_kafka(kafka_bootstrap, tmp_path):
    """A random schedule on Kafka whose faults all fire, whatever the machine's speed:
    crash points at hits every attempt reaches (no kill, whose moment may come after its
    attempt ended; no task.aligning, which a task may never need)."""
    from test_cli import ok_here

    p = ok_here("experiment", "pageviews", "--kinds", "crash,lose-state", "--faults", "3",
                "--seed", "5", "--lines", "2000", "--bootstrap-servers", kafka_bootstrap,
                "--report", "report", "--json", cwd=tmp_path, timeout=400)
    summary = json.loads(p.stdout)
    [result] = summary["results"]
    assert summary["passed"] == 1 and result["seed"] == 5
    assert result["counts"] == {"lost": 0, "duplicated": 0, "unexpected": 0, "out_of_order": 0}
    assert result["faults_fired"] == result["faults"] == 3
    assert result["replay"] == (
        "eos experiment pageviews --guarantee exactly-once --lines 2000 --faults 3 --kinds "
        f"crash,lose-state --bootstrap-servers {kafka_bootstrap} --seed 5")
    # on Kafka indeed: no local log was made
    run = json.loads((tmp_path / "report" / "seed-5" / "run.json").read_text())
    assert run["transport"] == "kafka"
    assert [f["describe"] for f in run["faults"]] == [
        "lose-state task 1 attempt 0 at task.mid_version@1",
        "crash task 0 attempt 0 at task.recovery@1",
        "crash task 5 attempt 0 at task.checkpoint.before_commit@2"]
    for f in run["faults"]:   # each fired, and its task's next attempt took over
        assert f["fired"] and f["time"] is not None and f["restarted_after"] >= 0, f
    attempts = {t["task_id"]: t["attempt"] for t in run["tasks"]}
    assert (attempts[0], attempts[1], attempts[5]) == (1, 1, 1)
    # it passed: the topics it made are gone, as a passing run's local log would be
    assert run["kept_topics"] == []
    with open_transport(bootstrap_servers=kafka_bootstrap) as t:
        assert not [n for n in t.list_topics() if n.startswith(run["job"])]
    assert not (tmp_path / "report" / "data").exists()


ZOMBIES = """
[[fault]]
kind = "zombie"
task = 0
point = "task.mid_version"
hit = 2
release = 0.5

[[fault]]
kind = "zombie"
task = 2
point = "task.checkpoint.before_commit"
release = 0.5
"""


@pytest.mark.kafka
@pytest.mark.timeout(600)   # the run, then up to EOS_ZOMBIE_LINGER (240 s) for its zombies
def test_zombies_on_kafka_write_late_and_the_committed_output_stays_exact(kafka_bootstrap,
                                                                          tmp_path):
    """A source and a sink task each split into a zombie that goes on beside its
    successor: the zombies write late (channel records, sink records in a transaction),
    and end; the committed output is exactly the oracle's."""
    from test_cli import ok

    (tmp_path / "zombies.toml").write_text(ZOMBIES)
    # A child process with a JVM of its own, not the worker's (``here``): in one suite run
    # on the worker's JVM, Spark started task 0's successor 30 s after the split (1.3 s
    # for task 2's), and its zombie, released then, had not ended when the linger after
    # the run ran out (the output was exact). Not explained yet (the session's note).
    # A zombie still alive ZOMBIE_LINGER (60 s) after the run is killed, and this test
    # fails: on a busy machine one can take longer to end, so it gets 240 s here (a bound,
    # not a wait). What is checked is that it ends on its own, not how fast.
    ok("experiment", "wordcount", "--schedule", "zombies.toml", "--seed", "1", "--lines",
       "3000", "--bootstrap-servers", kafka_bootstrap, "--report", "report", cwd=tmp_path,
       env={"EOS_ZOMBIE_LINGER": "240"}, timeout=560)
    run = json.loads((tmp_path / "report" / "seed-1" / "run.json").read_text())
    assert run["transport"] == "kafka" and run["passed"]
    assert run["verdict"]["lost"] == run["verdict"]["duplicated"] == 0
    for zombie in run["faults"]:
        assert zombie["fired"] and zombie["released"] is not None
        # not killed: it ended (else the injector's clue to where it hung)
        assert zombie["zombie_end"].startswith("ended at"), (
            f"task {zombie['task']}: {zombie['zombie_end']} (state {zombie.get('zombie_state')}, "
            f"in {zombie.get('zombie_wchan')}, released again "
            f"{zombie.get('released_again', 0)} times); its stack:\n"
            f"{zombie.get('zombie_stack')}")


# --------------------------------------------------------------------------- soaks

def test_durations_and_the_soak_s_fault_count():
    from eos_runtime.cli.experiment import parse_duration, soak_faults

    assert [parse_duration(t) for t in ("90", "30s", "10m", "1.5h", " 2M ")] == [
        90.0, 30.0, 600.0, 5400.0, 120.0]
    for bad in ("", "m", "10 minutes", "-5s", "0", "nan", "inf"):
        with pytest.raises(ConfigError, match="--duration"):
            parse_duration(bad)
    assert soak_faults(600.0) == 40 and soak_faults(20.0) == 1 and soak_faults(1.0) == 1


def test_broker_outages_take_turns_with_the_broker_up_between_them():
    from eos_runtime.experiments.injector import BROKER_REST, broker_may_stop

    assert not broker_may_stop(9.9, 10.0, False, None)            # not due yet
    assert broker_may_stop(10.0, 10.0, False, None)
    assert not broker_may_stop(50.0, 10.0, True, None)             # another one lasts
    assert not broker_may_stop(50.0, 10.0, False, 50.0 - BROKER_REST + 0.1)   # just back
    assert broker_may_stop(50.0, 10.0, False, 50.0 - BROKER_REST)


def test_no_outage_starts_once_the_run_is_over(tmp_path):
    """A broker outage that fell due while the run ended is not started by the clean-up
    after it (seen in a soak: an outage 3 s after the stop, tested nothing, cost 20 s)."""
    import os

    from eos_runtime.experiments.injector import Injector
    from eos_runtime.experiments.schedule import parse_schedule

    (tmp_path / "task-0.pid").write_text(f"{os.getpid()} 0\n")
    schedule = parse_schedule([{"kind": "broker", "after": 0}])
    injector = Injector(schedule, tmp_path, tmp_path / "faults.log", 1, broker_dir=None)
    injector.finish()
    [rec] = injector.records
    assert not rec["fired"] and rec["missed"] and rec["note"] == "the run had ended"
    assert "error" not in rec and not injector._outages


def test_a_soak_feeds_then_drains_then_stops():
    """The soak's steps: feed for the duration; then wait until the sources committed
    every record that arrived (not one fewer), or give up waiting after DRAIN_LIMIT."""
    from eos_runtime.experiments.setup import DRAIN_LIMIT
    from eos_runtime.experiments.soak import soak_phase

    assert soak_phase(10.0, 30.0, 500, 500, None) == "feed"       # caught up, still feeding
    assert soak_phase(30.0, 30.0, 3000, 2999, 30.0) == "drain"
    assert soak_phase(31.0, 30.0, 3000, 3000, 30.0) == "stop"
    assert soak_phase(30.0 + DRAIN_LIMIT - 0.1, 30.0, 3000, 10, 30.0) == "drain"
    assert soak_phase(30.0 + DRAIN_LIMIT, 30.0, 3000, 10, 30.0) == "stop"


def test_the_soak_s_oracle_input_is_what_the_source_holds(tmp_path):
    from eos_runtime.errors import EosError
    from eos_runtime.experiments.soak import source_inputs

    values = ["a b", "c", "a b", "d"]
    payloads = [v.encode() for v in values]
    with open_transport(data_dir=str(tmp_path)) as t:
        t.create_topics([TopicSpec("in", 2)])
        with t.producer() as p:
            for i in (0, 1, 3):   # value 2 never arrived (say, an outage took it)
                p.produce("in", i % 2, payloads[i])
            p.flush()
        assert sorted(source_inputs(t, "in", payloads, values)) == ["a b", "c", "d"]
        with t.producer() as p:
            p.produce("in", 0, b"not fed")
            p.flush()
        with pytest.raises(EosError, match=r"in\[0\] offset 1 holds a record the soak did not"):
            source_inputs(t, "in", payloads, values)


SOAK_SCHEDULE = """
[[fault]]
kind = "crash"
task = 0
point = "task.mid_version"
at = 4.0

[[fault]]
kind = "kill"
task = 2
at = 8.0

[[fault]]
kind = "lose-state"
task = 3
point = "task.checkpoint.after_store"
at = 12.0
"""


def test_a_short_soak_is_fed_all_along_stopped_and_verified(tmp_path):
    """A 20 s soak on the local log: an unbounded run fed at 150 records a second while
    faults fire at their moments, then a graceful stop; every record the source holds is
    in the oracle, and the committed output matches it exactly."""
    from test_cli import ok_here

    (tmp_path / "soak.toml").write_text(SOAK_SCHEDULE)
    p = ok_here("experiment", "wordcount", "--duration", "20s", "--rate", "150", "--schedule",
                "soak.toml", "--seed", "4", "--report", "report", "--json", cwd=tmp_path,
                timeout=400)
    summary = json.loads(p.stdout)
    assert summary["passed"] == 1 and summary["settings"]["soak"] == {"duration": 20.0,
                                                                      "rate": 150.0}
    run = json.loads((tmp_path / "report" / "seed-4" / "run.json").read_text())
    soak = run["soak"]
    assert soak["generated"] == 3000 and 0 < soak["fed"] <= 3000
    assert soak["fed"] == soak["handed_to_producer"] and soak["feeder_error"] is None
    assert run["verdict"]["lost"] == run["verdict"]["duplicated"] == 0
    assert run["verdict"]["committed"] == run["verdict"]["expected"] > 0
    assert all(f["fired"] for f in run["faults"])
    assert [f["time"] >= f["at"] for f in run["faults"]] == [True] * 3
    sources = [t for t in run["tasks"] if t["task_id"] in (0, 1)]
    assert all(t["stopped"] for t in sources)           # a graceful stop ended the run
    assert run["replay"] == ("eos experiment wordcount --guarantee exactly-once --duration 20s "
                             f"--rate 150 --schedule {tmp_path / 'soak.toml'} --seed 4")


# --------------------------------------------------------------------------- the checker can fail

SPAWNED_ATTEMPT = (
    "import sys, cloudpickle\n"
    "from eos_runtime.engine import TaskAttempt\n"
    "fn, payload, index, attempt, bug = cloudpickle.load(open(sys.argv[1], 'rb'))\n"
    "if bug == 'rewind keeps output':\n"
    "    from eos_runtime.runtime.outputs import SinkWriter\n"
    "    SinkWriter.discard = lambda self: None\n"
    "if bug == 'a restore only fences':\n"
    "    from eos_runtime.protocol import aligner\n"
    "    restore = aligner.Aligner.on_restore\n"
    "    def weakened(self, *args):\n"
    "        out = restore(self, *args)\n"
    "        return aligner.RestoreOutcome.FENCE if out == aligner.RestoreOutcome.REWIND "
    "else out\n"
    "    aligner.Aligner.on_restore = weakened\n"
    "out = fn(TaskAttempt(index, attempt, payload))\n"
    "open(sys.argv[2], 'wb').write(out)\n")


class SpawnedJob:
    """A stand-in for the Spark engine: every task attempt is a new Python process that
    runs the task (with the bug the test names patched in first), retried when it dies,
    as Spark retries it. Not forks of the test process: a fork taken while another thread
    holds a lock (logging, imports) can hang the child for good."""

    def __init__(self, fn, payloads, engine, bug=None) -> None:
        import tempfile
        import threading

        self.fn, self.payloads, self.max_attempts = fn, payloads, engine.max_attempts
        self.bug = bug
        self.dir = tempfile.mkdtemp(prefix="spawned-job-")
        self.results: list[bytes | None] = [None] * len(payloads)
        self.failed = 0
        self.error: str | None = None
        self.procs: dict[int, object] = {}
        self.threads = [threading.Thread(target=self._task, args=(i,), daemon=True)
                        for i in range(len(payloads))]
        for t in self.threads:
            t.start()

    def _task(self, index: int) -> None:
        import os
        import subprocess
        import sys

        import cloudpickle

        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.path.join(root, "tests")]))
        for attempt in range(self.max_attempts):
            args = os.path.join(self.dir, f"task-{index}-{attempt}.pkl")
            out = os.path.join(self.dir, f"task-{index}-{attempt}.out")
            with open(args, "wb") as f:
                cloudpickle.dump((self.fn, self.payloads[index], index, attempt, self.bug), f)
            proc = subprocess.Popen([sys.executable, "-c", SPAWNED_ATTEMPT, args, out], env=env)
            self.procs[index] = proc
            if proc.wait() == 0:
                with open(out, "rb") as f:
                    self.results[index] = f.read()
                return
            self.failed += 1
        self.error = f"task {index} failed after {self.max_attempts} attempts"

    def wait(self, timeout=None) -> bool:
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self.threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self.threads)

    def result(self):
        from eos_runtime.errors import EngineError

        self.wait()
        if self.error is not None:
            raise EngineError(self.error)
        return self.results

    def status(self):
        from eos_runtime.engine import JobStatus

        running = sum(t.is_alive() for t in self.threads)
        return JobStatus("running" if running else "succeeded", len(self.results), running,
                         sum(r is not None for r in self.results), self.failed, "fork")

    def cancel(self) -> None:
        for proc in list(self.procs.values()):
            proc.kill()


@pytest.mark.parametrize("bug", [None, "rewind keeps output", "a restore only fences"])
def test_the_checker_catches_a_protocol_bug_and_names_the_seed(bug, tmp_path, monkeypatch):
    """A protocol rule broken on purpose, in every task: a sink task that rewinds on a
    restore keeps the open version's output instead of discarding it (SEP-10 4.x); or the
    aligner's restore rule weakened, so a restore only fences the old generation and never
    rewinds what its open version took from it (R4). The source crashes after its first
    batches reached the sinks, so the sinks get a restore; with either bug the records the
    old generation sent are counted beside the same records sent again. Without a bug
    the same experiment on the same stand-in engine passes."""
    from click.testing import CliRunner

    import eos_runtime.runner
    from eos_runtime.cli import main

    # where the driver calls it: runner imports start_tasks by name
    monkeypatch.setattr(eos_runtime.runner, "start_tasks",
                        lambda fn, payloads, engine: SpawnedJob(fn, payloads, engine, bug))
    (tmp_path / "faults.toml").write_text('[[fault]]\nkind = "crash"\ntask = 0\n'
                                          'point = "task.mid_version"\nhit = 2\n')
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["experiment", "wordcount", "--schedule", "faults.toml",
                                       "--seed", "31", "--lines", "1200", "--report", "report"])
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    [run] = summary["results"]
    if not bug:
        assert result.exit_code == 0, (result.output, result.exception)
        assert run["verdict"] == "pass" and run["faults_fired"] == 1
        return
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (
        result.output, result.exception)
    assert run["seed"] == 31 and run["verdict"] == "FAIL" and not run["error"]
    assert run["counts"]["duplicated"] > 0 and run["counts"]["lost"] == 0
    # the whole command, every option the run depends on, the schedule by absolute path
    schedule = Path.cwd() / "faults.toml"
    replay = ("eos experiment wordcount --guarantee exactly-once --lines 1200 "
              f"--schedule {schedule} --seed 31")
    assert run["replay"] == replay
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows[1][:2] == ["31", "FAIL"] and int(rows[1][4].replace(",", "")) > 0   # dup
    assert f"seed 31 failed ({run['counts']['duplicated']:,} duplicated); replay: {replay}" \
        in result.stdout.splitlines()
    assert "error: 1 of 1 runs failed (seed 31)" in result.stderr
    # and it replays: the printed command, as it is, fails the same way
    import shlex

    again = CliRunner().invoke(main, shlex.split(replay)[1:])
    assert again.exit_code == 1, (again.output, again.exception)
    [report] = (tmp_path / ".eos" / "experiments").iterdir()   # the default report dir
    [rerun] = json.loads((report / "summary.json").read_text())["results"]
    assert (rerun["seed"], rerun["verdict"], rerun["faults_fired"]) == (31, "FAIL", 1)
    assert rerun["counts"]["duplicated"] > 0 and rerun["counts"]["lost"] == 0
    assert rerun["replay"] == replay


def test_a_torn_generation_start_is_survived(tmp_path, monkeypatch):
    """The first append of every attempt is its generation-start record; tear it. Found by
    `eos experiment wordcount --schedule torn.toml --seed 1`: every retry asked the fence
    for the generation the torn attempt had registered, and was refused (recovery C6)."""
    from click.testing import CliRunner

    import eos_runtime.runner
    from eos_runtime.cli import main

    # where the driver calls it: runner imports start_tasks by name
    monkeypatch.setattr(eos_runtime.runner, "start_tasks",
                        lambda fn, payloads, engine: SpawnedJob(fn, payloads, engine))
    (tmp_path / "torn.toml").write_text('[[fault]]\nkind = "torn"\ntask = 2\n'
                                        'point = "locallog.append.mid_data"\nhit = 1\n')
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["experiment", "wordcount", "--schedule", "torn.toml",
                                       "--seed", "1", "--lines", "1200", "--report", "report"])
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["results"][0]["error"] is None, summary["results"][0]["error"]
    assert result.exit_code == 0 and summary["passed"] == 1
    # The tear happened: an unfired fault does not fail a run, so a pass alone proves
    # nothing about the generation start it is about.
    assert summary["results"][0]["faults_fired"] == 1
    run = json.loads((tmp_path / "report" / "seed-1" / "run.json").read_text())
    (torn,) = run["faults"]
    assert torn["fired"] and (torn["kind"], torn["task"], torn["attempt"]) == ("torn", 2, 0)
    assert torn["time"] is not None and torn["restarted_after"] >= 0   # attempt 1 followed
    assert {(a["task"], a["attempt"]) for a in run["attempts"]} >= {(2, 0), (2, 1)}
    # the retry's generation exceeds the one the torn attempt registered with the fence (C6)
    assert {t["task_id"]: (t["attempt"], t["generation"]) for t in run["tasks"]}[2] == (1, 2)
    # The timeline's generations: the torn attempt never finished writing its start (it
    # has none); every other attempt took its first, no sooner than it started.
    gens = {(g["task"], g["attempt"], g["generation"]): g["started"] for g in run["generations"]}
    assert sorted(gens) == [(0, 0, 1), (1, 0, 1), (2, 1, 2), (3, 0, 1)]
    starts = {(a["task"], a["attempt"]): a["started"] for a in run["attempts"]}
    assert all(starts[task, attempt] <= at for (task, attempt, _), at in gens.items())


def test_a_lagging_producer_sleeps_per_record_and_the_run_stays_exact(tmp_path, monkeypatch):
    """Fault ``lag``: source task 0's first attempt sleeps 2 ms per record, so its versions
    trail task 1's. The sleep is a lower bound on the task's own time, by construction."""
    from click.testing import CliRunner

    import eos_runtime.runner
    from eos_runtime.cli import main

    # where the driver calls it: runner imports start_tasks by name
    monkeypatch.setattr(eos_runtime.runner, "start_tasks",
                        lambda fn, payloads, engine: SpawnedJob(fn, payloads, engine))
    (tmp_path / "lag.toml").write_text('[[fault]]\nkind = "lag"\ntask = 0\ndelay = 0.002\n')
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["experiment", "wordcount", "--schedule", "lag.toml",
                                       "--seed", "2", "--lines", "600", "--report", "report"])
    assert result.exit_code == 0, (result.output, result.exception)
    run = json.loads((tmp_path / "report" / "seed-2" / "run.json").read_text())
    assert run["passed"], run["verdict"]
    (fault,) = run["faults"]
    assert fault["fired"] and fault["describe"] == "lag task 0 attempt 0 2 ms per record"
    tasks = {t["task_id"]: t for t in run["tasks"]}
    assert tasks[0]["processed"] > 0
    assert tasks[0]["seconds"] >= tasks[0]["processed"] * 0.002


# --------------------------------------------------------------------------- several runs

def test_operator_kinds_and_clock_steps_are_parsed_and_refused_with_one_line(tmp_path):
    from eos_runtime.experiments.schedule import parse_schedule

    cases = [
        ('[[fault]]\nkind = "startpoint"\nrun = 2\npartition = 0\nto = "latest"\n',
         "fault 1 (startpoint): field 'to' must be one of offset, oldest, upcoming, timestamp"),
        ('[[fault]]\nkind = "startpoint"\nrun = 2\npartition = 0\n',
         "a Startpoint to offset needs field 'offset'"),
        ('[[fault]]\nkind = "startpoint"\nrun = 2\npartition = 0\nto = "oldest"\noffset = 3\n',
         "a Startpoint to oldest takes no field 'offset'"),
        ('[[fault]]\nkind = "checkpoint"\nrun = 1\npartition = 0\noffset = 3\n',
         "fault 1 (checkpoint): field 'run' must be >= 2"),
        ('[[fault]]\nkind = "reset"\nrun = 1\n', "fault 1 (reset): field 'run' must be >= 2"),
        ('[[fault]]\nkind = "reset"\n', "fault 1 (reset): field 'run' is missing"),
        ('[[fault]]\nkind = "start"\nto = "timestamp"\n',
         "fault 1 (start): field 'to' must be one of oldest, upcoming"),
        ('[[fault]]\nkind = "start"\nto = "upcoming"\nvia = "env"\n',
         "field 'via' must be one of offset-default, reset-offset, not 'env'"),
        ('[[fault]]\nkind = "stop"\ntask = 1\nrun = 0\n',
         "fault 1 (stop): field 'run' must be >= 1"),
        ('[[fault]]\nkind = "append"\ntask = 0\n', "fault 1 (append): field 'records' is missing"),
        ('[[fault]]\nkind = "take-over"\ntask = 0\nafter = 1\n',
         "unknown field 'after'; a take-over fault has task, attempt, point, hit, run"),
        ('[[fault]]\nkind = "clock"\ntask = 0\npoint = "task.mid_version"\nstep = 0\n',
         "fault 1 (clock): field 'step' must be a number of seconds other than 0"),
        ('[[fault]]\nkind = "clock"\ntask = 0\npoint = "task.mid_version"\nstep = 1e9\n',
         "at most 604800 either way"),
        ('[[fault]]\nkind = "clock"\ntask = 0\nstep = -600\n',
         "fault 1 (clock): field 'point' is missing"),
    ]
    refused_files(tmp_path, cases)
    s = parse_schedule({"fault": [
        {"kind": "startpoint", "run": 2, "partition": 1, "to": "timestamp", "offset": 7},
        {"kind": "stop", "task": 2, "attempt": 1},
        {"kind": "clock", "task": 0, "point": "task.mid_version", "step": -600, "hit": 2},
        {"kind": "start", "to": "upcoming"}]})
    sp, stop, clock, start = s.faults
    assert s.multi_run() and s.runs() == 2
    assert stop.point == "task.recovery" and stop.run == 1 and not stop.ends_attempt()
    assert start.via == "offset-default" and start.run == 1
    assert clock.as_dict() == {"kind": "clock", "task": 0, "attempt": 0, "point":
                               "task.mid_version", "hit": 2, "step": -600}
    assert parse_schedule({"fault": [clock.as_dict()]}).faults[0] == clock   # a replay
    assert sp.describe() == "startpoint partition 1 timestamp of offset 7 before run 2"
    assert [f.kind for f in s.of_run(1).faults] == ["stop", "clock"]
    assert not parse_schedule({"fault": [clock.as_dict()]}).multi_run()


def test_clock_steps_go_to_the_tasks_as_the_runtime_s_clock_action(tmp_path, monkeypatch):
    """The interface the runtime's clock hook takes: {"point", "task", "attempt", "hit",
    "action": "clock", "step"}; until a build has the hook, the kind is refused."""
    from eos_runtime import faults
    from eos_runtime.experiments.schedule import check_kinds, check_schedule, parse_schedule
    from eos_runtime.experiments.setup import fault_dicts

    s = parse_schedule({"fault": [
        {"kind": "clock", "task": 3, "attempt": 1, "point": "task.checkpoint.before_commit",
         "hit": 2, "step": 900.5},
        {"kind": "append", "task": 0, "records": 5}]})
    got = fault_dicts(s, tmp_path / "log", 0.0)
    assert got == [
        {"point": "task.checkpoint.before_commit", "task": 3, "attempt": 1, "hit": 2,
         "action": "clock", "step": 900.5, "log": str(tmp_path / "log")},
        {"point": "task.recovery", "task": 0, "attempt": 0, "hit": 1, "action": "stop",
         "log": str(tmp_path / "log")}]
    monkeypatch.setattr(faults, "ACTIONS", tuple(a for a in faults.ACTIONS if a != "clock"))
    with pytest.raises(ConfigError, match="fault kind 'clock' needs the runtime's clock hook"):
        check_kinds(["crash", "clock"], "local", "exactly-once")
    with pytest.raises(ConfigError, match="fault 1 \\(clock\\): fault kind 'clock' needs"):
        check_schedule(s, roles_of(), "local", "exactly-once")
    monkeypatch.setattr(faults, "ACTIONS", (*faults.ACTIONS, "clock"))
    check_kinds(["clock"], "kafka", "at-least-once")
    check_schedule(s, roles_of(), "kafka", "exactly-once")


def test_a_schedule_of_several_runs_is_checked_against_the_job():
    from eos_runtime.experiments.scenario_plan import check_offsets, check_scenario, segment_sizes
    from eos_runtime.experiments.schedule import check_schedule, parse_schedule

    roles = roles_of()

    def refused(faults, message):
        with pytest.raises(ConfigError, match=message):
            s = parse_schedule({"fault": faults})
            check_schedule(s, roles, "local", "exactly-once")
            check_offsets(s, segment_sizes(1000, s.runs()), 2)
            check_scenario(s)

    refused([{"kind": "startpoint", "run": 2, "partition": 2, "to": "oldest"}],
            "field 'partition': the source has partitions 0..1, not 2")
    refused([{"kind": "append", "task": 2, "records": 3}],
            "task 2 reads a channel; input arrives at the partitions of a task that reads")
    refused([{"kind": "stop", "task": 0}, {"kind": "cancel", "task": 1}],
            "faults 1 and 2 both end run 1")
    refused([{"kind": "start", "to": "oldest"}, {"kind": "start", "to": "upcoming"}],
            "faults 1 and 2 both set how run 1 starts")
    refused([{"kind": "append", "task": 0, "records": 3},
             {"kind": "stop", "task": 0}], "faults 1 and 2 both wait for task 0 attempt 0 at "
                                            "task.recovery")
    # 1000 records over 2 runs: partition 1 holds 250 (offsets 0..249) before run 2
    refused([{"kind": "checkpoint", "run": 2, "partition": 1, "offset": 251}],
            "before run 2 partition 1 holds offsets 0..249 .*, not 251")
    refused([{"kind": "startpoint", "run": 2, "partition": 1, "to": "timestamp",
              "offset": 250}], "not 250")
    refused([{"kind": "start", "run": 2, "via": "reset-offset", "to": "oldest"},
             {"kind": "take-over", "task": 0, "run": 2}], "give the take-over another run")
    ok = parse_schedule({"fault": [
        {"kind": "checkpoint", "run": 2, "partition": 1, "offset": 250},   # the end: allowed
        {"kind": "crash", "run": 2, "task": 1, "point": "task.checkpoint.before_commit"},
        {"kind": "append", "run": 2, "task": 1, "attempt": 1, "records": 20},
        {"kind": "crash", "task": 1, "point": "task.checkpoint.before_commit"}]})
    check_schedule(ok, roles, "local", "exactly-once")   # attempts count within a run
    check_offsets(ok, segment_sizes(1000, 2), 2)


def test_the_model_follows_each_action_s_documented_effect():
    """Where each run starts each partition and what it read, from docs/operations.md."""
    from eos_runtime.experiments.scenario import InputModel

    m = InputModel(2)
    for i in range(10):          # offsets 0..4 in each partition, timestamps 100 + i
        m.append(i % 2, f"v{i}", 100 + i)
    # a fresh job at offset_default upcoming: nothing of what is there
    assert m.starts(m.ends(), "upcoming") == [5, 5]
    assert m.starts(m.ends()) == [0, 0]
    m.ran(1, [0, 0], [5, 5])
    assert m.pos == [5, 5]
    for i in range(10, 14):
        m.append(i % 2, f"v{i}", 100 + i)
    # a Startpoint back to offset 2 of partition 0: 2..6 read again; partition 1 goes on
    m.set_startpoint(0, "offset", 2)
    starts = m.starts(m.ends())
    assert starts == [2, 5]
    m.ran(2, starts, m.ends())
    assert m.pending == {} and m.pos == [7, 7]
    assert sorted(m.values(m.epochs[0])).count("v4") == 2       # offset 2 of partition 0
    assert sorted(m.values(m.epochs[0])).count("v5") == 1       # offset 2 of partition 1
    # a timestamp: the first record at or after it; reset_offset: offset_default, all
    kind, stamp = m.set_startpoint(1, "timestamp", 3)
    assert (kind, stamp) == ("timestamp", 107)
    assert m.starts(m.ends()) == [7, 3]
    assert m.starts(m.ends(), "upcoming", reset_offset=True) == [7, 3]   # the Startpoint first
    m.pending.clear()
    assert m.starts(m.ends(), "upcoming", reset_offset=True) == [7, 7]
    assert m.starts(m.ends(), "oldest", reset_offset=True) == [0, 0]
    # a run that ended early: a partition whose task committed nothing keeps its Startpoint
    m.set_startpoint(0, "oldest", None)
    m.set_startpoint(1, "upcoming", None)
    starts = m.starts(m.ends())
    assert starts == [0, 7]
    m.ran(3, starts, [None, 7])
    assert m.pending == {0: ("oldest", None)} and m.pos == [7, 7]
    # a Startpoint set last wins (a checkpoint write's task key, or a partition key)
    m.set_startpoint(0, "offset", 6)
    assert m.starts(m.ends()) == [6, 7]
    # eos reset: no position, no Startpoint, a new epoch judged on its own
    m.reset()
    assert m.pending == {} and m.pos == [None, None] and len(m.epochs) == 2
    assert m.starts(m.ends()) == [0, 0]
    with pytest.raises(ConfigError, match="partition 0 holds offsets 0..6: a Startpoint to "
                                          "offset cannot name offset 8"):
        m.set_startpoint(0, "offset", 8)


def test_random_operator_bundles_make_each_action_bite_and_draw_only_when_named():
    from eos_runtime.experiments.random_schedule import random_schedule
    from eos_runtime.experiments.scenario_plan import check_offsets, fill_offsets, segment_sizes
    from eos_runtime.experiments.schedule import (
        EXPLICIT_ONLY,
        OPERATOR,
        check_schedule,
        kinds_for,
    )

    roles = roles_of()
    for kind in (*OPERATOR, "clock"):
        assert kind in EXPLICIT_ONLY and kind not in kinds_for("local", "exactly-once")
    kinds = ["crash", *OPERATOR]
    seen = set()
    for seed in range(60):
        s = random_schedule(seed, 3, kinds, roles, "local")
        assert s.as_dict() == random_schedule(seed, 3, kinds, roles, "local").as_dict()
        s = fill_offsets(s, seed, segment_sizes(1000, s.runs()), 2)
        check_schedule(s, roles, "local", "exactly-once")
        check_offsets(s, segment_sizes(1000, s.runs()), 2)
        for f in s.faults:
            seen.add(f.kind)
            if f.kind == "startpoint" and f.to == "upcoming":
                crash = [g for g in s.faults if g.kind == "crash" and g.run == f.run]
                if crash and crash[0].point == "task.checkpoint.before_commit":
                    # input arrives while the retry is held before it resolves its start
                    assert any(g.kind == "append" and g.run == f.run and g.attempt == 1
                               and g.point == "task.recovery" for g in s.faults)
    assert set(OPERATOR) <= seen


def test_bad_records_each_leave_one_dead_letter_and_none_of_their_output(tmp_path):
    """The dead-letter oracle: a bad record's letter missing is lost, a second one a
    duplicate, a letter naming a good record unexpected; its output is not expected."""
    from collections import Counter

    from eos_runtime.experiments.verify import Verdict, check_dead_letters
    from eos_runtime.experiments.workloads import BIG, bad_records, dead_letters_expected, is_bad

    records = bad_records(300, 5)
    flags = is_bad(records)
    assert records == bad_records(300, 5) and 3 <= sum(flags) < 30
    assert len(records[100]["pad"]) == BIG and not flags[100] and flags[200]
    expected = dead_letters_expected(records)
    good = Counter(w for r in records if not r["bad"] for w in r["words"])
    assert {k: len(v) for k, v in expected.results.items()} == good
    bad = Counter((i % 2, i // 2) for i, b in enumerate(flags) if b)
    (first, second) = sorted(bad)[:2]

    def letters(places):
        with open_transport(data_dir=str(tmp_path / str(len(places)))) as t:
            t.create_topics([TopicSpec("j.dead-letters", 1)])
            with t.producer() as producer:
                for p, o in places:
                    producer.produce("j.dead-letters", 0, json.dumps(
                        {"topic": "records", "partition": p, "offset": o}).encode())
                producer.flush()
            v = Verdict("exactly-once", passed=True)
            # an at-least-once job's dead letters are read as written (no commit ranges)
            monkey = pytest.MonkeyPatch()
            monkey.setattr("eos_runtime.joblog.committed.ControlLog.guarantee",
                           lambda self: "at-least-once")
            try:
                check_dead_letters(v, t, "j.dead-letters", "j", "records", bad)
            finally:
                monkey.undo()
            return v

    assert letters(list(bad.elements())).passed
    v = letters([first, first, *(k for k in bad if k not in (first, second)), (1, 1)])
    assert not v.passed and (v.lost, v.duplicated, v.unexpected) == (1, 1, 1)
    assert v.bad_keys[0]["examples"] == {
        "lost": [f"records[{second[0]}]@{second[1]}"],
        "duplicated": [f"records[{first[0]}]@{first[1]}"],
        "unexpected": ["names records[1]@1, which is not a bad record"]}


def test_the_chained_oracle_pairs_job_b_s_count_with_job_a_s():
    from eos_runtime.experiments.workloads import chained_expected

    e = chained_expected(["a b a", "b"])
    assert e.results == {"a": ["1:1", "2:2"], "b": ["1:1", "2:2"]}
    # a record of A's sink read twice by B shows as a count past the word's last
    assert check(e, [("a", "1:1"), ("a", "2:2"), ("a", "3:2"), ("b", "1:1"),
                     ("b", "2:2")]).duplicated == 1
    # a count A wrote twice: B numbers it on, so the pairing breaks
    v = check(e, [("a", "1:1"), ("a", "2:1"), ("a", "3:2"), ("b", "1:1"), ("b", "2:2")])
    assert not v.passed


OPERATOR_SCHEDULE = """
# run 2 starts partition 0 back at offset 50: what run 1 read from there is read again;
# a crash just after the task's first commit must not apply the Startpoint a second time
[[fault]]
kind = "startpoint"
run = 2
partition = 0
offset = 50

[[fault]]
kind = "crash"
run = 2
task = 0
point = "task.checkpoint.after_commit"

"""


def test_an_experiment_of_several_runs_carries_out_an_operator_s_actions(tmp_path):
    """The multi-run mechanism end to end, on the local log: a Startpoint set with `eos
    startpoint set` between runs, its input read twice as the oracle expects."""
    from test_cli import ok_here

    (tmp_path / "ops.toml").write_text(OPERATOR_SCHEDULE)
    ok_here("experiment", "wordcount", "--schedule", "ops.toml", "--seed", "3", "--lines", "600",
            "--report", "report", cwd=tmp_path, timeout=600)
    run = json.loads((tmp_path / "report" / "seed-3" / "run.json").read_text())
    assert run["passed"] and all(f["fired"] for f in run["faults"]), run["faults"]
    runs = [r for r in run["runs"] if "run" in r]
    assert [r["run"] for r in runs] == [1, 2]
    assert runs[1]["starts"] == [50, 150]          # 150 records a partition per run
    commands = [c["command"] for r in run["runs"] for c in r.get("commands", [])]
    assert any(c.startswith("eos startpoint set wordcount-s3-") and "--offset 50" in c
               for c in commands)
    # the 50 re-read records count again: more results than a single pass would give
    once = BUILTIN["wordcount"].oracle(BUILTIN["wordcount"].generate(3, 600))
    assert run["verdict"]["expected"] > sum(len(v) for v in once.results.values())


def test_several_runs_stamp_their_input_recent_and_never_ahead():
    """Seeds 4001 and 4005 on Kafka lost a third of their input: it was stamped ten days
    back, past the broker's default retention (7 days), whose next check (every 5 min)
    deleted it before a run read it, and deleted committed sink records, which carry their
    input's timestamps. Every stamp must lie in the experiment's own time, none ahead of
    it (a broker refuses records stamped an hour ahead): increasing and unique."""
    from eos_runtime.experiments.scenario_plan import input_stamp0

    now = 1_795_623_548_473
    for records in (1, 1000, 10_000_000):
        first = input_stamp0(now, records)
        assert now - records <= first and first + records - 1 <= now


# --------------------------------------------------------------------------- a graph workload

def test_the_clickstream_oracle_is_strict_on_clicks_and_tolerant_on_rows():
    from eos_runtime.experiments.verify import compare
    from eos_runtime.experiments.workloads import clickstream_expected
    from eos_runtime.transport import Record

    events = [{"table": "u1", "v": 1}, {"click": 1, "user": "u1"}, {"table": "u1", "v": 2},
              {"click": 3, "user": "u1"}, {"click": 4, "user": "u1"}, {"click": 5, "user": "u2"}]
    seen = clickstream_expected(events)["clicks-seen"]

    def verdict(*values):
        records = [Record("s", 0, i, json.dumps(k).encode(), json.dumps(v).encode(), 0)
                   for i, (k, v) in enumerate(values)]
        return compare(seen, records, "exactly-once", key_decode=json.loads,
                       value_decode=json.loads)

    def click(i, user, v):
        return user, {"id": i, "user": user, "v": v}

    good = [click(1, "u1", None), click(3, "u1", 1), click(4, "u1", 2), click(5, "u2", None)]
    assert verdict(*good).passed, "any row it had, or none yet"
    assert verdict(click(1, "u1", 2), click(3, "u1", 2), click(4, "u1", 2),
                   click(5, "u2", None)).passed, "the table read ahead of the clicks"
    v = verdict(*good[:2], good[1], *good[2:])
    assert (v.duplicated, v.passed) == (1, False)
    v = verdict(click(1, "u1", 2), click(3, "u1", 1), *good[2:])
    assert v.unexpected == 1 and "saw version 1 after 2" in repr(v.bad_keys)
    v = verdict(click(1, "u1", 1), click(3, "u1", None), *good[2:])
    assert v.unexpected == 1 and "no row after version 1, which no delete followed" in repr(
        v.bad_keys)
    v = verdict(*good[:3], click(5, "u2", 1))
    assert v.unexpected == 1 and "never had row version 1" in repr(v.bad_keys)


def test_the_clickstream_graph_passes_under_faults_of_its_lookup_and_table(tmp_path):
    from click.testing import CliRunner

    from eos_runtime.cli import main

    # tasks: users table 0-1, clicks 2-3, the lookup 4-5, the counts 6-7
    (tmp_path / "g.toml").write_text(
        '[[fault]]\nkind = "crash"\ntask = 4\npoint = "task.checkpoint.before_commit"\nhit = 2\n'
        '[[fault]]\nkind = "lose-state"\ntask = 5\npoint = "task.checkpoint.after_store"\n'
        'hit = 2\n'
        '[[fault]]\nkind = "crash"\ntask = 0\npoint = "task.mid_version"\nhit = 2\n'
        '[[fault]]\nkind = "buffer"\nmax_bytes = 1\n')
    result = CliRunner().invoke(main, ["experiment", "clickstream", "--schedule",
                                       str(tmp_path / "g.toml"), "--seed", "3", "--lines",
                                       "2000", "--report", str(tmp_path / "report")])
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    [run] = summary["results"]
    assert result.exit_code == 0, (result.output, result.exception)
    assert run["verdict"] == "pass" and run["faults_fired"] == 4   # the buffer's too


def test_a_zombie_released_before_it_stopped_itself_is_released_again(tmp_path):
    """The release (SIGCONT) can reach a zombie that has split but not yet stopped itself
    (a busy machine); the zombie then stops for good. The injector must see it stopped and
    release it again, so that it ends on its own rather than being killed after the run
    (seen in a CI run: task 0's zombie killed, not ended, 20 s after an exact run)."""
    import subprocess
    import sys

    from eos_runtime.experiments.injector import Injector
    from eos_runtime.experiments.schedule import parse_schedule

    log = tmp_path / "faults.log"
    ended = tmp_path / "ended"
    zombie = subprocess.Popen([sys.executable, "-c", f"""
import json, os, signal, sys, time
note = lambda **kw: open({str(log)!r}, "a").write(json.dumps(
    dict(time=time.time(), pid=os.getpid(), task=0, attempt=0, **kw)) + "\\n")
note(point="task.mid_version", action="zombie")
sys.stdin.readline()     # held until the release was sent, as a busy machine may hold it
os.kill(os.getpid(), signal.SIGSTOP)
open({str(ended)!r}, "w").close()
note(point="task.mid_version", action="zombie-end")
"""], stdin=subprocess.PIPE, text=True)
    try:
        (tmp_path / "task-0.pid").write_text(f"{os.getpid()} 1\n")   # its successor started
        schedule = parse_schedule([{"kind": "zombie", "task": 0, "point": "task.mid_version",
                                    "release": 0}])
        injector = Injector(schedule, tmp_path, log, 1, broker_dir=None)
        deadline = time.monotonic() + 30
        while not injector.records[0].get("released") and time.monotonic() < deadline:
            injector.tick()
            time.sleep(0.02)
        assert injector.records[0]["released"] is not None
        zombie.stdin.write("go on\n")   # the zombie stops itself only now: the SIGCONT is lost
        zombie.stdin.flush()
        injector.finish()
        [rec] = injector.records
        assert ended.exists() and rec["zombie_end"].startswith("ended at"), rec
    finally:
        zombie.kill()
        zombie.wait()


def test_a_zombie_that_will_not_end_is_killed_with_where_it_hung(tmp_path, monkeypatch):
    """A released zombie still running when the linger after the run ran out is killed;
    the record says its state and its Python stack, so the report can say where it hung."""
    import subprocess
    import sys

    from eos_runtime.experiments import injector as injector_module
    from eos_runtime.experiments.schedule import parse_schedule

    log = tmp_path / "faults.log"
    zombie = subprocess.Popen([sys.executable, "-c", f"""
import time
from eos_runtime import faults
faults.record_to({str(log)!r}, task=0, attempt=0)
faults._dump_stack_on_request()
def waiting_for_something_that_never_comes():
    faults._note("task.mid_version", "zombie")   # noted from here: its stack names this
    time.sleep(600)
waiting_for_something_that_never_comes()
"""])
    try:
        (tmp_path / "task-0.pid").write_text(f"{os.getpid()} 1\n")
        schedule = parse_schedule([{"kind": "zombie", "task": 0, "point": "task.mid_version",
                                    "release": 0}])
        injector = injector_module.Injector(schedule, tmp_path, log, 1, broker_dir=None)
        deadline = time.monotonic() + 30
        while not injector.records[0].get("released") and time.monotonic() < deadline:
            injector.tick()
            time.sleep(0.02)
        monkeypatch.setattr(injector_module, "ZOMBIE_LINGER", 0.5)
        monkeypatch.delenv(injector_module.ZOMBIE_LINGER_ENV, raising=False)
        injector.finish()
        [rec] = injector.records
        assert zombie.wait(10) == -9
        assert rec["zombie_end"] == "process killed 0 s after the run ended", rec
        assert rec["zombie_state"] == "S" and "released_again" not in rec
        assert "waiting_for_something_that_never_comes" in rec["zombie_stack"], rec
        assert not list(tmp_path.glob("*.stack"))   # read into the report, not left behind
    finally:
        zombie.kill()
        zombie.wait()


def test_eos_zombie_linger_sets_how_long_zombies_may_go_on_and_is_checked(tmp_path,
                                                                          monkeypatch):
    from eos_runtime.experiments import injector as injector_module
    from eos_runtime.experiments.injector import ZOMBIE_LINGER, zombie_linger
    from eos_runtime.experiments.schedule import parse_schedule

    monkeypatch.delenv("EOS_ZOMBIE_LINGER", raising=False)
    assert zombie_linger() == ZOMBIE_LINGER
    for raw, seconds in (("240", 240.0), (" 0.5 ", 0.5), ("1e3", 1000.0), ("", ZOMBIE_LINGER)):
        monkeypatch.setenv("EOS_ZOMBIE_LINGER", raw)
        assert zombie_linger() == seconds, raw
    schedule = parse_schedule([{"kind": "zombie", "task": 0, "point": "task.mid_version",
                                "release": 0}])
    for bad in ("0", "-5", "nan", "inf", "1m", "soon"):
        monkeypatch.setenv("EOS_ZOMBIE_LINGER", bad)
        message = f"EOS_ZOMBIE_LINGER must be a positive number of seconds, not '{bad}'"
        with pytest.raises(ConfigError) as info:
            zombie_linger()
        assert str(info.value) == message
        with pytest.raises(ConfigError, match=message):   # before the run, not after it
            injector_module.Injector(schedule, tmp_path, tmp_path / "faults.log", 1)


def test_a_bad_eos_zombie_linger_stops_eos_experiment_before_it_writes_input(tmp_path,
                                                                             monkeypatch):
    from click.testing import CliRunner

    from eos_runtime.cli import main

    monkeypatch.setenv("EOS_ZOMBIE_LINGER", "soon")
    data = tmp_path / "data"
    result = CliRunner().invoke(main, ["experiment", "wordcount", "--seed", "1", "--faults",
                                       "1", "--kinds", "zombie", "--data-dir", str(data),
                                       "--report", str(tmp_path / "report")])
    assert result.exit_code != 0
    assert "EOS_ZOMBIE_LINGER must be a positive number of seconds, not 'soon'" in \
        str(result.exception) + result.output
    assert not data.exists()
