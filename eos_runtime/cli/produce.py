"""``eos produce`` and ``eos consume``: feed a pipeline's input, read its output.

    eos produce lines --generate words --count 10000
    eos consume counts --job wordcount
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

import click

from ..demo import generate_words
from ..errors import ConfigError, DeliveryFailed, TopicNotFound
from ..joblog.committed import read_output
from ..runtime.outputs import kafka_partition
from ..transport import TopicSpec, open_transport
from .jobs import topic_uses
from .options import (
    Interrupted,
    check_writable,
    explicit,
    json_option,
    log_named,
    reading_local_log,
    resolve_transport,
    transport_options,
)

__all__ = ["produce_cmd", "consume_cmd", "PRODUCE_BATCH"]

#: Records ``eos produce`` hands to the producer between two flushes.
PRODUCE_BATCH = 10_000


# --------------------------------------------------------------------------- eos produce

def _read_lines(stream: Any, source: str) -> Iterator[bytes]:
    """Lines of a binary stream without their line ending, each checked to be UTF-8."""
    for number, line in enumerate(stream, 1):
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{source}, line {number}: not UTF-8 ({exc.reason} at byte "
                              f"{exc.start})") from None
        yield line


def produce_records(transport: Any, topic: str, values: Iterable[bytes], partitions: int, *,
                    batch: int = PRODUCE_BATCH, key_separator: bytes | None = None,
                    null_value: bytes | None = None) -> int:
    """Write ``values`` round-robin over ``partitions`` partitions of ``topic``; flush in
    batches of ``batch`` records. Returns how many were written. With ``key_separator``
    each value is ``KEY SEP VALUE``, written keyed where Kafka's default partitioner puts
    the key (so a key's records stay in order, as a table needs), a VALUE equal to
    ``null_value`` as a null value (a table's delete)."""
    written = 0
    with transport.producer() as producer:
        try:
            for value in values:
                if key_separator is None:
                    producer.produce(topic, written % partitions, value)
                else:
                    key, row = _keyed(value, key_separator, written + 1)
                    producer.produce(topic, kafka_partition(key, partitions),
                                     None if row == null_value else row, key=key)
                written += 1
                if written % batch == 0:
                    producer.flush()
        except ConfigError as exc:  # a bad input line: keep what came before it, say so
            try:
                producer.flush()
            except DeliveryFailed as failed:
                raise _stopped(topic, written, failed, at_end=True) from None
            raise ConfigError(f"{exc}; the {written:,} records before it were written to "
                              f"{topic!r}") from None
        except DeliveryFailed as exc:  # e.g. a record too large for Kafka: say what got in
            raise _stopped(topic, written, exc, at_end=False) from None
        except KeyboardInterrupt:  # lines typed, then Ctrl-C: they were meant to go out
            try:
                producer.flush()
            except DeliveryFailed as failed:
                raise _stopped(topic, written, failed, at_end=True) from None
            if sys.stderr.isatty():   # off the line the terminal's "^C" is on, as click does
                click.echo(err=True)
            raise Interrupted(f"interrupted: wrote {written:,} record{_s(written)} to {topic} "
                              f"(what was read before Ctrl-C)") from None
        try:
            producer.flush()
        except DeliveryFailed as exc:
            raise _stopped(topic, written, exc, at_end=True) from None
    return written


def _keyed(line: bytes, separator: bytes, number: int) -> tuple[bytes, bytes]:
    """A ``KEY SEP VALUE`` line as its key and value; ``ConfigError`` naming the record when
    it has no separator or no key."""
    key, sep, value = line.partition(separator)
    if not sep or not key:
        raise ConfigError(f"record {number}: {line[:60].decode('utf-8', 'replace')!r} has no "
                          f"key before {separator.decode()!r} (--key-separator: each line is "
                          f"KEY{separator.decode()}VALUE)")
    return key, value


def _stopped(topic: str, handed: int, exc: DeliveryFailed, *, at_end: bool) -> DeliveryFailed:
    """``eos produce`` stopped on records the log refused: how many were written and how
    many not, why (the transport names the setting to raise), and where reading stopped."""
    lost = getattr(exc, "failure_count", 0) + getattr(exc, "outstanding", 0)
    written = max(handed - lost, 0)
    rest = "" if at_end else f"; the input after record {handed:,} was not read"
    return DeliveryFailed(f"{written:,} record{_s(written)} {_were(written)} written to "
                          f"{topic!r} and {lost:,} {_were(lost)} not: {exc}{rest}")


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _were(n: int) -> str:
    return "was" if n == 1 else "were"


@click.command("produce")
@click.argument("topic")
@transport_options
@click.option("--lines-from", "lines_from", type=click.File("rb"), default=None, metavar="FILE",
              help="One record per line of FILE (UTF-8; - reads stdin); the line ending is "
                   "not part of the record.")
@click.option("--generate", type=click.Choice(["words"]), default=None,
              help="Generate the records instead: words = text lines of 1 to 10 words drawn "
                   "from a fixed vocabulary of 32 (the same --seed, the same lines).")
@click.option("--count", type=click.IntRange(0), default=None, metavar="N",
              help="How many records --generate writes. Default: 10,000.")
@click.option("--seed", type=click.IntRange(0), default=None, metavar="S",
              help="Seed of --generate. Default: 0.")
@click.option("--partitions", type=click.IntRange(1), default=2, show_default=True, metavar="N",
              help="Partitions of the topic when eos produce creates it (when it is missing).")
@click.option("--key-separator", "key_separator", default=None, metavar="SEP",
              help="Each line is KEY SEP VALUE: keyed records, each in the partition Kafka's "
                   "default partitioner gives its key (a table's topic, say).")
@click.option("--null-value", "null_value", default=None, metavar="TEXT",
              help="With --key-separator, a VALUE equal to TEXT is written as a null value "
                   "(deletes its key from a table).")
def produce_cmd(topic: str, bootstrap_servers: str | None, data_dir: str | None,
                lines_from: Any, generate: str | None, count: int | None, seed: int | None,
                partitions: int, key_separator: str | None, null_value: str | None) -> None:
    """Write records to TOPIC (a pipeline's input), creating it if missing.

    Records have no key and values go round-robin over the topic's partitions, unless
    --key-separator splits each line into a key and a value. Prints how many records
    were written.
    """
    if (lines_from is None) == (generate is None):
        raise click.UsageError("give exactly one of --lines-from FILE and --generate words")
    if lines_from is not None and (count is not None or seed is not None):
        raise click.UsageError("--count and --seed go with --generate")
    if key_separator is not None and (not key_separator or lines_from is None):
        raise click.UsageError("--key-separator takes a non-empty SEP and goes with "
                               "--lines-from")
    if null_value is not None and key_separator is None:
        raise click.UsageError("--null-value goes with --key-separator")
    opts = resolve_transport(bootstrap_servers, data_dir)
    check_writable(opts)
    started = time.monotonic()
    with open_transport(**opts) as transport:
        try:
            parts = transport.describe(topic).partitions
        except TopicNotFound:
            transport.create_topics([TopicSpec(topic, partitions)])
            parts = partitions
        else:
            if explicit("partitions") and parts != partitions:
                raise ConfigError(f"topic {topic!r} exists with {parts} partitions, not "
                                  f"{partitions} (--partitions only applies to a topic eos "
                                  f"produce creates)")
        if generate is not None:
            values: Iterable[bytes] = (line.encode() for line in generate_words(
                10_000 if count is None else count, 0 if seed is None else seed))
        else:
            name = "stdin" if lines_from.name in ("-", "<stdin>") else repr(lines_from.name)
            values = _read_lines(lines_from, name)
        written = produce_records(
            transport, topic, values, parts,
            key_separator=None if key_separator is None else key_separator.encode(),
            null_value=None if null_value is None else null_value.encode())
    seconds = time.monotonic() - started
    click.echo(f"wrote {written:,} records to {topic} ({parts} partition{'s' * (parts != 1)}) "
               f"on {log_named(opts)} in {seconds:.2f} s")


# --------------------------------------------------------------------------- eos consume

def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return repr(data)


@click.command("consume")
@click.argument("topic")
@transport_options
@click.option("--job", default=None, metavar="NAME",
              help="The job (pipeline name) whose sink wrote TOPIC: on the local log, only "
                   "what its checkpoints committed is shown (Kafka reads read_committed "
                   "anyway). Default: on the local log, the one job whose sink is TOPIC "
                   "(from the jobs' control topics).")
@click.option("--all", "read_all", is_flag=True,
              help="Read every record, uncommitted ones too.")
@json_option("Print a JSON list of {partition, offset, key, value} (a failed command: a "
             "JSON error object).")
@click.option("--count", "only_count", is_flag=True, help="Print only the number of records.")
def consume_cmd(topic: str, bootstrap_servers: str | None, data_dir: str | None,
                job: str | None, read_all: bool, as_json: bool, only_count: bool) -> None:
    """Print the records of TOPIC up to its current end, as key<TAB>value lines.

    Partition by partition, in offset order. Keys and values are shown as UTF-8 text
    where they decode, else as the repr of the bytes; a missing key is an empty field.

    By default only committed records are shown: on Kafka through read_committed, on
    the local log (which has no transactions) through the commit records of the job
    named by --job (an at-least-once job's output is all committed, as on Kafka). On the
    local log without --job, the one job whose sink is TOPIC is read; with several, pass
    --job (or --all).
    """
    if job is not None and read_all:
        raise click.UsageError("--job and --all exclude each other")
    if as_json and only_count:
        raise click.UsageError("--json and --count exclude each other")
    opts = resolve_transport(bootstrap_servers, data_dir)
    with reading_local_log(opts), open_transport(**opts) as transport:
        transport.describe(topic)  # TopicNotFound names the topic
        if not read_all and not transport.supports_transactions:
            if job is None:
                job = _sink_job(transport, topic, opts)
                if not as_json:
                    whose = ("dead letters are" if topic == f"{job}.dead-letters"
                             else "sink is")
                    click.echo(f"committed output of job {job!r} (its {whose} {topic!r})",
                               err=True)
            try:
                transport.describe(f"{job}.changelog")
            except TopicNotFound:
                raise ConfigError(f"job {job!r} has no change log ({job}.changelog) on "
                                  f"{log_named(opts)}: --job must name the pipeline that wrote "
                                  f"{topic!r}") from None
        records = read_output(transport, topic, job=job, committed=not read_all)
    if only_count:
        click.echo(str(len(records)))
    elif as_json:
        click.echo(json.dumps([{"partition": r.partition, "offset": r.offset,
                                "key": _text(r.key), "value": _text(r.value)}
                               for r in records], indent=1, ensure_ascii=False))
    else:
        _write_lines(f"{_field(r.key)}\t{_field(r.value)}" for r in records)


def _sink_job(transport: Any, topic: str, opts: dict[str, Any]) -> str:
    """The one job whose sink is ``topic`` (or whose dead letters it holds,
    ``<job>.dead-letters``, as ``eos topics`` attributes them), from the jobs' control
    topics; an error naming them when there are several, or saying what to pass when there
    is none."""
    jobs = sorted({u["job"] for u in topic_uses(transport, [topic])[topic]
                   if u["role"] in ("sink", "dead-letters")})
    if len(jobs) == 1:
        return jobs[0]
    if jobs:
        names = ", ".join(repr(j) for j in jobs)
        raise ConfigError(f"{topic!r} is the sink of {len(jobs)} jobs on {log_named(opts)}: "
                          f"{names}; pass --job NAME to say whose commits to read (or --all "
                          f"to read every record)")
    raise ConfigError(f"no job on {log_named(opts)} has {topic!r} as its sink, and the local log "
                      f"has no transactions: pass --job NAME (the job whose sink wrote it), or "
                      f"--all to read every record, uncommitted too")


def _field(data: bytes | None) -> str:
    text = _text(data)
    return "" if text is None else text


def _write_lines(lines: Iterable[str], chunk: int = 5_000) -> None:
    """Write to stdout in chunks; a closed pipe (``eos consume ... | head``) ends quietly."""
    out = sys.stdout
    try:
        buf: list[str] = []
        for line in lines:
            buf.append(line)
            if len(buf) >= chunk:
                out.write("\n".join(buf) + "\n")
                buf.clear()
        if buf:
            out.write("\n".join(buf) + "\n")
        out.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's exit flush must not fail again
