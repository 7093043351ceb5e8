"""The simulated world: scenario presets, exact ground-truth kinematics, traffic sanity."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from perception.errors import ConfigError
from perception.sim import SCENARIOS, Simulator
from perception.sim._scenarios import get_scenario
from perception.sim._world import World
from perception.types import LABELS, EgoPose, GroundTruthObject, ImageSample, PointCloudSample


@pytest.fixture(scope="module")
def urban() -> World:
    return World(SCENARIOS["urban"], 7, 6.0)


def _near(gt_objects: tuple[GroundTruthObject, ...]) -> int:
    return sum(1 for o in gt_objects if np.hypot(o.center[0], o.center[1]) <= 100.0)


def test_presets_have_their_traffic(urban: World) -> None:
    gt = urban.ground_truth(1_000_000_000)
    labels = {o.label for o in gt.objects}
    assert labels == set(LABELS)
    assert 15 <= _near(gt.objects) <= 35
    highway = World(SCENARIOS["highway"], 7, 2.0)
    hg = highway.ground_truth(1_000_000_000)
    assert {o.label for o in hg.objects} <= {"car", "truck"}
    assert highway.ego_pose(1_000_000_000).linear_velocity[0] == pytest.approx(25.0, rel=0.08)
    dense = World(SCENARIOS["dense"], 7, 2.0)
    assert _near(dense.ground_truth(1_000_000_000).objects) > 2 * _near(gt.objects)
    with pytest.raises(ConfigError, match="unknown scenario"):
        get_scenario("rural")


def test_ground_truth_velocity_matches_motion(urban: World) -> None:
    """GT velocity (over ground, in base_link) equals the finite difference of map positions."""
    t0, dt = 2_000_000_000, 1_000_000  # 1 ms
    a, b = urban.ground_truth(t0), urban.ground_truth(t0 + dt)
    ego_a, ego_b = urban.ego_pose(t0), urban.ego_pose(t0 + dt)

    def to_map(ego: EgoPose, c: tuple[float, float, float]) -> npt.NDArray[np.float64]:
        return ego.pose.apply([c])[0, :2]

    by_id = {o.track_id: o for o in b.objects}
    rot = ego_a.pose.rotation_matrix()[:2, :2]
    checked = 0
    for o in a.objects:
        if o.track_id not in by_id:
            continue
        v_map = (to_map(ego_b, by_id[o.track_id].center) - to_map(ego_a, o.center)) / 1e-3
        v_base = rot.T @ v_map
        assert v_base == pytest.approx(np.array(o.velocity), abs=0.05), o
        checked += 1
    assert checked > 20
    # the ego's own odometry agrees with its pose change
    fwd = rot.T @ ((np.array(ego_b.pose.translation) - np.array(ego_a.pose.translation))[:2] / 1e-3)
    assert fwd == pytest.approx([ego_a.linear_velocity[0], 0.0], abs=0.02)


def test_vehicles_in_a_lane_keep_their_distance(urban: World) -> None:
    for t in (0, 3_000_000_000, 5_900_000_000):
        gt = urban.ground_truth(t)
        cars = [o for o in gt.objects if o.label in ("car", "truck")]
        for i, a in enumerate(cars):
            for b in cars[i + 1 :]:
                lateral = abs(a.center[1] - b.center[1])
                gap = abs(a.center[0] - b.center[0]) - (a.size[0] + b.size[0]) / 2
                assert lateral > 1.5 or gap > 0.5, (a, b)


def test_sizes_are_realistic(urban: World) -> None:
    gt = urban.ground_truth(0)
    for o in gt.objects:
        length, width, height = o.size
        if o.label == "car":
            assert 3.5 < length < 5.5 and 1.5 < width < 2.2 and 1.2 < height < 2.0
        elif o.label == "truck":
            assert length > 6 and height > 2.8
        elif o.label == "pedestrian":
            assert length < 0.8 and width < 0.9 and 1.0 < height < 2.0
        else:
            assert 1.4 < length < 2.0 and height > 1.4


def test_sensor_clocks_are_unaligned_and_jittered() -> None:
    sim = Simulator("urban", seed=3, duration_s=2.0)
    lidar = np.diff(sim.capture_times("lidar_top"))
    cam = sim.capture_times("cam_front")
    radar = sim.capture_times("radar_front")
    assert np.all(np.abs(lidar - 100_000_000) < 2_000_000) and np.std(lidar) > 0
    assert len(cam) == 24 and len(radar) == 26
    assert not set(cam) & set(radar)
    assert sim.ground_truth_times() == sim.capture_times("lidar_top")
    assert len(sim.ego_times()) == 100
    # the same seed gives the same clocks, another seed other jitter
    assert Simulator("urban", seed=3, duration_s=2.0).capture_times("cam_front") == cam
    assert Simulator("urban", seed=4, duration_s=2.0).capture_times("cam_front") != cam


def test_sample_frames_are_pure_functions() -> None:
    a = Simulator("urban", seed=11, duration_s=2.0)
    b = Simulator("urban", seed=11, duration_s=2.0)
    # random access: b makes frame k first, a after every earlier frame
    for name in ("lidar_top", "radar_front", "cam_back"):
        k = len(a.capture_times(name)) - 1
        late = b.sample(name, k)
        for j in range(k + 1):
            early = a.sample(name, j)
        assert early.t_ns == late.t_ns
        if isinstance(early, PointCloudSample):
            assert isinstance(late, PointCloudSample) and early.points.tobytes() == late.points.tobytes()
        else:
            assert isinstance(late, ImageSample) and early.data == late.data


def test_longer_drive_holds_the_same_world() -> None:
    short = World(SCENARIOS["urban"], 11, 1.0)
    long = World(SCENARIOS["urban"], 11, 6.0)
    ga, gb = short.ground_truth(500_000_000), long.ground_truth(500_000_000)
    by_id = {o.track_id: o for o in gb.objects}
    crosser = 100 * 1_000_000_000  # track ids of road-crossing pedestrians (their gaps depend on all traffic)
    kept = [o for o in ga.objects if o.track_id < crosser]
    assert len(kept) > 20
    for o in kept:  # the same actors, up to float rounding
        assert o.track_id in by_id
        assert o.center == pytest.approx(by_id[o.track_id].center, abs=1e-9) and o.size == by_id[o.track_id].size
    assert short.ego_pose(900_000_000) == long.ego_pose(900_000_000)


def test_simulator_errors_name_the_sensor() -> None:
    sim = Simulator("urban", seed=1, duration_s=1.0)
    with pytest.raises(ConfigError, match="no sensor 'nope'"):
        sim.sample("nope", 0)
    with pytest.raises(ConfigError, match=r"frames 0\.\.9, not 10"):
        sim.sample("lidar_top", 10)
    with pytest.raises(ConfigError, match="not a camera"):
        sim.render("radar_front", 0)
    with pytest.raises(ConfigError, match="seed"):
        Simulator("urban", seed=-1)
    with pytest.raises(ConfigError, match="duration"):
        Simulator("urban", duration_s=0)
