"""The baseline: classic blocking dispatch with the synchronous ``tritonclient.grpc`` client.

One request at a time, in sensor order, each awaited before the next is sent — what a straightforward
integration does. Same tensors as the runtime (:func:`perception.scheduler.prepare_inputs`, cameras
decoded at the model's scale when its config states its input size), one request per camera, plain
gRPC, no deadline: every sensor is awaited.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import tritonclient.grpc as tgrpc
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from perception.config import SensorConfig
from perception.errors import ConnectError, PerceptionError
from perception.scheduler import output_names, prepare_inputs
from perception.types import Frame, SensorStatus

__all__ = ["SequentialClient", "SequentialResult"]

log = logging.getLogger(__name__)

_MAX_MESSAGE = 2**31 - 1


@dataclass(frozen=True, slots=True)
class SequentialResult:
    """One frame through the baseline: wall time and per-sensor status / round trip."""

    frame_id: int
    latency_ns: int
    status: dict[str, SensorStatus] = field(default_factory=dict)
    sensor_ns: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


class SequentialClient:
    """``with SequentialClient(url, sensors) as seq: seq.process(frame)`` (blocking)."""

    def __init__(self, url: str, sensors: Sequence[SensorConfig], *, timeout_s: float = 60.0) -> None:
        self._url = url
        self._sensors = [s for s in sensors if s.enabled]
        self._timeout_s = timeout_s
        self._client: Any = None
        self._input_sizes: dict[str, tuple[int, int] | None] = {}

    def __enter__(self) -> SequentialClient:
        try:
            self._client = tgrpc.InferenceServerClient(
                self._url,
                channel_args=[
                    ("grpc.max_send_message_length", _MAX_MESSAGE),
                    ("grpc.max_receive_message_length", _MAX_MESSAGE),
                ],
            )
        except InferenceServerException as exc:
            raise ConnectError(f"cannot create a gRPC client: {exc}", url=self._url) from exc
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            client.close()

    def server_version(self) -> str | None:
        """The server's version string (Triton's metadata), ``None`` if it does not answer."""
        try:
            return str(self._client.get_server_metadata().version)
        except (InferenceServerException, AttributeError):
            return None

    def process(self, frame: Frame) -> SequentialResult:
        """Send each sensor's request in turn and wait for each; a failed sensor does not stop the frame."""
        if self._client is None:
            raise ConnectError("the sequential client is not open", url=self._url)
        status: dict[str, SensorStatus] = {}
        sensor_ns: dict[str, int] = {}
        errors: dict[str, str] = {}
        start = time.perf_counter_ns()
        for s in self._sensors:
            sample = frame.samples.get(s.name)
            if sample is None:
                status[s.name] = SensorStatus.MISSING
                continue
            t0 = time.perf_counter_ns()
            try:
                self._infer(s, prepare_inputs(s.kind, sample, input_size=self._input_size(s)))
                status[s.name] = SensorStatus.OK
            except (InferenceServerException, PerceptionError) as exc:
                status[s.name] = SensorStatus.ERROR
                errors[s.name] = str(exc)
                log.debug("frame %d: %s failed: %s", frame.frame_id, s.name, exc)
            sensor_ns[s.name] = time.perf_counter_ns() - t0
        return SequentialResult(frame.frame_id, time.perf_counter_ns() - start, status, sensor_ns, errors)

    def _input_size(self, sensor: SensorConfig) -> tuple[int, int] | None:
        """A model's network input from its served config, if it states one (as the runtime reads it at start)."""
        if sensor.model not in self._input_sizes:
            from perception.triton import parse_model_config

            try:
                config = self._client.get_model_config(sensor.model, as_json=True)
            except InferenceServerException as exc:
                raise ConnectError(f"cannot read the config of model {sensor.model}: {exc}", url=self._url) from exc
            self._input_sizes[sensor.model] = parse_model_config(config).input_size
        return self._input_sizes[sensor.model]

    def _infer(self, sensor: SensorConfig, inputs: dict[str, Any]) -> None:
        infer_inputs = []
        for name, array in inputs.items():
            infer_input = tgrpc.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            infer_input.set_data_from_numpy(array)
            infer_inputs.append(infer_input)
        outputs = [tgrpc.InferRequestedOutput(name) for name in output_names(sensor.kind)]
        response = self._client.infer(sensor.model, infer_inputs, outputs=outputs, client_timeout=self._timeout_s)
        for name in output_names(sensor.kind):  # decode like a real consumer would
            response.as_numpy(name)
