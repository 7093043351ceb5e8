"""detections.jsonl: one record type, FrameRecord, and one validating reader (read_frame_records)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from perception.errors import ConfigError
from perception.metrics import frame_record, read_frame_records
from perception.types import Detection3D, FrameResult, FrameStatus, LatencyTree, SensorResult, SensorStatus

DET = Detection3D(
    7, "car", 0.9, (1.0, 2.0, 0.5), (4.0, 1.8, 1.5), 0.25, (float("nan"), 1.0), (0.2, 0.3), ("lidar_top",)
)


def _result(fid: int, status: FrameStatus = FrameStatus.OK) -> FrameResult:
    cam = SensorResult(
        "cam_front", SensorStatus.OK, 2_000_000, {"COUNT": np.array([0], dtype=np.int32)}, sample_t_ns=fid * 100 - 5
    )
    lidar = SensorResult("lidar_top", SensorStatus.LATE, 3_000_000, error="late", model="lidar_pp")
    latency = LatencyTree(9_000_000, {"fusion": 1_000_000}, {"lidar_top": {"total": 3_000_000}})
    return FrameResult(fid, fid * 100, status, {"cam_front": cam, "lidar_top": lidar}, (DET,), latency)


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_what_frame_record_writes_reads_back_typed(tmp_path: Path) -> None:
    lines = [json.dumps(frame_record(_result(i), include_outputs=True)) for i in range(3)]
    recs = read_frame_records(_write(tmp_path / "detections.jsonl", lines))
    assert [r.frame_id for r in recs] == [0, 1, 2]
    r = recs[1]
    assert (r.t_ns, r.status, r.total_ms, dict(r.stage_ms), dict(r.sensor_total_ms)) == (
        100,
        "ok",
        9.0,
        {"fusion": 1.0},
        {"lidar_top": 3.0},
    )
    assert r.sensors["cam_front"].sample_t_ns == 95 and r.sensors["cam_front"].outputs == {"COUNT": [0]}
    assert (r.sensors["lidar_top"].status, r.sensors["lidar_top"].model) == ("late", "lidar_pp")
    (d,) = r.detections
    assert (d.id, d.label, d.center, d.sources) == (7, "car", (1.0, 2.0, 0.5), ("lidar_top",))
    assert math.isnan(d.velocity[0]) and d.velocity[1] == 1.0


def test_a_malformed_record_names_file_line_and_key(tmp_path: Path) -> None:
    good = frame_record(_result(0))
    bad = json.loads(json.dumps(good))
    bad["frame_id"] = 1
    bad["detections"][0]["center"] = [1.0, "x", 0.0]
    path = _write(tmp_path / "detections.jsonl", [json.dumps(good), json.dumps(bad)])
    with pytest.raises(ConfigError, match="line 2") as err:
        read_frame_records(path)
    assert err.value.file == str(path) and err.value.key == "detections[0].center[1]"
    for key, value in [("status", "fine"), ("t_ns", 1.5), ("sensors", [])]:
        bad = {**good, key: value}
        with pytest.raises(ConfigError, match="line 1") as err:
            read_frame_records(_write(path, [json.dumps(bad)]))
        assert err.value.key == key


def test_only_a_cut_short_last_line_is_skipped(tmp_path: Path) -> None:
    lines = [json.dumps(frame_record(_result(i))) for i in range(3)]
    path = _write(tmp_path / "detections.jsonl", [*lines[:2], lines[2][:30]])
    assert [r.frame_id for r in read_frame_records(path)] == [0, 1]
    with pytest.raises(ConfigError, match="line 2: not valid JSON"):
        read_frame_records(_write(path, [lines[0], "{broken", lines[1]]))
    with pytest.raises(ConfigError, match="frame 0 recorded twice"):
        read_frame_records(_write(path, [lines[0], lines[0]]))
