"""Sensor models on hand-made scenes: geometry of lidar hits, occlusion, radar Doppler, camera projection."""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt
import pytest

from perception.sim import SimRadarParams, project_ground_truth
from perception.sim._camera import CameraModel
from perception.sim._lidar import LidarModel
from perception.sim._radar import RadarModel
from perception.sim._rig import SimCameraParams, SimLidarParams, SimMount, SimSensor
from perception.sim._world import Scene
from perception.types import GroundTruth, GroundTruthObject, SensorKind


def _obj(track_id: int, x: float, y: float, size: tuple[float, float, float] = (4.5, 1.9, 1.6), yaw: float = 0.0,
         velocity: tuple[float, float] = (0.0, 0.0), label: str = "car") -> GroundTruthObject:
    return GroundTruthObject(track_id, label, (x, y, size[2] / 2), size, yaw, velocity)


def _lidar(**params: float) -> LidarModel:
    exact = {"range_noise_m": 0.0, "quantization_m": 0.0, "dropout": 0.0, **params}
    cfg = SimSensor("lidar_top", SensorKind.LIDAR, SimMount((1.0, 0.0, 1.9)), 10.0,
                    params=SimLidarParams(**exact))  # type: ignore[arg-type]
    return LidarModel(cfg)


def _to_base(model: LidarModel, pts: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    out: npt.NDArray[np.float64] = pts[:, :3].astype(np.float64) @ model.rot.T + model.origin
    return out


def _box_distance(p: npt.NDArray[np.float64], o: GroundTruthObject) -> npt.NDArray[np.float64]:
    """Distance of points to the surface of an object's box (0 on the surface, >0 inside or outside)."""
    c, s = np.cos(o.yaw), np.sin(o.yaw)
    rel = p - np.array(o.center)
    local = np.stack([c * rel[:, 0] + s * rel[:, 1], -s * rel[:, 0] + c * rel[:, 1], rel[:, 2]], axis=1)
    q = np.abs(local) - np.array(o.size) / 2
    outside = np.linalg.norm(np.maximum(q, 0.0), axis=1)
    inside = np.minimum(q.max(axis=1), 0.0)
    return np.asarray(outside - inside)


def test_lidar_hits_lie_on_boxes_or_ground() -> None:
    objs = [_obj(1, 12.0, 0.0, yaw=0.3), _obj(2, -8.0, 4.0, (10.0, 2.5, 3.5), label="truck"),
            _obj(3, 5.0, -5.0, (0.5, 0.6, 1.75), label="pedestrian")]
    scene = Scene.from_boxes(objs)
    model = _lidar()
    pts = model.capture(scene, np.random.default_rng(0))
    assert pts.dtype == np.float32 and pts.shape[1] == 4 and len(pts) > 10_000
    base = _to_base(model, pts)
    on_ground = np.abs(base[:, 2]) < 1e-3
    dist = np.min([_box_distance(base, o) for o in objs], axis=0)
    assert np.all(on_ground | (dist < 1e-3))
    for o in objs:  # every object is seen
        assert np.sum(_box_distance(base, o) < 1e-3) > 5
    assert np.all((pts[:, 3] >= 0) & (pts[:, 3] <= 1))
    r = np.linalg.norm(pts[:, :3], axis=1)
    assert r.max() <= 100.0 + 1e-3


def test_lidar_sparse_at_range() -> None:
    near, far = _obj(1, 10.0, 0.0), _obj(2, 60.0, 8.0)
    model = _lidar()
    base = _to_base(model, model.capture(Scene.from_boxes([near, far]), np.random.default_rng(0)))
    n_near = np.sum(_box_distance(base, near) < 1e-3)
    n_far = np.sum(_box_distance(base, far) < 1e-3)
    assert n_near > 10 * n_far > 0


def test_lidar_occlusion_object_behind_gets_no_points() -> None:
    wall = _obj(1, 10.0, 0.0, (1.0, 6.0, 3.0), label="truck")
    hidden = _obj(2, 20.0, 0.0, (4.0, 1.8, 1.5))  # entirely in the wall's shadow
    model = _lidar()
    base = _to_base(model, model.capture(Scene.from_boxes([wall, hidden]), np.random.default_rng(0)))
    assert np.sum(_box_distance(base, wall) < 1e-3) > 50
    assert np.sum(_box_distance(base, hidden) < 0.05) == 0
    # without the wall the same object is seen
    base = _to_base(model, model.capture(Scene.from_boxes([hidden]), np.random.default_rng(0)))
    assert np.sum(_box_distance(base, hidden) < 1e-3) > 50


def test_lidar_noise_dropout_and_determinism() -> None:
    scene = Scene.from_boxes([_obj(1, 15.0, 2.0)])
    model = _lidar(range_noise_m=0.03, dropout=0.05, quantization_m=1 / 256)
    a = model.capture(scene, np.random.default_rng(5))
    b = model.capture(scene, np.random.default_rng(5))
    c = model.capture(scene, np.random.default_rng(6))
    assert a.tobytes() == b.tobytes() and a.tobytes() != c.tobytes()
    assert np.all(np.abs(a[:, :3] * 256 - np.round(a[:, :3] * 256)) < 1e-3)  # quantised to 1/256 m


def _radar(**params: float) -> RadarModel:
    quiet = {"false_alarms_per_scan": 0.0, "detection_probability": 1.0, **params}
    cfg = SimSensor("radar_front", SensorKind.RADAR, SimMount((3.7, 0.0, 0.5)), 13.0, params=SimRadarParams(**quiet))
    return RadarModel(cfg)


def test_radar_doppler_of_approaching_and_static_objects() -> None:
    approaching = _obj(1, 40.0, 0.0, velocity=(-12.0, 0.0))
    static = _obj(2, 25.0, -8.0)
    receding = _obj(3, 30.0, 10.0, yaw=0.0, velocity=(5.0, 0.0))
    scene = Scene.from_boxes([approaching, static, receding])
    model = _radar()
    rng = np.random.default_rng(1)
    pts = np.concatenate([model.capture(scene, rng) for _ in range(20)])
    assert pts.dtype == np.float32 and pts.shape[1] == 5
    base_xy = pts[:, :2] + np.array([3.7, 0.0])

    def near(o: GroundTruthObject) -> npt.NDArray[np.float64]:
        return np.asarray(np.hypot(base_xy[:, 0] - o.center[0], base_xy[:, 1] - o.center[1]) < 4.0)

    vr_a, vr_s, vr_r = pts[near(approaching), 3], pts[near(static), 3], pts[near(receding), 3]
    assert vr_a.size > 20 and vr_s.size > 10 and vr_r.size > 10
    # radial component of the over-ground velocity: -12 m/s almost along the line of sight
    assert np.median(vr_a) == pytest.approx(-12.0, abs=0.4)
    assert np.median(np.abs(vr_s)) < 0.3
    los = np.array(receding.center[:2]) - np.array([3.7, 0.0])
    expected = 5.0 * los[0] / np.linalg.norm(los)
    assert np.median(vr_r) == pytest.approx(expected, abs=0.5)
    # poor lateral accuracy: the returns of one car scatter sideways
    assert np.std(base_xy[near(approaching), 1]) > 0.3


def test_radar_fov_clutter_and_rcs() -> None:
    behind = _obj(1, -20.0, 0.0)
    truck = _obj(2, 30.0, 0.0, (10.0, 2.5, 3.5), label="truck")
    ped = _obj(3, 20.0, -6.0, (0.5, 0.6, 1.75), label="pedestrian")
    scene = Scene.from_boxes([behind, truck, ped])
    rng = np.random.default_rng(2)
    pts = np.concatenate([_radar().capture(scene, rng) for _ in range(20)])
    assert np.all(pts[:, 0] > 0)  # nothing from behind a front radar
    base_xy = pts[:, :2] + np.array([3.7, 0.0])
    at_truck = np.hypot(base_xy[:, 0] - 30.0, base_xy[:, 1]) < 6.0
    at_ped = np.hypot(base_xy[:, 0] - 20.0, base_xy[:, 1] + 6.0) < 2.5
    assert np.median(pts[at_truck, 4]) > np.median(pts[at_ped, 4]) + 8.0
    clutter = _radar(false_alarms_per_scan=30.0).capture(Scene.from_boxes([]), np.random.default_rng(3))
    assert len(clutter) > 10
    az = np.degrees(np.arctan2(clutter[:, 1], clutter[:, 0]))
    assert np.all(np.abs(az) <= 60.0 + 1e-3)


def _camera() -> CameraModel:
    cfg = SimSensor("cam_front", SensorKind.CAMERA, SimMount((1.6, 0.0, 1.55)), 12.0, params=SimCameraParams())
    return CameraModel(cfg)


def _iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def test_camera_renders_box_where_it_projects() -> None:
    car = _obj(7, 15.0, 2.0, yaw=0.4)
    scene = Scene.from_boxes([car])
    cam = _camera()
    frame = cam.render(scene)
    labels = project_ground_truth(scene.ground_truth(), cam.cfg.spec)
    assert len(labels) == 1
    label, *_ = labels[0]  # unpacks like (label, x1, y1, x2, y2, visible_fraction)
    assert label == "car" and labels[0].visible_fraction > 0.95
    x1, y1, x2, y2 = labels[0].x1, labels[0].y1, labels[0].x2, labels[0].y2
    drawn = frame.boxes()
    assert len(drawn) == 1 and drawn[0].track_id == 7
    assert _iou((x1, y1, x2, y2), (drawn[0].x1, drawn[0].y1, drawn[0].x2, drawn[0].y2)) > 0.9
    # the object's pixels are its (red) paint, not sky or road
    ys, xs = np.nonzero(frame.instances == 0)
    px = frame.image[ys, xs].astype(float)
    assert np.median(px[:, 0]) > np.median(px[:, 2]) + 40
    # and the box is in front of the camera: nothing of it outside the projected rectangle
    assert xs.min() >= x1 - 1 and xs.max() <= x2 + 1 and ys.min() >= y1 - 1 and ys.max() <= y2 + 1


def test_camera_occlusion_and_visible_fraction() -> None:
    front = _obj(1, 12.0, 0.0, (1.0, 5.0, 3.5), label="truck")
    hidden = _obj(2, 25.0, 0.0)
    half = _obj(3, 25.0, 5.5)  # partly behind the truck
    scene = Scene.from_boxes([front, hidden, half])
    cam = _camera()
    frame = cam.render(scene)
    assert not np.any(frame.instances == 1)
    labels = {b.track_id: b for b in project_ground_truth(scene.ground_truth(), cam.cfg.spec)}
    assert 2 not in labels or labels[2].visible_fraction < 0.01
    assert 0.05 < labels[3].visible_fraction < 0.95
    assert labels[1].visible_fraction > 0.95
    assert project_ground_truth(scene.ground_truth(), cam.cfg.spec, min_visible=0.01).__len__() == 2


def test_camera_ignores_objects_behind_and_outputs_jpeg() -> None:
    scene = Scene.from_boxes([_obj(1, -10.0, 0.0)])
    cam = _camera()
    assert project_ground_truth(scene.ground_truth(), cam.cfg.spec) == []
    frame = cam.render(scene, np.random.default_rng(0))
    assert frame.image.shape == (360, 640, 3) and not np.any(frame.instances >= 0)
    data = cam.capture(scene, np.random.default_rng(0))
    assert data[:2] == b"\xff\xd8"
    # sky on top, ground below
    assert frame.image[5, 320, 2] > frame.image[5, 320, 0] and frame.image[350, 320].std() < 40


def test_project_ground_truth_truncation() -> None:
    spec = _camera().cfg.spec
    gt = GroundTruth(0, (_obj(1, 6.0, 6.5),))  # off to the left, cut by the image border
    (box,) = project_ground_truth(gt, spec)
    assert box.x1 == 0.0 and 0.0 < box.visible_fraction < 1.0
    with pytest.raises(ValueError, match="calibration"):
        project_ground_truth(gt, dataclasses.replace(spec, calibration=None))
