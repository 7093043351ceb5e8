"""Per-model quality: the scoring protocol on hand-made cases, and ``perception model-quality`` end to end
through the session's real Triton server on a short generated drive."""

from __future__ import annotations

import json
import math
import random
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perception.cli._main import main
from perception.cli._model_quality import _probe
from perception.config import GRPC_NAMES
from perception.errors import ConfigError, ModelContractError
from perception.evaluation import DEFINITIONS, ModelQualityEvaluator, RadarCoverage, check_targets
from perception.evaluation._models import TARGETS, Target
from perception.kinds import CAMERA, LIDAR, register_kind, unregister_kind
from perception.server import EmbeddedTriton, free_port
from perception.sim import Simulator, project_ground_truth
from perception.sim._rig import builtin_rig_path, load_rig
from perception.types import GroundTruth, GroundTruthObject, SensorSpec

RIG: Mapping[str, SensorSpec] = {s.name: s.spec for s in load_rig(builtin_rig_path("default")).sensors}
COVERAGE = {"radar_front": RadarCoverage(120.0, 90.0), "radar_rear": RadarCoverage(120.0, 70.0)}
CAR = (4.5, 1.85, 1.55)
PED = (0.6, 0.6, 1.75)
METRICS = (
    "camera_ap50_car",
    "camera_ap50_truck",
    "camera_ap50_pedestrian",
    "camera_ap50_cyclist",
    "lidar_bev_ap_car",
    "radar_detection_rate",
    "radar_detection_rate_fov",
    "radar_precision_moving",
    "radar_velocity_rmse",
    "radar_velocity_rmse_over_ground",
    "radar_velocity_coverage_over_ground",
)


#: ``perception model-quality --seed 5 --duration 2`` as measured (metric, measured, bound): at least
#: the bound for scores, at most for the velocity error. A model answering nothing scores 0 (and an
#: undefined RMSE), one answering noise far below these.
QUALITY_FLOORS = (
    ("camera_ap50_car", 0.81, 0.5),
    ("camera_ap50_pedestrian", 0.74, 0.4),
    ("lidar_bev_ap_car", 0.98, 0.7),
    ("radar_detection_rate", 0.94, 0.6),
    ("radar_precision_moving", 0.85, 0.5),
    ("radar_velocity_rmse", 0.20, 0.6),
)


def obj(
    track: int, label: str, x: float, y: float, v: tuple[float, float] = (0.0, 0.0), yaw: float = 0.0
) -> GroundTruthObject:
    size = CAR if label in ("car", "truck") else PED
    return GroundTruthObject(track, label, (x, y, size[2] / 2), size, yaw, v)


def evaluator() -> ModelQualityEvaluator:
    return ModelQualityEvaluator(RIG, radar_coverage=COVERAGE)


def to_sensor(spec: SensorSpec, xyz: Any) -> Any:
    """base_link points -> the sensor's frame."""
    pts = np.asarray(xyz, dtype=np.float64).reshape(-1, 3)
    return (pts - spec.extrinsic.translation) @ spec.extrinsic.rotation_matrix()


def camera_outputs(boxes: Any, scores: Any, labels: Any) -> dict[str, Any]:
    """The camera model's padded, batched outputs for one image."""
    n = len(scores)
    out_boxes = np.zeros((1, 100, 4), np.float32)
    out_scores = np.zeros((1, 100), np.float32)
    out_labels = np.zeros((1, 100), np.int32)
    out_boxes[0, :n], out_scores[0, :n], out_labels[0, :n] = boxes, scores, labels
    return {"BOXES": out_boxes, "SCORES": out_scores, "LABELS": out_labels, "COUNT": np.array([[n]], np.int32)}


def lidar_outputs(spec: SensorSpec, cars: list[tuple[float, float, float]]) -> dict[str, Any]:
    """Car boxes given as (x, y, score) in base_link, returned in the lidar frame."""
    xyz = to_sensor(spec, [(x, y, 0.8) for x, y, _ in cars]).reshape(-1, 3)
    boxes = np.column_stack([xyz, np.tile(CAR, (len(cars), 1)), np.zeros(len(cars))]).astype(np.float32)
    return {
        "BOXES": boxes,
        "LABELS": np.zeros(len(cars), np.int32),
        "SCORES": np.array([s for _, _, s in cars], np.float32),
    }


def radar_outputs(spec: SensorSpec, dets: list[tuple[float, float, float, float, float]]) -> dict[str, Any]:
    """Detections (x, y, radial velocity, vx, vy) in base_link (over ground), returned in the radar frame."""
    rot = spec.extrinsic.rotation_matrix()
    pos = to_sensor(spec, [(x, y, 0.5) for x, y, *_ in dets]).reshape(-1, 3)
    vel = (np.array([(vx, vy, 0.0) for *_, vx, vy in dets]).reshape(-1, 3) @ rot)[:, :2]
    return {
        "POSITIONS": pos.astype(np.float32),
        "RADIAL_VELOCITY": np.array([vr for _, _, vr, _, _ in dets], np.float32),
        "VELOCITY": vel.astype(np.float32),
        "SCORES": np.linspace(0.9, 0.5, len(dets)).astype(np.float32),
    }


def radial(spec: SensorSpec, x: float, y: float, v: tuple[float, float]) -> float:
    """``v . u`` along the horizontal line of sight from the radar to (x, y) in base_link."""
    los = np.array([x, y]) - np.asarray(spec.extrinsic.translation[:2])
    return float(np.dot(v, los / np.linalg.norm(los)))


def scan(spec: SensorSpec, returns: list[tuple[float, float, float]]) -> Any:
    """Radar rows (x, y, z, vr, rcs) in the sensor frame of returns (x, y, vr) given in base_link."""
    xyz = to_sensor(spec, [(x, y, 0.5) for x, y, _ in returns]).reshape(-1, 3)
    return np.column_stack([xyz, [vr for *_, vr in returns], np.zeros(len(returns))]).astype(np.float32)


# -- camera ----------------------------------------------------------------------------------------


def test_camera_perfect_boxes_score_one_and_absent_classes_are_null() -> None:
    gt = GroundTruth(0, (obj(1, "car", 15.0, 0.0), obj(2, "pedestrian", 12.0, -3.0), obj(3, "car", -20.0, 2.0)))
    ev = evaluator()
    for cam in ("cam_front", "cam_back"):
        labels = project_ground_truth(gt, RIG[cam])
        boxes = [(b.x1, b.y1, b.x2, b.y2) for b in labels]
        ids = [("car", "truck", "pedestrian", "cyclist").index(b.label) for b in labels]
        ev.add(cam, 0, camera_outputs(boxes, [0.9] * len(boxes), ids), gt)
    s = ev.summary()
    assert s["camera_ap50_car"] == pytest.approx(1.0)
    assert s["camera_ap50_pedestrian"] == pytest.approx(1.0)
    assert s["camera_ap50_truck"] is None and s["camera_ap50_cyclist"] is None
    assert s["counts"]["camera_gt_car"] == 2 and s["frames"]["camera_detector"] == 2


def test_camera_misplaced_box_is_a_false_positive_and_counts_over_the_padding() -> None:
    gt = GroundTruth(0, (obj(1, "car", 15.0, 0.0),))
    (label,) = project_ground_truth(gt, RIG["cam_front"])
    good = (label.x1, label.y1, label.x2, label.y2)
    wrong = (0.0, 0.0, 20.0, 20.0)
    ev = evaluator()
    ev.add("cam_front", 0, camera_outputs([wrong, good], [0.9, 0.5], [0, 0]), gt)
    s = ev.summary()
    assert s["camera_ap50_car"] == pytest.approx(0.5)  # the best-scored detection is wrong
    assert s["counts"]["camera_fp_car"] == 1 and s["counts"]["camera_tp_car"] == 1


def test_camera_labels_out_of_range_are_a_contract_error() -> None:
    with pytest.raises(ModelContractError, match="LABELS"):
        evaluator().add("cam_front", 0, camera_outputs([(0, 0, 10, 10)], [0.9], [7]), GroundTruth(0, ()))


# -- lidar -----------------------------------------------------------------------------------------


def test_lidar_ap_in_base_link_with_range_and_distance_rules() -> None:
    spec = RIG["lidar_top"]
    gt = GroundTruth(
        0,
        (
            obj(1, "car", 20.0, 3.0),
            obj(2, "car", -10.0, -4.0),
            obj(3, "car", 70.0, 0.0),
            obj(4, "pedestrian", 5.0, 5.0),
        ),
    )
    ev = evaluator()
    # both counted cars found (one 1.5 m off), the 70 m car (not counted) found too: ignored, not a FP
    ev.add("lidar_top", 0, lidar_outputs(spec, [(20.0, 3.0, 0.9), (-11.5, -4.0, 0.8), (70.0, 0.0, 0.7)]), gt)
    s = ev.summary()
    assert s["lidar_bev_ap_car"] == pytest.approx(1.0)
    assert s["counts"]["lidar_gt_car"] == 2 and s["counts"]["lidar_fp_car"] == 0

    ev = evaluator()  # 2.5 m off is a miss and a false positive; a second box on one car is a false positive
    ev.add("lidar_top", 0, lidar_outputs(spec, [(20.0, 3.0, 0.9), (20.2, 3.0, 0.8), (-12.5, -4.0, 0.7)]), gt)
    s = ev.summary()
    assert s["counts"]["lidar_tp_car"] == 1 and s["counts"]["lidar_fp_car"] == 2
    assert s["lidar_bev_ap_car"] == pytest.approx(0.5)


def test_lidar_without_detections_scores_zero_and_without_cars_is_null() -> None:
    spec = RIG["lidar_top"]
    ev = evaluator()
    ev.add("lidar_top", 0, lidar_outputs(spec, []), GroundTruth(0, (obj(1, "car", 10.0, 0.0),)))
    assert ev.summary()["lidar_bev_ap_car"] == 0.0
    ev = evaluator()
    ev.add("lidar_top", 0, lidar_outputs(spec, [(10.0, 0.0, 0.9)]), GroundTruth(0, ()))
    assert ev.summary()["lidar_bev_ap_car"] is None


def test_lidar_malformed_boxes_are_a_contract_error() -> None:
    bad = {"BOXES": np.zeros((2, 6), np.float32), "LABELS": np.zeros(2, np.int32), "SCORES": np.ones(2, np.float32)}
    with pytest.raises(ModelContractError, match="BOXES"):
        evaluator().add("lidar_top", 0, bad, GroundTruth(0, ()))


# -- radar -----------------------------------------------------------------------------------------


def test_radar_rate_and_velocity_over_moving_objects_in_view_front_and_rear() -> None:
    front, rear = RIG["radar_front"], RIG["radar_rear"]
    v1, v2, v6 = (8.0, 0.0), (-6.0, 0.5), (-5.0, 0.0)
    gt = GroundTruth(
        0,
        (
            obj(1, "car", 30.0, 2.0, v1),  # front, moving: detected, radial 0.3 m/s off, full velocity 0.3 off
            obj(2, "car", 40.0, -3.0, v2),  # front, moving: detected on its near face, full velocity NaN
            obj(3, "car", 20.0, 6.0),  # front, parked: not counted (but a detection on it is no false one)
            obj(4, "cyclist", 25.0, -8.0, (4.0, 0.0)),  # front, moving: missed
            obj(5, "car", 5.0, 30.0, (0.0, 5.0)),  # moving, outside both fields of view: not counted
            obj(6, "car", -25.0, 1.0, v6),  # rear radar (yawed 180 deg): detected exactly
        ),
    )
    ev = evaluator()
    ev.add(
        "radar_front",
        0,
        radar_outputs(
            front,
            [
                (30.5, 2.0, radial(front, 30.5, 2.0, v1) + 0.3, 8.3, 0.0),
                (37.6, -3.0, radial(front, 37.6, -3.0, v2), math.nan, math.nan),  # 2.25 m before the centre
                (20.0, 6.0, 0.0, 0.0, 0.0),
            ],
        ),
        gt,
    )
    ev.add("radar_rear", 0, radar_outputs(rear, [(-25.0, 1.5, radial(rear, -25.0, 1.5, v6), -5.0, 0.0)]), gt)
    s = ev.summary()
    # front: objects 1, 2, 4 count (2 matched); rear: object 6 (matched) - and 1, 2, 4 are behind it
    assert s["counts"]["radar_moving_objects"] == 4
    assert s["radar_detection_rate_fov"] == pytest.approx(3 / 4)
    assert s["radar_detection_rate"] is None  # no points given: what the radar saw is unknown
    assert s["radar_velocity_rmse"] == pytest.approx(math.sqrt(0.3**2 / 3), abs=1e-5)
    assert s["counts"]["radar_velocity_radial"] == 3
    assert s["radar_velocity_coverage_over_ground"] == pytest.approx(2 / 3)
    assert s["radar_velocity_rmse_over_ground"] == pytest.approx(math.sqrt((0.3**2 + 0.0) / 2), abs=1e-5)
    assert s["radar_precision_moving"] == pytest.approx(1.0)  # all three moving claims are right


def test_radar_detections_in_a_scene_without_objects_are_unmatched_claims() -> None:
    spec = RIG["radar_front"]
    ev = evaluator()
    dets = [(20.0, 1.0, 4.0, math.nan, math.nan), (30.0, -2.0, 0.1, math.nan, math.nan)]
    ev.add("radar_front", 0, radar_outputs(spec, dets), GroundTruth(0, ()), points=scan(spec, [(20.0, 1.0, 4.0)]))
    s = ev.summary()
    assert s["counts"]["radar_moving_claims"] == 1 and s["counts"]["radar_moving_claims_matched"] == 0
    assert s["radar_precision_moving"] == 0.0 and s["counts"]["radar_moving_objects"] == 0


def test_radar_gate_is_wide_across_the_line_of_sight_and_narrow_along_it() -> None:
    spec = RIG["radar_front"]
    v = (10.0, 0.0)
    gt = GroundTruth(0, (obj(1, "car", 60.0, 0.0, v), obj(2, "car", 20.0, 10.0, v)))
    ev = evaluator()
    # 3 m to the side of car 1 at 60 m (azimuth error ~3 deg): matched; 3 m beyond car 2's far end: not
    ev.add(
        "radar_front",
        0,
        radar_outputs(
            spec,
            [
                (57.8, 3.0 + CAR[1] / 2, radial(spec, 57.8, 3.9, v), math.nan, math.nan),
                (20.0 + CAR[0] / 2 + 3.0, 10.0, radial(spec, 25.25, 10.0, v), math.nan, math.nan),
            ],
        ),
        gt,
    )
    s = ev.summary()
    assert s["counts"]["radar_matched_moving"] == 1
    assert s["radar_precision_moving"] == pytest.approx(0.5)


def test_radar_doppler_decides_which_detection_is_whose_and_the_gate_is_counted() -> None:
    spec = RIG["radar_front"]
    v = (-11.0, 0.0)
    # A car driving towards the radar at 80 m, a parked car and a static post's return right beside it.
    gt = GroundTruth(0, (obj(1, "car", 80.0, 3.5, v), obj(2, "car", 80.0, 6.0)))
    ev = evaluator()
    ev.add("radar_front", 0, radar_outputs(spec, [(78.0, 4.5, 0.0, math.nan, math.nan)]), gt)  # the post
    s = ev.summary()
    assert s["counts"]["radar_matched_moving"] == 0  # a 0 m/s detection is no detection of an 11 m/s car...
    assert s["counts"]["radar_doppler_rejected"] == 1  # ...though position alone would have matched them
    assert s["radar_velocity_rmse"] is None
    ev = evaluator()
    vr = radial(spec, 78.0, 3.0, v)
    ev.add(
        "radar_front",
        0,
        radar_outputs(spec, [(78.0, 4.5, 0.0, math.nan, math.nan), (78.0, 3.0, vr - 0.2, math.nan, math.nan)]),
        gt,
    )
    s = ev.summary()
    assert s["counts"]["radar_matched_moving"] == 1 and s["counts"]["radar_doppler_rejected"] == 0
    assert s["radar_velocity_rmse"] == pytest.approx(0.2, abs=1e-5)


def test_radar_observed_rate_counts_only_objects_with_agreeing_returns() -> None:
    spec = RIG["radar_front"]
    v = (8.0, 0.0)
    gt = GroundTruth(
        0,
        (
            obj(1, "car", 30.0, 2.0, v),  # two returns on its rear
            obj(2, "car", 60.0, 2.0, v),  # hidden behind car 1: no return
            obj(3, "pedestrian", 20.0, -6.0, (1.5, 0.0)),  # only a static return beside it: not observed
        ),
    )
    points = scan(
        spec, [(27.8, 2.0, radial(spec, 27.8, 2.0, v)), (27.9, 2.5, radial(spec, 27.9, 2.5, v)), (20.0, -6.6, 0.0)]
    )
    ev = evaluator()
    ev.add(
        "radar_front",
        0,
        radar_outputs(spec, [(28.0, 2.2, radial(spec, 28.0, 2.2, v), math.nan, math.nan)]),
        gt,
        points=points,
    )
    s = ev.summary()
    assert s["counts"]["radar_observed_moving"] == 1
    assert s["radar_detection_rate"] == pytest.approx(1.0)
    assert s["radar_detection_rate_fov"] == pytest.approx(1 / 3)
    assert s["radar_velocity_rmse_over_ground"] is None and s["radar_velocity_coverage_over_ground"] == 0.0


def test_radar_outputs_of_different_lengths_are_a_contract_error() -> None:
    out = radar_outputs(RIG["radar_front"], [(10.0, 0.0, 1.0, math.nan, math.nan)])
    out["RADIAL_VELOCITY"] = np.zeros(2, np.float32)
    with pytest.raises(ModelContractError, match="RADIAL_VELOCITY"):
        evaluator().add("radar_front", 0, out, GroundTruth(0, ()))
    del out["RADIAL_VELOCITY"]
    with pytest.raises(ModelContractError, match="RADIAL_VELOCITY"):
        evaluator().add("radar_front", 0, out, GroundTruth(0, ()))


def test_radar_without_a_field_of_view_is_a_config_error() -> None:
    ev = ModelQualityEvaluator(RIG)
    with pytest.raises(ConfigError, match="radar_front"):
        ev.add("radar_front", 0, radar_outputs(RIG["radar_front"], []), GroundTruth(0, ()))
    with pytest.raises(ConfigError):
        RadarCoverage(0.0, 50.0)


# -- report ----------------------------------------------------------------------------------------


def test_summary_does_not_depend_on_the_order_or_thread_samples_arrive_in() -> None:
    rng = np.random.default_rng(3)
    spec = RIG["lidar_top"]
    samples = []
    for t in range(40):
        cars = [(float(rng.uniform(-45, 45)), float(rng.uniform(-10, 10))) for _ in range(4)]
        gt = GroundTruth(t, tuple(obj(k, "car", x, y) for k, (x, y) in enumerate(cars)))
        dets = [(x + float(rng.normal(0, 1.2)), y, 0.5) for x, y in cars]  # equal scores: order matters
        samples.append((t, lidar_outputs(spec, dets), gt))
    ordered = evaluator()
    for t, out, gt in samples:
        ordered.add("lidar_top", t, out, gt)
    shuffled = evaluator()
    random.Random(1).shuffle(samples)

    def add_all(part: list[tuple[int, dict[str, Any], GroundTruth]]) -> None:
        for t, out, gt in part:
            shuffled.add("lidar_top", t, out, gt)

    threads = [threading.Thread(target=add_all, args=(part,)) for part in (samples[::2], samples[1::2])]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert shuffled.summary() == ordered.summary()


def test_targets_never_pass_on_undefined_values() -> None:
    assert Target("x", ">=", 0.7).passes(0.7) and not Target("x", ">=", 0.7).passes(0.69)
    assert Target("x", "<=", 0.5).passes(0.1) and not Target("x", "<=", 0.5).passes(None)
    assert not Target("x", "<=", 0.5).passes(math.nan)
    report = check_targets({"camera_ap50_car": 0.8, "lidar_bev_ap_car": None, "counts": {"camera_gt_car": 12}})
    assert [t.metric for t in TARGETS] == list(report)
    assert report["camera_ap50_car"] == {"value": 0.8, "op": ">=", "threshold": 0.7, "pass": True, "n": 12}
    assert not report["lidar_bev_ap_car"]["pass"] and "n" not in report["lidar_bev_ap_car"]
    assert set(DEFINITIONS) == set(METRICS)


# -- the command -----------------------------------------------------------------------------------


def test_model_quality_command_on_a_short_drive(triton: EmbeddedTriton, capsys: pytest.CaptureFixture[str]) -> None:
    # the default output is one JSON object on stdout (issue #4); --table is the human-readable form
    code = main(
        [
            "-q",
            "model-quality",
            "--seed",
            "5",
            "--duration",
            "2",
            "--url",
            triton.grpc_url,
            "--workers",
            "1",
            "--concurrency",
            "3",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert len(out.strip().splitlines()) == 1
    report = json.loads(out)
    assert report["seed"] == 5 and report["duration_s"] == 2.0 and report["scenario"] == "urban"
    for key in METRICS:
        value = report[key]
        assert value is None or 0.0 <= value <= (1e3 if key.startswith("radar_velocity_rmse") else 1.0), (key, value)
    for key in ("camera_ap50_car", "lidar_bev_ap_car", "radar_detection_rate", "radar_velocity_rmse"):
        assert report[key] is not None, key  # a 2 s urban drive has cars and moving objects in view
    # Each reference model still does its job: floors (ceilings for errors) far below what it measured
    # on this drive, so scheduling or a CPU's last bits never matter but a broken model fails.
    for key, measured, floor in QUALITY_FLOORS:
        value = report[key]
        ok = value <= floor if key.endswith("rmse") else value >= floor
        assert ok, f"{key} = {value} (measured {measured} when this test was written, bound {floor})"
    sim = Simulator("urban", seed=5, duration_s=2.0)
    expected = dict.fromkeys(("camera_detector", "lidar_detector", "radar_detector"), 0)
    for sensor in sim.rig.sensors:
        expected[f"{sensor.kind}_detector"] += len(sim.capture_times(sensor.name))
    assert report["frames"] == expected  # every sample sent once and scored
    assert set(report["targets"]) == {t.metric for t in TARGETS}
    assert all(isinstance(t["pass"], bool) and t["n"] >= 0 for t in report["targets"].values())
    assert set(report["definitions"]) == set(METRICS)


def test_model_quality_bad_url_is_one_line_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"127.0.0.1:{free_port()}"  # nothing listens there
    assert main(["model-quality", "--seed", "1", "--duration", "1", "--url", url]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the Triton server" in lines[0] and url in lines[0], err

    assert main(["model-quality", "--seed", "1", "--url", "http://gpu-host:8001"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "host:port" in lines[0]


@pytest.mark.parametrize("name", GRPC_NAMES)
def test_model_quality_leaves_a_grpc_name_to_the_client(name: str) -> None:
    # the profile's check (url_problem) takes every gRPC name; the probe skipped a shorter list of its own, so
    # 'unix-abstract:triton' passed the check and the probe then read 'triton' as a port: a ValueError traceback
    _probe(f"{name}triton")  # nothing to connect to before the client does: no error


@pytest.mark.parametrize("option", ["--output", "--keep-drive"])
def test_model_quality_output_that_is_a_directory_is_refused_before_anything_runs(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --output was found only after the drive was generated and scored (exit 1, "Is a directory"), and
    # --keep-drive when the drive was created (exit 1): both now argparse's usage error naming the option.
    url = f"127.0.0.1:{free_port()}"  # nothing listens there: nothing may be tried before the refusal
    with pytest.raises(SystemExit) as exc:
        main(["model-quality", "--seed", "1", "--duration", "1", "--url", url, option, str(tmp_path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"argument {option}: {tmp_path} is a directory" in err, err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc (no folder can be made in it)")
@pytest.mark.parametrize("option", ["--output", "--keep-drive"])
def test_model_quality_output_folder_that_cannot_be_made_is_refused_before_anything_runs(
    option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # --output's folder was made only after the drive was generated and scored: a folder that cannot be
    # made (here even by root) lost the run. Now said first, as every command's output folder (exit 2).
    url = f"127.0.0.1:{free_port()}"  # nothing listens there: nothing may be tried before the refusal
    target = Path("/proc/perception-no-such-folder/out.json")
    assert main(["model-quality", "--seed", "1", "--duration", "1", "--url", url, option, str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perception model-quality: error: {option}: cannot create directory {target.parent}: ")
    assert err.count("\n") == 1, err


def test_model_quality_on_a_repository_without_the_models_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --models DIR lacking the models: the drive was generated, the embedded server started and waited
    # 30 s, then "camera_detector: not ready after 30 s: model is not ready" (exit 1). Now the models
    # missing are named at once (the check the runtime's embedded server makes), exit 2.
    repo = tmp_path / "models"
    (repo / "lidar_detector").mkdir(parents=True)
    kept = tmp_path / "drive.mcap"
    argv = ["model-quality", "--seed", "1", "--duration", "1", "--models", str(repo), "--keep-drive", str(kept)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"perception model-quality: error: {repo}: model 'camera_detector' (and 'radar_detector') of sensor "
    ), err
    assert "is not in this model repository (models there: lidar_detector)" in err and err.count("\n") == 1, err
    assert not kept.exists()  # nothing generated


# -- kinds beyond the built-in ones -------------------------------------------------------------------


def test_a_registered_kind_is_scored_by_its_fusion_role_and_one_without_is_refused() -> None:
    register_kind(replace(CAMERA, name="night_camera", default_model="night_detector"))
    register_kind(replace(LIDAR, name="plain_lidar", fusion=None))
    try:
        night = replace(RIG["cam_front"], name="night_front", kind="night_camera")
        ev = ModelQualityEvaluator({**RIG, "night_front": night}, radar_coverage=COVERAGE)
        assert ev.models["night_camera"] == "night_detector" and ev.role("night_front") is ev.role("cam_front")
        gt = GroundTruth(0, (obj(1, "car", 15.0, 0.0),))
        labels = project_ground_truth(gt, night)
        boxes = [(b.x1, b.y1, b.x2, b.y2) for b in labels]
        ev.add("night_front", 0, camera_outputs(boxes, [0.9] * len(boxes), [0] * len(boxes)), gt)
        assert ev.summary()["camera_ap50_car"] == pytest.approx(1.0)  # scored as a camera
        plain = replace(RIG["lidar_top"], name="plain", kind="plain_lidar")
        with pytest.raises(ConfigError, match="sensor 'plain': kind 'plain_lidar' has no fusion role"):
            ModelQualityEvaluator({**RIG, "plain": plain}, radar_coverage=COVERAGE)
    finally:
        unregister_kind("night_camera")
        unregister_kind("plain_lidar")
