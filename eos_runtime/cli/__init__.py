"""The ``eos`` command line."""

from __future__ import annotations

import json
import logging
import sys

import click

from ..errors import EosError
from ..redact import redact
from .options import (
    json_error,
    json_mode,
    json_option,
    kafka_client_config,
    kafka_settings_options,
    n_of,
)


class _Commands(click.Group):
    """A group whose commands are imported when one is asked for, not with the group:
    ``eos consume`` does not import the runner, the experiments or the bench (a third of
    a second of every command's start; docs/cli.md)."""

    #: command name -> "module:attribute", relative to this package. No module here may
    #: be named like an attribute of the package: importing it would replace that
    #: attribute (``run``, the console entry point, once ``eos run`` was loaded).
    LAZY = {
        "kafka": "..broker.cli:kafka",            # the project's own Kafka broker
        "run": ".run_command:run_cmd",            # run a pipeline, or stop its run
        "stop": ".run_command:stop_cmd",
        "produce": ".produce:produce_cmd",        # feed its input, read its output
        "consume": ".produce:consume_cmd",
        "jobs": ".jobs:jobs_cmd",                 # the jobs that ran on a transport,
        "topics": ".jobs:topics_cmd",             # what each topic is for, and
        "reset": ".jobs:reset_cmd",               # starting a job from scratch
        "checkpoint": ".ops:checkpoint_group",    # where a job's sources start
        "startpoint": ".ops:startpoint_group",
        "experiment": ".experiment:experiment_cmd",   # a workload under injected faults
        "bench": ".bench:bench_cmd",              # workloads on eos_runtime and its peers
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = self.LAZY.get(cmd_name)
        if where is None:
            return super().get_command(ctx, cmd_name)
        import importlib
        module, attr = where.split(":")
        command = getattr(importlib.import_module(module, __name__), attr)
        assert isinstance(command, click.Command) and command.name == cmd_name, where
        return command


@click.group(cls=_Commands)
@click.version_option(package_name="eos_runtime")
def main() -> None:
    """eos_runtime: exactly-once stream processing on Spark and Kafka."""


@main.command()
@click.option("--data-dir", default=".eos/smoke", show_default=True, metavar="DIR",
              type=click.Path(file_okay=False),
              help="Directory of the embedded local log (apart from eos demo's and the data of "
                   "eos run).")
@click.option("--bootstrap-servers", envvar="EOS_BOOTSTRAP_SERVERS", default=None,
              metavar="HOST:PORT",
              help="Also run on this Kafka broker (env EOS_BOOTSTRAP_SERVERS).")
@click.option("--records", default=20_000, show_default=True, type=click.IntRange(1),
              metavar="N", help="Envelopes per round trip.")
@kafka_settings_options
@json_option("Print the results as JSON (a failed smoke run: a JSON error object).")
def smoke(data_dir: str, bootstrap_servers: str | None, records: int, as_json: bool) -> None:
    """Round trip of protocol records through the local log (and Kafka, with a transaction
    check)."""
    # the smoke run's progress bar (rich) loads with the command, not at `eos --help`
    from .. import smoke as smoke_run

    results = smoke_run.run(data_dir=data_dir, bootstrap_servers=bootstrap_servers,
                            records=records, show_progress=not as_json and sys.stderr.isatty(),
                            **kafka_client_config(bootstrap_servers))
    if as_json:
        click.echo(json.dumps({"ok": True, "results": [r.as_dict() for r in results]}, indent=2))
        return
    for r in results:
        click.echo(f"[{r.transport}] {r.records} records in {r.seconds:.2f}s")
        for check in r.checks:
            click.echo(f"  ok: {check}")
    click.echo("smoke run passed")


@main.command()
@click.option("--data-dir", default=".eos/demo", show_default=True, metavar="DIR",
              type=click.Path(file_okay=False),
              help="Where the demo keeps its local log and state (apart from the data of eos "
                   "run): cleared first if the demo made it; a non-empty directory it did not "
                   "make is refused.")
@click.option("--bootstrap-servers", default=None, metavar="HOST:PORT",
              help="Run on this Kafka broker instead of the local log (EOS_BOOTSTRAP_SERVERS is "
                   "not read: the demo runs on Kafka only when asked here).")
@click.option("--lines", "n_lines", default=20_000, show_default=True, type=click.IntRange(1),
              metavar="N", help="Text lines to count words in.")
@click.option("--guarantee", type=click.Choice(["exactly-once", "at-least-once"]),
              default="exactly-once", show_default=True, help="Processing guarantee of the job.")
@click.option("--keep-topics", is_flag=True,
              help="On Kafka, keep the topics the run made (its job's, named after it); "
                   "by default they are deleted once the output is verified. A failing demo "
                   "keeps them and names them.")
@kafka_settings_options
@json_option("Print the result as JSON (a failed demo: a JSON error object).")
def demo(data_dir: str, bootstrap_servers: str | None, n_lines: int, guarantee: str,
         keep_topics: bool, as_json: bool) -> None:
    """The main job: word count end to end on Spark, output verified against an oracle."""
    from ..demo import prepare_demo_dir, run_demo
    from ..transport import open_transport

    client = kafka_client_config(bootstrap_servers)
    # A refused directory or an unreachable broker is the only line the user sees.
    if bootstrap_servers:
        open_transport(bootstrap_servers=bootstrap_servers, **client).close()
    else:
        prepare_demo_dir(data_dir)
    if not as_json:
        where = f"Kafka {bootstrap_servers}" if bootstrap_servers else "the embedded local log"
        click.echo(f"word count over {n_lines} generated lines, {guarantee}, on {where} ...",
                   err=True)
    result = run_demo(data_dir=data_dir, bootstrap_servers=bootstrap_servers, lines=n_lines,
                      guarantee=guarantee, keep_topics=keep_topics, **client)
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
        return
    s = result.summary
    click.echo(f"ran {n_of(len(s.tasks), 'task')} in {n_of(len(s.plan), 'stage')}: "
               f"{n_of(s.input_records, 'line')} in {s.seconds:.1f} s "
               f"({s.records_per_second:,.0f} lines/s, Spark start-up included)")
    click.echo(f"verified: {n_of(result.output_records, 'committed output record')} for "
               f"{n_of(result.words, 'word')}; each word seen n times has exactly the counts 1..n"
               if guarantee == "exactly-once" else
               f"verified: no count lost; {n_of(result.duplicates, 'duplicate record')}")
    if result.removed_topics:
        click.echo(f"removed the run's {n_of(len(result.removed_topics), 'topic')} from the "
                   f"broker (--keep-topics keeps them)")
    if result.kept_topics:
        click.echo(f"kept on the broker: {', '.join(result.kept_topics)}")


def run() -> None:
    """Console entry point: project errors become one clear line and exit code 1 (with
    ``--json``, also a JSON error object on stdout)."""
    json_mode["on"] = False
    _quiet_third_party_logging()
    try:
        main(standalone_mode=False, prog_name="eos")
    except EosError as exc:
        _fail(f"{exc}", type(exc).__name__)
        sys.exit(1)
    except click.exceptions.Abort:   # Ctrl-C (eos run handles its own: stop, then cancel)
        _fail("interrupted", "Interrupted")
        sys.exit(130)
    except click.ClickException as exc:
        if json_mode["on"]:
            click.echo(json_error(exc.format_message(), type(exc).__name__))
        exc.show()
        sys.exit(exc.exit_code)


class _OwnWarnings(logging.Handler):
    """The root logger's one handler under ``eos``: the project's warnings as
    ``warning: ...`` lines; other libraries' records are dropped. Without a root handler, a
    library calling ``logging.exception`` (py4j does, when a Ctrl-C cancel closes its
    gateway) makes Python print a traceback to the terminal."""

    def emit(self, record: logging.LogRecord) -> None:
        if (record.name.startswith("eos_runtime") and record.levelno >= logging.WARNING
                and not record.name.endswith(".librdkafka")):   # the client's own chatter
            click.echo(f"warning: {redact(record.getMessage())}", err=True)


def _quiet_third_party_logging() -> None:
    root = logging.getLogger()
    if not root.handlers:   # an application that configured logging keeps its own
        root.addHandler(_OwnWarnings())


def _fail(message: str, kind: str) -> None:
    message = redact(message)    # an error built from a setting must not show its secret
    if json_mode["on"]:
        click.echo(json_error(message, kind))
    click.echo(f"error: {message}", err=True)
