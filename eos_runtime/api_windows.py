"""The pipeline API's windows: ``stream.window(spec, grace=)``, an aggregation, an emission.

    (views.source("views", value="json", timestamp=lambda v: v["ts"])
        .key_by(lambda v: v["page"])
        .window(tumbling(minutes=1), grace=10_000)
        .count()
        .final()
        .sink("views-per-minute", key="utf8", value="json"))

Each result is ``{"start": ms, "end": ms, "value": aggregate}`` under the record's key.
``final()`` emits a window's result once, when the task's watermark passes its end plus
the grace; ``current()`` emits it on every update. The rules (what closes when, what is
late) are in ``windows.py`` and docs/design/event-time.md; the operator that carries them
out is ``runtime/window_ops.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, Self, TypeVar

from .errors import ConfigError
from .windows import Hopping, Session, Tumbling

__all__ = ["WindowOp", "JoinOp", "Windowed", "WindowAggregate", "EMITS", "join_streams",
           "Windowable"]

EMITS = ("final", "current")


@dataclass(frozen=True)
class WindowOp:
    """A windowed aggregation: ``first(value)`` starts a window's aggregate, ``add(acc,
    value)`` adds to it; ``emit`` is ``final`` or ``current``."""

    spec: Tumbling | Hopping | Session
    grace: int
    first: Callable[[Any], Any]
    add: Callable[[Any, Any], Any]
    emit: str
    name: str                        # how messages name it: "count", "sum(price)", ...
    # two aggregates of one key's sessions as one (session windows merge when a record
    # bridges them): merge(earlier, later)
    merge: Callable[[Any, Any], Any] | None = None


@dataclass(frozen=True)
class JoinOp:
    """A windowed join's op: pairs of a key's left and right records at most ``within``
    ms apart (``runtime/join_ops.py``)."""

    within: int
    grace: int
    how: str                                   # inner | left
    join: Callable[[Any, Any], Any] | None     # None: the pair [left, right]
    name: str


def join_left(value: Any) -> list[Any]:
    """A left value of a join, tagged for the join's stage."""
    return ["L", value]


def join_right(value: Any) -> list[Any]:
    """A right value of a join, tagged for the join's stage."""
    return ["R", value]


class _JoinKey:
    """The join key of a tagged value: the left side's ``on`` or the right side's."""

    def __init__(self, left: Callable[[Any], Any], right: Callable[[Any], Any]) -> None:
        self.left, self.right = left, right
        self.__name__ = f"join key ({_name(left)}, {_name(right)})"

    def __call__(self, tagged: list[Any]) -> Any:
        side, value = tagged
        return self.left(value) if side == "L" else self.right(value)


class Windowable(Protocol):
    """What windows and joins need of a stream (``api.Stream`` is one): typed by this,
    not by ``Stream``, so that the API's windows import nothing of the API above them."""

    def map(self, fn: Callable[..., Any]) -> Self: ...

    def merge(self, *others: Self) -> Self: ...

    def key_by(self, key_fn: Callable[[Any], Any], *, parallelism: int | None = None) -> Self:
        ...

    def _window(self, op: WindowOp | JoinOp) -> Self: ...


S = TypeVar("S", bound=Windowable)


def join_streams(left: S, right: S, *, within: int, on: object, how: str,
                 join: Callable[[Any, Any], Any] | None, grace: int,
                 parallelism: int | None) -> S:
    """``left.join(right, ...)``: both sides tagged, merged and shuffled by their join key
    into one stage, where the join op pairs them."""
    if isinstance(within, bool) or not isinstance(within, int) or within < 0:
        raise ConfigError(f"join: within is whole milliseconds >= 0, not {within!r}")
    if isinstance(grace, bool) or not isinstance(grace, int) or grace < 0:
        raise ConfigError(f"join: grace is whole milliseconds >= 0, not {grace!r}")
    if how not in ("inner", "left"):
        raise ConfigError(f"join: how={how!r}: use 'inner' or 'left'")
    if not (isinstance(on, tuple) and len(on) == 2 and all(callable(f) for f in on)):
        raise ConfigError(f"join: on=(left_key, right_key), two functions giving each "
                          f"side's join key, not {on!r}")
    if join is not None:
        _callable(join, "join")
    if left is right:
        raise ConfigError("join: a stream joined with itself: join two streams")
    name = f"join({_name(join) if join is not None else 'pair'})"
    tagged = left.map(join_left).merge(right.map(join_right))
    keyed = tagged.key_by(_JoinKey(on[0], on[1]), parallelism=parallelism)
    return keyed._window(JoinOp(within, grace, how, join, name))


class Windowed(Generic[S]):
    """A keyed stream cut into windows; an aggregation makes it a ``WindowAggregate``."""

    def __init__(self, stream: S, spec: Tumbling | Hopping | Session, grace: int) -> None:
        self._stream, self._spec, self._grace = stream, spec, grace

    def count(self) -> WindowAggregate[S]:
        """How many values each window holds."""
        return WindowAggregate(self, lambda v: 1, lambda acc, v: acc + 1, "count",
                               lambda a, b: a + b)

    def sum(self, fn: Callable[[Any], Any] | None = None) -> WindowAggregate[S]:
        """The sum of each window's values, or of ``fn(value)``."""
        if fn is None:
            return WindowAggregate(self, lambda v: v, lambda acc, v: acc + v, "sum",
                                   lambda a, b: a + b)
        _callable(fn, "sum")
        return WindowAggregate(self, fn, lambda acc, v: acc + fn(v), f"sum({_name(fn)})",
                               lambda a, b: a + b)

    def reduce(self, fn: Callable[[Any, Any], Any]) -> WindowAggregate[S]:
        """``fn(acc, value)`` over each window's values; the first value starts it. Two
        sessions merge as ``fn(earlier, later)``."""
        _callable(fn, "reduce")
        return WindowAggregate(self, lambda v: v, fn, f"reduce({_name(fn)})", fn)

    def aggregate(self, initial: Callable[[], Any], add: Callable[[Any, Any], Any],
                  merge: Callable[[Any, Any], Any] | None = None) -> WindowAggregate[S]:
        """``add(acc, value)`` over each window's values, from ``initial()``; session
        windows need ``merge(earlier, later)``, which makes two sessions' aggregates one
        when a record bridges them."""
        _callable(initial, "aggregate initial")
        _callable(add, "aggregate add")
        if merge is not None:
            _callable(merge, "aggregate merge")
        elif isinstance(self._spec, Session):
            raise ConfigError(f"aggregate({_name(add)}) over session windows: give "
                              f"merge=fn(earlier, later), which makes two sessions' "
                              f"aggregates one when a record bridges them")
        return WindowAggregate(self, lambda v: add(initial(), v), add,
                               f"aggregate({_name(add)})", merge)


class WindowAggregate(Generic[S]):
    """An aggregation over windows, to be emitted ``final()`` or ``current()``."""

    def __init__(self, windowed: Windowed[S], first: Callable[[Any], Any],
                 add: Callable[[Any, Any], Any], name: str,
                 merge: Callable[[Any, Any], Any] | None) -> None:
        self._windowed, self._first, self._add, self._name = windowed, first, add, name
        self._merge = merge

    def final(self) -> S:
        """Each window's result once, when the watermark passes its end plus the grace."""
        return self._emit("final")

    def current(self) -> S:
        """Each window's result on every update (a record added to it)."""
        return self._emit("current")

    def _emit(self, emit: str) -> S:
        w = self._windowed
        op = WindowOp(w._spec, w._grace, self._first, self._add, emit, self._name,
                      self._merge if isinstance(w._spec, Session) else None)
        return w._stream._window(op)


def check_window(spec: object, grace: object) -> int:
    """``window(spec, grace=)``'s arguments; returns the grace in ms."""
    if not isinstance(spec, (Tumbling, Hopping, Session)):
        raise ConfigError(f"window: expected tumbling(...), hopping(...) or session(...) "
                          f"from eos_runtime.windows, got {spec!r}")
    if isinstance(grace, bool) or not isinstance(grace, int) or grace < 0:
        raise ConfigError(f"window: grace is whole milliseconds >= 0, not {grace!r}")
    return grace


def _callable(fn: object, what: str) -> None:
    if not callable(fn):
        raise ConfigError(f"{what}: expected a function, got {fn!r}")


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", None) or "fn"
