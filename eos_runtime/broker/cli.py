"""``eos kafka ...``: fetch, start, stop and query the project's own Kafka broker.

Only the bootstrap address goes to stdout (``export EOS_BOOTSTRAP_SERVERS=$(eos kafka up)``);
progress and diagnostics go to stderr.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from .. import limits
from .config import DEFAULT_PORT, HOST, check_sasl_plain
from .jars import KAFKA_VERSION, fetch
from .kafka import KafkaBroker
from .rundir import default_run_dir, find_running, is_run_dir, stop_running

_DIR_HELP = ("Run dir of the broker (config, data, logs, state file). "
             "Default: $EOS_KAFKA_DIR, else .eos/kafka under the current directory.")


def _run_dir(value: str | None) -> Path:
    return Path(value).absolute() if value else default_run_dir()


def _progress_to_stderr() -> None:
    logger = logging.getLogger("eos_runtime.broker")
    if not any(getattr(h, "_eos_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("eos kafka: %(message)s"))
        handler._eos_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


dir_option = click.option("--dir", "run_dir", type=click.Path(file_okay=False), default=None,
                          help=_DIR_HELP)
version_option = click.option("--kafka-version", default=KAFKA_VERSION, show_default=True,
                              envvar="EOS_KAFKA_VERSION",
                              help="Kafka release whose jars to use (env EOS_KAFKA_VERSION).")


@click.group("kafka")
def kafka() -> None:
    """The project's own single-node Kafka broker (KRaft, 127.0.0.1, transactions on)."""


@kafka.command("fetch")
@version_option
@click.option("--force", is_flag=True, help="Fetch again even if the cache is complete.")
def fetch_cmd(kafka_version: str, force: bool) -> None:
    """Fetch the Kafka jars from Maven Central into the cache (once); print the libs dir.

    Cache: $EOS_CACHE_DIR/kafka-<version>/libs, else ~/.cache/eos_runtime/kafka-<version>/libs.
    Needs Java 17+ and Maven.
    """
    _progress_to_stderr()
    click.echo(str(fetch(kafka_version, force=force)))


@kafka.command("up")
@dir_option
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help=f"Port of the PLAINTEXT listener on {HOST}. "
                   f"Default: {DEFAULT_PORT} if it is free, else any free port.")
@version_option
@click.option("--timeout", type=limits.option("broker_start_timeout"), default=60.0,
              show_default=True,
              help="Seconds to wait for the broker to answer.")
@click.option("--fresh", is_flag=True,
              help="Delete data kept from an earlier run (--keep-data, or a crash) first "
                   "(a running broker is left alone).")
@click.option("--sasl-plain", "sasl_plain", default=None, metavar="USER:PASSWORD",
              envvar="EOS_KAFKA_SASL_PLAIN", show_envvar=False,
              help="Also listen with SASL_PLAINTEXT (mechanism PLAIN) for this one user, and "
                   "print that listener's address instead (env EOS_KAFKA_SASL_PLAIN keeps the "
                   "password off the command line).")
@click.option("--sasl-port", type=click.IntRange(1, 65535), default=None, metavar="N",
              help=f"Port of the --sasl-plain listener on {HOST}. Default: any free port.")
def up_cmd(run_dir: str | None, port: int | None, kafka_version: str, timeout: float,
           fresh: bool, sasl_plain: str | None, sasl_port: int | None) -> None:
    """Start the broker detached (it outlives this command); print its bootstrap address.

    If it is running already, only print its address.
    """
    _progress_to_stderr()
    rd = _run_dir(run_dir)
    credentials = _sasl_pair(sasl_plain) if sasl_plain is not None else None
    if sasl_port is not None and credentials is None:
        raise click.UsageError("--sasl-port goes with --sasl-plain")
    running = find_running(rd)
    if running is not None:
        if port is not None and running.port != port:
            raise click.UsageError(f"the broker of {rd} runs at {running.bootstrap_servers}, "
                                   f"not on port {port}; run `eos kafka down --dir {rd}` first")
        if credentials is not None and running.sasl_user != credentials[0]:
            had = (f"with a SASL listener for user {running.sasl_user!r}" if running.sasl_user
                   else "without a SASL listener")
            raise click.UsageError(f"the broker of {rd} runs {had}; run `eos kafka down "
                                   f"--dir {rd}` first")
        click.echo(running.client_servers)
        return
    if fresh:
        stop_running(rd)                  # nothing runs: only removes the kept data
    broker = KafkaBroker(rd, port, version=kafka_version, startup_timeout=timeout,
                         sasl_plain=credentials, sasl_port=sasl_port,
                         preferred_port=DEFAULT_PORT)
    broker.start()
    state = broker.state
    assert state is not None
    if state.sasl_port:
        click.echo(f"eos kafka: SASL/PLAIN listener for user {state.sasl_user!r} at "
                   f"{state.client_servers} (clients: -X security.protocol=SASL_PLAINTEXT -X "
                   f"sasl.mechanism=PLAIN -X sasl.username={state.sasl_user} -X "
                   f"sasl.password=...); the broker's own PLAINTEXT listener, without "
                   f"authentication, stays at {state.bootstrap_servers}", err=True)
    click.echo(state.client_servers)


def _sasl_pair(value: str) -> tuple[str, str]:
    user, sep, password = value.partition(":")
    if not sep:
        raise click.UsageError("--sasl-plain takes USER:PASSWORD")
    check_sasl_plain(user, password)
    return user, password


@kafka.command("down")
@dir_option
@click.option("--keep-data", is_flag=True, help="Keep the topics for the next `up`.")
@click.option("--timeout", type=limits.option("broker_stop_timeout"), default=30.0,
              show_default=True,
              help="Seconds between SIGTERM and SIGKILL.")
def down_cmd(run_dir: str | None, keep_data: bool, timeout: float) -> None:
    """Stop the broker and delete its data (unless --keep-data). Logs stay in <dir>/logs.

    A directory no broker ever ran from (no run dir of `eos kafka up`) is left untouched.
    """
    _progress_to_stderr()
    rd = _run_dir(run_dir)
    if rd.exists() and not is_run_dir(rd):
        # No broker ever ran from it: nothing in it is the broker's to stop or delete.
        click.echo(f"no Kafka broker runs from {rd}: it is not a broker run dir (`eos kafka up` "
                   f"never ran there), so nothing in it was touched", err=True)
        return
    if stop_running(rd, timeout=timeout, keep_data=keep_data):
        click.echo(f"stopped the Kafka broker of {rd}", err=True)
    else:
        click.echo(f"no Kafka broker was running from {rd}", err=True)


@kafka.command("status")
@dir_option
def status_cmd(run_dir: str | None) -> None:
    """Print the bootstrap address and exit 0 if the broker runs; else exit 1."""
    rd = _run_dir(run_dir)
    state = find_running(rd)
    if state is None:
        click.echo(f"not running (run dir {rd})", err=True)
        sys.exit(1)
    click.echo(state.client_servers)
    sasl = (f", SASL/PLAIN listener for user {state.sasl_user!r} (PLAINTEXT at "
            f"{state.bootstrap_servers})" if state.sasl_port else "")
    click.echo(f"pid {state.pid}, Kafka {state.version}, controller port {state.controller_port}, "
               f"log {state.log_file}{sasl}", err=True)
