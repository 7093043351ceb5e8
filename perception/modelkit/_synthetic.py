"""Synthetic sensor data for model tests and benchmarks: a small ray-casting lidar and radar returns.

Deliberately simple (flat or planar-sloped ground, axis-aligned-in-yaw boxes, Gaussian range noise), so
a test can state exactly what the detector should recover. The full drive simulator is
:mod:`perception.sim`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["SyntheticBox", "synthetic_lidar_sweep", "synthetic_radar_returns"]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class SyntheticBox:
    """A box standing on the ground: centre ``x, y`` (m), size ``l, w, h``, ``yaw`` (rad)."""

    x: float
    y: float
    l: float  # noqa: E741 - length, as in l, w, h
    w: float
    h: float
    yaw: float
    bottom: float = 0.0  # clearance under the box (m)


def synthetic_lidar_sweep(
    boxes: Sequence[SyntheticBox],
    *,
    sensor_height: float = 1.8,
    beams: int = 32,
    fov: tuple[float, float] = (-25.0, 10.0),
    azimuth_steps: int = 1800,
    max_range: float = 100.0,
    slope: tuple[float, float] = (0.0, 0.0),
    noise: float = 0.02,
    seed: int = 0,
) -> F32:
    """``[N,4]`` points (x, y, z, intensity) of a spinning lidar ``sensor_height`` above the ground.

    The ground is ``z = slope[0]*x + slope[1]*y`` under the sensor; points are returned in the sensor
    frame (level, at the origin). Box bottoms follow the ground. Nearest hit per ray wins.
    """
    rng = np.random.default_rng(seed)
    el = np.deg2rad(np.linspace(fov[0], fov[1], beams))
    az = np.linspace(-np.pi, np.pi, azimuth_steps, endpoint=False)
    e, a = np.meshgrid(el, az, indexing="ij")
    d = np.stack([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)], axis=-1).reshape(-1, 3)
    origin = np.array([0.0, 0.0, sensor_height])
    normal = np.array([-slope[0], -slope[1], 1.0])
    with np.errstate(divide="ignore", invalid="ignore"):
        t_ground = -(origin @ normal) / (d @ normal)
    t_best: F64 = np.where((t_ground > 0) & np.isfinite(t_ground), t_ground, np.inf)
    intensity: F64 = np.where(np.isfinite(t_best), 0.1, 0.0)
    for b in boxes:
        base = slope[0] * b.x + slope[1] * b.y + b.bottom
        c, s = np.cos(b.yaw), np.sin(b.yaw)
        to_box = np.array([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]])
        o_local = to_box @ (origin - np.array([b.x, b.y, base + (b.h - b.bottom) / 2]))
        d_local = d @ to_box.T
        half = np.array([b.l / 2, b.w / 2, (b.h - b.bottom) / 2])
        with np.errstate(divide="ignore", invalid="ignore"):
            t1 = (-half - o_local) / d_local
            t2 = (half - o_local) / d_local
        t_near = np.nanmax(np.minimum(t1, t2), axis=1)
        t_far = np.nanmin(np.maximum(t1, t2), axis=1)
        hit = (t_far >= t_near) & (t_near > 0) & (t_near < t_best)
        t_best = np.where(hit, t_near, t_best)
        intensity = np.where(hit, 0.5, intensity)
    ok = np.isfinite(t_best) & (t_best < max_range)
    pts = origin + d[ok] * (t_best[ok, None] + rng.normal(0.0, noise, (int(ok.sum()), 1)))
    pts[:, 2] -= sensor_height
    out: F32 = np.concatenate([pts, intensity[ok, None]], axis=1).astype(np.float32)
    return out


def synthetic_radar_returns(
    objects: Sequence[tuple[float, float, float, float, float, float]],
    *,
    per_object: int = 8,
    noise_vr: float = 0.05,
    rcs_db: float = 10.0,
    seed: int = 0,
) -> F32:
    """``[N,5]`` radar rows (x, y, z, radial_velocity, rcs) for objects ``(x, y, l, w, vx, vy)``.

    Returns are spread uniformly over each object's footprint (axis-aligned), their radial velocity is
    the over-ground velocity projected on the line of sight (ego-compensated) plus noise.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for x, y, length, width, vx, vy in objects:
        px = x + rng.uniform(-length / 2, length / 2, per_object)
        py = y + rng.uniform(-width / 2, width / 2, per_object)
        pz = rng.uniform(-0.5, 0.5, per_object)
        rng3 = np.sqrt(px**2 + py**2 + pz**2)
        vr = (px * vx + py * vy) / rng3 + rng.normal(0.0, noise_vr, per_object)
        rcs = rng.normal(rcs_db, 2.0, per_object)
        rows.append(np.stack([px, py, pz, vr, rcs], axis=1))
    if not rows:
        return np.zeros((0, 5), np.float32)
    out: F32 = np.concatenate(rows).astype(np.float32)
    return out
