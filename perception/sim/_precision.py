"""The precision of what the generator writes as doubles: ego poses and ground truth.

Transcendental functions (numpy's SIMD loops, libm) may differ by an ulp from one CPU model to
another, and the world model is full of them (road headings, weaving, arctan2 headings, the
rotation into ``base_link``). Left as computed, a ground-truth yaw written with ``repr()`` differs in
its last digit between an Intel and an AMD host. So the simulator rounds every double it hands to the
drive to a fixed decimal grid, far coarser than an ulp and far finer than anything a consumer can
measure:

============================  ================  ==========================================
what                          grid              an ulp of the value, for scale
============================  ================  ==========================================
positions, sizes (m)          1e-6 m (1 µm)     1.4e-14 m at 100 m, 1.1e-13 m at 1 km
velocities (m/s)              1e-6 m/s          3.6e-15 m/s at 30 m/s
angles (rad), yaw rate        1e-8 rad (/s)     4.4e-16 rad at pi
quaternion components         1e-9              1.1e-16
============================  ================  ==========================================

A few-ulp difference in the math then changes a written value only if the exact value lies within
those few ulps of a rounding tie (probability ~ ulp / grid, about 1e-7 per value), and then by one
grid step. Ground truth and ego poses are therefore the same bytes on any x86-64 CPU in practice,
and equal within one grid step always; :func:`round_ground_truth` and :func:`round_ego_pose` are
where it happens. Rounding is Python's ``round(x, n)`` (exact decimal rounding of the binary value,
half to even), so the written ``repr()`` is also short; a rounded zero is always +0.0. Sensor data is
not rounded further: points are float32 and pixels uint8, which already absorb ulp-level float64
differences except at rare ties (a float32 flips by one ulp with probability ~1e-8 per value); the
comparison of the bundled drive tolerates those (``tests/sim/drive_compare.py``).

The geometry the sensors see (the scene) is not rounded: ground truth is the scene's boxes to 1 µm.
"""

from __future__ import annotations

from perception.types import EgoPose, GroundTruth, GroundTruthObject, Transform

__all__ = [
    "ANGLE_DECIMALS",
    "LENGTH_DECIMALS",
    "QUATERNION_DECIMALS",
    "VELOCITY_DECIMALS",
    "round_ego_pose",
    "round_ground_truth",
]

LENGTH_DECIMALS = 6  # metres: 1 µm
VELOCITY_DECIMALS = 6  # metres per second
ANGLE_DECIMALS = 8  # radians, radians per second
QUATERNION_DECIMALS = 9  # unit quaternion components (the norm stays within 2e-9 of 1)


def _r(value: float, decimals: int) -> float:
    # + 0.0 turns -0.0 into 0.0: a zero's sign is rounding noise too (e.g. a lateral velocity of
    # -1e-17 on one CPU and +1e-17 on another), and repr() would write it
    return round(float(value), decimals) + 0.0


def _object(obj: GroundTruthObject) -> GroundTruthObject:
    c, s, v = obj.center, obj.size, obj.velocity
    return GroundTruthObject(
        track_id=obj.track_id,
        label=obj.label,
        center=(_r(c[0], LENGTH_DECIMALS), _r(c[1], LENGTH_DECIMALS), _r(c[2], LENGTH_DECIMALS)),
        size=(_r(s[0], LENGTH_DECIMALS), _r(s[1], LENGTH_DECIMALS), _r(s[2], LENGTH_DECIMALS)),
        yaw=_r(obj.yaw, ANGLE_DECIMALS),
        velocity=(_r(v[0], VELOCITY_DECIMALS), _r(v[1], VELOCITY_DECIMALS)),
    )


def round_ground_truth(gt: GroundTruth) -> GroundTruth:
    """``gt`` with centres and sizes to 1 µm, yaws to 1e-8 rad and velocities to 1e-6 m/s."""
    return GroundTruth(t_ns=gt.t_ns, objects=tuple(_object(o) for o in gt.objects))


def round_ego_pose(ego: EgoPose) -> EgoPose:
    """``ego`` with its translation to 1 µm, quaternion to 1e-9, velocity to 1e-6 m/s, yaw rate to 1e-8 rad/s."""
    t, q, v = ego.pose.translation, ego.pose.rotation, ego.linear_velocity
    pose = Transform(
        (_r(t[0], LENGTH_DECIMALS), _r(t[1], LENGTH_DECIMALS), _r(t[2], LENGTH_DECIMALS)),
        (_r(q[0], QUATERNION_DECIMALS), _r(q[1], QUATERNION_DECIMALS), _r(q[2], QUATERNION_DECIMALS),
         _r(q[3], QUATERNION_DECIMALS)),
    )
    return EgoPose(
        t_ns=ego.t_ns,
        pose=pose,
        linear_velocity=(_r(v[0], VELOCITY_DECIMALS), _r(v[1], VELOCITY_DECIMALS), _r(v[2], VELOCITY_DECIMALS)),
        yaw_rate=_r(ego.yaw_rate, ANGLE_DECIMALS),
    )
