"""The values user functions see: the formats that turn a topic's bytes into values and
back at the edges of a pipeline (``FORMATS``), and the keyed ``State`` a stateful step
reads and writes. ``eos_runtime.api`` hands both on; nothing here knows of pipelines."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgpack

from .errors import ConfigError, UserFunctionError

__all__ = ["FORMATS", "State", "NO_KEY_STATE", "NO_KEY_WINDOW"]

NO_KEY_STATE = ("this record has no key, and a stateful step keeps its state per key (keyless "
                "records would all share one state): key_by(...) before the stateful step, or "
                "give every record of the source topic a key")
NO_KEY_WINDOW = ("this record has no key, and a window keeps its windows per key: key_by(...) "
                 "before the window, or give every record of the source topic a key")

# json.dumps with options builds an encoder per call: one, built once, writes the same.
# allow_nan=False: NaN and Infinity are not JSON, and a reader of the sink would choke.
_encode_json = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def _json(value: Any) -> bytes:
    if type(value) is int:   # a count: JSON's digits, without the encoder
        return b"%d" % value
    return _encode_json(value).encode()


_strict_unpackb = msgpack.unpackb


def unpack(raw: bytes) -> Any:
    """msgpack's reader as values need it: a dict may have int keys. msgpack writes them;
    its reader refuses them unless told, so a value a step returned or a state it set
    could not be read back. Told only when it refused: the keyword costs 80 ns a call
    (a partial), the try nothing (raw=False, str for msgpack's str, is msgpack 1's
    default)."""
    try:
        return _strict_unpackb(raw)
    except ValueError:
        return _strict_unpackb(raw, strict_map_key=False)


# Record formats for the edges of a pipeline: user topics hold bytes.
FORMATS: dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]] = {
    "bytes": (lambda v: v, lambda b: b),
    "utf8": (lambda v: v.encode("utf-8"), lambda b: b.decode("utf-8")),
    "json": (_json, json.loads),
    "msgpack": (lambda v: msgpack.packb(v, use_bin_type=True), unpack),
}


def _format(name: str, what: str) -> str:
    if name not in FORMATS:
        raise ConfigError(f"{what}: unknown format {name!r}; use one of {', '.join(FORMATS)}")
    return name


def _key_format(name: str | None, what: str) -> str | None:
    """No key format (None): an unkeyed stream."""
    return None if name is None else _format(name, what)


class State:
    """Keyed state seen by a stateful step: the values of the current record's key.

    Values are stored as msgpack, so they may be None, bool, numbers, str, bytes, lists
    and dicts of those (a tuple comes back as a list). A record without a key (a keyed
    source's record whose key is null) has no state: touching it raises
    ``UserFunctionError``, where it would otherwise share one state with every other
    keyless record.
    """

    __slots__ = ("_get", "_put", "_delete", "_prefix", "_timer")

    def __init__(self, get: Callable[[bytes], bytes | None], put: Callable[[bytes, bytes], None],
                 delete: Callable[[bytes], None]) -> None:
        self._get, self._put, self._delete = get, put, delete
        # The current record's encoded key, set by the runtime's chain before each call.
        # An encoded key is never empty (msgpack), so b"" means the record has no key.
        self._prefix = b""
        # Sets an event-time timer for a key (a step with on_timer); None: the step has none.
        self._timer: Callable[[int, bytes], None] | None = None

    def timer(self, at: int) -> None:
        """Call this step's ``on_timer(at, state)`` for this key once the watermark reaches
        ``at`` (event time, ms). Setting one time twice sets one timer."""
        if self._timer is None:
            raise UserFunctionError("state.timer: this step has no on_timer; give it one: "
                                    ".map(fn, stateful=True, on_timer=handler)")
        if isinstance(at, bool) or not isinstance(at, int):
            raise UserFunctionError(f"state.timer({at!r}): a time is whole milliseconds "
                                    f"(an int)")
        self._timer(at, self._key(""))

    def _key(self, name: str) -> bytes:
        prefix = self._prefix
        if not prefix:
            raise UserFunctionError(NO_KEY_STATE)
        return prefix + name.encode("utf-8")

    # get and set spell ``_key`` out: a stateful step calls them on every record, and the
    # call and the keyword arguments cost more than the work
    def get(self, name: str, default: Any = None) -> Any:
        prefix = self._prefix
        if not prefix:
            raise UserFunctionError(NO_KEY_STATE)
        raw = self._get(prefix + name.encode())
        return default if raw is None else _unpackb(raw)   # raw=False: msgpack 1's default

    def set(self, name: str, value: Any) -> None:
        prefix = self._prefix
        if not prefix:
            raise UserFunctionError(NO_KEY_STATE)
        self._put(prefix + name.encode(), _pack(value))

    def delete(self, name: str) -> None:
        self._delete(self._key(name))


# Bound once: msgpack.packb builds a Packer per call, a cost paid per state write.
_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack
_unpackb = unpack
