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
3. update matched tracks with the position, then with a full radar velocity (2D measurement) or a
   radial radar velocity (scalar ``u . v`` measurement: the track's own direction resolves the rest);
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
from perception.fusion._associate import assign, inv2, mahalanobis2
from perception.fusion._geometry import invert_transform, wrap_angle
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


def _fold_pi(a: F64) -> F64:
    """Angles folded to ``[-pi/2, pi/2)`` (orientation of an axis)."""
    out: F64 = (a + np.pi / 2) % np.pi - np.pi / 2
    return out


def _face_velocity(yaw: F64, velocity: F64, min_speed: float) -> F64:
    """Turn yaws by pi where they point against a velocity faster than ``min_speed``."""
    speed = np.hypot(velocity[:, 0], velocity[:, 1])
    against = (np.cos(yaw) * velocity[:, 0] + np.sin(yaw) * velocity[:, 1]) < 0
    return wrap_angle(np.where((speed > min_speed) & against, yaw + np.pi, yaw))


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
    sigma = np.sqrt(np.maximum(np.stack([objs.cov[:, 0, 0], objs.cov[:, 1, 1]], axis=1), 0.0))
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
    rows = zip(
        ids.tolist(),
        labels.tolist(),
        score.tolist(),
        center.tolist(),
        size.tolist(),
        yaw.tolist(),
        vel.tolist(),
        sigma.tolist(),
        sources,
        strict=True,
    )
    return tuple(
        Detection3D(
            id=i,
            label=LABELS[lab],
            score=s,
            center=(c[0], c[1], c[2]),
            size=(z[0], z[1], z[2]),
            yaw=y,
            velocity=(v[0], v[1]),
            uncertainty=(u[0], u[1]),
            sources=src,
        )
        for i, lab, s, c, z, y, v, u, src in rows
    )


class Tracker:
    """Tracks fused objects across frames (see the module docstring). Not thread-safe: one caller."""

    def __init__(self, config: FusionConfig, params: FusionParams, names: SourceNames) -> None:
        self.config = config
        self.params = params
        self.names = names
        self._accel_var = np.asarray(params.track_accel_sigma, np.float64) ** 2
        self._init_speed_var = np.asarray(params.track_init_speed_sigma, np.float64) ** 2
        self.reset()

    def reset(self) -> None:
        """Forget every track and restart ids at 1 (a new drive)."""
        s = len(self.names.names)
        self._next_id = 1
        self._t_ns: int | None = None
        self.ids: I64 = np.zeros(0, np.int64)
        self.x: F64 = np.zeros((0, 4))
        self.p: F64 = np.zeros((0, 4, 4))
        self.z: F64 = np.zeros(0)
        self.size: F64 = np.zeros((0, 3))
        self.yaw: F64 = np.zeros(0)
        self.has_box: B = np.zeros(0, bool)
        self.votes: F64 = np.zeros((0, _NUM_LABELS))
        self.score: F64 = np.zeros(0)
        self.hits: I64 = np.zeros(0, np.int64)
        self.misses: I64 = np.zeros(0, np.int64)
        self.sources: B = np.zeros((0, s), bool)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    # -- helpers ----------------------------------------------------------------------------------
    def _keep(self, mask: B) -> None:
        for name in ("ids", "x", "p", "z", "size", "yaw", "has_box", "votes", "score", "hits", "misses", "sources"):
            setattr(self, name, getattr(self, name)[mask])

    def _predict(self, dt: float) -> None:
        if dt <= 0 or not len(self):
            return
        f = np.eye(4)
        f[0, 2] = f[1, 3] = dt
        self.x = self.x @ f.T
        q_unit = np.zeros((4, 4))
        q_unit[0, 0] = q_unit[1, 1] = dt**4 / 4
        q_unit[2, 2] = q_unit[3, 3] = dt**2
        q_unit[0, 2] = q_unit[2, 0] = q_unit[1, 3] = q_unit[3, 1] = dt**3 / 2
        q = self._accel_var[np.argmax(self.votes, axis=1)][:, None, None] * q_unit
        self.p = f @ self.p @ f.T + q

    def _gated(self, zxy: F64, r: F64, age: F64) -> B:
        """``[T,D]``: detection within the association gate of each (predicted) track."""
        diff = zxy[None, :, :] + age[None, :, None] * self.x[:, None, 2:] - self.x[:, None, :2]
        d2 = mahalanobis2(diff, self.p[:, None, :2, :2] + r[None])
        out: B = d2 <= self.params.track_gate
        return out

    def _associate(
        self, zxy: F64, r: F64, age: F64, labels: npt.NDArray[np.intp], x: F64, p: F64
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        prm = self.params
        n_t, n_d = x.shape[0], zxy.shape[0]
        if n_t == 0 or n_d == 0:
            return np.zeros(0, np.intp), np.zeros(0, np.intp)
        # candidates by plain distance first, Mahalanobis only for those
        dx = zxy[None, :, 0] + age[None, :] * x[:, None, 2] - x[:, None, 0]
        dy = zxy[None, :, 1] + age[None, :] * x[:, None, 3] - x[:, None, 1]
        ti, di = np.nonzero(dx * dx + dy * dy <= prm.track_max_distance**2)
        if ti.size == 0:
            return ti, di
        diff = np.column_stack([dx[ti, di], dy[ti, di]])
        d2 = mahalanobis2(diff, p[ti, :2, :2] + r[di])
        ok = d2 <= prm.track_gate
        ti, di = ti[ok], di[ok]
        cost = np.zeros((n_t, n_d))
        allowed = np.zeros((n_t, n_d), bool)
        track_labels = np.argmax(self.votes, axis=1)
        cost[ti, di] = d2[ok] + prm.track_label_penalty * (track_labels[ti] != labels[di])
        allowed[ti, di] = True
        return assign(cost, allowed)

    # -- the frame step ---------------------------------------------------------------------------
    def step(self, t_ns: int, objs: Objects, world_from_ego: F64 | None) -> tuple[Detection3D, ...]:
        """Advance to ``t_ns`` with this frame's fused objects (``base_link``); returns the tracks' output."""
        prm = self.params
        w = world_from_ego if world_from_ego is not None else _EYE4
        w_inv = invert_transform(w)
        r2 = w[:2, :2]
        ego_yaw = math.atan2(w[1, 0], w[0, 0])
        n = len(objs)
        # detections -> world
        zw = objs.center @ w[:3, :3].T + w[:3, 3]
        rw = r2 @ objs.cov @ r2.T
        vw = objs.velocity @ r2.T
        radial_u = objs.radial[:, 1:3] @ r2.T
        yaw_w = wrap_angle(objs.yaw + ego_yaw)
        labels = objs.labels

        if self._t_ns is not None and t_ns < self._t_ns:
            return self._read_only(t_ns, objs, zw, rw, labels, w_inv, ego_yaw)
        dt = 0.0 if self._t_ns is None else (t_ns - self._t_ns) * 1e-9
        if dt > prm.track_max_gap_s and len(self):
            log.info("tracker: %.2f s gap between frames, dropping %d tracks", dt, len(self))
            self._keep(np.zeros(len(self), bool))
        self._t_ns = t_ns
        self._predict(dt)

        ti, di = self._associate(zw[:, :2], rw, objs.age, labels, self.x, self.p)
        if ti.size:
            self._update(ti, di, objs, zw, rw, vw, radial_u, yaw_w)
        # coasting and deaths
        matched = np.zeros(len(self), bool)
        matched[ti] = True
        self.misses[~matched] += 1
        self.votes[~matched] *= prm.track_vote_decay
        self.sources[~matched] = False
        confirmed = self.hits >= self.config.track_min_hits
        dead = (~confirmed & (self.misses > 0)) | (self.misses > self.config.track_max_misses)
        if dead.any():
            self._keep(~dead)
        # births; a camera- or radar-only detection within the gate of a live track is a duplicate of it
        new = np.ones(n, bool)
        new[di] = False
        weak = new & (objs.origin != Origin.LIDAR)
        if weak.any() and len(self):
            w_idx = np.flatnonzero(weak)
            dup = self._gated(zw[w_idx, :2], rw[w_idx], objs.age[w_idx]).any(axis=0)
            new[w_idx[dup]] = False
        if new.any():
            self._birth(np.flatnonzero(new), objs, zw, rw, vw, yaw_w)
        return self._output(w_inv, ego_yaw)

    def _update(
        self,
        ti: npt.NDArray[np.intp],
        di: npt.NDArray[np.intp],
        objs: Objects,
        zw: F64,
        rw: F64,
        vw: F64,
        radial_u: F64,
        yaw_w: F64,
    ) -> None:
        prm = self.params
        x, p = self.x[ti], self.p[ti]
        # position (moved by the track velocity over the detection's age)
        z = zw[di, :2] + objs.age[di, None] * x[:, 2:4]
        s = p[:, :2, :2] + rw[di]
        k = p[:, :, :2] @ inv2(s)
        x = x + (k @ (z - x[:, :2])[:, :, None])[:, :, 0]
        p = p - k @ p[:, :2, :]
        # full 2D velocity
        # full 2D velocity
        full = objs.vel_full[di]
        if full.any():
            f = np.flatnonzero(full)
            var = objs.vel_var[di[f]]
            s = p[f, 2:, 2:].copy()
            s[:, 0, 0] += var
            s[:, 1, 1] += var
            k = p[f][:, :, 2:] @ inv2(s)
            x[f] = x[f] + (k @ (vw[di[f]] - x[f, 2:])[:, :, None])[:, :, 0]
            p[f] = p[f] - k @ p[f][:, 2:, :]
        # radial velocity: scalar measurement vr = u . v (the track's own direction resolves the rest)
        rad = ~full & np.isfinite(objs.radial[di, 0])
        if rad.any():
            g = np.flatnonzero(rad)
            h = np.zeros((g.size, 4))
            h[:, 2:] = radial_u[di[g]]
            ph = (p[g] @ h[:, :, None])[:, :, 0]
            s1 = (h * ph).sum(axis=1) + np.asarray(prm.radar_radial_sigma)[objs.labels[di[g]]] ** 2
            k1 = ph / s1[:, None]
            innov = objs.radial[di[g], 0] - (h * x[g]).sum(axis=1)
            x[g] = x[g] + k1 * innov[:, None]
            p[g] = p[g] - k1[:, :, None] * ph[:, None, :]
        self.x[ti] = x
        self.p[ti] = 0.5 * (p + np.swapaxes(p, 1, 2))
        # attributes
        a = prm.track_score_alpha
        self.score[ti] = (1 - a) * self.score[ti] + a * objs.score[di]
        self.votes[ti] = self.votes[ti] * prm.track_vote_decay + objs.votes[di]
        self.hits[ti] += 1
        self.misses[ti] = 0
        self.sources[ti] = objs.sources[di]
        self.z[ti] += prm.track_size_alpha * (zw[di, 2] - self.z[ti])
        lidar = objs.origin[di] == Origin.LIDAR
        first = lidar & ~self.has_box[ti]
        smooth = lidar & self.has_box[ti]
        tf, df = ti[first], di[first]
        self.size[tf] = objs.size[df]
        self.yaw[tf] = yaw_w[df]
        self.z[tf] = zw[df, 2]
        self.has_box[tf] = True
        ts, ds = ti[smooth], di[smooth]
        self.size[ts] += prm.track_size_alpha * (objs.size[ds] - self.size[ts])
        self.yaw[ts] = wrap_angle(self.yaw[ts] + prm.track_yaw_alpha * _fold_pi(yaw_w[ds] - self.yaw[ts]))
        # boxless tracks follow the class prior size of their (possibly changed) detection
        nobox = ~self.has_box[ti]
        self.size[ti[nobox]] = objs.size[di[nobox]]
        self.yaw[ti[nobox]] = yaw_w[di[nobox]]

    def _birth(self, idx: npt.NDArray[np.intp], objs: Objects, zw: F64, rw: F64, vw: F64, yaw_w: F64) -> None:
        m = idx.size
        labels = objs.labels[idx]
        known = np.isfinite(objs.vel_var[idx])
        x = np.zeros((m, 4))
        x[:, :2] = zw[idx, :2]
        x[known, 2:] = vw[idx[known]]
        v_var = np.where(known, objs.vel_var[idx], self._init_speed_var[labels])
        p = np.zeros((m, 4, 4))
        p[:, :2, :2] = rw[idx]
        p[:, 2, 2] = p[:, 3, 3] = v_var
        # a measurement made ``age`` ago: move it along the velocity we have
        x[:, :2] += objs.age[idx, None] * x[:, 2:]
        ids = np.arange(self._next_id, self._next_id + m, dtype=np.int64)
        self._next_id += m
        self.ids = np.concatenate([self.ids, ids])
        self.x = np.concatenate([self.x, x])
        self.p = np.concatenate([self.p, p])
        self.z = np.concatenate([self.z, zw[idx, 2]])
        self.size = np.concatenate([self.size, objs.size[idx]])
        self.yaw = np.concatenate([self.yaw, yaw_w[idx]])
        self.has_box = np.concatenate([self.has_box, objs.origin[idx] == Origin.LIDAR])
        self.votes = np.concatenate([self.votes, objs.votes[idx]])
        self.score = np.concatenate([self.score, objs.score[idx]])
        self.hits = np.concatenate([self.hits, np.ones(m, np.int64)])
        self.misses = np.concatenate([self.misses, np.zeros(m, np.int64)])
        self.sources = np.concatenate([self.sources, objs.sources[idx]])

    def _output(self, w_inv: F64, ego_yaw: float) -> tuple[Detection3D, ...]:
        prm = self.params
        confirmed = self.hits >= self.config.track_min_hits
        show = (self.misses == 0) & (confirmed | prm.emit_tentative) | confirmed
        score = self.score * np.where(confirmed, 1.0, prm.tentative_factor) * prm.track_coast_decay**self.misses
        show &= score >= self.config.score_threshold
        if not show.any():
            return ()
        idx = np.flatnonzero(show)
        r2 = w_inv[:2, :2]
        pos_w = np.column_stack([self.x[idx, :2], self.z[idx]])
        center = pos_w @ w_inv[:3, :3].T + w_inv[:3, 3]
        vel = self.x[idx, 2:] @ r2.T
        cov = r2 @ self.p[idx, :2, :2] @ r2.T
        sigma = np.sqrt(np.maximum(np.stack([cov[:, 0, 0], cov[:, 1, 1]], axis=1), 0.0))
        yaw = _face_velocity(wrap_angle(self.yaw[idx] - ego_yaw), vel, prm.flip_speed)
        return _build(
            self.ids[idx],
            np.argmax(self.votes[idx], axis=1),
            score[idx],
            center,
            self.size[idx],
            yaw,
            vel,
            sigma,
            self.names(self.sources[idx]),
        )

    def _read_only(
        self, t_ns: int, objs: Objects, zw: F64, rw: F64, labels: npt.NDArray[np.intp], w_inv: F64, ego_yaw: float
    ) -> tuple[Detection3D, ...]:
        assert self._t_ns is not None
        log.debug("tracker: frame at %d is older than the last (%d); answering read-only", t_ns, self._t_ns)
        dt = (t_ns - self._t_ns) * 1e-9
        x = self.x.copy()
        x[:, :2] += dt * x[:, 2:]
        ti, di = self._associate(zw[:, :2], rw, objs.age, labels, x, self.p)
        keep = objs.score >= self.config.score_threshold
        ids = np.full(len(objs), -1, np.int64)
        ids[di] = self.ids[ti]
        fresh = ids < 0
        ids[fresh] = np.arange(self._next_id, self._next_id + int(fresh.sum()))
        self._next_id += int(fresh.sum())
        vel = np.where(np.isfinite(objs.vel_var)[:, None], objs.velocity, 0.0)
        vel[di] = x[ti, 2:] @ w_inv[:2, :2].T
        sigma = np.sqrt(np.maximum(np.stack([objs.cov[:, 0, 0], objs.cov[:, 1, 1]], axis=1), 0.0))
        yaw = _face_velocity(objs.yaw, vel, self.params.flip_speed)
        k = np.flatnonzero(keep)
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
