"""Loading a pipeline file: run it as a module, find its ``Pipeline``, and say in one line
what was wrong when it cannot (its own error, with the line of the file it was raised on)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from .api import Pipeline
from .errors import (
    ConfigError,
    PipelineFileError,
)
from .user_code import line_in

__all__ = ["load_pipeline"]


def load_pipeline(path: str | Path) -> Pipeline:
    """Run a pipeline file and return the ``Pipeline`` it defines (``pipeline`` or the only one).

    The file's directory goes first on ``sys.path``, here and in every worker of the
    pipeline's runs (``Pipeline.python_path``), as ``python file.py`` puts it: a module
    beside the file imports."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"pipeline file {str(path)!r} does not exist")
    directory = str(path.parent.absolute())
    if directory not in sys.path:
        sys.path.insert(0, directory)
    try:
        namespace = runpy.run_path(str(path), run_name="eos_pipeline")
    except SyntaxError as exc:
        # The file (or a module it imports) does not compile: where the compiler stopped.
        where = exc.filename or str(path)
        line = exc.lineno
        via = ""
        if _same_file_key(Path(where)) != _same_file_key(path):
            at = line_in(str(path), exc.__traceback__)
            via = f" (imported by {path}{f', line {at}' if at else ''})"
        raise PipelineFileError(f"{where}{f', line {line}' if line else ''}: "
                                f"{type(exc).__name__}: {exc.msg}{via}",
                                path=str(where), line=line) from exc
    except Exception as exc:
        line = line_in(str(path), exc.__traceback__)
        raise PipelineFileError(f"{path}{f', line {line}' if line else ''}: {_one_line(exc)} "
                                f"(raised while loading the pipeline file)",
                                path=str(path), line=line) from exc
    found = {name: v for name, v in namespace.items() if isinstance(v, Pipeline)}
    chosen = namespace.get("pipeline")
    if not isinstance(chosen, Pipeline) and len(found) == 1:
        chosen = next(iter(found.values()))
    if isinstance(chosen, Pipeline):
        chosen.python_path = (directory, *(p for p in chosen.python_path if p != directory))
        return chosen
    if not found:
        raise ConfigError(f'{path} defines no Pipeline object: make one, e.g. pipeline = '
                          f'Pipeline("my-job")')
    raise ConfigError(f"{path} defines {len(found)} Pipeline objects ({', '.join(found)}); "
                      f"name the one to run `pipeline`")


def _same_file_key(path: Path) -> str:
    try:
        return str(path.resolve())
    except OSError:
        return str(path)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
