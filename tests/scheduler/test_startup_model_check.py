"""The start-up model check and warm-up cover every kind a model serves: sensors of two kinds sharing one
model were checked (and warmed up) as the first one's kind only. No server: a client answers as a
served lidar model would."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from perception.config import RuntimeConfig, from_data
from perception.errors import ModelContractError
from perception.kinds import kind_def
from perception.scheduler import Runtime
from perception.triton import InferRequest, ModelContract, TritonClient

pytestmark = pytest.mark.anyio

LIDAR = kind_def("lidar").contract
CAMERA = kind_def("camera").contract


class _Served(TritonClient):
    """Answers readiness, statistics and the configuration of the models in ``served``; records the
    warm-up requests (model, sensor) and fails them (no answer is needed)."""

    def __init__(self, served: dict[str, ModelContract]) -> None:
        super().__init__()
        self.served = served
        self.requests: list[tuple[str, str | None]] = []

    async def wait_ready(self, models: Any, timeout_s: float, **kwargs: Any) -> None:
        return None

    async def model_statistics(self, model: str, url: str | None = None, **kwargs: Any) -> dict[str, int]:
        return {"success_count": 0}

    async def model_contract(self, model: str, url: str | None = None) -> ModelContract:
        return self.served[model]

    async def infer_request(self, req: InferRequest) -> Any:
        self.requests.append((req.model, req.sensor))
        raise ModelContractError("not answered here", model=req.model)


def _runtime(client: _Served, sensors: list[dict[str, str]]) -> Runtime:
    data = {
        "server": {"url": "127.0.0.1:1"},
        "sensors": sensors,
        "trigger": {"rate_hz": 10},
        "fusion": {"enabled": False},
    }
    return Runtime(from_data(RuntimeConfig, data), client=client)


async def test_a_model_shared_by_two_kinds_is_checked_as_each_naming_the_sensors() -> None:
    client = _Served({"lidar_detector": ModelContract("lidar_detector", 0, LIDAR.inputs, LIDAR.outputs)})
    rt = _runtime(
        client,
        [
            {"name": "lidar_top", "kind": "lidar", "model": "lidar_detector"},
            {"name": "cam_front", "kind": "camera", "model": "lidar_detector"},
            {"name": "cam_back", "kind": "camera", "model": "lidar_detector"},
        ],
    )
    with anyio.fail_after(10), pytest.raises(ModelContractError) as info:  # watchdog
        await rt._verify_models()
    assert info.value.model == "lidar_detector" and info.value.sensor == "cam_front, cam_back"
    assert "camera model" in info.value.message


async def test_a_model_serving_two_kinds_is_warmed_up_as_each() -> None:
    both = ModelContract("both", 0, LIDAR.inputs, LIDAR.outputs)
    client = _Served({"both": both})
    rt = _runtime(
        client,
        [
            {"name": "lidar_top", "kind": "lidar", "model": "both"},
            {"name": "lidar_rear", "kind": "lidar", "model": "both"},
            {"name": "radar_front", "kind": "radar", "model": "both"},
        ],
    )
    with anyio.fail_after(10):  # watchdog
        await rt._warm_up()  # failed warm-ups are warnings
    assert sorted(client.requests) == [("both", "lidar_top"), ("both", "radar_front")]
