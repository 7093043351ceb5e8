"""Reference radar detector: clutter rejection, position+Doppler clustering, per-object velocity.

Input rows are ``x, y, z, radial_velocity, rcs`` in the radar's sensor frame (extra columns are
ignored); ``radial_velocity`` is ego-motion compensated (m/s, positive = moving away), ``rcs`` in dBsm.
The compensation is the sender's job (the radar or its driver knows the ego motion at the scan; the
model does not): a static return reads ~0 m/s, and everything below relies on that.

Pipeline::

    sanitize          drop non-finite rows, crop range, drop returns weaker than ``min_rcs``
    cluster_radar     DBSCAN with a neighbourhood shaped like the radar's errors: ``eps_position``
                      along the line of sight, growing with range across it (``eps_azimuth``: azimuth
                      noise scatters a far object's returns sideways by metres), plus a Doppler-
                      compatibility test (returns of one object agree up to what one rigid motion
                      explains), so two objects side by side with different speeds separate.
    split_by_motion   a cluster whose returns need two rigid motions (a walker beside a parked car)
                      is split into one group per motion.
    isolated returns  a return without a dense neighbourhood is clutter unless it is an object on its
                      own: strong (``single_min_rcs``), or moving (``|vr| >= single_min_speed``; static
                      clutter reads ~0 m/s after ego-motion compensation). Far or small movers (a
                      pedestrian at 30 m) often give exactly one return, so dropping those would lose
                      most of them. Their score is low; multipath ghosts with a spurious Doppler can
                      pass this test, which one scan cannot tell from a real mover (tracking can).
    per group         position = RCS-weighted (linear power) mean; RCS = total power (dB of the sum of
                      linear powers); score from count and power; velocity: :func:`fit_velocity`;
                      the number of returns (fusion reads an object's size class from it).

Velocity policy. Each return measures ``vr_i = v . u_i`` (``u_i`` its horizontal line of sight, ``v``
the object's over-ground velocity). :func:`fit_velocity` solves for ``v`` by weighted least squares
with a weak prior on the component across the object's line of sight (``max_speed``), so

* ``RADIAL_VELOCITY`` is always the estimated ``v . u`` along the line of sight of the reported
  position (for one return: its Doppler; for several: consistent with where the position is, which a
  plain mean of the Doppler values is not when the returns span some azimuth);
* ``VELOCITY`` is the full ``(vx, vy)`` only where the returns' azimuth spread determines it: its
  predicted 1-sigma error (worst direction) must be at most ``max_velocity_std``; otherwise NaN, as
  the contract requires. We deliberately do *not* substitute the radial-only guess ``vr * u``: it is
  wrong for every object not moving along the line of sight.
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
    "radial_velocity",
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
    eps_position: float = 2.5  # m: DBSCAN radius along the line of sight (and its floor across it)...
    eps_azimuth: float = 0.08  # rad: ...across it the radius is hypot(eps_position, range * eps_azimuth)
    eps_velocity: float = 1.0  # m/s: Doppler difference of returns of one object on the same line of sight
    max_speed: float = 15.0  # m/s: fastest object assumed when comparing returns' Doppler (see cluster_radar)
    min_samples: int = 2  # DBSCAN core: at least this many returns within the radius (self included)
    single_min_rcs: float = 10.0  # dBsm; an isolated return this strong is still an object
    single_min_speed: float = 0.75  # m/s; an isolated return moving this fast is an object (clutter reads ~0)
    velocity_sigma: float = 0.15  # m/s, Doppler noise floor (incl. micro-Doppler) of one return
    azimuth_sigma: float = 0.03  # rad, azimuth noise of one return...
    lateral_sigma: float = 0.5  # m ...plus this scatter across the line of sight over the object
    max_velocity_std: float = 0.5  # m/s; predicted over-ground velocity error above this -> NaN
    min_score: float = 0.05
    single_static_range: float = 0.0  # m; isolated static returns nearer than this are objects too (0 = never)
    static_prior: float = 0.75  # share of static returns on objects near the sensor (see _prior)...
    static_prior_range: float = 25.0  # ...halved at this range...
    static_prior_width: float = 6.0  # ...falling off over this many metres
    moving_prior: float = 0.65  # share of moving returns on objects
    use_priors: float = 0.0  # 1 = score by the measured priors (real radars), 0 = by count and power


@dataclass(frozen=True, slots=True)
class RadarDetections:
    """Output of :func:`detect_radar`, shaped as the ``radar_detector`` contract."""

    positions: F32  # [M,3]
    radial_velocity: F32  # [M]
    velocity: F32  # [M,2], NaN where unobservable
    rcs: F32  # [M]
    scores: F32  # [M]
    returns: npt.NDArray[np.int32]  # [M] returns each object was formed from

    @staticmethod
    def empty() -> RadarDetections:
        return RadarDetections(
            np.zeros((0, 3), np.float32),
            np.zeros((0,), np.float32),
            np.zeros((0, 2), np.float32),
            np.zeros((0,), np.float32),
            np.zeros((0,), np.float32),
            np.zeros((0,), np.int32),
        )

    def __len__(self) -> int:
        return int(self.scores.shape[0])


_NOISE_PRIOR_DOF = 4.0  # weight of the assumed noise model against a fit's residual (fit_velocity)
#: Velocity hypotheses (pairs of returns) split_by_motion tries in a cluster at most: all of them up to ~64
#: returns; beyond, this many spread evenly (memory n x MAX_PAIRS, not cubic in n).
MAX_PAIRS = 2048


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

    Two returns are neighbours when

    * their horizontal offset lies in an ellipse about the line of sight of their midpoint: semi-axis
      ``eps_position`` along it, ``hypot(eps_position, range * eps_azimuth)`` across it (range is
      measured well, azimuth badly: a far object's returns scatter sideways by metres); and
    * their Doppler difference can come from one rigid object:
      ``|vr_i - vr_j| <= eps_velocity + max_speed * |u_i - u_j|`` (the lines of sight ``u`` of a wide,
      close object differ, and so do its returns' radial velocities).
    """
    p = params or RadarParams()
    n = rows.shape[0]
    if n == 0:
        return np.zeros((0,), np.int64), 0
    xy = rows[:, :2]
    reach = math.hypot(p.eps_position, float(np.hypot(xy[:, 0], xy[:, 1]).max()) * p.eps_azimuth)
    pairs = cKDTree(xy).query_pairs(reach, output_type="ndarray").reshape(-1, 2)
    a, b = pairs[:, 0], pairs[:, 1]
    mid = 0.5 * (xy[a] + xy[b])
    mid_range = np.maximum(np.hypot(mid[:, 0], mid[:, 1]), 1e-9)
    los = mid / mid_range[:, None]
    d = xy[a] - xy[b]
    along = d[:, 0] * los[:, 0] + d[:, 1] * los[:, 1]
    across = d[:, 1] * los[:, 0] - d[:, 0] * los[:, 1]
    across_eps = np.hypot(p.eps_position, mid_range * p.eps_azimuth)
    near = (along / p.eps_position) ** 2 + (across / across_eps) ** 2 <= 1.0
    u = rows[:, :3] / np.maximum(np.linalg.norm(rows[:, :3], axis=1, keepdims=True), 1e-9)
    du = np.linalg.norm(u[a, :2] - u[b, :2], axis=1)
    dv = np.abs(rows[a, 3] - rows[b, 3])
    pairs = pairs[near & (dv <= p.eps_velocity + p.max_speed * du)]
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


def _azimuth_sigma(rows: F64, p: RadarParams) -> F64:
    """Per-return azimuth uncertainty (rad): sensor noise and the scatter over the object's extent."""
    rng = np.maximum(np.hypot(rows[:, 0], rows[:, 1]), 1.0)
    out: F64 = np.hypot(p.azimuth_sigma, p.lateral_sigma / rng)
    return out


def fit_velocity(rows: F64, params: RadarParams | None = None) -> tuple[F64, float]:
    """Least-squares over-ground ``(vx, vy)`` of one object's returns and its predicted 1-sigma error.

    Solves ``[cos az_i, sin az_i] v = vr_i`` over the returns' azimuths ``az_i``, weighted by each
    return's expected error ``sigma_i = hypot(velocity_sigma, |v| * azimuth_sigma_i)``: the azimuth is
    noisy, and an azimuth error ``d`` changes ``v . u_i`` by up to ``|v| d``. Only azimuth is used:
    automotive radar elevation is too coarse to help, and for returns near the sensor's height the
    horizontal line of sight is exact to a fraction of a percent.

    The predicted error is ``sqrt(largest eigenvalue of (A^T W A)^-1)`` (the worst direction),
    inflated by the fit's residual when that is larger than the noise model (reduced chi-square > 1)
    and doubled for exactly two returns, whose fit cannot be checked. Returns that disagree with the
    fit by more than four sigmas are dropped and the fit repeated while at least three remain. NaNs
    and ``inf`` when there are fewer than two returns or their directions are (nearly) parallel.
    """
    p = params or RadarParams()
    nan = np.full(2, np.nan)
    if rows.shape[0] < 2:
        return nan, math.inf
    az = np.arctan2(rows[:, 1], rows[:, 0])
    a_all = np.column_stack([np.cos(az), np.sin(az)])
    vr_all = rows[:, 3]
    az_sigma = _azimuth_sigma(rows, p)
    inlier = np.ones(rows.shape[0], dtype=bool)
    speed = 0.0  # first pass unweighted by the (unknown) speed
    for _ in range(4):
        used = inlier
        a, vr = a_all[used], vr_all[used]
        w = 1.0 / (p.velocity_sigma**2 + (speed * az_sigma[used]) ** 2)
        # the 2x2 normal equations A^T W A v = A^T W vr, in closed form
        wc, ws = w * a[:, 0], w * a[:, 1]
        sxx, sxy, syy = float(wc @ a[:, 0]), float(wc @ a[:, 1]), float(ws @ a[:, 1])
        bx, by = float(wc @ vr), float(ws @ vr)
        half_gap = math.hypot(0.5 * (sxx - syy), sxy)
        eig_min, eig_max = 0.5 * (sxx + syy) - half_gap, 0.5 * (sxx + syy) + half_gap
        if eig_min <= 1e-9 * max(eig_max, 1e-12):
            return nan, math.inf
        det = sxx * syy - sxy * sxy
        v = np.array([(syy * bx - sxy * by) / det, (sxx * by - sxy * bx) / det])
        new_speed = math.hypot(float(v[0]), float(v[1]))
        sigma_all = np.hypot(p.velocity_sigma, new_speed * az_sigma)
        # Returns that disagree with the fit far beyond the noise (multipath ghosts, a neighbour's
        # return) are dropped and the fit repeated, as long as it stays over-determined.
        keep = np.abs(a_all @ v - vr_all) <= np.maximum(4.0 * sigma_all, 0.5)
        if keep.sum() < 3:
            keep = used
        if np.array_equal(keep, used) and abs(new_speed - speed) <= 0.05 * max(new_speed, 1.0):
            break
        inlier, speed = keep, new_speed
    dof = int(used.sum()) - 2
    chi2 = float(np.sum(w * (a @ v - vr) ** 2))
    # Noise scale: the assumed noise model pooled with what the residual says (the model counts as
    # NOISE_PRIOR_DOF returns' worth), so many well-fitting returns may show the sensor does better
    # than assumed, and a bad fit widens the error; exactly determined fits cannot be checked at all.
    scale = (_NOISE_PRIOR_DOF + chi2) / (_NOISE_PRIOR_DOF + dof) if dof > 0 else 4.0
    std = math.sqrt(scale / eig_min)
    return v, std


def radial_velocity(rows: F64, azimuth: float, params: RadarParams | None = None) -> float:
    """One object's radial velocity along the line of sight at ``azimuth`` (rad) from its returns.

    Each return reads ``vr_i = a cos(d_i) + b sin(d_i)`` with ``d_i = az_i - azimuth``, ``a`` the radial
    and ``b`` the cross-line-of-sight component of the object's velocity. Least squares for ``(a, b)``
    with a weak zero-mean prior on ``b`` (standard deviation ``max_speed``) gives ``a`` even when the
    returns' azimuth spread cannot determine ``b``: then ``a`` is the Doppler averaged over the returns
    and corrected by the little that their spread says about ``b``. One return: its Doppler.
    """
    p = params or RadarParams()
    d = np.arctan2(rows[:, 1], rows[:, 0]) - azimuth
    c, s = np.cos(d), np.sin(d)
    w = 1.0 / (p.velocity_sigma**2 + (p.max_speed * _azimuth_sigma(rows, p)) ** 2)
    vr = rows[:, 3]
    h = np.array(
        [[np.sum(w * c * c), np.sum(w * c * s)], [np.sum(w * c * s), np.sum(w * s * s) + 1.0 / p.max_speed**2]]
    )
    rhs = np.array([np.sum(w * c * vr), np.sum(w * s * vr)])
    return float(np.linalg.solve(h, rhs)[0])


def split_by_motion(rows: F64, idx: I64, params: RadarParams | None = None) -> list[I64]:
    """Split one cluster's returns (``rows[idx]``) into groups that each move as one rigid object.

    Two objects close together (a pedestrian passing a parked car) can end up in one spatial cluster;
    one least-squares velocity for both is wrong for both. If at least half of the returns read ~0 m/s
    (within two Doppler sigmas), they are one static group and the rest is split on its own.
    Otherwise every pair of returns gives a velocity hypothesis; the one explaining the most returns
    keeps its inliers; the rest, if at least two returns, is split again. Doppler alone cannot always
    tell two motions from one: a static car and a pedestrian beside it can also be fitted, by accident,
    by one fast motion at an angle to both (hence the static test first). At most :data:`MAX_PAIRS` pairs
    are tried (evenly spread over them): a cluster of n returns has n(n-1)/2, and scoring them all took memory
    and time cubic in n (1.7 GB, 6 s for 600 returns). Returns groups of indices into ``rows``; a single
    return left over stays in the group it disagrees with (too few to fit a motion of its own).
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
    if i.shape[0] > MAX_PAIRS:
        pick = np.linspace(0, i.shape[0] - 1, MAX_PAIRS).astype(np.intp)
        i, j, det = i[pick], j[pick], det[pick]
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


def _score(count: F64, rcs_db: F64) -> F64:
    """Confidence in [0, 1] of objects of ``count`` returns and total ``rcs_db``: more and stronger
    returns, more confidence (one return of a 0 dBsm target: ~0.16)."""
    out: F64 = (1.0 - np.exp(-count / 2.5)) / (1.0 + np.exp(-rcs_db / 4.0))
    return out


def _prior_score(rows: F64, p: RadarParams) -> F64:
    """Per return, the share of such returns that lie on a road user, as measured on real scans.

    Ego-compensated moving returns (``|vr| >= single_min_speed``) are on objects about
    ``moving_prior`` of the time; static ones near the sensor mostly are (parked cars give one or two
    returns each), far ones rarely (buildings, poles, guard rails): a logistic fall-off with range.
    """
    rng = np.hypot(rows[:, 0], rows[:, 1])
    static = p.static_prior / (1.0 + np.exp((rng - p.static_prior_range) / p.static_prior_width))
    out: F64 = np.where(np.abs(rows[:, 3]) >= p.single_min_speed, p.moving_prior, static)
    return out


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
    # Isolated returns: clutter, unless strong, or moving (static clutter reads ~0 m/s). Lone returns
    # (also those a split left alone) are objects of one return each: handled in one vectorised pass.
    rng = np.hypot(rows[:, 0], rows[:, 1])
    alone = (labels < 0) & (
        (rows[:, 4] >= p.single_min_rcs) | (np.abs(rows[:, 3]) >= p.single_min_speed) | (rng < p.single_static_range)
    )
    singles = [np.flatnonzero(alone), *(g for g in groups if g.shape[0] == 1)]
    single = rows[np.concatenate(singles)]
    single_score = _prior_score(single, p) if p.use_priors else _score(np.ones(single.shape[0]), single[:, 4])
    single = single[single_score >= p.min_score]
    out_pos, out_vr, out_v, out_rcs, out_score, out_returns = (
        [single[:, :3]], [single[:, 3]], [np.full((single.shape[0], 2), np.nan)], [single[:, 4]],
        [single_score[single_score >= p.min_score]], [np.ones(single.shape[0], np.int32)],
    )
    for idx in groups:
        if idx.shape[0] == 1:
            continue
        members = rows[idx]
        power = np.power(10.0, members[:, 4] / 10.0)
        total_db = 10.0 * math.log10(float(power.sum()))
        if p.use_priors:
            score = float(1.0 - np.prod(1.0 - _prior_score(members, p)) ** 0.5)  # returns are not independent
        else:
            score = float(_score(np.array([members.shape[0]]), np.array([total_db]))[0])
        if score < p.min_score:
            continue
        pos = (members[:, :3] * power[:, None]).sum(axis=0) / power.sum()
        azimuth = math.atan2(float(pos[1]), float(pos[0]))
        v, std = fit_velocity(members, p)
        if std <= p.max_velocity_std:
            vr = float(v[0] * math.cos(azimuth) + v[1] * math.sin(azimuth))
        else:
            v = np.full(2, np.nan)
            vr = radial_velocity(members, azimuth, p)
        out_pos.append(pos[None])
        out_vr.append(np.array([vr]))
        out_v.append(v[None])
        out_rcs.append(np.array([total_db]))
        out_score.append(np.array([score]))
        out_returns.append(np.array([idx.shape[0]], np.int32))
    checkpoint("objects")
    return RadarDetections(
        np.concatenate(out_pos).astype(np.float32).reshape(-1, 3),
        np.concatenate(out_vr).astype(np.float32),
        np.concatenate(out_v).astype(np.float32).reshape(-1, 2),
        np.concatenate(out_rcs).astype(np.float32),
        np.concatenate(out_score).astype(np.float32),
        np.concatenate(out_returns).astype(np.int32),
    )
