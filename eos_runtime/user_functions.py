"""The functions a pipeline is given: checked when the pipeline is written (a function
whose parameters do not fit how its step calls it is refused there, naming the step,
not at run time), and checkpoint listeners made objects."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from .errors import ConfigError

__all__ = ["check_arity", "check_call", "function_name", "as_listener"]


def function_name(fn: Callable[..., Any], default: str) -> str:
    return getattr(fn, "__name__", None) or default


def check_arity(fn: Callable[..., Any], step: str, name: str, stateful: bool, *,
                 role: str = "") -> None:
    """Refuse a function its step could not call: stateful steps call ``fn(value, state)``,
    the others (and key_by) ``fn(value)``. Callables without a signature (some builtins)
    and ``*args`` functions are accepted."""
    args = ("value", "state") if stateful else ("value",)
    sig = _misfit(fn, args)
    if sig is None:
        return
    role = role or ("a stateful function" if stateful else "a function")
    called = _called(name, args)
    if stateful:
        fix = "give it two parameters, (value, state)"
        if binds(sig, 1):
            fix += ", or drop stateful=True"
    elif not role.startswith("a key") and binds(sig, 2):
        fix = "a function of (value, state) needs stateful=True"
    else:
        fix = "give it one parameter, (value)"
    raise ConfigError(f"{step}: {role} is called as {called}, but its parameters are {sig}: "
                      f"{fix}")


def check_call(fn: Callable[..., Any], step: str, name: str, args: tuple[str, ...]) -> None:
    """Refuse a function that cannot be called with ``args`` (their names, for the
    message), as ``check_arity`` does for steps."""
    sig = _misfit(fn, args)
    if sig is None:
        return
    fix = f"give it {len(args)} parameter{'s' * (len(args) != 1)}, ({', '.join(args)})" \
        if args else "give it no parameters"
    raise ConfigError(f"{step}: a function is called as {_called(name, args)}, but its "
                      f"parameters are {sig}: {fix}")


def _misfit(fn: Callable[..., Any], args: tuple[str, ...]) -> inspect.Signature | None:
    """``fn``'s signature when it cannot be called with ``args``; None when it can, or when
    it has none to check (some builtins)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return None if binds(sig, len(args)) else sig


def _called(name: str, args: tuple[str, ...]) -> str:
    """How a message shows the call: "count(value, state)"."""
    return f"{name if name.isidentifier() else 'fn'}({', '.join(args)})"


def binds(sig: inspect.Signature, n: int) -> bool:
    try:
        sig.bind(*range(n))
    except TypeError:
        return False
    return True


class _FunctionListener:
    def __init__(self, fn: Callable[[int, Mapping[tuple[str, int], int]], Any]) -> None:
        self.fn = fn

    def on_checkpoint(self, task: int, offsets: Mapping[tuple[str, int], int]) -> None:
        self.fn(task, offsets)


def as_listener(listener: Any) -> Any:
    """A checkpoint listener object from a function or an object with ``on_checkpoint``."""
    if hasattr(listener, "on_checkpoint"):
        return listener
    if callable(listener):
        return _FunctionListener(listener)
    raise ConfigError(f"on_checkpoint: expected a function (task, offsets) or an object with "
                      f"on_checkpoint(task, offsets), got {listener!r}")
