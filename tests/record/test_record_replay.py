"""``perception replay DRIVE --rate R --record FILE``: a replay's run recorded (fusion reading the drive's ego
poses, which the recording then holds) and reproduced by ``--as-recorded`` in a fresh process."""

from __future__ import annotations

import json
from pathlib import Path

from record_helpers import DRIVE, fresh, records

from perception.cli import main
from perception.drives import DriveReader
from perception.record import source_poses
from perception.server import EmbeddedTriton

PROFILE = (
    "sensor_defaults:\n"
    "  lidar: {model: lidar_detector, sync_window_ms: 60, max_staleness_ms: 150}\n"
    "  camera: {model: sleepy_camera, sync_window_ms: 50, max_staleness_ms: 150}\n"
    "  radar: {model: radar_detector, transport: grpc, sync_window_ms: 50, max_staleness_ms: 150}\n"
    "budget: {total_ms: 3000, fusion_reserve_ms: 15}\n"
)


def test_a_replay_recorded_replays_as_recorded(triton: EmbeddedTriton, tmp_path: Path) -> None:
    profile = tmp_path / "replay.yaml"
    profile.write_text(PROFILE)
    run = tmp_path / "runs" / "today" / "run.mcap"  # its directory made, as --out's is
    argv = ["replay", str(DRIVE), "--config", str(profile), "--url", triton.grpc_url, "--rate", "max"]
    assert main([*argv, "--out", str(tmp_path / "out"), "--no-progress", "--record", str(run)]) == 0
    with DriveReader(run) as reader, DriveReader(DRIVE) as drive:
        assert reader.metadata["record.fusion_ego"] == "source"  # fusion read the drive's poses...
        assert source_poses(reader) == drive.ego_poses()  # ...which the recording holds, all of them
        assert reader.metadata["generator"] == drive.metadata["generator"]  # resolved as the drive was
    published = {f["frame_id"]: f["detections"] for f in records(run, "/record/fusion")}
    assert len(published) == 100 and sum(map(len, published.values())) > 0
    done = fresh(["replay", str(run), "--as-recorded", "--config", str(profile), "--out", str(tmp_path / "as")])
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "as" / "as_recorded.json").read_text())["as_recorded"]
    assert report["first_divergence"] is None and report["equal"] == report["compared"] == 100
