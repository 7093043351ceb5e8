"""Fusion on hand-built sensor results: association, class, radar gating and velocity, degraded modes."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from perception.config import FusionConfig
from perception.fusion import Fuser, FusionParams
from perception.fusion._testing import SimObject, camera_result, lidar_result, make_rig, missing, radar_result
from perception.types import Detection3D, EgoPose, Frame, SensorResult, SensorStatus, Transform

RIG = make_rig(cameras=2, radars=2)
UNTRACKED = FusionConfig(tracking=False, score_threshold=0.0)
PED = (0.6, 0.6, 1.75)


def fuse(results: dict[str, SensorResult], config: FusionConfig = UNTRACKED, **kwargs: object) -> list[Detection3D]:
    fuser = Fuser(config, RIG, **kwargs)  # type: ignore[arg-type]
    dets, _ = fuser(Frame(0, 0, {}), results)
    return sorted(dets, key=lambda d: (d.center[0], d.center[1]))


def near(dets: list[Detection3D], x: float, y: float, radius: float = 1.0) -> list[Detection3D]:
    return [d for d in dets if math.hypot(d.center[0] - x, d.center[1] - y) < radius]


def only(dets: list[Detection3D], x: float, y: float, radius: float = 1.0) -> Detection3D:
    found = near(dets, x, y, radius)
    assert len(found) == 1, f"expected one detection near ({x}, {y}), got {found}"
    return found[0]


# -- camera <-> lidar ---------------------------------------------------------------------------------


def test_camera_lidar_matching_picks_the_right_pairs() -> None:
    left, right = SimObject("car", (20.0, 3.0, 0.8)), SimObject("car", (20.0, -3.0, 0.8))
    dets = fuse(
        {
            "lidar_top": lidar_result(RIG, "lidar_top", [left, right], scores=0.6),
            # the camera lists the right car first and calls the left one a truck
            "cam_front": camera_result(RIG, "cam_front", [right, left], labels=["car", "truck"], scores=0.9),
        }
    )
    assert len(dets) == 2
    assert only(dets, 20.0, 3.0).label == "truck"
    assert only(dets, 20.0, -3.0).label == "car"
    assert all(d.sources == ("lidar_top", "cam_front") for d in dets)
    assert all(d.score > 0.6 for d in dets)  # camera evidence raises confidence


@pytest.mark.parametrize(("camera_score", "label"), [(0.9, "truck"), (0.3, "car")])
def test_class_comes_from_the_camera_when_its_evidence_is_stronger(camera_score: float, label: str) -> None:
    obj = SimObject("car", (25.0, 0.0, 0.8))
    dets = fuse(
        {
            "lidar_top": lidar_result(RIG, "lidar_top", [obj], scores=0.9),  # vote 0.5 * 0.9 for car
            "cam_front": camera_result(RIG, "cam_front", [obj], labels=["truck"], scores=camera_score),
        }
    )
    assert [d.label for d in dets] == [label]


def test_occluded_boxes_are_not_matched_and_visible_misses_lose_confidence() -> None:
    front = SimObject("car", (15.0, 0.0, 0.8))
    hidden = SimObject("car", (30.0, 0.0, 0.8))  # right behind it in the camera's view
    unseen = SimObject("car", (20.0, -6.0, 0.8))  # plainly visible, but the camera reports nothing
    others = [SimObject("car", (12.0, 5.0, 0.8)), SimObject("car", (25.0, 6.0, 0.8))]
    dets = fuse(
        {
            "lidar_top": lidar_result(RIG, "lidar_top", [front, hidden, unseen, *others], scores=0.6),
            "cam_front": camera_result(RIG, "cam_front", [front, *others], scores=0.9),
        }
    )
    assert only(dets, 15.0, 0.0).sources == ("lidar_top", "cam_front")
    hid = only(dets, 30.0, 0.0)
    assert hid.sources == ("lidar_top",) and hid.score == pytest.approx(0.6, abs=1e-6)  # no negative evidence
    # the camera found 3 of the 4 objects it should clearly see: missing the 4th is evidence against it
    miss = only(dets, 20.0, -6.0)
    assert miss.score == pytest.approx(0.6 * FusionParams().camera_miss_factor, abs=1e-6)


def test_a_camera_that_finds_little_gives_no_negative_evidence() -> None:
    objs = [SimObject("car", (15.0, 0.0, 0.8)), SimObject("car", (20.0, -6.0, 0.8)), SimObject("car", (25.0, 6.0, 0.8))]
    dets = fuse(
        {
            "lidar_top": lidar_result(RIG, "lidar_top", objs, scores=0.6),
            "cam_front": camera_result(RIG, "cam_front", objs[:1], scores=0.9),  # 1 of 3: not trusted to miss
        }
    )
    assert sorted(round(d.score, 6) for d in dets if d.sources == ("lidar_top",)) == [0.6, 0.6]


def test_a_camera_that_did_not_answer_gives_no_negative_evidence() -> None:
    obj = SimObject("car", (20.0, -6.0, 0.8))
    dets = fuse({"lidar_top": lidar_result(RIG, "lidar_top", [obj], scores=0.6), "cam_front": missing("cam_front")})
    assert dets[0].score == pytest.approx(0.6, abs=1e-6)


# -- radar ---------------------------------------------------------------------------------------------


def _radar_match(obj: SimObject, offset: tuple[float, float]) -> bool:
    dets = fuse(
        {
            "lidar_top": lidar_result(RIG, "lidar_top", [obj]),
            "radar_front": radar_result(RIG, "radar_front", [obj], offsets=[offset]),
        },
        FusionConfig(tracking=False, score_threshold=0.0, radar_only=False),
    )
    return "radar_front" in only(dets, *obj.center[:2]).sources


def test_radar_gate_follows_radar_accuracy_range_tight_azimuth_loose() -> None:
    car = SimObject("car", (30.0, 0.0, 0.8))
    # the same 2 m displacement of the radar object from the box surface...
    assert _radar_match(car, (0.0, 2.0))  # ...across the line of sight (azimuth, sigma ~ 1 m at 26 m): kept
    assert not _radar_match(car, (-2.0, 0.0))  # ...along it (range, sigma 0.6 m): rejected
    assert _radar_match(car, (-1.0, 0.0))


def test_radar_returns_from_the_near_face_match_the_box_centre() -> None:
    # a return on the rear bumper is 2.25 m from the centre of a car ahead: that is where radar sees it
    car = SimObject("car", (30.0, 0.0, 0.8))
    assert _radar_match(car, (0.0, 0.0))
    truck = SimObject("truck", (40.0, 4.0, 1.6), (8.5, 2.5, 3.2))
    assert _radar_match(truck, (0.0, 0.0))


def test_full_radar_velocity_is_attached_in_base_link() -> None:
    ahead = SimObject("car", (25.0, 1.0, 0.8), velocity=(5.0, 1.0), yaw=math.atan2(1.0, 5.0))
    behind = SimObject("car", (-20.0, -2.0, 0.8), velocity=(-3.0, 0.5), yaw=math.atan2(0.5, -3.0))
    dets = fuse(
        {
            "lidar_top": lidar_result(RIG, "lidar_top", [ahead, behind]),
            "radar_front": radar_result(RIG, "radar_front", [ahead, behind]),
            "radar_rear": radar_result(RIG, "radar_rear", [ahead, behind]),  # mounted backwards
        }
    )
    np.testing.assert_allclose(only(dets, 25.0, 1.0).velocity, (5.0, 1.0), atol=1e-4)
    np.testing.assert_allclose(only(dets, -20.0, -2.0).velocity, (-3.0, 0.5), atol=1e-4)
    assert only(dets, -20.0, -2.0).sources == ("lidar_top", "radar_rear")


def test_radial_velocity_is_turned_along_the_heading_of_elongated_boxes_only() -> None:
    car = SimObject("car", (25.0, 4.0, 0.8), velocity=(8.0, 0.0))
    ped = SimObject("pedestrian", (15.0, -5.0, 0.9), PED, velocity=(0.0, 1.2))
    dets = fuse(
        {
            "lidar_top": lidar_result(RIG, "lidar_top", [car, ped]),
            "radar_front": radar_result(RIG, "radar_front", [car, ped], full_velocity=False),
        }
    )
    np.testing.assert_allclose(only(dets, 25.0, 4.0).velocity, (8.0, 0.0), atol=0.05)
    # a pedestrian's box says nothing about its heading: only the radial component is known
    v = np.asarray(only(dets, 15.0, -5.0).velocity)
    u = np.array([15.0 - 3.7, -5.0 + 0.3]) / np.hypot(15.0 - 3.7, -5.0 + 0.3)
    assert abs(float(np.cross(u, v))) < 0.05  # along the line of sight
    assert float(u @ v) == pytest.approx(float(u @ np.array([0.0, 1.2])), abs=0.1)


def test_radar_time_offset_is_propagated_with_its_velocity() -> None:
    obj = SimObject("car", (30.0, 0.0, 0.8), velocity=(10.0, 0.0))
    config = FusionConfig(tracking=False, score_threshold=0.0, radar_only=True)
    now = fuse({"radar_front": radar_result(RIG, "radar_front", [obj], t_ns=0)}, config)
    earlier = fuse({"radar_front": radar_result(RIG, "radar_front", [obj], t_ns=-100_000_000)}, config)
    assert len(now) == len(earlier) == 1
    assert earlier[0].center[0] - now[0].center[0] == pytest.approx(1.0, abs=1e-4)


# -- single-sensor objects and degraded modes -------------------------------------------------------------


def test_radar_only_and_camera_only_objects_are_emitted_at_lower_confidence_when_enabled() -> None:
    by_both = SimObject("car", (18.0, -2.0, 0.8))
    by_camera = SimObject("car", (22.0, 4.0, 0.8))
    by_radar = SimObject("car", (45.0, -12.0, 0.8), velocity=(0.0, 3.0))
    results = {
        "lidar_top": lidar_result(RIG, "lidar_top", [by_both], scores=0.7),
        "cam_front": camera_result(RIG, "cam_front", [by_both, by_camera], scores=0.9),
        "radar_front": radar_result(RIG, "radar_front", [by_radar], scores=0.9),
    }
    dets = fuse(results)
    fused = only(dets, 18.0, -2.0)
    cam = only(dets, 22.0, 4.0, radius=2.5)
    rad = only(dets, 45.0, -12.0, radius=2.5)
    assert cam.sources == ("cam_front",) and rad.sources == ("radar_front",)
    assert cam.score < fused.score and rad.score < fused.score
    assert cam.label == "car" and rad.label == "car"
    off = fuse(results, FusionConfig(tracking=False, score_threshold=0.0, camera_only=False, radar_only=False))
    assert [d.sources for d in off] == [("lidar_top", "cam_front")]


@pytest.mark.parametrize(
    ("returns", "truck_returns", "label"),
    [(8, 6, "truck"), (6, 6, "truck"), (5, 6, "car"), (8, 0, "car"), (5, None, "truck"), (4, None, "car")],
)
def test_radar_only_class_comes_from_the_return_count(returns: int, truck_returns: int | None, label: str) -> None:
    """A radar-only object of many returns is a truck even when its RCS reads like a car's (0: rule off;
    None, not resolved for a drive: the default for real sensors, 5)."""
    obj = SimObject("car", (30.0, -8.0, 0.8))
    res = {"radar_front": radar_result(RIG, "radar_front", [obj], scores=0.9, rcs=10.0, returns=returns)}
    dets = fuse(res, FusionConfig(tracking=False, score_threshold=0.0, radar_truck_returns=truck_returns))
    assert only(dets, 30.0, -8.0, radius=3.0).label == label


def test_radar_only_returns_of_two_radars_add_up() -> None:
    """The same object seen by two radars: its radar-only object counts both radars' returns."""
    rig = make_rig(cameras=0, radars=4)
    obj = SimObject("car", (12.0, 8.0, 0.8))
    res = {
        name: radar_result(rig, name, [obj], scores=0.9, rcs=10.0, returns=4) for name in ("radar_front", "radar_left")
    }
    assert all(len(r.outputs["SCORES"]) == 1 for r in res.values())  # both radars see it
    fuser = Fuser(FusionConfig(tracking=False, score_threshold=0.0, radar_truck_returns=6), rig)
    dets, _ = fuser(Frame(0, 0, {}), res)
    assert [d.label for d in dets] == ["truck"]
    assert dets[0].sources == ("radar_front", "radar_left")


@pytest.mark.parametrize(
    ("lidar", "emitted"),
    [("ok", False), ("late", True), ("absent", True)],
)
def test_an_unsure_camera_detection_stands_alone_only_when_no_lidar_answered(lidar: str, emitted: bool) -> None:
    """Between camera_alone_min_score (0.2) and camera_only_min_score (0.3): a lidar that answered and saw
    nothing there outvotes it; without a lidar answer the camera is all there is."""
    obj = SimObject("car", (22.0, 4.0, 0.8))
    res = {"cam_front": camera_result(RIG, "cam_front", [obj], scores=0.25)}
    if lidar == "ok":
        res["lidar_top"] = lidar_result(RIG, "lidar_top", [], scores=0.7)
    elif lidar == "late":
        res["lidar_top"] = missing("lidar_top", SensorStatus.LATE)
    dets = fuse(res)
    assert len(near(dets, 22.0, 4.0, radius=2.5)) == int(emitted)
    if emitted:
        assert dets[0].sources == ("cam_front",)


def test_camera_only_depth_comes_from_the_ground_plane() -> None:
    for obj in (SimObject("car", (20.0, 1.5, 0.775)), SimObject("pedestrian", (12.0, -3.0, 0.875), PED)):
        dets = fuse({"cam_front": camera_result(RIG, "cam_front", [obj], scores=0.9)})
        d = only(dets, obj.center[0], obj.center[1], radius=2.0)
        assert d.center[0] == pytest.approx(obj.center[0], abs=0.6)
        assert d.center[1] == pytest.approx(obj.center[1], abs=0.3)
        assert d.uncertainty[0] > d.uncertainty[1]  # poor along the ray, good across it


def test_camera_and_radar_together_make_an_object_even_without_single_sensor_output() -> None:
    obj = SimObject("car", (30.0, 3.0, 0.775), velocity=(6.0, 0.0))
    config = FusionConfig(tracking=False, score_threshold=0.0, camera_only=False, radar_only=False)
    dets = fuse(
        {
            "lidar_top": missing("lidar_top", SensorStatus.LATE),
            "cam_front": camera_result(RIG, "cam_front", [obj]),
            "radar_front": radar_result(RIG, "radar_front", [obj]),
        },
        config,
    )
    d = only(dets, 30.0, 3.0, radius=1.0)  # radar range pulls the camera's depth into place
    assert d.sources == ("cam_front", "radar_front")
    np.testing.assert_allclose(d.velocity, (6.0, 0.0), atol=1e-3)


def test_missing_sensors_still_give_detections_with_honest_sources() -> None:
    objs = [SimObject("car", (20.0, 2.0, 0.8), velocity=(5.0, 0.0)), SimObject("car", (-15.0, -2.0, 0.8))]
    full = {
        "lidar_top": lidar_result(RIG, "lidar_top", objs),
        "cam_front": camera_result(RIG, "cam_front", objs),
        "cam_back": camera_result(RIG, "cam_back", objs),
        "radar_front": radar_result(RIG, "radar_front", objs),
        "radar_rear": radar_result(RIG, "radar_rear", objs),
    }
    dets = fuse(full)
    assert [d.sources for d in dets] == [
        ("lidar_top", "cam_back", "radar_rear"),
        ("lidar_top", "cam_front", "radar_front"),
    ]
    no_cams = fuse({**full, "cam_front": missing("cam_front", SensorStatus.LATE), "cam_back": missing("cam_back")})
    assert [d.sources for d in no_cams] == [("lidar_top", "radar_rear"), ("lidar_top", "radar_front")]
    no_lidar = fuse({**full, "lidar_top": missing("lidar_top", SensorStatus.ERROR)})
    assert len(no_lidar) == 2
    assert all("lidar_top" not in d.sources and len(d.sources) == 2 for d in no_lidar)
    assert fuse({name: missing(name) for name in full}) == []
    assert fuse({}) == []


def test_malformed_outputs_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    obj = SimObject("car", (20.0, 0.0, 0.8))
    bad = SensorResult("lidar_top", SensorStatus.OK, outputs={"BOXES": np.zeros((3, 5), np.float32)})
    with caplog.at_level(logging.WARNING, logger="perception.fusion"):
        dets = fuse({"lidar_top": bad, "cam_front": camera_result(RIG, "cam_front", [obj])})
    assert [d.sources for d in dets] == [("cam_front",)]
    assert "lidar_top" in caplog.text and "BOXES" in caplog.text


def test_sensors_outside_the_rig_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    obj = SimObject("car", (20.0, 0.0, 0.8))
    stray = lidar_result(RIG, "lidar_top", [obj])
    with caplog.at_level(logging.WARNING, logger="perception.fusion"):
        assert fuse({"lidar_roof": stray}) == []
    assert "lidar_roof" in caplog.text


def test_nms_removes_duplicates_but_keeps_neighbours() -> None:
    a = SimObject("car", (20.0, 0.0, 0.8))
    dup = SimObject("car", (20.4, 0.2, 0.8))
    p1, p2 = SimObject("pedestrian", (10.0, 6.0, 0.9), PED), SimObject("pedestrian", (10.0, 7.0, 0.9), PED)
    dets = fuse({"lidar_top": lidar_result(RIG, "lidar_top", [a, dup, p1, p2], scores=[0.8, 0.5, 0.6, 0.6])})
    assert len(dets) == 3
    assert only(dets, 20.0, 0.0).score == pytest.approx(0.8, abs=1e-6)
    assert len(near(dets, 10.0, 6.5)) == 2


def test_nms_of_a_crowd_of_duplicates_keeps_the_best() -> None:
    # 30 boxes of one car: 435 candidate pairs, more than the first pass has room for
    crowd = [SimObject("car", (20.0 + 0.01 * i, 0.0, 0.8)) for i in range(30)]
    scores = [0.3 + 0.02 * i for i in range(30)]
    dets = fuse({"lidar_top": lidar_result(RIG, "lidar_top", crowd, scores=scores)})
    assert len(dets) == 1
    assert dets[0].score == pytest.approx(max(scores), abs=1e-6)


# -- time and ego motion ------------------------------------------------------------------------------------


def test_ego_motion_between_capture_and_frame_time_is_compensated_from_poses() -> None:
    # the ego drives at 10 m/s and turns: at capture (50 ms before the frame) it was 0.5 m back, yawed -0.05
    poses = {
        0: EgoPose(0, Transform((100.0, 0.0, 0.0))),
        -50_000_000: EgoPose(-50_000_000, Transform.from_xyz_rpy((99.5, 0.0, 0.0), (0.0, 0.0, -0.05))),
    }
    obj = SimObject("car", (20.0, 0.0, 0.8))  # where the lidar saw it, in base_link at capture
    dets = fuse({"lidar_top": lidar_result(RIG, "lidar_top", [obj], t_ns=-50_000_000)}, ego_at=poses.get)
    rel = np.linalg.inv(poses[0].pose.matrix()) @ poses[-50_000_000].pose.matrix()
    expected = rel[:3, :3] @ np.array(obj.center) + rel[:3, 3]
    np.testing.assert_allclose(dets[0].center, expected, atol=1e-4)
    assert dets[0].center[0] == pytest.approx(20.0 * math.cos(0.05) - 0.5, abs=1e-3)
    assert dets[0].yaw == pytest.approx(-0.05, abs=1e-4)


def test_ego_motion_falls_back_to_the_frame_twist_then_to_a_static_ego() -> None:
    obj = SimObject("car", (20.0, 0.0, 0.8))
    results = {"lidar_top": lidar_result(RIG, "lidar_top", [obj], t_ns=-50_000_000)}
    fuser = Fuser(UNTRACKED, RIG)
    ego = EgoPose(0, Transform(), linear_velocity=(10.0, 0.0, 0.0))
    moving, _ = fuser(Frame(0, 0, {}, ego=ego), results)
    static, _ = fuser(Frame(0, 0, {}), results)
    assert moving[0].center[0] == pytest.approx(19.5, abs=1e-4)
    assert static[0].center[0] == pytest.approx(20.0, abs=1e-4)


def test_stage_timings_and_disabled_fusion() -> None:
    obj = SimObject("car", (20.0, 0.0, 0.8))
    tracked = Fuser(FusionConfig(), RIG)
    _, stages = tracked(Frame(0, 0, {}), {"lidar_top": lidar_result(RIG, "lidar_top", [obj])})
    assert set(stages) == {"fusion", "tracking"} and all(v >= 0 for v in stages.values())
    off = Fuser(FusionConfig(enabled=False), RIG)
    dets, stages = off(Frame(0, 0, {}), {"lidar_top": lidar_result(RIG, "lidar_top", [obj])})
    assert dets == () and set(stages) == {"fusion"}


def test_a_rig_camera_without_usable_calibration_is_a_clear_error() -> None:
    from dataclasses import replace

    from perception.errors import InputError
    from perception.types import CameraCalibration

    cam = RIG["cam_front"]
    for cal in (None, CameraCalibration(640, 360, (0.0,) * 9)):
        with pytest.raises(InputError, match="cam_front"):
            Fuser(UNTRACKED, {**RIG, "cam_front": replace(cam, calibration=cal)})


def test_the_fuser_checks_a_camera_matrix_by_the_sessions_rule() -> None:
    # One check (CameraCalibration.problem) for the session and the fuser: a K the closed-form inverse
    # cannot take (a value below the diagonal) or non-finite distortion is refused by both, naming the camera.
    from dataclasses import replace

    from perception.errors import InputError

    cam = RIG["cam_front"]
    assert cam.calibration is not None
    k = list(cam.calibration.k)
    k[3] = 0.5
    for cal in (replace(cam.calibration, k=tuple(k)), replace(cam.calibration, d=(float("nan"),) * 5)):
        assert cal.problem() is not None
        with pytest.raises(InputError, match=r"cam_front.*calibration"):
            Fuser(UNTRACKED, {**RIG, "cam_front": replace(cam, calibration=cal)})
