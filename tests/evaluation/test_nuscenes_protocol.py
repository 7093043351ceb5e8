"""The nuScenes detection protocol against the official devkit: the same boxes through
``nuscenes-devkit``'s own ``accumulate``/``calc_ap``/``calc_tp``/``filter_eval_boxes``/``DetectionMetrics``
and through :mod:`perception.evaluation._nuscenes`, every number equal to 1e-6."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from perception.evaluation import NuScenesEvaluator
from perception.evaluation._nuscenes import (
    CATEGORY_TO_DETECTION,
    DETECTION_CVPR_2019,
    DETECTION_TO_LABEL,
    TP_METRICS,
    EvalBox,
    MetricData,
    accumulate,
    ap_by_range,
    calc_ap,
    calc_tp,
    filter_boxes,
    precision_by_source,
    recall_breakdown,
    tp_error,
)
from perception.types import Detection3D, GroundTruth, GroundTruthObject, GroundTruthRegion

devkit_algo = pytest.importorskip(
    "nuscenes.eval.detection.algo", reason="nuscenes-devkit (the dev extra) is needed for the cross-check"
)
from nuscenes.eval.common.data_classes import EvalBoxes  # noqa: E402
from nuscenes.eval.common.loaders import filter_eval_boxes  # noqa: E402
from nuscenes.eval.common.utils import center_distance  # noqa: E402
from nuscenes.eval.detection.constants import DETECTION_NAMES  # noqa: E402
from nuscenes.eval.detection.data_classes import DetectionBox, DetectionConfig  # noqa: E402
from nuscenes.eval.detection.evaluate import DetectionEval  # noqa: E402
from pyquaternion import Quaternion  # noqa: E402

TOL = 1e-6
RACK = "static_object.bicycle_rack"
#: One devkit class per our label, to carry our label through the devkit's DetectionBox (whose class must be
#: a devkit class); none of these is barrier or traffic_cone, the only classes with their own rules.
CARRIER = {"car": "car", "truck": "truck", "pedestrian": "pedestrian", "cyclist": "bicycle"}
ATTRS = {
    "car": ["vehicle.moving", "vehicle.parked", "vehicle.stopped"],
    "truck": ["vehicle.moving", "vehicle.parked"],
    "bus": ["vehicle.moving", "vehicle.stopped"],
    "trailer": ["vehicle.parked"],
    "construction_vehicle": ["vehicle.parked", "vehicle.moving"],
    "pedestrian": ["pedestrian.moving", "pedestrian.standing", "pedestrian.sitting_lying_down"],
    "motorcycle": ["cycle.with_rider", "cycle.without_rider"],
    "bicycle": ["cycle.with_rider", "cycle.without_rider"],
    "traffic_cone": [""],
    "barrier": [""],
}


def _config() -> DetectionConfig:
    cfg = DETECTION_CVPR_2019
    return DetectionConfig(
        dict(cfg.class_range),
        "center_distance",
        list(cfg.dist_ths),
        cfg.dist_th_tp,
        cfg.min_recall,
        cfg.min_precision,
        cfg.max_boxes_per_sample,
        int(cfg.mean_ap_weight),
    )


def _rotation(yaw: float) -> list[float]:
    return list(Quaternion(axis=[0.0, 0.0, 1.0], angle=yaw).elements)


def _devkit_box(token: str, b: EvalBox, name: str | None = None) -> DetectionBox:
    return DetectionBox(
        sample_token=token,
        translation=tuple(b.center),
        size=tuple(b.size),
        rotation=tuple(_rotation(b.yaw)),
        velocity=tuple(b.velocity),
        ego_translation=tuple(b.center),  # the ego at the origin
        num_pts=b.num_pts,
        detection_name=name or b.name,
        detection_score=float(b.score),
        attribute_name=b.attribute,
    )


def _devkit_boxes(boxes: Sequence[Sequence[EvalBox]], names: dict[str, str] | None = None) -> EvalBoxes:
    out = EvalBoxes()
    for s, sample in enumerate(boxes):
        out.add_boxes(f"s{s}", [_devkit_box(f"s{s}", b, (names or {}).get(b.name)) for b in sample])
    return out


def _same(ours: MetricData, theirs: Any) -> None:
    for key in ("recall", "precision", "confidence", *TP_METRICS):
        np.testing.assert_allclose(getattr(ours, key), getattr(theirs, key), atol=TOL, rtol=0, err_msg=key)
    assert ours.max_recall_ind == theirs.max_recall_ind


# --------------------------------------------------------------------------------------------------
# scenes
# --------------------------------------------------------------------------------------------------


def random_scene(
    seed: int, classes: Sequence[str], n_samples: int = 6
) -> tuple[list[list[EvalBox]], list[list[EvalBox]]]:
    """Ground truth and detections per sample: jittered hits at several scales, duplicates, misses,
    wrong classes, false positives, tied scores, unknown velocities, missing attributes."""
    rng = np.random.default_rng(seed)
    gts: list[list[EvalBox]] = []
    preds: list[list[EvalBox]] = []
    for s in range(n_samples):
        g: list[EvalBox] = []
        p: list[EvalBox] = []
        for _ in range(int(rng.integers(0, 14))):
            name = str(rng.choice(classes))
            size = tuple(float(v) for v in rng.uniform(0.3, 5.0, 3))
            vel = (math.nan, math.nan) if rng.random() < 0.15 else tuple(float(v) for v in rng.normal(0, 4, 2))
            attr = str(rng.choice([*ATTRS.get(name, [""]), ""])) if rng.random() < 0.9 else ""
            box = EvalBox(
                s,
                name,
                (float(rng.uniform(-60, 60)), float(rng.uniform(-60, 60)), float(rng.uniform(-1, 2))),
                size,  # type: ignore[arg-type]
                float(rng.uniform(-np.pi, np.pi)),
                vel,  # type: ignore[arg-type]
                attribute=attr,
                num_pts=int(rng.choice([0, 1, 5, 40, -1])),
            )
            g.append(box)
            for _copy in range(int(rng.choice([0, 1, 1, 1, 2]))):  # misses and duplicates
                scale = float(rng.choice([0.1, 0.4, 0.9, 1.8, 3.5]))
                det_name = name if rng.random() < 0.85 else str(rng.choice(classes))
                score = float(np.round(rng.random(), 1)) if rng.random() < 0.3 else float(rng.random())
                p.append(
                    EvalBox(
                        s,
                        det_name,
                        (box.center[0] + float(rng.normal(0, scale)), box.center[1] + float(rng.normal(0, scale)), 0.5),
                        tuple(float(v) * float(rng.uniform(0.7, 1.3)) for v in size),  # type: ignore[arg-type]
                        box.yaw + float(rng.normal(0, 0.6)),
                        (float(rng.normal(0, 4)), float(rng.normal(0, 4))),
                        score=score,
                        attribute=str(rng.choice([*ATTRS.get(det_name, [""]), ""])),
                    )
                )
        for _ in range(int(rng.integers(0, 6))):  # false positives
            name = str(rng.choice(classes))
            p.append(
                EvalBox(
                    s,
                    name,
                    (float(rng.uniform(-60, 60)), float(rng.uniform(-60, 60)), 0.0),
                    (1.0, 1.0, 1.0),
                    0.0,
                    (0.0, 0.0),
                    score=float(rng.random()),
                )
            )
        gts.append(g)
        preds.append(p)
    return gts, preds


# --------------------------------------------------------------------------------------------------
# the algorithm: accumulate, calc_ap, calc_tp, the TP rules, on all ten devkit classes
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_accumulate_calc_ap_calc_tp_equal_the_devkit(seed: int) -> None:
    gts, preds = random_scene(seed, DETECTION_NAMES)
    dk_gt, dk_pred = _devkit_boxes(gts), _devkit_boxes(preds)
    cfg = DETECTION_CVPR_2019
    for name in DETECTION_NAMES:
        for th in cfg.dist_ths:
            ours = accumulate(gts, preds, name, th)
            theirs = devkit_algo.accumulate(dk_gt, dk_pred, name, center_distance, th)
            _same(ours, theirs)
            for mr, mp in ((cfg.min_recall, cfg.min_precision), (0.0, 0.0), (0.3, 0.5)):
                assert calc_ap(ours, mr, mp) == pytest.approx(devkit_algo.calc_ap(theirs, mr, mp), abs=TOL)
            for metric in TP_METRICS:
                for mr in (cfg.min_recall, 0.0, 0.5):
                    ref = devkit_algo.calc_tp(theirs, mr, metric)
                    assert calc_tp(ours, mr, metric) == pytest.approx(ref, abs=TOL, nan_ok=True)


@pytest.mark.parametrize("seed", range(4))
def test_per_class_metrics_and_nds_equal_the_devkits_evaluate(seed: int) -> None:
    """The devkit's own ``DetectionEval.evaluate`` (its TP rules for barrier and traffic cone, its
    mAP/TP errors/NDS) on boxes already filtered, against ours."""
    gts, preds = random_scene(100 + seed, DETECTION_NAMES, n_samples=8)
    ev = DetectionEval.__new__(DetectionEval)  # no dataset on disk: give it its boxes directly
    ev.cfg, ev.verbose = _config(), False
    ev.gt_boxes, ev.pred_boxes = _devkit_boxes(gts), _devkit_boxes(preds)
    metrics, _ = ev.evaluate()
    cfg = DETECTION_CVPR_2019
    for name in DETECTION_NAMES:
        mds = {th: accumulate(gts, preds, name, th) for th in cfg.dist_ths}
        for th, md in mds.items():
            ap = calc_ap(md, cfg.min_recall, cfg.min_precision)
            assert ap == pytest.approx(metrics.get_label_ap(name, th), abs=TOL)
        for metric in TP_METRICS:
            ours = tp_error(mds[cfg.dist_th_tp], name, metric, cfg.min_recall)
            assert ours == pytest.approx(metrics.get_label_tp(name, metric), abs=TOL, nan_ok=True)
    assert math.isnan(tp_error(MetricData.no_predictions(), "barrier", "vel_err", 0.1))
    assert math.isnan(tp_error(MetricData.no_predictions(), "traffic_cone", "orient_err", 0.1))


def test_barrier_orientation_has_period_pi() -> None:
    gt = [[EvalBox(0, "barrier", (5.0, 0.0, 0.0), (2.0, 0.5, 1.0), 0.1, (0.0, 0.0))]]
    pred = [[EvalBox(0, "barrier", (5.0, 0.0, 0.0), (2.0, 0.5, 1.0), 0.1 + np.pi, (0.0, 0.0), score=0.9)]]
    assert accumulate(gt, pred, "barrier", 2.0).orient_err[20] == pytest.approx(0.0, abs=1e-9)
    car_gt = [[EvalBox(0, "car", b.center, b.size, b.yaw, b.velocity) for b in gt[0]]]
    car_pred = [[EvalBox(0, "car", b.center, b.size, b.yaw, b.velocity, score=0.9) for b in pred[0]]]
    assert accumulate(car_gt, car_pred, "car", 2.0).orient_err[20] == pytest.approx(np.pi, abs=1e-9)


# --------------------------------------------------------------------------------------------------
# filter_eval_boxes: range, points, bike racks
# --------------------------------------------------------------------------------------------------


class _FakeNuScenes:
    """What ``filter_eval_boxes`` asks a ``NuScenes`` for: a sample's annotations (the racks)."""

    def __init__(self, racks: Sequence[Sequence[GroundTruthRegion]]) -> None:
        self.samples = {f"s{s}": {"anns": [f"rack{s}-{i}" for i in range(len(r))]} for s, r in enumerate(racks)}
        self.anns = {
            f"rack{s}-{i}": {
                "category_name": rack.kind,
                "translation": list(rack.center),
                "size": [rack.size[1], rack.size[0], rack.size[2]],  # nuScenes w, l, h
                "rotation": _rotation(rack.yaw),
            }
            for s, rs in enumerate(racks)
            for i, rack in enumerate(rs)
        }

    def get(self, table: str, token: str) -> dict[str, Any]:
        return self.samples[token] if table == "sample" else self.anns[token]


def _racks(n_samples: int, seed: int) -> list[list[GroundTruthRegion]]:
    rng = np.random.default_rng(seed)
    return [
        [
            GroundTruthRegion(
                RACK if rng.random() < 0.8 else "movable_object.pushable_pullable",
                (float(rng.uniform(-30, 30)), float(rng.uniform(-30, 30)), 0.5),
                (float(rng.uniform(4, 20)), float(rng.uniform(2, 8)), 2.0),
                float(rng.uniform(-np.pi, np.pi)),
            )
            for _ in range(int(rng.integers(0, 3)))
        ]
        for _ in range(n_samples)
    ]


@pytest.mark.parametrize("seed", range(4))
def test_filter_equals_the_devkits_filter_eval_boxes(seed: int) -> None:
    gts, preds = random_scene(200 + seed, DETECTION_NAMES, n_samples=10)
    racks = _racks(10, seed)
    rng = np.random.default_rng(seed)
    for s, rs in enumerate(racks):  # bicycles and motorcycles inside the racks, on both sides
        for r in rs:
            for name in ("bicycle", "motorcycle", "car"):
                c = (r.center[0] + float(rng.uniform(-1, 1)), r.center[1] + float(rng.uniform(-1, 1)), 0.6)
                gts[s].append(EvalBox(s, name, c, (1.7, 0.6, 1.2), 0.0, (0.0, 0.0), attribute="", num_pts=3))
                preds[s].append(EvalBox(s, name, c, (1.7, 0.6, 1.2), 0.0, (0.0, 0.0), score=0.5))
    nusc = _FakeNuScenes(racks)
    for boxes in (gts, preds):
        theirs = filter_eval_boxes(nusc, _devkit_boxes(boxes), dict(DETECTION_CVPR_2019.class_range))
        ours = [filter_boxes(b, DETECTION_CVPR_2019.class_range, racks[s]) for s, b in enumerate(boxes)]
        assert [len(theirs[f"s{s}"]) for s in range(10)] == [len(o) for o in ours]
        for s, sample in enumerate(ours):
            assert [b.center for b in sample] == [tuple(b.translation) for b in theirs[f"s{s}"]]
    assert sum(len(o) for o in ours) < sum(len(b) for b in preds)  # something was filtered


# --------------------------------------------------------------------------------------------------
# the evaluator over a drive's ground truth and our detections, end to end
# --------------------------------------------------------------------------------------------------

CATEGORIES = [
    "vehicle.car",
    "vehicle.truck",
    "vehicle.bus.rigid",
    "vehicle.trailer",
    "vehicle.construction",
    "human.pedestrian.adult",
    "human.pedestrian.child",
    "human.pedestrian.stroller",  # our importer calls it pedestrian; the devkit does not evaluate it
    "vehicle.bicycle",
    "vehicle.motorcycle",
]
_LABEL = {
    "vehicle.car": "car",
    "vehicle.truck": "truck",
    "vehicle.bus.rigid": "truck",
    "vehicle.trailer": "truck",
    "vehicle.construction": "truck",
    "human.pedestrian.adult": "pedestrian",
    "human.pedestrian.child": "pedestrian",
    "human.pedestrian.stroller": "pedestrian",
    "vehicle.bicycle": "cyclist",
    "vehicle.motorcycle": "cyclist",
}


def drive_scene(
    seed: int, n_samples: int = 8, labels: Sequence[str] = ("car", "truck", "pedestrian", "cyclist")
) -> tuple[list[GroundTruth], list[list[Detection3D]]]:
    rng = np.random.default_rng(seed)
    cats = [c for c in CATEGORIES if _LABEL[c] in labels]
    racks = _racks(n_samples, seed + 7)
    gts: list[GroundTruth] = []
    dets: list[list[Detection3D]] = []
    for s in range(n_samples):
        objs: list[GroundTruthObject] = []
        d: list[Detection3D] = []
        for i in range(int(rng.integers(0, 25))):
            cat = str(rng.choice(cats))
            if racks[s] and rng.random() < 0.2:  # a bike in a rack
                r = racks[s][0]
                center = (r.center[0] + float(rng.uniform(-1, 1)), r.center[1] + float(rng.uniform(-1, 1)), 0.6)
            else:
                center = (float(rng.uniform(-55, 55)), float(rng.uniform(-55, 55)), float(rng.uniform(0, 1.5)))
            size = (float(rng.uniform(0.5, 12)), float(rng.uniform(0.5, 3)), float(rng.uniform(1, 4)))
            vel = (math.nan, math.nan) if rng.random() < 0.15 else (float(rng.normal(0, 5)), float(rng.normal(0, 5)))
            det_name = CATEGORY_TO_DETECTION.get(cat)
            attribute = str(rng.choice(ATTRS[det_name] if det_name else [""])) if rng.random() < 0.95 else ""
            objs.append(
                GroundTruthObject(
                    i,
                    _LABEL[cat],
                    center,
                    size,
                    float(rng.uniform(-np.pi, np.pi)),
                    vel,  # type: ignore[arg-type]
                    category=cat,
                    attribute=attribute,
                    num_lidar_pts=int(rng.choice([0, 0, 3, 50])),
                    num_radar_pts=int(rng.choice([0, 0, 1])),
                )
            )
            for _ in range(int(rng.choice([0, 1, 1, 2]))):
                scale = float(rng.choice([0.1, 0.5, 1.5, 3.0]))
                label = _LABEL[cat] if rng.random() < 0.85 else str(rng.choice(list(labels)))
                score = float(np.round(rng.random(), 1)) if rng.random() < 0.3 else float(rng.random())
                d.append(
                    Detection3D(
                        len(d),
                        label,
                        score,
                        (center[0] + float(rng.normal(0, scale)), center[1] + float(rng.normal(0, scale)), center[2]),
                        tuple(v * float(rng.uniform(0.6, 1.4)) for v in size),  # type: ignore[arg-type]
                        float(rng.uniform(-np.pi, np.pi)),
                        (float(rng.normal(0, 5)), float(rng.normal(0, 5))),
                        (0.3, 0.3),
                        ("lidar_top",),
                    )
                )
        for _ in range(int(rng.integers(0, 8))):
            d.append(
                Detection3D(
                    len(d),
                    str(rng.choice(list(labels))),
                    float(rng.random()),
                    (float(rng.uniform(-55, 55)), float(rng.uniform(-55, 55)), 0.0),
                    (2.0, 1.0, 1.0),
                    0.0,
                    (0.0, 0.0),
                    (0.3, 0.3),
                    ("radar_front",),
                )
            )
        gts.append(GroundTruth(s * 500_000_000, tuple(objs), tuple(racks[s])))
        dets.append(d)
    return gts, dets


def devkit_metrics(gts: Sequence[GroundTruth], dets: Sequence[Sequence[Detection3D]]) -> tuple[Any, Any, Any]:
    """The same samples through the devkit: our labels carried by one devkit class each
    (:data:`CARRIER`), ground truth mapped by the devkit's ``category_to_detection_name``."""
    gt_boxes, pred_boxes = EvalBoxes(), EvalBoxes()
    for s, (gt, det) in enumerate(zip(gts, dets, strict=True)):
        token = f"s{s}"
        g = []
        for o in gt.objects:
            devkit_class = CATEGORY_TO_DETECTION.get(o.category or "")
            if devkit_class is None:
                continue
            label = DETECTION_TO_LABEL[devkit_class]
            assert label is not None
            num = (o.num_lidar_pts or 0) + (o.num_radar_pts or 0)
            box = EvalBox(s, label, o.center, o.size, o.yaw, o.velocity, attribute=o.attribute or "", num_pts=num)
            g.append(_devkit_box(token, box, CARRIER[label]))
        gt_boxes.add_boxes(token, g)
        p = [EvalBox(s, d.label, d.center, d.size, d.yaw, d.velocity, score=d.score) for d in det]
        pred_boxes.add_boxes(token, [_devkit_box(token, b, CARRIER[b.name]) for b in p])
    nusc = _FakeNuScenes([gt.regions for gt in gts])
    class_range = {name: DETECTION_CVPR_2019.class_range[name] for name in DETECTION_NAMES}
    gt_boxes = filter_eval_boxes(nusc, gt_boxes, class_range)
    pred_boxes = filter_eval_boxes(nusc, pred_boxes, class_range)
    cfg = _config()
    present = {b.detection_name for b in gt_boxes.all}
    cfg.class_names = [c for c in CARRIER.values() if c in present]  # the classes with ground truth
    ev = DetectionEval.__new__(DetectionEval)
    ev.cfg, ev.verbose, ev.gt_boxes, ev.pred_boxes = cfg, False, gt_boxes, pred_boxes
    metrics, _ = ev.evaluate()
    return metrics, gt_boxes, pred_boxes


def _ours(gts: Sequence[GroundTruth], dets: Sequence[Sequence[Detection3D]]) -> dict[str, Any]:
    ev = NuScenesEvaluator()
    for gt, d in zip(gts, dets, strict=True):
        ev.add(gt, d, gt.t_ns)
    return ev.summary()


def _check(ours: dict[str, Any], metrics: Any, gt_boxes: Any, pred_boxes: Any) -> None:
    for label, carrier in CARRIER.items():
        n_gt = sum(1 for b in gt_boxes.all if b.detection_name == carrier)
        assert ours["num_ground_truth"][label] == n_gt
        assert ours["num_detections"][label] == sum(1 for b in pred_boxes.all if b.detection_name == carrier)
        if n_gt == 0:
            assert ours["per_class_ap"][label] is None
            continue
        assert ours["per_class_ap"][label] == pytest.approx(metrics.mean_dist_aps[carrier], abs=TOL)
        for th in DETECTION_CVPR_2019.dist_ths:
            ref = metrics.get_label_ap(carrier, th)
            assert ours["ap_by_threshold"][label][f"{th:g}"] == pytest.approx(ref, abs=TOL)
        for metric, short in TP_METRICS.items():
            assert ours["per_class_tp"][label][short] == pytest.approx(metrics.get_label_tp(carrier, metric), abs=TOL)
    assert ours["mAP"] == pytest.approx(metrics.mean_ap, abs=TOL)
    for metric, short in TP_METRICS.items():
        assert ours["tp_errors"][short] == pytest.approx(metrics.tp_errors[metric], abs=TOL)
        assert ours["tp_scores"][short] == pytest.approx(metrics.tp_scores[metric], abs=TOL)
    assert ours["NDS"] == pytest.approx(metrics.nd_score, abs=TOL)
    assert ours["filtering"]["ground_truth"]["after_bike_racks"] == len(gt_boxes.all)
    assert ours["filtering"]["detections"]["after_bike_racks"] == len(pred_boxes.all)


@pytest.mark.parametrize("seed", range(6))
def test_evaluator_equals_the_devkit_on_random_drives(seed: int) -> None:
    gts, dets = drive_scene(300 + seed)
    ours = _ours(gts, dets)
    _check(ours, *devkit_metrics(gts, dets))
    assert ours["protocol"] == "nuscenes" and ours["attributes_predicted"] is False
    assert ours["classes"] == [c for c in ("car", "truck", "pedestrian", "cyclist") if ours["num_ground_truth"][c]]


def test_evaluator_with_a_class_missing_equals_the_devkit_over_the_classes_present() -> None:
    gts, dets = drive_scene(400, labels=("car", "pedestrian"))
    ours = _ours(gts, dets)
    assert ours["classes"] == ["car", "pedestrian"]
    assert ours["per_class_ap"]["truck"] is None and ours["per_class_tp"]["cyclist"]["ATE"] is None
    _check(ours, *devkit_metrics(gts, dets))


def _gt(i: int, cat: str, x: float, y: float, **kw: Any) -> GroundTruthObject:
    fields: dict[str, Any] = {"attribute": "vehicle.moving", "num_lidar_pts": 10, "num_radar_pts": 0}
    fields.update(kw)
    velocity = fields.pop("velocity", (1.0, 0.0))
    size = (4.5, 1.9, 1.6) if _LABEL[cat] in ("car", "truck") else (0.7, 0.7, 1.8)
    return GroundTruthObject(i, _LABEL[cat], (x, y, 0.8), size, 0.0, velocity, category=cat, **fields)


def _det(label: str, x: float, y: float, score: float, yaw: float = 0.0) -> Detection3D:
    size = (4.5, 1.9, 1.6) if label in ("car", "truck") else (0.7, 0.7, 1.8)
    return Detection3D(0, label, score, (x, y, 0.8), size, yaw, (1.0, 0.0), (0.2, 0.2), ("lidar_top",))


def test_hand_made_cases() -> None:
    rack = GroundTruthRegion(RACK, (20.0, 0.0, 0.5), (6.0, 2.0, 2.0), 0.0)
    s0 = GroundTruth(
        0,
        (
            _gt(0, "vehicle.car", 10.0, 0.0),
            _gt(1, "vehicle.car", -10.0, 5.0, num_lidar_pts=0),  # no points: not evaluated
            _gt(2, "human.pedestrian.adult", 39.0, 0.0, attribute=""),  # in range; no attribute: not in AAE
            _gt(3, "human.pedestrian.adult", 41.0, 0.0),  # beyond the 40 m pedestrian range
            _gt(4, "vehicle.bicycle", 20.0, 0.5, attribute="cycle.without_rider"),  # in the rack
            _gt(5, "vehicle.bicycle", 20.0, 8.0, attribute="cycle.with_rider"),
            _gt(6, "human.pedestrian.stroller", 5.0, 5.0),  # not a devkit class
            _gt(7, "vehicle.bus.rigid", 30.0, -10.0, velocity=(math.nan, math.nan)),
        ),
        (rack,),
    )
    d0 = [
        _det("car", 10.0, 2.0, 0.9),  # exactly 2 m off: not a match at 2 m (strict <), a match at 4 m
        _det("car", 10.3, 0.0, 0.8),  # the real match
        _det("car", 10.1, 0.0, 0.8),  # a duplicate with the same score
        _det("pedestrian", 39.2, 0.0, 0.7, yaw=np.pi),
        _det("cyclist", 20.0, 0.4, 0.95),  # in the rack: dropped
        _det("cyclist", 20.5, 8.0, 0.6),
        _det("pedestrian", 5.0, 5.0, 0.5),  # on the stroller: a false positive
        _det("truck", 30.0, -10.5, 0.4),
    ]
    s1 = GroundTruth(500_000_000, (_gt(0, "vehicle.car", 15.0, 1.0),), ())
    d1: list[Detection3D] = []  # a sample whose car is missed
    ours = _ours([s0, s1], [d0, d1])
    _check(ours, *devkit_metrics([s0, s1], [d0, d1]))
    assert ours["num_ground_truth"] == {"car": 2, "truck": 1, "pedestrian": 1, "cyclist": 1}
    assert ours["num_detections"] == {"car": 3, "truck": 1, "pedestrian": 2, "cyclist": 1}
    assert ours["filtering"]["ground_truth"] == {"total": 8, "after_range": 7, "after_points": 6, "after_bike_racks": 5}
    assert ours["per_class_tp"]["pedestrian"]["AOE"] == pytest.approx(np.pi)
    assert ours["per_class_tp"]["truck"]["AVE"] == 1.0  # only an unknown velocity: NaN -> 1, as the devkit
    assert ours["per_class_tp"]["car"]["AAE"] == 1.0  # no attribute predicted
    assert ours["tp_errors"]["AAE"] == 1.0 and ours["tp_scores"]["AAE"] == 0.0
    # the diagnosis: both cars are 10-20 m away, one is found (at 2 m) and the other missed
    car = ours["recall_breakdown"]["car"]
    assert [(b["n"], b["recall"]) for b in car["by_range_m"]][:2] == [(0, None), (2, 0.5)]


def test_recall_breakdown_takes_each_ground_truth_box_once() -> None:
    def box(sample: int, x: float, score: float = -1.0, pts: int = 10) -> EvalBox:
        return EvalBox(sample, "car", (x, 0.0, 0.0), (4.5, 1.8, 1.5), 0.0, (0.0, 0.0), score, "", pts)

    gt = [[box(0, 5.0, pts=3), box(0, 25.0, pts=200)], [box(1, 45.0, pts=50)]]
    pred = [[box(0, 5.5, 0.9), box(0, 5.2, 0.8), box(0, 30.0, 0.7)], [box(1, 46.0, 0.5)]]
    out = recall_breakdown(gt, pred, "car", 2.0)
    # 5.5 takes the near car, 5.2 finds it taken, 30 is 5 m off the 25 m car; 46 matches 45
    assert [(b["n"], b["recall"]) for b in out["by_range_m"]] == [(1, 1.0), (0, None), (1, 0.0), (0, None), (1, 1.0)]
    assert [(b["n"], b["recall"]) for b in out["by_points"]] == [(1, 1.0), (0, None), (1, 1.0), (1, 0.0)]


def _car(sample: int, x: float, score: float = -1.0, sources: tuple[str, ...] = ()) -> EvalBox:
    return EvalBox(sample, "car", (x, 0.0, 0.0), (4.5, 1.8, 1.5), 0.0, (0.0, 0.0), score, "", 10, sources)


def test_ap_by_range_scores_each_band_alone() -> None:
    gt = [[_car(0, 5.0), _car(0, 25.0)], [_car(1, 26.0), _car(1, 45.0)]]
    # the near car found; at 20-30 m a false positive outscores the one true match; 45 m missed
    pred = [[_car(0, 5.2, 0.9), _car(0, 28.5, 0.95), _car(0, 25.1, 0.5)], [_car(1, 46.0 + 5, 0.4)]]
    bands = {tuple(b["range_m"]): b for b in ap_by_range(gt, pred, "car")}
    assert bands[(0.0, 10.0)]["n"] == 1 and bands[(0.0, 10.0)]["AP"] == pytest.approx(1.0)
    assert bands[(10.0, 20.0)] == {"range_m": [10.0, 20.0], "n": 0, "AP": None}
    # 20-30 m: the same as the devkit's AP of those boxes alone
    g = [[gt[0][1]], [gt[1][0]]]
    p = [[pred[0][1], pred[0][2]], []]
    alone = np.mean([calc_ap(accumulate(g, p, "car", t), 0.1, 0.1) for t in DETECTION_CVPR_2019.dist_ths])
    assert bands[(20.0, 30.0)]["n"] == 2 and bands[(20.0, 30.0)]["AP"] == pytest.approx(alone)
    assert 0 < bands[(20.0, 30.0)]["AP"] < 1
    assert bands[(40.0, None)]["n"] == 1 and bands[(40.0, None)]["AP"] == 0.0


def test_precision_by_source_counts_the_protocols_matches_per_range() -> None:
    guided, lidar = ("camera", "lidar", "camera_guided"), ("lidar",)
    gt = [[_car(0, 5.0), _car(0, 25.0)], [_car(1, 45.0)]]
    pred = [
        [_car(0, 5.3, 0.9, lidar), _car(0, 5.1, 0.5, guided), _car(0, 25.5, 0.6, guided), _car(0, 35.0, 0.3, guided)],
        [_car(1, 45.5, 0.7, guided)],
    ]
    out = precision_by_source(gt, pred, ["car"], 2.0)
    assert set(out) == {"camera", "camera_guided", "lidar"}
    g = out["camera_guided"]
    # 5.1 is beaten to the near car by the better-scored lidar box; 25.5 and 45.5 match; 35 matches nothing
    assert (g["n"], g["precision"]) == (4, 0.5)
    assert [(b["n"], b["precision"]) for b in g["by_range_m"]] == [(1, 0.0), (0, None), (1, 1.0), (1, 0.0), (1, 1.0)]
    assert g["per_class"]["car"] == {"n": 4, "precision": 0.5}
    assert (out["lidar"]["n"], out["lidar"]["precision"]) == (5, 0.6)  # the guided objects name lidar too


def test_summary_reports_ap_by_range_and_precision_by_source() -> None:
    gt = GroundTruth(0, (_gt(0, "vehicle.car", 10.0, 0.0), _gt(1, "vehicle.car", 30.0, 0.0)), ())
    dets = [
        _det("car", 10.2, 0.0, 0.9),
        replace(_det("car", 30.2, 0.0, 0.6), sources=("cam_front", "lidar_top", "camera_guided")),
        replace(_det("car", 22.0, 5.0, 0.5), sources=("cam_front", "lidar_top", "camera_guided")),
    ]
    out = _ours([gt], [dets])
    assert [b["n"] for b in out["ap_by_range"]["car"]] == [0, 1, 0, 1, 0]
    g = out["precision_by_source"]["camera_guided"]
    assert (g["n"], g["precision"]) == (2, 0.5)
    assert [b["n"] for b in g["by_range_m"]] == [0, 0, 1, 1, 0]


def test_frame_offset_moves_ground_truth_and_missing_frames_count() -> None:
    gt = GroundTruth(1_000_000_000, (_gt(0, "vehicle.car", 10.0, 0.0),), ())
    ev = NuScenesEvaluator()
    ev.add(gt, [_det("car", 10.1, 0.0, 0.9)], 1_100_000_000)  # 100 ms later: the car moved 0.1 m
    ev.add(gt, None, None)
    s = ev.summary()
    assert s["samples"] == 2 and s["samples_without_frame"] == 1
    assert s["max_frame_offset_ms"] == pytest.approx(100.0)
    assert s["per_class_tp"]["car"]["ATE"] == pytest.approx(0.0, abs=1e-9)
    assert any("no replayed frame" in n for n in s["notes"])


def test_too_many_detections_keep_the_best_500() -> None:
    gt = GroundTruth(0, (_gt(0, "vehicle.car", 10.0, 0.0),), ())
    dets = [_det("car", 30.0, float(i % 40), 0.1) for i in range(600)] + [_det("car", 10.0, 0.0, 0.99)]
    ev = NuScenesEvaluator()
    ev.add(gt, dets, 0)
    s = ev.summary()
    assert s["detections_over_limit"] == 101 and s["num_detections"]["car"] == 500
    # the one car found first; the false positives after it still lower the last recall point (np.interp at
    # recall 1 takes the last detection's precision): AP = 89 of the 90 points
    assert s["per_class_ap"]["car"] == pytest.approx(89 / 90)


def test_drives_without_protocol_fields_are_scored_and_say_so() -> None:
    old = GroundTruthObject(0, "car", (10.0, 0.0, 0.8), (4.5, 1.9, 1.6), 0.0, (0.0, 0.0))
    ev = NuScenesEvaluator()
    ev.add(GroundTruth(0, (old,)), [_det("car", 10.0, 0.0, 0.9)], 0)
    s = ev.summary()
    assert s["per_class_ap"]["car"] == pytest.approx(1.0)
    assert len(s["notes"]) == 4  # no category, no point counts, no attribute, no ego pose
