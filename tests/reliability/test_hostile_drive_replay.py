"""A recording whose odometry holds protobuf's zero quaternion (issue 33 item 1's last trigger) replays to
the end, fused and with lidar sweeps accumulated: the bad poses are skipped and counted, not a
ZeroDivisionError in the sweep accumulator or the tracker."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import numpy as np
import pytest
from reliability_helpers import (
    LIDAR_FIELDS,
    MS,
    RADAR_FIELDS,
    T0,
    assert_consecutive_records,
    read_records,
    rig,
    runtime_config,
)

from perception._imageio import encode_jpeg
from perception.drives import DriveReader, DriveWriter
from perception.replay import ReplayOptions, replay_drive
from perception.server import EmbeddedTriton
from perception.types import EgoPose, ImageSample, PointCloudSample, Transform

SLEEPY = {"lidar_top": "sleepy_lidar", "radar_front": "sleepy_radar", "cam_front": "sleepy_camera"}


def _drive(path: Path, frames: int, zero_at: set[int]) -> Path:
    rng = np.random.default_rng(0)
    image = encode_jpeg(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8))
    with DriveWriter(path, rig(), chunk_size=64 * 1024, compression="none") as w:
        for i in range(frames):
            t = T0 + i * 100 * MS
            lidar = rng.normal(0.0, 10.0, (300, 4)).astype(np.float32)
            w.write(PointCloudSample("lidar_top", t, "lidar_top", lidar, LIDAR_FIELDS, seq=i))
            radar = rng.normal(0.0, 10.0, (20, 5)).astype(np.float32)
            w.write(PointCloudSample("radar_front", t + 3 * MS, "radar_front", radar, RADAR_FIELDS, seq=i))
            w.write(ImageSample("cam_front", t + 7 * MS, "cam_front", image, seq=i))
            rotation = (0.0, 0.0, 0.0, 0.0) if i in zero_at else (0.0, 0.0, 0.0, 1.0)
            w.write_ego_pose(EgoPose(t, Transform((i * 1.0, 0.0, 0.0), rotation), (10.0, 0.0, 0.0)))
    return path


@pytest.mark.anyio
async def test_zero_quaternion_odometry_replays_to_the_end(triton: EmbeddedTriton, tmp_path: Path) -> None:
    drive = _drive(tmp_path / "zeroq.mcap", 12, zero_at={3, 4, 8})
    with DriveReader(drive) as reader:
        assert len(reader.ego_poses()) == 9 and reader.invalid == {"ego": 3}
    cfg = runtime_config(triton.grpc_url, SLEEPY, fusion={"enabled": True})
    out = tmp_path / "out"
    with anyio.fail_after(120):
        outcome = await replay_drive(drive, cfg, ReplayOptions(out_dir=out, report_md=False))
    records = read_records(out / "detections.jsonl")
    assert len(records) == 12 and all(r["status"] == "ok" for r in records)
    assert_consecutive_records(records)
    report = json.loads((out / "report.json").read_text())
    assert report["frames"] == 12 and outcome.report.counters.frames == 12
    # the poses skipped are counted in the report (they were only in a warning, once)
    assert report["alignment"]["invalid"] == 3 and report["alignment"]["invalid_by_sensor"] == {"ego": 3}, report
    acc = report["accumulation"]
    assert acc["window_ms"] == {"lidar_top": 120.0} and acc["merged"] > 0 and acc["no_ego_motion"] == 0, acc
