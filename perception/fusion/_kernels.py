"""Compiled loops for fusion's pairwise geometry (numba).

Fusion runs once per frame on tens of objects. At that size a numpy call costs 1-5 us whatever the
array size, so pairwise steps written as whole-array operations pay for their number of calls, not for
their arithmetic: projecting boxes into the cameras with near-plane clipping, their occlusion and the
IoU against the detections took ~50 calls and ~250 us a frame. Written as loops and compiled by numba
they take ~15 us. The functions here are the implementations behind :mod:`._geometry` and
:mod:`._associate`; callers use those (typed, validated) entry points.

Kernels are compiled on first use and cached on disk next to this module (``cache=True``), so only the
first process after an install pays the compile (a few seconds); :func:`warm_up` does it ahead of the
first frame (the :class:`~perception.fusion.Fuser` calls it when it is built).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
import numpy.typing as npt

__all__ = ["box_iou", "occlusion", "project", "warm_up"]

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]
IP = npt.NDArray[np.intp]
_F = TypeVar("_F", bound=Callable[..., Any])

#: The 12 edges of a box as corner index pairs (corner order of :func:`._geometry.box_corners`).
_EDGE_FROM = np.array([0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3], dtype=np.intp)
_EDGE_TO = np.array([1, 2, 3, 0, 5, 6, 7, 4, 4, 5, 6, 7], dtype=np.intp)


def _jit(func: _F) -> _F:
    # nogil: the runtime may fuse two in-flight frames from two worker threads
    return cast(_F, numba.njit(cache=True, nogil=True)(func))


@_jit
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


@_jit
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


@_jit
def box_iou(a: F64, b: F64, out: F64) -> None:
    """``out [N,M]``: IoU of image boxes ``a [N,4]`` and ``b [M,4]`` (``x1, y1, x2, y2``)."""
    for i in range(a.shape[0]):
        ax1, ay1, ax2, ay2 = a[i, 0], a[i, 1], a[i, 2], a[i, 3]
        area_a = max(ax2 - ax1, 0.0) * max(ay2 - ay1, 0.0)
        for j in range(b.shape[0]):
            w = min(ax2, b[j, 2]) - max(ax1, b[j, 0])
            hgt = min(ay2, b[j, 3]) - max(ay1, b[j, 1])
            inter = max(w, 0.0) * max(hgt, 0.0)
            union = area_a + max(b[j, 2] - b[j, 0], 0.0) * max(b[j, 3] - b[j, 1], 0.0) - inter
            out[i, j] = inter / union if union > 0.0 else 0.0


def warm_up() -> None:
    """Compile (or load from the on-disk cache) every kernel for the types fusion calls it with."""
    h = np.ones((1, 8, 3))
    boxes = np.zeros((1, 4))
    project(h, np.ones((1, 8)), np.ones((1, 2)), 0.1, boxes, np.zeros(1, bool), np.zeros(1), np.zeros(1))
    occlusion(boxes, np.zeros(1), np.ones(1, bool), np.zeros(1, np.intp), np.zeros(1))
    box_iou(boxes, boxes, np.zeros((1, 1)))
