"""The lidar kind: a sweep of ``x, y, z, intensity`` points in, 3D boxes out (they seed fusion's objects)."""

from __future__ import annotations

from perception.types import PointCloudSample, Sample, SensorSpec

from ._kind import FusionRole, Prepared, SensorKindDef
from ._points import points_tensor, warmup_points
from ._tensors import KindContract, TensorSpec

__all__ = ["LIDAR"]

_FIELDS = ("x", "y", "z", "intensity")

CONTRACT = KindContract(
    inputs=(TensorSpec("POINTS", "FP32", (-1, 4), description="x, y, z, intensity (sensor frame, m)"),),
    outputs=(
        TensorSpec("BOXES", "FP32", (-1, 7), description="x, y, z (box centre), l, w, h, yaw (sensor frame)"),
        TensorSpec("LABELS", "INT32", (-1,), description="index into perception.types.LABELS"),
        TensorSpec("SCORES", "FP32", (-1,), description="confidence in [0, 1]"),
    ),
)


def _prepare(sample: Sample, input_size: tuple[int, int] | None) -> Prepared:
    return {"POINTS": points_tensor(sample, "lidar", len(_FIELDS), keep_extra=False)}, (1.0, 1.0)


def _warmup(sensor: str, spec: SensorSpec | None) -> Sample:
    return warmup_points(sensor, spec, 2000, _FIELDS)


LIDAR = SensorKindDef(
    name="lidar",
    sample=PointCloudSample,
    point_fields=_FIELDS,
    contract=CONTRACT,
    prepare=_prepare,
    warmup=_warmup,
    fusion=FusionRole.BOXES_3D,
    default_model="lidar_detector",
    color=(1.00, 0.85, 0.00),
)
