"""The tensor contracts of the three sensor models (see ``models/README.md``).

The reference lidar and radar models check their ``config.pbtxt`` and every request against these;
any replacement model (TensorRT, ONNX, PyTorch...) must keep the same names, types and shapes.
"""

from __future__ import annotations

from ._tensors import TensorSpec

__all__ = [
    "CAMERA_INPUTS",
    "CAMERA_INPUT_SIZE_KEYS",
    "CAMERA_OUTPUTS",
    "LIDAR_INPUTS",
    "LIDAR_OUTPUTS",
    "RADAR_INPUTS",
    "RADAR_MIN_COLUMNS",
    "RADAR_OUTPUTS",
]

#: Radar rows carry at least ``x, y, z, radial_velocity, rcs``; more columns are allowed and ignored.
RADAR_MIN_COLUMNS = 5

LIDAR_INPUTS = (TensorSpec("POINTS", "TYPE_FP32", (-1, 4), description="x, y, z, intensity (sensor frame, m)"),)
LIDAR_OUTPUTS = (
    TensorSpec("BOXES", "TYPE_FP32", (-1, 7), description="x, y, z (box centre), l, w, h, yaw (sensor frame)"),
    TensorSpec("LABELS", "TYPE_INT32", (-1,), description="index into perception.types.LABELS"),
    TensorSpec("SCORES", "TYPE_FP32", (-1,), description="confidence in [0, 1]"),
)

RADAR_INPUTS = (
    TensorSpec(
        "POINTS",
        "TYPE_FP32",
        (-1, -1),
        min_columns=RADAR_MIN_COLUMNS,
        description="x, y, z, radial_velocity (ego-compensated, m/s, + = away), rcs (dBsm)",
    ),
)
RADAR_OUTPUTS = (
    TensorSpec("POSITIONS", "TYPE_FP32", (-1, 3), description="object position (sensor frame, m)"),
    TensorSpec("RADIAL_VELOCITY", "TYPE_FP32", (-1,), description="m/s, + = moving away"),
    TensorSpec("VELOCITY", "TYPE_FP32", (-1, 2), description="over-ground vx, vy (sensor frame); NaN if unobservable"),
    TensorSpec("RCS", "TYPE_FP32", (-1,), description="dBsm"),
    TensorSpec("SCORES", "TYPE_FP32", (-1,), description="confidence in [0, 1]"),
)

CAMERA_INPUTS = (TensorSpec("IMAGE", "TYPE_UINT8", (-1, -1, 3), description="RGB, one image per batch row"),)
CAMERA_OUTPUTS = (
    TensorSpec("BOXES", "TYPE_FP32", (100, 4), description="x1, y1, x2, y2 in pixels of the original image"),
    TensorSpec("SCORES", "TYPE_FP32", (100,)),
    TensorSpec("LABELS", "TYPE_INT32", (100,)),
    TensorSpec("COUNT", "TYPE_INT32", (1,), description="number of valid rows"),
)

#: ``parameters`` of a camera model's ``config.pbtxt`` stating its network input ``width, height``: the
#: runtime then decodes JPEGs at the smallest DCT scale covering the letterboxed image (decoding at the
#: model's scale); the model checks them against its network at load. Optional: without them the
#: runtime sends full-resolution images.
CAMERA_INPUT_SIZE_KEYS = ("input_width", "input_height")
