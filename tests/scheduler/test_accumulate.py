"""Sweep accumulation: earlier sweeps of a point sensor, moved by the ego motion into the frame's sweep."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pytest

from perception.config import LiveConfig, SensorConfig, TriggerConfig, load_config
from perception.errors import ConfigError
from perception.live._assembler import LiveAssembler
from perception.scheduler import FrameAssembler, SweepAccumulator
from perception.types import EgoPose, Frame, PointCloudSample, SensorSpec, Transform

MS = 1_000_000
FIELDS = ("x", "y", "z", "intensity")
# The lidar sits 1 m ahead of base_link and 1.8 m up, turned 90 degrees left.
MOUNT = Transform.from_xyz_rpy((1.0, 0.0, 1.8), (0.0, 0.0, math.pi / 2))
RIG = {"lidar": SensorSpec("lidar", "lidar", "lidar", MOUNT, "/lidar")}
# Two world points that stand still while the ego drives past them.
WORLD = np.array([[20.0, 3.0, 0.5], [12.0, -4.0, 1.0]])


def ego(t_ms: float) -> EgoPose:
    """The ego on an arc: 10 m/s forward, turning left at 0.5 rad/s."""
    t, v, w = t_ms / 1e3, 10.0, 0.5
    xyz = (v / w * math.sin(w * t), v / w * (1.0 - math.cos(w * t)), 0.0)
    return EgoPose(round(t_ms * MS), Transform.from_xyz_rpy(xyz, (0.0, 0.0, w * t)), (v, 0.0, 0.0), w)


def ego_at(t_ns: int) -> EgoPose:
    return ego(t_ns / MS)


def sweep(t_ms: float, intensity: float) -> PointCloudSample:
    """The world points as the lidar sees them at ``t_ms``."""
    sensor_from_map = ego(t_ms).pose.compose(MOUNT).inverse()
    pts = np.hstack([sensor_from_map.apply(WORLD), np.full((len(WORLD), 1), intensity)]).astype(np.float32)
    return PointCloudSample("lidar", round(t_ms * MS), "lidar", pts, FIELDS)


def lidar(**kw: object) -> SensorConfig:
    return SensorConfig("lidar", "lidar", "lidar_detector", sync_window_ms=0, **kw)  # type: ignore[arg-type]


def frame_at(t_ms: float, sample: PointCloudSample, pose: EgoPose | None) -> Frame:
    return Frame(frame_id=0, t_ns=round(t_ms * MS), samples={"lidar": sample}, ego=pose)


def test_earlier_sweeps_land_where_the_current_sweep_sees_the_same_static_points() -> None:
    acc = SweepAccumulator([lidar(accumulate_ms=120)], {"lidar": MOUNT}, ego_at=ego_at)
    history = [sweep(t, t) for t in (0, 100, 200, 250, 300)]
    out = acc.apply(frame_at(300, history[-1], ego(300)), {"lidar": history})
    pts = out.samples["lidar"].points
    assert isinstance(out.samples["lidar"], PointCloudSample) and out.samples["lidar"].t_ns == 300 * MS
    # the sweeps at 200 and 250 ms are within 120 ms; the one at 100 ms is not, nor is the frame's own twice
    assert sorted(set(pts[:, 3].tolist())) == [200.0, 250.0, 300.0]
    assert len(pts) == 3 * len(WORLD)
    for k in range(3):
        np.testing.assert_allclose(pts[k * len(WORLD) : (k + 1) * len(WORLD), :3], history[-1].points[:, :3], atol=2e-4)
    assert (acc.stats.sweeps, acc.stats.merged, acc.stats.no_ego_motion) == (1, 2, 0)
    assert acc.report() == {"window_ms": {"lidar": 120.0}, "sweeps": 1, "merged": 2, "no_ego_motion": 0}


def test_without_poses_the_frame_s_ego_twist_moves_the_earlier_sweep() -> None:
    acc = SweepAccumulator([lidar(accumulate_ms=120)], {"lidar": MOUNT})
    history = [sweep(200, 1.0), sweep(300, 2.0)]
    out = acc.apply(frame_at(300, history[-1], ego(300)), {"lidar": history})
    pts = out.samples["lidar"].points
    # the ego drives a constant-twist arc, which is what the twist integrates
    np.testing.assert_allclose(pts[len(WORLD) :, :3], history[-1].points[:, :3], atol=2e-4)


def test_no_ego_motion_sends_the_sweep_alone_counted_and_warned_once(caplog: pytest.LogCaptureFixture) -> None:
    acc = SweepAccumulator([lidar(accumulate_ms=120)], {"lidar": MOUNT})
    history = [sweep(0, 0), sweep(100, 1), sweep(200, 2)]
    with caplog.at_level(logging.WARNING):
        for i in (1, 2):
            out = acc.apply(frame_at(100 * i, history[i], None), {"lidar": history[: i + 1]})
            assert out.samples["lidar"] is history[i]
    assert acc.stats.no_ego_motion == 2 and acc.stats.merged == 0
    assert [r.message for r in caplog.records if "not accumulated" in r.message] == [
        "sensor lidar: no ego poses or ego velocity, so its sweeps are not accumulated (counted)"
    ]


def test_the_window_comes_from_the_kind_and_zero_turns_it_off() -> None:
    assert lidar().accumulate_ns == 120 * MS  # the lidar kind's default
    assert SensorConfig("radar", "radar", "radar_detector").accumulate_ns == 0
    assert not SweepAccumulator([lidar(accumulate_ms=0)], {"lidar": MOUNT})
    # the kind's default where the mount is unknown: nothing to move the sweeps with, so off
    assert not SweepAccumulator([lidar()], None)


def test_asking_for_accumulation_without_the_sensor_s_mount_is_an_error() -> None:
    with pytest.raises(ConfigError, match="sensor 'lidar': accumulating its sweeps needs its extrinsic, and the rig"):
        SweepAccumulator([lidar(accumulate_ms=100)], {})


def test_the_assembler_keeps_and_merges_the_sweeps_in_the_window() -> None:
    asm = FrameAssembler([lidar()], TriggerConfig(sensor="lidar"), ego_at=ego_at, rig=RIG)
    frames = list(asm.feed([sweep(t, t) for t in range(0, 500, 100)]))
    assert [len(f.samples["lidar"].points) for f in frames] == [2, 4, 4, 4, 4]  # type: ignore[union-attr]
    assert asm.accumulator.stats.merged == 4
    for f in frames[1:]:
        np.testing.assert_allclose(f.samples["lidar"].points[2:, :3], f.samples["lidar"].points[:2, :3], atol=2e-4)  # type: ignore[union-attr]


def test_the_live_assembler_moves_earlier_sweeps_by_the_host_s_ego_poses() -> None:
    cfg = LiveConfig(transit_ms=20, trigger_tolerance_ms=50)
    trigger = TriggerConfig(sensor="lidar")
    asm: LiveAssembler[str] = LiveAssembler([lidar()], trigger, cfg, rates={"lidar": 10.0}, rig=RIG)
    for t in (0, 50, 100, 150, 200):
        asm.add_ego(ego(t), t * MS)
    frames = []
    for t in (0, 100, 200):
        asm.add(sweep(t, t), t * MS + 5 * MS)
        frames += [f for f, _ in asm.due(t * MS + 6 * MS)]
    frames += [f for f, _ in asm.close()]
    assert [len(f.samples["lidar"].points) for f in frames] == [2, 4, 4]  # type: ignore[union-attr]
    for f in frames[1:]:
        np.testing.assert_allclose(f.samples["lidar"].points[2:, :3], f.samples["lidar"].points[:2, :3], atol=2e-4)  # type: ignore[union-attr]
    assert asm.accumulator.report()["merged"] == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("  - {name: cam, kind: camera, model: m, accumulate_ms: 100}", "only point-cloud sensors accumulate sweeps"),
        ("  - {name: lid, kind: lidar, model: m, accumulate_ms: -1}", "accumulate_ms: must be within 0..2000"),
        ("  - {name: lid, kind: lidar, model: m, accumulate_ms: 5000}", "accumulate_ms: must be within 0..2000"),
    ],
)
def test_a_bad_accumulate_ms_names_the_file_and_the_sensor(tmp_path: Path, line: str, message: str) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(f"sensors:\n{line}\n")
    with pytest.raises(ConfigError) as info:
        load_config(profile)
    assert str(info.value).startswith(f"{profile}: sensors[0]")
    assert message in str(info.value)


def test_a_camera_default_with_accumulation_is_refused_when_the_drive_s_sensors_are_resolved(tmp_path: Path) -> None:
    from perception.config import resolve_sensors

    profile = tmp_path / "p.yaml"
    profile.write_text("sensor_defaults:\n  camera: {model: yolox_nano, accumulate_ms: 50}\n")
    cfg = load_config(profile)
    cal_rig = {"lidar": RIG["lidar"], "cam": SensorSpec("cam", "camera", "cam", Transform.identity(), "/cam")}
    with pytest.raises(ConfigError) as info:
        resolve_sensors(cfg, cal_rig)
    assert str(info.value).startswith(f"{profile}: sensor_defaults.camera: sensor 'cam' (camera): accumulate_ms")


def test_the_merged_cloud_is_written_once_and_taken_by_the_sample_without_a_copy() -> None:
    """The sweep then each earlier one moved (what ``SweepAccumulator.moved`` gives it), in one read-only array
    of its own that the merged sample holds as it is."""
    acc = SweepAccumulator([lidar(accumulate_ms=120)], {"lidar": MOUNT}, ego_at=ego_at)
    history = [sweep(t, t) for t in (200, 250, 300)]
    sample = acc.apply(frame_at(300, history[-1], ego(300)), {"lidar": history}).samples["lidar"]
    assert isinstance(sample, PointCloudSample)
    expected = [history[-1].points]
    for (t_ns, n, m), earlier in zip(sample.merged_from, history[:2], strict=True):
        assert (t_ns, n) == (earlier.t_ns, earlier.points.shape[0])
        expected.append(SweepAccumulator.moved(earlier.points, np.array(m).reshape(4, 4)))
    np.testing.assert_array_equal(sample.points, np.concatenate(expected))
    assert sample.points.base is None and not sample.points.flags.writeable
    # a sample built on a read-only array of its own keeps it; any other array is copied
    same = PointCloudSample("lidar", 0, "lidar", sample.points, FIELDS)
    assert same.points is sample.points
    writable = np.zeros((2, 4), np.float32)
    assert PointCloudSample("lidar", 0, "lidar", writable, FIELDS).points is not writable
