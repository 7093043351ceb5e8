"""Validated views of the per-sensor model outputs fusion consumes, one per fusion role (tensor names:
the kinds' contracts, :mod:`perception.kinds`).

A malformed output raises :class:`~perception.errors.InputError` naming the sensor and tensor; the
fuser logs it and treats that sensor as missing for the frame. The runtime's own answers met their kind's
contract already (the dispatcher's check); outputs from elsewhere did not (a recorded run re-fused, a
caller's own results, the views' recorded camera outputs). Rows with non-finite geometry, labels
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
_ONES = np.ones(8)  # row sums by one matrix-vector product (up to 8 columns)
_ONES.setflags(write=False)


def _tensor(
    outputs: Mapping[str, npt.NDArray[Any]], name: str, sensor: str, columns: int | None, *, cast: bool = True
) -> npt.NDArray[Any]:
    """``outputs[name]`` as float64 ``[N]`` (``columns`` None) or ``[N, columns]`` (``cast`` false: as it
    came, any numeric dtype)."""
    arr = outputs.get(name)
    if arr is None:
        raise InputError("output tensor missing", sensor=sensor, tensor=name)
    a = arr if type(arr) is np.ndarray else np.asarray(arr)
    shape = a.shape
    if (len(shape) != 1) if columns is None else (len(shape) != 2 or shape[1] != columns):
        want = "[N]" if columns is None else f"[N, {columns}]"
        raise InputError(f"expected shape {want}, got {list(shape)}", sensor=sensor, tensor=name)
    if a.dtype.kind not in "fiub":
        raise InputError(f"expected a numeric tensor, got dtype {a.dtype}", sensor=sensor, tensor=name)
    return a.astype(np.float64) if cast else a


def _same_rows(sensor: str, names: tuple[str, ...], *arrays: npt.NDArray[Any]) -> int:
    n = arrays[0].shape[0]
    if any(a.shape[0] != n for a in arrays):
        rows = {name: a.shape[0] for name, a in zip(names, arrays, strict=True)}
        raise InputError(f"outputs disagree in length: {rows}", sensor=sensor)
    return n


def _labels(raw: npt.NDArray[Any]) -> tuple[I64, npt.NDArray[np.bool_]]:
    """Class indices and which rows hold a valid one (in ``[0, len(LABELS))``)."""
    ok = (raw >= 0) & (raw < _NUM_LABELS)  # false for NaN and +-inf too
    if raw.dtype.kind in "iub":  # integer labels (the models' INT32): no NaN to mask before the cast
        return raw.astype(np.int64), ok
    labels = np.where(ok, raw, 0).astype(np.int64)
    return labels, ok


def _finite_rows(a: F64) -> npt.NDArray[np.bool_]:
    """Rows of ``a [N, C]`` whose elements are all finite: a row sum is finite exactly when they are
    (NaN and inf propagate, inf - inf is NaN), and one matrix-vector product is far cheaper than a
    reduction along the short axis. (Only float64 rows of magnitude ~1e308 could overflow to inf, and
    those are not geometry either.)"""
    out: npt.NDArray[np.bool_] = np.isfinite(a @ _ONES[: a.shape[1]])
    return out


def _rows(ok: npt.NDArray[np.bool_], *arrays: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], ...]:
    """``arrays`` restricted to the ``ok`` rows (the arrays themselves when every row is kept)."""
    if ok.all():
        return arrays
    return tuple(a[ok] for a in arrays)


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
    returns: F64  # [K] returns each object was formed from (>= 1)


@dataclass(frozen=True, slots=True)
class CameraBoxes:
    boxes: F64  # [K,4] x1, y1, x2, y2 (original image pixels)
    labels: I64  # [K]
    scores: F64  # [K]


def parse_lidar(outputs: Mapping[str, npt.NDArray[Any]], sensor: str, min_score: float) -> LidarBoxes:
    boxes = _tensor(outputs, "BOXES", sensor, 7)
    labels_raw = _tensor(outputs, "LABELS", sensor, None, cast=False)
    scores = _tensor(outputs, "SCORES", sensor, None)
    _same_rows(sensor, ("BOXES", "LABELS", "SCORES"), boxes, labels_raw, scores)
    labels, ok = _labels(labels_raw)
    positive = np.minimum(np.minimum(boxes[:, 3], boxes[:, 4]), boxes[:, 5]) > 0  # false for NaN too
    ok &= _finite_rows(boxes) & positive & (scores >= min_score)
    boxes, labels, scores = _rows(ok, boxes, labels, scores)
    return LidarBoxes(boxes, labels, np.minimum(scores, 1.0))


def parse_radar(outputs: Mapping[str, npt.NDArray[Any]], sensor: str, min_score: float) -> RadarObjects:
    pos = _tensor(outputs, "POSITIONS", sensor, 3)
    vr = _tensor(outputs, "RADIAL_VELOCITY", sensor, None)
    vel = _tensor(outputs, "VELOCITY", sensor, 2)
    rcs = _tensor(outputs, "RCS", sensor, None)
    scores = _tensor(outputs, "SCORES", sensor, None)
    returns = _tensor(outputs, "RETURNS", sensor, None)
    _same_rows(
        sensor, ("POSITIONS", "RADIAL_VELOCITY", "VELOCITY", "RCS", "SCORES", "RETURNS"),
        pos, vr, vel, rcs, scores, returns,
    )  # fmt: skip
    ok = _finite_rows(pos) & np.isfinite(vr) & (scores >= min_score)
    pos, vr, vel, rcs, scores, returns = _rows(ok, pos, vr, vel, rcs, scores, returns)
    return RadarObjects(
        pos, vr, vel, np.where(np.isfinite(rcs), rcs, 0.0), np.minimum(scores, 1.0),
        np.maximum(np.nan_to_num(returns, nan=1.0), 1.0),
    )  # fmt: skip


def parse_camera(outputs: Mapping[str, npt.NDArray[Any]], sensor: str, min_score: float) -> CameraBoxes:
    boxes = _tensor(outputs, "BOXES", sensor, 4)
    scores = _tensor(outputs, "SCORES", sensor, None)
    labels_raw = _tensor(outputs, "LABELS", sensor, None, cast=False)
    count_arr = _tensor(outputs, "COUNT", sensor, None)
    rows = _same_rows(sensor, ("BOXES", "SCORES", "LABELS"), boxes, scores, labels_raw)
    count = int(count_arr[0]) if count_arr.size and np.isfinite(count_arr[0]) else 0
    count = min(max(count, 0), rows)
    boxes, scores, labels_raw = boxes[:count], scores[:count], labels_raw[:count]
    labels, ok = _labels(labels_raw)
    # x2 > x1 and y2 > y1 (false for NaN, and an infinite corner makes the box non-finite below)
    ok &= np.logical_and.reduce(boxes[:, 2:] > boxes[:, :2], axis=1) & (scores >= min_score)
    ok &= _finite_rows(boxes)
    boxes, labels, scores = _rows(ok, boxes, labels, scores)
    return CameraBoxes(boxes, labels, np.minimum(scores, 1.0))
