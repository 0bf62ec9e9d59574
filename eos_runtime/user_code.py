"""The user's code in the user's terms, for the errors that name it: where a function is
(its file and line), the frames of a traceback that are the user's own, a record shortened
to a line, where a stage's values come from, and a value that cannot cross a ``key_by``.

The record path (``runtime/records.py``), the in-process helper (``testing.py``) and the
pipeline file's loader name user errors through these, so a run and a unit test say the
same. Pure: nothing here does I/O beyond reading the environment.
"""

from __future__ import annotations

import io
import os
import reprlib
import sysconfig
import traceback
from collections import ChainMap
from collections.abc import Callable
from types import CodeType, TracebackType
from typing import Any

import cloudpickle

from .aggregates import RunningAggregate
from .api import Source
from .errors import UserFunctionError
from .graph import Op

__all__ = ["MSGPACK_TAKES", "TRACEBACK_ENV", "cannot_cross", "crossing_text", "dumps",
           "function_error", "line_in", "short", "tracebacks_wanted", "user_frames",
           "value_origin"]

#: Set to 1 (or true, yes, on) to see the user's frames of a user function's error:
#: ``eos run --traceback`` sets it for its run; read by the driver, which hands it to
#: the tasks (a dead letter then carries the frames too).
TRACEBACK_ENV = "EOS_TRACEBACK"

#: What msgpack, the format of values between stages, can carry.
MSGPACK_TAKES = "None, bool, int, float, str, bytes, or lists and dicts of those"

#: The longest a record's key or value is shown in an error.
SHOWN_CHARS = 80


def tracebacks_wanted() -> bool:
    """Whether ``EOS_TRACEBACK`` asks for the user's frames."""
    return os.environ.get(TRACEBACK_ENV, "").strip().lower() in ("1", "true", "yes", "on")


# --------------------------------------------------------------------------- where

def _code(fn: Any) -> CodeType | None:
    """The Python code a callable runs (None: a builtin, or C code)."""
    fn = getattr(fn, "func", fn)          # functools.partial
    fn = getattr(fn, "__func__", fn)      # a bound method
    code = getattr(fn, "__code__", None)
    if code is None and not isinstance(fn, type):   # an object with a __call__ of its own
        code = getattr(type(fn).__call__, "__code__", None)
    return code if isinstance(code, CodeType) else None


def _same_file(a: str, b: str) -> bool:
    return a == b or os.path.realpath(a) == os.path.realpath(b)


def line_in(filename: str, tb: TracebackType | None) -> int | None:
    """The line of ``filename`` the traceback last passed through: the user's own line,
    even when the exception came from a library their code called."""
    line = None
    while tb is not None:
        if _same_file(tb.tb_frame.f_code.co_filename, filename):
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _where(fn: Any, tb: TracebackType | None) -> str | None:
    """``file.py:LINE`` of ``fn``: the line of its file where it raised (else its first);
    None for a function without Python code (``str.split``, ``int``)."""
    code = _code(fn)
    if code is None:
        return None
    line = line_in(code.co_filename, tb) or code.co_firstlineno
    return f"{os.path.basename(code.co_filename)}:{line}"


def function_error(what: str, fn: Any, exc: BaseException) -> UserFunctionError:
    """The error of user function ``fn`` (``what``: how the pipeline names it, e.g.
    ``step map(label)``) that raised ``exc``: its file and line, and the user's frames in
    ``user_traceback`` (shown by ``--traceback``). Raise it ``from exc``."""
    at = _where(fn, exc.__traceback__)
    err = UserFunctionError(f"{what}{f' at {at}' if at else ''} raised "
                            f"{type(exc).__name__}: {exc}")
    err.user_traceback = user_frames(exc)
    return err


# --------------------------------------------------------------------------- frames

_RUNTIME = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _library_dirs() -> tuple[str, ...]:
    """Directories whose files are not the user's: this package, the standard library and
    installed packages (not the interpreter's prefix: a system Python's is /usr, which
    may hold the user's code too)."""
    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return (_RUNTIME, *(os.path.realpath(d) + os.sep for d in dirs))


_LIBRARIES = _library_dirs()


def _outside(filename: str, dirs: tuple[str, ...]) -> bool:
    if filename.startswith("<frozen"):
        return False
    return not os.path.realpath(filename).startswith(dirs)


def user_frames(exc: BaseException) -> str:
    """``exc``'s traceback with the user's frames only (not the runtime's, the standard
    library's or installed packages'), as Python prints a traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if _outside(f.filename, _LIBRARIES)] or [
        f for f in frames if _outside(f.filename, (_RUNTIME,))]   # user code installed
    return ("Traceback of the pipeline's own code (most recent call last):\n"
            + "".join(traceback.StackSummary.from_list(own).format())
            + "".join(traceback.format_exception_only(type(exc), exc)))


# --------------------------------------------------------------------------- shipping

# cloudpickle ships a function of the pipeline file by value, its code's file name
# replaced by "<dynamic-code>": a worker's traceback would name no file, and show no
# line of it. ``dumps`` keeps the names.
_STRIPPED = "<eos-code>"   # a code object on its way through cloudpickle's own reducer


def _with_file(code: CodeType, filename: str) -> CodeType:
    """(In a worker) ``code`` under its file's name again."""
    return code.replace(co_filename=filename)


def _reduce_code(code: CodeType) -> Any:
    if code.co_filename == _STRIPPED:
        return cloudpickle.Pickler.dispatch_table[CodeType](code)
    return _with_file, (code.replace(co_filename=_STRIPPED), code.co_filename)


class _Pickler(cloudpickle.Pickler):
    dispatch_table = ChainMap({CodeType: _reduce_code}, cloudpickle.Pickler.dispatch_table)


def dumps(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, the code of functions shipped by value keeping the name
    of its file (``cloudpickle.loads`` reads it)."""
    out = io.BytesIO()
    _Pickler(out, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
    return out.getvalue()


# --------------------------------------------------------------------------- records

_SHORT = reprlib.Repr()
_SHORT.maxstring = SHOWN_CHARS
_SHORT.maxother = SHOWN_CHARS
_SHORT.maxlong = SHOWN_CHARS


def short(value: Any) -> str:
    """``value`` as Python shows it, cut to about ``SHOWN_CHARS`` characters."""
    try:
        text = _SHORT.repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


# --------------------------------------------------------------------------- values

def value_origin(program: tuple[Op, ...], output: int, source: Source | None) -> str:
    """Where the values of a stage's output ``output`` come from, as errors name them:
    "returned by map(count)", "yielded by flat_map(split)", or, when no step of the stage
    made them, what the stage reads."""
    feeding = [i for i, op in enumerate(program) if output in op.outputs]
    while len(feeding) == 1:
        op = program[feeding[0]]
        step = op.step
        if step is not None and isinstance(step.fn, RunningAggregate):
            return f"made by {step.name}"
        if step is not None and step.kind in ("map", "flat_map"):
            return f"{'returned' if step.kind == 'map' else 'yielded'} by {step.kind}({step.name})"
        if op.lookup is not None:
            return f"made by lookup({op.lookup.table.topic!r})"
        feeding = [i for i, prev in enumerate(program) if feeding[0] in prev.next]
    if feeding:   # several paths (a merge): which one made the value is not known here
        return "made by the stage's steps"
    if source is not None:
        return f"read from source {source.topic!r} as {source.value_format}"
    return "sent through key_by by the stage before"


def cannot_cross(value: Any, why: str, origin: str, crossing: str) -> UserFunctionError:
    """The error of a value msgpack cannot encode (``why``: its exception, "TypeError:
    ...") on its way to another stage (``crossing``: ".key_by(word) to stage 1")."""
    return UserFunctionError(
        f"the {type(value).__name__} {short(value)} ({origin}) cannot cross {crossing}: values "
        f"travel between stages as msgpack, which takes {MSGPACK_TAKES} ({why}): convert it "
        f"before the key_by (a set to a list, an object to a dict)")


def crossing_text(key_fn: Callable[[Any], Any] | None, to_stage: int) -> str:
    """How ``cannot_cross`` names a shuffle: ".key_by(word) to stage 1"."""
    if key_fn is None:
        return f"a table's rows to stage {to_stage}"
    return f".key_by({getattr(key_fn, '__name__', None) or 'key_by'}) to stage {to_stage}"
