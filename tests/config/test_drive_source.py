"""Defaults that follow the drive's origin (simulated or recorded): the camera model, the budget and the
radar return count that makes a radar-only truck."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from perception.config import CAMERA_MODEL_SIMULATED, default_camera_model, load_config, resolve_sensors
from perception.config._drive_source import CAMERA_MODEL_RECORDED
from perception.config._model import RADAR_TRUCK_RETURNS_RECORDED, BudgetConfig, FusionConfig
from perception.drives import DriveReader
from perception.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_the_bundled_simulated_drive_gets_the_simulator_trained_cnn() -> None:
    with DriveReader(REPO / "replay_data" / "urban_seed7_10s.mcap") as drive:
        assert default_camera_model(drive.metadata) == CAMERA_MODEL_SIMULATED == "camera_detector"


def test_recordings_get_yolox() -> None:
    for source in ({"source": "nuscenes"}, {"source": "kitti"}, {"source": "rosbag2"}, {}):
        assert default_camera_model(source) == CAMERA_MODEL_RECORDED == "yolox_nano"


def test_both_models_are_in_the_repository() -> None:
    for model in (CAMERA_MODEL_SIMULATED, CAMERA_MODEL_RECORDED):
        assert (REPO / "models" / model / "config.pbtxt").is_file()


def test_a_recorded_drive_gets_the_recorded_budget_and_a_simulated_one_the_total() -> None:
    profile = load_config(REPO / "launch" / "replay.yaml")
    assert profile.budget.total_ms == 200 and profile.budget.recorded_total_ms == 450
    with DriveReader(REPO / "replay_data" / "urban_seed7_10s.mcap") as drive:
        sim = resolve_sensors(profile, drive.rig, metadata=drive.metadata)
        real = resolve_sensors(profile, drive.rig, metadata={"source": "nuscenes"})
        listed = resolve_sensors(sim, drive.rig, metadata={"source": "nuscenes"})  # already resolved
    assert (sim.budget.total_ms, real.budget.total_ms) == (200, 450)
    assert real.budget.join_ns == (450 - profile.budget.fusion_reserve_ms) * 1_000_000
    assert listed.budget.total_ms == 200  # decided once, for the drive the config was resolved for
    # a profile that sets no recorded budget holds every drive to total_ms
    plain = dataclasses.replace(profile, budget=BudgetConfig(total_ms=300))
    with DriveReader(REPO / "replay_data" / "urban_seed7_10s.mcap") as drive:
        assert resolve_sensors(plain, drive.rig, metadata={"source": "kitti"}).budget.total_ms == 300


def test_a_recorded_budget_below_the_fusion_reserve_is_an_error_naming_the_key(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("budget: {total_ms: 200, fusion_reserve_ms: 15, recorded_total_ms: 10}\n")
    with pytest.raises(ConfigError, match="recorded_total_ms") as info:
        load_config(profile)
    assert str(profile) in str(info.value)


def test_the_radar_truck_return_count_follows_the_drive_unless_the_profile_sets_it(tmp_path: Path) -> None:
    profile = load_config(REPO / "launch" / "replay.yaml")
    assert profile.fusion.radar_truck_returns is None
    with DriveReader(REPO / "replay_data" / "urban_seed7_10s.mcap") as drive:
        sim = resolve_sensors(profile, drive.rig, metadata=drive.metadata)
        real = resolve_sensors(profile, drive.rig, metadata={"source": "nuscenes"})
        listed = resolve_sensors(sim, drive.rig, metadata={"source": "nuscenes"})  # already resolved
    assert sim.fusion.radar_truck_returns == 0 and listed.fusion.radar_truck_returns == 0
    assert real.fusion.radar_truck_returns == RADAR_TRUCK_RETURNS_RECORDED == 5
    assert FusionConfig().truck_returns() == 5  # unresolved (live input): real sensors
    set_in_profile = tmp_path / "p.yaml"
    set_in_profile.write_text("fusion: {radar_truck_returns: 9}\n")
    with DriveReader(REPO / "replay_data" / "urban_seed7_10s.mcap") as drive:
        mine = resolve_sensors(load_config(set_in_profile), drive.rig, metadata=drive.metadata)
    assert mine.fusion.radar_truck_returns == 9
    set_in_profile.write_text("fusion: {radar_truck_returns: -1}\n")
    with pytest.raises(ConfigError, match="radar_truck_returns") as info:
        load_config(set_in_profile)
    assert str(set_in_profile) in str(info.value)
