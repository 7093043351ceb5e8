"""Association primitives: Hungarian assignment of whole or sparse problems."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy.optimize import linear_sum_assignment

__all__ = [
    "assign",
    "assign_pairs",
]

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]
IP = npt.NDArray[np.intp]

_BIG = 1e9


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
