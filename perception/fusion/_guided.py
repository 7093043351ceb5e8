"""Camera-guided lidar objects: a box for a camera detection from the few lidar points in its frustum.

A sparse or far object gives the lidar model too few points for a box (a ring fragment of one to four
returns), while the camera still detects it. For each such camera detection (one no lidar object
explains; the caller passes only those), as Autoware's ``roi_cluster_fusion``:

1. the frame's lidar points (in ``base_link`` at the frame time) without the ground (below
   ``ground_height``) and without the points of objects already found (their boxes grown by
   :data:`_KNOWN_MARGIN`), projected into the detection's camera; those inside the 2D box (its sides
   shrunk by ``box_shrink``) are the frustum's;
2. clustered along the ray by camera depth (a gap over ``cluster_gap`` starts a new cluster); the nearest
   cluster whose near face agrees with the class's height-prior depth (``depth_ratio``) is the object,
   even with one point: what lies behind it is occluded by it, what lies before it outside the depth
   window is something else (a pole, a branch);
3. the box is the class's size prior, its near face at that cluster's nearest point and its centre on the
   detection's ray, ``width / 2 + face_offset * (length - width) / 2`` beyond the face (0: seen side-on,
   1: end-on), heading along the ray.

Steps 1-2 are one compiled pass over the points for every camera (:func:`._point_kernels.guided_faces`),
float32 points moved to ``base_link`` as they are read, and no temporary per detection; step 3 is numpy on
the few detections that found a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.config import CameraGuidedConfig
from perception.fusion import _point_kernels
from perception.fusion._geometry import invert_transform
from perception.fusion._kernels import c_array

__all__ = ["GuidedObjects", "camera_guided"]

F64 = npt.NDArray[np.float64]
IP = npt.NDArray[np.intp]

#: m added around an already-found object's box before its points are left out of every frustum.
_KNOWN_MARGIN = 0.3
#: m; points nearer a camera than this are not projected.
_MIN_DEPTH = 0.5


@dataclass(frozen=True, slots=True)
class GuidedObjects:
    """``M`` camera-guided objects: ``det`` indexes the detections passed in."""

    det: IP  # [M]
    center: F64  # [M,3] base_link
    size: F64  # [M,3]
    yaw: F64  # [M]
    los: F64  # [M,2] unit line of sight from the camera (for the covariance)
    points: IP  # [M] lidar points in the chosen cluster


def camera_guided(
    config: CameraGuidedConfig,
    points: npt.NDArray[np.floating[Any]],
    base_from_points: F64,
    det_cam: IP,
    det_boxes: F64,
    det_labels: IP,
    cam_from_base: F64,
    k: F64,
    k_inv: F64,
    sizes: F64,
    known_center: F64,
    known_size: F64,
    known_yaw: F64,
    *,
    scratch: _point_kernels.Scratch | None = None,
) -> GuidedObjects:
    """Camera-guided objects for the detections given (see the module docstring).

    ``points`` ``[P,>=3]`` lidar points (float32; the first 3 columns x, y, z) and ``base_from_points`` the
    ``[4,4]`` that moves them to ``base_link`` at the frame time (applied in the kernel's one pass over
    them, as :func:`._point_kernels.transform_xyz` would); ``det_cam`` indexes ``cam_from_base``
    ``[C,4,4]`` (camera at its capture time <- base_link), ``k``/``k_inv`` ``[C,3,3]``; ``det_boxes``
    ``[D,4]`` pixels x1 y1 x2 y2; ``sizes`` the class size priors ``[L,3]``; ``known_*`` the objects whose
    points are already explained. ``scratch``: where the work space is kept between calls (else fresh).
    """
    out_det: list[int] = []
    out_center: list[F64] = []
    out_size: list[F64] = []
    out_yaw: list[float] = []
    out_los: list[F64] = []
    out_points: list[int] = []
    d_n = det_cam.shape[0]
    face, count = np.empty(d_n), np.empty(d_n, np.intp)
    pts = _point_kernels.cloud(points)
    work_n = _point_kernels.guided_scratch_size(pts.shape[0], len(set(det_cam.tolist())))
    work = np.empty(work_n) if scratch is None else scratch.array("guided", (work_n,), np.float64)
    _point_kernels.guided_faces(
        pts, c_array(base_from_points), c_array(det_cam, np.intp), c_array(det_boxes),
        c_array(sizes[det_labels, 2]), c_array(cam_from_base), c_array(k), c_array(known_center),
        c_array(known_size), c_array(known_yaw), config.ground_height, _MIN_DEPTH, config.max_depth,
        config.box_shrink, config.cluster_gap, config.depth_ratio, _KNOWN_MARGIN, work, face, count,
    )  # fmt: skip
    base_from_cam: dict[int, F64] = {}
    for d in np.argsort(det_cam, kind="stable"):  # by camera, then as given (the order of the outputs)
        if count[d] == 0:
            continue
        c = int(det_cam[d])
        if c not in base_from_cam:
            base_from_cam[c] = invert_transform(cam_from_base[c])
        to_base = base_from_cam[c]
        x1, y1, x2, y2 = det_boxes[d]
        length, width, height = sizes[det_labels[d]]
        ray = k_inv[c] @ np.array([(x1 + x2) / 2, (y1 + y2) / 2, 1.0])
        at_face = to_base[:3, :3] @ (ray * face[d]) + to_base[:3, 3]  # ray point at the face depth
        los = at_face[:2] - to_base[:2, 3]
        norm = float(np.hypot(los[0], los[1]))
        if norm < 1e-6:
            continue
        los = los / norm
        offset = width / 2 + config.face_offset * max(length - width, 0.0) / 2
        center = np.array([at_face[0] + los[0] * offset, at_face[1] + los[1] * offset, height / 2])
        out_det.append(int(d))
        out_center.append(center)
        out_size.append(np.array([length, width, height]))
        out_yaw.append(float(np.arctan2(los[1], los[0])))
        out_los.append(los)
        out_points.append(int(count[d]))
    n = len(out_det)
    return GuidedObjects(
        det=np.asarray(out_det, np.intp),
        center=np.asarray(out_center, np.float64).reshape(n, 3),
        size=np.asarray(out_size, np.float64).reshape(n, 3),
        yaw=np.asarray(out_yaw, np.float64),
        los=np.asarray(out_los, np.float64).reshape(n, 2),
        points=np.asarray(out_points, np.intp),
    )
