"""The node's rig: from a drive recorded with it, or from a rig file; the profile resolved on it."""

from __future__ import annotations

from pathlib import Path

import pytest
from ros_helpers import DRIVE, ROOT

from perception.config import load_config
from perception.errors import ConfigError
from perception.ros._node import rig_session


def test_the_rig_comes_from_a_drive_or_a_rig_file_alike() -> None:
    profile = load_config(ROOT / "launch" / "replay.yaml")
    drive_session = rig_session(DRIVE, profile)
    file_session = rig_session(ROOT / "launch" / "rigs" / "default.yaml", profile)
    from_drive, rig = drive_session.config, drive_session.rig
    from_file, rig_file = file_session.config, file_session.rig
    assert list(rig) == list(rig_file) == ["lidar_top", "cam_front", "cam_back", "radar_front", "radar_rear"]
    assert rig["cam_front"].calibration == rig_file["cam_front"].calibration
    for cfg in (from_drive, from_file):
        assert cfg.trigger.sensor == "lidar_top"
        assert cfg.sensor("cam_front").model == "camera_detector"  # a simulator rig: the simulator's camera model


def test_a_missing_rig_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"none.yaml: rig not found"):
        rig_session(tmp_path / "none.yaml", load_config(ROOT / "launch" / "replay.yaml"))
