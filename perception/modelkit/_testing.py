"""Tiny python-backend models for tests and benchmarks (``tests/triton_models/``).

Each model directory's ``model.py`` just re-exports one of these classes as ``TritonPythonModel``.
Contracts (``max_batch_size: 0``):

* ``SleeperModel``: ``INPUT`` FP32 ``[-1]`` -> ``OUTPUT`` FP32 ``[1]`` (the sum of ``INPUT``) after
  sleeping ``delay_ms`` (model parameter, overridable per request by a ``delay_ms`` request parameter).
  One instance, so concurrent requests queue like on a single-instance GPU model; a request cancelled
  by its client (e.g. gRPC deadline) stops sleeping within a few ms and answers CANCELLED. A
  ``started`` request parameter (a file path) is created when the request starts running: tests wait
  for it to act while a request is certainly on the server (no guessed delay).
* ``FailerModel``: same contract, every request answers INTERNAL "failer: deliberate failure".
* ``EchoModel``: ``INPUT`` FP32 ``[-1,-1]`` -> ``OUTPUT`` FP32 ``[-1,-1]`` = ``2 * INPUT``.
* ``KindSleeperModel``: meets the tensor contract of a sensor kind (model parameter ``kind``: lidar,
  radar or camera; see ``models/README.md``), sleeps ``delay_ms`` like ``SleeperModel`` and answers
  with no detections. Lets scheduler tests and benchmarks run the real runtime against models of
  known latency (or hanging ones).
* ``ToldModel``: meets a sensor kind's input contract (model parameter ``kind``) and answers with what
  the request tells it (:func:`told_outputs`): the first numbers of the input (a point cloud's values,
  a batch's first image's pixels) say, per output of the kind's contract, its dtype and shape, or to
  leave it out. Lets tests send the runtime any answer, right or wrong, through the real server.

Only importable inside the Triton python backend stub (needs ``triton_python_backend_utils``).
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from perception.kinds import kind_def

__all__ = ["TOLD_DTYPES", "EchoModel", "FailerModel", "KindSleeperModel", "SleeperModel", "ToldModel", "told_outputs"]

_CANCEL_CHECK_S = 0.002


def _parameter(args: dict[str, str], key: str, default: str) -> str:
    config = json.loads(args["model_config"])
    entry = config.get("parameters", {}).get(key)
    return str(entry["string_value"]) if entry else default


def _request_delay_ms(request: Any, default: float) -> float:
    raw = request.parameters()
    params = json.loads(raw) if raw else {}
    return float(params.get("delay_ms", default))


def _sleep(request: Any, delay_s: float, name: str) -> Any:
    """Sleep ``delay_s`` in small steps; a CANCELLED response if the client gave up, else ``None``.
    Creates the file named by the request's ``started`` parameter first, if any."""
    raw = request.parameters()
    started = (json.loads(raw) if raw else {}).get("started")
    if started:
        with open(str(started), "w", encoding="utf-8"):
            pass
    deadline = time.monotonic() + delay_s
    while (remaining := deadline - time.monotonic()) > 0:
        if request.is_cancelled():
            error = pb_utils.TritonError(f"{name}: cancelled", pb_utils.TritonError.CANCELLED)
            return pb_utils.InferenceResponse(error=error)
        time.sleep(min(remaining, _CANCEL_CHECK_S))
    return None


class SleeperModel:
    """Sleeps ``delay_ms`` then returns the sum of its input (simulates a model of known latency)."""

    def initialize(self, args: dict[str, str]) -> None:
        self.name = args["model_name"]
        self.delay_ms = float(_parameter(args, "delay_ms", "0"))

    def _one(self, request: Any) -> Any:
        try:
            delay_s = _request_delay_ms(request, self.delay_ms) / 1000.0
        except (TypeError, ValueError) as exc:
            message = f"{self.name}: bad delay_ms parameter: {exc}"
            error = pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)
            return pb_utils.InferenceResponse(error=error)
        data = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
        cancelled = _sleep(request, delay_s, self.name)
        if cancelled is not None:
            return cancelled
        total = np.asarray([data.sum(dtype=np.float64)], dtype=np.float32)
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", total)])

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(r) for r in requests]


class FailerModel:
    """Answers every request with an INTERNAL error."""

    def initialize(self, args: dict[str, str]) -> None:
        self.name = args["model_name"]

    def execute(self, requests: list[Any]) -> list[Any]:
        error = pb_utils.TritonError(f"{self.name}: deliberate failure", pb_utils.TritonError.INTERNAL)
        return [pb_utils.InferenceResponse(error=error) for _ in requests]


class EchoModel:
    """Returns twice its input."""

    def initialize(self, args: dict[str, str]) -> None:
        self.name = args["model_name"]

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", (data * 2).astype(np.float32))])
            )
        return responses


class KindSleeperModel:
    """A sensor-kind contract with a known latency and no detections."""

    def initialize(self, args: dict[str, str]) -> None:
        self.name = args["model_name"]
        self.kind = _parameter(args, "kind", "lidar")
        self.delay_ms = float(_parameter(args, "delay_ms", "0"))
        contract = kind_def(self.kind).contract  # empty outputs of the kind's contract (-1 dims empty)
        self.input = contract.inputs[0].name
        self.batched = contract.batched
        self.empty = [(t.name, tuple(0 if d == -1 else d for d in t.dims), t.numpy_dtype) for t in contract.outputs]

    def _one(self, request: Any) -> Any:
        data = pb_utils.get_input_tensor_by_name(request, self.input).as_numpy()
        cancelled = _sleep(request, _request_delay_ms(request, self.delay_ms) / 1000.0, self.name)
        if cancelled is not None:
            return cancelled
        batch = (data.shape[0],) if self.batched else ()
        tensors = [pb_utils.Tensor(name, np.zeros(batch + shape, dtype=dtype)) for name, shape, dtype in self.empty]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(r) for r in requests]


#: ``ToldModel``'s dtype codes (0: the contract's own dtype; ``TOLD_OMIT``: leave the output out).
TOLD_DTYPES: dict[int, Any] = {1: np.float32, 2: np.int32, 3: np.float64, 4: np.uint8, 5: np.int64}
TOLD_OMIT = 9


def told_outputs(kind: str, told: Any, batch: int) -> list[tuple[str, Any]]:
    """What ``ToldModel`` answers: five numbers per output of ``kind``'s contract, in its order --
    ``dtype code, rank, d0, d1, d2``. All five zero: the right answer, empty (the batch dimension
    first for a batched kind); else an array of that dtype and shape ``(d0, d1, d2)[:rank]`` (filled
    with ones), or no such output (code ``TOLD_OMIT``)."""
    contract = kind_def(kind).contract
    values = [int(v) for v in np.asarray(told).reshape(-1)[: 5 * len(contract.outputs)]]
    values += [0] * (5 * len(contract.outputs) - len(values))
    out = []
    for i, spec in enumerate(contract.outputs):
        code, rank, *dims = values[5 * i : 5 * i + 5]
        if code == TOLD_OMIT:
            continue
        if (code, rank, *dims) == (0, 0, 0, 0, 0):
            right = ((batch,) if contract.batched else ()) + tuple(0 if d == -1 else d for d in spec.dims)
            out.append((spec.name, np.zeros(right, spec.numpy_dtype)))
            continue
        dtype = TOLD_DTYPES.get(code, spec.numpy_dtype)
        out.append((spec.name, np.ones(tuple(dims[: max(0, min(rank, 3))]), dtype)))
    return out


class ToldModel:
    """Answers with the outputs its input tells it (:func:`told_outputs`)."""

    def initialize(self, args: dict[str, str]) -> None:
        self.name = args["model_name"]
        self.kind = _parameter(args, "kind", "lidar")
        contract = kind_def(self.kind).contract
        self.input = contract.inputs[0].name
        self.batched = contract.batched

    def _one(self, request: Any) -> Any:
        data = pb_utils.get_input_tensor_by_name(request, self.input).as_numpy()
        batch = data.shape[0] if self.batched else 1
        told = data[0] if self.batched else data
        tensors = [pb_utils.Tensor(name, array) for name, array in told_outputs(self.kind, told, batch)]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(r) for r in requests]
