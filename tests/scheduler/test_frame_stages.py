"""A processed frame's stages add up to its total, with a fusion stage in its worker thread too (no Triton)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import anyio
import numpy as np
import pytest

from perception.config import RuntimeConfig, from_data
from perception.kinds import kind_def
from perception.scheduler import Runtime
from perception.triton import InferRequest
from perception.types import FUSION_HANDOFF, Frame, FrameResult, PointCloudSample, SensorResult

MS = 1_000_000
LIDAR = ("x", "y", "z", "intensity")


class _Answers:
    """A lidar model that answers every request at once with empty outputs."""

    def __init__(self) -> None:
        self.outputs = {
            spec.name: np.zeros(tuple(0 if d == -1 else d for d in spec.dims), dtype=spec.numpy_dtype)
            for spec in kind_def("lidar").contract.outputs
        }

    async def infer_request(self, req: InferRequest) -> Any:
        return type("Result", (), {"outputs": self.outputs})()


class _SlowOutsideItsClock:
    """A fusion stage that takes at least 20 ms in its thread, of which its own clock says 1 ns: the rest
    of the time from the join to the result is no stage of the fusion's."""

    def __init__(self) -> None:
        self._pause = threading.Event()

    def __call__(self, frame: Frame, results: Mapping[str, SensorResult]) -> tuple[tuple[()], dict[str, int]]:
        self._pause.wait(0.02)  # never set: a 20 ms pause however busy the host (at least, never less)
        return (), {"fusion": 1, "tracking": 1}


def _config() -> RuntimeConfig:
    data: dict[str, Any] = {
        "server": {"url": "localhost:1"},
        "sensors": [{"name": "lidar", "kind": "lidar", "model": "lid", "transport": "grpc"}],
        "trigger": {"rate_hz": 10},
        "fusion": {"enabled": False},
        "budget": {"total_ms": 60_000, "fusion_reserve_ms": 10},
    }
    return from_data(RuntimeConfig, data)


class _Untimed:
    """A fusion stage that times nothing of its own."""

    def __call__(self, frame: Frame, results: Mapping[str, SensorResult]) -> tuple[tuple[()], dict[str, int]]:
        return (), {}


def _processed(fusion: Any) -> FrameResult:
    points = np.zeros((10, 4), dtype=np.float32)
    frame = Frame(0, 0, {"lidar": PointCloudSample("lidar", 0, "lidar", points, LIDAR)})

    async def main() -> FrameResult:
        with anyio.fail_after(30):  # watchdog
            async with Runtime(_config(), client=_Answers(), check_models=False, fusion=fusion) as rt:
                return await rt.process(frame)

    return anyio.run(main)


def test_the_stages_of_a_fused_frame_add_up_to_its_total() -> None:
    # The fusion's stages are timed inside its call; the call's handoff to its worker thread and back was
    # in the frame's total and in no stage: the tree did not add up (up to tens of ms on a busy host).
    r = _processed(_SlowOutsideItsClock())
    stages = r.latency.stages
    assert sum(stages.values()) == r.latency.total_ns, stages
    assert stages["fusion"] == 1 and stages["tracking"] == 1
    assert stages[FUSION_HANDOFF] >= 20 * MS  # the pause the fusion's clock did not see


def test_a_frame_that_did_not_wait_for_fusion_has_a_fusion_wait_of_0() -> None:
    # fusion_wait was in the tree only when the frame waited: its percentiles were over those frames alone
    # (p50 12 ms where 95 % of the frames waited 0), unlike join_wait's, over every frame.
    r = _processed(_SlowOutsideItsClock())
    assert r.latency.stages["fusion_wait"] == 0  # the first frame: its turn had come


@pytest.mark.parametrize("fusion", [None, _Untimed()], ids=["no fusion", "untimed fusion"])
def test_without_the_fusion_s_own_times_the_rest_of_the_frame_is_its_fusion(fusion: Any) -> None:
    r = _processed(fusion)
    stages = r.latency.stages
    assert sum(stages.values()) == r.latency.total_ns, stages
    assert "fusion" in stages and FUSION_HANDOFF not in stages
