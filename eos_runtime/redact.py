"""Secrets of Kafka client settings never reach an output: ``redact`` is the one function
every output path uses (error lines, JSON errors, warnings, librdkafka's log lines, the
repr of settings).

A setting is secret when its name is one of ``SECRET_KEYS`` or contains "password" or
"secret". ``remember(settings)`` notes the secret values a process was given (every
``KafkaTransport`` does, in the driver and in each task), so that ``redact`` can also
mask them inside free text, such as an error message a library built from a setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MASK", "SECRET_KEYS", "Settings", "is_secret", "redact", "remember"]

MASK = "***"
SECRET_KEYS = frozenset({
    "sasl.password", "ssl.key.password", "ssl.keystore.password",
    "sasl.oauthbearer.client.secret", "ssl.key.pem", "sasl.oauthbearer.config",
})
#: Values shorter than this are masked in settings but not searched for in free text: a
#: one-letter "password" would blank that letter everywhere.
_MIN_TEXT_SECRET = 4

_known: set[str] = set()


def is_secret(key: str) -> bool:
    k = key.strip().lower()
    return k in SECRET_KEYS or "password" in k or "secret" in k


def remember(settings: Mapping[str, Any]) -> None:
    """Note the secret values of ``settings``, so ``redact`` masks them in any text."""
    for key, value in settings.items():
        if isinstance(key, str) and is_secret(key) and value is not None:
            text = str(value)
            if len(text) >= _MIN_TEXT_SECRET:
                _known.add(text)


def redact(thing: Any) -> Any:
    """A mapping: a copy whose secret settings read ``***``. Text: the text with every
    remembered secret value replaced by ``***``. Anything else is returned as it is."""
    if isinstance(thing, Mapping):
        return {k: (MASK if isinstance(k, str) and is_secret(k) else v)
                for k, v in thing.items()}
    if isinstance(thing, str):
        for secret in sorted(_known, key=len, reverse=True):   # a longer one may hold a shorter
            if secret in thing:
                thing = thing.replace(secret, MASK)
        return thing
    return thing


class Settings(dict[str, Any]):
    """Kafka client settings whose repr and str mask their secrets: they travel inside
    task configs, which a traceback or a log line may print."""

    def __repr__(self) -> str:
        return repr(redact(dict(self)))

    __str__ = __repr__
