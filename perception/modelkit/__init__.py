"""Code shared by the python-backend models (imported inside the Triton python backend stub).

Its names are loaded lazily (PEP 562): a model imports the module it uses, not the package's every
detector (scipy, onnxruntime: ~0.6 s of each backend stub's start-up for a test model that sleeps)."""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._camera import (
        CameraDetections,
        CameraDetector,
        CameraDetectorModel,
        CameraDetectorParams,
        ImageDetector,
        Letterbox,
        camera_ground_truth,
        decode_centernet,
        preprocess_images,
        validate_image_batch,
    )
    from ._lidar import (
        LidarDetections,
        LidarParams,
        SizePrior,
        cluster_adaptive,
        cluster_bev,
        detect_lidar,
        estimate_ground,
        fit_box_bev,
        merge_fragments,
        sanitize_points,
        voxel_downsample,
    )
    from ._metrics import APAccumulator, APResult, average_precision, box_iou, precision_recall
    from ._models import LidarDetectorModel, RadarDetectorModel
    from ._radar import (
        RadarDetections,
        RadarParams,
        cluster_radar,
        detect_radar,
        fit_velocity,
        sanitize_radar,
        split_by_motion,
    )
    from ._synthetic import SyntheticBox, synthetic_lidar_sweep, synthetic_radar_returns
    from ._triton import (
        Checkpoint,
        RequestCancelled,
        TritonModel,
        check_model_config,
        config_parameter,
        params_from_config,
    )
    from ._yolox import (
        COCO_CLASSES,
        COCO_TO_LABEL,
        YoloxDetector,
        YoloxDetectorModel,
        YoloxParams,
        decode_yolox,
        nms,
        yolox_preprocess,
    )


__all__: list[str] = [
    "COCO_CLASSES",
    "COCO_TO_LABEL",
    "APAccumulator",
    "APResult",
    "CameraDetections",
    "CameraDetector",
    "CameraDetectorModel",
    "CameraDetectorParams",
    "Checkpoint",
    "ImageDetector",
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
    "TritonModel",
    "YoloxDetector",
    "YoloxDetectorModel",
    "YoloxParams",
    "average_precision",
    "box_iou",
    "camera_ground_truth",
    "check_model_config",
    "cluster_adaptive",
    "cluster_bev",
    "cluster_radar",
    "config_parameter",
    "decode_centernet",
    "decode_yolox",
    "detect_lidar",
    "detect_radar",
    "estimate_ground",
    "fit_box_bev",
    "fit_velocity",
    "merge_fragments",
    "nms",
    "params_from_config",
    "precision_recall",
    "preprocess_images",
    "sanitize_points",
    "sanitize_radar",
    "split_by_motion",
    "synthetic_lidar_sweep",
    "synthetic_radar_returns",
    "validate_image_batch",
    "voxel_downsample",
    "yolox_preprocess",
]


@functools.cache
def _sources() -> dict[str, str]:
    """Each public name -> the module defining it: the imports under ``TYPE_CHECKING`` above (the type checker's),
    read once from this file (as ``lazy_loader.attach_stub`` reads a stub): one list of them."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    return {a.asname or a.name: f".{n.module}" for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names}


def __getattr__(name: str) -> Any:
    module = _sources().get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # (the next access finds it without this call)
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
