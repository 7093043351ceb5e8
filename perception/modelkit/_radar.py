"""Reference radar detector: clutter rejection, position+Doppler clustering, per-object velocity.

Input rows are ``x, y, z, radial_velocity, rcs`` in the radar's sensor frame (extra columns are
ignored); ``radial_velocity`` is ego-motion compensated (m/s, positive = moving away), ``rcs`` in dBsm.

Pipeline::

    sanitize          drop non-finite rows, crop range, drop returns weaker than ``min_rcs``
    cluster_radar     DBSCAN in position with a Doppler-compatibility test: returns of one object are
                      close in space *and* their radial velocities agree up to what one rigid object's
                      motion explains, so two objects side by side with different speeds separate.
                      Noise points (no dense neighbourhood) are clutter, except single returns strong
                      enough (``single_min_rcs``) to be an object on their own.
    per cluster       position = RCS-weighted (linear power) mean; radial velocity = mean;
                      RCS = total power (dB of the sum of linear powers); score from count and power;
                      over-ground velocity = least squares of ``v . u_i = vr_i`` (u_i the horizontal
                      unit line of sight of return i, v = (vx, vy)).

Velocity policy: the least-squares velocity is reported only when its predicted 1-sigma error
(``sigma * sqrt(max eig((A^T A)^-1))``, see :func:`fit_velocity`) is at most ``max_velocity_std``;
otherwise ``VELOCITY`` is NaN, as the contract requires where the azimuth spread among the returns is
too small. We deliberately do *not* substitute the radial-only guess
``vr * u``: it is wrong for every object not moving along the line of sight, and ``RADIAL_VELOCITY``
already carries that information for consumers that want it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

__all__ = [
    "RadarDetections",
    "RadarParams",
    "cluster_radar",
    "detect_radar",
    "fit_velocity",
    "sanitize_radar",
    "split_by_motion",
]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class RadarParams:
    """Tunables of :func:`detect_radar`."""

    min_range: float = 0.5
    max_range: float = 120.0
    min_rcs: float = -20.0  # dBsm; weaker returns are clutter
    eps_position: float = 2.5  # m: DBSCAN radius in position...
    eps_velocity: float = 1.0  # ...and Doppler difference (m/s) of returns on the same line of sight
    max_speed: float = 15.0  # m/s: fastest object assumed when comparing returns' Doppler (see cluster_radar)
    min_samples: int = 2  # DBSCAN core: at least this many returns within the radius (self included)
    single_min_rcs: float = 10.0  # dBsm; an isolated return this strong is still an object
    velocity_sigma: float = 0.15  # m/s, Doppler noise floor used for the velocity error prediction
    azimuth_sigma: float = 0.03  # rad, azimuth noise (incl. scatter over the object) for the same
    max_velocity_std: float = 0.5  # m/s; predicted velocity error above this -> NaN
    min_score: float = 0.05


@dataclass(frozen=True, slots=True)
class RadarDetections:
    """Output of :func:`detect_radar`, shaped as the ``radar_detector`` contract."""

    positions: F32  # [M,3]
    radial_velocity: F32  # [M]
    velocity: F32  # [M,2], NaN where unobservable
    rcs: F32  # [M]
    scores: F32  # [M]

    @staticmethod
    def empty() -> RadarDetections:
        return RadarDetections(
            np.zeros((0, 3), np.float32),
            np.zeros((0,), np.float32),
            np.zeros((0, 2), np.float32),
            np.zeros((0,), np.float32),
            np.zeros((0,), np.float32),
        )

    def __len__(self) -> int:
        return int(self.scores.shape[0])


def _noop(_stage: str) -> None:
    return None


def sanitize_radar(points: npt.NDArray[np.floating[Any]], params: RadarParams | None = None) -> F64:
    """Finite ``[N,5]`` rows (x, y, z, vr, rcs) in range and above the RCS floor, as float64."""
    p = params or RadarParams()
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] < 5:
        raise ValueError(f"radar points must be [N,>=5], got shape {list(pts.shape)}")
    pts = pts[:, :5]
    if pts.shape[0] == 0:
        return pts
    ok = np.isfinite(pts).all(axis=1)
    rng = np.linalg.norm(np.where(ok[:, None], pts[:, :3], 0.0), axis=1)
    ok &= (rng >= p.min_range) & (rng <= p.max_range) & (pts[:, 4] >= p.min_rcs)
    out: F64 = pts[ok]
    return out


def cluster_radar(rows: F64, params: RadarParams | None = None) -> tuple[I64, int]:
    """DBSCAN of ``[N,>=5]`` rows in position and Doppler. Returns ``(labels, count)``, -1 = noise.

    Two returns are neighbours when they are within ``eps_position`` (x, y) and their Doppler difference
    can come from one rigid object: ``|vr_i - vr_j| <= eps_velocity + max_speed * |u_i - u_j|`` (the
    lines of sight ``u`` of a wide, close object differ, and so do its returns' radial velocities).
    """
    p = params or RadarParams()
    n = rows.shape[0]
    if n == 0:
        return np.zeros((0,), np.int64), 0
    pairs = cKDTree(rows[:, :2]).query_pairs(p.eps_position, output_type="ndarray").reshape(-1, 2)
    u = rows[:, :3] / np.maximum(np.linalg.norm(rows[:, :3], axis=1, keepdims=True), 1e-9)
    du = np.linalg.norm(u[pairs[:, 0], :2] - u[pairs[:, 1], :2], axis=1)
    dv = np.abs(rows[pairs[:, 0], 3] - rows[pairs[:, 1], 3])
    pairs = pairs[dv <= p.eps_velocity + p.max_speed * du]
    degree = np.bincount(pairs.ravel(), minlength=n) + 1  # self included
    core = degree >= p.min_samples
    labels = np.full(n, -1, np.int64)
    if not core.any():
        return labels, 0
    cc = pairs[core[pairs[:, 0]] & core[pairs[:, 1]]]
    graph = coo_matrix((np.ones(cc.shape[0]), (cc[:, 0], cc[:, 1])), shape=(n, n))
    _, comp = connected_components(graph, directed=False)
    core_idx = np.flatnonzero(core)
    _, dense = np.unique(comp[core_idx], return_inverse=True)
    labels[core_idx] = dense
    # Border points join the cluster of (one of) their core neighbours.
    for i, j in ((0, 1), (1, 0)):
        take = ~core[pairs[:, i]] & core[pairs[:, j]]
        labels[pairs[take, i]] = labels[pairs[take, j]]
    return labels, int(dense.max()) + 1


def fit_velocity(rows: F64, params: RadarParams | None = None) -> tuple[F64, float]:
    """Least-squares over-ground ``(vx, vy)`` of one object's returns and its predicted 1-sigma error.

    Solves ``[cos az_i, sin az_i] v = vr_i`` over the returns' azimuths ``az_i``. Only azimuth is used:
    automotive radar elevation is too coarse to help, and for returns near the sensor's height the
    horizontal line of sight is exact to a fraction of a percent.

    The predicted error is ``sigma / sqrt(smallest eigenvalue of A^T A)`` (the worst direction), with
    ``sigma`` the largest of the Doppler noise floor, the fit's residual, and the error an azimuth error
    of ``azimuth_sigma`` causes on the projection of the estimated speed (doubled for two returns, whose
    fit cannot be checked). Returns that disagree with the fit by more than four times the noise are
    dropped and the fit repeated while at least three remain. NaNs and ``inf`` when there are fewer
    than two returns or their directions are (nearly) parallel.
    """
    p = params or RadarParams()
    nan = np.full(2, np.nan)
    if rows.shape[0] < 2:
        return nan, math.inf
    az = np.arctan2(rows[:, 1], rows[:, 0])
    a_all = np.column_stack([np.cos(az), np.sin(az)])
    vr_all = rows[:, 3]
    inlier = np.ones(rows.shape[0], dtype=bool)
    for _ in range(3):
        a, vr = a_all[inlier], vr_all[inlier]
        ata = a.T @ a
        eig = np.linalg.eigvalsh(ata)
        if eig[0] <= 1e-9 * max(eig[1], 1e-12):
            return nan, math.inf
        v = np.linalg.solve(ata, a.T @ vr)
        model_sigma = math.hypot(p.velocity_sigma, p.azimuth_sigma * float(np.hypot(*v)))
        # Returns that disagree with the fit far beyond the noise (multipath ghosts, a neighbour's
        # return) are dropped and the fit repeated, as long as it stays over-determined.
        keep = np.abs(a_all @ v - vr_all) <= max(4.0 * model_sigma, 0.5)
        if keep.sum() < 3 or np.array_equal(keep, inlier):
            break
        inlier = keep
    dof = int(inlier.sum()) - 2
    resid = float(np.sqrt(np.sum((a @ v - vr) ** 2) / dof)) if dof > 0 else 0.0
    sigma = max(model_sigma, resid)
    std = sigma / math.sqrt(float(eig[0]))
    if dof <= 0:  # exactly determined: no check of the fit at all
        std *= 2.0
    return v, std


def split_by_motion(rows: F64, idx: I64, params: RadarParams | None = None) -> list[I64]:
    """Split one cluster's returns (``rows[idx]``) into groups that each move as one rigid object.

    Two objects close together (a pedestrian passing a parked car) can end up in one spatial cluster;
    one least-squares velocity for both is wrong for both. If at least half of the returns read ~0 m/s
    (within two Doppler sigmas), they are one static group and the rest is split on its own.
    Otherwise every pair of returns gives a velocity hypothesis; the one explaining the most returns
    keeps its inliers; the rest, if at least two returns, is split again. Doppler alone cannot always
    tell two motions from one: a static car and a pedestrian beside it can also be fitted, by accident,
    by one fast motion at an angle to both (hence the static test first). Returns groups of indices
    into ``rows``; lone leftovers are dropped.
    """
    p = params or RadarParams()
    if idx.shape[0] < 4:
        return [idx]
    # Most returns in a street are static (parked cars, scenery): if most of the cluster reads
    # ~0 m/s, the static returns are one group and the others another, whatever else might fit both.
    static = np.abs(rows[idx, 3]) <= 2.0 * p.velocity_sigma
    if static.sum() >= max(2, idx.shape[0] // 2) and (~static).sum() >= 2:
        return [idx[static], *split_by_motion(rows, idx[~static], p)]
    az = np.arctan2(rows[idx, 1], rows[idx, 0])
    a = np.column_stack([np.cos(az), np.sin(az)])
    vr = rows[idx, 3]
    i, j = np.triu_indices(idx.shape[0], k=1)
    det = a[i, 0] * a[j, 1] - a[i, 1] * a[j, 0]
    ok = np.abs(det) > 0.02  # lines of sight at least ~1 degree apart
    if not ok.any():
        return [idx]
    i, j, det = i[ok], j[ok], det[ok]
    # Cramer's rule for every pair: v = A_ij^-1 [vr_i, vr_j].
    vx = (vr[i] * a[j, 1] - vr[j] * a[i, 1]) / det
    vy = (a[i, 0] * vr[j] - a[j, 0] * vr[i]) / det
    resid = np.abs(a @ np.stack([vx, vy]) - vr[:, None])  # [n, pairs]
    tol = max(3.0 * p.velocity_sigma, 0.3)  # fixed: a speed-scaled tolerance would favour fast hypotheses
    inliers = resid <= tol
    count = inliers.sum(axis=0)
    best = int(np.argmax(count - 1e-3 * np.minimum(resid, tol).sum(axis=0)))
    keep = inliers[:, best]
    if (~keep).sum() < 2:
        return [idx]
    return [idx[keep], *split_by_motion(rows, idx[~keep], p)]


def detect_radar(
    points: npt.NDArray[np.floating[Any]],
    params: RadarParams | None = None,
    checkpoint: Callable[[str], None] = _noop,
) -> RadarDetections:
    """Run the whole radar pipeline on ``[N,>=5]`` sensor-frame rows (see the module docstring)."""
    p = params or RadarParams()
    rows = sanitize_radar(points, p)
    checkpoint("sanitize")
    if rows.shape[0] == 0:
        return RadarDetections.empty()
    labels, count = cluster_radar(rows, p)
    checkpoint("cluster")
    groups: list[I64] = []
    for k in range(count):
        groups.extend(split_by_motion(rows, np.flatnonzero(labels == k), p))
    strong = np.flatnonzero((labels < 0) & (rows[:, 4] >= p.single_min_rcs))
    groups.extend(strong[:, None])
    out_pos, out_vr, out_v, out_rcs, out_score = [], [], [], [], []
    for idx in groups:
        members = rows[idx]
        power = np.power(10.0, members[:, 4] / 10.0)
        pos = (members[:, :3] * power[:, None]).sum(axis=0) / power.sum()
        total_db = 10.0 * math.log10(float(power.sum()))
        v, std = fit_velocity(members, p)
        if not std <= p.max_velocity_std:
            v = np.full(2, np.nan)
        n = members.shape[0]
        score = (1.0 - math.exp(-n / 2.5)) / (1.0 + math.exp(-(total_db - 0.0) / 4.0))
        if score < p.min_score:
            continue
        out_pos.append(pos)
        out_vr.append(float(members[:, 3].mean()))
        out_v.append(v)
        out_rcs.append(total_db)
        out_score.append(score)
    checkpoint("objects")
    if not out_pos:
        return RadarDetections.empty()
    return RadarDetections(
        np.asarray(out_pos, np.float32).reshape(-1, 3),
        np.asarray(out_vr, np.float32),
        np.asarray(out_v, np.float32).reshape(-1, 2),
        np.asarray(out_rcs, np.float32),
        np.asarray(out_score, np.float32),
    )
