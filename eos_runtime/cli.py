"""The ``eos`` command line."""

from __future__ import annotations

import sys

import click

from .broker.cli import kafka as kafka_group
from .errors import EosError


@click.group()
@click.version_option(package_name="eos_runtime")
def main() -> None:
    """eos_runtime: exactly-once stream processing on Spark and Kafka."""


# `eos kafka fetch|up|down|status`: the project's own Kafka broker.
main.add_command(kafka_group)


def run() -> None:
    """Console entry point: project errors become one clear line and exit code 1."""
    try:
        main(standalone_mode=False)
    except EosError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
