"""The paired bootstrap of an AP difference over frames: its AP on all frames is each evaluator's own,
identical runs differ by exactly 0, and a run that loses objects on every frame is worse beyond noise."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from perception.evaluation import DetectionEvaluator, NuScenesEvaluator, paired_bootstrap
from perception.types import Detection3D, GroundTruth, GroundTruthObject

CAR = (4.5, 1.85, 1.55)


def _drive(seed: int, frames: int = 12) -> tuple[list[GroundTruth], list[list[Detection3D]]]:
    rng = np.random.default_rng(seed)
    gts: list[GroundTruth] = []
    dets: list[list[Detection3D]] = []
    for f in range(frames):
        objs: list[GroundTruthObject] = []
        d: list[Detection3D] = []
        for i in range(int(rng.integers(1, 10))):
            label = str(rng.choice(["car", "car", "pedestrian"]))
            x, y = float(rng.uniform(-45, 45)), float(rng.uniform(-35, 35))
            objs.append(
                GroundTruthObject(
                    i,
                    label,
                    (x, y, 0.8),
                    CAR,
                    0.0,
                    (0.0, 0.0),
                    category=_CATEGORY[label],
                    attribute="",
                    num_lidar_pts=10,
                    num_radar_pts=0,
                )
            )
            if rng.random() < 0.7:
                off = float(rng.choice([0.2, 0.7, 1.5, 3.0]))
                d.append(_det(len(d), label, x + off, y, float(rng.random())))
        for _ in range(int(rng.integers(0, 4))):
            d.append(_det(len(d), "car", float(rng.uniform(-45, 45)), float(rng.uniform(-35, 35)), float(rng.random())))
        gts.append(GroundTruth(f * 500_000_000, tuple(objs)))
        dets.append(d)
    return gts, dets


_CATEGORY = {"car": "vehicle.car", "pedestrian": "human.pedestrian.adult"}


def _det(i: int, label: str, x: float, y: float, score: float) -> Detection3D:
    return Detection3D(i, label, score, (x, y, 0.8), CAR, 0.0, (0.0, 0.0), (0.2, 0.2), ("lidar_top",))


def _nuscenes(gts: list[GroundTruth], dets: list[list[Detection3D]]) -> NuScenesEvaluator:
    ev = NuScenesEvaluator()
    for gt, d in zip(gts, dets, strict=True):
        ev.add(gt, d, gt.t_ns)
    return ev


def _native(gts: list[GroundTruth], dets: list[list[Detection3D]]) -> DetectionEvaluator:
    ev = DetectionEvaluator()
    for gt, d in zip(gts, dets, strict=True):
        ev.add(gt.t_ns, d, gt)
    return ev


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("make", [_nuscenes, _native])
def test_ap_of_all_frames_equals_the_evaluators(seed: int, make: object) -> None:
    ev = make(*_drive(seed))  # type: ignore[operator]
    summary = ev.summary()
    matches = ev.frame_matches()
    mean_ap, per_class = matches.mean_ap(np.arange(matches.frames))
    assert mean_ap == pytest.approx(summary["mAP"], abs=1e-12)
    for label, ap in per_class.items():
        assert ap == pytest.approx(summary["per_class_ap"][label], abs=1e-12)


@pytest.mark.parametrize("make", [_nuscenes, _native])
def test_the_same_run_twice_differs_by_zero(make: object) -> None:
    ev = make(*_drive(5))  # type: ignore[operator]
    out = paired_bootstrap(ev.frame_matches(), ev.frame_matches(), resamples=200)
    assert out["mAP"] == {"difference": 0.0, "low": 0.0, "high": 0.0, "worse": False, "better": False}


@pytest.mark.parametrize("make", [_nuscenes, _native])
def test_losing_a_third_of_the_true_positives_on_every_frame_is_worse_beyond_noise(make: object) -> None:
    gts, dets = _drive(7, frames=30)
    thinned = [[d for k, d in enumerate(ds) if k % 3 != 0] for ds in dets]
    a, b = make(gts, dets).frame_matches(), make(gts, thinned).frame_matches()  # type: ignore[operator]
    out = paired_bootstrap(a, b, resamples=300, seed=1)
    assert out["mAP"]["difference"] < 0 and out["mAP"]["worse"] and not out["mAP"]["better"]
    assert out["mAP"]["low"] <= out["mAP"]["difference"] <= out["mAP"]["high"]
    back = paired_bootstrap(b, a, resamples=300, seed=1)  # and the other way round, better
    assert back["mAP"]["better"] and back["mAP"]["difference"] == pytest.approx(-out["mAP"]["difference"])


def test_one_changed_frame_among_many_is_noise() -> None:
    gts, dets = _drive(11, frames=30)
    changed = [list(d) for d in dets]
    changed[3] = [replace(d, score=d.score * 0.5) for d in changed[3]]
    out = paired_bootstrap(_nuscenes(gts, dets).frame_matches(), _nuscenes(gts, changed).frame_matches(), resamples=300)
    assert not out["mAP"]["worse"] and not out["mAP"]["better"]


def test_runs_on_different_ground_truth_are_refused() -> None:
    gts, dets = _drive(2)
    with pytest.raises(ValueError, match="same frames"):
        paired_bootstrap(_nuscenes(gts, dets).frame_matches(), _nuscenes(gts[:-1], dets[:-1]).frame_matches())
    other = [replace(g, objects=g.objects[:-1]) if k == 0 else g for k, g in enumerate(gts)]
    with pytest.raises(ValueError, match="same ground truth"):
        paired_bootstrap(_nuscenes(gts, dets).frame_matches(), _nuscenes(other, dets).frame_matches())
    with pytest.raises(ValueError, match="resamples"):
        paired_bootstrap(_native(gts, dets).frame_matches(), _native(gts, dets).frame_matches(), resamples=0)
