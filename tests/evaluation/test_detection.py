"""Detection metrics on hand-made cases: AP/mAP, ATE, AVE, ID switches, range/FOV filtering, timing."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perception.evaluation import DetectionEvaluator
from perception.evaluation._detection import _greedy_match, nuscenes_ap
from perception.fusion._testing import make_rig
from perception.kinds import CAMERA, register_kind, unregister_kind
from perception.types import Detection3D, EgoPose, GroundTruth, GroundTruthObject, Transform

CAR = (4.5, 1.85, 1.55)
PED = (0.6, 0.6, 1.75)


def gt_obj(track: int, label: str, x: float, y: float, v: tuple[float, float] = (0.0, 0.0)) -> GroundTruthObject:
    return GroundTruthObject(track, label, (x, y, 0.8), CAR if label in ("car", "truck") else PED, 0.0, v)


def det(
    ident: int, label: str, x: float, y: float, score: float = 0.9, v: tuple[float, float] = (0.0, 0.0)
) -> Detection3D:
    return Detection3D(ident, label, score, (x, y, 0.8), CAR, 0.0, v, (0.2, 0.2), ("lidar_top",))


SCENE = [
    gt_obj(1, "car", 10.0, 2.0, (5.0, 0.0)),
    gt_obj(2, "car", -20.0, -3.0),
    gt_obj(3, "pedestrian", 8.0, -6.0, (0.0, 1.0)),
    gt_obj(4, "truck", 30.0, 5.0, (-8.0, 0.0)),
    gt_obj(5, "cyclist", 15.0, 9.0, (4.0, 0.0)),
]


def perfect(t_ns: int = 0, dx: float = 0.0, dv: float = 0.0) -> list[Detection3D]:
    return [
        det(o.track_id, o.label, o.center[0] + dx, o.center[1], v=(o.velocity[0] + dv, o.velocity[1])) for o in SCENE
    ]


def test_perfect_detections_score_map_one_and_no_errors() -> None:
    ev = DetectionEvaluator(max_range_m=50)
    for k in range(3):
        ev.add(k, perfect(), GroundTruth(k, tuple(SCENE)))
    s = ev.summary()
    assert s["mAP"] == pytest.approx(1.0)
    assert s["ate"] == pytest.approx(0.0) and s["ave"] == pytest.approx(0.0)
    assert s["id_switches"] == 0 and s["frames"] == 3
    assert set(s["per_class_ap"]) == {"car", "truck", "pedestrian", "cyclist"}
    assert all(ap == pytest.approx(1.0) for ap in s["per_class_ap"].values())


def test_offsets_give_the_expected_ate_and_ap_per_threshold() -> None:
    ev = DetectionEvaluator()
    ev.add(0, perfect(dx=0.3, dv=0.5), GroundTruth(0, tuple(SCENE)))
    s = ev.summary()
    assert s["ate"] == pytest.approx(0.3) and s["ave"] == pytest.approx(0.5)
    assert s["mAP"] == pytest.approx(1.0)  # 0.3 m is within every threshold
    far = DetectionEvaluator()
    far.add(0, perfect(dx=0.7), GroundTruth(0, tuple(SCENE)))
    s = far.summary()
    assert s["ap_by_threshold"]["car"] == pytest.approx({"0.5": 0.0, "1": 1.0, "2": 1.0, "4": 1.0})
    assert s["mAP"] == pytest.approx(0.75) and s["ate"] == pytest.approx(0.7)


def test_wrong_class_and_missed_objects_are_penalised() -> None:
    ev = DetectionEvaluator()
    dets = [det(1, "car", 10.0, 2.0), det(2, "truck", -20.0, -3.0)]  # one right, one with the wrong class
    ev.add(0, dets, GroundTruth(0, tuple(SCENE[:2])))
    s = ev.summary()
    assert s["per_class_ap"]["car"] < 1.0
    assert s["per_class_ap"]["truck"] is None  # no truck ground truth: undefined, left out of mAP
    assert s["mAP"] == pytest.approx(s["per_class_ap"]["car"])
    assert s["num_ground_truth"]["car"] == 2 and s["num_detections"]["truck"] == 1


def test_nuscenes_ap_on_a_hand_computed_case() -> None:
    # one object, a false positive ranked above the true positive: precision 0.5 at every recall level
    assert nuscenes_ap([0.9, 0.8], [False, True], 1) == pytest.approx((0.5 - 0.1) / 0.9)
    # a false positive ranked after full recall costs nothing
    assert nuscenes_ap([0.9, 0.8], [True, False], 1) == pytest.approx(1.0)
    # two objects, TP FP TP: precision 1 up to recall 0.5, then 2/3 -> mean over recall (0.1, 1]
    p = np.where(np.linspace(0.0, 1.0, 101)[11:] <= 0.5, 1.0, 2 / 3)
    assert nuscenes_ap([0.9, 0.8, 0.7], [True, False, True], 2) == pytest.approx(float(np.mean(p - 0.1)) / 0.9)
    assert nuscenes_ap([], [], 3) == 0.0
    assert math.isnan(nuscenes_ap([0.5], [False], 0))


def test_id_switches_are_counted_when_a_track_changes_identity() -> None:
    ev = DetectionEvaluator()
    obj = (gt_obj(7, "car", 12.0, 0.0),)
    for k, ident in enumerate([1, 1, None, 1, 2, 2, 3]):
        dets = [] if ident is None else [det(ident, "car", 12.0, 0.0)]
        ev.add(k, dets, GroundTruth(k, obj))
    assert ev.summary()["id_switches"] == 2  # 1 -> 2 -> 3; the gap does not count


def test_ground_truth_outside_range_or_every_field_of_view_does_not_count() -> None:
    objs = (gt_obj(1, "car", 20.0, 0.0), gt_obj(2, "car", 80.0, 0.0), gt_obj(3, "car", -20.0, 0.0))
    everywhere = DetectionEvaluator(max_range_m=50)
    everywhere.add(0, [det(1, "car", 20.0, 0.0), det(9, "car", 70.0, 0.0)], GroundTruth(0, objs))
    s = everywhere.summary()
    assert s["num_ground_truth"]["car"] == 2 and s["num_detections"]["car"] == 1  # 80 m object and det dropped
    # a front-camera-only rig cannot see the car behind: it is not held against the detector
    front = {"cam_front": make_rig(cameras=1, radars=0, lidar=False)["cam_front"]}
    camera = DetectionEvaluator(max_range_m=50, rig=front)
    camera.add(0, [det(1, "car", 20.0, 0.0)], GroundTruth(0, objs))
    assert camera.summary()["mAP"] == pytest.approx(1.0)
    radar_rig = {"radar_rear": make_rig(cameras=0, radars=2, lidar=False)["radar_rear"]}
    radar = DetectionEvaluator(max_range_m=50, rig=radar_rig)
    radar.add(0, [], GroundTruth(0, objs))
    assert radar.summary()["num_ground_truth"]["car"] == 1


def test_a_registered_image_kind_sees_like_a_camera() -> None:
    """Visibility follows the kind's fusion role, so a thermal-like kind's view counts as a camera's."""
    objs = (gt_obj(1, "car", 20.0, 0.0), gt_obj(3, "car", -20.0, 0.0))
    register_kind(replace(CAMERA, name="night_camera"))
    try:
        spec = replace(make_rig(cameras=1, radars=0, lidar=False)["cam_front"], kind="night_camera")
        ev = DetectionEvaluator(max_range_m=50, rig={"night_front": spec})
        ev.add(0, [], GroundTruth(0, objs))
        assert ev.summary()["num_ground_truth"]["car"] == 1  # the car ahead, not the one behind
    finally:
        unregister_kind("night_camera")


def test_ground_truth_is_moved_to_the_frame_time() -> None:
    obj = (gt_obj(1, "car", 10.0, 0.0, (10.0, 0.0)),)
    ev = DetectionEvaluator()
    ev.add(50_000_000, [det(1, "car", 10.5, 0.0)], GroundTruth(0, obj))  # 50 ms later it moved 0.5 m
    assert ev.summary()["ate"] == pytest.approx(0.0, abs=1e-9)
    # with ego poses, the ego's own motion over the gap is compensated too (ego drove 1 m forward)
    poses = {0: EgoPose(0, Transform()), 50_000_000: EgoPose(50_000_000, Transform((1.0, 0.0, 0.0)))}
    ego = DetectionEvaluator(ego_at=poses.get)
    ego.add(50_000_000, [det(1, "car", 9.5, 0.0)], GroundTruth(0, obj))
    assert ego.summary()["ate"] == pytest.approx(0.0, abs=1e-9)


def test_ground_truth_moved_to_the_frame_time_is_turned_with_the_ego_for_the_cameras_view() -> None:
    # The centre was moved into base_link at the frame time but the yaw kept base_link's at the ground
    # truth's time: a long box reaching into the camera's view only as it lies now was judged as it lay
    # before the ego turned, out of view, and left out of the ground truth.
    rig = {"cam_front": make_rig(cameras=1, radars=0, lidar=False, hfov_deg=60.0)["cam_front"]}
    size = (14.0, 0.6, 1.5)
    now = DetectionEvaluator(max_range_m=50, rig=rig)
    centre = np.array([[12.0, 12.0, 0.75]])
    assert now.visible(centre, np.array([size]), np.array([-math.pi / 2])).tolist() == [True]
    assert not now.visible(centre, np.array([size]), np.array([0.0])).any()  # the same box along x: out of view
    # the object stands still; the ego turns 90 degrees left in place between the ground truth and the frame
    turn = Transform((0.0, 0.0, 0.0), (0.0, 0.0, math.sin(math.pi / 4), math.cos(math.pi / 4)))
    poses = {0: EgoPose(0, Transform()), 500_000_000: EgoPose(500_000_000, turn)}
    ev = DetectionEvaluator(max_range_m=50, rig=rig, ego_at=poses.get)
    obj = GroundTruthObject(1, "truck", (-12.0, 12.0, 0.75), size, 0.0, (0.0, 0.0))  # (12, 12) at -90 deg after it
    ev.add(500_000_000, [det(1, "truck", 12.0, 12.0)], GroundTruth(0, (obj,)))
    s = ev.summary()
    assert s["num_ground_truth"]["truck"] == 1 and s["per_class_ap"]["truck"] == pytest.approx(1.0)


def test_ground_truth_with_an_unknown_velocity_stays_and_is_left_out_of_ave() -> None:
    # nuScenes (and KITTI without poses) ground truth may leave a velocity unknown (NaN)
    objs = (gt_obj(1, "car", 10.0, 0.0, (5.0, 0.0)), gt_obj(2, "car", 20.0, 5.0, (math.nan, math.nan)))
    same = DetectionEvaluator()
    same.add(0, [det(1, "car", 10.0, 0.0, v=(5.0, 0.0)), det(2, "car", 20.0, 5.0, v=(3.0, 0.0))], GroundTruth(0, objs))
    s = same.summary()
    assert s["per_class_ave"]["car"] == pytest.approx(0.0) and s["ave"] == pytest.approx(0.0)  # the known one
    # 50 ms after the ground truth: the unknown-velocity car stays where it was (not NaN, not dropped)
    later = DetectionEvaluator()
    dets = [det(1, "car", 10.25, 0.0, v=(5.0, 0.0)), det(2, "car", 20.0, 5.0, score=0.95)]
    later.add(50_000_000, dets, GroundTruth(0, objs))
    s = later.summary()
    assert s["num_ground_truth"]["car"] == 2 and s["mAP"] == pytest.approx(1.0)
    assert s["ate"] == pytest.approx(0.0, abs=1e-9) and s["ave"] == pytest.approx(0.0)
    # only unknown velocities: AVE undefined, the class keeps its AP
    unknown = DetectionEvaluator()
    unknown.add(0, [det(2, "car", 20.0, 5.0)], GroundTruth(0, objs[1:]))
    s = unknown.summary()
    assert s["per_class_ave"]["car"] is None and s["ave"] is None and s["mAP"] == pytest.approx(1.0)


def test_frames_without_ground_truth_and_empty_summary() -> None:
    ev = DetectionEvaluator()
    ev.add(0, perfect(), None)
    s = ev.summary()
    assert s["frames"] == 0 and s["frames_without_ground_truth"] == 1
    assert s["mAP"] is None and s["ate"] is None and s["ave"] is None


def test_invalid_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="max_range_m"):
        DetectionEvaluator(max_range_m=0)
    with pytest.raises(ValueError, match="tp_threshold"):
        DetectionEvaluator(thresholds=(1.0,), tp_threshold=2.0)


def test_visibility_is_judged_per_object_and_a_lidar_sees_everything_in_range() -> None:
    """``visible`` on many objects at once is each object's own answer (out of range, behind a front
    camera, beside a radar); with a lidar in the rig it is the range test alone."""
    rng = np.random.default_rng(7)
    n = 200
    centers = np.column_stack([rng.uniform(-80, 80, n), rng.uniform(-80, 80, n), rng.uniform(0, 2, n)])
    sizes = np.tile(np.array(CAR), (n, 1))
    yaws = rng.uniform(-math.pi, math.pi, n)
    rig = make_rig(cameras=2, radars=2, lidar=False)
    ev = DetectionEvaluator(max_range_m=50, rig=rig)
    got = ev.visible(centers, sizes, yaws)
    one_by_one = [bool(ev.visible(centers[i : i + 1], sizes[i : i + 1], yaws[i : i + 1])[0]) for i in range(n)]
    assert got.tolist() == one_by_one
    in_range = np.hypot(centers[:, 0], centers[:, 1]) <= 50
    assert 0 < got.sum() < in_range.sum()  # some objects in range are in no sensor's view
    assert not got[~in_range].any()
    with_lidar = DetectionEvaluator(max_range_m=50, rig=make_rig(cameras=2, radars=2, lidar=True))
    assert with_lidar.visible(centers, sizes, yaws).tolist() == in_range.tolist()


def _greedy_reference(dist: np.ndarray, threshold: float) -> np.ndarray:
    """The matching rule as NumPy states it: per row, ``np.argmin`` over the columns not yet taken."""
    match = np.full(dist.shape[0], -1, np.intp)
    taken = np.zeros(dist.shape[1], bool)
    for i in range(dist.shape[0]):
        row = np.where(taken, np.inf, dist[i])
        j = int(np.argmin(row))
        if row[j] <= threshold:
            match[i], taken[j] = j, True
    return match


@settings(max_examples=500, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda n_gt: st.lists(
            st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0, 3.5, math.inf, math.nan]), min_size=n_gt, max_size=n_gt),
            min_size=0,
            max_size=6,
        ).map(lambda rows: np.array(rows, float).reshape(len(rows), n_gt))
    ),
    st.sampled_from([0.5, 1.0, 2.0, 4.0]),
)
def test_greedy_matching_is_numpys_argmin_rule_ties_nan_and_inf_included(dist: np.ndarray, threshold: float) -> None:
    np.testing.assert_array_equal(_greedy_match(dist, threshold), _greedy_reference(dist, threshold))
