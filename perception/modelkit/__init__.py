"""Code shared by the python-backend models (imported inside the Triton python backend stub)."""

from __future__ import annotations

from ._contracts import (
    CAMERA_INPUTS,
    CAMERA_OUTPUTS,
    LIDAR_INPUTS,
    LIDAR_OUTPUTS,
    RADAR_INPUTS,
    RADAR_MIN_COLUMNS,
    RADAR_OUTPUTS,
)
from ._lidar import (
    LidarDetections,
    LidarParams,
    SizePrior,
    cluster_bev,
    detect_lidar,
    estimate_ground,
    fit_box_bev,
    sanitize_points,
    voxel_downsample,
)
from ._models import LidarDetectorModel, RadarDetectorModel
from ._radar import RadarDetections, RadarParams, cluster_radar, detect_radar, fit_velocity, sanitize_radar
from ._synthetic import SyntheticBox, synthetic_lidar_sweep, synthetic_radar_returns
from ._tensors import TRITON_DTYPES, TensorSpec, triton_dtype_name
from ._triton import (
    Checkpoint,
    RequestCancelled,
    TritonModel,
    check_model_config,
    config_parameter,
    params_from_config,
)

__all__: list[str] = [
    "CAMERA_INPUTS",
    "CAMERA_OUTPUTS",
    "LIDAR_INPUTS",
    "LIDAR_OUTPUTS",
    "RADAR_INPUTS",
    "RADAR_MIN_COLUMNS",
    "RADAR_OUTPUTS",
    "TRITON_DTYPES",
    "Checkpoint",
    "LidarDetections",
    "LidarDetectorModel",
    "LidarParams",
    "RadarDetections",
    "RadarDetectorModel",
    "RadarParams",
    "RequestCancelled",
    "SizePrior",
    "SyntheticBox",
    "TensorSpec",
    "TritonModel",
    "check_model_config",
    "cluster_bev",
    "cluster_radar",
    "config_parameter",
    "detect_lidar",
    "detect_radar",
    "estimate_ground",
    "fit_box_bev",
    "fit_velocity",
    "params_from_config",
    "sanitize_points",
    "sanitize_radar",
    "synthetic_lidar_sweep",
    "synthetic_radar_returns",
    "triton_dtype_name",
    "voxel_downsample",
]
