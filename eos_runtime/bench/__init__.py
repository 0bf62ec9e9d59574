"""``eos bench``: the same workloads on several stream processors, side by side, verified.

    workloads.py     what runs: input generators, oracles, the eos_runtime pipeline of each
    vocabulary.py    wordcount's text: a Zipf vocabulary (default) or the small one
    windows.py       the windows workload: views per page per tumbling window, final, and
                     its window-close latency
    systems.py       who runs it, behind one interface: eos_runtime in both guarantees, the
                     raw client dataflow
    peers.py         the peers: Quix Streams, Spark, Kafka Streams, faust, PyFlink (each
                     installed on first use, or skipped with the reason)
    lineup.py        every system by name, in the order a bench runs them
    raw_dataflow.py  the raw confluent-kafka dataflow, one process per partition per stage
    quix_app.py      the Quix Streams peer's application (runs on Quix's own venv)
    spark_app.py     the Spark Structured Streaming peer's application
    spark_jars.py    Spark's Kafka connector, and its token provider built from source
    kafka_streams.py the Kafka Streams peer, built on first use from kafka_streams_app/
                     (its Java source and the pom of its classpath)
    faust_app.py     the faust-streaming peer's worker (runs on faust's own venv)
    faust_peer.py    that venv, installed on first use
    pyflink_app.py   the PyFlink peer's job (runs on PyFlink's own venv)
    pyflink_peer.py  that venv and Flink's Kafka connector jar, set up on first use
    peer_venv.py     a Python peer's venv in the bench cache (faust's, PyFlink's)
    kafka.py         the bench's own Kafka I/O: topics with broker append times, reading
                     output with its append times
    visibility.py    when output became readable: last stable offsets, sampled in a
                     process of its own
    burst.py         the burst producer, a process of its own
    latency.py       steady input with probes; latency percentiles; recovery after a kill
    memory.py        peak resident memory of a system's processes, from /proc
    measure.py       one measured run: start, warm up, burst, watch, stop, verify
    report.py        medians, spread and ratios; JSON, PNG and markdown
    more_measures.py the report's latency, recovery, memory and checkpoint sections

docs/benchmarks.md describes the method and the report.
"""
