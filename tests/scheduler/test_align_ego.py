"""The handed-in ego poses a frame takes: the nearest one (of two as near, the first handed in) and the
pose interpolated between them, whether the odometry comes in time order or not."""

from __future__ import annotations

import random

from perception.config import SensorConfig
from perception.scheduler import AlignCore, AlignStats
from perception.types import EgoPose, Transform, interpolate_ego

MS = 1_000_000


def pose(t_ns: int, x: float) -> EgoPose:
    return EgoPose(t_ns, Transform((x, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)), (1.0, 0.0, 0.0), 0.0)


def core() -> AlignCore:
    return AlignCore([SensorConfig("lidar", "lidar", "lidar_detector")], AlignStats(), ego_max_age_ns=None)


def nearest(kept: list[EgoPose], t: int) -> EgoPose:
    """One by one: the first kept pose of the smallest distance to ``t``."""
    return min(kept, key=lambda e: abs(e.t_ns - t))


def test_the_nearest_pose_is_the_first_handed_in_of_the_nearest_whatever_the_order() -> None:
    rng = random.Random(7)
    for trial in range(300):
        c = core()
        kept: list[EgoPose] = []
        shuffled = trial % 3 == 0  # else in time order, with repeated and equally distant times
        t = 0
        for i in range(rng.randint(1, 90)):
            t = rng.randint(0, 500) * MS if shuffled else t + rng.choice((0, 10, 10, 20)) * MS
            p = pose(t, float(i))  # x tells poses of one time apart
            c.add_ego(p)
            kept = [*kept, p][-64:]
            for q in (rng.randint(-50, 1000) * MS, t, t + 5 * MS, t - 5 * MS):
                got = c._frame_ego(q)
                assert got is nearest(kept, q), (trial, i, q)
                assert c._pose_at(q) == interpolate_ego(sorted(kept, key=lambda e: e.t_ns), q)
