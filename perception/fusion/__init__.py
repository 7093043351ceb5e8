"""Fusion stage: lidar/camera/radar model outputs -> fused, tracked 3D detections in ``base_link``.

>>> fuser = Fuser(config.fusion, rig, ego_at=reader.ego_pose_at)
>>> detections, stage_ns = fuser(frame, results)   # once per frame; stage_ns: fusion, tracking
>>> fuser.reset()                                   # before a new drive

The pairwise steps are loops compiled by numba and cached on disk; :func:`warm_up` compiles them ahead
of time (a Fuser does it when built; the first run after an install takes ~45 s on two cores).

See :mod:`perception.fusion._fuser` for the algorithm and :class:`FusionParams` for its constants. The
geometry helpers (box corners, camera projection, rotated BEV IoU) are public for reports and tools.
"""

from __future__ import annotations

from perception.fusion._fuser import Fuser, warm_up
from perception.fusion._geometry import (
    ProjectedBoxes,
    bev_corners,
    bev_iou,
    bev_iou_pairs,
    box_corners,
    box_iou_2d,
    invert_transform,
    pixel_rays,
    project_boxes,
    project_corners,
    project_points,
    ray_ground_intersection,
    transform_points,
    wrap_angle,
)
from perception.fusion._motion import EgoMotion, twist_transform
from perception.fusion._params import CLASS_SIZES, FusionParams

__all__ = [
    "CLASS_SIZES",
    "EgoMotion",
    "Fuser",
    "FusionParams",
    "ProjectedBoxes",
    "bev_corners",
    "bev_iou",
    "bev_iou_pairs",
    "box_corners",
    "box_iou_2d",
    "invert_transform",
    "pixel_rays",
    "project_boxes",
    "project_corners",
    "project_points",
    "ray_ground_intersection",
    "transform_points",
    "twist_transform",
    "warm_up",
    "wrap_angle",
]
