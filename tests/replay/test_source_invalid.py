"""A drive's samples and poses the intake check refuses are skipped by the reader and counted for the run:
the count reached no report (a warning, once per sensor, promised 'further ones counted')."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from reliability_helpers import LIDAR_FIELDS, MS, RADAR_FIELDS, T0, rig, runtime_config

from perception._imageio import encode_jpeg
from perception.drives import DriveReader, DriveWriter
from perception.replay import DriveSource
from perception.types import EgoPose, ImageSample, PointCloudSample, Transform

MODELS = {"lidar_top": "sleepy_lidar", "radar_front": "sleepy_radar", "cam_front": "sleepy_camera"}


def _drive(path: Path, frames: int, *, empty_images: set[int], zero_poses: set[int]) -> Path:
    rng = np.random.default_rng(0)
    image = encode_jpeg(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8))
    with DriveWriter(path, rig(), compression="none") as w:
        for i in range(frames):
            t = T0 + i * 100 * MS
            lidar = rng.normal(0.0, 10.0, (30, 4)).astype(np.float32)
            w.write(PointCloudSample("lidar_top", t, "lidar_top", lidar, LIDAR_FIELDS, seq=i))
            radar = rng.normal(0.0, 10.0, (5, 5)).astype(np.float32)
            w.write(PointCloudSample("radar_front", t + 3 * MS, "radar_front", radar, RADAR_FIELDS, seq=i))
            w.write(ImageSample("cam_front", t + 7 * MS, "cam_front", b"" if i in empty_images else image, seq=i))
            rotation = (0.0, 0.0, 0.0, 0.0) if i in zero_poses else (0.0, 0.0, 0.0, 1.0)
            w.write_ego_pose(EgoPose(t, Transform((i * 1.0, 0.0, 0.0), rotation), (10.0, 0.0, 0.0)))
    return path


def test_the_samples_and_poses_the_reader_skips_are_this_run_s_invalid(tmp_path: Path) -> None:
    drive = _drive(tmp_path / "d.mcap", 6, empty_images={1, 2}, zero_poses={4})
    cfg = runtime_config("localhost:1", MODELS)
    with DriveReader(drive) as reader:
        source = DriveSource(reader, cfg)
        assert len(list(source.iter_frames())) == 6
        assert source.invalid == {"cam_front": 2, "ego": 1}
        # a reader read before (a check, another replay): only this run's samples are its, poses read once
        again = DriveSource(reader, cfg)
        assert again.invalid == {"ego": 1}
        list(again.iter_frames())
        assert again.invalid == {"cam_front": 2, "ego": 1}
