"""The broker's configuration: its listeners and ``server.properties``, rendered from the
template beside this file into its run dir.
"""

from __future__ import annotations

import os
import re
import string
from importlib import resources
from pathlib import Path

from ..errors import ConfigError

__all__ = ["DEFAULT_PORT", "HOST", "INTERNAL_TOPIC_PARTITIONS", "check_sasl_plain"]

#: The port ``eos kafka up`` takes when it is free (else any free port).
DEFAULT_PORT = 9092
#: Only loopback: the broker is for this machine's tests, benchmarks and examples.
HOST = "127.0.0.1"
#: Partitions of __consumer_offsets and __transaction_state (Kafka's default is 50;
#: a handful keeps the first group/transaction fast on a single node).
INTERNAL_TOPIC_PARTITIONS = 4


def _server_properties(run_dir: Path) -> Path:
    return run_dir / "server.properties"


def _write_server_properties(run_dir: Path, data_dir: Path, port: int, controller_port: int,
                             sasl_plain: tuple[str, str] | None = None,
                             sasl_port: int | None = None) -> None:
    """Render ``server.properties`` into ``run_dir``: the PLAINTEXT listener on ``port``,
    the controller's on ``controller_port``, and with ``sasl_plain`` (user, password) a
    SASL_PLAINTEXT listener for that one user on ``sasl_port``."""
    template = string.Template(
        resources.files(__package__).joinpath("server.properties").read_text())
    sasl = {"sasl_listener": "", "sasl_protocol": "", "sasl_settings": ""}
    if sasl_plain is not None:
        user, password = sasl_plain
        sasl = {
            "sasl_listener": f",SASL_PLAINTEXT://{HOST}:{sasl_port or DEFAULT_PORT + 2}",
            "sasl_protocol": ",SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl_settings": (
                "sasl.enabled.mechanisms=PLAIN\n"
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN\n"
                "listener.name.sasl_plaintext.plain.sasl.jaas.config="
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'user_{user}="{password}";\n'),
        }
    text = template.substitute(port=port, controller_port=controller_port,
                               data_dir=str(data_dir),
                               internal_partitions=INTERNAL_TOPIC_PARTITIONS, **sasl)
    path = _server_properties(run_dir)
    # It may hold the SASL user's password: readable by its owner only.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


_SASL_USER = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")


def check_sasl_plain(user: str, password: str) -> None:
    """``ConfigError`` unless the pair fits the broker's JAAS line as it is written there."""
    if not _SASL_USER.match(user):
        raise ConfigError(f"--sasl-plain: user {user!r} must be 1-64 of A-Z a-z 0-9 . _ @ -")
    if not password or any(c in password for c in '"\\\n\r'):
        raise ConfigError("--sasl-plain: the password must be non-empty, without quotes, "
                          "backslashes or line breaks")

