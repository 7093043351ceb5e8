"""Camera-guided lidar objects (``fusion.camera_guided``) on point clouds built in the test."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from perception.config import CameraGuidedConfig, FusionConfig, load_config
from perception.errors import ConfigError
from perception.fusion import CAMERA_GUIDED_SOURCE, Fuser
from perception.fusion._testing import SimObject, camera_result, lidar_result, make_rig, scene_results, traffic_scene
from perception.types import Detection3D, Frame, PointCloudSample, SensorResult

RIG = make_rig(cameras=1, radars=0)
ON = FusionConfig(tracking=False, score_threshold=0.0, camera_guided=CameraGuidedConfig(enabled=True))
OFF = dataclasses.replace(ON, camera_guided=CameraGuidedConfig(enabled=False))
CAR = SimObject("car", (25.0, 0.0, 0.78))  # seen end-on: its rear face at x = 22.75
LIDAR_XYZ = np.array([1.0, 0.0, 1.9])  # make_rig's lidar_top, no rotation


def cloud(points_base: list[tuple[float, float, float]]) -> PointCloudSample:
    """A lidar sweep of these base_link points, in the lidar's frame."""
    xyz = np.asarray(points_base, np.float64).reshape(-1, 3) - LIDAR_XYZ
    pts = np.column_stack([xyz, np.zeros(len(xyz))]).astype(np.float32)
    return PointCloudSample("lidar_top", 0, "lidar_top", pts, ("x", "y", "z", "intensity"))


def fuse(
    points: list[tuple[float, float, float]] | None,
    *,
    lidar_objects: tuple[SimObject, ...] = (),
    config: FusionConfig = ON,
    seen: tuple[SimObject, ...] = (CAR,),
) -> list[Detection3D]:
    results: dict[str, SensorResult] = {
        "lidar_top": lidar_result(RIG, "lidar_top", list(lidar_objects), t_ns=0),
        "cam_front": camera_result(RIG, "cam_front", list(seen), scores=0.6, t_ns=0),
    }
    samples = {} if points is None else {"lidar_top": cloud(points)}
    dets, _ = Fuser(config, RIG)(Frame(0, 0, samples), results)
    return list(dets)


def guided(dets: list[Detection3D]) -> list[Detection3D]:
    return [d for d in dets if CAMERA_GUIDED_SOURCE in d.sources]


def rear_face(n: int) -> list[tuple[float, float, float]]:
    """``n`` returns on the car's rear face (one beam ring)."""
    return [(22.75, y, 0.9) for y in np.linspace(-0.3, 0.3, n)]


@pytest.mark.parametrize("n", [1, 4])
def test_one_to_four_points_give_a_box_on_the_ray(n: int) -> None:
    found = guided(fuse(rear_face(n)))
    assert len(found) == 1
    d = found[0]
    assert d.label == "car" and d.size == pytest.approx((4.5, 1.85, 1.55))
    assert set(d.sources) == {"cam_front", "lidar_top", CAMERA_GUIDED_SOURCE}
    # the near face on the nearest point, the centre behind it: within a metre of the truth
    assert math.hypot(d.center[0] - 25.0, d.center[1]) < 1.0
    assert d.center[0] > 22.75 + 0.9
    # it replaces the camera-only candidate of the same detection (nothing else near)
    assert [x for x in fuse(rear_face(n)) if math.hypot(x.center[0] - 25.0, x.center[1]) < 8.0] == [d]


def test_points_behind_the_nearest_cluster_are_occluded() -> None:
    wall = [(40.0, y, z) for y in (-0.5, 0.0, 0.5) for z in (0.8, 1.5)]  # background through the same box
    d = guided(fuse(rear_face(2) + wall))[0]
    assert math.hypot(d.center[0] - 25.0, d.center[1]) < 1.0


def test_an_occluder_already_found_does_not_place_the_object() -> None:
    # a pedestrian the lidar found stands in front, its returns inside the car's frustum and depth window
    ped = SimObject("pedestrian", (14.0, 0.65, 0.87), (0.6, 0.6, 1.75))  # not absorbing the car's box
    occluder = [(14.0, 0.15, 1.0), (14.0, 0.15, 1.4)]
    alone = guided(fuse(occluder, lidar_objects=()))
    assert alone and alone[0].center[0] < 17.0  # without the lidar's pedestrian they would be taken
    d = guided(fuse(occluder + rear_face(1), lidar_objects=(ped,)))[0]
    assert math.hypot(d.center[0] - 25.0, d.center[1]) < 1.0


def test_ground_points_are_removed() -> None:
    ground = [(x, 0.0, 0.05) for x in (23.0, 30.0, 38.0)]
    assert guided(fuse(ground)) == []
    d = guided(fuse(ground + rear_face(1)))[0]
    assert math.hypot(d.center[0] - 25.0, d.center[1]) < 1.0


def test_no_points_give_nothing() -> None:
    assert guided(fuse(None)) == []
    assert guided(fuse([])) == []
    # points outside every camera box
    assert guided(fuse([(22.75, 8.0, 1.0)])) == []
    # the camera-only candidate is still there
    assert any(math.hypot(d.center[0] - 25.0, d.center[1]) < 5.0 for d in fuse(None))


def test_fusion_without_the_setting_is_unchanged() -> None:
    scene, rig = traffic_scene(30, seed=3), make_rig(cameras=4, radars=4)
    results = scene_results(scene, rig, 0, seed=3)
    pts = cloud(rear_face(4))
    base = FusionConfig(camera_guided=CameraGuidedConfig(enabled=False))
    off, _ = Fuser(base, rig)(Frame(0, 0, {}), results)
    with_points, _ = Fuser(base, rig)(Frame(0, 0, {"lidar_top": pts}), results)
    on_no_points, _ = Fuser(dataclasses.replace(base, camera_guided=CameraGuidedConfig(enabled=True)), rig)(
        Frame(0, 0, {}), results
    )
    assert off and with_points == off and on_no_points == off
    # and off on the hand-built frame: the car is a camera-only candidate, no guided source
    assert guided(fuse(rear_face(4), config=OFF)) == []


@pytest.mark.parametrize(
    ("key", "value"),
    [("face_offset", 1.5), ("box_shrink", 0.5), ("score_factor", 0.0), ("depth_ratio", 0.5), ("cluster_gap", 0.0),
     ("min_score", -0.1), ("max_depth", 0.0), ("ground_height", 5.0)],
)  # fmt: skip
def test_config_is_validated(tmp_path: Path, key: str, value: float) -> None:
    with pytest.raises(ValueError, match=key):
        CameraGuidedConfig(**{key: value})  # type: ignore[arg-type]
    profile = tmp_path / "p.yaml"
    profile.write_text(f"fusion:\n  camera_guided:\n    enabled: true\n    {key}: {value}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(profile)
    assert f"camera_guided.{key}" in str(err.value)


def test_config_loads(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("fusion:\n  camera_guided:\n    enabled: true\n    face_offset: 0.25\n", encoding="utf-8")
    cfg = load_config(profile).fusion.camera_guided
    assert cfg.enabled and cfg.face_offset == 0.25


def test_a_fuser_reusing_its_point_buffers_fuses_each_frame_as_a_fresh_one_does_in_any_thread() -> None:
    """The lidar points and the camera-guided work space are kept from frame to frame (per thread): a large
    cloud, then a small one, then one from another thread, each gives what a new fuser gives it."""
    import threading

    clouds = [rear_face(4) + [(40.0, y, 1.0) for y in np.linspace(-9, 9, 400)], rear_face(1), [], rear_face(2)]
    results: dict[str, SensorResult] = {"cam_front": camera_result(RIG, "cam_front", [CAR], scores=0.6, t_ns=0)}

    def frame(points: list[tuple[float, float, float]]) -> Frame:
        return Frame(0, 0, {"lidar_top": cloud(points)})

    fresh = [Fuser(ON, RIG)(frame(p), results)[0] for p in clouds]
    assert guided(list(fresh[0])) and guided(list(fresh[1]))
    reused = Fuser(ON, RIG)
    assert [reused(frame(p), results)[0] for p in clouds] == fresh
    other: list[object] = []
    worker = threading.Thread(target=lambda: other.extend(reused(frame(p), results)[0] for p in clouds[::-1]))
    worker.start()
    worker.join(timeout=60)
    assert other == fresh[::-1]


def test_scratch_arrays_are_kept_per_thread_and_grown_when_too_small() -> None:
    import threading

    from perception.fusion._point_kernels import Scratch

    scratch = Scratch()
    a = scratch.array("xyz", (100, 3), np.float32)
    b = scratch.array("xyz", (80, 3), np.float32)
    assert b.shape == (80, 3) and b.flags.c_contiguous and b.flags.writeable and np.shares_memory(a, b)
    c = scratch.array("xyz", (1000, 3), np.float32)
    assert c.shape == (1000, 3) and not np.shares_memory(a, c)
    elsewhere: list[np.ndarray] = []
    worker = threading.Thread(target=lambda: elsewhere.append(scratch.array("xyz", (10, 3), np.float32)))
    worker.start()
    worker.join(timeout=60)
    assert elsewhere[0].shape == (10, 3) and not np.shares_memory(elsewhere[0], c)


def test_the_points_of_two_lidars_place_the_object_as_one_lidar_s_do() -> None:
    """Several lidars' clouds are moved to base_link and walked together: the rear face split between a
    second lidar (mounted elsewhere, turned) and lidar_top places the car where lidar_top alone does."""
    from perception.types import SensorSpec, Transform

    mount = Transform.from_xyz_rpy((-0.5, 0.4, 1.7), (0.0, 0.0, 2.0))
    rig = {**RIG, "lidar_rear": SensorSpec("lidar_rear", "lidar", "lidar_rear", mount, "/rear/points")}
    face = rear_face(4)
    rear_xyz = mount.inverse().apply(np.asarray(face[2:], np.float64))
    rear = PointCloudSample(
        "lidar_rear", 0, "lidar_rear", np.column_stack([rear_xyz, np.zeros(2)]).astype(np.float32), cloud([]).fields
    )
    results: dict[str, SensorResult] = {"cam_front": camera_result(RIG, "cam_front", [CAR], scores=0.6, t_ns=0)}
    one = guided(list(Fuser(ON, RIG)(Frame(0, 0, {"lidar_top": cloud(face)}), results)[0]))
    two = guided(list(Fuser(ON, rig)(Frame(0, 0, {"lidar_top": cloud(face[:2]), "lidar_rear": rear}), results)[0]))
    assert len(one) == len(two) == 1
    assert two[0].center == pytest.approx(one[0].center, abs=1e-4) and two[0].label == one[0].label
    assert set(two[0].sources) == {"cam_front", "lidar_top", "lidar_rear", CAMERA_GUIDED_SOURCE}
