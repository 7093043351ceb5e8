"""``score_modes`` picks the evaluation protocol by the drive's source (``--protocol`` overrides it), scores
one nuScenes sample per ground-truth keyframe on the nearest frame, and every mode names its protocol."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from reliability_helpers import LIDAR_FIELDS, MS, T0, profile_data, rig, runtime_config

from perception.config import RuntimeConfig, from_data
from perception.drives import DriveReader, DriveWriter
from perception.evaluation import FrameMatches
from perception.fusion import CAMERA_GUIDED_SOURCE
from perception.fusion._testing import SimObject, camera_result, lidar_result, missing
from perception.replay import score_modes
from perception.replay._eval import SensorMode, default_protocol
from perception.types import (
    Detection3D,
    EgoPose,
    FrameResult,
    FrameStatus,
    GroundTruth,
    GroundTruthObject,
    PointCloudSample,
    Transform,
)

CARS = [SimObject("car", (12.0, 3.0, 0.8)), SimObject("car", (25.0, -4.0, 0.8)), SimObject("car", (-15.0, 1.0, 0.8))]
KEYFRAMES = [T0 + k * 500 * MS for k in range(3)] + [T0 + 5000 * MS]  # the last one has no frame near it
FRAMES = [T0 + i * 50 * MS for i in range(25)]  # 20 Hz over 1.2 s


def _drive(path: Path, source: str) -> Path:
    with DriveWriter(path, rig(), metadata={"source": source}) as w:
        for t in FRAMES:
            w.write_ego_pose(EgoPose(t, Transform()))
        for t in KEYFRAMES:
            objs = tuple(
                GroundTruthObject(
                    i, "car", c.center, c.size, 0.0, (0.0, 0.0), "vehicle.car", "vehicle.parked", 20, 1
                )
                for i, c in enumerate(CARS)
            )
            w.write_ground_truth(GroundTruth(t, objs))
    return path


def _results() -> list[FrameResult]:
    specs = {s.name: s for s in rig()}
    return [
        FrameResult(
            i,
            t,
            FrameStatus.DEGRADED,
            {
                "lidar_top": lidar_result(specs, "lidar_top", CARS, t_ns=t, scores=0.8),
                "radar_front": missing("radar_front"),
                "cam_front": missing("cam_front"),
            },
        )
        for i, t in enumerate(FRAMES)
    ]


CONFIG = runtime_config(
    "127.0.0.1:1",
    {"lidar_top": "lidar_detector", "radar_front": "radar_detector", "cam_front": "camera_detector"},
    fusion={"enabled": True},
)
MODES = {"fused": SensorMode(), "camera_only": SensorMode(only=frozenset({"camera"}))}


def test_a_nuscenes_drive_is_scored_with_the_nuscenes_protocol(tmp_path: Path) -> None:
    with DriveReader(_drive(tmp_path / "n.mcap", "nuscenes")) as reader:
        assert default_protocol(reader) == "nuscenes"
        modes = score_modes(_results(), CONFIG, reader, MODES)
    fused = modes["fused"]
    assert fused["protocol"] == "nuscenes" and modes["camera_only"]["protocol"] == "nuscenes"
    assert fused["samples"] == 4 and fused["samples_without_frame"] == 1  # one sample per keyframe
    assert fused["max_frame_offset_ms"] == 0.0  # each keyframe scored on the frame at its time
    assert fused["num_ground_truth"]["car"] == 12 and fused["classes"] == ["car"]
    # Known exactly: the lidar boxes are the cars themselves, so the 3 keyframes with a frame give 9 true
    # positives of the 12 cars (the 4th keyframe has no frame) at one score: precision 1 up to recall 0.75.
    # The devkit's AP at each distance threshold: of the 90 recall points above min_recall 0.1, the 65 up
    # to 0.75 have precision 1 (0.9 above min_precision 0.1), the 25 beyond it 0: mean 0.65 / 0.9 = 13/18.
    assert fused["num_detections"]["car"] == 9
    assert fused["ap_by_threshold"]["car"] == pytest.approx({t: 13 / 18 for t in ("0.5", "1", "2", "4")}, abs=1e-6)
    assert fused["per_class_ap"]["car"] == pytest.approx(13 / 18, abs=1e-6)
    assert fused["mAP"] == pytest.approx(13 / 18, abs=1e-6)
    # exact centres, sizes and yaw, standing cars: translation, scale, orientation and velocity errors 0;
    # no attribute predicted against "vehicle.parked": attribute error 1 (TP score 0)
    errors = {"ATE": 0.0, "ASE": 0.0, "AOE": 0.0, "AVE": 0.0, "AAE": 1.0}
    assert fused["tp_errors"] == pytest.approx(errors, abs=1e-6)
    # NDS = (5 mAP + the five TP scores) / 10 = (5 * 13/18 + 4 * 1 + 0) / 10 = 137/180
    assert fused["NDS"] == pytest.approx(137 / 180, abs=1e-6)
    assert modes["camera_only"]["per_class_ap"]["car"] == 0.0 and modes["camera_only"]["num_detections"]["car"] == 0
    assert fused["sensors"] == ["cam_front", "lidar_top", "radar_front"]


def test_other_drives_default_to_native_and_the_protocol_can_be_chosen(tmp_path: Path) -> None:
    with DriveReader(_drive(tmp_path / "s.mcap", "sim")) as reader:
        assert default_protocol(reader) == "native"
        native = score_modes(_results(), CONFIG, reader, MODES)
        chosen = score_modes(_results(), CONFIG, reader, MODES, protocol="nuscenes")
        with pytest.raises(ValueError, match="unknown evaluation protocol 'coco'; expected one of native, nuscenes"):
            score_modes(_results(), CONFIG, reader, MODES, protocol="coco")
    assert native["fused"]["protocol"] == "native" and "id_switches" in native["fused"]
    assert native["fused"]["frames"] == 8  # every frame with ground truth within 60 ms: 2 + 3 + 3
    assert chosen["fused"]["protocol"] == "nuscenes" and chosen["fused"]["samples"] == 4


@pytest.mark.parametrize("source", ["nuscenes", "sim"])
def test_each_modes_frame_matches_are_handed_out_and_score_as_its_summary(tmp_path: Path, source: str) -> None:
    from perception.evaluation import paired_bootstrap

    matches: dict[str, FrameMatches] = {}
    with DriveReader(_drive(tmp_path / "d.mcap", source)) as reader:
        modes = score_modes(_results(), CONFIG, reader, MODES, matches=matches)
    assert set(matches) == set(MODES)
    fused = matches["fused"]
    assert fused.frames == (4 if source == "nuscenes" else 8)  # nuScenes samples / native evaluated frames
    mean_ap, _ = fused.mean_ap(np.arange(fused.frames))
    assert mean_ap == pytest.approx(modes["fused"]["mAP"], abs=1e-12)
    # fused against camera_only (no detections) on the same ground truth: better beyond noise
    test = paired_bootstrap(matches["camera_only"], fused, resamples=200)
    assert test["mAP"]["difference"] == pytest.approx(modes["fused"]["mAP"]) and test["mAP"]["better"]


def test_the_eval_report_names_its_protocol(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perception.cli import main
    from perception.cli._eval import _markdown, _table

    with DriveReader(_drive(tmp_path / "n.mcap", "nuscenes")) as reader:
        modes = score_modes(_results(), CONFIG, reader, MODES)
    md = _markdown(tmp_path / "n.mcap", modes)
    assert "Protocol: **nuscenes (the nuScenes detection protocol as nuscenes-devkit computes it" in md
    assert "| mode | mAP | NDS | ATE | ASE | AOE | AVE | AAE |" in md and "- car: " in md
    assert _table(modes)[1].split()[0] == "fused" and len(_table(modes)) == 3
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    assert "--protocol {native,nuscenes}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["eval", str(tmp_path / "n.mcap"), "--protocol", "coco"])
    assert exit_.value.code == 2 and "invalid choice: 'coco'" in capsys.readouterr().err


def test_camera_guided_objects_are_re_fused_from_the_drive_sweeps(tmp_path: Path) -> None:
    """With ``fusion.camera_guided`` on, score_modes gives fusion each frame's lidar sweep from the drive:
    a car the camera sees and the lidar model missed becomes a camera-guided object from its two returns,
    in the modes that keep both the camera and the lidar only."""
    car = SimObject("car", (10.0, 0.0, 0.78))  # seen end-on: its rear face at x = 7.75
    specs = {s.name: s for s in rig()}
    face = np.array([[7.75, -0.3, -1.0, 0.0], [7.75, 0.3, -1.0, 0.0]], np.float32)  # lidar frame (z 1.9)
    path = tmp_path / "guided.mcap"
    with DriveWriter(path, rig(), metadata={"source": "nuscenes"}) as w:
        for i, t in enumerate(FRAMES):
            w.write_ego_pose(EgoPose(t, Transform()))
            w.write(PointCloudSample("lidar_top", t, "lidar_top", face, LIDAR_FIELDS, seq=i))
        obj = GroundTruthObject(0, "car", car.center, car.size, 0.0, (0.0, 0.0), "vehicle.car", "vehicle.parked", 2, 0)
        w.write_ground_truth(GroundTruth(KEYFRAMES[0], (obj,)))
    results = [
        FrameResult(
            i,
            t,
            FrameStatus.OK,
            {
                "lidar_top": lidar_result(specs, "lidar_top", [], t_ns=t),
                "radar_front": missing("radar_front"),
                "cam_front": camera_result(specs, "cam_front", [car], t_ns=t, scores=0.6),
            },
        )
        for i, t in enumerate(FRAMES)
    ]
    kept: dict[str, list[tuple[int, tuple[Detection3D, ...]]]] = {}
    with DriveReader(path) as reader:
        score_modes(results, CONFIG, reader, MODES, detections=kept)
    guided = [d for _, dets in kept["fused"] for d in dets if CAMERA_GUIDED_SOURCE in d.sources]
    assert guided and all(abs(d.center[0] - 10.0) < 1.0 and abs(d.center[1]) < 0.5 for d in guided)
    assert not [d for _, dets in kept["camera_only"] for d in dets if CAMERA_GUIDED_SOURCE in d.sources]


def test_a_mode_with_no_enabled_sensor_is_not_scored(tmp_path: Path) -> None:
    # `perception replay --sensors lidar_top,radar_front --compare-modes`: camera_only was "scored" mAP 0.000
    # (and printed as a measurement beside the others), and every mode's "sensors" in modes.json listed the
    # cameras that never ran. Now a mode none of whose sensors is enabled has no score (mAP None, printed
    # n/a) and each mode names only the enabled sensors it kept.
    data = profile_data(
        "127.0.0.1:1",
        {"lidar_top": "lidar_detector", "radar_front": "radar_detector", "cam_front": "camera_detector"},
        fusion={"enabled": True},
    )
    data["sensors"][2]["enabled"] = False
    config = from_data(RuntimeConfig, data)
    results = [
        dataclasses.replace(r, sensors={n: s for n, s in r.sensors.items() if n != "cam_front"}) for r in _results()
    ]
    with DriveReader(_drive(tmp_path / "n.mcap", "nuscenes")) as reader:
        modes = score_modes(results, config, reader, MODES)
    assert modes["camera_only"] == {"protocol": "nuscenes", "mAP": None, "sensors": [], "skipped": "no enabled sensor"}
    assert modes["fused"]["sensors"] == ["lidar_top", "radar_front"]
    assert modes["fused"]["mAP"] == pytest.approx(13 / 18, abs=1e-6)
