"""Multi-sensor perception fusion runtime on NVIDIA Triton.

Kept import-light on purpose: the Triton python backend imports :mod:`perception.modelkit` inside
the model stub, which must not pull the client stack. Public names are loaded lazily.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

# gRPC's fork handlers restart its threads in every forked child; a child that then closes its file
# descriptors before exec (subprocess with close_fds: how the embedded server is started) crashes on
# them now and then -- SIGSEGV/SIGABRT before exec in 24 of 300 spawns while calls were in flight.
# Nothing here forks to use gRPC in the child, so fork support is off unless the host chose otherwise.
# (Read when gRPC initialises, hence here, before any part of the package can import it.)
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

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
