"""The one check of what enters the runtime: a sample or an ego pose as a host pushes it, or as a drive
decodes it. Structural and cheap (no decode): what would break assembly, sweep accumulation or fusion
later, far from its cause, is refused here with a reason; the caller counts it against its sensor and
drops it.

What is checked:

* a stamp is integer nanoseconds (not a float, not NaN, not a bool) within ``0..MAX_STAMP_NS``;
* a sample is of its kind's sample type; a point cloud is a 2-D float32 array with one column per field
  and at least the kind's point fields, none of which it would misread (:func:`point_columns`: a cloud
  naming them all is read by name, else by position unless a column's name says it holds another
  field), at most :data:`MAX_SAMPLE_BYTES` (an accumulated cloud, ``merged_from``: that per sweep it holds);
  an image's bytes are not empty, at most :data:`MAX_SAMPLE_BYTES`, and the size its header declares (when it
  has one we read)
  is within the image limits (``perception._imageio.MAX_PIXELS``, ``MAX_IMAGE_SIDE``) and, given the
  camera's calibration (the live intake), is the calibration's; a JPEG or PNG is not cut short (its end
  marker within its last 64 KiB, padding or a trailer after it: ``perception._imageio.truncation_problem``);
* an ego pose has finite translation, velocity and yaw rate, and a finite quaternion of norm within
  ``QUATERNION_NORM`` (protobuf's default, the zero quaternion, is refused).

Points are not required to be finite: real sensors report missing returns as NaN, and the reference
models drop non-finite returns themselves (``tests/reliability/test_bad_input.py``).
"""

from __future__ import annotations

import math
from numbers import Integral
from typing import Any

import numpy as np

from perception import _imageio
from perception.types import CameraCalibration, EgoPose, ImageSample, PointCloudSample

from ._kind import SensorKindDef
from ._points import point_columns

__all__ = [
    "MAX_SAMPLE_BYTES",
    "MAX_STAMP_NS",
    "QUATERNION_NORM",
    "ego_problem",
    "image_data_problem",
    "sample_check",
    "sample_problem",
    "stamp_problem",
]

#: Largest stamp taken (ns): 2**62 ns is 146 years, room enough for any clock while sums of stamps and
#: windows stay far from int64's end.
MAX_STAMP_NS = 2**62
#: Largest sample taken (point array or encoded image bytes): a 128-beam lidar sweep is ~5 MB.
MAX_SAMPLE_BYTES = 64 * 2**20
#: A quaternion's norm must be within these (rotations are normalised downstream; a zero or wildly
#: scaled one is a bug upstream, not a rotation).
QUATERNION_NORM = (0.5, 2.0)


def stamp_problem(t_ns: object) -> str | None:
    """Why ``t_ns`` is not a usable stamp, or None."""
    if isinstance(t_ns, bool) or not isinstance(t_ns, Integral):
        return f"stamp must be integer nanoseconds, got {type(t_ns).__name__} {t_ns!r:.40}"
    if not 0 <= int(t_ns) <= MAX_STAMP_NS:
        return f"stamp {int(t_ns)} ns is outside 0..{MAX_STAMP_NS}"
    return None


def sample_problem(sample: object, kind: SensorKindDef, *, calibration: CameraCalibration | None = None) -> str | None:
    """Why ``sample`` cannot be taken as a sample of a sensor of ``kind``, or None (see module docs).
    ``calibration``: the camera's, when the image must be of its size (the live intake: fusion places a
    camera's boxes with its intrinsics, so those of an image of another size would be misplaced; a replay
    counts such images instead, ``image_size_mismatch``)."""
    checked = sample_check(sample, kind, calibration=calibration)
    return checked if isinstance(checked, str) else None


def sample_check(
    sample: object, kind: SensorKindDef, *, calibration: CameraCalibration | None = None
) -> str | tuple[int, ...] | None:
    """:func:`sample_problem`'s check, with what it found: why ``sample`` cannot be taken, else a point cloud's
    columns in its kind's order (:func:`point_columns`, for :func:`perception.kinds.in_kind_order`: not worked
    out twice), else None (an image)."""
    if not isinstance(sample, kind.sample):
        return f"a {type(sample).__name__} is not a sample of a {kind.name} sensor ({kind.sample.__name__})"
    if (problem := stamp_problem(sample.t_ns)) is not None:
        return problem
    if isinstance(sample, PointCloudSample):
        return _points_check(sample, kind)
    assert isinstance(sample, ImageSample)
    return _image_problem(sample, calibration)


def _points_check(sample: PointCloudSample, kind: SensorKindDef) -> str | tuple[int, ...]:
    pts: Any = sample.points
    if not isinstance(pts, np.ndarray) or pts.dtype != np.float32 or pts.ndim != 2:
        what = f"{pts.dtype} array of rank {pts.ndim}" if isinstance(pts, np.ndarray) else type(pts).__name__
        return f"points must be a 2-D float32 array, got a {what}"
    fields = tuple(sample.fields)
    if pts.shape[1] != len(fields):
        return f"points have {pts.shape[1]} columns for {len(fields)} fields {fields}"
    need = len(kind.point_fields)
    if len(fields) < need:
        return f"a {kind.name} sample needs at least {need} fields {kind.point_fields}, got {fields}"
    # an accumulated cloud (the runtime's own: each sweep in it passed this check) holds its sweeps, each within it
    limit = MAX_SAMPLE_BYTES * (1 + len(sample.merged_from))
    if pts.nbytes > limit:
        return f"points take {pts.nbytes} bytes, over the {limit} byte limit"
    return point_columns(fields, kind)


def image_data_problem(data: object) -> str | None:
    """Why an image sample's ``data`` is not its encoded bytes (``bytes``, ``bytearray``, ``memoryview``), or None."""
    if isinstance(data, bytes | bytearray | memoryview):
        return None
    hint = " (an array: pass the encoded JPEG or PNG bytes, e.g. an encoded buffer's tobytes())"
    return f"image data must be bytes, got {type(data).__name__}" + (hint if isinstance(data, np.ndarray) else "")


def _image_problem(sample: ImageSample, calibration: CameraCalibration | None) -> str | None:
    data: Any = sample.data
    if (problem := image_data_problem(data)) is not None:
        return problem
    if not len(data):
        return "empty image data"
    if len(data) > MAX_SAMPLE_BYTES:
        return f"image of {len(data)} bytes, over the {MAX_SAMPLE_BYTES} byte limit"
    data = data if isinstance(data, bytes) else bytes(data)
    size = _imageio.image_size(data)
    if size is not None:
        width, height = size
        if width == 0 or height == 0:
            return f"image has zero size {width}x{height}"
        if (problem := _imageio.size_problem(width, height)) is not None:
            return problem
        if calibration is not None and (width, height) != (calibration.width, calibration.height):
            return (
                f"image is {width}x{height}, its camera's calibration {calibration.width}x{calibration.height} "
                "(its boxes would be placed with the calibration's intrinsics)"
            )
    # O(1) (its last bytes): a body cut short would fail the decode later, far from the sample
    return _imageio.truncation_problem(data)  # None for data of neither format: the decode reports it


def _finite(values: tuple[Any, ...]) -> bool:
    try:
        return all(math.isfinite(float(v)) for v in values)
    except (TypeError, ValueError):
        return False


def ego_problem(pose: object) -> str | None:
    """Why ``pose`` cannot be taken as an ego pose, or None (see module docs)."""
    if not isinstance(pose, EgoPose):
        return f"a {type(pose).__name__} is not an EgoPose"
    if (problem := stamp_problem(pose.t_ns)) is not None:
        return problem
    tf = pose.pose
    try:
        translation, rotation = tuple(tf.translation), tuple(tf.rotation)
        velocity = tuple(pose.linear_velocity)
    except (AttributeError, TypeError):
        return "ego pose must hold a Transform and a velocity triple"
    if len(translation) != 3 or len(rotation) != 4 or len(velocity) != 3:
        return "ego pose must have a 3-vector translation, a 4-vector quaternion and a 3-vector velocity"
    if not _finite(translation) or not _finite(velocity) or not _finite((pose.yaw_rate,)):
        return "ego pose has a non-finite translation, velocity or yaw rate"
    if not _finite(rotation):
        return "ego pose has a non-finite quaternion"
    norm = math.sqrt(sum(float(q) * float(q) for q in rotation))
    low, high = QUATERNION_NORM
    if not low <= norm <= high:
        return f"ego pose quaternion has norm {norm:.3g}, outside {low}..{high}" + (
            " (the zero quaternion)" if norm == 0 else ""
        )
    return None
