"""Compiled loops of the fusion stage (numba).

Fusion runs once per frame on tens of objects. At that size a numpy call costs 1-5 us whatever the
array size, so a step written as whole-array operations pays for its number of calls, not for its
arithmetic: the numpy implementation took 1.9 ms a frame even for 2 objects. The pairwise and
per-object steps are therefore loops compiled by numba: camera association (:func:`camera_pairs`,
:func:`camera_evidence`, :func:`camera_candidates`), radar (:func:`radar_to_frame`,
:func:`attach_radar`, :func:`radar_groups`, :func:`radar_only`), :func:`finish_velocity`, NMS
(:func:`nms_pairs`, :func:`nms_suppress`) and the geometry behind :mod:`._geometry`
(:func:`project`, :func:`box_iou`, :func:`rect_iou`). The tracker's loops are in
:mod:`._track_kernels`. The module docstring of :mod:`._fuser` states the rules; each kernel's
docstring says what it computes.

Callers pass C-contiguous, writable arrays of fixed dtypes (:func:`c_array`), so each kernel has one
specialization, and preallocate the outputs. Kernels are compiled on first use and cached on disk next
to this module (``cache=True``): only the first process after an install pays the compile (~45 s for
all fusion and tracking kernels on two cores); :func:`warm_up` does it ahead of the first frame (a
``Fuser`` calls it when it is built). The cache is invalidated by changes to a kernel's own module
only: kernels call jitted helpers of their own module, never another module's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
import numpy.typing as npt

__all__ = [
    "CORNER_SIGNS",
    "attach_radar",
    "box_iou",
    "c_array",
    "camera_candidates",
    "camera_evidence",
    "camera_pairs",
    "finish_velocity",
    "jit",
    "nms_pairs",
    "nms_suppress",
    "occlusion",
    "project",
    "radar_groups",
    "radar_only",
    "radar_to_frame",
    "rect_iou",
    "warm_up",
]

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]
IP = npt.NDArray[np.intp]
_F = TypeVar("_F", bound=Callable[..., Any])

#: Corner signs (times half the size) of a unit box: bottom face counter-clockwise, then the top face
#: (the corner order of :func:`._geometry.box_corners`, which uses this table too).
CORNER_SIGNS = 0.5 * np.array(
    [[1, 1, -1], [-1, 1, -1], [-1, -1, -1], [1, -1, -1], [1, 1, 1], [-1, 1, 1], [-1, -1, 1], [1, -1, 1]], np.float64
)
#: The 12 edges of a box as corner index pairs (corner order of :func:`._geometry.box_corners`).
_EDGE_FROM = np.array([0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3], dtype=np.intp)
_EDGE_TO = np.array([1, 2, 3, 0, 5, 6, 7, 4, 4, 5, 6, 7], dtype=np.intp)


def c_array(a: npt.ArrayLike, dtype: npt.DTypeLike = np.float64) -> npt.NDArray[Any]:
    """``a`` as a C-contiguous, writable array of ``dtype`` (a copy only when it is not one already).

    Kernels are compiled for exactly these arrays: numba types differ by layout and by writability, and a
    second type means a second compile (seconds) in the middle of a drive.
    """
    out = np.ascontiguousarray(a, dtype=dtype)
    return out if out.flags.writeable else out.copy()


def jit(func: _F) -> _F:
    """``numba.njit`` for fusion kernels: cached on disk, releasing the GIL, typed for mypy."""
    # nogil: the runtime may fuse two in-flight frames from two worker threads
    # error_model="numpy": a division by zero gives inf or nan, as in the whole-array code, not an exception
    return cast(_F, numba.njit(cache=True, nogil=True, error_model="numpy")(func))


@jit
def mahalanobis2(dx: float, dy: float, a: float, b: float, d: float) -> float:
    """Squared Mahalanobis distance of ``(dx, dy)`` under the covariance ``[[a, b], [b, d]]`` (a determinant
    below 1e-12 is taken as 1e-12)."""
    return (d * dx * dx - 2 * b * dx * dy + a * dy * dy) / max(a * d - b * b, 1e-12)


@jit
def _iou(ax1: float, ay1: float, ax2: float, ay2: float, bx1: float, by1: float, bx2: float, by2: float) -> float:
    """IoU of two image boxes ``x1, y1, x2, y2`` (0 when their union is empty)."""
    inter = max(min(ax2, bx2) - max(ax1, bx1), 0.0) * max(min(ay2, by2) - max(ay1, by1), 0.0)
    union = max(ax2 - ax1, 0.0) * max(ay2 - ay1, 0.0) + max(bx2 - bx1, 0.0) * max(by2 - by1, 0.0) - inter
    return inter / union if union > 0.0 else 0.0


@jit
def _off_box(dx: float, dy: float, c: float, s: float, length: float, width: float) -> tuple[float, float]:
    """Offset of a point from the nearest point of a BEV box (zero inside): ``(dx, dy)`` is the point
    minus the box centre, ``c, s`` the cosine and sine of the box's heading.

    Exactly zero inside: rebuilding the point from its box coordinates leaves ~1e-15 of rounding, and
    that noise, not geometry, decided which of two radar objects inside one box was the nearest (a
    1e-13 m shift of a box moved the simulated drive's fused mAP by 0.07)."""
    along, across = c * dx + s * dy, c * dy - s * dx
    lx = min(max(along, -0.5 * length), 0.5 * length)
    ly = min(max(across, -0.5 * width), 0.5 * width)
    if lx == along and ly == across:
        return 0.0, 0.0
    return dx - (c * lx - s * ly), dy - (s * lx + c * ly)


@jit
def _support(length: float, width: float, c: float, s: float, ux: float, uy: float) -> float:
    """Half-extent of a BEV box (heading cosine ``c``, sine ``s``) along the unit direction ``(ux, uy)``:
    the distance from its centre to its near face seen along it."""
    return 0.5 * length * abs(ux * c + uy * s) + 0.5 * width * abs(uy * c - ux * s)


@jit
def _radar_centre(
    x: float, y: float, ux: float, uy: float, length: float, width: float, c: float, s: float, surface_factor: float
) -> tuple[float, float]:
    """The radar's estimate of a box's centre from its radar object at ``(x, y)`` seen along the unit line of
    sight ``(ux, uy)``: returns come from the near surface, so the point moved into the box by
    ``surface_factor`` times the box's half-extent along the line of sight."""
    extent = surface_factor * _support(length, width, c, s, ux, uy)
    return x + extent * ux, y + extent * uy


@jit
def _along(ux: float, uy: float, va: float, vc: float) -> tuple[float, float, float]:
    """``(c00, c11, c01)`` of the BEV covariance with variance ``va`` along the unit ``(ux, uy)`` and ``vc``
    across it."""
    return va * ux * ux + vc * uy * uy, va * uy * uy + vc * ux * ux, (va - vc) * ux * uy


@jit
def project(h: F64, depth: F64, size: F64, near: float, boxes: F64, in_image: B, centre: F64, frac: F64) -> None:
    """Image boxes of boxes given by their corners' homogeneous pixels ``h [M,8,3]`` and optical depth
    ``depth [M,8]``, in images of ``size [M,2]``; writes ``boxes [M,4]``, ``in_image``, ``centre`` (mean
    corner depth) and ``frac`` (visible share of the unclipped 2D box). Edges crossing the near plane
    are cut there, so a box reaching behind the camera gets the extent of its part in front."""
    for i in range(h.shape[0]):
        lo_u = lo_v = np.inf
        hi_u = hi_v = -np.inf
        behind = False
        zsum = 0.0
        for k in range(8):
            z = depth[i, k]
            zsum += z
            if z >= near:
                u, v = h[i, k, 0] / h[i, k, 2], h[i, k, 1] / h[i, k, 2]
                lo_u, hi_u, lo_v, hi_v = min(lo_u, u), max(hi_u, u), min(lo_v, v), max(hi_v, v)
            else:
                behind = True
        if behind:  # the points where edges cross the near plane bound the part in front
            for e in range(12):
                a, b = _EDGE_FROM[e], _EDGE_TO[e]
                d0, d1 = depth[i, a] - near, depth[i, b] - near
                if d0 * d1 < 0:
                    t = d0 / (d0 - d1)
                    w = h[i, a, 2] + t * (h[i, b, 2] - h[i, a, 2])
                    u = (h[i, a, 0] + t * (h[i, b, 0] - h[i, a, 0])) / w
                    v = (h[i, a, 1] + t * (h[i, b, 1] - h[i, a, 1])) / w
                    lo_u, hi_u, lo_v, hi_v = min(lo_u, u), max(hi_u, u), min(lo_v, v), max(hi_v, v)
        centre[i] = zsum / 8.0
        if lo_u > hi_u:  # nothing in front of the camera
            boxes[i, :] = 0.0
            in_image[i] = False
            frac[i] = 0.0
            continue
        width, height = size[i, 0], size[i, 1]
        x1, x2 = min(max(lo_u, 0.0), width), min(max(hi_u, 0.0), width)
        y1, y2 = min(max(lo_v, 0.0), height), min(max(hi_v, 0.0), height)
        area = (x2 - x1) * (y2 - y1)
        full_area = (hi_u - lo_u) * (hi_v - lo_v)
        frac[i] = area / full_area if full_area > 0.0 else 0.0
        in_image[i] = area > 0.0
        if area > 0.0:
            boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3] = x1, y1, x2, y2
        else:
            boxes[i, :] = 0.0


@jit
def occlusion(boxes: F64, depth: F64, valid: B, group: IP, cover: F64) -> None:
    """``cover [N]``: the largest share of each box's area covered by one nearer ``valid`` box of the
    same ``group``."""
    n = boxes.shape[0]
    for i in range(n):
        x1, y1, x2, y2 = boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3]
        best = 0.0
        for j in range(n):
            if depth[j] < depth[i] and valid[j] and group[j] == group[i]:
                w = min(x2, boxes[j, 2]) - max(x1, boxes[j, 0])
                if w > 0.0:
                    inter = w * max(min(y2, boxes[j, 3]) - max(y1, boxes[j, 1]), 0.0)
                    best = max(best, inter)
        area = (x2 - x1) * (y2 - y1)
        cover[i] = best / area if area > 0.0 else 0.0


@jit
def box_iou(a: F64, b: F64, out: F64) -> None:
    """``out [N,M]``: IoU of image boxes ``a [N,4]`` and ``b [M,4]`` (``x1, y1, x2, y2``)."""
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            out[i, j] = _iou(a[i, 0], a[i, 1], a[i, 2], a[i, 3], b[j, 0], b[j, 1], b[j, 2], b[j, 3])


@jit
def attach_radar(
    center: F64,
    size: F64,
    yaw: F64,
    cov: F64,
    labels: IP,
    score: F64,
    sources: B,
    velocity: F64,
    vel_var: F64,
    vel_full: B,
    radial: F64,
    r_pos: F64,
    r_cov: F64,
    r_vel: F64,
    r_full: B,
    r_vr: F64,
    r_score: F64,
    r_radial: F64,
    r_los: F64,
    r_sensor: IP,
    r_free: B,
    gate: float,
    weight_vehicle: float,
    weight_vru: float,
    last_vehicle_label: int,
    class_max_speed: F64,
    radial_sigma: F64,
    velocity_sigma: F64,
    surface_factor: float,
    refine: bool,
) -> None:
    """Radar objects -> fused objects, in place (step 3 of :mod:`._fuser`).

    Every free radar object joins the object whose box it is nearest to in Mahalanobis distance (box
    point nearest to the radar point, covariances of both) within ``gate``, and is no longer free. A
    joined object gains the radar as a source and its score (weighted less for pedestrians and
    cyclists). Where the radar speed is possible for the object's class: full velocities are averaged
    by inverse variance with what the object has; an object without a radial speed takes the one of its
    strongest radar object; with ``refine`` (camera candidates), the centre is Kalman-fused with the
    radar's estimate of the centre from its nearest radar object. Inside a box the distance is 0, so
    points inside (of one box, or of overlapping boxes) tie: the Mahalanobis distance from the box centre
    to the radar's estimate of it (:func:`_radar_centre`, the innovation the refinement fuses) decides,
    for the object a radar object joins and for the radar object that refines a candidate; remaining
    ties go to the later index (as a stable sort with last-write-wins would). Not the raw point's
    distance to the centre: a return comes from the near surface, so that would prefer the returns
    whose estimate lies behind the centre.
    """
    n, kn = center.shape[0], r_pos.shape[0]
    best_o = np.full(kn, -1, np.intp)
    best_d2 = np.full(kn, np.inf)
    best_c2 = np.full(kn, np.inf)  # the tie-break: Mahalanobis distance of the radar's centre estimate
    for o in range(n):
        c, s = np.cos(yaw[o]), np.sin(yaw[o])
        for k in range(kn):
            if not r_free[k]:
                continue
            dx, dy = r_pos[k, 0] - center[o, 0], r_pos[k, 1] - center[o, 1]
            ex, ey = _off_box(dx, dy, c, s, size[o, 0], size[o, 1])
            a, b, d = cov[o, 0, 0] + r_cov[k, 0, 0], cov[o, 0, 1] + r_cov[k, 0, 1], cov[o, 1, 1] + r_cov[k, 1, 1]
            d2 = mahalanobis2(ex, ey, a, b, d)
            if d2 > gate or d2 > best_d2[k]:
                continue
            zx, zy = _radar_centre(
                r_pos[k, 0], r_pos[k, 1], r_los[k, 0], r_los[k, 1], size[o, 0], size[o, 1], c, s, surface_factor
            )
            c2 = mahalanobis2(zx - center[o, 0], zy - center[o, 1], a, b, d)
            if d2 < best_d2[k] or c2 <= best_c2[k]:
                best_o[k], best_d2[k], best_c2[k] = o, d2, c2
    miss = np.ones(n)
    usable = np.zeros(kn, np.bool_)
    for k in range(kn):
        o = best_o[k]
        if o < 0:
            continue
        r_free[k] = False
        sources[o, r_sensor[k]] = True
        lab = labels[o]
        miss[o] *= 1.0 - (weight_vehicle if lab <= last_vehicle_label else weight_vru) * r_score[k]
        # velocity only from a speed the object's class can have, and from classes whose radar speed is trusted
        speed = np.hypot(r_vel[k, 0], r_vel[k, 1]) if r_full[k] else abs(r_vr[k])
        usable[k] = speed <= class_max_speed[lab] and np.isfinite(radial_sigma[lab])
    for o in range(n):
        score[o] = 1.0 - (1.0 - score[o]) * miss[o]
    # full velocities: inverse-variance mean with what the object already has
    w = np.zeros(n)
    vx, vy = np.zeros(n), np.zeros(n)
    got = np.zeros(n, np.bool_)
    for k in range(kn):
        o = best_o[k]
        if o < 0 or not usable[k] or not r_full[k]:
            continue
        if not got[o]:
            got[o] = True
            w[o] = 1.0 / vel_var[o] if np.isfinite(vel_var[o]) and vel_full[o] else 0.0
            vx[o], vy[o] = w[o] * velocity[o, 0], w[o] * velocity[o, 1]
        w_new = 1.0 / velocity_sigma[labels[o]] ** 2
        w[o] += w_new
        vx[o] += w_new * r_vel[k, 0]
        vy[o] += w_new * r_vel[k, 1]
    for o in range(n):
        if got[o]:
            velocity[o, 0], velocity[o, 1] = vx[o] / w[o], vy[o] / w[o]
            vel_var[o] = 1.0 / w[o]
            vel_full[o] = True
    # per object: the strongest usable radar object (radial speed) and the nearest one (refine)
    strongest = np.full(n, -1, np.intp)
    nearest = np.full(n, -1, np.intp)
    for k in range(kn):
        o = best_o[k]
        if o < 0 or not usable[k]:
            continue
        if strongest[o] < 0 or r_score[k] >= r_score[strongest[o]]:
            strongest[o] = k
        j = nearest[o]
        if j < 0 or best_d2[k] < best_d2[j] or (best_d2[k] == best_d2[j] and best_c2[k] <= best_c2[j]):
            nearest[o] = k
    for o in range(n):
        k = strongest[o]
        if k >= 0 and np.isnan(radial[o, 0]):
            radial[o, 0], radial[o, 1], radial[o, 2] = r_radial[k, 0], r_radial[k, 1], r_radial[k, 2]
        k = nearest[o]
        if not refine or k < 0:
            continue
        c, s = np.cos(yaw[o]), np.sin(yaw[o])
        zx, zy = _radar_centre(
            r_pos[k, 0], r_pos[k, 1], r_los[k, 0], r_los[k, 1], size[o, 0], size[o, 1], c, s, surface_factor
        )
        zx, zy = zx - center[o, 0], zy - center[o, 1]
        p00, p01, p10, p11 = cov[o, 0, 0], cov[o, 0, 1], cov[o, 1, 0], cov[o, 1, 1]
        a, b, d = p00 + r_cov[k, 0, 0], p01 + r_cov[k, 0, 1], p11 + r_cov[k, 1, 1]
        det = a * d - b * b
        if abs(det) < 1e-12:
            det = 1e-12
        i00, i01, i11 = d / det, -b / det, a / det  # inverse of the (symmetric) innovation covariance
        g00, g01 = p00 * i00 + p01 * i01, p00 * i01 + p01 * i11
        g10, g11 = p10 * i00 + p11 * i01, p10 * i01 + p11 * i11
        center[o, 0] += g00 * zx + g01 * zy
        center[o, 1] += g10 * zx + g11 * zy
        cov[o, 0, 0], cov[o, 0, 1] = p00 - (g00 * p00 + g01 * p10), p01 - (g00 * p01 + g01 * p11)
        cov[o, 1, 0], cov[o, 1, 1] = p10 - (g10 * p00 + g11 * p10), p11 - (g10 * p01 + g11 * p11)


@jit
def camera_pairs(
    center: F64,
    size: F64,
    yaw: F64,
    velocity: F64,
    vel_var: F64,
    lidar: B,
    cam_from_base: F64,
    kpt: F64,
    frustum: F64,
    image_size: F64,
    dts: F64,
    det_boxes: F64,
    det_cam: IP,
    pad: float,
    min_visible: float,
    max_cover: float,
    miss_max_depth: float,
    miss_min_height: float,
    min_iou: float,
    pc: IP,
    po: IP,
    boxes: F64,
    matchable: B,
    expected: B,
    iou: F64,
    allowed: B,
) -> int:
    """(camera, object) pairs of a frame's cameras and objects, and how they compare with the detections.

    A pair exists where the object's bounding sphere touches the camera's view frustum (``frustum``:
    half-angle tangents and their secants; ``cam_from_base [C,4,4]`` is camera(t_s) <- base_link(t_f)).
    Its box is moved by the known velocity over ``dts`` (capture time - frame time) and projected with
    ``kpt = (K [R|t])^T`` (near-plane clipping as :func:`project`); it is ``matchable`` when in the image,
    mostly visible (``min_visible``), not mostly covered by one nearer box of the same camera
    (``max_cover``) and in front; ``expected`` (to be detected: negative evidence when it is not) when
    matchable, near, tall enough and lidar-established. ``iou [M,D]`` is the IoU of the ``pad``-grown
    boxes with the detections of the same camera (0 for other cameras and boxes out of view);
    ``allowed`` where it reaches ``min_iou`` on a matchable pair. Writes the first M rows of the outputs
    (allocated for every pair) and returns M. Pairs come grouped by camera, objects in order.
    """
    n_cam, n = cam_from_base.shape[0], center.shape[0]
    m = 0
    for c in range(n_cam):
        r = cam_from_base[c]
        tan_x, tan_y, sec_x, sec_y = frustum[c, 0], frustum[c, 1], frustum[c, 2], frustum[c, 3]
        for o in range(n):
            radius = 0.5 * np.sqrt(size[o, 0] * size[o, 0] + size[o, 1] * size[o, 1] + size[o, 2] * size[o, 2])
            x, y, z = center[o, 0], center[o, 1], center[o, 2]
            cx = r[0, 0] * x + r[0, 1] * y + r[0, 2] * z + r[0, 3]
            cy = r[1, 0] * x + r[1, 1] * y + r[1, 2] * z + r[1, 3]
            cz = r[2, 0] * x + r[2, 1] * y + r[2, 2] * z + r[2, 3]
            if cz + radius > 0.1 and abs(cx) - cz * tan_x <= radius * sec_x and abs(cy) - cz * tan_y <= radius * sec_y:
                pc[m], po[m] = c, o
                m += 1
    h = np.empty((m, 8, 3))
    size_m = np.empty((m, 2))
    for i in range(m):
        c, o = pc[i], po[i]
        bx, by = center[o, 0], center[o, 1]
        if np.isfinite(vel_var[o]):
            bx += dts[c] * velocity[o, 0]
            by += dts[c] * velocity[o, 1]
        co, so = np.cos(yaw[o]), np.sin(yaw[o])
        for k in range(8):
            lx = CORNER_SIGNS[k, 0] * size[o, 0]
            ly = CORNER_SIGNS[k, 1] * size[o, 1]
            px, py = co * lx - so * ly + bx, so * lx + co * ly + by
            pz = CORNER_SIGNS[k, 2] * size[o, 2] + center[o, 2]
            for j in range(3):
                h[i, k, j] = px * kpt[c, 0, j] + py * kpt[c, 1, j] + pz * kpt[c, 2, j] + kpt[c, 3, j]
        size_m[i, 0], size_m[i, 1] = image_size[c, 0], image_size[c, 1]
    in_image = np.empty(m, np.bool_)
    depth, frac, cover = np.empty(m), np.empty(m), np.empty(m)
    project(h, h[:, :, 2].copy(), size_m, 0.1, boxes[:m], in_image, depth, frac)
    occlusion(boxes[:m], depth, in_image, pc[:m], cover)
    for i in range(m):
        matchable[i] = in_image[i] and frac[i] >= min_visible and cover[i] < max_cover and depth[i] > 0
        expected[i] = (
            matchable[i]
            and depth[i] <= miss_max_depth
            and boxes[i, 3] - boxes[i, 1] >= miss_min_height
            and lidar[po[i]]
        )
        ax1, ay1, ax2, ay2 = boxes[i, 0] - pad, boxes[i, 1] - pad, boxes[i, 2] + pad, boxes[i, 3] + pad
        for d in range(det_boxes.shape[0]):
            value = 0.0
            if in_image[i] and det_cam[d] == pc[i]:
                bx1, by1 = det_boxes[d, 0] - pad, det_boxes[d, 1] - pad
                value = _iou(ax1, ay1, ax2, ay2, bx1, by1, det_boxes[d, 2] + pad, det_boxes[d, 3] + pad)
            iou[i, d] = value
            allowed[i, d] = value >= min_iou and matchable[i]
    return m


@jit
def camera_evidence(
    rows: IP,
    det: IP,
    pc: IP,
    po: IP,
    expected: B,
    iou: F64,
    cam_sensor: IP,
    det_scores: F64,
    det_labels: IP,
    n_cams: int,
    class_floor: float,
    weight: float,
    min_recall: float,
    miss_factor: float,
    absorb_iou: float,
    score: F64,
    votes: F64,
    sources: B,
    unmatched: B,
) -> None:
    """Apply the matches ``(pair rows[i], detection det[i])`` of a frame's cameras to the objects, in place.

    A match adds the camera as a source, a class vote from confident detections (score above
    ``class_floor``, rescaled) and score evidence (``weight``). A camera that found at least
    ``min_recall`` of the (at least 3) pairs it was expected to see gives negative evidence: an
    expected, unmatched object that no camera matched has its score scaled by ``miss_factor`` (once,
    whatever the number of cameras). A detection matched, or overlapping a projected box by
    ``absorb_iou``, is not ``unmatched`` (it is not a new object).
    """
    n, m = score.shape[0], pc.shape[0]
    seen = np.zeros(n, np.bool_)
    found = np.zeros(m, np.bool_)
    miss = np.ones(n)
    for i in range(rows.shape[0]):
        r, d = rows[i], det[i]
        o = po[r]
        seen[o] = True
        found[r] = True
        sources[o, cam_sensor[pc[r]]] = True
        confident = max(det_scores[d] - class_floor, 0.0) / (1.0 - class_floor)
        votes[o, det_labels[d]] += confident
        miss[o] *= 1.0 - weight * confident
        unmatched[d] = False
    for o in range(n):
        score[o] = 1.0 - (1.0 - score[o]) * miss[o]
    n_expected, n_found = np.zeros(n_cams, np.intp), np.zeros(n_cams, np.intp)
    for r in range(m):
        if expected[r]:
            n_expected[pc[r]] += 1
            n_found[pc[r]] += found[r]
    missed = np.zeros(n, np.bool_)
    for r in range(m):
        c = pc[r]
        if expected[r] and not found[r] and n_expected[c] >= 3 and n_found[c] >= min_recall * n_expected[c]:
            missed[po[r]] = True
    for o in range(n):
        if missed[o] and not seen[o]:
            score[o] *= miss_factor
    for d in range(unmatched.shape[0]):
        for r in range(m):
            if iou[r, d] >= absorb_iou:
                unmatched[d] = False
                break


@jit
def nms_pairs(center: F64, size: F64, yaw: F64, radius: F64, first: IP, second: IP, same: B, check: B) -> int:
    """Candidate duplicate pairs ``i < j`` (in that order) of BEV boxes for NMS: ``same`` where the centres
    are closer than the smaller of the two objects' ``radius``, else ``check`` where the axis-aligned
    bounds overlap (the rotated IoU decides). Returns the number K of pairs and writes the first
    ``min(K, len(first))`` of them (a caller with too small outputs calls again with K)."""
    n = center.shape[0]
    hx, hy = np.empty(n), np.empty(n)
    for o in range(n):
        c, s = abs(np.cos(yaw[o])), abs(np.sin(yaw[o]))
        hx[o] = 0.5 * (size[o, 0] * c + size[o, 1] * s)
        hy[o] = 0.5 * (size[o, 0] * s + size[o, 1] * c)
    k = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = center[i, 0] - center[j, 0], center[i, 1] - center[j, 1]
            near = min(radius[i], radius[j])
            close = dx * dx + dy * dy < near * near
            if close or (abs(dx) < hx[i] + hx[j] and abs(dy) < hy[i] + hy[j]):
                if k < first.shape[0]:
                    first[k], second[k], same[k], check[k] = i, j, close, not close
                k += 1
    return k


@jit
def nms_suppress(first: IP, second: IP, same: B, score: F64, alive: B) -> None:
    """Greedy suppression: over the duplicate pairs (``same``), in the order of the better object's score
    rank (ties keep the pair order), the better object, while alive, suppresses the worse one."""
    n = score.shape[0]
    rank = np.empty(n, np.intp)
    rank[np.argsort(-score, kind="mergesort")] = np.arange(n)
    better, worse = np.empty(first.shape[0], np.intp), np.empty(first.shape[0], np.intp)
    m = 0
    for p in range(first.shape[0]):
        if same[p]:
            i, j = first[p], second[p]
            better[m], worse[m] = (i, j) if rank[i] < rank[j] else (j, i)
            m += 1
    alive[:] = True
    key = np.empty(m, np.intp)
    for p in range(m):
        key[p] = rank[better[p]]
    for p in np.argsort(key, kind="mergesort"):
        if alive[better[p]]:
            alive[worse[p]] = False


@jit
def rect_iou(ra: F64, rb: F64, out: F64) -> None:
    """``out[k]``: BEV IoU of the rotated rectangles ``ra[k]`` and ``rb[k]`` (``x, y, l, w, yaw``): ``ra``
    clipped by each edge of ``rb`` (Sutherland-Hodgman; both convex, corners counter-clockwise), its
    area by the shoelace formula."""
    poly, clipped, cb = np.empty((16, 2)), np.empty((16, 2)), np.empty((4, 2))
    for k in range(ra.shape[0]):
        _rect_corners(ra[k], poly)
        _rect_corners(rb[k], cb)
        n = 4
        for e in range(4):
            px, py = cb[e, 0], cb[e, 1]
            ex, ey = cb[(e + 1) % 4, 0] - px, cb[(e + 1) % 4, 1] - py
            m = 0
            for v in range(n):
                ax, ay = poly[v, 0], poly[v, 1]
                bx, by = poly[(v + 1) % n, 0], poly[(v + 1) % n, 1]
                sa, sb = ex * (ay - py) - ey * (ax - px), ex * (by - py) - ey * (bx - px)  # >= 0: inside
                if sa >= 0.0:
                    clipped[m, 0], clipped[m, 1] = ax, ay
                    m += 1
                if (sa >= 0.0) != (sb >= 0.0):
                    t = sa / (sa - sb)
                    clipped[m, 0], clipped[m, 1] = ax + t * (bx - ax), ay + t * (by - ay)
                    m += 1
            n = m
            poly[:n] = clipped[:n]
            if n == 0:
                break
        twice = 0.0
        for v in range(n):
            w = (v + 1) % n
            twice += poly[v, 0] * poly[w, 1] - poly[w, 0] * poly[v, 1]
        inter = 0.5 * abs(twice) if n >= 3 else 0.0
        union = abs(ra[k, 2] * ra[k, 3]) + abs(rb[k, 2] * rb[k, 3]) - inter
        out[k] = min(max(inter / union, 0.0), 1.0) if union > 1e-12 else 0.0


@jit
def _rect_corners(rect: F64, out: F64) -> None:
    """Counter-clockwise corners ``out [4,2]`` of a BEV rectangle ``x, y, l, w, yaw`` (as ``bev_corners``)."""
    c, s = np.cos(rect[4]), np.sin(rect[4])
    for i in range(4):
        lx = (0.5 if i in (0, 3) else -0.5) * rect[2]
        ly = (0.5 if i < 2 else -0.5) * rect[3]
        out[i, 0] = c * lx - s * ly + rect[0]
        out[i, 1] = s * lx + c * ly + rect[1]


@jit
def finish_velocity(
    center: F64,
    size: F64,
    yaw: F64,
    labels: IP,
    velocity: F64,
    vel_var: F64,
    vel_full: B,
    radial: F64,
    age: F64,
    radial_sigma: F64,
    min_heading_cos: float,
    max_speed: float,
    heading_sigma: float,
) -> None:
    """In place: a velocity from the radial speed where no full velocity arrived, then positions moved
    over their ``age`` where a velocity is known (steps 1 and 3 of :mod:`._fuser`)."""
    for o in range(center.shape[0]):
        if not vel_full[o] and np.isfinite(radial[o, 0]):
            vr, ux, uy = radial[o, 0], radial[o, 1], radial[o, 2]
            hx, hy = np.cos(yaw[o]), np.sin(yaw[o])
            c = ux * hx + uy * hy
            # the heading of a near-square box (pedestrian) says nothing about where it moves
            along = abs(c) >= min_heading_cos and size[o, 0] >= 1.3 * size[o, 1]
            speed = min(max(vr / (c if along else 1.0), -max_speed), max_speed)
            if along:
                velocity[o, 0], velocity[o, 1] = speed * hx, speed * hy
                base = (radial_sigma[labels[o]] / max(abs(c), min_heading_cos)) ** 2
                vel_var[o] = base + heading_sigma**2 * speed**2
            else:
                velocity[o, 0], velocity[o, 1] = vr * ux, vr * uy
                vel_var[o] = max(vr**2, 1.0) + 9.0
        if age[o] != 0.0 and np.isfinite(vel_var[o]):
            center[o, 0] += velocity[o, 0] * age[o]
            center[o, 1] += velocity[o, 1] * age[o]
            age[o] = 0.0


@jit
def radar_groups(pos: F64, cov: F64, sensor: IP, score: F64, gate: float, group: IP) -> None:
    """The same object seen by several radars: in score order, each radar object still heading its own
    group takes into it every weaker (or equal) object of another radar within the Mahalanobis ``gate``
    (covariances of both) that heads its own group. ``group[i]`` is the index of ``i``'s head."""
    m = pos.shape[0]
    for i in range(m):
        group[i] = i
    for a in np.argsort(-score, kind="mergesort"):
        if group[a] != a:
            continue
        for b in range(m):
            if b == a or group[b] != b or score[b] > score[a] or sensor[b] == sensor[a]:
                continue
            d2 = mahalanobis2(
                pos[a, 0] - pos[b, 0],
                pos[a, 1] - pos[b, 1],
                cov[a, 0, 0] + cov[b, 0, 0],
                cov[a, 0, 1] + cov[b, 0, 1],
                cov[a, 1, 1] + cov[b, 1, 1],
            )
            if d2 <= gate:
                group[b] = a


@jit
def camera_candidates(
    ci: IP,
    boxes: F64,
    labels: IP,
    ext: F64,
    k: F64,
    k_inv: F64,
    image_height: F64,
    rel: F64,
    class_sizes: F64,
    pixel_sigma: float,
    height_sigma: float,
    max_depth: float,
    obj_center: F64,
    obj_size: F64,
    obj_yaw: F64,
    obj_cov: F64,
    absorb_gate: float,
    keep: B,
    center: F64,
    size: F64,
    yaw: F64,
    cov: F64,
) -> None:
    """3D candidates from unmatched camera detections (step 5 of :mod:`._fuser`).

    Per detection of camera ``ci``: the ray through the box's bottom centre (``K^-1``, extrinsic
    ``ext [C,4,4]``) meets the ground at a depth whose error grows with the pixel noise; the class's
    typical height over the box height gives a second depth; the two are fused by inverse variance.
    The candidate's centre is set back from the ground point by the class size along the ray, its
    covariance is long along the ray, and it is moved to the frame time by ``rel [C,4,4]``.
    ``keep`` is false where neither depth exists, the range is out of ``(0.5, max_depth]``, or the
    candidate lies within ``absorb_gate`` (Mahalanobis, to the nearest point of the box) of an object.
    """
    for i in range(ci.shape[0]):
        keep[i] = False
        c = ci[i]
        x1, y1, x2, y2 = boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3]
        u, v = 0.5 * (x1 + x2), y2
        r = np.empty(3)
        for j in range(3):
            r[j] = k_inv[c, j, 0] * u + k_inv[c, j, 1] * v + k_inv[c, j, 2]
        d = np.empty(3)  # base_link(t_s) ray through the bottom centre
        for j in range(3):
            d[j] = ext[c, j, 0] * r[0] + ext[c, j, 1] * r[1] + ext[c, j, 2] * r[2]
        fx, fy = k[c, 0, 0], k[c, 1, 1]
        bottom_ok, top_ok = y2 < image_height[c] - 1.0, y1 > 1.0
        lam_g = np.nan
        if bottom_ok and d[2] < -1e-9:
            lam = (0.0 - ext[c, 2, 3]) / d[2]
            lam_g = lam if lam > 0 else np.nan
        # d(lam)/d(v): the ground-plane range error of one pixel of box-bottom error, plus 0.1 m of road
        sig_g = math.hypot(lam_g / d[2] * (ext[c, 2, 1] / fy) * pixel_sigma, 0.1 / d[2])
        lab = labels[i]
        h_px = y2 - y1
        lam_h = fy * class_sizes[lab, 2] / h_px if bottom_ok and top_ok else np.nan
        sig_h = lam_h * math.hypot(height_sigma, math.sqrt(2) * pixel_sigma / h_px)
        w_g = 1.0 / sig_g**2 if np.isfinite(lam_g) and np.isfinite(sig_g) else 0.0
        w_h = 1.0 / (sig_h if np.isfinite(sig_h) else 1.0) ** 2 if np.isfinite(lam_h) else 0.0
        w = w_g + w_h
        if not w > 0:
            continue
        lam = (w_g * (lam_g if np.isfinite(lam_g) else 0.0) + w_h * (lam_h if np.isfinite(lam_h) else 0.0)) / w
        nxy = max(math.hypot(d[0], d[1]), 1e-9)
        ground_range = lam * nxy
        if not (ground_range > 0.5 and ground_range <= max_depth):
            continue
        hx, hy = d[0] / nxy, d[1] / nxy
        length, width, height = class_sizes[lab, 0], class_sizes[lab, 1], class_sizes[lab, 2]
        extent = _support(length, width, 1.0, 0.0, hx, hy)  # the box faces along x
        p = (ext[c, 0, 3] + lam * d[0] + extent * hx, ext[c, 1, 3] + lam * d[1] + extent * hy, 0.5 * height)
        va = math.hypot(1.0 / math.sqrt(w) * nxy, 0.3 * extent) ** 2
        vc = (ground_range * pixel_sigma / fx + 0.2) ** 2
        c00, c11, c01 = _along(hx, hy, va, vc)
        for j in range(3):  # base_link(t_f) <- base_link(t_s)
            center[i, j] = rel[c, j, 0] * p[0] + rel[c, j, 1] * p[1] + rel[c, j, 2] * p[2] + rel[c, j, 3]
        size[i, 0], size[i, 1], size[i, 2] = length, width, height
        yaw[i] = math.atan2(rel[c, 1, 0], rel[c, 0, 0])
        r00, r01, r10, r11 = rel[c, 0, 0], rel[c, 0, 1], rel[c, 1, 0], rel[c, 1, 1]
        a00, a01 = r00 * c00 + r01 * c01, r00 * c01 + r01 * c11  # (R C)
        a10, a11 = r10 * c00 + r11 * c01, r10 * c01 + r11 * c11
        cov[i, 0, 0], cov[i, 0, 1] = a00 * r00 + a01 * r01, a00 * r10 + a01 * r11  # (R C) R^T
        cov[i, 1, 0], cov[i, 1, 1] = a10 * r00 + a11 * r01, a10 * r10 + a11 * r11
        # a candidate whose (long, along-the-ray) uncertainty covers an object is that object
        absorbed = False
        for o in range(obj_center.shape[0]):
            ex, ey = _off_box(
                center[i, 0] - obj_center[o, 0],
                center[i, 1] - obj_center[o, 1],
                math.cos(obj_yaw[o]),
                math.sin(obj_yaw[o]),
                obj_size[o, 0],
                obj_size[o, 1],
            )
            d2 = mahalanobis2(
                ex,
                ey,
                obj_cov[o, 0, 0] + cov[i, 0, 0],
                obj_cov[o, 0, 1] + cov[i, 0, 1],
                obj_cov[o, 1, 1] + cov[i, 1, 1],
            )
            if d2 <= absorb_gate:
                absorbed = True
                break
        keep[i] = not absorbed


@jit
def radar_only(
    pos: F64,
    vel: F64,
    full: B,
    score: F64,
    cov: F64,
    los: F64,
    rcs: F64,
    returns: F64,
    radial: F64,
    group: IP,
    class_sizes: F64,
    velocity_sigma: F64,
    labels: IP,
    truck_rcs: float,
    truck_returns: float,
    car_rcs: float,
    flip_speed: float,
    surface_factor: float,
    score_factor: float,
    slot: IP,
    o_center: F64,
    o_size: F64,
    o_yaw: F64,
    o_velocity: F64,
    o_vel_var: F64,
    o_vel_full: B,
    o_radial: F64,
    o_cov: F64,
    o_score: F64,
    o_label: IP,
) -> int:
    """Radar-only objects, one per group of radar objects (``group[i]``: the head of ``i``, see
    :func:`radar_groups`), in the order of their heads; returns their number and writes ``slot[i]`` (the
    object of radar object ``i``) and the objects' fields.

    Velocity: mean of the group's full velocities (none: unknown). Class: truck when the strongest RCS
    reaches ``truck_rcs`` or the group's returns (summed over its radar objects) reach ``truck_returns``
    (0: off), car when the strongest RCS reaches ``car_rcs`` (``labels`` = truck, car, cyclist,
    pedestrian indices), else cyclist if moving faster than 3 m/s, else pedestrian; size from the class;
    heading along the velocity when it is faster than ``flip_speed``. The centre is set back from the
    head's point along its line of sight by ``surface_factor`` of the half-extent, with the head's
    covariance widened along it.
    """
    m, n = group.shape[0], 0
    for i in range(m):
        if group[i] == i:
            slot[i] = n
            n += 1
    for i in range(m):
        slot[i] = slot[group[i]]
    wsum, vx, vy = np.zeros(n), np.zeros(n), np.zeros(n)
    strength = np.full(n, -np.inf)
    count = np.zeros(n)
    for i in range(m):
        k = slot[i]
        count[k] += returns[i]
        if full[i]:
            wsum[k] += 1.0
            vx[k] += vel[i, 0]
            vy[k] += vel[i, 1]
        strength[k] = max(strength[k], rcs[i])
    for i in range(m):
        if group[i] != i:
            continue
        k = slot[i]
        has_full = wsum[k] > 0
        w = max(wsum[k], 1.0)
        ux, uy = (vx[k] / w, vy[k] / w) if has_full else (0.0, 0.0)
        speed = math.hypot(ux, uy)
        if strength[k] >= truck_rcs or (truck_returns > 0 and count[k] >= truck_returns):
            lab = labels[0]
        elif strength[k] >= car_rcs:
            lab = labels[1]
        elif has_full and speed > 3.0:
            lab = labels[2]
        else:
            lab = labels[3]
        yaw = math.atan2(uy, ux) if has_full and speed > flip_speed else 0.0
        length, width, height = class_sizes[lab, 0], class_sizes[lab, 1], class_sizes[lab, 2]
        lx, ly = los[i, 0], los[i, 1]
        c, s = math.cos(yaw), math.sin(yaw)
        extent = surface_factor * _support(length, width, c, s, lx, ly)
        o_center[k, 0], o_center[k, 1], o_center[k, 2] = pos[i, 0] + extent * lx, pos[i, 1] + extent * ly, 0.5 * height
        o_size[k, 0], o_size[k, 1], o_size[k, 2] = length, width, height
        o_yaw[k] = yaw
        o_velocity[k, 0], o_velocity[k, 1] = ux, uy
        o_vel_var[k] = velocity_sigma[lab] ** 2 / w if has_full else np.inf
        o_vel_full[k] = has_full
        o_radial[k, 0], o_radial[k, 1], o_radial[k, 2] = radial[i, 0], radial[i, 1], radial[i, 2]
        c00, c11, c01 = _along(lx, ly, (0.3 * extent + 0.1) ** 2, 0.1**2)
        o_cov[k, 0, 0], o_cov[k, 1, 1] = cov[i, 0, 0] + c00, cov[i, 1, 1] + c11
        o_cov[k, 0, 1], o_cov[k, 1, 0] = cov[i, 0, 1] + c01, cov[i, 1, 0] + c01
        o_score[k] = score_factor * score[i]
        o_label[k] = lab
    return n


@jit
def radar_to_frame(
    positions: F64,
    velocity: F64,
    vr: F64,
    radar: IP,
    mats: F64,
    dts: F64,
    sensors: IP,
    range_sigma: float,
    azimuth_sigma: float,
    lateral_floor: float,
    sensor: IP,
    pos: F64,
    vel: F64,
    full: B,
    los: F64,
    cov: F64,
    radial: F64,
) -> None:
    """Radar objects (radar ``radar[i]``: ``mats [R,4,4]`` is base_link(t_f) <- radar(t_s), ``dts`` the
    time to propagate over) into base_link at the frame time: position, velocity (full where both
    components are finite, else the radial speed along the line of sight), propagated over ``dts``;
    unit line of sight ``los``, covariance tight along it (``range_sigma``) and ``azimuth_sigma * range``
    (at least ``lateral_floor``) across; ``radial = (vr, los)``."""
    for i in range(positions.shape[0]):
        r = radar[i]
        m = mats[r]
        sensor[i] = sensors[r]
        px, py, pz = positions[i, 0], positions[i, 1], positions[i, 2]
        rx = px * m[0, 0] + py * m[0, 1] + pz * m[0, 2]
        ry = px * m[1, 0] + py * m[1, 1] + pz * m[1, 2]
        full[i] = np.isfinite(velocity[i, 0]) and np.isfinite(velocity[i, 1])
        rng = math.hypot(rx, ry)
        ux, uy = rx / max(rng, 1e-6), ry / max(rng, 1e-6)
        if full[i]:
            vx = velocity[i, 0] * m[0, 0] + velocity[i, 1] * m[0, 1]
            vy = velocity[i, 0] * m[1, 0] + velocity[i, 1] * m[1, 1]
        else:
            vx, vy = vr[i] * ux, vr[i] * uy
        pos[i, 0], pos[i, 1] = rx + m[0, 3] + vx * dts[r], ry + m[1, 3] + vy * dts[r]
        vel[i, 0], vel[i, 1] = vx, vy
        los[i, 0], los[i, 1] = ux, uy
        c00, c11, c01 = _along(ux, uy, range_sigma**2, math.hypot(azimuth_sigma * rng, lateral_floor) ** 2)
        cov[i, 0, 0], cov[i, 1, 1], cov[i, 0, 1], cov[i, 1, 0] = c00, c11, c01, c01
        radial[i, 0], radial[i, 1], radial[i, 2] = vr[i], ux, uy


def warm_up() -> None:
    """Compile (or load from the on-disk cache) every kernel for the types fusion calls it with."""
    h = np.ones((1, 8, 3))
    boxes = np.zeros((1, 4))
    project(h, np.ones((1, 8)), np.ones((1, 2)), 0.1, boxes, np.zeros(1, bool), np.zeros(1), np.zeros(1))
    occlusion(boxes, np.zeros(1), np.ones(1, bool), np.zeros(1, np.intp), np.zeros(1))
    box_iou(boxes, boxes, np.zeros((1, 1)))
    f1, b1, i1, f2, f3, c1 = (
        np.ones(1),
        np.ones(1, np.bool_),
        np.zeros(1, np.intp),
        np.zeros((1, 2)),
        np.ones((1, 3)),
        np.ones((1, 2, 2)),
    )
    attach_radar(
        f3, f3.copy(), f1, c1.copy(), i1, f1.copy(), np.zeros((1, 1), np.bool_), f2, f1.copy(), b1, f3.copy(),
        f2.copy(), c1, f2.copy(), b1.copy(), f1.copy(), f1.copy(), f3.copy(), f2.copy(), i1.copy(), b1.copy(),
        9.0, 0.5, 0.1, 1, f1.copy(), f1.copy(), f1.copy(), 0.5, True,
    )  # fmt: skip
    i2, f4, d2 = np.zeros(2, np.intp), np.ones((1, 4)), np.zeros((2, 1))
    camera_pairs(
        f3.copy(), f3.copy(), f1.copy(), f2.copy(), f1.copy(), b1.copy(), np.eye(4)[None], np.ones((1, 4, 3)),
        np.ones((1, 4)), np.ones((1, 2)), f1.copy(), f4, i1.copy(), 1.0, 0.5, 0.5, 1.0, 1.0, 0.5,
        i2, i2.copy(), np.zeros((2, 4)), np.zeros(2, np.bool_), np.zeros(2, np.bool_), d2, d2 > 0,
    )  # fmt: skip
    rect_iou(np.ones((1, 5)), np.ones((1, 5)), f1.copy())
    eye = np.eye(4)[None]
    camera_candidates(
        i1.copy(), f4.copy(), i1.copy(), eye, np.eye(3)[None], np.eye(3)[None], f1.copy(), eye.copy(), f3.copy(),
        3.0, 0.15, 80.0, f3.copy(), f3.copy(), f1.copy(), c1.copy(), 5.99,
        b1.copy(), f3.copy(), f3.copy(), f1.copy(), c1.copy(),
    )  # fmt: skip
    finish_velocity(
        f3.copy(), f3.copy(), f1.copy(), i1.copy(), f2.copy(), f1.copy(), b1.copy(), f3.copy(), f1.copy(),
        f1.copy(), 0.5, 40.0, 0.1,
    )  # fmt: skip
    radar_groups(f2.copy(), c1.copy(), i1.copy(), f1.copy(), 9.0, i1.copy())
    radar_to_frame(
        f3.copy(), f2.copy(), f1.copy(), i1.copy(), np.eye(4)[None], f1.copy(), i1.copy(), 0.5, 0.03, 0.2,
        i1.copy(), f2.copy(), f2.copy(), b1.copy(), f2.copy(), c1.copy(), f3.copy(),
    )  # fmt: skip
    radar_only(
        f2.copy(), f2.copy(), b1.copy(), f1.copy(), c1.copy(), f2.copy(), f1.copy(), f1.copy(), f3.copy(),
        i1.copy(), f3.copy(), f1.copy(), np.zeros(4, np.intp), 10.0, 0.0, 0.0, 0.5, 0.75, 0.5,
        i1.copy(), f3.copy(), f3.copy(), f1.copy(), f2.copy(), f1.copy(), b1.copy(), f3.copy(), c1.copy(),
        f1.copy(), i1.copy(),
    )  # fmt: skip
    nms_pairs(f3.copy(), f3.copy(), f1.copy(), f1.copy(), i1.copy(), i1.copy(), b1.copy(), b1.copy())
    nms_suppress(i1.copy(), i1.copy(), b1.copy(), f1.copy(), b1.copy())
    camera_evidence(
        i1.copy(), i1.copy(), i1.copy(), i1.copy(), b1.copy(), np.zeros((1, 1)), i1.copy(), f1.copy(), i1.copy(),
        1, 0.3, 0.8, 0.5, 0.75, 0.2, f1.copy(), np.zeros((1, 4)), np.zeros((1, 1), np.bool_), b1.copy(),
    )  # fmt: skip
