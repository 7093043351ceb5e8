"""Vectorised ray casting against z-rotated boxes (slab method), shared by the lidar and the camera.

Rays come in blocks (the rays a culling step found may reach one envelope); each block is tested
against the envelope box, and only the rays that hit it (closer than the best hit so far) are tested
against the envelope's parts. The nearest hit wins, which is what makes occlusion exact.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from perception.sim._world import Scene

__all__ = ["Rays", "cast", "cast_pairs", "expand_ranges", "hit_geometry", "matmul", "slab", "take"]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

_EPS = 1e-3
BIG = 4096  # pairs of one envelope above which cast_pairs tests it on its own
CHUNK = 1 << 19  # (ray, envelope) pairs per vectorised pass


Rays = tuple[F32, F32, F32]  # direction components, struct-of-arrays (cheap gathers)


def matmul(a: npt.NDArray[np.float64] | F32, b: F64) -> F64:
    """``a @ b`` over the last axis without BLAS, so results never depend on BLAS threading."""
    out: F64 = np.einsum("...j,jk->...k", a, b)
    return out


def take(rays: Rays, idx: I64 | npt.NDArray[np.bool_]) -> Rays:
    return rays[0][idx], rays[1][idx], rays[2][idx]


def slab(origin: F64, rays: Rays, center: F64, half: F64, yaw: F64 | float) -> F32:
    """Entry distance of rays ``origin + t * d`` into boxes (``inf`` where they miss or start inside).

    One box (``center [3]``, ``half [3]``, scalar ``yaw``) gives ``[K]``; ``P`` boxes (``[P,3]``,
    ``[P,3]``, ``[P]``) give ``[P,K]`` (boxes first: numpy's inner loops then run along the rays,
    several times faster than ``[K,P]`` with a handful of boxes).
    """
    yaw_a = np.asarray(yaw, dtype=np.float64)
    c, s = np.cos(yaw_a).astype(np.float32), np.sin(yaw_a).astype(np.float32)
    rel = (origin - np.asarray(center, dtype=np.float64)).T
    lx = (c * rel[0] + s * rel[1]).astype(np.float32)
    ly = (c * rel[1] - s * rel[0]).astype(np.float32)
    lz = rel[2].astype(np.float32)
    h = np.asarray(half, dtype=np.float32).T
    rx, ry, rz = rays
    if yaw_a.ndim:
        c, s, lx, ly, lz, h = c[:, None], s[:, None], lx[:, None], ly[:, None], lz[:, None], h[:, :, None]
    dx = rx * c + ry * s
    dy = ry * c - rx * s
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.float32(1.0) / dx
        t1 = (-h[0] - lx) * inv
        t2 = (h[0] - lx) * inv
        tn = np.minimum(t1, t2)
        tf = np.maximum(t1, t2)
        inv = np.float32(1.0) / dy
        t1 = (-h[1] - ly) * inv
        t2 = (h[1] - ly) * inv
        np.maximum(tn, np.minimum(t1, t2), out=tn)
        np.minimum(tf, np.maximum(t1, t2), out=tf)
        inv = np.float32(1.0) / rz
        t1 = (-h[2] - lz) * inv
        t2 = (h[2] - lz) * inv
        np.maximum(tn, np.minimum(t1, t2), out=tn)
        np.minimum(tf, np.maximum(t1, t2), out=tf)
        hit = (tn <= tf) & (tn > _EPS)
    return np.where(hit, tn, np.float32(np.inf))


def cast(
    origin: F64,
    dirs: Rays,
    scene: Scene,
    candidates: Iterable[tuple[int, I64]],
    best_t: F32,
    best_part: I64,
) -> None:
    """Cast rays ``dirs`` (unit, ``base_link``) from ``origin``; update ``best_t``/``best_part`` in place.

    ``candidates`` yields ``(envelope, ray indices)`` pairs from the caller's culling.
    """
    for env, idx in candidates:
        if idx.size == 0:
            continue
        d = take(dirs, idx)
        t = slab(origin, d, scene.env_center[env], scene.env_half[env], float(scene.env_yaw[env]))
        closer = t < best_t[idx]
        if not closer.any():
            continue
        p0, p1 = scene.env_parts[env]
        if p1 - p0 == 1 and env >= scene.n_objects:  # scenery: the envelope is the part
            sel = idx[closer]
            best_t[sel] = t[closer]
            best_part[sel] = p0
            continue
        sel, d = idx[closer], take(d, closer)
        tp = slab(origin, d, scene.part_center[p0:p1], scene.part_half[p0:p1], scene.part_yaw[p0:p1])
        tk, k = _first_min(tp)
        better = tk < best_t[sel]
        hit = sel[better]
        best_t[hit] = tk[better]
        best_part[hit] = p0 + k[better]


def _first_min(t: F32) -> tuple[F32, I64]:
    """Per column of ``t [P,K]``: the minimum and the first row that holds it (``argmin`` semantics)."""
    best = t[0].copy()
    arg = np.zeros(t.shape[1], dtype=np.int64)
    for j in range(1, t.shape[0]):
        closer = t[j] < best
        best[closer] = t[j][closer]
        arg[closer] = j
    return best, arg


def hit_geometry(origin: F64, dirs: Rays, t: F32, part: I64, scene: Scene) -> tuple[F32, F32, F32, I64, F32]:
    """For rays that hit parts: normalised local hit coordinates ``u, v, w`` (faces at +-1), the face
    axis (0 front/back, 1 sides, 2 top/bottom) and ``|cos|`` of the incidence angle."""
    yaw = scene.part_yaw.astype(np.float32)
    cy, sy = np.cos(yaw)[part], np.sin(yaw)[part]
    pc = (origin - scene.part_center).astype(np.float32)  # [P,3], gathered per column
    half = np.maximum(scene.part_half, 1e-3).astype(np.float32)
    dx, dy, dz = dirs
    rx = pc[:, 0][part] + dx * t
    ry = pc[:, 1][part] + dy * t
    rz = pc[:, 2][part] + dz * t
    u = (cy * rx + sy * ry) / half[:, 0][part]
    v = (cy * ry - sy * rx) / half[:, 1][part]
    w = rz / half[:, 2][part]
    au, av, aw = np.abs(u), np.abs(v), np.abs(w)
    axis = np.where((au >= av) & (au >= aw), 0, np.where(av >= aw, 1, 2))
    cos = np.where(
        axis == 0,
        np.abs(cy * dx + sy * dy),
        np.where(axis == 1, np.abs(cy * dy - sy * dx), np.abs(dz)),
    )
    return u, v, w, axis, cos.astype(np.float32)


def expand_ranges(counts: I64) -> tuple[I64, I64]:
    """``(group, offset)`` for ``counts[g]`` consecutive items per group ``g`` (vectorised ranges)."""
    total = int(counts.sum())
    group = np.repeat(np.arange(counts.size), counts)
    first = np.cumsum(counts) - counts
    offset = np.arange(total, dtype=np.int64) - first[group]
    return group, offset


def _slab_pairs(origin: F64, rays: Rays, box: tuple[F32, ...], sel: I64) -> F32:
    """Elementwise slab test: ray ``k`` against box ``sel[k]`` of ``box = (cx, cy, cz, hx, hy, hz, cos, sin)``."""
    cx, cy, cz, hx, hy, hz, cs, sn = (a[sel] for a in box)
    ox, oy, oz = (np.float32(v) for v in origin)
    rx, ry, rz = rays
    px, py = ox - cx, oy - cy
    lx = cs * px + sn * py
    ly = cs * py - sn * px
    lz = oz - cz
    dx = cs * rx + sn * ry
    dy = cs * ry - sn * rx
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.float32(1.0) / dx
        t1 = (-hx - lx) * inv
        t2 = (hx - lx) * inv
        tn = np.minimum(t1, t2)
        tf = np.maximum(t1, t2)
        inv = np.float32(1.0) / dy
        t1 = (-hy - ly) * inv
        t2 = (hy - ly) * inv
        np.maximum(tn, np.minimum(t1, t2), out=tn)
        np.minimum(tf, np.maximum(t1, t2), out=tf)
        inv = np.float32(1.0) / rz
        t1 = (-hz - lz) * inv
        t2 = (hz - lz) * inv
        np.maximum(tn, np.minimum(t1, t2), out=tn)
        np.minimum(tf, np.maximum(t1, t2), out=tf)
        hit = (tn <= tf) & (tn > _EPS)
    return np.where(hit, tn, np.float32(np.inf))


def _boxes(center: F64, half: F64, yaw: F64) -> tuple[F32, ...]:
    f = np.float32
    return (center[:, 0].astype(f), center[:, 1].astype(f), center[:, 2].astype(f), half[:, 0].astype(f),
            half[:, 1].astype(f), half[:, 2].astype(f), np.cos(yaw).astype(f), np.sin(yaw).astype(f))


def cast_pairs(origin: F64, dirs: Rays, scene: Scene, ray_idx: I64, env_idx: I64, best_t: F32,
               best_part: I64) -> None:
    """Like :func:`cast`, with the candidate (ray, envelope) pairs given as two flat arrays.

    All pairs are tested in one vectorised pass, then the parts of the envelopes that were hit
    (closer than ``best_t``) in a second; each ray keeps its nearest hit (``np.minimum.at``).
    """
    if not ray_idx.size:
        return
    # large envelopes (facades, near trucks) are cheaper with scalar box parameters
    counts = np.bincount(env_idx, minlength=scene.env_center.shape[0])
    big = np.nonzero(counts >= BIG)[0]
    if big.size:
        starts = np.searchsorted(env_idx, big)  # pairs are grouped by envelope, ascending
        cast(origin, dirs, scene, ((int(e), ray_idx[a : a + counts[e]]) for e, a in zip(big, starts, strict=True)),
             best_t, best_part)
        small = counts[env_idx] < BIG
        ray_idx, env_idx = ray_idx[small], env_idx[small]
        if not ray_idx.size:
            return
    env_box = _boxes(scene.env_center, scene.env_half, scene.env_yaw)
    part_box = _boxes(scene.part_center, scene.part_half, scene.part_yaw)
    for a in range(0, ray_idx.size, CHUNK):  # bounded temporaries; the running minimum is exact
        _cast_chunk(origin, dirs, scene, ray_idx[a : a + CHUNK], env_idx[a : a + CHUNK], env_box, part_box,
                    best_t, best_part)


def _cast_chunk(origin: F64, dirs: Rays, scene: Scene, ray_idx: I64, env_idx: I64, env_box: tuple[F32, ...],
                part_box: tuple[F32, ...], best_t: F32, best_part: I64) -> None:
    d = take(dirs, ray_idx)
    t = _slab_pairs(origin, d, env_box, env_idx)
    keep = np.nonzero(t < best_t[ray_idx])[0]
    if not keep.size:
        return
    ray_idx, env_idx, t = ray_idx[keep], env_idx[keep], t[keep]
    p0 = scene.env_parts[env_idx, 0]
    count = scene.env_parts[env_idx, 1] - p0
    single = (count == 1) & (env_idx >= scene.n_objects)  # scenery: the envelope is the part
    multi = np.nonzero(~single)[0]
    rays_all, t_all, part_all = [ray_idx[single]], [t[single]], [p0[single]]
    if multi.size:
        group, offset = expand_ranges(count[multi])
        pr = ray_idx[multi][group]
        part = p0[multi][group] + offset
        tp = _slab_pairs(origin, take(dirs, pr), part_box, part)
        rays_all.append(pr)
        t_all.append(tp)
        part_all.append(part)
    r = np.concatenate(rays_all)
    tt = np.concatenate(t_all)
    pp = np.concatenate(part_all)
    ok = np.isfinite(tt)
    r, tt, pp = r[ok], tt[ok], pp[ok]
    np.minimum.at(best_t, r, tt)
    win = tt == best_t[r]
    best_part[r[win]] = pp[win]
