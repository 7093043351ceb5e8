"""Compiled loops over point clouds (numba): rigid transforms and the camera-guided frustums.

A frame's lidar cloud is tens of thousands of points. As whole-array float64 products (``p @ R.T``) each
step woke OpenBLAS's helper thread, which then spun ~100 ms on the second core (issue 44), and the
camera-guided step built a ``[points, detections]`` table per camera. Here each is one pass: a point is
read as float32, transformed in float64 registers and stored as float32 (what the clouds are), and the
frustums are selected in one pass over the cloud for every camera, with no temporary per detection.

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

__all__ = ["Scratch", "cloud", "guided_faces", "guided_scratch_size", "move_cloud", "transform_xyz", "warm_up"]

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


#: Rows of a cloud the kernels read ahead at a time (:func:`_read_ahead`).
_BLOCK = 256


@jit
def _read_ahead(a: Any, start: int, stop: int) -> float:
    """Reads one value of each 64-byte cache line of rows ``start:stop`` of the float32 array ``a``; their
    sum, meaningless, is returned so that the reads stay.

    A cloud is cold when a kernel walks it (written by another stage, tens of ms before). The arithmetic
    loop over its points alone stalls on each cache miss; this tight loop of independent loads brings a
    block in at memory speed first (measured, a cold 54k-point cloud moved: 560 -> 290 us)."""
    step = max(1, 16 // a.shape[1])
    total = 0.0
    for i in range(start, stop, step):
        total += a[i, 0]
    return total


@jit
def _moved(m: Any, src: Any, dst: Any, cols: int) -> float:
    """``dst[:, :3] = m[:3, :3] @ src[:, :3] + m[:3, 3]`` per point in float64, rounded to float32, and
    ``dst[:, 3:cols] = src[:, 3:cols]``, in one pass over ``src`` read ahead a block at a time (the one body
    of :func:`transform_xyz` and :func:`move_cloud`). Returns :func:`_read_ahead`'s meaningless sum."""
    r00, r01, r02, t0 = m[0, 0], m[0, 1], m[0, 2], m[0, 3]
    r10, r11, r12, t1 = m[1, 0], m[1, 1], m[1, 2], m[1, 3]
    r20, r21, r22, t2 = m[2, 0], m[2, 1], m[2, 2], m[2, 3]
    n = src.shape[0]
    read = 0.0
    for start in range(0, n, _BLOCK):
        stop = min(start + _BLOCK, n)
        read += _read_ahead(src, start, stop)
        for i in range(start, stop):
            x, y, z = np.float64(src[i, 0]), np.float64(src[i, 1]), np.float64(src[i, 2])
            dst[i, 0] = r00 * x + r01 * y + r02 * z + t0
            dst[i, 1] = r10 * x + r11 * y + r12 * z + t1
            dst[i, 2] = r20 * x + r21 * y + r22 * z + t2
            for j in range(3, cols):
                dst[i, j] = src[i, j]
    return read


@jit
def transform_xyz(m: Any, src: Any, dst: Any) -> float:
    """``dst[:, :3] = m[:3, :3] @ src[:, :3] + m[:3, 3]`` per point (``m`` a float64 ``[4,4]``; ``src``
    float32 ``[N, >=3]``, ``dst`` float32 ``[N, >=3]``; the other columns of ``dst`` are left alone). Returns
    :func:`_read_ahead`'s meaningless sum."""
    return _moved(m, src, dst, 3)


@jit
def move_cloud(m: Any, src: Any, dst: Any) -> float:
    """``dst`` = ``src`` with its ``x, y, z`` moved as :func:`transform_xyz` does and its other columns
    copied (both float32 ``[N, k]``): a moved cloud written in one pass, wherever ``dst`` lies. Returns
    :func:`_read_ahead`'s meaningless sum."""
    return _moved(m, src, dst, src.shape[1])


@jit
def _outside_known(x: Any, y: Any, center: Any, size: Any, yaw_cos: Any, yaw_sin: Any, margin: float) -> bool:
    """The BEV point ``(x, y)`` is inside none of the known boxes (each grown by ``margin``)."""
    for j in range(center.shape[0]):
        dx, dy = x - center[j, 0], y - center[j, 1]
        c, s = yaw_cos[j], yaw_sin[j]
        if abs(c * dx + s * dy) <= size[j, 0] / 2 + margin and abs(-s * dx + c * dy) <= size[j, 1] / 2 + margin:
            return False
    return True


#: px; the width of the column bins the camera-guided kernel sorts a camera's boxes into.
_GUIDED_BIN_PX = 16.0


@jit
def _bin(u: float, u_lo: float, n_bins: int) -> int:
    """The column bin of pixel column ``u`` (at least ``u_lo``) among ``n_bins``."""
    return min(int((u - u_lo) / _GUIDED_BIN_PX), n_bins - 1)


def guided_scratch_size(n_points: int, n_cameras: int) -> int:
    """The float64 work space :func:`guided_faces` needs for ``n_points`` and detections in ``n_cameras``."""
    return (3 * n_cameras + 1) * n_points


@jit
def guided_faces(
    pts: Any,
    base_from_pts: Any,
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
) -> float:
    """The camera-guided step's frustum and cluster choice (:mod:`._guided`, steps 1-2) for every detection.

    ``pts [P,>=3]`` float32 lidar points, moved to ``base_link`` by ``base_from_pts [4,4]`` as
    :func:`transform_xyz` moves them (float64 arithmetic, rounded to float32); detection ``d`` is in camera
    ``det_cam[d]`` (an index of ``cam_from_base [C,4,4]`` and ``k [C,3,3]``), its box ``det_boxes[d]``
    pixels x1 y1 x2 y2, its class height prior ``det_height[d]``; ``known_*`` the objects whose points are
    already explained. Writes ``count[d]`` (points in the chosen cluster, 0 for none) and ``face[d]`` (its
    nearest depth). ``scratch``: float64 work space of :func:`guided_scratch_size` (:class:`Scratch`).
    Returns :func:`_read_ahead`'s meaningless sum.

    One pass over the points for every camera: a point is moved to ``base_link``; above the ground, it is
    projected into each camera with detections whose depth range it is in, tested against that camera's
    (shrunk) boxes, and kept for the camera, with its depth and pixel, when it falls in any of them and in
    no known box; each detection then sorts the depths of its camera's kept points in its box.
    """
    n_det = det_cam.shape[0]
    n_pts = pts.shape[0]
    for d in range(n_det):
        face[d] = 0.0
        count[d] = 0
    if n_pts == 0 or n_det == 0:
        return 0.0
    yaw_cos, yaw_sin = np.cos(known_yaw), np.sin(known_yaw)
    n_cam = cam_from_base.shape[0]
    # the cameras with detections, each a slot of kept points
    slot = np.full(n_cam, -1, np.intp)
    n_slots = 0
    for d in range(n_det):
        if slot[det_cam[d]] < 0:
            slot[det_cam[d]] = n_slots
            n_slots += 1
    lo = np.empty((n_det, 2))
    hi = np.empty((n_det, 2))
    for d in range(n_det):
        shrink = box_shrink * (det_boxes[d, 2] - det_boxes[d, 0])
        lo[d, 0], hi[d, 0] = det_boxes[d, 0] + shrink, det_boxes[d, 2] - shrink
        lo[d, 1], hi[d, 1] = det_boxes[d, 1], det_boxes[d, 3]
    # per camera: the bounds of its boxes, and its detections by column bins of the image (a point is
    # tested against the boxes of its bin only: any box holding it is there; floating-point rounding is
    # monotone, so a point's bin lies within the bins of every box around it)
    u_lo, u_hi = np.full(n_cam, np.inf), np.full(n_cam, -np.inf)
    v_lo, v_hi = np.full(n_cam, np.inf), np.full(n_cam, -np.inf)
    for d in range(n_det):
        c = det_cam[d]
        u_lo[c], u_hi[c] = min(u_lo[c], lo[d, 0]), max(u_hi[c], hi[d, 0])
        v_lo[c], v_hi[c] = min(v_lo[c], lo[d, 1]), max(v_hi[c], hi[d, 1])
    n_bins = np.zeros(n_cam, np.intp)
    cell0 = np.zeros(n_cam + 1, np.intp)  # camera c's bins are cells cell0[c] .. cell0[c + 1] - 1
    for c in range(n_cam):
        if u_hi[c] >= u_lo[c]:
            n_bins[c] = int((u_hi[c] - u_lo[c]) / _GUIDED_BIN_PX) + 1
        cell0[c + 1] = cell0[c] + n_bins[c]
    in_cell = np.zeros(cell0[n_cam] + 1, np.intp)
    for d in range(n_det):
        c = det_cam[d]
        if hi[d, 0] >= lo[d, 0]:
            for e in range(_bin(lo[d, 0], u_lo[c], n_bins[c]), _bin(hi[d, 0], u_lo[c], n_bins[c]) + 1):
                in_cell[cell0[c] + e + 1] += 1
    for e in range(cell0[n_cam]):
        in_cell[e + 1] += in_cell[e]
    cell_det = np.empty(in_cell[cell0[n_cam]], np.intp)  # detections of cell e: cell_det[in_cell[e]:in_cell[e + 1]]
    filled = in_cell[:-1].copy()
    for d in range(n_det):
        c = det_cam[d]
        if hi[d, 0] >= lo[d, 0]:
            for e in range(_bin(lo[d, 0], u_lo[c], n_bins[c]), _bin(hi[d, 0], u_lo[c], n_bins[c]) + 1):
                cell_det[filled[cell0[c] + e]] = d
                filled[cell0[c] + e] += 1
    kept = np.zeros(n_slots, np.intp)
    b = base_from_pts
    read = 0.0
    for start in range(0, n_pts, _BLOCK):
        stop = min(start + _BLOCK, n_pts)
        read += _read_ahead(pts, start, stop)
        for i in range(start, stop):
            px, py, pz = np.float64(pts[i, 0]), np.float64(pts[i, 1]), np.float64(pts[i, 2])
            z = np.float64(np.float32(b[2, 0] * px + b[2, 1] * py + b[2, 2] * pz + b[2, 3]))
            if z <= ground_height:
                continue
            x = np.float64(np.float32(b[0, 0] * px + b[0, 1] * py + b[0, 2] * pz + b[0, 3]))
            y = np.float64(np.float32(b[1, 0] * px + b[1, 1] * py + b[1, 2] * pz + b[1, 3]))
            known = 0  # 0: not yet tested, 1: outside every known box, 2: inside one
            for c in range(n_cam):
                sl = slot[c]
                if sl < 0:
                    continue
                m = cam_from_base  # indexed in full: a view per point would cost a reference count
                zc = m[c, 2, 0] * x + m[c, 2, 1] * y + m[c, 2, 2] * z + m[c, 2, 3]
                if not min_depth < zc < max_depth:
                    continue
                xc = m[c, 0, 0] * x + m[c, 0, 1] * y + m[c, 0, 2] * z + m[c, 0, 3]
                yc = m[c, 1, 0] * x + m[c, 1, 1] * y + m[c, 1, 2] * z + m[c, 1, 3]
                v = k[c, 1, 1] * yc / zc + k[c, 1, 2]
                if not v_lo[c] <= v <= v_hi[c]:
                    continue
                u = (k[c, 0, 0] * xc + k[c, 0, 1] * yc) / zc + k[c, 0, 2]
                if not u_lo[c] <= u <= u_hi[c]:
                    continue
                cell = cell0[c] + _bin(u, u_lo[c], n_bins[c])
                hit = False
                for j in range(in_cell[cell], in_cell[cell + 1]):
                    d = cell_det[j]
                    if lo[d, 0] <= u <= hi[d, 0] and lo[d, 1] <= v <= hi[d, 1]:
                        hit = True
                        break
                if not hit:
                    continue
                if known == 0:
                    known = 1 if _outside_known(x, y, known_center, known_size, yaw_cos, yaw_sin, known_margin) else 2
                if known == 2:
                    continue
                at = 3 * (sl * n_pts + kept[sl])
                scratch[at], scratch[at + 1], scratch[at + 2] = zc, u, v
                kept[sl] += 1
    depths = scratch[3 * n_slots * n_pts : (3 * n_slots + 1) * n_pts]
    for d in range(n_det):
        c = det_cam[d]
        sl = slot[c]
        n = 0
        for i in range(kept[sl]):
            at = 3 * (sl * n_pts + i)
            if lo[d, 0] <= scratch[at + 1] <= hi[d, 0] and lo[d, 1] <= scratch[at + 2] <= hi[d, 1]:
                depths[n] = scratch[at]
                n += 1
        if n == 0:
            continue
        dz = np.sort(depths[:n])
        prior = k[c, 1, 1] * det_height[d] / max(det_boxes[d, 3] - det_boxes[d, 1], 1.0)
        a = 0
        for e in range(1, n + 1):
            if e < n and dz[e] - dz[e - 1] <= cluster_gap:
                continue
            # the cluster dz[a:e]: the nearest one whose near face agrees with the height prior
            if prior / depth_ratio <= dz[a] <= prior * depth_ratio:
                face[d], count[d] = dz[a], e - a
                break
            a = e
    return read


def warm_up() -> None:
    """Compile (or load from the on-disk cache) the kernels for the types fusion calls them with."""
    pts = cloud(np.zeros((1, 4)))
    transform_xyz(np.eye(4), pts, np.zeros((1, 4), np.float32))
    move_cloud(np.eye(4), pts, np.zeros((1, 4), np.float32))
    guided_faces(
        pts, np.eye(4), np.zeros(1, np.intp), np.ones((1, 4)), np.ones(1), np.eye(4)[None], np.eye(3)[None],
        np.zeros((1, 3)), np.ones((1, 3)), np.zeros(1), 0.0, 0.5, 80.0, 0.1, 1.0, 1.5, 0.3,
        np.zeros(guided_scratch_size(1, 1)), np.zeros(1), np.zeros(1, np.intp),
    )  # fmt: skip
