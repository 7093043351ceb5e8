"""Vectorised geometry of fusion: rigid transforms, 3D boxes, camera projection, BEV overlap.

Conventions (see :mod:`perception.types`): boxes are ``[N,7]`` ``x, y, z, l, w, h, yaw`` with ``z`` the
box centre, ``l`` along ``yaw`` (about +z); homogeneous transforms are ``[4,4]`` ``parent <- child``.
Camera frames are optical (z forward, x right, y down) and pixels are ``(u, v)`` of the original image.

Every function works on whole arrays (no per-object Python loops); the projection of many boxes, the
pairwise 2D IoU and the rotated-rectangle IoU run as compiled loops (:mod:`._kernels`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from perception.fusion import _kernels, _point_kernels

__all__ = [
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
    "project_homogeneous",
    "project_points",
    "ray_ground_intersection",
    "transform_cloud",
    "transform_points",
    "wrap_angle",
]

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]

#: Counter-clockwise BEV corner signs (front-left, rear-left, rear-right, front-right).
_BEV_SIGNS = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]], dtype=np.float64) * 0.5


def wrap_angle(a: npt.ArrayLike) -> F64:
    """Angles wrapped to ``[-pi, pi)``."""
    out: F64 = (np.asarray(a, dtype=np.float64) + np.pi) % (2 * np.pi) - np.pi
    return out


def invert_transform(m: npt.ArrayLike) -> F64:
    """Inverse of a rigid ``[4,4]`` transform (exact: ``R^T, -R^T t``)."""
    mat = np.asarray(m, dtype=np.float64)
    out = np.empty((4, 4))
    rt = mat[:3, :3].T
    out[:3, :3] = rt
    out[:3, 3] = -rt @ mat[:3, 3]
    out[3, :3] = 0.0
    out[3, 3] = 1.0
    return out


def transform_points(m: npt.ArrayLike, points: npt.ArrayLike) -> F64:
    """Apply a ``[4,4]`` transform to points ``[..., 3]``."""
    mat = np.asarray(m, dtype=np.float64)
    p = np.asarray(points, dtype=np.float64)
    out: F64 = p @ mat[:3, :3].T + mat[:3, 3]
    return out


def transform_cloud(
    m: npt.ArrayLike, points: npt.ArrayLike, *, out: npt.NDArray[np.float32] | None = None
) -> npt.NDArray[np.float32]:
    """A float32 point cloud ``[N, k]`` with its ``x, y, z`` (the first 3 columns) moved by a ``[4,4]``
    transform, the other columns as given: one compiled pass, float64 arithmetic per point
    (:func:`._point_kernels.move_cloud`); for clouds, where :func:`transform_points`' float64 product
    would cost a copy and wake BLAS's threads. ``out``: a C-contiguous float32 array of the cloud's shape
    to write it into (e.g. rows of a larger cloud), returned; else a new one."""
    src = _point_kernels.cloud(points)
    if out is None:
        out = np.empty(src.shape, np.float32)
    elif out.shape != src.shape or out.dtype != np.float32 or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"out must be a writable C-contiguous float32 array of shape {src.shape}, got "
                         f"{out.dtype} {out.shape}")  # fmt: skip
    _point_kernels.move_cloud(_kernels.c_array(m), src, out)
    return out


def box_corners(boxes: npt.ArrayLike, *, homogeneous: bool = False) -> F64:
    """Corners ``[N,8,3]`` of boxes ``[N,7]`` (bottom face counter-clockwise seen from above, then top);
    ``homogeneous``: ``[N,8,4]`` with a last coordinate of 1 (ready for one product with a ``[4,k]``
    transform)."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 7)
    # one coordinate at a time ([N,8] planes): broadcasting [N,8,3] blocks iterates 3 elements at a time
    lx = _kernels.CORNER_SIGNS[:, 0] * b[:, 3:4]
    ly = _kernels.CORNER_SIGNS[:, 1] * b[:, 4:5]
    c, s = np.cos(b[:, 6:7]), np.sin(b[:, 6:7])
    out = np.empty((b.shape[0], 8, 4 if homogeneous else 3))
    if homogeneous:
        out[..., 3] = 1.0
    out[..., 0] = c * lx - s * ly + b[:, 0:1]
    out[..., 1] = s * lx + c * ly + b[:, 1:2]
    out[..., 2] = _kernels.CORNER_SIGNS[:, 2] * b[:, 5:6] + b[:, 2:3]
    return out


def bev_corners(center: npt.ArrayLike, size: npt.ArrayLike, yaw: npt.ArrayLike) -> F64:
    """Counter-clockwise BEV rectangle corners ``[N,4,2]`` from centres ``[N,2]``, ``(l, w)`` ``[N,2]`` and yaw."""
    c = np.asarray(center, dtype=np.float64).reshape(-1, 2)
    lw = np.asarray(size, dtype=np.float64).reshape(-1, 2)
    y = np.asarray(yaw, dtype=np.float64).reshape(-1)
    local = _BEV_SIGNS[None] * lw[:, None, :]
    cs, sn = np.cos(y)[:, None], np.sin(y)[:, None]
    out = np.empty_like(local)
    out[..., 0] = cs * local[..., 0] - sn * local[..., 1] + c[:, None, 0]
    out[..., 1] = sn * local[..., 0] + cs * local[..., 1] + c[:, None, 1]
    return out


# ---------------------------------------------------------------------------------------------
# Rotated-rectangle IoU
# ---------------------------------------------------------------------------------------------


def bev_iou_pairs(a: npt.ArrayLike, b: npt.ArrayLike) -> F64:
    """Element-wise BEV IoU of rotated rectangles ``a[i]`` and ``b[i]``, each ``[K,5]`` ``x, y, l, w, yaw``
    (one rectangle clipped by the other's edges; a compiled loop, :func:`._kernels.rect_iou`)."""
    ra = _kernels.c_array(a).reshape(-1, 5)
    rb = _kernels.c_array(b).reshape(-1, 5)
    out = np.empty(ra.shape[0])
    _kernels.rect_iou(ra, rb, out)
    return out


def bev_iou(a: npt.ArrayLike, b: npt.ArrayLike) -> F64:
    """Pairwise BEV IoU ``[N,M]`` of rotated rectangles ``[N,5]`` and ``[M,5]`` (``x, y, l, w, yaw``).

    Only pairs whose circumscribed circles intersect are clipped; the others are 0 without work.
    """
    ra = np.asarray(a, dtype=np.float64).reshape(-1, 5)
    rb = np.asarray(b, dtype=np.float64).reshape(-1, 5)
    out = np.zeros((ra.shape[0], rb.shape[0]))
    if out.size == 0:
        return out
    radius_a = 0.5 * np.hypot(ra[:, 2], ra[:, 3])
    radius_b = 0.5 * np.hypot(rb[:, 2], rb[:, 3])
    d = np.hypot(ra[:, None, 0] - rb[None, :, 0], ra[:, None, 1] - rb[None, :, 1])
    i, j = (d < radius_a[:, None] + radius_b[None, :]).nonzero()
    if i.size:
        out[i, j] = bev_iou_pairs(ra[i], rb[j])
    return out


def box_iou_2d(a: npt.ArrayLike, b: npt.ArrayLike) -> F64:
    """Pairwise IoU ``[N, M]`` of image boxes ``[N, 4]`` and ``[M, 4]`` (``x1, y1, x2, y2``; a compiled
    loop, :func:`._kernels.box_iou`)."""
    aa = _kernels.c_array(a).reshape(-1, 4)
    bb = _kernels.c_array(b).reshape(-1, 4)
    out = np.empty((aa.shape[0], bb.shape[0]))
    _kernels.box_iou(aa, bb, out)
    return out


# ---------------------------------------------------------------------------------------------
# Cameras
# ---------------------------------------------------------------------------------------------


def project_points(k: npt.ArrayLike, points_cam: npt.ArrayLike) -> F64:
    """Pinhole projection of optical-frame points ``[..., 3]`` to pixels ``[..., 2]`` (no z check)."""
    kk = np.asarray(k, dtype=np.float64)
    p = np.asarray(points_cam, dtype=np.float64)
    h = p @ kk.T
    out: F64 = h[..., :2] / h[..., 2:3]
    return out


def _k_inverse(k: F64) -> F64:
    """Inverse of a camera matrix; closed form for the usual upper-triangular pinhole ``K``."""
    if k[1, 0] != 0.0 or k[2, 0] != 0.0 or k[2, 1] != 0.0 or k[2, 2] != 1.0:
        out: F64 = np.linalg.inv(k)
        return out
    fx, s, cx, fy, cy = k[0, 0], k[0, 1], k[0, 2], k[1, 1], k[1, 2]
    return np.array(
        [[1.0 / fx, -s / (fx * fy), (s * cy - cx * fy) / (fx * fy)], [0.0, 1.0 / fy, -cy / fy], [0.0, 0.0, 1.0]]
    )


def pixel_rays(k: npt.ArrayLike, uv: npt.ArrayLike) -> F64:
    """Optical-frame ray directions ``[N,3]`` (``z = 1``) through pixels ``uv [N,2]``."""
    kinv = _k_inverse(np.asarray(k, dtype=np.float64))
    pix = np.asarray(uv, dtype=np.float64).reshape(-1, 2)
    h = np.column_stack([pix, np.ones(pix.shape[0])])
    out: F64 = h @ kinv.T
    return out


def ray_ground_intersection(origin: npt.ArrayLike, dirs: npt.ArrayLike, ground_z: float = 0.0) -> F64:
    """Ray parameter ``lam`` where ``origin + lam * dirs`` meets the plane ``z = ground_z``.

    ``origin`` is one ``[3]`` point or one per ray ``[N,3]``. ``nan`` for rays that do not descend
    towards the plane (at or above the horizon).
    """
    o = np.asarray(origin, dtype=np.float64).reshape(-1, 3)
    d = np.asarray(dirs, dtype=np.float64).reshape(-1, 3)
    dz = d[:, 2]
    lam = np.divide(ground_z - o[:, 2], dz, out=np.full(dz.shape, np.nan), where=dz < -1e-9)
    out: F64 = np.where(lam > 0, lam, np.nan)
    return out


@dataclass(frozen=True, slots=True)
class ProjectedBoxes:
    """3D boxes seen by a camera.

    ``boxes`` ``[N,4]`` are the image-clipped 2D bounding boxes of the projected 3D boxes (the part in
    front of the near plane); ``in_image`` says whether any of the box is visible; ``depth`` is the
    optical-axis depth of the box centre; ``visible_fraction`` is the clipped over the unclipped 2D area
    (truncation at the image border).
    """

    boxes: F64
    in_image: B
    depth: F64
    visible_fraction: F64


def project_corners(
    corners: npt.ArrayLike, k: npt.ArrayLike, size: npt.ArrayLike, *, near: float = 0.1
) -> ProjectedBoxes:
    """Project optical-frame box corners ``[..., 8, 3]`` with camera matrices ``k`` (``[..., 3, 3]``,
    broadcast against the leading dims) into images of ``size`` (``[..., 2]`` width, height).

    Parts of a box behind the near plane are cut off exactly (edges are clipped at ``z = near``), so a
    box that straddles the camera still gets the right 2D extent. Leading dims are kept, so all boxes in
    all cameras of a rig are projected in one pass.
    """
    c = np.asarray(corners, dtype=np.float64)
    lead = c.shape[:-2]
    c = c.reshape(-1, 8, 3)
    kk = np.asarray(k, dtype=np.float64)
    if kk.shape != (*lead, 3, 3):
        kk = np.broadcast_to(kk, (*lead, 3, 3))
    kt = kk.reshape(-1, 3, 3).swapaxes(-1, -2)
    wh = np.asarray(size, dtype=np.float64)
    if wh.shape != (*lead, 2):
        wh = np.broadcast_to(wh, (*lead, 2))
    wh = wh.reshape(-1, 2)
    p = project_homogeneous(c @ kt, wh, near=near, depth=c[..., 2])
    return ProjectedBoxes(
        p.boxes.reshape(*lead, 4), p.in_image.reshape(lead), p.depth.reshape(lead), p.visible_fraction.reshape(lead)
    )


def project_homogeneous(h: F64, size: F64, *, near: float = 0.1, depth: F64 | None = None) -> ProjectedBoxes:
    """:func:`project_corners` from the corners' homogeneous pixel coordinates ``h = K p`` ``[M,8,3]``
    (``p`` in the optical frame) with their optical depth ``depth [M,8]`` (``h[..., 2]``, the default,
    when the last row of ``K`` is ``[0, 0, 1]``), into images of ``size [M,2]``. Projection is linear in
    homogeneous coordinates, so the near-plane clipping interpolates ``h`` directly; a caller can thus
    fold ``K`` into the camera transform and project with one matrix product per camera. (A compiled
    loop, :func:`._kernels.project`.)
    """
    hh = _kernels.c_array(h)
    z = _kernels.c_array(hh[..., 2] if depth is None else depth)
    m = hh.shape[0]
    boxes, in_image, centre, frac = np.empty((m, 4)), np.empty(m, bool), np.empty(m), np.empty(m)
    _kernels.project(hh, z, _kernels.c_array(size), float(near), boxes, in_image, centre, frac)
    return ProjectedBoxes(boxes, in_image, centre, frac)


def project_boxes(
    boxes: npt.ArrayLike,
    cam_from_frame: npt.ArrayLike,
    k: npt.ArrayLike,
    width: int,
    height: int,
    *,
    near: float = 0.1,
) -> ProjectedBoxes:
    """Project 3D boxes ``[N,7]`` (in the frame ``cam_from_frame`` maps from) into a pinhole camera."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 7)
    corners = transform_points(cam_from_frame, box_corners(b))
    return project_corners(corners, k, (float(width), float(height)), near=near)
