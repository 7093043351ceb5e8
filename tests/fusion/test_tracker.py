"""Tracking through the fuser: stable ids, coasting, deaths, velocity, birth, ego motion, order."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from perception.config import FusionConfig
from perception.errors import InputError
from perception.fusion import Fuser, FusionParams
from perception.fusion import _track_kernels as tk
from perception.fusion._testing import (
    SimObject,
    lidar_result,
    make_rig,
    missing,
    move,
    radar_result,
    scene_results,
    traffic_scene,
)
from perception.types import Detection3D, EgoPose, Frame, SensorResult, Transform

RIG = make_rig(cameras=0, radars=1)
DT_NS = 100_000_000
OBJECTS = [
    SimObject("car", (20.0, 3.5, 0.8), velocity=(8.0, 0.0)),
    SimObject("car", (-10.0, -3.5, 0.8), yaw=math.pi, velocity=(-6.0, 0.0)),
    SimObject("pedestrian", (12.0, 8.0, 0.9), (0.6, 0.6, 1.75), velocity=(0.0, -1.0)),
]


def lidar_frame(k: int, objects: Sequence[SimObject] = OBJECTS, noise: float = 0.05) -> dict[str, SensorResult]:
    return {"lidar_top": lidar_result(RIG, "lidar_top", move(objects, k * 0.1), t_ns=k * DT_NS, noise=noise, seed=k)}


def step(fuser: Fuser, k: int, results: dict[str, SensorResult]) -> tuple[Detection3D, ...]:
    dets, _ = fuser(Frame(k, k * DT_NS, {}), results)
    return dets


def by_position(dets: Sequence[Detection3D], objects: Sequence[SimObject], k: int) -> list[Detection3D]:
    """The detection nearest each object at frame ``k``."""
    out = []
    for o in move(objects, k * 0.1):
        out.append(min(dets, key=lambda d: math.hypot(d.center[0] - o.center[0], d.center[1] - o.center[1])))
    return out


def test_ids_stay_stable_and_velocity_converges_without_radar() -> None:
    fuser = Fuser(FusionConfig(score_threshold=0.0), RIG)
    ids = None
    for k in range(20):
        dets = step(fuser, k, lidar_frame(k))
        assert len(dets) == 3
        matched = by_position(dets, OBJECTS, k)
        if ids is None:
            ids = [d.id for d in matched]
            assert len(set(ids)) == 3
        assert [d.id for d in matched] == ids
    for d, o in zip(by_position(dets, OBJECTS, 19), OBJECTS, strict=True):
        assert math.hypot(d.velocity[0] - o.velocity[0], d.velocity[1] - o.velocity[1]) < 0.4
        assert d.label == o.label and d.sources == ("lidar_top",)
    # yaw follows the velocity (a lidar box alone cannot tell front from back)
    assert by_position(dets, OBJECTS, 19)[1].yaw == pytest.approx(math.pi, abs=0.05) or by_position(dets, OBJECTS, 19)[
        1
    ].yaw == pytest.approx(-math.pi, abs=0.05)


def test_tracks_coast_through_missing_frames_and_die_after_max_misses() -> None:
    config = FusionConfig(score_threshold=0.0, track_max_misses=2)
    fuser = Fuser(config, RIG)
    for k in range(5):
        before = step(fuser, k, lidar_frame(k))
    ids = sorted(d.id for d in before)
    # lidar late for one frame: confirmed tracks are predicted forward, no sensor contributed
    coast = step(fuser, 5, {"lidar_top": missing("lidar_top")})
    assert sorted(d.id for d in coast) == ids
    assert all(d.sources == () for d in coast)
    for d, o in zip(by_position(coast, OBJECTS, 5), OBJECTS, strict=True):
        assert d.center[0] == pytest.approx(move([o], 0.5)[0].center[0], abs=0.3)
        assert d.score < next(b.score for b in before if b.id == d.id)
    back = step(fuser, 6, lidar_frame(6))
    assert sorted(d.id for d in back) == ids
    # now gone for good: coast max_misses frames, then the tracks are deleted
    assert len(step(fuser, 7, {})) == 3
    assert len(step(fuser, 8, {})) == 3
    assert step(fuser, 9, {}) == ()
    reborn = step(fuser, 10, lidar_frame(10))
    assert not set(d.id for d in reborn) & set(ids)


def test_birth_needs_confirmation_and_tentative_tracks_die_on_a_miss() -> None:
    obj = [OBJECTS[0]]
    fuser = Fuser(FusionConfig(score_threshold=0.0, track_min_hits=2), RIG)
    first = step(fuser, 0, lidar_frame(0, obj))
    second = step(fuser, 1, lidar_frame(1, obj))
    assert first[0].id == second[0].id
    assert first[0].score < second[0].score  # tentative until the second hit
    once = Fuser(FusionConfig(score_threshold=0.0), RIG)
    step(once, 0, lidar_frame(0, obj))
    assert step(once, 1, {}) == ()  # a one-off detection does not coast
    immediate = Fuser(FusionConfig(score_threshold=0.0, track_min_hits=1), RIG)
    assert step(immediate, 0, lidar_frame(0, obj))[0].score == pytest.approx(0.8, abs=1e-6)


def test_score_threshold_applies_to_the_track_output() -> None:
    fuser = Fuser(FusionConfig(score_threshold=0.6), RIG)
    assert step(fuser, 0, lidar_frame(0)) == ()  # tentative: 0.8 * 0.6 < 0.6
    assert len(step(fuser, 1, lidar_frame(1))) == 3


def test_radial_radar_speeds_up_velocity_convergence() -> None:
    car = [SimObject("car", (25.0, 2.0, 0.8), velocity=(12.0, 0.0))]
    errors = {}
    for use_radar in (False, True):
        fuser = Fuser(FusionConfig(score_threshold=0.0, radar_only=False), RIG)
        for k in range(2):
            results = lidar_frame(k, car, noise=0.1)
            if use_radar:
                results["radar_front"] = radar_result(
                    RIG, "radar_front", move(car, k * 0.1), t_ns=k * DT_NS, full_velocity=False
                )
            dets = step(fuser, k, results)
        errors[use_radar] = math.hypot(dets[0].velocity[0] - 12.0, dets[0].velocity[1])
    assert errors[True] < 0.2 and errors[True] < errors[False] / 3


def test_tracking_in_the_map_frame_compensates_ego_motion() -> None:
    scene = traffic_scene(12, seed=3, ego_speed=15.0)
    rig = make_rig(cameras=2, radars=2)
    fuser = Fuser(FusionConfig(score_threshold=0.0), rig, ego_at=scene.ego_at)
    for k in range(12):
        dets, _ = fuser(Frame(k, k * DT_NS, {}), scene_results(scene, rig, k * DT_NS, seed=k))
    truth = scene.objects_at(11 * DT_NS)
    errs = []
    for o in truth:
        if math.hypot(*o.center[:2]) > 60:
            continue
        d = min(dets, key=lambda d: math.hypot(d.center[0] - o.center[0], d.center[1] - o.center[1]))
        errs.append(math.hypot(d.velocity[0] - o.velocity[0], d.velocity[1] - o.velocity[1]))
    assert errs and float(np.median(errs)) < 0.3  # over-ground velocity, not relative to the moving ego


def test_out_of_order_frames_are_answered_without_changing_tracks() -> None:
    fuser = Fuser(FusionConfig(score_threshold=0.0), RIG)
    for k in range(4):
        latest = step(fuser, k, lidar_frame(k))
    late = step(fuser, 2, lidar_frame(2))
    assert sorted(d.id for d in late) == sorted(d.id for d in latest)
    after = step(fuser, 4, lidar_frame(4))
    assert sorted(d.id for d in after) == sorted(d.id for d in latest)


def test_reset_starts_a_new_drive() -> None:
    fuser = Fuser(FusionConfig(score_threshold=0.0), RIG)
    for k in range(3):
        step(fuser, k, lidar_frame(k))
    fuser.reset()
    assert step(fuser, 0, {}) == ()
    assert sorted(d.id for d in step(fuser, 0, lidar_frame(0))) == [1, 2, 3]


def test_a_long_gap_drops_all_tracks() -> None:
    fuser = Fuser(FusionConfig(score_threshold=0.0), RIG)
    for k in range(3):
        ids = {d.id for d in step(fuser, k, lidar_frame(k))}
    later = step(fuser, 100, lidar_frame(100, [SimObject("car", (30.0, 0.0, 0.8))]))
    assert not {d.id for d in later} & ids


def test_untracked_output_numbers_detections_per_frame() -> None:
    fuser = Fuser(FusionConfig(tracking=False, score_threshold=0.0), RIG)
    dets = step(fuser, 0, lidar_frame(0))
    assert sorted(d.id for d in dets) == [0, 1, 2]


# -- the standing-still model ------------------------------------------------------------------------
PARKED = [SimObject("car", (25.0, 6.0, 0.8)), SimObject("car", (30.0, -5.0, 0.8), yaw=0.4)]
CV_ONLY = FusionParams(track_still_margin=(-math.inf,) * 4)
KEYFRAME_NS = 500_000_000  # 2 Hz, as the nuScenes keyframes


def _jittered(fuser: Fuser, objects: Sequence[SimObject], frames: int, jitter: float) -> list[tuple[Detection3D, ...]]:
    """Frames at 2 Hz of boxes whose centres jitter by ``jitter`` m (a sparse cluster's L-fit)."""
    out = []
    for k in range(frames):
        results = {
            "lidar_top": lidar_result(
                RIG, "lidar_top", move(objects, k * 0.5), t_ns=k * KEYFRAME_NS, noise=jitter, seed=100 + k
            )
        }
        out.append(fuser(Frame(k, k * KEYFRAME_NS, {}), results)[0])
    return out


def _error(frames: list[tuple[Detection3D, ...]], objects: Sequence[SimObject], first: int) -> float:
    errs = []
    for k, dets in enumerate(frames[first:], start=first):
        for d, o in zip(by_position(dets, move(objects, k * 0.5), 0), move(objects, k * 0.5), strict=True):
            errs.append(math.hypot(d.center[0] - o.center[0], d.center[1] - o.center[1]))
    return float(np.mean(errs))


def test_a_parked_car_under_a_jittering_box_fit_stands_still() -> None:
    """Boxes of parked cars whose centres jitter by the lidar sigma (0.25 m) at 2 Hz: the constant-velocity
    filter reads the jitter as motion and drifts; the standing-still model averages the detections, keeps
    one track per car and reports no velocity once the track is no longer young."""
    jitter = FusionParams().lidar_sigma
    still = _jittered(Fuser(FusionConfig(score_threshold=0.0), RIG), PARKED, 24, jitter)
    moving = _jittered(Fuser(FusionConfig(score_threshold=0.0), RIG, params=CV_ONLY), PARKED, 24, jitter)
    for dets in still[tk.YOUNG_HITS :]:
        assert len(dets) == 2 and {d.id for d in dets} == {d.id for d in still[0]}
        assert all(d.velocity == (0.0, 0.0) for d in dets)
    assert _error(still, PARKED, 8) < 0.7 * _error(moving, PARKED, 8)
    assert _error(still, PARKED, 8) < 0.2  # a single box is 0.31 m off on average (0.25 * sqrt(pi / 2))
    assert max(math.hypot(*d.velocity) for dets in moving[8:] for d in dets) > 0.3  # what the jitter did before


def test_a_parked_car_that_drives_off_keeps_its_track_and_gains_a_velocity() -> None:
    """Parked for 3 s, then off at 3 m/s^2 up to 9 m/s (10 Hz, lidar only): the track keeps its id, is
    taken to move within a second, and its velocity and position follow the car."""

    def x_at(t: float) -> float:  # 3 s parked, 3 s at 3 m/s^2, then 9 m/s
        tau = min(max(0.0, t - 3.0), 3.0)
        return 20.0 + 1.5 * tau**2 + 9.0 * max(0.0, t - 6.0)

    fuser = Fuser(FusionConfig(score_threshold=0.0), RIG)
    ids, moving_from = set(), None
    for k in range(80):
        car = [SimObject("car", (x_at(k * 0.1), 4.0, 0.8))]
        dets = step(fuser, k, {"lidar_top": lidar_result(RIG, "lidar_top", car, t_ns=k * DT_NS, noise=0.05, seed=k)})
        assert len(dets) == 1
        ids.add(dets[0].id)
        if tk.YOUNG_HITS <= k < 30:
            assert dets[0].velocity == (0.0, 0.0)
        elif moving_from is None and dets[0].velocity != (0.0, 0.0):
            moving_from = k
    assert ids == {1}
    assert moving_from is not None and moving_from <= 40
    assert dets[0].velocity[0] == pytest.approx(9.0, abs=0.4) and abs(dets[0].velocity[1]) < 0.4
    assert dets[0].center[0] == pytest.approx(x_at(7.9), abs=0.3)


def test_a_radar_velocity_makes_a_track_move_at_once() -> None:
    """A car at 12 m/s first seen with a full radar velocity is predicted by it from its first frames."""
    car = [SimObject("car", (25.0, 2.0, 0.8), velocity=(12.0, 0.0))]
    fuser = Fuser(FusionConfig(score_threshold=0.0, radar_only=False), RIG)
    for k in range(4):
        results = lidar_frame(k, car, noise=0.1)
        results["radar_front"] = radar_result(RIG, "radar_front", move(car, k * 0.1), t_ns=k * DT_NS)
        dets = step(fuser, k, results)
        assert len(dets) == 1 and dets[0].id == 1
        assert dets[0].velocity[0] == pytest.approx(12.0, abs=1.0)


def test_each_frame_s_association_is_a_matching_with_both_rounds_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    # The two association rounds answer with pairs of their own buffers: the second round's candidates
    # once overwrote the first round's pairs (views of the shared buffers) before they were returned, so
    # a track could be updated twice and another not at all (issue 45; the fix of commit 770c7c0). The
    # young moving tracks go to the second round in the first frames here, beside the first round's pairs.
    fuser = Fuser(FusionConfig(score_threshold=0.0), RIG)
    tracker = fuser._tracker
    assert tracker is not None
    answers: list[tuple[list[int], list[int]]] = []
    associate = tracker._associate

    def recorded(*args: Any) -> tuple[Any, Any]:
        rows, cols = associate(*args)
        answers.append((rows.tolist(), cols.tolist()))
        return rows, cols

    monkeypatch.setattr(tracker, "_associate", recorded)
    for k in range(20):
        step(fuser, k, lidar_frame(k))
    assert len(answers) == 20
    for k, (rows, cols) in enumerate(answers[1:], 1):  # from frame 1 on, the three objects are tracked
        assert len(set(rows)) == len(rows) and len(set(cols)) == len(cols), (k, rows, cols)  # a matching
        assert sorted(rows) == [0, 1, 2] and sorted(cols) == [0, 1, 2], (k, rows, cols)  # every track, once


def test_a_shed_frame_gets_the_tracks_predicted_to_its_time_and_the_tracker_is_not_advanced() -> None:
    # Frames 0-9 tracked; frame 10 is shed (no samples processed): its prediction has every track where
    # its object is at frame 10, and the tracker, untouched, tracks frame 11 exactly as without it.
    config = FusionConfig(score_threshold=0.0)
    shed, plain = Fuser(config, RIG), Fuser(config, RIG)
    for k in range(10):
        step(shed, k, lidar_frame(k))
        step(plain, k, lidar_frame(k))
    predicted = shed.predict(Frame(10, 10 * DT_NS, {}))
    assert len(predicted) == 3
    for d, o in zip(by_position(predicted, OBJECTS, 10), move(OBJECTS, 1.0), strict=True):
        assert math.hypot(d.center[0] - o.center[0], d.center[1] - o.center[1]) < 0.5
    assert shed.predict(Frame(5, 5 * DT_NS, {}))  # an older time: read-only too
    assert step(shed, 11, lidar_frame(11)) == step(plain, 11, lidar_frame(11))
    assert Fuser(config, RIG).predict(Frame(0, 0, {})) == ()  # nothing tracked yet: nothing predicted


def test_a_tracker_restored_from_a_state_tracks_on_as_the_one_it_was_taken_from() -> None:
    # (a recording replayed from a later segment starts from the state recorded there: perception.record)
    first = Fuser(FusionConfig(score_threshold=0.0), RIG)
    for k in range(6):
        step(first, k, lidar_frame(k))
    state = first.tracker_state()
    assert len(state["table"]) == 3
    second = Fuser(FusionConfig(score_threshold=0.0), RIG)
    second.restore_tracker_state(state)
    for k in range(6, 12):
        assert step(second, k, lidar_frame(k)) == step(first, k, lidar_frame(k))
    state["table"][:] = 0.0  # a copy was taken: the caller's arrays are not the tracker's
    now, then = first.tracker_state(), second.tracker_state()
    assert now.keys() == then.keys() and all(np.array_equal(now[k], then[k]) for k in now)


def test_a_tracker_state_of_another_shape_is_refused_naming_the_array() -> None:
    fuser = Fuser(FusionConfig(score_threshold=0.0), RIG)
    state = dict(fuser.tracker_state())
    with pytest.raises(InputError, match="'sources' has shape"):
        fuser.restore_tracker_state({**state, "sources": np.zeros((0, 99), bool)})  # another rig's
    with pytest.raises(InputError, match="'p' missing"):
        fuser.restore_tracker_state({k: v for k, v in state.items() if k != "p"})
    with pytest.raises(InputError, match="different numbers of tracks"):
        fuser.restore_tracker_state({**state, "p": np.zeros((2, 4, 4))})
    with pytest.raises(InputError, match="tracking off"):
        Fuser(FusionConfig(tracking=False), RIG).restore_tracker_state(state)


def _odometry_frame(k: int, ego_xy: tuple[float, float], age_ns: int = 0) -> Frame:
    """Frame ``k`` whose own odometry puts the (standing) ego at ``ego_xy`` in ``map``, ``age_ns`` old."""
    return Frame(k, k * DT_NS, {}, ego=EgoPose(k * DT_NS - age_ns, Transform((*ego_xy, 0.0))))


def test_a_frame_without_odometry_keeps_tracks_held_in_map_where_they_are() -> None:
    # a live host's odometry stops for a frame (older than live.ego_max_age_ms): the tracks, held in map, were
    # output at their map coordinates as if base_link ones (a car 515 m away) and the frame's detection of the
    # car began a second track; the last pose is kept instead (unknown ego motion is none, as fusion takes it)
    car = [SimObject("car", (15.0, 2.0, 0.8))]
    fuser = Fuser(FusionConfig(score_threshold=0.0), RIG, ego_max_age_ns=100_000_000)
    seen = []
    for k in range(7):
        frame = _odometry_frame(k, (500.0, -200.0), age_ns=300_000_000 if k in (4, 5) else 0)
        dets, _ = fuser(frame, lidar_frame(k, car, noise=0.0))
        assert len(dets) == 1, (k, dets)
        seen.append(dets[0])
    assert {d.id for d in seen} == {seen[0].id}
    for d in seen:
        assert math.hypot(d.center[0] - 15.0, d.center[1] - 2.0) < 0.2, d
    assert fuser.tracker_state()["world"][0][:2, 3].tolist() == [500.0, -200.0]


def test_tracks_held_without_a_pose_are_dropped_when_the_first_pose_comes() -> None:
    # born in base_link (odometry not there yet): read as map coordinates they would be another place
    car = [SimObject("car", (15.0, 2.0, 0.8))]
    fuser = Fuser(FusionConfig(score_threshold=0.0), RIG, ego_max_age_ns=100_000_000)
    before = [step(fuser, k, lidar_frame(k, car, noise=0.0)) for k in range(3)]
    assert [len(d) for d in before] == [1, 1, 1] and len(fuser.tracker_state()["world"]) == 0
    dets, _ = fuser(_odometry_frame(3, (500.0, -200.0)), lidar_frame(3, car, noise=0.0))
    assert len(dets) == 1 and dets[0].id != before[-1][0].id
    assert math.hypot(dets[0].center[0] - 15.0, dets[0].center[1] - 2.0) < 0.2
    assert len(fuser.tracker_state()["table"]) == 1


def test_a_tracker_state_recorded_without_its_pose_tracks_on_as_then() -> None:
    # a recording of format 5 or older holds no 'world': its tracks are taken in the next pose's frame, as then
    car = [SimObject("car", (15.0, 2.0, 0.8))]
    first = Fuser(FusionConfig(score_threshold=0.0), RIG)
    for k in range(4):
        first(_odometry_frame(k, (500.0, -200.0)), lidar_frame(k, car, noise=0.0))
    old = {k: v for k, v in first.tracker_state().items() if k != "world"}
    second = Fuser(FusionConfig(score_threshold=0.0), RIG)
    second.restore_tracker_state(old)
    frame = _odometry_frame(4, (500.0, -200.0))
    assert second(frame, lidar_frame(4, car, noise=0.0))[0] == first(frame, lidar_frame(4, car, noise=0.0))[0]
    with pytest.raises(InputError, match="'world' is"):
        second.restore_tracker_state({**old, "world": np.zeros((2, 4, 4))})
