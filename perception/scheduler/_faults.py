"""Client-side fault injection (``faults:`` in the launch profile), for probing latency budgets.

Wraps the Triton client, so it works against any Triton, embedded or remote: for a configured model,
each request is delayed by ``delay_ms`` plus uniform jitter in ``[0, jitter_ms]`` with probability
``probability``, and fails with an :class:`InferenceError` with probability ``error_probability``.
The delay is an ``anyio.sleep`` inside the request's own task, so it counts against the frame's
deadline and is cancelled by the join like a slow model would be. Draws come from a seeded generator:
the same run injects the same faults.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from perception.config import FaultConfig
from perception.errors import InferenceError
from perception.scheduler._dispatch import InferClient
from perception.triton import InferRequest

__all__ = ["FaultInjectingClient"]

log = logging.getLogger(__name__)


class FaultInjectingClient:
    """An :class:`InferClient` that injects the configured faults before delegating."""

    def __init__(self, client: InferClient, faults: Sequence[FaultConfig], *, seed: int = 0) -> None:
        self._client = client
        self._faults: Mapping[str, FaultConfig] = {f.model: f for f in faults}
        self._rng = random.Random(seed)
        self.injected_delays = 0
        self.injected_errors = 0

    async def infer_request(self, req: InferRequest) -> Any:
        fault = self._faults.get(req.model)
        if fault is not None:
            if (fault.delay_ms or fault.jitter_ms) and self._rng.random() < fault.probability:
                self.injected_delays += 1
                await anyio.sleep((fault.delay_ms + self._rng.uniform(0.0, fault.jitter_ms)) / 1000.0)
            if fault.error_probability and self._rng.random() < fault.error_probability:
                self.injected_errors += 1
                message = "injected fault (faults: in the launch profile)"
                raise InferenceError(message, model=req.model, sensor=req.sensor, frame=req.frame)
        return await self._client.infer_request(req)
