"""Sample -> request tensors, and batched response -> per-sensor outputs, by sensor kind.

Tensor names follow the contracts in ``models/README.md`` (checked at start by
:func:`perception.triton.check_contract`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.errors import InputError
from perception.types import ImageSample, PointCloudSample, Sample, SensorSpec

__all__ = ["OUTPUTS", "camera_batch", "prepare_inputs", "split_batch", "warmup_inputs"]

#: Output tensors requested from each kind of model.
OUTPUTS: Mapping[str, tuple[str, ...]] = {
    "lidar": ("BOXES", "LABELS", "SCORES"),
    "radar": ("POSITIONS", "RADIAL_VELOCITY", "VELOCITY", "RCS", "SCORES"),
    "camera": ("BOXES", "SCORES", "LABELS", "COUNT"),
}

_POINT_COLUMNS = {"lidar": 4, "radar": 5}


def prepare_inputs(kind: str, sample: Sample) -> dict[str, npt.NDArray[Any]]:
    """Input tensors of one sample (camera: an unbatched ``[1,H,W,3]`` image)."""
    if kind in _POINT_COLUMNS:
        if not isinstance(sample, PointCloudSample):
            raise InputError(f"expected a point cloud for a {kind}, got {type(sample).__name__}", sensor=sample.sensor)
        need = _POINT_COLUMNS[kind]
        pts = sample.points
        if pts.shape[1] < need:
            raise InputError(
                f"{kind} points need at least {need} columns, got {pts.shape[1]}", sensor=sample.sensor, tensor="POINTS"
            )
        cols = pts[:, :need] if kind == "lidar" else pts
        return {"POINTS": np.ascontiguousarray(cols, dtype=np.float32)}
    if kind == "camera":
        if not isinstance(sample, ImageSample):
            raise InputError(f"expected an image for a camera, got {type(sample).__name__}", sensor=sample.sensor)
        return {"IMAGE": sample.decode()[None]}
    raise InputError(f"unknown sensor kind {kind!r}", sensor=sample.sensor)


def camera_batch(images: Sequence[npt.NDArray[np.uint8]]) -> list[list[int]]:
    """Group camera indices whose images share a shape (one batched request per group)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, img in enumerate(images):
        groups.setdefault(tuple(img.shape), []).append(i)
    return list(groups.values())


def split_batch(outputs: Mapping[str, npt.NDArray[Any]], index: int) -> dict[str, npt.NDArray[Any]]:
    """Outputs of batch element ``index`` (batch dimension removed)."""
    return {name: np.asarray(arr[index]) for name, arr in outputs.items()}


def warmup_inputs(kind: str, spec: SensorSpec | None) -> dict[str, npt.NDArray[Any]]:
    """Representative, deterministic inputs for a warm-up request of a ``kind`` model."""
    rng = np.random.default_rng(0)
    if kind == "camera":
        cal = spec.calibration if spec is not None else None
        h, w = (cal.height, cal.width) if cal is not None else (360, 640)
        return {"IMAGE": rng.integers(0, 256, (1, h, w, 3), dtype=np.uint8)}
    cols = _POINT_COLUMNS.get(kind, 4)
    pts = rng.uniform(-40.0, 40.0, (2000 if kind == "lidar" else 50, cols)).astype(np.float32)
    pts[:, 2] = rng.uniform(-1.5, 1.0, len(pts))
    return {"POINTS": pts}
