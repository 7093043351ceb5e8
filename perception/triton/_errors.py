"""The one place where Triton / gRPC / OS errors become :mod:`perception.errors`.

``tritonclient.grpc.aio`` wraps every failed RPC into ``InferenceServerException`` whose ``status()``
is the gRPC code rendered as a string (``"StatusCode.UNAVAILABLE"``; see ``raise_error_grpc`` in
``tritonclient/grpc/_utils.py``), ``None`` for errors it raises itself before sending anything. The
original ``grpc.aio.AioRpcError`` survives only as ``__context__``. Raw ``grpc.RpcError`` and
``OSError`` are translated too, in case they escape from grpc or the socket layer.

Mapping (first match wins):

=================================================================  ========================
``SharedMemoryException`` (client-side region trouble)             SharedMemoryError
``OSError``                                                        ConnectError (retryable)
DEADLINE_EXCEEDED; UNAVAILABLE "Request timeout expired" (queue)   DeadlineError
UNAVAILABLE (refused, reset, "maximum queue size")                 ConnectError (retryable)
message about a shared-memory region (not found, in use...)        SharedMemoryError
NOT_FOUND; unknown model / not ready / no available versions       ModelNotReadyError
CANCELLED (by the server), INVALID_ARGUMENT, INTERNAL, other       InferenceError
=================================================================  ========================

Local cancellation (the calling task was cancelled) never reaches this module: grpc cancels the RPC
and re-raises ``CancelledError``, which must propagate untouched.
"""

from __future__ import annotations

import re
from typing import Any

import grpc  # type: ignore[import-untyped]
from tritonclient.utils import InferenceServerException
from tritonclient.utils.shared_memory import SharedMemoryException

from perception.errors import (
    ConnectError,
    DeadlineError,
    InferenceError,
    ModelNotReadyError,
    SharedMemoryError,
    TransportError,
)

__all__ = ["grpc_code", "is_shm_registration_lost", "translate"]

_NOT_READY = re.compile(r"unknown model|is not ready|has no available versions|is not loaded", re.I)
_SHM = re.compile(r"shared memory region", re.I)
_TENSOR = re.compile(r"(?:input|output|tensor) '([^']+)'")
_REQUEST_ID = re.compile(r"^\[request id: [^\]]*\]\s*")
_REGION = re.compile(r"shared memory region: '([^']+)'")
# Triton answers UNAVAILABLE when a queued request outlived its ``timeout`` parameter or the queue is full.
_QUEUE_TIMEOUT = re.compile(r"request timeout expired", re.I)
_OVERLOADED = re.compile(r"maximum queue size", re.I)
#: What gRPC says of an HTTP/1 server at the address (Triton's HTTP port, 8000, given for its gRPC one).
_HTTP1 = re.compile(r"Failed parsing HTTP/2|http1\.x server", re.I)


def grpc_code(exc: BaseException) -> str | None:
    """The gRPC status code name (``"UNAVAILABLE"``...) carried by ``exc``, if any."""
    if isinstance(exc, InferenceServerException):
        status = exc.status()
        return str(status).removeprefix("StatusCode.") if status else None
    if isinstance(exc, grpc.RpcError):
        code: Any = exc.code() if callable(getattr(exc, "code", None)) else None
        return str(getattr(code, "name", code)) if code is not None else None
    return None


def _message(exc: BaseException) -> str:
    if isinstance(exc, InferenceServerException):
        msg = exc.message()
    elif isinstance(exc, grpc.RpcError) and callable(getattr(exc, "details", None)):
        msg = exc.details()
    else:
        msg = str(exc)
    text = " ".join(str(msg or type(exc).__name__).split())
    return _REQUEST_ID.sub("", text)


def is_shm_registration_lost(exc: BaseException) -> bool:
    """True when the server does not know a shared-memory region we used (e.g. it restarted)."""
    if not isinstance(exc, (InferenceServerException, grpc.RpcError)):
        return False
    msg = _message(exc)
    return _SHM.search(msg) is not None and ("find" in msg.lower() or "not registered" in msg.lower())


def translate(
    exc: BaseException,
    *,
    model: str | None = None,
    sensor: str | None = None,
    frame: int | None = None,
    url: str | None = None,
) -> TransportError:
    """The :class:`~perception.errors.TransportError` for a Triton/gRPC/OS error (``raise ... from exc``).

    The result carries ``model``, ``sensor``, ``frame``, ``url`` and, when the server's message names
    one, ``tensor``; its message is the server's (without the ``[request id: ...]`` noise) prefixed
    with what kind of failure it is.
    """
    if isinstance(exc, TransportError):
        return exc
    context: dict[str, object] = {"sensor": sensor, "frame": frame, "url": url}
    code = grpc_code(exc)
    msg = _message(exc)
    tensor = _TENSOR.search(msg)
    if tensor is not None:
        context["tensor"] = tensor.group(1)

    if isinstance(exc, SharedMemoryException):
        cause = exc.__cause__
        detail = f"{msg}: {cause}" if cause is not None else msg
        return SharedMemoryError(f"shared memory: {detail}", model=model, **context)
    if isinstance(exc, OSError):
        return ConnectError(f"cannot reach server: {msg}", model=model, **context)
    if code == "DEADLINE_EXCEEDED" or (code == "UNAVAILABLE" and _QUEUE_TIMEOUT.search(msg)):
        return DeadlineError(f"deadline exceeded: {msg}", model=model, **context)
    if code == "UNAVAILABLE" and _OVERLOADED.search(msg):
        return ConnectError(f"server overloaded: {msg}", model=model, **context)
    if code == "UNAVAILABLE" and _HTTP1.search(msg):
        hint = "an HTTP server answered, not a gRPC one (Triton's HTTP port? its gRPC port is 8001 by default)"
        return ConnectError(f"server unavailable: {hint}: {msg}", model=model, **context)
    if code == "UNAVAILABLE" and not _NOT_READY.search(msg):
        return ConnectError(f"server unavailable: {msg}", model=model, **context)
    if _SHM.search(msg):
        region = _REGION.search(msg)
        if region is not None:
            context["region"] = region.group(1)
        return SharedMemoryError(f"shared memory: {msg}", model=model, **context)
    if code in ("NOT_FOUND", "UNAVAILABLE") or (code is not None and _NOT_READY.search(msg)):
        return ModelNotReadyError(f"model not ready: {msg}", model=model, **context)
    if code == "CANCELLED":
        return InferenceError(f"request cancelled by the server: {msg}", model=model, **context)
    label = f"[{code}] " if code else ""
    return InferenceError(f"inference failed: {label}{msg}", model=model, **context)
