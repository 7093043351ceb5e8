"""The radar kind: ``x, y, z, radial_velocity, rcs`` returns in, moving points out (they refine motion)."""

from __future__ import annotations

from perception.types import PointCloudSample, Sample, SensorSpec

from ._kind import FusionRole, Prepared, SensorKindDef
from ._points import points_tensor, warmup_points
from ._tensors import KindContract, TensorSpec

__all__ = ["RADAR", "RADAR_MIN_COLUMNS"]

_FIELDS = ("x", "y", "z", "radial_velocity", "rcs")
#: Radar rows carry at least ``x, y, z, radial_velocity, rcs``; more columns are allowed and ignored.
RADAR_MIN_COLUMNS = len(_FIELDS)

CONTRACT = KindContract(
    inputs=(
        TensorSpec(
            "POINTS",
            "FP32",
            (-1, -1),
            min_columns=RADAR_MIN_COLUMNS,
            description="x, y, z, radial_velocity (ego-compensated, m/s, + = away), rcs (dBsm)",
        ),
    ),
    outputs=(
        TensorSpec("POSITIONS", "FP32", (-1, 3), description="object position (sensor frame, m)"),
        TensorSpec("RADIAL_VELOCITY", "FP32", (-1,), description="m/s, + = moving away"),
        TensorSpec("VELOCITY", "FP32", (-1, 2), description="over-ground vx, vy (sensor frame); NaN if unobservable"),
        TensorSpec("RCS", "FP32", (-1,), description="dBsm"),
        TensorSpec("SCORES", "FP32", (-1,), description="confidence in [0, 1]"),
        TensorSpec("RETURNS", "INT32", (-1,), description="returns the object was formed from (>= 1)"),
    ),
)


def _prepare(sample: Sample, input_size: tuple[int, int] | None) -> Prepared:
    return {"POINTS": points_tensor(sample, RADAR, keep_extra=True)}, (1.0, 1.0)


def _warmup(sensor: str, spec: SensorSpec | None) -> Sample:
    return warmup_points(sensor, spec, 50, _FIELDS)


RADAR = SensorKindDef(
    name="radar",
    sample=PointCloudSample,
    point_fields=_FIELDS,
    contract=CONTRACT,
    prepare=_prepare,
    warmup=_warmup,
    fusion=FusionRole.DOPPLER_POINTS,
    default_model="radar_detector",
    color=(0.95, 0.15, 0.15),
)
