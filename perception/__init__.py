"""Multi-sensor perception fusion runtime on NVIDIA Triton.

Kept import-light on purpose: the Triton python backend imports :mod:`perception.modelkit` inside
the model stub, which must not pull the client stack. Public names are loaded lazily.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = ["Runtime", "__version__", "load_config"]

_LAZY = {
    "Runtime": "perception.scheduler",
    "load_config": "perception.config",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'perception' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
