"""Association primitives: Mahalanobis gating, Hungarian assignment, covariances along a direction."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy.optimize import linear_sum_assignment

__all__ = [
    "assign",
    "assign_pairs",
    "covariance_along",
    "mahalanobis2",
    "nearest_on_box",
]

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]
IP = npt.NDArray[np.intp]

_BIG = 1e9


def mahalanobis2(diff: F64, s: F64) -> F64:
    """Squared Mahalanobis distance of ``diff [..., 2]`` under covariance ``s [..., 2, 2]`` (a determinant
    below 1e-12 is taken as 1e-12)."""
    x, y = diff[..., 0], diff[..., 1]
    a, b, d = s[..., 0, 0], s[..., 0, 1], s[..., 1, 1]
    det = np.maximum(a * d - b * b, 1e-12)
    out: F64 = (d * x * x - 2 * b * x * y + a * y * y) / det
    return out


def covariance_along(direction: F64, sigma_along: F64 | float, sigma_across: F64 | float) -> F64:
    """``[K,2,2]`` covariances with std-devs ``sigma_along`` along unit ``direction [K,2]`` and across it
    (each ``[K]`` or one for all)."""
    ux, uy = direction[:, 0], direction[:, 1]
    va, vc = sigma_along**2, sigma_across**2
    out = np.empty((direction.shape[0], 2, 2))
    out[:, 0, 0] = va * ux * ux + vc * uy * uy
    out[:, 1, 1] = va * uy * uy + vc * ux * ux
    out[:, 0, 1] = out[:, 1, 0] = (va - vc) * ux * uy
    return out


def nearest_on_box(points: F64, center: F64, lw: F64, yaw: F64, *, pairwise: bool = True) -> F64:
    """The point of a BEV box nearest to a point (the point itself when inside).

    ``pairwise``: every point ``[K,2]`` against every box ``[N]`` -> ``[N,K,2]``; otherwise point ``i``
    against box ``i`` -> ``[N,2]``.
    """
    if pairwise:
        c, s = np.cos(yaw)[:, None], np.sin(yaw)[:, None]
        hl, hw = 0.5 * lw[:, None, 0], 0.5 * lw[:, None, 1]
        dx = points[None, :, 0] - center[:, None, 0]
        dy = points[None, :, 1] - center[:, None, 1]
        cx, cy = center[:, None, 0], center[:, None, 1]
    else:
        c, s = np.cos(yaw), np.sin(yaw)
        hl, hw = 0.5 * lw[:, 0], 0.5 * lw[:, 1]
        dx = points[:, 0] - center[:, 0]
        dy = points[:, 1] - center[:, 1]
        cx, cy = center[:, 0], center[:, 1]
    lx = np.minimum(np.maximum(c * dx + s * dy, -hl), hl)
    ly = np.minimum(np.maximum(c * dy - s * dx, -hw), hw)
    out: F64 = np.stack([cx + c * lx - s * ly, cy + s * lx + c * ly], axis=-1)
    return out


def assign(cost: F64, allowed: B) -> tuple[IP, IP]:
    """Minimum-cost one-to-one assignment restricted to ``allowed`` pairs (Hungarian).

    Rows and columns without any allowed pair are left out of the problem, so the matrix solved is only
    as large as the candidates; the result never contains a pair that is not allowed.
    """
    per_row = np.add.reduce(allowed, axis=1, dtype=np.intp)
    rows = per_row.nonzero()[0]
    if rows.size == 0:
        return np.zeros(0, np.intp), np.zeros(0, np.intp)
    per_col = np.add.reduce(allowed, axis=0, dtype=np.intp)
    if per_row.max() == 1 and per_col.max() == 1:  # no conflicts: every candidate pair is the answer
        r_idx, c_idx = allowed.nonzero()
        return r_idx, c_idx
    cols = per_col.nonzero()[0]
    sub = np.where(allowed[rows][:, cols], cost[rows][:, cols], _BIG)
    r, c = linear_sum_assignment(sub)
    ok = sub[r, c] < _BIG
    return rows[r[ok]], cols[c[ok]]


def assign_pairs(rows: IP, cols: IP, cost: F64, shape: tuple[int, int]) -> tuple[IP, IP]:
    """:func:`assign` for a sparse problem: the allowed pairs ``(rows[i], cols[i])`` (distinct, in
    row-major order, as :func:`numpy.nonzero` gives them) with their ``cost``; the same answer."""
    if rows.size == 0:
        return rows, cols
    per_row = np.bincount(rows, minlength=shape[0])
    per_col = np.bincount(cols, minlength=shape[1])
    if per_row.max() == 1 and per_col.max() == 1:  # no conflicts: every candidate pair is the answer
        return rows, cols
    # the sub-problem of the rows and columns that have a candidate, numbered in order
    row_of = np.cumsum(per_row > 0) - 1
    col_of = np.cumsum(per_col > 0) - 1
    sub = np.full((int(row_of[-1]) + 1, int(col_of[-1]) + 1), _BIG)
    sub[row_of[rows], col_of[cols]] = cost
    r, c = linear_sum_assignment(sub)
    ok = sub[r, c] < _BIG
    return per_row.nonzero()[0][r[ok]], per_col.nonzero()[0][c[ok]]
