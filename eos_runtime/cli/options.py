"""What the ``eos`` commands share: ``--json``, the transport options (``--bootstrap-servers``,
``--data-dir``, librdkafka settings) and how they resolve, ``--name``/``--source``/``--sink``
overrides of a pipeline file, and small text helpers.

Every command talks to one log: Kafka with ``--bootstrap-servers`` (or env
``EOS_BOOTSTRAP_SERVERS``), else the embedded local log in ``--data-dir`` (default
``.eos/data``). An explicit ``--data-dir`` wins over ``EOS_BOOTSTRAP_SERVERS`` from the
environment; both on the command line is a usage error.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from ..errors import ConfigError
from ..kafka_settings import merge, parse_assignments, read_properties
from ..redact import redact

DEFAULT_DATA_DIR = ".eos/data"

# --------------------------------------------------------------------------- --json

#: Set once a command's ``--json`` flag is on: ``eos_runtime.cli`` then prints a
#: failure as a JSON error object on stdout too, so ``eos ... --json | jq`` always gets one.
json_mode = {"on": False}


def _note_json(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        json_mode["on"] = True
    return value


def json_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--json``: a machine-readable result on stdout, and on failure a JSON error object
    (``{"ok": false, "error": ..., "type": ...}``)."""
    return click.option("--json", "as_json", is_flag=True, callback=_note_json, help=help)


def json_error(message: str, kind: str) -> str:
    """The JSON error object a failed ``--json`` command prints on stdout."""
    return json.dumps({"ok": False, "error": redact(message), "type": kind})


# --------------------------------------------------------------------------- transport options

def _keep_kafka_setting(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    ctx.meta[f"eos.{param.name}"] = value
    ctx.meta[f"eos.{param.name}.source"] = ctx.get_parameter_source(param.name or "")
    return value


def kafka_settings_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--kafka-config FILE`` and ``-X KEY=VALUE``: librdkafka settings for every Kafka
    client of the command (``kafka_settings.py``). Kept in the click context, not passed
    as arguments: ``resolve_transport`` picks them up, so every command that takes the
    transport options has them without a parameter of its own."""
    fn = click.option(
        "-X", "--kafka-setting", "kafka_setting", multiple=True, metavar="KEY=VALUE",
        expose_value=False, callback=_keep_kafka_setting,
        help="One librdkafka setting for every Kafka client (repeatable; -X for short, as in "
             "kcat; wins over --kafka-config), e.g. -X security.protocol=SASL_SSL.")(fn)
    fn = click.option(
        "--kafka-config", "kafka_config", metavar="FILE", envvar="EOS_KAFKA_CONFIG",
        expose_value=False, callback=_keep_kafka_setting, type=click.Path(dir_okay=False),
        help="librdkafka settings for every Kafka client, key=value a line (Java properties; "
             "# comments): SASL and TLS settings, say (env EOS_KAFKA_CONFIG).")(fn)
    return fn


def kafka_settings() -> dict[str, Any] | None:
    """The settings ``--kafka-config`` and ``-X`` gave this command (None: none)."""
    meta = click.get_current_context().meta
    path, pairs = meta.get("eos.kafka_config"), meta.get("eos.kafka_setting") or ()
    if path is None and not pairs:
        return None
    return merge(read_properties(path) if path is not None else None, parse_assignments(pairs))


def _explicit_kafka_settings() -> bool:
    meta = click.get_current_context().meta
    return bool(meta.get("eos.kafka_setting")) or (
        meta.get("eos.kafka_config") is not None
        and meta.get("eos.kafka_config.source") != ParameterSource.ENVIRONMENT)


def transport_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--bootstrap-servers`` / ``--data-dir`` and the Kafka settings, shared by the
    commands that read or write a job's topics.

    Every option's help is its meaning in docs/cli.md, word for word, and a trailing
    ``Default: ...`` sentence is its default there (tests/test_cli_docs.py)."""
    fn = kafka_settings_options(fn)
    fn = click.option(
        "--data-dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
        help=f"Directory of the embedded local log, used when no Kafka broker is given; an "
             f"explicit --data-dir wins over EOS_BOOTSTRAP_SERVERS from the environment. "
             f"Default: {DEFAULT_DATA_DIR}.")(fn)
    fn = click.option(
        "--bootstrap-servers", envvar="EOS_BOOTSTRAP_SERVERS", default=None, metavar="HOST:PORT",
        help="Kafka at HOST:PORT[,HOST:PORT...] (env EOS_BOOTSTRAP_SERVERS); without it, the "
             "embedded local log.")(fn)
    return fn


def resolve_transport(bootstrap_servers: str | None, data_dir: str | None) -> dict[str, Any]:
    """The ``open_transport`` keywords the options select (see the module docstring): on
    Kafka with ``client_config`` when ``--kafka-config`` or ``-X`` gave settings."""
    ctx = click.get_current_context()
    bootstrap_servers = (bootstrap_servers or "").strip() or None
    if data_dir is not None and bootstrap_servers:
        if ctx.get_parameter_source("bootstrap_servers") == ParameterSource.ENVIRONMENT:
            bootstrap_servers = None  # an explicit --data-dir beats the environment
        else:
            raise click.UsageError("give --bootstrap-servers (Kafka) or --data-dir (the local "
                                   "log), not both")
    if bootstrap_servers:
        return {"bootstrap_servers": bootstrap_servers, **kafka_client_config(bootstrap_servers)}
    kafka_client_config(None)
    return {"data_dir": data_dir or DEFAULT_DATA_DIR}


def kafka_client_config(bootstrap_servers: str | None) -> dict[str, Any]:
    """``{"client_config": settings}`` when ``--kafka-config`` or ``-X`` gave settings
    (``{}`` when not); a usage error when they were given without a Kafka broker."""
    if not bootstrap_servers:
        if _explicit_kafka_settings():
            raise click.UsageError("--kafka-config and -X are Kafka client settings: give them "
                                   "with --bootstrap-servers (the local log takes none)")
        return {}
    settings = kafka_settings()
    return {"client_config": settings} if settings else {}


def with_pipeline_settings(opts: dict[str, Any], pipeline: Any) -> dict[str, Any]:
    """``opts`` with the pipeline's ``kafka_config`` under the command's own settings."""
    if "bootstrap_servers" not in opts or not getattr(pipeline, "kafka_config", None):
        return opts
    return {**opts, "client_config": merge(pipeline.kafka_config, opts.get("client_config"))}


def check_writable(opts: dict[str, Any]) -> None:
    """A command that writes to the local log fails here, naming the directory, instead
    of over an OSError traceback halfway through."""
    if "data_dir" in opts:
        root = Path(opts["data_dir"])
        from ..runner import check_writable_dir  # loaded with a command, not with `eos`
        for d in (root, root / "topics"):
            check_writable_dir(d, "data directory", "--data-dir")


@contextlib.contextmanager
def reading_local_log(opts: dict[str, Any]) -> Iterator[None]:
    """Reads work on a read-only local log; a file the reader cannot open at all (no
    permission) is still one line naming it, not a traceback."""
    try:
        yield
    except OSError as exc:
        if "data_dir" not in opts or exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        raise ConfigError(f"cannot read the local log in {opts['data_dir']!r}: {exc.strerror}: "
                          f"{exc.filename!r}") from None


def log_named(opts: dict[str, Any]) -> str:
    if "bootstrap_servers" in opts:
        return f"Kafka at {opts['bootstrap_servers']}"
    return f"the local log in {opts['data_dir']}"


def explicit(name: str) -> bool:
    src = click.get_current_context().get_parameter_source(name)
    return src not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


# --------------------------------------------------------------------------- --name/--source/--sink

def override_options(name_help: str, topic_help: str) -> Callable[[Callable[..., Any]],
                                                                   Callable[..., Any]]:
    """``--name``, ``--source``, ``--sink``: run (or stop) a pipeline file under another job
    name and other topics, without editing it (``Pipeline.rename``)."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = click.option("--sink", "sink_override", multiple=True, metavar="TOPIC",
                          help=f"Write TOPIC instead of the pipeline's sink topic{topic_help}; "
                               f"a pipeline with several sinks names the one to move, "
                               f"OLD=NEW, once per sink. Default: the pipeline's.")(fn)
        fn = click.option("--source", "source_override", multiple=True, metavar="TOPIC",
                          help=f"Read TOPIC instead of the pipeline's source topic{topic_help}; "
                               f"a pipeline with several sources names the one to move, "
                               f"OLD=NEW, once per source. Default: the pipeline's.")(fn)
        fn = click.option("--name", "name_override", default=None, metavar="NAME",
                          help=f"{name_help} Default: the pipeline's name.")(fn)
        return fn
    return wrap


def apply_overrides(pipeline: Any, name: str | None, sources: Sequence[str] = (),
                    sinks: Sequence[str] = ()) -> None:
    """Rename ``pipeline`` and retarget its sources and sinks as the options ask: each
    ``--source`` or ``--sink`` a TOPIC (the one source's or sink's) or OLD=NEW (one named by
    its topic)."""
    if name is None and not sources and not sinks:
        return
    if name is not None and not name.strip():
        raise ConfigError("--name: give a non-empty value")
    source, source_moves = _moves("--source", sources, [t.topic for t in pipeline.sources])
    sink, sink_moves = _moves("--sink", sinks, [t.topic for t in pipeline.sinks])
    pipeline.rename(pipeline.name if name is None else name, source=source, sink=sink,
                    sources=source_moves, sinks=sink_moves)


def _moves(option: str, given: Sequence[str],
           topics: list[str]) -> tuple[str | None, dict[str, str]]:
    """One plain TOPIC (for a pipeline with one such topic), or OLD=NEW moves."""
    what = option.lstrip("-")
    moves: dict[str, str] = {}
    plain = []
    for value in given:
        if not value.strip():
            raise ConfigError(f"{option}: give a non-empty value")
        if "=" in value:
            old, new = value.split("=", 1)
            if not old or not new:
                raise ConfigError(f"{option} {value!r}: give OLD=NEW, both topics")
            if old in moves and moves[old] != new:   # else the last one won, silently
                raise ConfigError(f"{option} {old}={moves[old]} and {option} {value}: "
                                  f"{old!r} moves to one topic; give it once")
            moves[old] = new
        else:
            plain.append(value)
    if plain and (len(plain) > 1 or moves or len(topics) > 1):
        raise ConfigError(f"{option} {plain[0]!r}: the pipeline has {len(topics)} {what}s "
                          f"({', '.join(topics)}): name the one to move, {option} OLD=NEW, "
                          f"once per {what}")
    return (plain[0] if plain else None), moves



class Interrupted(click.ClickException):
    """A command cut short by Ctrl-C that says what it did first: one ``error:`` line,
    exit code 130 (a plain Ctrl-C elsewhere: ``error: interrupted``)."""

    exit_code = 130

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


@contextlib.contextmanager
def env_default(name: str, value: str) -> Iterator[None]:
    """``os.environ[name]`` is ``value`` inside, unless it was set before; as it was after.

    For a setting the runs a command starts read from the environment (their tasks and
    child processes inherit it): the command may run inside a longer-lived process (a
    test, a notebook), whose later runs must not inherit it."""
    before = os.environ.get(name)
    if before is None:
        os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout (Python, the JVM, pipeline code) to stderr.

    ``eos run --json`` keeps stdout for the one JSON document.
    """
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    saved = os.dup(fd) if fd is not None else None
    try:
        if fd is not None:
            os.dup2(sys.stderr.fileno(), fd)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        try:
            sys.stderr.flush()
        finally:
            if saved is not None and fd is not None:  # saved is None when fd is
                os.dup2(saved, fd)
                os.close(saved)


def n_of(count: int, noun: str, plural: str | None = None) -> str:
    """``1 checkpoint``, ``2 checkpoints``, ``1,000 input records``."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def absolute_paths(opts: dict[str, Any]) -> dict[str, Any]:
    if "data_dir" in opts:
        return {"data_dir": str(Path(opts["data_dir"]).absolute())}
    return opts


def sigterm_interrupts(command: Callable[..., None]) -> Callable[..., None]:
    """SIGTERM interrupts ``command`` as Ctrl-C does: its default action would end the
    process holding what it took (eos run: its lease, before the run is watched; eos
    bench: the systems it started), where a KeyboardInterrupt releases it on its way
    out. run_watch.watch_run then takes both signals as a graceful stop."""
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            return command(*args, **kwargs)
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            return command(*args, **kwargs)
        finally:
            signal.signal(signal.SIGTERM, previous)
    return wrapper
