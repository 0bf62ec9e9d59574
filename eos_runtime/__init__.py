"""eos_runtime: exactly-once stream processing for Python on Spark and Kafka."""

from __future__ import annotations

from . import errors
from .api import Pipeline, State
from .errors import EosError
from .transport import open_transport

__version__ = "0.1.0"

__all__ = ["EosError", "Pipeline", "State", "errors", "open_transport", "__version__"]
