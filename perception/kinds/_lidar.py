"""The lidar kind: a sweep of ``x, y, z, intensity`` points in, 3D boxes out (they seed fusion's objects)."""

from __future__ import annotations

from perception.types import PointCloudSample, Sample, SensorSpec

from ._kind import FusionRole, Prepared, SensorKindDef
from ._points import points_tensor, warmup_points
from ._tensors import KindContract, TensorSpec

__all__ = ["LIDAR"]

_FIELDS = ("x", "y", "z", "intensity")

#: Sweeps captured up to 120 ms before a frame's are merged into it: one earlier sweep of a 10 Hz lidar,
#: two of nuScenes' 20 Hz sweeps; keyframe-only drives (2 Hz) and KITTI object frames are sent alone.
#: Measured by re-running the lidar model on the same drives (``bench/bench_real.py``): on the
#: simulated drive (10 Hz) one earlier sweep took fused mAP from 0.664 to 0.742, two (220 ms) to 0.604,
#: since the classical detector has no time channel and moving objects smear by speed x window.
_ACCUMULATE_MS = 120.0

CONTRACT = KindContract(
    inputs=(TensorSpec("POINTS", "FP32", (-1, 4), description="x, y, z, intensity (sensor frame, m)"),),
    outputs=(
        TensorSpec("BOXES", "FP32", (-1, 7), description="x, y, z (box centre), l, w, h, yaw (sensor frame)"),
        TensorSpec("LABELS", "INT32", (-1,), description="index into perception.types.LABELS"),
        TensorSpec("SCORES", "FP32", (-1,), description="confidence in [0, 1]"),
    ),
)


def _prepare(sample: Sample, input_size: tuple[int, int] | None) -> Prepared:
    return {"POINTS": points_tensor(sample, LIDAR, keep_extra=False)}, (1.0, 1.0)


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
    accumulate_ms=_ACCUMULATE_MS,
    color=(1.00, 0.85, 0.00),
)
