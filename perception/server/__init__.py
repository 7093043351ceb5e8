"""The embedded Triton server and helpers to reach any Triton server by URL.

:class:`EmbeddedTriton` runs the real ``tritonserver`` shipped in the nvidia-pytriton wheel as a child
process for the duration of an ``async with`` block; it is the runtime's default server. The runtime
itself only needs a gRPC URL, so an external Triton works the same: use :func:`wait_for_server` to wait
for it and :func:`describe_models` to list its models and tensor contracts.
"""

from __future__ import annotations

from perception.server._embedded import EmbeddedTriton, check_model_repository, check_models_held, free_port
from perception.server._health import ModelStatus, describe_models, wait_for_server
from perception.server._locate import TritonInstall, locate_triton, prepare_backend_dir
from perception.server._procs import cleanup_stale_shm, iter_processes, pid_alive

__all__ = [
    "EmbeddedTriton",
    "ModelStatus",
    "TritonInstall",
    "check_model_repository",
    "check_models_held",
    "cleanup_stale_shm",
    "describe_models",
    "free_port",
    "iter_processes",
    "locate_triton",
    "pid_alive",
    "prepare_backend_dir",
    "wait_for_server",
]
