"""Automotive radar: a few returns per object with Doppler, coarse angles, clutter and false alarms.

* Returns sit on the object's footprint edges that face the sensor (1 for a far pedestrian, up to
  ~10 for a near truck), detected with a probability that falls with range and with how much of
  the object a nearer one hides.
* ``radial_velocity`` is ego-motion compensated: the radial component of the object's velocity over
  ground, ``v . u`` with ``u`` the unit line of sight (negative = approaching). Static things read ~0.
* Measurement noise is applied in polar form: small in range, large in azimuth (plus a tangential
  spread of the returns over the object) and very large in elevation.
* Static scenery (poles, barriers, facades) gives occasional stationary returns; false alarms are
  scattered uniformly over the field of view, a few of them with spurious velocity (multipath).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from perception.sim._raycast import matmul
from perception.sim._rig import SimRadarParams, SimSensor
from perception.sim._world import CAR, CYCLIST, PEDESTRIAN, TRUCK, Scene

__all__ = ["RadarModel"]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

# per class (car, truck, pedestrian, cyclist)
_RCS_DBSM = np.array([10.0, 18.0, -4.0, 1.0])
_RETURNS = np.array([3.0, 5.5, 1.3, 1.6])  # mean returns at 25 m
_REACH = np.array([140.0, 180.0, 55.0, 75.0])  # range at which detection probability has faded
_MICRO_DOPPLER = np.array([0.05, 0.05, 0.35, 0.25])  # limb / wheel motion, m/s
assert (CAR, TRUCK, PEDESTRIAN, CYCLIST) == (0, 1, 2, 3)


class RadarModel:
    def __init__(self, cfg: SimSensor) -> None:
        assert isinstance(cfg.params, SimRadarParams)
        self.cfg = cfg
        self.p = cfg.params
        ext = cfg.extrinsic
        self.rot = ext.rotation_matrix()
        self.origin = np.asarray(ext.translation, dtype=np.float64)
        self.half_fov = np.radians(self.p.fov_deg) / 2

    def _to_sensor(self, pts: F64) -> F64:
        out: F64 = matmul(pts - self.origin, self.rot)
        return out

    def capture(self, scene: Scene, rng: np.random.Generator) -> F32:
        """One scan at ``scene.t_ns``: ``[N,5]`` float32 ``x, y, z, radial_velocity, rcs`` (sensor frame)."""
        p = self.p
        pts_b, vel_b, rcs, micro = self._object_returns(scene, rng)
        s_pts, s_rcs = self._scenery_returns(scene, rng)
        n_obj, n_sc = pts_b.shape[0], s_pts.shape[0]
        allp = np.concatenate([pts_b, s_pts]) if n_sc else pts_b
        rel = allp - self.origin
        los = rel / np.maximum(np.linalg.norm(rel, axis=1, keepdims=True), 1e-6)
        vr = np.zeros(n_obj + n_sc)
        vr[:n_obj] = los[:n_obj, 0] * vel_b[:, 0] + los[:n_obj, 1] * vel_b[:, 1]
        vr += rng.normal(0.0, 1.0, vr.size) * np.concatenate([np.hypot(p.velocity_noise_mps, micro),
                                                             np.full(n_sc, p.velocity_noise_mps)])
        q = self._to_sensor(allp)
        r = np.linalg.norm(q, axis=1)
        az = np.arctan2(q[:, 1], q[:, 0])
        el = np.arcsin(np.clip(q[:, 2] / np.maximum(r, 1e-6), -1, 1))
        m = r.size
        r = r + rng.normal(0.0, p.range_noise_m, m)
        az = az + rng.normal(0.0, np.radians(p.azimuth_noise_deg), m)
        az = az + rng.normal(0.0, p.lateral_spread_m, m) / np.maximum(r, 1.0)
        el = el + rng.normal(0.0, np.radians(p.elevation_noise_deg), m)
        rcs_all = np.concatenate([rcs, s_rcs]) + rng.normal(0.0, p.rcs_noise_db, m)
        # false alarms over the field of view
        n_fa = int(rng.poisson(p.false_alarms_per_scan))
        fa_r = p.min_range_m + (p.max_range_m - p.min_range_m) * np.sqrt(rng.random(n_fa))
        fa_az = rng.uniform(-self.half_fov, self.half_fov, n_fa)
        fa_el = rng.normal(0.0, np.radians(p.elevation_noise_deg), n_fa)
        ghost = rng.random(n_fa) < 0.15
        fa_v = np.where(ghost, rng.uniform(-20.0, 20.0, n_fa), rng.normal(0.0, 0.15, n_fa))
        fa_rcs = rng.uniform(-15.0, 5.0, n_fa)
        r = np.concatenate([r, fa_r])
        az = np.concatenate([az, fa_az])
        el = np.concatenate([el, fa_el])
        vr = np.concatenate([vr, fa_v])
        rcs_all = np.concatenate([rcs_all, fa_rcs])
        keep = (r >= p.min_range_m) & (r <= p.max_range_m) & (np.abs(az) <= self.half_fov)
        order = np.argsort(r[keep], kind="stable")  # radars report by range, not by object
        r, az, el, vr, rcs_all = (a[keep][order] for a in (r, az, el, vr, rcs_all))
        out: F32 = np.stack(
            [r * np.cos(el) * np.cos(az), r * np.cos(el) * np.sin(az), r * np.sin(el), vr, rcs_all], axis=1
        ).astype(np.float32)
        return out

    def _object_returns(self, scene: Scene, rng: np.random.Generator) -> tuple[F64, F64, F64, F64]:
        p = self.p
        n = scene.n_objects
        empty = np.zeros((0, 3)), np.zeros((0, 2)), np.zeros(0), np.zeros(0)
        if n == 0:
            return empty
        c = self._to_sensor(scene.center)
        rng_c = np.hypot(c[:, 0], c[:, 1])
        az_c = np.arctan2(c[:, 1], c[:, 0])
        ext = np.maximum(scene.size[:, 0], scene.size[:, 1]) / 2
        half_w = np.arctan2(ext, np.maximum(rng_c, 0.1))
        cand = np.abs(az_c) - half_w <= self.half_fov
        cand &= (rng_c - ext <= p.max_range_m) & (rng_c + ext >= p.min_range_m)
        # occlusion: share of the object's angular extent hidden by nearer, tall-enough objects (only
        # candidates can be detected or hide others: the rest is left out of the [C,7,C] test)
        occ = np.zeros(n)
        ci = np.nonzero(cand)[0]
        rc, az_ci, hw, height = rng_c[ci], az_c[ci], half_w[ci], scene.size[ci, 2]
        samples = az_ci[:, None] + hw[:, None] * np.linspace(-0.8, 0.8, 7)[None, :]
        nearer = rc[None, :] < rc[:, None] - 0.5
        nearer &= height[None, :] > np.minimum(height[:, None] * 0.6, 1.2)
        d_az = (samples[:, :, None] - az_ci[None, None, :] + np.pi) % (2 * np.pi) - np.pi
        covered = (np.abs(d_az) < hw[None, None, :] * 0.9) & nearer[:, None, :]
        occ[ci] = covered.any(axis=2).mean(axis=1)
        labels = scene.label
        p_det = p.detection_probability * np.clip(1.4 - rng_c / _REACH[labels], 0.0, 1.0) * (1 - 0.9 * occ)
        detected = cand & (rng.random(n) < p_det)
        idx = np.nonzero(detected)[0]
        if not idx.size:
            return empty
        lam = _RETURNS[labels[idx]] * np.clip(25.0 / np.maximum(rng_c[idx], 1.0), 0.35, 2.0) * (1 - 0.6 * occ[idx])
        counts = 1 + rng.poisson(np.maximum(lam - 1.0, 0.0))
        owner = np.repeat(idx, counts)
        k = owner.size
        # a point on a footprint edge that faces the sensor (chosen by visible length)
        yaw, half = scene.yaw[owner], scene.size[owner, :2] / 2
        cy, sy = np.cos(yaw), np.sin(yaw)
        o = self.origin[:2] - scene.center[owner, :2]
        ol = np.stack([cy * o[:, 0] + sy * o[:, 1], -sy * o[:, 0] + cy * o[:, 1]], axis=1)  # sensor in box frame
        face_x = ol[:, 0] > 0  # the front (+x) or back face is seen
        face_y = ol[:, 1] > 0
        vis_x = np.where(np.abs(ol[:, 0]) > half[:, 0], 2 * half[:, 1], 0.0)  # length of the x-face
        vis_y = np.where(np.abs(ol[:, 1]) > half[:, 1], 2 * half[:, 0], 0.0)
        use_x = rng.random(k) * np.maximum(vis_x + vis_y, 1e-6) < vis_x
        use_x |= (vis_x + vis_y) == 0
        t = rng.uniform(-1.0, 1.0, k)
        lx = np.where(use_x, np.where(face_x, half[:, 0], -half[:, 0]), t * half[:, 0])
        ly = np.where(use_x, t * half[:, 1], np.where(face_y, half[:, 1], -half[:, 1]))
        px = scene.center[owner, 0] + cy * lx - sy * ly
        py = scene.center[owner, 1] + sy * lx + cy * ly
        pz = rng.uniform(0.3, 1.0, k) * np.minimum(scene.size[owner, 2], 1.5)
        pts = np.stack([px, py, pz], axis=1)
        rcs = _RCS_DBSM[labels[owner]] - 10 * np.log10(counts[np.searchsorted(idx, owner)])
        return pts, scene.velocity[owner], rcs, _MICRO_DOPPLER[labels[owner]]

    def _scenery_returns(self, scene: Scene, rng: np.random.Generator) -> tuple[F64, F64]:
        """Stationary returns from static scenery: the point of each box nearest to the sensor."""
        n0 = scene.n_objects
        c, h, yaw = scene.env_center[n0:], scene.env_half[n0:], scene.env_yaw[n0:]
        if not c.shape[0]:
            return np.zeros((0, 3)), np.zeros(0)
        cy, sy = np.cos(yaw), np.sin(yaw)
        o = self.origin[:2] - c[:, :2]
        lx = np.clip(cy * o[:, 0] + sy * o[:, 1], -h[:, 0], h[:, 0])
        ly = np.clip(-sy * o[:, 0] + cy * o[:, 1], -h[:, 1], h[:, 1])
        pts = np.stack([c[:, 0] + cy * lx - sy * ly, c[:, 1] + sy * lx + cy * ly,
                        np.clip(self.origin[2], c[:, 2] - h[:, 2], c[:, 2] + h[:, 2]) * 0.5], axis=1)
        q = self._to_sensor(pts)
        r = np.hypot(q[:, 0], q[:, 1])
        az = np.arctan2(q[:, 1], q[:, 0])
        ok = (np.abs(az) <= self.half_fov) & (r <= self.p.max_range_m) & (r >= self.p.min_range_m)
        ok &= rng.random(r.size) < 0.3
        return pts[ok], rng.uniform(0.0, 15.0, int(ok.sum()))
