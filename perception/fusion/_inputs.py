"""Validated views of the per-sensor model outputs fusion consumes (tensor names: ``scheduler.OUTPUTS``).

A malformed output raises :class:`~perception.errors.InputError` naming the sensor and tensor; the
fuser logs it and treats that sensor as missing for the frame. Rows with non-finite geometry, labels
outside :data:`~perception.types.LABELS` or scores below a floor are dropped silently (they are not
detections).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.errors import InputError
from perception.types import LABELS

__all__ = ["CameraBoxes", "LidarBoxes", "RadarObjects", "parse_camera", "parse_lidar", "parse_radar"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
_NUM_LABELS = len(LABELS)


def _tensor(outputs: Mapping[str, npt.NDArray[Any]], name: str, sensor: str, columns: int | None) -> F64:
    """``outputs[name]`` as float64 ``[N]`` (``columns`` None) or ``[N, columns]``."""
    arr = outputs.get(name)
    if arr is None:
        raise InputError("output tensor missing", sensor=sensor, tensor=name)
    a = np.asarray(arr)
    if (a.ndim != 1) if columns is None else (a.ndim != 2 or a.shape[1] != columns):
        want = "[N]" if columns is None else f"[N, {columns}]"
        raise InputError(f"expected shape {want}, got {list(a.shape)}", sensor=sensor, tensor=name)
    if a.dtype.kind not in "fiub":
        raise InputError(f"expected a numeric tensor, got dtype {a.dtype}", sensor=sensor, tensor=name)
    out: F64 = a.astype(np.float64)
    return out


def _same_rows(sensor: str, **arrays: npt.NDArray[Any]) -> int:
    rows = {name: a.shape[0] for name, a in arrays.items()}
    if len(set(rows.values())) > 1:
        raise InputError(f"outputs disagree in length: {rows}", sensor=sensor)
    return next(iter(rows.values()))


def _labels(raw: F64) -> tuple[I64, npt.NDArray[np.bool_]]:
    ok = np.isfinite(raw) & (raw >= 0) & (raw < _NUM_LABELS)
    labels = np.where(ok, raw, 0).astype(np.int64)
    return labels, ok


@dataclass(frozen=True, slots=True)
class LidarBoxes:
    boxes: F64  # [M,7] x, y, z, l, w, h, yaw in the lidar frame
    labels: I64  # [M]
    scores: F64  # [M]


@dataclass(frozen=True, slots=True)
class RadarObjects:
    positions: F64  # [K,3] radar frame
    radial: F64  # [K] over-ground radial velocity, + = moving away
    velocity: F64  # [K,2] over-ground (vx, vy) in the radar frame, NaN where not estimable
    rcs: F64  # [K] dBsm
    scores: F64  # [K]


@dataclass(frozen=True, slots=True)
class CameraBoxes:
    boxes: F64  # [K,4] x1, y1, x2, y2 (original image pixels)
    labels: I64  # [K]
    scores: F64  # [K]


def parse_lidar(outputs: Mapping[str, npt.NDArray[Any]], sensor: str, min_score: float) -> LidarBoxes:
    boxes = _tensor(outputs, "BOXES", sensor, 7)
    labels_raw = _tensor(outputs, "LABELS", sensor, None)
    scores = _tensor(outputs, "SCORES", sensor, None)
    _same_rows(sensor, BOXES=boxes, LABELS=labels_raw, SCORES=scores)
    labels, ok = _labels(labels_raw)
    ok &= np.isfinite(boxes).all(axis=1) & (boxes[:, 3:6] > 0).all(axis=1) & (scores >= min_score)
    return LidarBoxes(boxes[ok], labels[ok], np.minimum(scores[ok], 1.0))


def parse_radar(outputs: Mapping[str, npt.NDArray[Any]], sensor: str, min_score: float) -> RadarObjects:
    pos = _tensor(outputs, "POSITIONS", sensor, 3)
    vr = _tensor(outputs, "RADIAL_VELOCITY", sensor, None)
    vel = _tensor(outputs, "VELOCITY", sensor, 2)
    rcs = _tensor(outputs, "RCS", sensor, None)
    scores = _tensor(outputs, "SCORES", sensor, None)
    _same_rows(sensor, POSITIONS=pos, RADIAL_VELOCITY=vr, VELOCITY=vel, RCS=rcs, SCORES=scores)
    ok = np.isfinite(pos).all(axis=1) & np.isfinite(vr) & (scores >= min_score)
    rcs_ok = np.where(np.isfinite(rcs), rcs, 0.0)
    return RadarObjects(pos[ok], vr[ok], vel[ok], rcs_ok[ok], np.minimum(scores[ok], 1.0))


def parse_camera(outputs: Mapping[str, npt.NDArray[Any]], sensor: str, min_score: float) -> CameraBoxes:
    boxes = _tensor(outputs, "BOXES", sensor, 4)
    scores = _tensor(outputs, "SCORES", sensor, None)
    labels_raw = _tensor(outputs, "LABELS", sensor, None)
    count_arr = _tensor(outputs, "COUNT", sensor, None)
    rows = _same_rows(sensor, BOXES=boxes, SCORES=scores, LABELS=labels_raw)
    count = int(count_arr[0]) if count_arr.size and np.isfinite(count_arr[0]) else 0
    count = min(max(count, 0), rows)
    boxes, scores, labels_raw = boxes[:count], scores[:count], labels_raw[:count]
    labels, ok = _labels(labels_raw)
    ok &= np.isfinite(boxes).all(axis=1) & (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    ok &= scores >= min_score
    return CameraBoxes(boxes[ok], labels[ok], np.minimum(scores[ok], 1.0))
