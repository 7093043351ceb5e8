"""Helpers of the point-cloud kinds (lidar, radar): request tensors and warm-up samples."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from perception.errors import InputError
from perception.types import PointCloudSample, Sample, SensorSpec

__all__ = ["points_tensor", "warmup_points"]


def points_tensor(sample: Sample, kind: str, columns: int, *, keep_extra: bool) -> npt.NDArray[np.float32]:
    """A point cloud's ``POINTS`` tensor: its first ``columns`` columns, or all of them (at least
    ``columns``) with ``keep_extra``. Raises :class:`InputError` for another sample type or too few columns."""
    if not isinstance(sample, PointCloudSample):
        raise InputError(f"expected a point cloud for a {kind}, got {type(sample).__name__}", sensor=sample.sensor)
    pts = sample.points
    if pts.shape[1] < columns:
        raise InputError(
            f"{kind} points need at least {columns} columns, got {pts.shape[1]}", sensor=sample.sensor, tensor="POINTS"
        )
    cols = pts if keep_extra else pts[:, :columns]
    return np.ascontiguousarray(cols, dtype=np.float32)


def warmup_points(sensor: str, spec: SensorSpec | None, count: int, fields: tuple[str, ...]) -> PointCloudSample:
    """``count`` deterministic points spread over +-40 m (z in [-1.5, 1]) with columns ``fields``."""
    rng = np.random.default_rng(0)
    pts = rng.uniform(-40.0, 40.0, (count, len(fields))).astype(np.float32)
    pts[:, 2] = rng.uniform(-1.5, 1.0, len(pts))
    frame_id = spec.frame_id if spec is not None else sensor
    return PointCloudSample(sensor, 0, frame_id, pts, fields)
