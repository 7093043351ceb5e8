"""detections.jsonl: one record type, FrameRecord, and one validating reader (read_frame_records)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from perception.errors import ConfigError
from perception.metrics import frame_record, read_frame_records
from perception.metrics._records import _rounded, detection_json
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


# -- the detections' floats, rounded at once: the same as round() on each, bit for bit ---------------------

_FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)


def _reference(x: float, nd: int) -> float | None:
    return round(float(x), nd) if math.isfinite(x) else None


def _bits(values: list[float | None]) -> list[str | None]:
    return [None if v is None else v.hex() for v in values]


@settings(max_examples=3000, deadline=None)
@given(st.lists(_FLOATS | st.integers(-(10**7), 10**7).map(lambda k: k / 2000), max_size=40), st.sampled_from([3, 4]))
@example([0.0625, -0.0625, 0.0005, 0.00015, -0.0004, -0.0, 0.0, 5e-324, 1e9, 1e300, 2.5e-4, 1.0005, 0.1235], 3)
@example([0.00005, 0.00015, -0.00025, 0.12345, 2.00005, 1e15], 4)
def test_rounded_is_round_bit_for_bit(values: list[float], nd: int) -> None:
    """Ties (exact and within a rounding of the product), zeros of either sign, subnormals, huge values and
    non-finite ones: every value as round() gives it (hex: -0.0 and 0.0 differ)."""
    got = _rounded(np.array(values, dtype=np.float64), nd)
    assert _bits(got) == _bits([_reference(x, nd) for x in values])


def test_a_frames_detections_are_recorded_as_each_alone() -> None:
    """frame_record rounds every detection's floats at once; each record is the one of the detection
    alone (score and yaw to 4 decimals, the rest to 3, NaN as null), odd tuple lengths included."""
    rng = np.random.default_rng(7)
    dets = tuple(
        Detection3D(
            i,
            "car",
            float(rng.random()),
            tuple(rng.normal(0, 50, 3).tolist()),  # type: ignore[arg-type]
            tuple(rng.random(3).tolist()),  # type: ignore[arg-type]
            float(rng.normal()),
            (float("nan"), float("inf")) if i == 3 else tuple(rng.normal(0, 5, 2).tolist()),  # type: ignore[arg-type]
            tuple(rng.random(2).tolist()),  # type: ignore[arg-type]
            ("lidar_top",) * (i % 2),
        )
        for i in range(25)
    )
    result = FrameResult(1, 100, FrameStatus.OK, {}, dets, LatencyTree(1_000_000, {}, {}))
    record = frame_record(result)["detections"]
    expected = [
        {
            "id": d.id,
            "label": d.label,
            "score": _reference(d.score, 4),
            "center": [_reference(x, 3) for x in d.center],
            "size": [_reference(x, 3) for x in d.size],
            "yaw": _reference(d.yaw, 4),
            "velocity": [_reference(x, 3) for x in d.velocity],
            "uncertainty": [_reference(x, 3) for x in d.uncertainty],
            "sources": list(d.sources),
        }
        for d in dets
    ]
    assert json.dumps(record) == json.dumps(expected)
    assert [detection_json(d) for d in dets] == record
    odd = Detection3D(1, "car", 0.5, (1.0, 2.0), (1.0,), 0.1, (0.0, 0.0), (0.1, 0.2), ())  # type: ignore[arg-type]
    assert detection_json(odd)["center"] == [1.0, 2.0] and detection_json(odd)["size"] == [1.0]
