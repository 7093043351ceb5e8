"""Compiled loops over point clouds (numba): rigid transforms and the camera-guided frustums.

A frame's lidar cloud is tens of thousands of points. As whole-array float64 products (``p @ R.T``) each
step woke OpenBLAS's helper thread, which then spun ~100 ms on the second core (issue 44), and the
camera-guided step built a ``[points, detections]`` table per camera. Here each is one pass: a point is
read as float32, transformed in float64 registers and stored as float32 (what the clouds are), and the
frustums are selected in one pass per camera over the cloud, with no temporary per detection.

The rules of :mod:`._kernels` hold: fixed dtypes (:func:`cloud`), outputs preallocated by the caller,
cached on disk, :func:`warm_up` compiles ahead of the first frame. Kernels call jitted helpers of this
module only (numba's cache is invalidated by changes to a kernel's own module).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.fusion._kernels import jit

__all__ = ["Scratch", "cloud", "guided_faces", "move_cloud", "transform_xyz", "warm_up"]

F32 = npt.NDArray[np.float32]


def cloud(points: npt.ArrayLike) -> F32:
    """``points`` as the one type the kernels take: C-contiguous float32, read-only (a view when it is
    one already; samples' clouds are read-only, and a writable array would be a second specialization)."""
    out: F32 = np.ascontiguousarray(points, dtype=np.float32).view()
    out.flags.writeable = False
    return out


class Scratch(threading.local):
    """Work arrays kept from one frame to the next, one set per thread (an object may be used by several).

    A cloud's temporaries are hundreds of KiB, above glibc's mmap threshold: allocated fresh each frame,
    their pages are returned to the system when freed and faulted in again (zeroed) on the next frame, and
    they start cold in the caches. Reused, they stay mapped (and, as often as not, cached). An array handed
    out is valid until the same thread asks for the same ``name`` again: for a call's temporaries only.
    """

    def __init__(self) -> None:
        self._arrays: dict[str, npt.NDArray[Any]] = {}

    def array(self, name: str, shape: tuple[int, ...], dtype: npt.DTypeLike) -> npt.NDArray[Any]:
        """A C-contiguous, writable, uninitialised array of ``shape`` (the front of this thread's ``name``
        buffer, grown with a quarter to spare when it is too small)."""
        need = int(np.prod(shape))
        buf = self._arrays.get(name)
        if buf is None or buf.dtype != np.dtype(dtype) or buf.shape[0] < need:
            buf = np.empty(need + need // 4, dtype)
            self._arrays[name] = buf
        return buf[:need].reshape(shape)


@jit
def transform_xyz(m: Any, src: Any, dst: Any) -> None:
    """``dst[:, :3] = m[:3, :3] @ src[:, :3] + m[:3, 3]`` per point (``m`` a float64 ``[4,4]``; ``src``
    float32 ``[N, >=3]``, ``dst`` float32 ``[N, >=3]``; the other columns of ``dst`` are left alone)."""
    r00, r01, r02, t0 = m[0, 0], m[0, 1], m[0, 2], m[0, 3]
    r10, r11, r12, t1 = m[1, 0], m[1, 1], m[1, 2], m[1, 3]
    r20, r21, r22, t2 = m[2, 0], m[2, 1], m[2, 2], m[2, 3]
    for i in range(src.shape[0]):
        x, y, z = np.float64(src[i, 0]), np.float64(src[i, 1]), np.float64(src[i, 2])
        dst[i, 0] = r00 * x + r01 * y + r02 * z + t0
        dst[i, 1] = r10 * x + r11 * y + r12 * z + t1
        dst[i, 2] = r20 * x + r21 * y + r22 * z + t2


@jit
def move_cloud(m: Any, src: Any, dst: Any) -> None:
    """``dst`` = ``src`` with its ``x, y, z`` moved as :func:`transform_xyz` does and its other columns
    copied (both float32 ``[N, k]``): a moved cloud written in one pass, wherever ``dst`` lies."""
    r00, r01, r02, t0 = m[0, 0], m[0, 1], m[0, 2], m[0, 3]
    r10, r11, r12, t1 = m[1, 0], m[1, 1], m[1, 2], m[1, 3]
    r20, r21, r22, t2 = m[2, 0], m[2, 1], m[2, 2], m[2, 3]
    cols = src.shape[1]
    for i in range(src.shape[0]):
        x, y, z = np.float64(src[i, 0]), np.float64(src[i, 1]), np.float64(src[i, 2])
        dst[i, 0] = r00 * x + r01 * y + r02 * z + t0
        dst[i, 1] = r10 * x + r11 * y + r12 * z + t1
        dst[i, 2] = r20 * x + r21 * y + r22 * z + t2
        for j in range(3, cols):
            dst[i, j] = src[i, j]


@jit
def _outside_known(x: Any, y: Any, center: Any, size: Any, yaw_cos: Any, yaw_sin: Any, margin: float) -> bool:
    """The BEV point ``(x, y)`` is inside none of the known boxes (each grown by ``margin``)."""
    for j in range(center.shape[0]):
        dx, dy = x - center[j, 0], y - center[j, 1]
        c, s = yaw_cos[j], yaw_sin[j]
        if abs(c * dx + s * dy) <= size[j, 0] / 2 + margin and abs(-s * dx + c * dy) <= size[j, 1] / 2 + margin:
            return False
    return True


@jit
def guided_faces(
    pts: Any,
    det_cam: Any,
    det_boxes: Any,
    det_height: Any,
    cam_from_base: Any,
    k: Any,
    known_center: Any,
    known_size: Any,
    known_yaw: Any,
    ground_height: float,
    min_depth: float,
    max_depth: float,
    box_shrink: float,
    cluster_gap: float,
    depth_ratio: float,
    known_margin: float,
    scratch: Any,
    face: Any,
    count: Any,
) -> None:
    """The camera-guided step's frustum and cluster choice (:mod:`._guided`, steps 1-2) for every detection.

    ``pts [P,3]`` float32 lidar points in ``base_link``; detection ``d`` is in camera ``det_cam[d]`` (an
    index of ``cam_from_base [C,4,4]`` and ``k [C,3,3]``), its box ``det_boxes[d]`` pixels x1 y1 x2 y2, its
    class height prior ``det_height[d]``; ``known_*`` the objects whose points are already explained.
    Writes ``count[d]`` (points in the chosen cluster, 0 for none) and ``face[d]`` (its nearest depth).
    ``scratch``: float64 work space of at least ``4 P`` (:class:`Scratch`: no fresh pages per frame).

    One pass per camera over the points: a point above the ground and in the camera's depth range is
    projected, tested against that camera's (shrunk) boxes, and one that falls in any and in no known box
    is kept with its depth and pixel; each detection then sorts the depths of the kept points in its box.
    """
    n_det = det_cam.shape[0]
    n_pts = pts.shape[0]
    for d in range(n_det):
        face[d] = 0.0
        count[d] = 0
    if n_pts == 0 or n_det == 0:
        return
    yaw_cos, yaw_sin = np.cos(known_yaw), np.sin(known_yaw)
    n_cam = cam_from_base.shape[0]
    keep_z = scratch[:n_pts]
    keep_u = scratch[n_pts : 2 * n_pts]
    keep_v = scratch[2 * n_pts : 3 * n_pts]
    depths = scratch[3 * n_pts : 4 * n_pts]
    lo = np.empty((n_det, 2))
    hi = np.empty((n_det, 2))
    for d in range(n_det):
        shrink = box_shrink * (det_boxes[d, 2] - det_boxes[d, 0])
        lo[d, 0], hi[d, 0] = det_boxes[d, 0] + shrink, det_boxes[d, 2] - shrink
        lo[d, 1], hi[d, 1] = det_boxes[d, 1], det_boxes[d, 3]
    for c in range(n_cam):
        n_here = 0
        for d in range(n_det):
            n_here += det_cam[d] == c
        if n_here == 0:
            continue
        m = cam_from_base[c]
        fx, s, cx, fy, cy = k[c, 0, 0], k[c, 0, 1], k[c, 0, 2], k[c, 1, 1], k[c, 1, 2]
        kept = 0
        for i in range(n_pts):
            x, y, z = np.float64(pts[i, 0]), np.float64(pts[i, 1]), np.float64(pts[i, 2])
            if z <= ground_height:
                continue
            zc = m[2, 0] * x + m[2, 1] * y + m[2, 2] * z + m[2, 3]
            if not min_depth < zc < max_depth:
                continue
            xc = m[0, 0] * x + m[0, 1] * y + m[0, 2] * z + m[0, 3]
            yc = m[1, 0] * x + m[1, 1] * y + m[1, 2] * z + m[1, 3]
            u = (fx * xc + s * yc) / zc + cx
            v = fy * yc / zc + cy
            hit = False
            for d in range(n_det):
                if det_cam[d] == c and lo[d, 0] <= u <= hi[d, 0] and lo[d, 1] <= v <= hi[d, 1]:
                    hit = True
                    break
            if not hit or not _outside_known(x, y, known_center, known_size, yaw_cos, yaw_sin, known_margin):
                continue
            keep_z[kept], keep_u[kept], keep_v[kept] = zc, u, v
            kept += 1
        for d in range(n_det):
            if det_cam[d] != c:
                continue
            n = 0
            for i in range(kept):
                if lo[d, 0] <= keep_u[i] <= hi[d, 0] and lo[d, 1] <= keep_v[i] <= hi[d, 1]:
                    depths[n] = keep_z[i]
                    n += 1
            if n == 0:
                continue
            dz = np.sort(depths[:n])
            prior = fy * det_height[d] / max(det_boxes[d, 3] - det_boxes[d, 1], 1.0)
            a = 0
            for b in range(1, n + 1):
                if b < n and dz[b] - dz[b - 1] <= cluster_gap:
                    continue
                # the cluster dz[a:b]: the nearest one whose near face agrees with the height prior
                if prior / depth_ratio <= dz[a] <= prior * depth_ratio:
                    face[d], count[d] = dz[a], b - a
                    break
                a = b


def warm_up() -> None:
    """Compile (or load from the on-disk cache) the kernels for the types fusion calls them with."""
    pts = cloud(np.zeros((1, 4)))
    transform_xyz(np.eye(4), pts, np.zeros((1, 4), np.float32))
    move_cloud(np.eye(4), pts, np.zeros((1, 4), np.float32))
    guided_faces(
        pts, np.zeros(1, np.intp), np.ones((1, 4)), np.ones(1), np.eye(4)[None], np.eye(3)[None], np.zeros((1, 3)),
        np.ones((1, 3)), np.zeros(1), 0.0, 0.5, 80.0, 0.1, 1.0, 1.5, 0.3, np.zeros(4), np.zeros(1),
        np.zeros(1, np.intp),
    )  # fmt: skip
