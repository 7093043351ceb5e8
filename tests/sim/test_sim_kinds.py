"""The simulator's per-kind sensor models: registration is checked up front."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import pytest

from perception.kinds import CAMERA, LIDAR, register_kind, unregister_kind
from perception.sim import SimKind, SimSensor, register_sim_kind
from perception.sim._kinds import sim_kinds, unregister_sim_kind
from perception.sim._rig import SimLidarParams, SimMount
from perception.sim._world import Scene
from perception.types import SensorKind

MOUNT = SimMount((0.0, 0.0, 1.0))


@dataclass(frozen=True, slots=True)
class _Params:
    gain: float = 1.0


class _Model:
    def __init__(self, cfg: SimSensor, seed: int) -> None:
        self.cfg = cfg

    def capture(self, scene: Scene, rng: np.random.Generator) -> bytes:
        return b""


@pytest.fixture
def flash_lidar() -> Iterator[str]:
    """A point kind with the lidar's contract, registered for one test."""
    register_kind(replace(LIDAR, name="flash_lidar"))
    yield "flash_lidar"
    unregister_sim_kind("flash_lidar")
    unregister_kind("flash_lidar")


def test_the_built_in_kinds_are_simulated() -> None:
    assert {"lidar", "radar", "camera"} <= sim_kinds()
    assert all(type(k) is str for k in sim_kinds())


def test_a_kind_unknown_to_perception_kinds_is_refused() -> None:
    with pytest.raises(ValueError, match=r"kind 'sonar': no such sensor kind .*register_kind"):
        register_sim_kind(SimKind("sonar", _Params, _Model))


def test_a_kind_is_registered_once_and_its_sensors_get_its_params(flash_lidar: str) -> None:
    defn = SimKind(flash_lidar, _Params, _Model)
    register_sim_kind(defn)
    register_sim_kind(defn)  # the same definition again: a no-op
    with pytest.raises(ValueError, match="already registered with another definition"):
        register_sim_kind(SimKind(flash_lidar, _Params, _Model, image_format="png"))
    sensor = SimSensor("flash", flash_lidar, MOUNT, rate_hz=10.0)
    assert sensor.params == _Params() and not sensor.is_image and sensor.frame_id == "flash"


def test_params_must_be_a_dataclass_and_an_image_kind_needs_a_calibration() -> None:
    with pytest.raises(ValueError, match="params must be a dataclass"):
        SimKind("lidar", dict, _Model)
    with pytest.raises(ValueError, match="image_format"):
        SimKind("lidar", _Params, _Model, image_format="bmp")
    register_kind(replace(CAMERA, name="night_camera"))
    try:
        with pytest.raises(ValueError, match="calibration"):
            register_sim_kind(SimKind("night_camera", _Params, _Model))
    finally:
        unregister_kind("night_camera")


def test_a_sensor_takes_its_own_kinds_params() -> None:
    with pytest.raises(ValueError, match="lidar sensor takes SimLidarParams, got _Params"):
        SimSensor("l", SensorKind.LIDAR, MOUNT, rate_hz=10.0, params=_Params())
    assert SimSensor("l", SensorKind.LIDAR, MOUNT, rate_hz=10.0).params == SimLidarParams()
