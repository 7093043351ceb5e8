"""A fake inference client for runtimes without Triton: every model answers at once with no object."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from perception.kinds import kind_def
from perception.triton import InferRequest


class EmptyAnswers:
    """Every model answers at once with no object, in its kind's shapes (a camera's as a batch of one); the
    requests' inputs are kept (:attr:`inputs`)."""

    def __init__(self) -> None:
        self.inputs: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    async def infer_request(self, req: InferRequest) -> Any:
        with self._lock:
            self.inputs.append(dict(req.inputs))
        kind = "camera" if "IMAGE" in req.inputs else "lidar"
        contract = kind_def(kind).contract
        lead = (1,) if contract.batched else ()
        outputs = {
            spec.name: np.zeros((*lead, *(0 if d == -1 else d for d in spec.dims)), dtype=spec.numpy_dtype)
            for spec in contract.outputs
        }
        return type("Result", (), {"outputs": outputs})()
