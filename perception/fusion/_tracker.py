"""Multi-object tracker: constant-velocity Kalman filters in the world frame, Hungarian association.

State per track: ``[x, y, vx, vy]`` in the world frame (``map`` when ego poses are known, otherwise the
frame's ``base_link`` — then ego motion is not compensated), with covariance; plus smoothed height,
size, yaw (lidar boxes: yaw modulo pi, since a sweep cannot tell front from back), class evidence and
score. All filters are predicted and updated together as arrays.

Per frame:

1. predict every track to the frame time (white-noise acceleration, per-class sigma);
2. associate detections to tracks: squared Mahalanobis distance of the detection position (moved by
   the track velocity over the detection's ``age``) under ``P_pos + R``, plus a penalty when labels
   differ; pairs beyond the chi-square gate or ``track_max_distance`` are not allowed; Hungarian;
3. update matched tracks with the position, then with a full radar velocity (2D measurement, applied
   as two scalar ones: its noise is isotropic) or a radial radar velocity (scalar ``u . v``
   measurement: the track's own direction resolves the rest);
4. unmatched tracks coast (predicted state, decaying score); a tentative track (fewer than
   ``track_min_hits`` hits) dies on its first miss, a confirmed one after ``track_max_misses``;
5. unmatched detections start tentative tracks.

Output: every track observed this frame and every confirmed coasting track, in ``base_link`` at the
frame time, ``id`` = track id, ``sources`` = the sensors of this frame's detection (``()`` when
coasting), score = smoothed detection score times ``tentative_factor`` (unconfirmed) and
``track_coast_decay ** misses``. Frames older than the last one (out-of-order completion) are
answered read-only: detections take the id of the track they associate with, the state is untouched.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import numpy.typing as npt

from perception.config import FusionConfig
from perception.fusion._associate import assign_pairs, inv2, mahalanobis2, mahalanobis2_xy
from perception.fusion._geometry import wrap_angle
from perception.fusion._objects import Objects, Origin, SourceNames
from perception.fusion._params import FusionParams
from perception.types import LABELS, Detection3D

__all__ = ["Tracker", "detections_from_objects"]

log = logging.getLogger(__name__)

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]
I64 = npt.NDArray[np.int64]
_NUM_LABELS = len(LABELS)
_EYE4 = np.eye(4)
_EYE4.setflags(write=False)
_LIDAR = int(Origin.LIDAR)  # a plain int: cheap to compare with an int8 array


def _fold_pi(a: F64) -> F64:
    """Angles folded to ``[-pi/2, pi/2)`` (orientation of an axis)."""
    out: F64 = (a + np.pi / 2) % np.pi - np.pi / 2
    return out


def _face_velocity(yaw: F64, velocity: F64, min_speed: float) -> F64:
    """Yaws (any angle) wrapped, and turned by pi where they point against a velocity faster than
    ``min_speed``."""
    vx, vy = velocity[:, 0], velocity[:, 1]
    flip = (np.cos(yaw) * vx + np.sin(yaw) * vy < 0) & (np.hypot(vx, vy) > min_speed)
    return wrap_angle(yaw + np.pi * flip)  # adding pi * bool: one call, where np.where takes two


def _rotate_covariances(r: F64, cov: F64) -> F64:
    """``r @ cov @ r.T`` for ``[N,2,2]`` covariances as one plain ``[N,4] @ [4,4]`` product: row-major
    ``vec(r C r^T) = (r kron r) vec(C)`` (a stacked matmul of tiny matrices costs a BLAS call per matrix)."""
    rr = (r[:, None, :, None] * r[None, :, None, :]).reshape(4, 4)  # np.kron(r, r) without its Python overhead
    out: F64 = (cov.reshape(-1, 4) @ rr.T).reshape(-1, 2, 2)
    return out


def _rotated_variances(r: F64, cov: F64) -> F64:
    """``[N,2]`` diagonal of ``r.T @ cov @ r`` for ``[N,2,2]`` covariances: ``sum_kl r_ki r_li C_kl``, one
    ``[N,4] @ [4,2]`` product (only the variances are needed, not the rotated matrices)."""
    out: F64 = cov.reshape(-1, 4) @ (r[:, None, :] * r[None, :, :]).reshape(4, 2)
    return out


def _scalar_update(x: F64, p: F64, ph: F64, hph: F64, hx: F64, z: F64, r: F64) -> None:
    """In-place Kalman update of states ``x [K,4]`` and covariances ``p [K,4,4]`` with scalar measurements
    ``z = h . x`` of variance ``r``, given ``ph = P h [K,4]``, ``hph = h . P h`` and ``hx = h . x`` (each
    right-hand side is evaluated before the in-place write, so views of ``x`` and ``p`` may be passed)."""
    k = ph / (hph + r)[:, None]
    x += k * (z - hx)[:, None]
    p -= k[:, :, None] * ph[:, None, :]


def _sigma(cov: F64) -> F64:
    """``[N,2]`` x, y standard deviations of ``[N,2,2]`` covariances."""
    out: F64 = np.sqrt(np.maximum(np.diagonal(cov, axis1=1, axis2=2), 0.0))
    return out


def detections_from_objects(
    objs: Objects, names: SourceNames, threshold: float, min_speed: float
) -> tuple[Detection3D, ...]:
    """Untracked output: ``id`` is the index among this frame's emitted detections."""
    keep = objs.score >= threshold
    if not keep.all():
        objs = objs.take(keep)
    n = len(objs)
    if n == 0:
        return ()
    known = np.isfinite(objs.vel_var)
    vel = np.where(known[:, None], objs.velocity, 0.0)
    yaw = _face_velocity(objs.yaw, vel, min_speed)
    sigma = _sigma(objs.cov)
    return _build(np.arange(n), objs.labels, objs.score, objs.center, objs.size, yaw, vel, sigma, names(objs.sources))


def _build(
    ids: npt.NDArray[np.int64] | npt.NDArray[np.intp],
    labels: npt.NDArray[np.int64] | npt.NDArray[np.intp],
    score: F64,
    center: F64,
    size: F64,
    yaw: F64,
    vel: F64,
    sigma: F64,
    sources: list[tuple[str, ...]],
) -> tuple[Detection3D, ...]:
    # columns as Python lists first (one conversion per column, not per element); vectors as tuples by
    # zipping their column lists; Detection3D built positionally (half the cost of keyword arguments)
    return tuple(
        map(
            Detection3D,
            ids.tolist(),
            [LABELS[lab] for lab in labels.tolist()],
            score.tolist(),
            zip(*center.T.tolist(), strict=True),
            zip(*size.T.tolist(), strict=True),
            yaw.tolist(),
            zip(*vel.T.tolist(), strict=True),
            zip(*sigma.T.tolist(), strict=True),
            sources,
        )
    )


# Columns of the track table (one row per track; float64, ids and counts are exact integers).
_X = slice(0, 4)  # x, y, vx, vy (world)
_POS, _VEL = slice(0, 2), slice(2, 4)
_Z = 4
_SIZE = slice(5, 8)
_YAW = 8
_SCORE = 9
_HITS = 10
_MISSES = 11
_HAS_BOX = 12  # 1.0 once a lidar box gave the track its size and heading
_ID = 13
_VOTES = slice(14, 14 + _NUM_LABELS)
_NCOL = 14 + _NUM_LABELS
_XYZ = np.array([0, 1, _Z])  # the position columns


class Tracker:
    """Tracks fused objects across frames (see the module docstring). Not thread-safe: one caller.

    State is one table row per track (:data:`_NCOL` columns: kinematic state, height, size, yaw,
    score, hits, misses, id, class votes), a ``[T,4,4]`` covariance stack and a ``[T,S]`` sources
    mask, so that births, deaths and updates are a handful of array operations whatever the count.
    At tens of tracks the cost is the number of numpy calls, not the element count; rows are gathered
    with ``a.take(idx, axis=0)``, a third of the cost of ``a[idx]`` on these small 2-D and 3-D arrays.
    """

    def __init__(self, config: FusionConfig, params: FusionParams, names: SourceNames) -> None:
        self.config = config
        self.params = params
        self.names = names
        self._accel_var = np.asarray(params.track_accel_sigma, np.float64) ** 2
        self._init_speed_var = np.asarray(params.track_init_speed_sigma, np.float64) ** 2
        self._radial_var = np.asarray(params.radar_radial_sigma, np.float64) ** 2
        self._q_dt = math.nan  # dt of the cached transition self._ff and process noise self._q
        self._ff: F64 = np.eye(16)
        self._q: F64 = np.zeros(16)
        # update weights of (z, size, yaw) indexed by 2 * (track has no box yet) + (detection is a lidar box):
        # until a track has a box its size and heading are its detection's; the first box sets them, later
        # boxes are smoothed in, other detections leave them; height is smoothed in from every detection,
        # except that the first box sets it
        sa, ya = params.track_size_alpha, params.track_yaw_alpha
        self._alpha = np.array([[sa, 0.0, 0.0], [sa, sa, ya], [sa, 1.0, 1.0], [1.0, 1.0, 1.0]])
        self.reset()

    def reset(self) -> None:
        """Forget every track and restart ids at 1 (a new drive)."""
        self._next_id = 1
        self._t_ns: int | None = None
        self.table: F64 = np.zeros((0, _NCOL))
        self.p: F64 = np.zeros((0, 4, 4))
        self.sources: B = np.zeros((0, len(self.names.names)), bool)

    def __len__(self) -> int:
        return int(self.table.shape[0])

    @property
    def ids(self) -> I64:
        out: I64 = self.table[:, _ID].astype(np.int64)
        return out

    # -- helpers ----------------------------------------------------------------------------------
    def _keep(self, mask: B) -> None:
        idx = mask.nonzero()[0]
        self.table, self.p = self.table.take(idx, axis=0), self.p.take(idx, axis=0)
        self.sources = self.sources.take(idx, axis=0)

    def _labels(self) -> npt.NDArray[np.intp]:
        out: npt.NDArray[np.intp] = self.table[:, _VOTES].argmax(axis=1)
        return out

    def _predict(self, dt: float, labels: npt.NDArray[np.intp]) -> None:
        """Constant-velocity prediction: ``x += dt v``; ``P = F P F^T + Q`` as one ``[T,16] @ [16,16]``
        product with ``kron(F, F)`` (row-major ``vec(F P F^T) = (F kron F) vec(P)``)."""
        if dt <= 0 or not len(self):
            return
        self.table[:, _POS] += dt * self.table[:, _VEL]
        if dt != self._q_dt:  # frames come at a steady rate: build F kron F and Q once per distinct dt
            f = np.eye(4)
            f[0, 2] = f[1, 3] = dt
            q = np.zeros((4, 4))  # white-noise acceleration, per unit variance
            q[0, 0] = q[1, 1] = dt**4 / 4
            q[2, 2] = q[3, 3] = dt**2
            q[0, 2] = q[2, 0] = q[1, 3] = q[3, 1] = dt**3 / 2
            self._ff, self._q, self._q_dt = np.kron(f, f).T, q.reshape(16), dt
        p = self.p.reshape(-1, 16) @ self._ff
        p += self._accel_var[labels][:, None] * self._q
        self.p = p.reshape(-1, 4, 4)

    def _gated(self, zxy: F64, r: F64, age: F64) -> B:
        """``[T,D]``: detection within the association gate of each (predicted) track."""
        x = self.table
        diff = zxy[None, :, :] + age[None, :, None] * x[:, None, _VEL] - x[:, None, _POS]
        out: B = mahalanobis2(diff, self.p[:, None, :2, :2] + r[None]) <= self.params.track_gate
        return out

    def _associate(
        self, zxy: F64, r: F64, age: F64, labels: npt.NDArray[np.intp], x: F64, track_labels: npt.NDArray[np.intp]
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        """Hungarian assignment of detections to tracks whose (predicted) kinematic state is ``x``."""
        prm = self.params
        n_t, n_d = x.shape[0], zxy.shape[0]
        if n_t == 0 or n_d == 0:
            return np.zeros(0, np.intp), np.zeros(0, np.intp)
        # candidates by plain distance first, Mahalanobis only for those
        dx = zxy[None, :, 0] + age[None, :] * x[:, None, 2] - x[:, None, 0]
        dy = zxy[None, :, 1] + age[None, :] * x[:, None, 3] - x[:, None, 1]
        # flat indices, then (track, detection): half the cost of a 2-D nonzero; same row-major order
        flat = (dx * dx + dy * dy <= prm.track_max_distance**2).ravel().nonzero()[0]
        if flat.size == 0:
            return flat, flat
        ti, di = np.unravel_index(flat, dx.shape)
        s = self.p.take(ti, axis=0)[:, :2, :2] + r.take(di, axis=0)
        d2 = mahalanobis2_xy(dx.ravel()[flat], dy.ravel()[flat], s)
        ok = d2 <= prm.track_gate
        if np.count_nonzero(ok) < ok.size:  # count_nonzero: a fraction of the cost of .all() on small arrays
            ti, di, d2 = ti[ok], di[ok], d2[ok]
        cost = d2 + prm.track_label_penalty * (track_labels[ti] != labels[di])
        return assign_pairs(ti, di, cost, (n_t, n_d))

    # -- the frame step ---------------------------------------------------------------------------
    def step(self, t_ns: int, objs: Objects, world_from_ego: F64 | None) -> tuple[Detection3D, ...]:
        """Advance to ``t_ns`` with this frame's fused objects (``base_link``); returns the tracks' output."""
        prm = self.params
        w = world_from_ego if world_from_ego is not None else _EYE4
        r2 = w[:2, :2]
        ego_yaw = math.atan2(w[1, 0], w[0, 0])
        n = len(objs)
        # detections -> world
        zw = objs.center @ w[:3, :3].T + w[:3, 3]
        rw = _rotate_covariances(r2, objs.cov)
        labels = objs.labels

        if self._t_ns is not None and t_ns < self._t_ns:
            return self._read_only(t_ns, objs, zw, rw, labels, r2)
        dt = 0.0 if self._t_ns is None else (t_ns - self._t_ns) * 1e-9
        if dt > prm.track_max_gap_s and len(self):
            log.info("tracker: %.2f s gap between frames, dropping %d tracks", dt, len(self))
            self._keep(np.zeros(len(self), bool))
        self._t_ns = t_ns
        track_labels = self._labels()  # votes change only in the update below
        self._predict(dt, track_labels)

        ti, di = self._associate(zw[:, :2], rw, objs.age, labels, self.table[:, _X], track_labels)
        # every track coasts (one more miss, decayed class evidence, no sources) unless updated below:
        # whole-column operations, cheaper than selecting the unmatched rows
        tab = self.table
        tab[:, _MISSES] += 1
        tab[:, _VOTES] *= prm.track_vote_decay
        self.sources[:] = False
        if ti.size:
            self._update(ti, di, objs, zw, rw, r2, ego_yaw, labels)
        if ti.size < len(self):  # deaths: a tentative track on its first miss, a confirmed one after max_misses
            allowed = self.config.track_max_misses * (tab[:, _HITS] >= self.config.track_min_hits)
            dead = tab[:, _MISSES] > allowed
            if np.count_nonzero(dead):  # count_nonzero: a fraction of the cost of .any() on small arrays
                self._keep(~dead)
        # births; a camera- or radar-only detection within the gate of a live track is a duplicate of it
        if di.size < n:
            new = np.ones(n, bool)
            new[di] = False
            w_idx = (new & (objs.origin != _LIDAR)).nonzero()[0]
            if w_idx.size and len(self):
                new[w_idx[self._gated(zw[w_idx, :2], rw[w_idx], objs.age[w_idx]).any(axis=0)]] = False
            idx = new.nonzero()[0]
            if idx.size:
                self._birth(idx, objs, zw, rw, r2, ego_yaw)
        return self._output(w, ego_yaw)

    def _update(
        self,
        ti: npt.NDArray[np.intp],
        di: npt.NDArray[np.intp],
        objs: Objects,
        zw: F64,
        rw: F64,
        r2: F64,
        ego_yaw: float,
        labels: npt.NDArray[np.intp],
    ) -> None:
        prm = self.params
        row = self.table.take(ti, axis=0)
        x, p = row[:, _X], self.p.take(ti, axis=0)
        zd = zw.take(di, axis=0)
        # position (moved by the track velocity over the detection's age)
        z = zd[:, :2] + objs.age[di][:, None] * x[:, _VEL]
        k = p[:, :, :2] @ inv2(p[:, :2, :2] + rw.take(di, axis=0))
        x = x + (k @ (z - x[:, _POS])[:, :, None])[:, :, 0]
        p = p - k @ p[:, :2, :]
        # velocity: a full 2D radar velocity is two scalar measurements, vx then vy (its noise is isotropic
        # and uncorrelated, so this equals the 2D update and needs no inverse); a radial one is vr = u . v
        full = objs.vel_full[di]
        f = full.nonzero()[0]
        if f.size:
            xf, pf, df = x.take(f, axis=0), p.take(f, axis=0), di[f]
            vw, var = objs.velocity.take(df, axis=0) @ r2.T, objs.vel_var[df]
            for j in (2, 3):  # h = e_j: P h is a column of P, h . x a component of x
                _scalar_update(xf, pf, pf[:, :, j], pf[:, j, j], xf[:, j], vw[:, j - 2], var)
            x[f], p[f] = xf, pf
        g = (~full & np.isfinite(objs.radial[di, 0])).nonzero()[0]
        if g.size:  # the track's own direction resolves the rest of the velocity
            xg, pg, dg = x.take(g, axis=0), p.take(g, axis=0), di[g]
            radial = objs.radial.take(dg, axis=0)
            u = radial[:, 1:3] @ r2.T
            ux, uy = u[:, 0:1], u[:, 1:2]
            ph = pg[:, :, 2] * ux + pg[:, :, 3] * uy  # P h with h = [0, 0, ux, uy]
            hph, hx = ph[:, 2:3] * ux + ph[:, 3:4] * uy, xg[:, 2:3] * ux + xg[:, 3:4] * uy
            _scalar_update(xg, pg, ph, hph[:, 0], hx[:, 0], radial[:, 0], self._radial_var[labels[dg]])
            x[g], p[g] = xg, pg
        row[:, _X] = x
        self.p[ti] = 0.5 * (p + p.swapaxes(1, 2))
        # attributes: score and class evidence; height, size and heading smoothed from lidar boxes
        # (weight 1 the first time, then track_*_alpha; boxless tracks follow their detection's prior)
        row[:, _SCORE] += prm.track_score_alpha * (objs.score[di] - row[:, _SCORE])
        row[:, _VOTES] += objs.votes.take(di, axis=0)  # already decayed with every track in step()
        row[:, _HITS] += 1
        row[:, _MISSES] = 0
        lidar = objs.origin[di] == _LIDAR
        a = self._alpha[2 * (row[:, _HAS_BOX] == 0.0) + lidar]  # one table lookup instead of nested np.where
        row[:, _Z] += a[:, 0] * (zd[:, 2] - row[:, _Z])
        row[:, _SIZE] += a[:, 1:2] * (objs.size.take(di, axis=0) - row[:, _SIZE])
        yaw_det = objs.yaw[di] + ego_yaw
        row[:, _YAW] = wrap_angle(row[:, _YAW] + a[:, 2] * _fold_pi(yaw_det - row[:, _YAW]))
        row[:, _HAS_BOX] = np.maximum(row[:, _HAS_BOX], lidar)
        self.table[ti] = row
        self.sources[ti] = objs.sources.take(di, axis=0)

    def _birth(self, idx: npt.NDArray[np.intp], objs: Objects, zw: F64, rw: F64, r2: F64, ego_yaw: float) -> None:
        m = idx.size
        labels = objs.labels[idx]
        known = np.isfinite(objs.vel_var[idx])
        rows = np.zeros((m, _NCOL))
        rows[known, 2:4] = objs.velocity.take(idx[known], axis=0) @ r2.T
        zd = zw.take(idx, axis=0)
        # a measurement made ``age`` ago: move it along the velocity we have
        rows[:, _POS] = zd[:, :2] + objs.age[idx][:, None] * rows[:, _VEL]
        rows[:, _Z] = zd[:, 2]
        rows[:, _SIZE] = objs.size.take(idx, axis=0)
        rows[:, _YAW] = wrap_angle(objs.yaw[idx] + ego_yaw)
        rows[:, _SCORE] = objs.score[idx]
        rows[:, _HITS] = 1.0
        rows[:, _HAS_BOX] = objs.origin[idx] == _LIDAR
        rows[:, _ID] = np.arange(self._next_id, self._next_id + m)
        rows[:, _VOTES] = objs.votes.take(idx, axis=0)
        self._next_id += m
        p = np.zeros((m, 4, 4))
        p[:, :2, :2] = rw.take(idx, axis=0)
        p[:, 2, 2] = p[:, 3, 3] = np.where(known, objs.vel_var[idx], self._init_speed_var[labels])
        self.table = np.concatenate([self.table, rows])
        self.p = np.concatenate([self.p, p])
        self.sources = np.concatenate([self.sources, objs.sources.take(idx, axis=0)])

    def _output(self, w: F64, ego_yaw: float) -> tuple[Detection3D, ...]:
        prm = self.params
        tab = self.table
        confirmed = tab[:, _HITS] >= self.config.track_min_hits
        score = (
            tab[:, _SCORE] * np.where(confirmed, 1.0, prm.tentative_factor) * prm.track_coast_decay ** tab[:, _MISSES]
        )
        show = (confirmed | (tab[:, _MISSES] == 0)) if prm.emit_tentative else confirmed
        idx = (show & (score >= self.config.score_threshold)).nonzero()[0]
        if not idx.size:
            return ()
        # world -> base_link: R^T (p - t), i.e. (p - t) @ R for row vectors (no inverse transform needed)
        r3 = w[:3, :3]
        sel = tab.take(idx, axis=0)
        center = (sel.take(_XYZ, axis=1) - w[:3, 3]) @ r3
        vel = sel[:, _VEL] @ r3[:2, :2]
        sigma = np.sqrt(np.maximum(_rotated_variances(r3[:2, :2], self.p.take(idx, axis=0)[:, :2, :2]), 0.0))
        yaw = _face_velocity(sel[:, _YAW] - ego_yaw, vel, prm.flip_speed)
        return _build(
            sel[:, _ID].astype(np.int64),
            sel[:, _VOTES].argmax(axis=1),
            score[idx],
            center,
            sel[:, _SIZE],
            yaw,
            vel,
            sigma,
            self.names(self.sources.take(idx, axis=0)),
        )

    def _read_only(
        self, t_ns: int, objs: Objects, zw: F64, rw: F64, labels: npt.NDArray[np.intp], r2: F64
    ) -> tuple[Detection3D, ...]:
        assert self._t_ns is not None
        log.debug("tracker: frame at %d is older than the last (%d); answering read-only", t_ns, self._t_ns)
        dt = (t_ns - self._t_ns) * 1e-9
        x = self.table[:, _X].copy()
        x[:, _POS] += dt * x[:, _VEL]
        ti, di = self._associate(zw[:, :2], rw, objs.age, labels, x, self._labels())
        keep = objs.score >= self.config.score_threshold
        ids = np.full(len(objs), -1, np.int64)
        ids[di] = self.table[ti, _ID].astype(np.int64)
        fresh = ids < 0
        ids[fresh] = np.arange(self._next_id, self._next_id + int(fresh.sum()))
        self._next_id += int(fresh.sum())
        vel = np.where(np.isfinite(objs.vel_var)[:, None], objs.velocity, 0.0)
        vel[di] = x[ti, _VEL] @ r2  # world -> base_link: R^T v, i.e. v @ R for row vectors
        sigma = _sigma(objs.cov)
        yaw = _face_velocity(objs.yaw, vel, self.params.flip_speed)
        k = keep.nonzero()[0]
        return _build(
            ids[k],
            labels[k],
            objs.score[k],
            objs.center[k],
            objs.size[k],
            yaw[k],
            vel[k],
            sigma[k],
            self.names(objs.sources[k]),
        )
