"""Code shared by the python-backend models (imported inside the Triton python backend stub)."""

from __future__ import annotations

from ._camera import (
    CameraDetections,
    CameraDetector,
    CameraDetectorModel,
    CameraDetectorParams,
    Letterbox,
    camera_ground_truth,
    decode_centernet,
    preprocess_images,
    validate_image_batch,
)
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
from ._metrics import APAccumulator, APResult, average_precision, box_iou
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
    "APAccumulator",
    "APResult",
    "CameraDetections",
    "CameraDetector",
    "CameraDetectorModel",
    "CameraDetectorParams",
    "Checkpoint",
    "Letterbox",
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
    "average_precision",
    "box_iou",
    "camera_ground_truth",
    "check_model_config",
    "cluster_bev",
    "cluster_radar",
    "config_parameter",
    "decode_centernet",
    "detect_lidar",
    "detect_radar",
    "estimate_ground",
    "fit_box_bev",
    "fit_velocity",
    "params_from_config",
    "preprocess_images",
    "sanitize_points",
    "sanitize_radar",
    "synthetic_lidar_sweep",
    "synthetic_radar_returns",
    "triton_dtype_name",
    "validate_image_batch",
    "voxel_downsample",
]
