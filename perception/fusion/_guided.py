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

Numpy per camera and per detection: the frustum selection is the cost (points x cameras).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from perception.config import CameraGuidedConfig

__all__ = ["GuidedObjects", "camera_guided"]

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]
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


def _outside_known(pts: F64, centers: F64, sizes: F64, yaws: F64) -> B:
    """Points not inside any known box (BEV, grown by :data:`_KNOWN_MARGIN`)."""
    keep = np.ones(pts.shape[0], bool)
    if centers.shape[0] == 0 or pts.shape[0] == 0:
        return keep
    dx = pts[:, None, 0] - centers[None, :, 0]
    dy = pts[:, None, 1] - centers[None, :, 1]
    c, s = np.cos(yaws)[None, :], np.sin(yaws)[None, :]
    along, across = c * dx + s * dy, -s * dx + c * dy
    inside = (np.abs(along) <= sizes[None, :, 0] / 2 + _KNOWN_MARGIN) & (
        np.abs(across) <= sizes[None, :, 1] / 2 + _KNOWN_MARGIN
    )
    keep &= ~inside.any(axis=1)
    return keep


def camera_guided(
    config: CameraGuidedConfig,
    points: F64,
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
) -> GuidedObjects:
    """Camera-guided objects for the detections given (see the module docstring).

    ``points`` ``[P,3]`` lidar points in ``base_link`` (frame time); ``det_cam`` indexes ``cam_from_base``
    ``[C,4,4]`` (camera at its capture time <- base_link), ``k``/``k_inv`` ``[C,3,3]``; ``det_boxes``
    ``[D,4]`` pixels x1 y1 x2 y2; ``sizes`` the class size priors ``[L,3]``; ``known_*`` the objects whose
    points are already explained.
    """
    out_det: list[int] = []
    out_center: list[F64] = []
    out_size: list[F64] = []
    out_yaw: list[float] = []
    out_los: list[F64] = []
    out_points: list[int] = []
    pts = points[points[:, 2] > config.ground_height] if points.shape[0] else points
    for c in np.unique(det_cam) if pts.shape[0] else ():
        m = cam_from_base[c]
        z = pts @ m[2, :3] + m[2, 3]
        front = ((z > _MIN_DEPTH) & (z < config.max_depth)).nonzero()[0]
        if front.size == 0:
            continue
        pc = pts[front] @ m[:3, :3].T + m[:3, 3]
        z = pc[:, 2]
        u = (k[c, 0, 0] * pc[:, 0] + k[c, 0, 1] * pc[:, 1]) / z + k[c, 0, 2]
        v = k[c, 1, 1] * pc[:, 1] / z + k[c, 1, 2]
        dets = (det_cam == c).nonzero()[0]
        box = det_boxes[dets]
        shrink = config.box_shrink * (box[:, 2] - box[:, 0])
        inside = (  # [P, D]: point in the detection's (shrunk) box
            (u[:, None] >= (box[:, 0] + shrink)[None, :])
            & (u[:, None] <= (box[:, 2] - shrink)[None, :])
            & (v[:, None] >= box[None, :, 1])
            & (v[:, None] <= box[None, :, 3])
        )
        hit = inside.any(axis=1).nonzero()[0]
        if hit.size == 0:
            continue
        # the points of objects already found are not in any frustum (tested on the frustums' points only)
        free = _outside_known(pts[front[hit]], known_center, known_size, known_yaw)
        inside, z = inside[hit[free]], z[hit[free]]
        base_from_cam = np.linalg.inv(m)
        for j, d in enumerate(dets):
            x1, y1, x2, y2 = det_boxes[d]
            if not inside[:, j].any():
                continue
            depth = np.sort(z[inside[:, j]])
            length, width, height = sizes[det_labels[d]]
            prior = k[c, 1, 1] * height / max(y2 - y1, 1.0)  # depth at which the class's height fills the box
            starts = np.concatenate(([0], (np.diff(depth) > config.cluster_gap).nonzero()[0] + 1, [depth.size]))
            face, count = 0.0, 0
            for a, b in itertools.pairwise(starts):
                if prior / config.depth_ratio <= depth[a] <= prior * config.depth_ratio:
                    face, count = float(depth[a]), int(b - a)
                    break
            if count == 0:
                continue
            ray = k_inv[c] @ np.array([(x1 + x2) / 2, (y1 + y2) / 2, 1.0])
            at_face = base_from_cam[:3, :3] @ (ray * face) + base_from_cam[:3, 3]  # ray point at the face depth
            los = at_face[:2] - base_from_cam[:2, 3]
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
            out_points.append(count)
    n = len(out_det)
    return GuidedObjects(
        det=np.asarray(out_det, np.intp),
        center=np.asarray(out_center, np.float64).reshape(n, 3),
        size=np.asarray(out_size, np.float64).reshape(n, 3),
        yaw=np.asarray(out_yaw, np.float64),
        los=np.asarray(out_los, np.float64).reshape(n, 2),
        points=np.asarray(out_points, np.intp),
    )
