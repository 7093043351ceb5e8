"""Hand-built rigs and sensor results for unit tests and the fusion benchmark (no models, no Triton).

Objects are described in ``base_link`` (:class:`SimObject`); ``*_result`` render what an ideal model
of each sensor kind would output for them (optionally with noise), as :class:`SensorResult` values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from perception.fusion._geometry import box_corners, invert_transform, project_boxes, transform_points
from perception.types import (
    LABELS,
    CameraCalibration,
    EgoPose,
    GroundTruth,
    GroundTruthObject,
    SensorKind,
    SensorResult,
    SensorSpec,
    SensorStatus,
    Transform,
)

__all__ = [
    "SimObject",
    "TrafficScene",
    "camera_result",
    "imperfect",
    "lidar_result",
    "make_rig",
    "missing",
    "move",
    "radar_result",
    "scene_results",
    "traffic_scene",
]

F64 = npt.NDArray[np.float64]

#: Rotation camera body (x fwd, y left, z up) <- optical (z fwd, x right, y down).
_BODY_FROM_OPTICAL = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


@dataclass(frozen=True, slots=True)
class SimObject:
    label: str
    center: tuple[float, float, float]
    size: tuple[float, float, float] = (4.5, 1.85, 1.55)
    yaw: float = 0.0
    velocity: tuple[float, float] = (0.0, 0.0)

    def box(self) -> list[float]:
        return [*self.center, *self.size, self.yaw]


def move(objects: Sequence[SimObject], dt: float) -> list[SimObject]:
    """Objects after ``dt`` seconds at constant velocity (static ego)."""
    return [
        SimObject(
            o.label,
            (o.center[0] + o.velocity[0] * dt, o.center[1] + o.velocity[1] * dt, o.center[2]),
            o.size,
            o.yaw,
            o.velocity,
        )
        for o in objects
    ]


def _camera_spec(
    name: str, xyz: tuple[float, float, float], yaw: float, width: int, height: int, hfov_deg: float
) -> SensorSpec:
    body = Transform.from_xyz_rpy(xyz, (0.0, 0.0, yaw)).matrix()
    body[:3, :3] = body[:3, :3] @ _BODY_FROM_OPTICAL
    f = (width / 2) / math.tan(math.radians(hfov_deg) / 2)
    cal = CameraCalibration(width, height, (f, 0.0, width / 2, 0.0, f, height / 2, 0.0, 0.0, 1.0))
    return SensorSpec(
        name,
        SensorKind.CAMERA,
        f"{name}_optical",
        Transform.from_matrix(body),
        f"/sensors/{name}/image/compressed",
        cal,
        10.0,
    )


def make_rig(
    *,
    cameras: int = 2,
    radars: int = 2,
    lidar: bool = True,
    width: int = 640,
    height: int = 360,
    hfov_deg: float = 90.0,
) -> dict[str, SensorSpec]:
    """lidar_top; cam_front/cam_back (then left/right); radar_front/radar_rear (then left/right)."""
    rig: dict[str, SensorSpec] = {}
    if lidar:
        rig["lidar_top"] = SensorSpec(
            "lidar_top",
            SensorKind.LIDAR,
            "lidar_top",
            Transform.from_xyz_rpy((1.0, 0.0, 1.9), (0.0, 0.0, 0.0)),
            "/sensors/lidar_top/points",
            rate_hz=10.0,
        )
    cams = [
        ("cam_front", (1.5, 0.0, 1.6), 0.0),
        ("cam_back", (-1.0, 0.0, 1.6), math.pi),
        ("cam_left", (0.5, 0.9, 1.6), math.pi / 2),
        ("cam_right", (0.5, -0.9, 1.6), -math.pi / 2),
    ]
    for name, xyz, yaw in cams[:cameras]:
        rig[name] = _camera_spec(name, xyz, yaw, width, height, hfov_deg)
    rads = [
        ("radar_front", (3.7, 0.0, 0.5), 0.0),
        ("radar_rear", (-1.0, 0.0, 0.5), math.pi),
        ("radar_left", (2.0, 0.9, 0.5), math.pi / 2),
        ("radar_right", (2.0, -0.9, 0.5), -math.pi / 2),
    ]
    for name, xyz, yaw in rads[:radars]:
        rig[name] = SensorSpec(
            name,
            SensorKind.RADAR,
            name,
            Transform.from_xyz_rpy(xyz, (0.0, 0.0, yaw)),
            f"/sensors/{name}/points",
            rate_hz=13.0,
        )
    return rig


def _rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def missing(name: str, status: SensorStatus = SensorStatus.MISSING) -> SensorResult:
    return SensorResult(sensor=name, status=status)


def lidar_result(
    rig: Mapping[str, SensorSpec],
    name: str,
    objects: Sequence[SimObject],
    *,
    t_ns: int | None = None,
    scores: float | Sequence[float] = 0.8,
    labels: Sequence[str] | None = None,
    noise: float = 0.0,
    seed: int | np.random.Generator | None = 0,
    max_range: float = 80.0,
) -> SensorResult:
    """Boxes of ``objects`` (within range) in the lidar frame; yaw folded to ``(-pi/2, pi/2]`` like a sweep."""
    sensor_from_base = invert_transform(rig[name].extrinsic.matrix())
    boxes = np.asarray([o.box() for o in objects], dtype=np.float64).reshape(-1, 7)
    lab = np.asarray([LABELS.index(x) for x in (labels or [o.label for o in objects])], dtype=np.int32)
    sc = np.broadcast_to(np.asarray(scores, dtype=np.float64), (len(objects),)).copy()
    keep = np.hypot(boxes[:, 0], boxes[:, 1]) <= max_range
    boxes, lab, sc = boxes[keep], lab[keep], sc[keep]
    out = boxes.copy()
    out[:, :3] = transform_points(sensor_from_base, boxes[:, :3])
    out[:, 6] = boxes[:, 6] - math.atan2(sensor_from_base[1, 0], sensor_from_base[0, 0])
    out[:, 6] = -((-out[:, 6] + np.pi / 2) % np.pi - np.pi / 2)  # (-pi/2, pi/2]
    if noise > 0:
        out[:, :2] += _rng(seed).normal(0.0, noise, (out.shape[0], 2))
    return SensorResult(
        sensor=name,
        status=SensorStatus.OK,
        outputs={"BOXES": out.astype(np.float32), "LABELS": lab, "SCORES": sc.astype(np.float32)},
        sample_t_ns=t_ns,
    )


def camera_result(
    rig: Mapping[str, SensorSpec],
    name: str,
    objects: Sequence[SimObject],
    *,
    t_ns: int | None = None,
    scores: float | Sequence[float] = 0.9,
    labels: Sequence[str] | None = None,
    pixel_noise: float = 0.0,
    seed: int | np.random.Generator | None = 0,
    rows: int = 100,
) -> SensorResult:
    """2D boxes of the projected 3D boxes inside the image (padded to ``rows`` like the model's output)."""
    spec = rig[name]
    assert spec.calibration is not None
    cal = spec.calibration
    boxes = np.asarray([o.box() for o in objects], dtype=np.float64).reshape(-1, 7)
    lab = np.asarray([LABELS.index(x) for x in (labels or [o.label for o in objects])], dtype=np.int32)
    sc = np.broadcast_to(np.asarray(scores, dtype=np.float64), (len(objects),)).copy()
    proj = project_boxes(boxes, invert_transform(spec.extrinsic.matrix()), cal.matrix(), cal.width, cal.height)
    keep = proj.in_image & (proj.depth > 0.5)
    b = proj.boxes[keep]
    if pixel_noise > 0:
        b = b + _rng(seed).normal(0.0, pixel_noise, b.shape)
        b[:, [0, 2]] = np.clip(b[:, [0, 2]], 0, cal.width)
        b[:, [1, 3]] = np.clip(b[:, [1, 3]], 0, cal.height)
    count = min(int(keep.sum()), rows)
    out_boxes = np.zeros((rows, 4), np.float32)
    out_scores = np.zeros(rows, np.float32)
    out_labels = np.zeros(rows, np.int32)
    out_boxes[:count] = b[:count]
    out_scores[:count] = sc[keep][:count]
    out_labels[:count] = lab[keep][:count]
    return SensorResult(
        sensor=name,
        status=SensorStatus.OK,
        outputs={
            "BOXES": out_boxes,
            "SCORES": out_scores,
            "LABELS": out_labels,
            "COUNT": np.asarray([count], np.int32),
        },
        sample_t_ns=t_ns,
    )


def radar_result(
    rig: Mapping[str, SensorSpec],
    name: str,
    objects: Sequence[SimObject],
    *,
    t_ns: int | None = None,
    full_velocity: bool | Sequence[bool] = True,
    scores: float | Sequence[float] = 0.8,
    fov_deg: float = 120.0,
    max_range: float = 90.0,
    offsets: Sequence[tuple[float, float]] | None = None,
    rcs: float = 10.0,
    returns: int = 1,
) -> SensorResult:
    """One radar object per visible object, at the point of its box nearest the radar (the radar frame),
    each formed from ``returns`` returns.

    ``offsets`` adds ``(along, across)`` metres to each position relative to the line of sight.
    """
    ext = rig[name].extrinsic.matrix()
    sensor_from_base = invert_transform(ext)
    origin = ext[:3, 3]
    pos, vr, vel, sc = [], [], [], []
    full = np.broadcast_to(np.asarray(full_velocity, dtype=bool), (len(objects),))
    scores_arr = np.broadcast_to(np.asarray(scores, dtype=np.float64), (len(objects),))
    for i, o in enumerate(objects):
        c = np.asarray(o.center, dtype=np.float64)
        cy, sy = math.cos(o.yaw), math.sin(o.yaw)
        rel = origin[:2] - c[:2]
        local = np.array([cy * rel[0] + sy * rel[1], -sy * rel[0] + cy * rel[1]])
        local = np.clip(local, [-o.size[0] / 2, -o.size[1] / 2], [o.size[0] / 2, o.size[1] / 2])
        p = c.copy()
        p[:2] = c[:2] + np.array([cy * local[0] - sy * local[1], sy * local[0] + cy * local[1]])
        los = p[:2] - origin[:2]
        u = los / max(float(np.hypot(*los)), 1e-9)
        if offsets is not None:
            along, across = offsets[i]
            p[:2] += along * u + across * np.array([-u[1], u[0]])
        ps = transform_points(sensor_from_base, p)
        if np.hypot(ps[0], ps[1]) > max_range or abs(math.degrees(math.atan2(ps[1], ps[0]))) > fov_deg / 2:
            continue
        v = np.asarray(o.velocity, dtype=np.float64)
        u_sensor = ps / np.linalg.norm(ps)
        v_sensor = sensor_from_base[:3, :3] @ np.array([v[0], v[1], 0.0])
        pos.append(ps)
        vr.append(float(u_sensor @ v_sensor))
        vel.append(v_sensor[:2] if full[i] else np.array([np.nan, np.nan]))
        sc.append(scores_arr[i])
    k = len(pos)
    return SensorResult(
        sensor=name,
        status=SensorStatus.OK,
        outputs={
            "POSITIONS": np.asarray(pos, np.float32).reshape(k, 3),
            "RADIAL_VELOCITY": np.asarray(vr, np.float32).reshape(k),
            "VELOCITY": np.asarray(vel, np.float32).reshape(k, 2),
            "RCS": np.full(k, rcs, np.float32),
            "SCORES": np.asarray(sc, np.float32).reshape(k),
            "RETURNS": np.full(k, returns, np.int32),
        },
        sample_t_ns=t_ns,
    )


def corners_of(objects: Sequence[SimObject]) -> F64:
    """``[N,8,3]`` corners (for tests)."""
    return box_corners(np.asarray([o.box() for o in objects], dtype=np.float64).reshape(-1, 7))


# ---------------------------------------------------------------------------------------------
# A moving traffic scene (benchmark, tracking tests)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrafficScene:
    """Objects moving at constant velocity in the world; the ego drives along +x at ``ego_speed``.

    ``world`` objects are at time 0; :meth:`objects_at` gives them in ``base_link`` at any time and
    :meth:`ego_at` the ego pose (``map <- base_link``), as a drive reader would.
    """

    world: tuple[SimObject, ...]
    ego_speed: float = 10.0
    period: float = 150.0

    def ego_x(self, t_ns: int) -> float:
        return self.ego_speed * t_ns * 1e-9

    def ego_at(self, t_ns: int) -> EgoPose:
        return EgoPose(t_ns, Transform((self.ego_x(t_ns), 0.0, 0.0)), (self.ego_speed, 0.0, 0.0), 0.0)

    def objects_at(self, t_ns: int) -> list[SimObject]:
        """Objects in ``base_link``; the road is periodic (``x`` wraps within ``+-period/2`` of the ego)."""
        ex = self.ego_x(t_ns)
        moved = move(self.world, t_ns * 1e-9)
        half = 0.5 * self.period
        return [
            SimObject(
                o.label,
                ((o.center[0] - ex + half) % self.period - half, o.center[1], o.center[2]),
                o.size,
                o.yaw,
                o.velocity,
            )
            for o in moved
        ]

    def ground_truth(self, t_ns: int) -> GroundTruth:
        return GroundTruth(
            t_ns,
            tuple(
                GroundTruthObject(i + 1, o.label, o.center, o.size, o.yaw, o.velocity)
                for i, o in enumerate(self.objects_at(t_ns))
            ),
        )


def traffic_scene(n: int = 50, *, seed: int = 0, ego_speed: float = 10.0) -> TrafficScene:
    """``n`` road users that never collide: vehicles in 4 lanes (one speed per lane), cyclists on two bike
    lanes and pedestrians on four sidewalk strips (one speed per strip), spread along a periodic road."""
    rng = np.random.default_rng(seed)
    lanes = {  # y -> speed (+x is the ego's direction)
        "vehicle": {
            -5.25: float(rng.uniform(8, 14)),
            -1.75: float(rng.uniform(8, 14)),
            1.75: -float(rng.uniform(8, 14)),
            5.25: -float(rng.uniform(8, 14)),
        },
        "cyclist": {-8.0: float(rng.uniform(3, 6)), 8.0: -float(rng.uniform(3, 6))},
        "pedestrian": {
            -9.8: float(rng.uniform(0.5, 1.5)),
            -11.2: -float(rng.uniform(0.5, 1.5)),
            9.8: -float(rng.uniform(0.5, 1.5)),
            11.2: float(rng.uniform(0.5, 1.5)),
        },
    }
    sizes = {
        "car": (4.5, 1.85, 1.55),
        "truck": (8.5, 2.5, 3.2),
        "cyclist": (1.8, 0.6, 1.7),
        "pedestrian": (0.6, 0.6, 1.75),
    }
    objects: list[SimObject] = []
    taken: dict[float, list[tuple[float, float]]] = {}  # y -> (x, half length + gap)
    tries = 0
    while len(objects) < n and tries < 100 * n:
        tries += 1
        label = str(rng.choice(["car", "car", "car", "truck", "pedestrian", "pedestrian", "cyclist"]))
        group = "vehicle" if label in ("car", "truck") else label
        y = float(rng.choice(list(lanes[group])))
        speed = lanes[group][y]
        x = float(rng.uniform(-72.0, 72.0))
        size = sizes[label]
        half = 0.5 * size[0] + (1.5 if group == "vehicle" else 0.5)
        if any(abs(x - tx) < half + th for tx, th in taken.get(y, [])):
            continue
        taken.setdefault(y, []).append((x, half))
        yaw = 0.0 if speed > 0 else math.pi
        objects.append(SimObject(label, (x, y, 0.5 * size[2]), size, yaw, (speed, 0.0)))
    return TrafficScene(tuple(objects), ego_speed)


def scene_results(
    scene: TrafficScene,
    rig: Mapping[str, SensorSpec],
    t_ns: int,
    *,
    offsets_ns: Mapping[str, int] | None = None,
    seed: int = 0,
    lidar_noise: float = 0.1,
    pixel_noise: float = 2.0,
    radar_full_fraction: float = 0.6,
) -> dict[str, SensorResult]:
    """Every rig sensor's result for the frame at ``t_ns``; sensor ``s`` captured at ``t_ns + offsets_ns[s]``."""
    rng = np.random.default_rng(seed)
    out: dict[str, SensorResult] = {}
    for name, spec in rig.items():
        t_s = t_ns + (offsets_ns or {}).get(name, 0)
        objs = scene.objects_at(t_s)
        if spec.kind == SensorKind.LIDAR:
            out[name] = lidar_result(rig, name, objs, t_ns=t_s, noise=lidar_noise, seed=rng)
        elif spec.kind == SensorKind.CAMERA:
            out[name] = camera_result(rig, name, objs, t_ns=t_s, pixel_noise=pixel_noise, seed=rng)
        else:
            full = rng.random(len(objs)) < radar_full_fraction
            out[name] = radar_result(rig, name, objs, t_ns=t_s, full_velocity=full.tolist())
    return out


def imperfect(
    results: Mapping[str, SensorResult], rig: Mapping[str, SensorSpec], rng: np.random.Generator
) -> dict[str, SensorResult]:
    """``results`` with a real detector's imperfections: missed detections (15 % camera, 10 % lidar and
    radar), scores drawn at random, 10 % of camera classes wrong, 0-3 radar clutter objects nowhere near
    an object."""
    out = {}
    for name, res in results.items():
        o = {k: np.array(v) for k, v in res.outputs.items()}
        kind = rig[name].kind
        if kind == SensorKind.CAMERA:
            n = int(o["COUNT"][0])
            keep = np.flatnonzero(rng.random(n) > 0.15)
            for key in ("BOXES", "SCORES", "LABELS"):
                o[key][: keep.size] = o[key][keep]
                o[key][keep.size :] = 0
            o["COUNT"][0] = keep.size
            o["SCORES"][: keep.size] = rng.uniform(0.05, 1.0, keep.size)
            wrong = rng.random(keep.size) < 0.1
            o["LABELS"][: keep.size][wrong] = rng.integers(0, len(LABELS), int(wrong.sum()))
        else:
            n = o["SCORES"].shape[0]
            keep = np.flatnonzero(rng.random(n) > 0.1)
            o = {k: v[keep] for k, v in o.items()}
            o["SCORES"] = rng.uniform(0.02, 1.0, keep.size).astype(np.float32)
            if kind == SensorKind.RADAR:  # clutter: a few returns nowhere near an object
                c = int(rng.integers(0, 4))
                pos = np.column_stack([rng.uniform(5, 80, c), rng.uniform(-30, 30, c), np.zeros(c)])
                vel = np.where(rng.random((c, 1)) < 0.5, rng.normal(0, 3, (c, 2)), np.nan)
                extra = {
                    "POSITIONS": pos,
                    "RADIAL_VELOCITY": rng.normal(0, 2, c),
                    "VELOCITY": vel,
                    "RCS": rng.uniform(-5, 25, c),
                    "SCORES": rng.uniform(0.05, 0.9, c),
                    "RETURNS": np.ones(c),
                }
                o = {k: np.concatenate([o[k], extra[k].astype(o[k].dtype)]) for k in o}
        out[name] = SensorResult(name, res.status, outputs=o, sample_t_ns=res.sample_t_ns)
    return out
