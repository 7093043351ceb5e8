"""Synthetic sensor data for the modelkit tests: a small ray-casting lidar and a radar return model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    l: float  # noqa: E741 - length, as in l, w, h
    w: float
    h: float
    yaw: float
    bottom: float = 0.0  # height of the box bottom above the ground (wheels: ~0.2 for a car body)


def raycast_lidar(
    boxes: list[Box],
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
    """``[N,4]`` points of a spinning lidar at ``sensor_height`` over a ground plane with boxes.

    The ground is ``z = slope[0]*x + slope[1]*y`` in the ground frame; the returned points are in the
    sensor frame (ground frame shifted down by ``sensor_height``). Box bottoms follow the ground.
    """
    rng = np.random.default_rng(seed)
    el = np.deg2rad(np.linspace(fov[0], fov[1], beams))
    az = np.linspace(-np.pi, np.pi, azimuth_steps, endpoint=False)
    e, a = np.meshgrid(el, az, indexing="ij")
    d = np.stack([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)], axis=-1).reshape(-1, 3)
    o = np.array([0.0, 0.0, sensor_height])
    t_best = np.full(d.shape[0], np.inf)
    # Ground plane: n . p = 0 with n = (-sx, -sy, 1).
    n = np.array([-slope[0], -slope[1], 1.0])
    denom = d @ n
    with np.errstate(divide="ignore", invalid="ignore"):
        t_g = -(o @ n) / denom
    t_best = np.where((t_g > 0) & np.isfinite(t_g), t_g, t_best)
    intensity = np.where(np.isfinite(t_best), 0.1, 0.0)
    for b in boxes:
        base = slope[0] * b.x + slope[1] * b.y + b.bottom
        c, s = np.cos(b.yaw), np.sin(b.yaw)
        r = np.array([[c, s, 0], [-s, c, 0], [0, 0, 1]])  # world -> box
        ol = r @ (o - np.array([b.x, b.y, base + (b.h - b.bottom) / 2 + 0.0]))
        dl = d @ r.T
        half = np.array([b.l / 2, b.w / 2, (b.h - b.bottom) / 2])
        with np.errstate(divide="ignore", invalid="ignore"):
            t1 = (-half - ol) / dl
            t2 = (half - ol) / dl
        tmin = np.nanmax(np.minimum(t1, t2), axis=1)
        tmax = np.nanmin(np.maximum(t1, t2), axis=1)
        hit = (tmax >= tmin) & (tmin > 0) & (tmin < t_best)
        t_best = np.where(hit, tmin, t_best)
        intensity = np.where(hit, 0.5, intensity)
    ok = np.isfinite(t_best) & (t_best < max_range)
    pts = o + d[ok] * (t_best[ok, None] + rng.normal(0, noise, (int(ok.sum()), 1)))
    pts[:, 2] -= sensor_height
    return np.concatenate([pts, intensity[ok, None]], axis=1).astype(np.float32)


def radar_returns(
    objects: list[tuple[float, float, float, float, float, float]],
    *,
    per_object: int = 8,
    noise_vr: float = 0.05,
    seed: int = 0,
) -> F32:
    """``[N,5]`` radar rows for objects ``(x, y, l, w, vx, vy)`` (returns spread over the footprint)."""
    rng = np.random.default_rng(seed)
    rows = []
    for x, y, length, width, vx, vy in objects:
        px = x + rng.uniform(-length / 2, length / 2, per_object)
        py = y + rng.uniform(-width / 2, width / 2, per_object)
        pz = rng.uniform(-0.5, 0.5, per_object)
        rng3 = np.sqrt(px**2 + py**2 + pz**2)
        vr = (px * vx + py * vy) / rng3 + rng.normal(0, noise_vr, per_object)
        rcs = rng.normal(10.0, 2.0, per_object)
        rows.append(np.stack([px, py, pz, vr, rcs], axis=1))
    if not rows:
        return np.zeros((0, 5), np.float32)
    return np.concatenate(rows).astype(np.float32)
