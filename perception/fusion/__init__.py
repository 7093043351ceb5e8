"""Fusion stage: lidar/camera/radar model outputs -> fused, tracked 3D detections in ``base_link``.

>>> fuser = Fuser(config.fusion, rig, ego_at=reader.ego_pose_at)
>>> detections, stage_ns = fuser(frame, results)   # once per frame; stage_ns: fusion, tracking
>>> fuser.reset()                                   # before a new drive

The pairwise steps are loops compiled by numba and cached on disk; ``_fuser.warm_up`` compiles them ahead of
time (a Fuser does it when built; the first run after an install takes ~45 s on two cores).

See :mod:`perception.fusion._fuser` for the algorithm and :class:`FusionParams` for its constants. The
geometry helpers (box corners, camera projection, rotated BEV IoU) are public for reports and tools.
"""

from __future__ import annotations

from perception.fusion._fuser import CAMERA_GUIDED_SOURCE, Fuser, warm_up
from perception.fusion._geometry import (
    bev_corners,
    box_corners,
    invert_transform,
    project_boxes,
    project_points,
    transform_cloud,
    transform_points,
)
from perception.fusion._motion import EgoMotion
from perception.fusion._params import FusionParams

__all__ = [
    "CAMERA_GUIDED_SOURCE",  # the pseudo-source of camera-guided lidar objects in Detection3D.sources
    "EgoMotion",  # ego motion between capture times: fusion, and the scheduler's sweep accumulation
    "Fuser",
    "FusionParams",
    "bev_corners",
    "box_corners",
    "invert_transform",
    "project_boxes",
    "project_points",
    "transform_cloud",  # the scheduler's sweep accumulation: earlier sweeps into the current one
    "transform_points",
    "warm_up",  # launch/_bootstrap.sh compiles the kernels with it after an install
]
