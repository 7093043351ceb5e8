"""The simulator models of the built-in sensor kinds, registered when :mod:`perception.sim` is imported."""

from __future__ import annotations

from perception.sim._camera import CameraModel
from perception.sim._kinds import SimKind, register_sim_kind
from perception.sim._lidar import LidarModel
from perception.sim._radar import RadarModel
from perception.sim._rig import SimCameraParams, SimLidarParams, SimRadarParams, SimSensor
from perception.types import SensorKind

__all__ = ["BUILTIN_SIM_KINDS"]


def _lidar(cfg: SimSensor, seed: int) -> LidarModel:
    return LidarModel(cfg)


def _radar(cfg: SimSensor, seed: int) -> RadarModel:
    return RadarModel(cfg)


BUILTIN_SIM_KINDS = (
    SimKind(SensorKind.LIDAR, SimLidarParams, _lidar),
    SimKind(SensorKind.RADAR, SimRadarParams, _radar),
    SimKind(SensorKind.CAMERA, SimCameraParams, CameraModel),
)

for _defn in BUILTIN_SIM_KINDS:
    register_sim_kind(_defn)
