"""Translation of Triton / gRPC / OS errors into :mod:`perception.errors` (pure, no server)."""

from __future__ import annotations

import grpc
import pytest
from grpc.aio import AioRpcError, Metadata
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
from perception.triton import translate
from perception.triton._errors import grpc_code, is_shm_registration_lost

CTX = {"model": "lidar_pp", "sensor": "lidar_top", "frame": 42, "url": "127.0.0.1:8001"}


def _ise(status: str | None, msg: str) -> InferenceServerException:
    return InferenceServerException(msg=msg, status=status)


@pytest.mark.parametrize(
    ("status", "msg", "cls"),
    [
        ("StatusCode.UNAVAILABLE", "failed to connect to all addresses; Connection refused", ConnectError),
        ("StatusCode.UNAVAILABLE", "Exceeds maximum queue size", ConnectError),
        ("StatusCode.DEADLINE_EXCEEDED", "Deadline Exceeded", DeadlineError),
        ("StatusCode.UNAVAILABLE", "Request timeout expired", DeadlineError),
        ("StatusCode.NOT_FOUND", "Request for unknown model: 'nope' is not found", ModelNotReadyError),
        ("StatusCode.NOT_FOUND", "Request for unknown model: 'x' has no available versions", ModelNotReadyError),
        ("StatusCode.UNAVAILABLE", "Request for unknown model: 'x' is not ready", ModelNotReadyError),
        ("StatusCode.INVALID_ARGUMENT", "unexpected inference input 'FOO' for model 'm'", InferenceError),
        ("StatusCode.INTERNAL", "failer: deliberate failure", InferenceError),
        ("StatusCode.CANCELLED", "sleeper_40: cancelled", InferenceError),
        ("StatusCode.NOT_FOUND", "Unable to find shared memory region: 'perception_1_ab_0'", SharedMemoryError),
        ("StatusCode.ALREADY_EXISTS", "shared memory region 'r' already in manager", SharedMemoryError),
        (None, "got unexpected datatype INT32 from numpy array, expected FP32.", InferenceError),
    ],
)
def test_inference_server_exception_categories(status: str | None, msg: str, cls: type[TransportError]) -> None:
    err = translate(_ise(status, msg), **CTX)
    assert type(err) is cls
    assert err.model == "lidar_pp" and err.sensor == "lidar_top" and err.frame == 42
    assert err.url == "127.0.0.1:8001"
    assert msg.split(":", maxsplit=1)[0] in str(err)
    assert err.retryable is (cls is ConnectError)


@pytest.mark.parametrize(
    "msg",
    [
        "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:8000: Failed parsing HTTP/2 "
        "(Expected SETTINGS frame as the first frame, got frame type 79)",
        "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:8000: Trying to connect an "
        "http1.x server (HTTP status 400)",
    ],
)
def test_an_http_server_at_the_url_is_said_to_be_one(msg: str) -> None:
    # --url at Triton's HTTP port (8000, not its gRPC 8001) said only gRPC's "Failed parsing HTTP/2 (Expected
    # SETTINGS frame ...)"
    err = translate(_ise("StatusCode.UNAVAILABLE", msg), **CTX)
    assert type(err) is ConnectError and err.retryable
    assert str(err).startswith(
        "lidar_pp: server unavailable: an HTTP server answered, not a gRPC one (Triton's HTTP port? its gRPC port is "
        "8001 by default): failed to connect"
    )


def test_message_names_tensor_and_drops_request_id() -> None:
    exc = _ise(
        "StatusCode.INVALID_ARGUMENT",
        "[request id: <id_unknown>] inference input 'POINTS' data-type is 'INT32', but model 'm' expects 'FP32'",
    )
    err = translate(exc, **CTX)
    assert isinstance(err, InferenceError) and not isinstance(err, ModelNotReadyError)
    assert err.tensor == "POINTS"
    assert "request id" not in str(err)
    assert str(err).startswith("lidar_pp: inference failed: [INVALID_ARGUMENT] inference input 'POINTS'")


def test_shared_memory_region_lost_is_recognised() -> None:
    lost = _ise("StatusCode.NOT_FOUND", "Unable to find shared memory region: 'perception_1_ab_0'")
    assert is_shm_registration_lost(lost)
    assert translate(lost).region == "perception_1_ab_0"
    already = _ise("StatusCode.ALREADY_EXISTS", "shared memory region 'r' already in manager")
    assert not is_shm_registration_lost(already)
    assert not is_shm_registration_lost(_ise("StatusCode.NOT_FOUND", "Request for unknown model: 'x' is not found"))


def test_raw_grpc_errors_are_translated_by_code() -> None:
    def rpc(code: grpc.StatusCode, details: str) -> AioRpcError:
        return AioRpcError(code, Metadata(), Metadata(), details=details, debug_error_string="debug")

    assert grpc_code(rpc(grpc.StatusCode.UNAVAILABLE, "x")) == "UNAVAILABLE"
    assert isinstance(translate(rpc(grpc.StatusCode.UNAVAILABLE, "connection reset")), ConnectError)
    assert isinstance(translate(rpc(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")), DeadlineError)
    assert isinstance(translate(rpc(grpc.StatusCode.NOT_FOUND, "unknown model 'a'")), ModelNotReadyError)
    err = translate(rpc(grpc.StatusCode.INVALID_ARGUMENT, "bad input 'X'"), model="m")
    assert type(err) is InferenceError and "bad input" in str(err)


def test_os_and_shared_memory_exceptions() -> None:
    err = translate(ConnectionRefusedError(111, "Connection refused"), url="h:1")
    assert isinstance(err, ConnectError) and err.retryable and err.url == "h:1"
    shm = SharedMemoryException("unable to create the shared memory region")
    try:
        raise shm from OSError(28, "No space left on device")
    except SharedMemoryException as exc:
        err = translate(exc, model="m")
    assert isinstance(err, SharedMemoryError) and "No space left" in str(err)


def test_translated_errors_pass_through_unchanged() -> None:
    original = DeadlineError("late", model="m")
    assert translate(original, model="other") is original
