"""Dead letters: what a record set aside becomes, within the size its topic accepts.

A letter is one JSON object (docs/protocol.md, "Dead letters"). It holds the record's
key and value once each: as text where text is the value (a source record's bytes
that are UTF-8; a channel record's key and value as Python shows them), else as the
exact bytes in base64 (``key_base64``, ``value_base64``). A letter larger than the
producer sends (Kafka's ``message.max.bytes``) would fail every checkpoint of the
task, and the run with it: the largest fields are cut to fit, named in ``truncated``,
and ``key_size`` / ``value_size`` keep the sizes as the task read them; the record
itself is still at ``topic``, ``partition``, ``offset``.

Letters written before this format (no ``format`` field) hold ``key``/``value`` as
readable text and ``key_base64``/``value_base64`` always: ``exact_bytes`` reads a
source record's bytes from either.
"""

from __future__ import annotations

import base64
from typing import Any

from ..api import FORMATS
from ..values import unpack

__all__ = ["DEFAULT_MAX_BYTES", "FORMAT", "build", "exact_bytes", "letter_bound"]

#: This letter layout's ``format`` field; letters without one are the first layout.
FORMAT = 2

#: Where the transport does not say how large a record may be (the local log): Kafka's
#: default ``message.max.bytes``, so a letter fits a Kafka topic of default settings too.
DEFAULT_MAX_BYTES = 1_000_000

#: Below the producer's limit: the record's own framing and the broker's batch header
#: (the broker's default limit, 1 048 588 bytes, is the producer's plus such framing).
_FRAMING = 512

_encode = FORMATS["json"][0]   # the dead-letter writer's value format


def letter_bound(max_record_bytes: int | None) -> int:
    """How large an encoded letter may be, given the largest record the transport's
    producers send (None: not known)."""
    limit = DEFAULT_MAX_BYTES if max_record_bytes is None else max_record_bytes
    return max(limit - _FRAMING, 0)


def build(*, job: str, task: int, topic: str, partition: int, offset: int, error: str,
          key: bytes | None, value: bytes | None, channel: bool,
          bound: int, stream: str | None = None,
          traceback: str | None = None) -> dict[str, Any]:
    """The letter of a record (``key`` and ``value`` as the task read them; ``channel``:
    read from a channel between stages, msgpack) that failed with ``error``, cut to
    ``bound`` bytes encoded. ``stream``: what the record's stage reads, in the pipeline's
    words; ``traceback``: the user's frames of the error (only when asked for)."""
    letter: dict[str, Any] = {
        "format": FORMAT, "job": job, "task": task, "topic": topic, "partition": partition,
        "offset": offset, "channel": channel, "error": error}
    if stream is not None:
        letter["stream"] = stream
    if traceback is not None:
        letter["traceback"] = traceback
    for name, raw in (("key", key), ("value", value)):
        text, b64 = _forms(raw, channel)
        letter[name], letter[f"{name}_base64"] = text, b64
        letter[f"{name}_size"] = None if raw is None else len(raw)
    letter["truncated"] = []
    return _fit(letter, bound)


def exact_bytes(letter: dict[str, Any], name: str) -> bytes | None:
    """The exact bytes of a source record's ``name`` ("key" or "value") in a letter of
    either format (a cut field gives its first bytes only: see ``truncated``)."""
    b64 = letter.get(f"{name}_base64")
    if b64 is not None:
        return base64.b64decode(b64)
    text = letter.get(name)
    return None if text is None else str(text).encode("utf-8")


def _forms(raw: bytes | None, channel: bool) -> tuple[str | None, str | None]:
    """(text, base64) of a key or value: one of them holds it, the other is None."""
    if raw is None:
        return None, None
    if channel:   # msgpack between stages: as Python shows it
        try:
            return repr(unpack(raw)), None
        except Exception:
            return None, base64.b64encode(raw).decode("ascii")
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, base64.b64encode(raw).decode("ascii")


#: Fields a letter may cut (the largest first).
_CUTTABLE = ("value", "value_base64", "key", "key_base64", "traceback", "error")


def _fit(letter: dict[str, Any], bound: int) -> dict[str, Any]:
    """Cut the largest fields, one after the other, until the encoded letter fits."""
    for _ in range(len(_CUTTABLE)):
        excess = len(_encode(letter)) - bound
        if excess <= 0:
            return letter
        name = max((f for f in _CUTTABLE if letter.get(f)),
                   key=lambda f: len(_encode(letter[f])), default=None)
        if name is None:
            return letter   # nothing left to cut: the producer names what is too large
        if name not in letter["truncated"]:
            letter["truncated"].append(name)
            excess += len(_encode(name)) + (1 if len(letter["truncated"]) > 1 else 0)
        text = letter[name]
        letter[name] = _prefix(text, len(_encode(text)) - excess, name.endswith("_base64"))
    return letter


def _prefix(text: str, most: int, b64: bool) -> str:
    """The longest prefix of ``text`` whose JSON form takes at most ``most`` bytes (for
    base64, whole groups of 4: the prefix decodes to the first bytes)."""
    lo, hi = 0, len(text)
    while lo < hi:   # the JSON form grows with the prefix
        mid = (lo + hi + 1) // 2
        if len(_encode(text[:mid])) <= most:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo - lo % 4] if b64 else text[:lo]
