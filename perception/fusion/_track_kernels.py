"""Compiled loops of the tracker (numba): prediction, association candidates, Kalman update, births and
output, each one pass over the tracks or the (track, detection) pairs.

The tracker runs once per frame on tens of tracks, where a numpy call costs 1-5 us whatever the array
size: as whole-array operations its step took ~300 calls (~0.7 ms). Here each stage is one call of a
loop compiled by numba (pattern and caching as in :mod:`._kernels`). The callers are the
:class:`~perception.fusion._tracker.Tracker` methods, which pass C-contiguous arrays of fixed dtypes
(float64, int64/intp ids and labels, int8 origins, bool masks) so each kernel has one specialization,
and preallocate the outputs.

The state is one table row per track (columns below, float64; ids and counts are exact integers) with
a ``[T,4,4]`` covariance of ``[x, y, vx, vy]`` and a ``[T,S]`` sources mask. Detections are given in the
tracker's world frame: centre ``z [D,3]``, BEV covariance ``r [D,2,2]``, ``age [D]`` (s; the position
is that of ``age`` before the frame time), ``labels [D]``.

Two motion models run side by side on every track: the constant-velocity Kalman filter (state and
covariance above) and a standing-still one, a position-only Kalman filter (columns :data:`STILL_XY` and
:data:`STILL_P`) whose position moves only by a small random walk. Each keeps the discounted sum of its
squared prediction errors (the detection's offset from what the model predicted, under the detection's
own covariance; a radar velocity, under its variance, against the model's velocity, zero for the
standing-still one), each term at most the association gate, so that one stray measurement (a clutter
return attached to a moving truck) cannot outweigh the frames before it. A track is *still*
(:data:`STILL`) while the standing-still model's sum is at most the moving one's plus a margin: its
position, covariance and (zero) velocity are then the standing-still model's for association, coasting
and output. A parked car measured through a jittering box fit is so averaged over frames instead of
drifting with a velocity learnt from the jitter, and a car that moves is predicted by its velocity as
soon as its detections leave the standing-still model behind. The constant-velocity filter is updated
either way, so its velocity is ready.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from perception.fusion._kernels import jit
from perception.types import LABELS

__all__ = [
    "ERR_MOVING",
    "ERR_STILL",
    "HAS_BOX",
    "HITS",
    "ID",
    "MISSES",
    "NCOL",
    "SCORE",
    "SIZE",
    "STILL",
    "STILL_P",
    "STILL_XY",
    "VOTES",
    "YAW",
    "YOUNG_HITS",
    "Z",
    "birth_rows",
    "candidates",
    "face_velocity",
    "new_detections",
    "predict",
    "to_world",
    "track_rows",
    "update",
    "warm_up",
]

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]
IP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]

# Columns of the track table: 0-3 the Kalman state x, y, vx, vy (world), then
Z = 4  # height of the centre
SIZE = 5  # 5, 6, 7: length, width, height
YAW = 8
SCORE = 9
HITS = 10
MISSES = 11
HAS_BOX = 12  # 1.0 once a lidar box gave the track its size and heading
ID = 13
STILL_XY = 14  # 14, 15: the standing-still model's position x, y
STILL_P = 16  # 16, 17, 18: its covariance xx, xy, yy
ERR_STILL = 19  # discounted squared prediction errors of the standing-still model...
ERR_MOVING = 20  # ...and of the constant-velocity one
STILL = 21  # 1.0 while the track is taken to stand still (see the module docstring)
VOTES = 22  # class evidence, one column per label
NCOL = VOTES + len(LABELS)
_LIDAR = 0  # Origin.LIDAR
#: A track with fewer hits has not been judged on its detections yet: it may also take a detection the
#: constant-velocity model predicts (:meth:`~perception.fusion._tracker.Tracker._associate`), and its
#: velocity is that model's even while it is taken to stand still.
YOUNG_HITS = 3

#: Columns of the output rows of :func:`track_rows` (and of the untracked output): score, centre (3),
#: size (3), yaw, velocity (2), x and y position std-dev (2).
OUT_COLS = 12


@jit
def _wrap(a: float) -> float:
    """``a`` wrapped to ``[-pi, pi)`` (the scalar :func:`._geometry.wrap_angle`)."""
    return (a + np.pi) % (2 * np.pi) - np.pi


@jit
def _fold_pi(a: float) -> float:
    """``a`` folded to ``[-pi/2, pi/2)`` (orientation of an axis)."""
    return (a + np.pi / 2) % np.pi - np.pi / 2


@jit
def _faced(yaw: float, vx: float, vy: float, min_speed: float) -> float:
    """``yaw`` wrapped, and turned by pi when it points against a velocity faster than ``min_speed``."""
    flip = math.cos(yaw) * vx + math.sin(yaw) * vy < 0 and math.hypot(vx, vy) > min_speed
    return _wrap(yaw + (np.pi if flip else 0.0))


@jit
def _label(table: F64, t: int) -> int:
    """Label of track ``t``: its strongest class evidence (the first on a tie, as ``argmax``)."""
    best = 0
    for k in range(1, NCOL - VOTES):
        if table[t, VOTES + k] > table[t, VOTES + best]:
            best = k
    return best


@jit
def _mahalanobis2(dx: float, dy: float, a: float, b: float, d: float) -> float:
    """:func:`._kernels.mahalanobis2`, repeated on purpose: numba's disk cache notices changes to a
    kernel's own module only, so a jitted helper imported from another module could go stale in it."""
    return (d * dx * dx - 2 * b * dx * dy + a * dy * dy) / max(a * d - b * b, 1e-12)


@jit
def _distance(table: F64, p: F64, z: F64, r: F64, age: F64, t: int, d: int, either: bool) -> tuple[float, float]:
    """Detection ``d`` against track ``t``: the squared BEV distance and squared Mahalanobis distance
    (under the position covariance plus ``r``) of the detection from the track's position as its motion
    model predicts it: the constant-velocity one (the detection moved by the track velocity over its
    age) or, for a still track, the standing-still one (not moved). With ``either``, the nearer of the
    two models' (for a still track that starts to move)."""
    is_still = table[t, STILL] != 0.0
    sx, sy, still = 0.0, 0.0, math.inf
    if is_still:
        sx, sy = z[d, 0] - table[t, STILL_XY], z[d, 1] - table[t, STILL_XY + 1]
        a, b, c = table[t, STILL_P], table[t, STILL_P + 1], table[t, STILL_P + 2]
        still = _mahalanobis2(sx, sy, a + r[d, 0, 0], b + r[d, 0, 1], c + r[d, 1, 1])
        if not either:  # the second model is asked for only with ``either``
            return sx * sx + sy * sy, still
    dx = z[d, 0] + age[d] * table[t, 2] - table[t, 0]
    dy = z[d, 1] + age[d] * table[t, 3] - table[t, 1]
    moving = _mahalanobis2(dx, dy, p[t, 0, 0] + r[d, 0, 0], p[t, 0, 1] + r[d, 0, 1], p[t, 1, 1] + r[d, 1, 1])
    if is_still and still <= moving:
        return sx * sx + sy * sy, still
    return dx * dx + dy * dy, moving


@jit
def _position_cov(table: F64, p: F64, t: int) -> tuple[float, float, float]:
    """``xx, xy, yy`` of track ``t``'s position covariance (a still track: the standing-still model's)."""
    if table[t, STILL] != 0.0:
        return table[t, STILL_P], table[t, STILL_P + 1], table[t, STILL_P + 2]
    return p[t, 0, 0], p[t, 0, 1], p[t, 1, 1]


@jit
def _judge(table: F64, t: int, margin: F64) -> None:
    """Track ``t`` stands still while its standing-still model's error sum is within ``margin[label]`` of
    the moving one's (a margin of -inf: never)."""
    table[t, STILL] = 1.0 if table[t, ERR_STILL] <= table[t, ERR_MOVING] + margin[_label(table, t)] else 0.0


@jit
def to_world(center: F64, cov: F64, w: F64, z: F64, r: F64) -> None:
    """Detections into the world frame by the rigid transform ``w [4,4]``: ``z = R c + t`` and the BEV
    covariance ``r = R2 C R2^T``."""
    for i in range(center.shape[0]):
        for k in range(3):
            z[i, k] = w[k, 0] * center[i, 0] + w[k, 1] * center[i, 1] + w[k, 2] * center[i, 2] + w[k, 3]
        for k in range(2):
            for m in range(2):
                acc = 0.0
                for a in range(2):
                    for b in range(2):
                        acc += w[k, a] * cov[i, a, b] * w[m, b]
                r[i, k, m] = acc


@jit
def predict(table: F64, p: F64, dt: float, accel_var: F64, still_var: float, keep: float) -> None:
    """Constant-velocity prediction of every track over ``dt``: ``x += dt v``, ``P = F P F^T + q Q`` with
    white-noise acceleration of variance ``q = accel_var[label]``; the standing-still model's position
    variance grows by ``still_var * dt``; both models' error sums are multiplied by ``keep``."""
    f = np.eye(4)
    f[0, 2] = f[1, 3] = dt
    q = np.zeros((4, 4))  # per unit variance
    q[0, 0] = q[1, 1] = dt**4 / 4
    q[2, 2] = q[3, 3] = dt**2
    q[0, 2] = q[2, 0] = q[1, 3] = q[3, 1] = dt**3 / 2
    fp = np.empty((4, 4))
    for t in range(table.shape[0]):
        table[t, 0] += dt * table[t, 2]
        table[t, 1] += dt * table[t, 3]
        for i in range(4):
            for j in range(4):
                fp[i, j] = f[i, 0] * p[t, 0, j] + f[i, 1] * p[t, 1, j] + f[i, 2] * p[t, 2, j] + f[i, 3] * p[t, 3, j]
        var = accel_var[_label(table, t)]
        for i in range(4):
            for j in range(4):
                fpf = fp[i, 0] * f[j, 0] + fp[i, 1] * f[j, 1] + fp[i, 2] * f[j, 2] + fp[i, 3] * f[j, 3]
                p[t, i, j] = fpf + var * q[i, j]
        table[t, STILL_P] += still_var * dt
        table[t, STILL_P + 2] += still_var * dt
        table[t, ERR_STILL] *= keep
        table[t, ERR_MOVING] *= keep


@jit
def candidates(
    table: F64,
    p: F64,
    z: F64,
    r: F64,
    age: F64,
    labels: IP,
    max_distance2: float,
    gate: float,
    label_penalty: float,
    either: bool,
    ti: IP,
    di: IP,
    cost: F64,
) -> int:
    """Association candidates, track-major (row-major) like ``nonzero``: the pairs whose offset from the
    track's predicted position (:func:`_distance`, with ``either``) is within ``sqrt(max_distance2)`` and
    whose squared Mahalanobis distance under ``P_pos + R`` is within ``gate``; writes their track ``ti``,
    detection ``di`` and ``cost`` (that distance plus ``label_penalty`` when the labels differ); returns
    their count."""
    n = 0
    for t in range(table.shape[0]):
        label = _label(table, t)
        for d in range(z.shape[0]):
            dist2, d2 = _distance(table, p, z, r, age, t, d, either)
            if dist2 > max_distance2:
                continue
            if d2 <= gate:
                ti[n], di[n] = t, d
                cost[n] = d2 + (label_penalty if label != labels[d] else 0.0)
                n += 1
    return n


@jit
def _scalar_update(x: F64, p: F64, ph: F64, hph: float, hx: float, z: float, var: float) -> None:
    """Kalman update of state ``x [4]`` and covariance ``p [4,4]`` with the scalar measurement
    ``z = h . x`` of variance ``var``, given ``ph = P h``, ``hph = h . P h`` and ``hx = h . x``."""
    s = hph + var
    for i in range(4):
        k = ph[i] / s
        x[i] += k * (z - hx)
        for j in range(4):
            p[i, j] -= k * ph[j]


@jit
def _still_update(table: F64, t: int, ex: float, ey: float, r00: float, r01: float, r11: float) -> None:
    """Kalman update of track ``t``'s standing-still position by the offset ``(ex, ey)`` of a detection of
    covariance ``r``: ``s += K e``, ``P -= K P`` with ``K = P (P + R)^-1``."""
    a, b, c = table[t, STILL_P], table[t, STILL_P + 1], table[t, STILL_P + 2]
    s00, s01, s11 = a + r00, b + r01, c + r11
    det = max(s00 * s11 - s01 * s01, 1e-12)
    i00, i01, i11 = s11 / det, -s01 / det, s00 / det
    k00, k01 = a * i00 + b * i01, a * i01 + b * i11  # K = P S^-1 (P and S symmetric)
    k10, k11 = b * i00 + c * i01, b * i01 + c * i11
    table[t, STILL_XY] += k00 * ex + k01 * ey
    table[t, STILL_XY + 1] += k10 * ex + k11 * ey
    table[t, STILL_P] = a - (k00 * a + k01 * b)
    xy = b - (k00 * b + k01 * c)
    yx = b - (k10 * a + k11 * b)
    table[t, STILL_P + 1] = 0.5 * (xy + yx)
    table[t, STILL_P + 2] = c - (k10 * b + k11 * c)


@jit
def update(
    table: F64,
    p: F64,
    sources: B,
    ti: IP,
    di: IP,
    z: F64,
    r: F64,
    age: F64,
    labels: IP,
    velocity: F64,
    vel_var: F64,
    vel_full: B,
    radial: F64,
    size: F64,
    yaw: F64,
    score: F64,
    votes: F64,
    det_sources: B,
    origin: I8,
    w2: F64,
    ego_yaw: float,
    radial_var: F64,
    alpha: F64,
    score_alpha: float,
    vote_decay: float,
    min_hits: int,
    max_misses: int,
    margin: F64,
    cap: float,
    alive: B,
) -> int:
    """The tracks after this frame's association: every track coasts (one more miss, class evidence
    times ``vote_decay``, no sources), then each matched pair ``(ti[i], di[i])`` updates its track.

    Kalman update with the detection position (moved by the track velocity over its age) under ``r``; then
    with a full velocity (``vel_full``; rotated into the world by ``w2 [2,2]``) as two scalar measurements
    vx, vy of variance ``vel_var`` (its noise is isotropic, so this equals the 2D update), or with a finite
    radial velocity ``radial = (vr, ux, uy)`` as the scalar ``vr = u . v`` of variance
    ``radial_var[label]``; ``P`` is symmetrized. The standing-still model: a Kalman update of its position
    with the detection's (not moved: it stands still); each model's error sum grows by the squared
    Mahalanobis distance, under ``r``, of the detection from what it predicted, and by that of a measured
    velocity from its own (zero for the standing-still one), each term at most ``cap``; then the track is
    judged still or not (``margin[label]``, see the module docstring). Attributes: score smoothed by
    ``score_alpha``, class evidence added, hits counted; height, size and yaw (from ``yaw + ego_yaw``,
    folded to an axis) moved toward the detection's by the weights ``alpha[2 * (track has no box) +
    (detection is a lidar box)]``.
    Finally ``alive``: false for a tentative track (fewer than ``min_hits`` hits) on its first miss and
    for a confirmed one after ``max_misses``; returns the number of dead tracks.
    """
    for t in range(table.shape[0]):
        table[t, MISSES] += 1
        for k in range(VOTES, NCOL):
            table[t, k] *= vote_decay
        sources[t, :] = False
    x, ph = np.empty(4), np.empty(4)
    pt, kp = np.empty((4, 4)), np.empty((4, 4))
    gain = np.empty((4, 2))
    for i in range(ti.shape[0]):
        t, d = ti[i], di[i]
        x[:] = table[t, :4]
        pt[:, :] = p[t]
        # position: x += K e, P -= K P[:2] with the gain K = P[:, :2] S^-1, S = P_pos + R (a singular S gets
        # a tiny ridge) and e the detection's offset
        s00, s01, s10, s11 = pt[0, 0] + r[d, 0, 0], pt[0, 1] + r[d, 0, 1], pt[1, 0] + r[d, 1, 0], pt[1, 1] + r[d, 1, 1]
        det = s00 * s11 - s01 * s10
        if abs(det) < 1e-12:
            det = 1e-12
        i00, i01, i10, i11 = s11 / det, -s10 / det, -s01 / det, s00 / det
        ex = z[d, 0] + age[d] * x[2] - x[0]
        ey = z[d, 1] + age[d] * x[3] - x[1]
        sx, sy = z[d, 0] - table[t, STILL_XY], z[d, 1] - table[t, STILL_XY + 1]
        table[t, ERR_MOVING] += min(_mahalanobis2(ex, ey, r[d, 0, 0], r[d, 0, 1], r[d, 1, 1]), cap)
        table[t, ERR_STILL] += min(_mahalanobis2(sx, sy, r[d, 0, 0], r[d, 0, 1], r[d, 1, 1]), cap)
        _still_update(table, t, sx, sy, r[d, 0, 0], r[d, 0, 1], r[d, 1, 1])
        for a in range(4):
            gain[a, 0] = pt[a, 0] * i00 + pt[a, 1] * i10
            gain[a, 1] = pt[a, 0] * i01 + pt[a, 1] * i11
            x[a] += gain[a, 0] * ex + gain[a, 1] * ey
            for b in range(4):
                kp[a, b] = gain[a, 0] * pt[0, b] + gain[a, 1] * pt[1, b]
        pt -= kp
        # velocity
        if vel_full[d]:
            v = (
                w2[0, 0] * velocity[d, 0] + w2[0, 1] * velocity[d, 1],
                w2[1, 0] * velocity[d, 0] + w2[1, 1] * velocity[d, 1],
            )
            table[t, ERR_MOVING] += min(((v[0] - x[2]) ** 2 + (v[1] - x[3]) ** 2) / vel_var[d], cap)
            table[t, ERR_STILL] += min((v[0] ** 2 + v[1] ** 2) / vel_var[d], cap)
            for j in range(2, 4):  # h = e_j: P h is a column of P, h . x a component of x
                ph[:] = pt[:, j]
                _scalar_update(x, pt, ph, ph[j], x[j], v[j - 2], vel_var[d])
        elif math.isfinite(radial[d, 0]):  # the track's own direction resolves the rest of the velocity
            ux = w2[0, 0] * radial[d, 1] + w2[0, 1] * radial[d, 2]
            uy = w2[1, 0] * radial[d, 1] + w2[1, 1] * radial[d, 2]
            for a in range(4):
                ph[a] = pt[a, 2] * ux + pt[a, 3] * uy
            var = radial_var[labels[d]]
            table[t, ERR_MOVING] += min((radial[d, 0] - x[2] * ux - x[3] * uy) ** 2 / var, cap)
            table[t, ERR_STILL] += min(radial[d, 0] ** 2 / var, cap)
            _scalar_update(
                x, pt, ph, ph[2] * ux + ph[3] * uy, x[2] * ux + x[3] * uy, radial[d, 0], radial_var[labels[d]]
            )
        table[t, :4] = x
        for a in range(4):
            for b in range(4):
                p[t, a, b] = 0.5 * (pt[a, b] + pt[b, a])
        _judge(table, t, margin)
        # attributes
        table[t, SCORE] += score_alpha * (score[d] - table[t, SCORE])
        for k in range(VOTES, NCOL):
            table[t, k] += votes[d, k - VOTES]
        table[t, HITS] += 1
        table[t, MISSES] = 0
        lidar = origin[d] == _LIDAR
        row = 2 * (table[t, HAS_BOX] == 0.0) + lidar
        table[t, Z] += alpha[row, 0] * (z[d, 2] - table[t, Z])
        for k in range(3):
            table[t, SIZE + k] += alpha[row, 1] * (size[d, k] - table[t, SIZE + k])
        table[t, YAW] = _wrap(table[t, YAW] + alpha[row, 2] * _fold_pi(yaw[d] + ego_yaw - table[t, YAW]))
        if lidar:
            table[t, HAS_BOX] = 1.0
        sources[t, :] = det_sources[d, :]
    dead = 0
    for t in range(table.shape[0]):
        alive[t] = table[t, MISSES] <= (max_misses if table[t, HITS] >= min_hits else 0)
        dead += not alive[t]
    return dead


@jit
def new_detections(table: F64, p: F64, z: F64, r: F64, age: F64, origin: I8, matched: IP, gate: float, new: B) -> int:
    """``new [D]``: the detections that start tracks, i.e. those not ``matched`` except a camera- or
    radar-only one within the ``gate`` (squared Mahalanobis distance, as in :func:`candidates`) of some
    track (a duplicate of it); returns their count."""
    new[:] = True
    for i in range(matched.shape[0]):
        new[matched[i]] = False
    count = 0
    for d in range(z.shape[0]):
        if new[d] and origin[d] != _LIDAR:
            for t in range(table.shape[0]):
                if _distance(table, p, z, r, age, t, d, False)[1] <= gate:
                    new[d] = False
                    break
        count += new[d]
    return count


@jit
def birth_rows(
    idx: IP,
    z: F64,
    r: F64,
    age: F64,
    labels: IP,
    velocity: F64,
    vel_var: F64,
    size: F64,
    yaw: F64,
    score: F64,
    votes: F64,
    origin: I8,
    w2: F64,
    ego_yaw: float,
    init_speed_var: F64,
    first_id: int,
    margin: F64,
    cap: float,
    rows: F64,
    p: F64,
) -> None:
    """Table ``rows [M,NCOL]`` and covariances ``p [M,4,4]`` of new tracks from detections ``idx``: the
    position moved along the detection's velocity (if known, rotated into the world by ``w2``) over
    its age, position covariance ``r``, velocity variance ``vel_var`` or, when unknown,
    ``init_speed_var[label]``; one hit; ids from ``first_id`` on. The standing-still model starts at the
    detection's position (not moved) with covariance ``r``; a measured velocity counts against it as in
    :func:`update` (at most ``cap``), and the track is judged still or not (``margin[label]``)."""
    rows[:, :] = 0.0
    p[:, :, :] = 0.0
    for m in range(idx.shape[0]):
        d = idx[m]
        if math.isfinite(vel_var[d]):
            rows[m, 2] = w2[0, 0] * velocity[d, 0] + w2[0, 1] * velocity[d, 1]
            rows[m, 3] = w2[1, 0] * velocity[d, 0] + w2[1, 1] * velocity[d, 1]
            p[m, 2, 2] = p[m, 3, 3] = vel_var[d]
            rows[m, ERR_STILL] = min((velocity[d, 0] ** 2 + velocity[d, 1] ** 2) / vel_var[d], cap)
        else:
            p[m, 2, 2] = p[m, 3, 3] = init_speed_var[labels[d]]
        rows[m, 0] = z[d, 0] + age[d] * rows[m, 2]
        rows[m, 1] = z[d, 1] + age[d] * rows[m, 3]
        rows[m, Z] = z[d, 2]
        for k in range(3):
            rows[m, SIZE + k] = size[d, k]
        rows[m, YAW] = _wrap(yaw[d] + ego_yaw)
        rows[m, SCORE] = score[d]
        rows[m, HITS] = 1.0
        rows[m, HAS_BOX] = 1.0 if origin[d] == _LIDAR else 0.0
        rows[m, ID] = first_id + m
        for k in range(VOTES, NCOL):
            rows[m, k] = votes[d, k - VOTES]
        p[m, :2, :2] = r[d]
        rows[m, STILL_XY], rows[m, STILL_XY + 1] = z[d, 0], z[d, 1]
        rows[m, STILL_P], rows[m, STILL_P + 1], rows[m, STILL_P + 2] = r[d, 0, 0], r[d, 0, 1], r[d, 1, 1]
        _judge(rows, m, margin)


@jit
def track_rows(
    table: F64,
    p: F64,
    w: F64,
    ego_yaw: float,
    min_hits: int,
    emit_tentative: bool,
    tentative_factor: float,
    coast_decay: float,
    threshold: float,
    flip_speed: float,
    idx: IP,
    ints: I64,
    out: F64,
) -> int:
    """The tracks to emit, in ``base_link`` (world -> base_link by the inverse of ``w [4,4]``): every
    confirmed one (``min_hits``) and, with ``emit_tentative``, every tentative one observed this frame,
    whose score (smoothed score, times ``tentative_factor`` if tentative, times ``coast_decay`` per
    miss) reaches ``threshold``. Writes their track index ``idx``, ``ints`` (id, label) and ``out``
    (:data:`OUT_COLS`: score, centre, size, yaw turned to face a velocity above ``flip_speed``,
    velocity, x/y position std-dev; a still track's position and covariance are its standing-still
    model's, its velocity zero once it is no longer young, :data:`YOUNG_HITS`); returns their count."""
    m = 0
    for t in range(table.shape[0]):
        confirmed = table[t, HITS] >= min_hits
        score = table[t, SCORE] * (1.0 if confirmed else tentative_factor) * coast_decay ** table[t, MISSES]
        show = (confirmed or table[t, MISSES] == 0) if emit_tentative else confirmed
        if not (show and score >= threshold):
            continue
        idx[m] = t
        ints[m, 0], ints[m, 1] = int(table[t, ID]), _label(table, t)
        out[m, 0] = score
        still = table[t, STILL] != 0.0
        px, py = (table[t, STILL_XY], table[t, STILL_XY + 1]) if still else (table[t, 0], table[t, 1])
        for j in range(3):  # R^T (p - t)
            out[m, 1 + j] = (px - w[0, 3]) * w[0, j] + (py - w[1, 3]) * w[1, j] + (table[t, Z] - w[2, 3]) * w[2, j]
            out[m, 4 + j] = table[t, SIZE + j]
        wvx, wvy = (0.0, 0.0) if still and table[t, HITS] >= YOUNG_HITS else (table[t, 2], table[t, 3])
        vx = wvx * w[0, 0] + wvy * w[1, 0]
        vy = wvx * w[0, 1] + wvy * w[1, 1]
        out[m, 7] = _faced(table[t, YAW] - ego_yaw, vx, vy, flip_speed)
        out[m, 8], out[m, 9] = vx, vy
        c00, c01, c11 = _position_cov(table, p, t)
        for j in range(2):  # diagonal of R2^T P_pos R2
            var = c00 * w[0, j] * w[0, j] + 2.0 * c01 * w[0, j] * w[1, j] + c11 * w[1, j] * w[1, j]
            out[m, 10 + j] = math.sqrt(max(var, 0.0))
        m += 1
    return m


@jit
def face_velocity(yaw: F64, velocity: F64, min_speed: float, out: F64) -> None:
    """``out [N]``: yaws wrapped, and turned by pi where they point against a velocity ``[N,2]`` faster
    than ``min_speed``."""
    for i in range(yaw.shape[0]):
        out[i] = _faced(yaw[i], velocity[i, 0], velocity[i, 1], min_speed)


def warm_up() -> None:
    """Compile (or load from the on-disk cache) every kernel for the types the tracker calls it with."""
    f1, f2, f3 = np.zeros(1), np.zeros((1, 2)), np.zeros((1, 3))
    cov, b1, i1, o1 = np.eye(2)[None].copy(), np.ones(1, bool), np.zeros(1, np.intp), np.zeros(1, np.int8)
    table, p, w, sources = np.zeros((1, NCOL)), np.eye(4)[None].copy(), np.eye(4), np.zeros((1, 1), bool)
    votes, alpha = np.zeros((1, len(LABELS))), np.ones((4, 3))
    to_world(f3, cov, w, np.zeros((1, 3)), np.zeros((1, 2, 2)))
    predict(table, p, 0.1, np.ones(len(LABELS)), 0.01, 0.9)
    candidates(table, p, f3, cov, f1, i1, 1.0, 1.0, 1.0, False, i1.copy(), i1.copy(), f1.copy())
    update(
        table, p, sources, i1, i1, f3, cov, f1, i1, f2, f1, b1, f3, f3, f1, f1, votes, sources.copy(), o1,
        w[:2, :2].copy(), 0.0, np.ones(len(LABELS)), alpha, 0.5, 0.5, 1, 1, np.ones(len(LABELS)), 1.0, b1.copy(),
    )  # fmt: skip
    new_detections(table, p, f3, cov, f1, o1, i1, 1.0, b1.copy())
    birth_rows(i1, f3, cov, f1, i1, f2, f1, f3, f1, f1, votes, o1, w[:2, :2].copy(), 0.0, np.ones(len(LABELS)), 1,
               np.ones(len(LABELS)), 1.0, np.zeros((1, NCOL)), np.zeros((1, 4, 4)))  # fmt: skip
    track_rows(
        table, p, w, 0.0, 1, True, 0.5, 0.5, 0.0, 1.0, i1.copy(), np.zeros((1, 2), np.int64), np.zeros((1, OUT_COLS))
    )
    face_velocity(f1, f2, 1.0, f1.copy())
