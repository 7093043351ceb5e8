"""The hand-encoded ``ModelInfer`` request is exactly the message tritonclient would have sent (no server)."""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import _get_inference_request

from perception.errors import InputError
from perception.triton import ClientOptions, TritonClient
from perception.triton._wire import WireInput, decode_infer_response, encode_infer_request


def _tritonclient_request(inputs: list[Any], **kwargs: Any) -> Any:
    """What ``tritonclient.grpc.aio.InferenceServerClient.infer`` puts on the wire for the same call."""
    defaults = {
        "model_version": "",
        "request_id": "",
        "outputs": None,
        "sequence_id": 0,
        "sequence_start": False,
        "sequence_end": False,
        "priority": 0,
        "timeout": None,
        "parameters": None,
    }
    return _get_inference_request(model_name="m", inputs=inputs, **{**defaults, **kwargs})


def _inline(name: str, array: np.ndarray[Any, Any], datatype: str) -> tuple[Any, WireInput]:
    theirs = tgrpc.InferInput(name, list(array.shape), datatype)
    theirs.set_data_from_numpy(array)
    return theirs, WireInput(name, datatype, tuple(array.shape), array=array)


def test_inline_shared_memory_and_bytes_inputs_encode_like_tritonclient() -> None:
    rng = np.random.default_rng(0)
    cloud = rng.random((1000, 4), dtype=np.float32)
    strided = np.arange(24, dtype=np.int64).reshape(4, 6)[:, ::2]  # not contiguous
    assert not strided.flags.c_contiguous
    words = np.array([b"lidar", b"", b"radar"], dtype=np.object_)
    scalar = np.array(3.5, dtype=np.float64)  # 0-d
    a_theirs, a_ours = _inline("CLOUD", cloud, "FP32")
    b_theirs, b_ours = _inline("STRIDED", strided, "INT64")
    c_theirs, c_ours = _inline("WORDS", words, "BYTES")
    d_theirs, d_ours = _inline("SCALAR", scalar, "FP64")
    shm_theirs = tgrpc.InferInput("IMAGE", [1, 8, 8, 3], "UINT8")
    shm_theirs.set_shared_memory("perception_1_ab_region", 192, offset=64)
    region = "perception_1_ab_region"
    shm_ours = WireInput("IMAGE", "UINT8", (1, 8, 8, 3), shm_region=region, shm_byte_size=192, shm_offset=64)
    params = {"delay_ms": 5, "mode": "fast", "scale": 0.5, "debug": True}
    expected = _tritonclient_request(
        [a_theirs, shm_theirs, b_theirs, c_theirs, d_theirs],
        request_id="frame-7",
        outputs=[tgrpc.InferRequestedOutput("BOXES"), tgrpc.InferRequestedOutput("SCORES")],
        timeout=1500,
        parameters=params,
    )
    ours = encode_infer_request(
        "m",
        [a_ours, shm_ours, b_ours, c_ours, d_ours],
        outputs=("BOXES", "SCORES"),
        request_id="frame-7",
        timeout_us=1500,
        parameters=params,
    )
    decoded = service_pb2.ModelInferRequest.FromString(ours)
    assert decoded == expected
    assert decoded.parameters["debug"].WhichOneof("parameter_choice") == "bool_param"  # not int64
    assert decoded.raw_input_contents[0] == cloud.tobytes()


def test_minimal_request_and_empty_tensor() -> None:
    empty = np.zeros((0, 4), dtype=np.float32)
    theirs, ours = _inline("POINTS", empty, "FP32")
    decoded = service_pb2.ModelInferRequest.FromString(encode_infer_request("m", [ours]))
    assert decoded == _tritonclient_request([theirs])


def test_reserved_and_unsupported_parameters_are_refused() -> None:
    _, ours = _inline("INPUT", np.ones(3, np.float32), "FP32")
    for key in ("timeout", "sequence_id", "triton_anything"):
        with pytest.raises(ValueError, match="reserved"):
            encode_infer_request("m", [ours], parameters={key: 1})
    with pytest.raises(TypeError, match="not a str"):
        encode_infer_request("m", [ours], parameters={"bad": [1, 2]})  # type: ignore[dict-item]


def test_response_decodes_into_tritonclient_result() -> None:
    response = service_pb2.ModelInferResponse(model_name="m", id="x")
    out = response.outputs.add(name="OUTPUT", datatype="FP32", shape=[2])
    assert out.name == "OUTPUT"
    response.raw_output_contents.append(np.array([1.5, 2.5], np.float32).tobytes())
    result = decode_infer_response(response.SerializeToString())
    np.testing.assert_array_equal(result.as_numpy("OUTPUT"), [1.5, 2.5])
    assert result.get_response().id == "x"


@pytest.mark.anyio
async def test_a_reserved_parameter_is_an_input_error_before_anything_is_sent() -> None:
    with anyio.fail_after(10):
        async with TritonClient(ClientOptions(urls=("127.0.0.1:1",), channels=1)) as client:
            with pytest.raises(InputError, match="reserved") as info:
                await client.infer("m", {"INPUT": np.ones(3, np.float32)}, parameters={"timeout": 5}, sensor="lidar")
    assert info.value.sensor == "lidar"
