"""The default camera model follows the drive's origin (simulated or recorded)."""

from __future__ import annotations

from pathlib import Path

from perception.config import CAMERA_MODEL_RECORDED, CAMERA_MODEL_SIMULATED, default_camera_model
from perception.drives import DriveReader

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
