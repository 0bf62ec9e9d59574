"""librdkafka settings a user gives: a properties file (``--kafka-config FILE``), single
settings (``-X key=value``, as kcat takes them) and a pipeline's ``kafka_config``.

They reach every Kafka client of a command or a run (``KafkaTransport(client_config=)``,
and through ``TaskConfig.transport`` every task on Spark). Later sources win: the
pipeline's, then the file's, then ``-X``. Settings the runtime owns (its exactly-once
and reading rules depend on them) are refused rather than silently overridden.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .redact import Settings, redact

__all__ = ["OWNED", "check_settings", "merge", "parse_assignments", "read_properties"]

#: Set by the runtime itself, with the reason a user value would break it.
OWNED: dict[str, str] = {
    "bootstrap.servers": "give --bootstrap-servers (or bootstrap_servers=) instead",
    "transactional.id": "the runtime names one per task, for zombie fencing",
    "enable.idempotence": "exactly-once needs idempotent producers",
    "acks": "the runtime writes with acks=all",
    "isolation.level": "the runtime reads committed or uncommitted as each reader needs",
    "group.id": "the runtime assigns partitions itself (no consumer groups)",
    "enable.auto.commit": "positions live in the job's checkpoints",
    "enable.auto.offset.store": "positions live in the job's checkpoints",
    "auto.offset.reset": "an offset outside the log must fail, not jump",
    "enable.partition.eof": "the runtime reads to end offsets it takes itself",
    "allow.auto.create.topics": "a typo in a topic name must fail, not create a topic",
}


def check_settings(settings: Mapping[str, Any], where: str) -> Settings:
    """``settings`` as ``Settings``: string keys, plain values, none the runtime owns."""
    if not isinstance(settings, Mapping):
        raise ConfigError(f"{where}: give librdkafka settings as a dict of name to value, "
                          f"not {type(settings).__name__}")
    out = Settings()
    for key, value in settings.items():
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(f"{where}: a Kafka setting needs a name, got {key!r}")
        key = key.strip()
        if key in OWNED:
            raise ConfigError(f"{where}: {key} is set by eos_runtime itself ({OWNED[key]})")
        if not isinstance(value, str | int | float | bool):
            shown = redact({key: value})[key]
            raise ConfigError(f"{where}: setting {key} must be a string or a number, "
                              f"not {type(value).__name__} {shown!r}")
        out[key] = value
    return out


def read_properties(path: str | Path) -> Settings:
    """A Java-style properties file: ``key=value`` (or ``key: value``) a line, ``#`` and
    ``!`` start comments, blank lines are skipped, space around key and value is dropped."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"--kafka-config: file {str(p)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--kafka-config: cannot read {str(p)!r} ({exc})") from None
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise ConfigError(f"--kafka-config {str(p)!r}, line {number}: expected key=value "
                              f"(a librdkafka setting, e.g. security.protocol=SASL_SSL)")
        found[line[:cut].strip()] = line[cut + 1:].strip()
    return check_settings(found, f"--kafka-config {str(p)!r}")


def parse_assignments(items: Iterable[str]) -> Settings:
    """``-X key=value`` options."""
    found: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"-X {redact(item)!r}: expected key=value (a librdkafka setting, "
                              f"e.g. -X security.protocol=SASL_SSL)")
        found[key.strip()] = value.strip()
    return check_settings(found, "-X")


def merge(*layers: Mapping[str, Any] | None) -> Settings:
    """The settings of every layer, later ones winning."""
    out = Settings()
    for layer in layers:
        out.update(layer or {})
    return out
