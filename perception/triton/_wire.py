"""The ``ModelInfer`` request as bytes on the wire, with the tensors copied once.

``tritonclient`` builds an inference request by copying each input three times before grpc copies it
a fourth time: ``ndarray.tobytes()`` (``InferInput.set_data_from_numpy``), into the protobuf message
(``raw_input_contents.extend``) and out of it again (``SerializeToString``). For a 300k-point lidar
cloud (4.8 MB) those copies, and protobuf's handling of a large ``bytes`` field, took most of the
client's time (measured with ``bench/bench_transport.py``: ``encode_ms`` per path).

A protobuf message is the concatenation of its encoded fields, and a repeated ``bytes`` field is one
``tag, length, bytes`` record per element. So the request is encoded here as: the message without
``raw_input_contents`` (model, id, parameters, the tensors' names/types/shapes — a few hundred bytes,
serialised by protobuf as usual), followed by one hand-encoded ``raw_input_contents`` record per input
sent inline, whose bytes are the array's own buffer. ``b"".join`` makes the only copy. The result is
byte-for-byte a valid ``inference.ModelInferRequest`` (the test suite decodes it with protobuf and
compares it with tritonclient's own encoding).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from tritonclient.grpc import InferResult, service_pb2
from tritonclient.utils import (
    TRITON_RESERVED_REQUEST_PARAMS,
    TRITON_RESERVED_REQUEST_PARAMS_PREFIX,
    serialize_byte_tensor,
)

__all__ = ["MODEL_INFER_METHOD", "WireInput", "decode_infer_response", "encode_infer_request", "model_infer_call"]

#: The fully qualified gRPC method of an inference call (KServe v2 ``GRPCInferenceService``).
MODEL_INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"

#: ``ModelInferRequest.raw_input_contents`` is field 7, wire type 2 (length-delimited).
_RAW_INPUT_TAG = bytes([(7 << 3) | 2])


@dataclass(frozen=True, slots=True)
class WireInput:
    """One input tensor: inline (``array``) or in a registered shared-memory region (``shm_region``)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    array: npt.NDArray[Any] | None = None
    shm_region: str | None = None
    shm_byte_size: int = 0
    shm_offset: int = 0


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _raw(array: npt.NDArray[Any], datatype: str) -> bytes | memoryview:
    """The tensor's bytes as Triton expects them (row-major; BYTES length-prefixed), copied only if the
    array is not already one contiguous buffer."""
    if datatype == "BYTES":
        serialized = serialize_byte_tensor(array)
        return bytes(serialized.item()) if serialized.size > 0 else b""
    if array.flags.c_contiguous:
        # a flat byte view of the array's own buffer (0-d and empty arrays have none to cast)
        return array.data.cast("B") if array.ndim and array.size else array.tobytes()
    return np.ascontiguousarray(array).tobytes()


def _reserved(key: str) -> bool:
    """True for request parameter names Triton reserves for itself (``timeout``, ``sequence_id``...)."""
    return key in TRITON_RESERVED_REQUEST_PARAMS or key.startswith(TRITON_RESERVED_REQUEST_PARAMS_PREFIX)


def _set_parameter(target: Any, key: str, value: str | int | float | bool) -> None:
    # bool before int: True is an int too
    if isinstance(value, bool):
        target[key].bool_param = value
    elif isinstance(value, int):
        target[key].int64_param = value
    elif isinstance(value, float):
        target[key].double_param = value
    elif isinstance(value, str):
        target[key].string_param = value
    else:
        raise TypeError(f"parameter {key!r}: {type(value).__name__} is not a str, int, float or bool")


def encode_infer_request(
    model: str,
    inputs: Sequence[WireInput],
    *,
    outputs: Sequence[str] | None = None,
    request_id: str = "",
    timeout_us: int | None = None,
    parameters: Mapping[str, str | int | float | bool] | None = None,
) -> bytes:
    """A serialised ``inference.ModelInferRequest`` (see the module docstring).

    Raises :class:`ValueError` for a reserved parameter name and :class:`TypeError` for a parameter
    value of an unsupported type (the caller names the request in its error).
    """
    request = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    raw: list[bytes | memoryview] = []
    for item in inputs:
        tensor = request.inputs.add(name=item.name, datatype=item.datatype, shape=item.shape)
        if item.shm_region is not None:
            tensor.parameters["shared_memory_region"].string_param = item.shm_region
            tensor.parameters["shared_memory_byte_size"].int64_param = item.shm_byte_size
            if item.shm_offset:
                tensor.parameters["shared_memory_offset"].int64_param = item.shm_offset
        elif item.array is not None:
            raw.append(_raw(item.array, item.datatype))
        else:
            raise ValueError(f"input {item.name!r} has neither data nor a shared-memory region")
    for name in outputs or ():
        request.outputs.add(name=name)
    if timeout_us is not None:
        request.parameters["timeout"].int64_param = timeout_us
    for key, value in (parameters or {}).items():
        if _reserved(key):
            raise ValueError(f"request parameter {key!r} is reserved by Triton")
        _set_parameter(request.parameters, key, value)
    parts: list[bytes | memoryview] = [request.SerializeToString()]
    for content in raw:
        parts += [_RAW_INPUT_TAG, _varint(len(content) if isinstance(content, bytes) else content.nbytes), content]
    return b"".join(parts)


def decode_infer_response(data: bytes) -> Any:
    """``tritonclient.grpc.InferResult`` of a serialised ``ModelInferResponse`` (``as_numpy`` etc.)."""
    return InferResult(service_pb2.ModelInferResponse.FromString(data))


def model_infer_call(channel: Any) -> Any:
    """``ModelInfer`` on a ``grpc.aio`` channel, sending :func:`encode_infer_request`'s bytes as they are
    and answering a ``tritonclient.grpc.InferResult``. Awaiting it raises ``grpc.RpcError`` on failure;
    cancelling the awaiting task cancels the RPC."""
    return channel.unary_unary(MODEL_INFER_METHOD, request_serializer=None, response_deserializer=decode_infer_response)
