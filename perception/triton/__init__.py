"""The Triton transport layer: one typed async client over ``tritonclient.grpc.aio``.

* :class:`TritonClient` / :class:`ClientOptions`: channels per URL, round-robin over healthy replicas,
  TLS and auth headers, deadlines, cancellation that reaches the server, errors translated into
  :mod:`perception.errors` (with model, sensor, frame and URL), shared memory for large inputs.
* :class:`SharedMemoryPool`: reusable, registered-once system shared-memory regions.
* :class:`TraceReader` / :func:`trace_flags`: Triton's per-request trace (server timestamps per request id).
* :func:`wait_until_ready`: the one readiness wait (the client's, the server package's and the embedded
  server's start poll their probes with it).
* :class:`ModelContract` / :func:`check_contract`: what a served model declares versus what each sensor
  kind needs (its contract in :mod:`perception.kinds`).

Example::

    async with TritonClient(ClientOptions(urls=("127.0.0.1:8001",))) as client:
        await client.wait_ready(["lidar_pp"], timeout_s=30)
        check_contract("lidar", await client.model_contract("lidar_pp"))
        res = await client.infer("lidar_pp", {"POINTS": points}, timeout_ns=50_000_000, sensor="lidar_top")
        boxes = res.outputs["BOXES"]
"""

from __future__ import annotations

from perception.triton._client import (
    ClientOptions,
    InferRequest,
    InferResult,
    ParameterValue,
    ShmMode,
    TritonClient,
    is_loopback,
)
from perception.triton._contract import ModelContract, check_contract, check_encoded_input, parse_model_config
from perception.triton._errors import translate
from perception.triton._ready import wait_until_ready
from perception.triton._shm import SharedMemoryPool, ShmRegionInfo, ShmRegistrar, ShmSlot
from perception.triton._shm_names import SHM_DIR, SHM_NAME_PREFIX, make_shm_prefix, shm_owner_pid
from perception.triton._trace import RequestTrace, TraceReader, trace_flags

__all__ = [
    "SHM_DIR",
    "SHM_NAME_PREFIX",
    "ClientOptions",
    "InferRequest",
    "InferResult",
    "ModelContract",
    "ParameterValue",
    "RequestTrace",
    "SharedMemoryPool",
    "ShmMode",
    "ShmRegionInfo",
    "ShmRegistrar",
    "ShmSlot",
    "TraceReader",
    "TritonClient",
    "check_contract",
    "check_encoded_input",
    "is_loopback",
    "make_shm_prefix",
    "parse_model_config",
    "shm_owner_pid",
    "trace_flags",
    "translate",
    "wait_until_ready",
]
