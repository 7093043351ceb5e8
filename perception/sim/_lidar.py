"""Spinning multi-beam lidar: ray-cast against the ground plane and every box, nearest hit wins.

Rays are laid out column-major (azimuth column, then beam), which is also the output order. The
ground (``z = 0`` in ``base_link``) is analytic and its ranges are fixed for a mount, so they are
computed once. A level lidar (the usual roof mount) casts column by column
(:mod:`perception.sim._columncast`: a 2D slab test per column and box, then one band of beams per
pair), which keeps a 128-beam sweep cheap; a tilted one falls back to the general ray caster, with
boxes culled per envelope by azimuth sector and elevation band. The sweep is treated as
instantaneous at its capture time (no rolling-shutter motion distortion).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from perception.sim._columncast import ColumnCaster
from perception.sim._raycast import Rays, cast_pairs, expand_ranges, hit_geometry, matmul, take
from perception.sim._rig import SimLidarParams, SimSensor
from perception.sim._world import GroundSampler, Scene

__all__ = ["GROUND_REFLECTIVITY", "LidarModel"]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: Lidar reflectivity of the ground kinds (asphalt, white, yellow, bike lane, sidewalk, verge, concrete).
_DROP_K = 250.0  # return-strength scale of the dropout model

GROUND_REFLECTIVITY = np.array([0.08, 0.65, 0.5, 0.12, 0.22, 0.3, 0.2], dtype=np.float32)


class LidarModel:
    def __init__(self, cfg: SimSensor) -> None:
        assert isinstance(cfg.params, SimLidarParams)
        self.cfg = cfg
        self.p = p = cfg.params
        ext = cfg.extrinsic
        self.rot = ext.rotation_matrix()
        self.origin = np.asarray(ext.translation, dtype=np.float64)
        self.n_cols = round(360.0 / p.azimuth_step_deg)
        self.az0 = -np.pi
        self.az_step = 2 * np.pi / self.n_cols
        self.elev = np.radians(np.linspace(p.fov_down_deg, p.fov_up_deg, p.beams))  # ascending
        az = self.az0 + np.arange(self.n_cols) * self.az_step
        ce = np.cos(self.elev)
        d = np.stack(
            [np.cos(az)[:, None] * ce[None, :], np.sin(az)[:, None] * ce[None, :],
             np.broadcast_to(np.sin(self.elev)[None, :], (self.n_cols, p.beams))], axis=-1
        ).reshape(-1, 3)
        # sensor-frame directions with a zero 4th column: a point's row is one gather
        self.sensor_dirs4 = np.concatenate([d, np.zeros((d.shape[0], 1))], axis=1).astype(np.float32)
        self.dirs_base = matmul(d, self.rot.T).astype(np.float32)  # base_link
        self.dirs: Rays = tuple(np.ascontiguousarray(self.dirs_base[:, i]) for i in range(3))  # type: ignore[assignment]
        with np.errstate(divide="ignore"):
            tg = np.where(self.dirs[2] < -1e-6, -self.origin[2] / self.dirs[2], np.inf)
        self.ground_t = tg.astype(np.float32)
        self.ground_idx = np.nonzero(tg <= p.max_range_m + 1.0)[0]
        gp = self.origin + self.dirs_base[self.ground_idx] * tg[self.ground_idx, None]
        self.ground = GroundSampler(gp[:, 0], gp[:, 1])
        self.ground_cos = np.abs(self.dirs[2])
        # the ground never moves in base_link: its share of the return-strength exponent is fixed
        with np.errstate(divide="ignore"):
            inv = np.float32(30.0) / np.maximum(self.ground_t, np.float32(1.0))
        self.ground_expo = (self.ground_cos * inv * inv * np.float32(-_DROP_K)).astype(np.float32)
        # angular culling margin for a tilted mount (the elevation band assumes a level sensor)
        tilt = float(np.degrees(np.arccos(np.clip(self.rot[2, 2], -1, 1))))
        self.el_margin = np.radians(tilt + (p.fov_up_deg - p.fov_down_deg) / max(p.beams - 1, 1) + 0.5)
        # a level mount (yaw only) casts column by column
        self.columns: ColumnCaster | None = None
        if abs(self.rot[2, 2] - 1.0) < 1e-12:
            mount_yaw = float(np.arctan2(self.rot[1, 0], self.rot[0, 0]))
            self.columns = ColumnCaster(self.origin, self.az0 + mount_yaw, self.az_step, self.n_cols, self.elev,
                                        p.max_range_m)

    @property
    def n_rays(self) -> int:
        return int(self.dirs[0].shape[0])

    def _candidates(self, scene: Scene) -> tuple[I64, I64]:
        """(ray, envelope) pairs: for each envelope the rays in its azimuth sector and elevation band."""
        n_env = scene.env_center.shape[0]
        if n_env == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        c, h, yaw = scene.env_center, scene.env_half, scene.env_yaw
        signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], dtype=np.float64)
        cy, sy = np.cos(yaw)[:, None], np.sin(yaw)[:, None]
        lx, ly, lz = (signs[None, :, i] * h[:, None, i] for i in range(3))
        corners = np.stack(
            [c[:, None, 0] + cy * lx - sy * ly, c[:, None, 1] + sy * lx + cy * ly, c[:, None, 2] + lz], -1
        )
        rel = matmul(corners - self.origin, self.rot)  # sensor frame [E,8,3]
        crel = matmul(c - self.origin, self.rot)
        az_c = np.arctan2(crel[:, 1], crel[:, 0])
        az = np.arctan2(rel[..., 1], rel[..., 0])
        daz = (az - az_c[:, None] + np.pi) % (2 * np.pi) - np.pi
        az_lo, az_hi = az_c + daz.min(axis=1), az_c + daz.max(axis=1)
        rxy = np.hypot(rel[..., 0], rel[..., 1])
        # nearest horizontal distance to the footprint (box frame clamp), for the elevation band
        ox, oy = self.origin[0] - c[:, 0], self.origin[1] - c[:, 1]
        qx = np.clip(np.cos(yaw) * ox + np.sin(yaw) * oy, -h[:, 0], h[:, 0])
        qy = np.clip(-np.sin(yaw) * ox + np.cos(yaw) * oy, -h[:, 1], h[:, 1])
        dist = np.hypot(np.cos(yaw) * ox + np.sin(yaw) * oy - qx, -np.sin(yaw) * ox + np.cos(yaw) * oy - qy)
        r_min, r_max = dist, rxy.max(axis=1)
        z_lo, z_hi = rel[..., 2].min(axis=1), rel[..., 2].max(axis=1)
        el_hi = np.arctan2(z_hi, np.where(z_hi > 0, r_min, r_max)) + self.el_margin
        el_lo = np.arctan2(z_lo, np.where(z_lo > 0, r_max, r_min)) - self.el_margin
        b_lo = np.searchsorted(self.elev, el_lo)
        b_hi = np.searchsorted(self.elev, el_hi, side="right")
        inside = dist < 0.05
        j0 = np.floor((az_lo - self.az0) / self.az_step).astype(np.int64)
        j1 = np.ceil((az_hi - self.az0) / self.az_step).astype(np.int64)
        n_col = np.where(inside, self.n_cols, np.minimum(j1 - j0 + 1, self.n_cols))
        j0 = np.where(inside, 0, j0)
        n_beam = np.maximum(b_hi - b_lo, 0)
        use = ~(r_min > self.p.max_range_m + 1.0) & (n_beam > 0)
        env = np.nonzero(use)[0]
        # two-level expansion without divisions: envelope -> its columns -> each column's beam band
        g1, off1 = expand_ranges(n_col[env])
        e1 = env[g1]
        col = (j0[e1] + off1) % self.n_cols
        g2, off2 = expand_ranges(n_beam[e1])
        e2 = e1[g2]
        return (col * self.p.beams + b_lo[e1])[g2] + off2, e2

    def cast(self, scene: Scene, *, general: bool = False) -> tuple[F32, I64, I64, F32]:
        """Nearest hits of every ray: distance (ground or box, ``inf`` for none), the rays that hit a
        box, their part and ``|cos|`` of their incidence. ``general`` forces the general ray caster
        (the column caster's reference)."""
        if self.columns is not None and not general:
            h = self.columns.cast(scene, self.ground_t)
            return h.t, h.hit, h.part, h.cos
        best_t = self.ground_t.copy()
        best_part = np.full(self.n_rays, -1, dtype=np.int64)
        cast_pairs(self.origin, self.dirs, scene, *self._candidates(scene), best_t, best_part)
        hit = np.nonzero(best_part >= 0)[0]
        part = best_part[hit]
        *_, cos = hit_geometry(self.origin, take(self.dirs, hit), best_t[hit], part, scene)
        return best_t, hit, part, cos

    def capture(self, scene: Scene, rng: np.random.Generator, *, general: bool = False) -> F32:
        """One sweep at ``scene.t_ns``: ``[N,4]`` float32 ``x, y, z, intensity`` in the sensor frame."""
        p = self.p
        best_t, hit, part, c = self.cast(scene, general=general)
        # weak returns (dark, grazing, far) are lost more often; misses (t = inf) always:
        # p_drop = dropout + (1 - dropout) * exp(-K * reflectivity * cos(incidence) * (30 m / range)^2)
        refl = np.zeros(self.n_rays, dtype=np.float32)
        cos = self.ground_cos.copy()
        on_box = np.zeros(self.n_rays, dtype=bool)
        on_box[hit] = True
        free = np.nonzero(~on_box[self.ground_idx])[0]  # ground points not hidden by a box
        refl[self.ground_idx[free]] = GROUND_REFLECTIVITY[self.ground.material(scene, free)]
        expo = refl * self.ground_expo  # the ground's (0 off the ground); box hits are set next
        if hit.size:
            cos[hit] = c
            r_hit = scene.part_refl[part].astype(np.float32)
            refl[hit] = r_hit
            inv = np.float32(30.0) / np.maximum(best_t[hit], np.float32(1.0))
            expo[hit] = r_hit * c * inv * inv * np.float32(-_DROP_K)
        p_drop = np.exp(expo, out=expo)
        p_drop *= np.float32(1.0 - p.dropout)
        p_drop += np.float32(p.dropout)
        keep = rng.random(self.n_rays, dtype=np.float32) >= p_drop
        keep &= (best_t >= p.min_range_m) & (best_t <= p.max_range_m)
        k = np.nonzero(keep)[0]
        r = best_t[k] + rng.standard_normal(k.size, dtype=np.float32) * np.float32(p.range_noise_m)
        out: F32 = np.take(self.sensor_dirs4, k, axis=0)  # x, y, z, 0 (np.take: ~8x faster than [k] on rows)
        for axis in range(3):  # column by column: numpy is slow on [K,4] * [K,1]
            out[:, axis] *= r
        if p.quantization_m > 0:  # exact for power-of-two steps such as the default 1/256 m
            q = np.float32(p.quantization_m)
            out *= np.float32(1.0) / q
            np.rint(out, out=out)
            out *= q
        inten = refl[k] * (np.float32(0.35) + np.float32(0.65) * cos[k])
        np.minimum(inten, np.float32(1.0), out=inten)
        out[:, 3] = np.rint(inten * np.float32(255)) / np.float32(255)
        return out
