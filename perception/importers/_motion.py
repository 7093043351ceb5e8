"""Motion helpers shared by the importers: ego velocity by finite differences, radar line-of-sight
velocity, and quaternion order conversion."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from scipy.spatial.transform import Rotation

from perception.types import EgoPose, Transform

__all__ = [
    "DEFAULT_BASELINE_NS",
    "compensate_radial_velocity",
    "ego_poses",
    "ego_velocity_at",
    "quat_from_wxyz",
    "radial_velocity",
    "rotation_of",
]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

#: Half-width of the finite-difference window: neighbours closer than this are skipped so that
#: densely stamped poses (several sensors, a 100 Hz /tf) do not turn pose jitter into velocity noise.
DEFAULT_BASELINE_NS = 50_000_000


def quat_from_wxyz(q: Sequence[float]) -> tuple[float, float, float, float]:
    """A scalar-first quaternion ``(w, x, y, z)`` (nuScenes, Eigen) as our ``(x, y, z, w)``."""
    if len(q) != 4:
        raise ValueError(f"a quaternion has 4 values, got {len(q)}")
    w, x, y, z = (float(v) for v in q)
    return (x, y, z, w)


def rotation_of(tf: Transform) -> Rotation:
    """The transform's rotation as a scipy :class:`Rotation` (raises ``ValueError`` on a zero quaternion)."""
    return Rotation.from_quat(np.asarray(tf.rotation, dtype=np.float64))


def ego_poses(
    times_ns: Sequence[int], poses: Sequence[Transform], *, baseline_ns: int = DEFAULT_BASELINE_NS
) -> list[EgoPose]:
    """Ego poses (``map <- base_link``) with velocities from windowed central finite differences.

    For pose ``i`` the velocity is ``(p[hi] - p[lo]) / (t[hi] - t[lo])`` where ``lo`` is the latest
    pose at least ``baseline_ns`` before ``t[i]`` and ``hi`` the earliest at least ``baseline_ns``
    after (clipped to the ends, so the first and last poses get one-sided differences). The linear
    velocity is rotated into ``base_link``; the yaw rate is the difference of the unwrapped yaw.
    Poses are sorted by time; duplicate times keep the first pose. A single pose has zero velocity.
    """
    if len(times_ns) != len(poses):
        raise ValueError(f"{len(times_ns)} times for {len(poses)} poses")
    if not poses:
        return []
    t_all = np.asarray(times_ns, dtype=np.int64)
    order = np.argsort(t_all, kind="stable")
    t_sorted = t_all[order]
    keep = np.ones(len(order), dtype=bool)
    keep[1:] = np.diff(t_sorted) != 0
    idx = order[keep]
    t = t_all[idx]
    chosen = [poses[i] for i in idx]
    n = len(t)
    pos = np.array([p.translation for p in chosen], dtype=np.float64)
    rot = Rotation.from_quat(np.array([p.rotation for p in chosen], dtype=np.float64))
    yaw = np.unwrap(np.array([p.yaw() for p in chosen], dtype=np.float64))
    lo = np.clip(np.searchsorted(t, t - baseline_ns, side="right") - 1, 0, n - 1)
    hi = np.clip(np.searchsorted(t, t + baseline_ns, side="left"), 0, n - 1)
    dt = (t[hi] - t[lo]).astype(np.float64) * 1e-9
    valid = dt > 0
    safe = np.where(valid, dt, 1.0)
    v_world = np.where(valid[:, None], (pos[hi] - pos[lo]) / safe[:, None], 0.0)
    yaw_rate = np.where(valid, (yaw[hi] - yaw[lo]) / safe, 0.0)
    v_body = rot.apply(v_world, inverse=True)
    return [
        EgoPose(
            t_ns=int(t[i]),
            pose=chosen[i],
            linear_velocity=(float(v_body[i, 0]), float(v_body[i, 1]), float(v_body[i, 2])),
            yaw_rate=float(yaw_rate[i]),
        )
        for i in range(n)
    ]


def ego_velocity_at(poses: Sequence[EgoPose], t_ns: int) -> tuple[F64, float]:
    """Ego linear velocity (``base_link``) and yaw rate at ``t_ns``, linearly interpolated (held at the ends)."""
    if not poses:
        raise ValueError("no ego poses")
    t = np.array([p.t_ns for p in poses], dtype=np.float64)
    v = np.array([p.linear_velocity for p in poses], dtype=np.float64)
    w = np.array([p.yaw_rate for p in poses], dtype=np.float64)
    out = np.array([np.interp(float(t_ns), t, v[:, k]) for k in range(3)], dtype=np.float64)
    return out, float(np.interp(float(t_ns), t, w))


def radial_velocity(xyz: npt.ArrayLike, vx: npt.ArrayLike, vy: npt.ArrayLike) -> F32:
    """Projection of the planar velocity ``(vx, vy, 0)`` on each point's line of sight (m/s, + = away).

    Points at the sensor origin get 0.
    """
    p = np.asarray(xyz, dtype=np.float64).reshape(-1, 3)
    r = np.linalg.norm(p, axis=1)
    dot = p[:, 0] * np.asarray(vx, dtype=np.float64) + p[:, 1] * np.asarray(vy, dtype=np.float64)
    out = np.divide(dot, r, out=np.zeros_like(r), where=r > 0)
    return out.astype(np.float32)


def compensate_radial_velocity(
    xyz: npt.ArrayLike,
    raw: npt.ArrayLike,
    extrinsic: Transform,
    ego_velocity: npt.ArrayLike,
    yaw_rate: float,
) -> F32:
    """Turn raw Doppler (relative to the moving sensor) into over-ground radial velocity.

    The sensor moves with ``v_s = v_ego + w x t_s`` (``base_link``, ``w = (0, 0, yaw_rate)``,
    ``t_s`` the sensor's mounting position); a static target then reads ``-v_s . u`` along the line
    of sight ``u``, so the compensated value is ``raw + v_s . u`` with ``v_s`` in the sensor frame.
    """
    p = np.asarray(xyz, dtype=np.float64).reshape(-1, 3)
    t_s = np.asarray(extrinsic.translation, dtype=np.float64)
    v_base = np.asarray(ego_velocity, dtype=np.float64) + np.cross([0.0, 0.0, float(yaw_rate)], t_s)
    v_sensor = rotation_of(extrinsic).apply(v_base, inverse=True)
    r = np.linalg.norm(p, axis=1)
    along = np.divide(p @ v_sensor, r, out=np.zeros_like(r), where=r > 0)
    out: F32 = (np.asarray(raw, dtype=np.float64) + along).astype(np.float32)
    return out
