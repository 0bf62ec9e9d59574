"""``eos experiment`` of a graph workload (clickstream: a ``clicks`` stream looked up in a
``users`` table, two sinks) under the operator's actions: several runs of the job, the
model following both input topics, every sink judged from its own marks."""

from __future__ import annotations

import json

import pytest

from eos_runtime.experiments.workloads import BUILTIN

# tasks: users table 0-1, clicks 2-3, the lookup 4-5, the counts 6-7
EVERY_ACTION = """
[[fault]]
kind = "stop"            # run 1 ends with final checkpoints
run = 1
task = 6
point = "task.checkpoint.after_commit"

[[fault]]
kind = "startpoint"      # clicks[0] back to offset 20: read again, counted again
run = 2
partition = 0
to = "offset"
offset = 20

[[fault]]
kind = "checkpoint"      # clicks[1] back to offset 10; its file rewrites clicks[0] too
run = 2
partition = 1
offset = 10

[[fault]]
kind = "take-over"       # a second driver takes run 2 over
run = 2
task = 3
point = "task.checkpoint.after_commit"

[[fault]]
kind = "reset"           # a new epoch: state, table store and positions gone
run = 3
"""


def _run_json(report, seed):
    return json.loads((report / f"seed-{seed}" / "run.json").read_text())


def test_clickstream_takes_every_operator_action_on_the_local_log(tmp_path):
    """A Startpoint, a checkpoint write, a stop, a take-over and a reset of the graph, each
    as the operator does it. `eos checkpoint write` rewrites every line it shows with an
    offset; since 2026-11-29 a partition with a Startpoint pending is shown empty, so
    clicks[0] keeps the Startpoint set just before (20) rather than having it replaced by
    its committed offset, and the model follows the lines written (before it did, this
    schedule failed with 90 results lost)."""
    from test_cli import ok_here

    (tmp_path / "g.toml").write_text(EVERY_ACTION)
    ok_here("experiment", "clickstream", "--schedule", "g.toml", "--seed", "5", "--lines", "600",
            "--report", "report", cwd=tmp_path, timeout=600)
    run = _run_json(tmp_path / "report", 5)
    assert run["passed"] and all(f["fired"] for f in run["faults"]), run["faults"]
    runs = [r for r in run["runs"] if "run" in r]
    assert [r["run"] for r in runs] == [1, 2, 3]
    # clicks[0] starts at its Startpoint, 20: the checkpoint file shows its line empty (a
    # Startpoint is pending), so the write keeps it (it wrote the committed offset back
    # over it before); clicks[1] starts at the checkpoint write's 10; the table goes on
    left = runs[0]["committed"] if runs[0]["early"] else runs[0]["ends"]
    assert runs[1]["starts"] == {"clicks": [20, 10], "users": left["users"]}
    assert runs[2]["starts"] == {"clicks": [0, 0], "users": [0, 0]}    # after the reset
    commands = [c["command"] for r in run["runs"] for c in r.get("commands", [])]
    assert any(c.startswith("eos startpoint set clickstream-s5-") and " clicks 0 --offset 20"
               in c for c in commands), commands
    [reset] = [f for f in run["faults"] if f["kind"] == "reset"]
    assert set(reset["marks"]) == {"clicks-seen", "clicks-per-user"}
    # epoch 1 read clicks[1] from 10 twice; epoch 2 read all the input once
    once = BUILTIN["clickstream"].sinks_oracle(BUILTIN["clickstream"].generate(5, 600))
    all_once = sum(len(v) for e in once.values() for v in e.results.values())
    assert run["verdict"]["expected"] > all_once + 2 * (left["clicks"][1] - 10)


@pytest.mark.kafka
def test_clickstream_under_random_operator_actions_on_kafka(kafka_bootstrap, tmp_path):
    """Seed 113 draws 91 rows appended to the users table while its task 1 is held, then
    a reset, then a crash of a clicks task before its first commit after it."""
    from test_cli import ok_here

    ok_here("experiment", "clickstream", "--seed", "113", "--faults", "2", "--kinds",
            "startpoint,checkpoint,reset,start,stop,cancel,take-over,append", "--lines", "600",
            "--bootstrap-servers", kafka_bootstrap, "--report", "report", cwd=tmp_path,
            timeout=600)
    run = _run_json(tmp_path / "report", 113)
    assert run["passed"], run["verdict"]
    kinds = [f["kind"] for f in run["faults"] if f["fired"]]
    assert "append" in kinds and "reset" in kinds, run["faults"]
    [append] = [f for f in run["faults"] if f["kind"] == "append"]
    assert "-users partitions [1]" in append["note"], append


@pytest.mark.kafka
def test_a_sink_judged_without_its_mark_fails(kafka_bootstrap, tmp_path):
    """The bookkeeping can fail: after a reset, each sink's output is judged from the
    offsets it had at the reset. On Kafka the output of the epoch before stays committed;
    judging one sink from its start instead counts that output again."""
    from eos_runtime.experiments.setup import job_pipeline
    from eos_runtime.experiments.verify import verify_sinks
    from eos_runtime.transport import open_transport

    from test_cli import ok_here

    (tmp_path / "r.toml").write_text('[[fault]]\nkind = "reset"\nrun = 2\n')
    # --keep-data: a passing run's topics are judged again below (else removed with it)
    ok_here("experiment", "clickstream", "--schedule", "r.toml", "--seed", "8", "--lines", "400",
            "--bootstrap-servers", kafka_bootstrap, "--report", "report", "--keep-data",
            cwd=tmp_path, timeout=600)
    run = _run_json(tmp_path / "report", 8)
    assert run["passed"], run["verdict"]
    [reset] = [f for f in run["faults"] if f["kind"] == "reset"]
    marks = {sink: {int(p): o for p, o in m.items()} for sink, m in reset["marks"].items()}
    assert all(o > 0 for m in marks.values() for o in m.values()), marks
    w = BUILTIN["clickstream"]
    # run 2, after the reset, read everything from the start: the oracle over all input
    expected = w.sinks_oracle(w.generate(8, 400))
    pipeline = job_pipeline(w, run["job"], "kafka")
    with open_transport(bootstrap_servers=kafka_bootstrap) as t:
        assert verify_sinks(t, pipeline, expected, "exactly-once", run["job"], "kafka",
                            marks=marks).passed
        for ignored in marks:
            wrong = verify_sinks(t, pipeline, expected, "exactly-once", run["job"], "kafka",
                                 marks={**marks, ignored: {}})
            assert not wrong.passed and wrong.duplicated > 0, ignored
        t.delete_topics(run["kept_topics"])


def test_a_reset_offset_names_one_stream_and_never_moves_a_table(tmp_path):
    """What `eos run --reset-offset clicks` and a `start` fault's reset-offset now do:
    reset the stream named, not the users table beside it. A table moved back would feed
    its lookups rows older than those they already saw (a run option, reset_offset=True,
    did that: it reset every topic the job reads)."""
    from eos_runtime.plan import plan_job
    from eos_runtime.transport import TopicSpec, open_transport

    pipeline = BUILTIN["clickstream"].make_pipeline()
    pipeline.reset_source("clicks")
    with open_transport(data_dir=str(tmp_path)) as t:
        t.create_topics([TopicSpec("clicks", 2), TopicSpec("users", 2)])
        plan = plan_job(pipeline, t)
    reset = {st.input_topic: st.source.reset_offset for st in plan.stages if st.source}
    assert reset == {"clicks": True, "users": False}


def test_a_graph_soak_s_input_is_known_again_by_its_stamps(tmp_path):
    """A graph soak is judged on the values whose records reached their topics: a table's
    deletes are all alike (same key, no value), so each record is known by its stamp."""
    from eos_runtime.errors import EosError
    from eos_runtime.experiments.soak import graph_inputs
    from eos_runtime.transport import TopicSpec, open_transport

    values = ["delete u1", "click 1", "delete u1", "click 2"]
    batches = [[("users", 0, b"u1", None)], [("clicks", 1, None, b"1")],
               [("users", 0, b"u1", None)], [("clicks", 0, None, b"2")]]
    with open_transport(data_dir=str(tmp_path)) as t:
        t.create_topics([TopicSpec("users", 2), TopicSpec("clicks", 2)])
        with t.producer() as p:
            for i in (0, 1, 3):   # value 2 never arrived (say, an outage took it)
                [(topic, part, key, value)] = batches[i]
                p.produce(topic, part, value, key=key, timestamp=1000 + i)
            p.flush()
        assert graph_inputs(t, batches, values, 1000) == ["delete u1", "click 1", "click 2"]
        with t.producer() as p:
            p.produce("clicks", 0, b"not fed", timestamp=999)
            p.flush()
        with pytest.raises(EosError, match=r"clicks\[0\] offset 1 holds a record the soak"):
            graph_inputs(t, batches, values, 1000)


def test_a_soak_of_the_graph_passes_under_faults(tmp_path):
    from test_cli import ok_here

    ok_here("experiment", "clickstream", "--duration", "15s", "--rate", "100", "--faults", "2",
            "--kinds", "crash,lose-state", "--seed", "4", "--report", "report", cwd=tmp_path,
            timeout=600)
    run = _run_json(tmp_path / "report", 4)
    # a loaded machine may feed less than 15 s x 100 or reach a fault's moment too late:
    # the verdict on what was fed is the point
    assert run["passed"], run["verdict"]
    assert 0 < run["soak"]["fed"] == run["soak"]["handed_to_producer"], run["soak"]
    assert run["verdict"]["expected"] > run["soak"]["fed"], run["verdict"]   # both sinks
