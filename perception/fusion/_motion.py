"""Ego motion between a sensor's capture time and the frame time.

Every sensor output is brought to ``base_link`` *at the frame time* ``t_f``. A sample captured at
``t_s`` is in ``base_link(t_s)``; the transform ``base_link(t_f) <- base_link(t_s)`` comes from, in order
of preference:

1. ego poses (``map <- base_link``) from ``ego_at(t)`` at both times: ``pose(t_f)^-1 @ pose(t_s)``;
2. otherwise the ego twist (``linear_velocity``, ``yaw_rate`` in ``base_link``) of the frame's ego pose
   (or of ``ego_at(t_f)``), integrated as a constant-twist planar arc over ``t_s - t_f``;
3. otherwise identity: the ego is assumed static.

The world pose ``map <- base_link(t_f)`` used by the tracker follows the same order (a frame pose at
another time is extrapolated with its twist); without any pose it is ``None``. A frame pose further than
``max_age_ns`` from the frame time (``live.ego_max_age_ms``) counts as none: odometry that stopped is
unknown ego motion, not its last twist extrapolated over the gap.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from perception.errors import PerceptionError
from perception.fusion._geometry import invert_transform
from perception.types import EgoPose, Frame, Transform

__all__ = ["EgoAt", "EgoMotion", "pose_matrix", "twist_transform"]

log = logging.getLogger(__name__)

F64 = npt.NDArray[np.float64]
EgoAt = Callable[[int], EgoPose | None]
_IDENTITY = np.eye(4)
_IDENTITY.setflags(write=False)


def pose_matrix(pose: Transform) -> F64:
    """``pose.matrix()`` in one array construction (it is computed for several times every frame)."""
    x, y, z, w = pose.rotation
    n = x * x + y * y + z * z + w * w
    q = 2.0 / n if n > 0.0 else 0.0
    tx, ty, tz = pose.translation
    return np.array(
        [
            [1 - q * (y * y + z * z), q * (x * y - z * w), q * (x * z + y * w), tx],
            [q * (x * y + z * w), 1 - q * (x * x + z * z), q * (y * z - x * w), ty],
            [q * (x * z - y * w), q * (y * z + x * w), 1 - q * (x * x + y * y), tz],
            [0.0, 0.0, 0.0, 1.0],
        ]
    )


def twist_transform(vx: float, vy: float, yaw_rate: float, dt: float) -> F64:
    """``base_link(t) <- base_link(t + dt)`` for a constant planar twist (body velocity, yaw rate)."""
    a = yaw_rate * dt
    if abs(a) < 1e-4:  # second-order expansion of the arc (the exact form cancels badly near 0)
        along, turn = dt * (1.0 - a * a / 6.0), 0.5 * dt * a
        dx, dy = vx * along - vy * turn, vy * along + vx * turn
    else:
        s, c = math.sin(a), math.cos(a)
        dx = (vx * s - vy * (1.0 - c)) / yaw_rate
        dy = (vx * (1.0 - c) + vy * s) / yaw_rate
    m = np.eye(4)
    c, s = math.cos(a), math.sin(a)
    m[0, 0], m[0, 1], m[1, 0], m[1, 1] = c, -s, s, c
    m[0, 3], m[1, 3] = dx, dy
    return m


class EgoMotion:
    """Ego motion around one frame time (see the module docstring); cheap to build once per frame."""

    def __init__(
        self,
        frame: Frame,
        ego_at: EgoAt | None,
        *,
        warn: Callable[[str], None] | None = None,
        max_age_ns: int | None = None,
    ) -> None:
        self.t_ns = frame.t_ns
        self._ego_at = ego_at
        self._warn = warn or log.warning
        self._cache: dict[int, F64 | None] = {}
        self._relative: dict[int, F64] = {}  # several sensors of a frame share a capture time
        ego_f = self._ego(frame.t_ns)
        frame_ego = frame.ego
        if frame_ego is not None and max_age_ns is not None and abs(frame.t_ns - frame_ego.t_ns) > max_age_ns:
            # odometry past its age limit (live.ego_max_age_ms): the frame's ego motion is unknown, never
            # the old twist extrapolated over the gap (a host's hand-built frame; assemblers drop it earlier)
            frame_ego = None
        twist_src = ego_f if ego_f is not None else frame_ego
        self._inv_f: F64 | None = None
        self.world_from_ego: F64 | None = None
        if ego_f is not None:
            pose_f = pose_matrix(ego_f.pose)
            self._cache[frame.t_ns] = pose_f
            self.world_from_ego = pose_f
            self._inv_f = invert_transform(pose_f)
        elif frame_ego is not None:
            dt = (frame.t_ns - frame_ego.t_ns) * 1e-9
            vx, vy = frame_ego.linear_velocity[0], frame_ego.linear_velocity[1]
            self.world_from_ego = pose_matrix(frame_ego.pose) @ twist_transform(vx, vy, frame_ego.yaw_rate, dt)
        self._twist: tuple[float, float, float] | None = None
        if twist_src is not None:
            v = twist_src.linear_velocity
            self._twist = (float(v[0]), float(v[1]), float(twist_src.yaw_rate))

    def _ego(self, t_ns: int) -> EgoPose | None:
        if self._ego_at is None:
            return None
        try:
            return self._ego_at(t_ns)
        except PerceptionError as exc:
            self._warn(f"ego pose unavailable at t={t_ns}: {exc}")
            return None

    def _pose(self, t_ns: int) -> F64 | None:
        if t_ns not in self._cache:
            ego = self._ego(t_ns)
            self._cache[t_ns] = pose_matrix(ego.pose) if ego is not None else None
        return self._cache[t_ns]

    @property
    def source(self) -> str:
        """``poses``, ``twist`` or ``static``: how :meth:`relative` compensates ego motion."""
        if self._inv_f is not None:
            return "poses"
        return "twist" if self._twist is not None else "static"

    def relative(self, t_ns: int) -> F64:
        """``base_link(t_frame) <- base_link(t_ns)`` (read-only; identity when ``t_ns`` is the frame time)."""
        out = self._relative.get(t_ns)
        if out is None:
            out = self._relative[t_ns] = self._compute_relative(t_ns)
            out.setflags(write=False)
        return out

    def _compute_relative(self, t_ns: int) -> F64:
        if t_ns == self.t_ns:
            return _IDENTITY
        if self._inv_f is not None and self._ego_at is not None:
            pose_s = self._pose(t_ns)
            if pose_s is not None:
                out: F64 = self._inv_f @ pose_s
                return out
        if self._twist is not None:
            vx, vy, w = self._twist
            return twist_transform(vx, vy, w, (t_ns - self.t_ns) * 1e-9)
        return _IDENTITY
