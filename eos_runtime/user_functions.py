"""Checks of the functions a pipeline is given, made when the pipeline is written: a
function whose parameters do not fit how its step calls it is refused there, naming the
step, not at run time."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .errors import ConfigError

__all__ = ["check_arity", "function_name"]


def function_name(fn: Callable[..., Any], default: str) -> str:
    return getattr(fn, "__name__", None) or default


def check_arity(fn: Callable[..., Any], step: str, name: str, stateful: bool, *,
                 role: str = "") -> None:
    """Refuse a function its step could not call: stateful steps call ``fn(value, state)``,
    the others (and key_by) ``fn(value)``. Callables without a signature (some builtins)
    and ``*args`` functions are accepted."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    args = ("value", "state") if stateful else ("value",)
    if binds(sig, len(args)):
        return
    role = role or ("a stateful function" if stateful else "a function")
    called = f"{name if name.isidentifier() else 'fn'}({', '.join(args)})"
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


def binds(sig: inspect.Signature, n: int) -> bool:
    try:
        sig.bind(*range(n))
    except TypeError:
        return False
    return True
