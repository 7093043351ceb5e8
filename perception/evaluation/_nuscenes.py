"""The nuScenes detection protocol, computed as the official devkit computes it.

This is ``nuscenes-devkit`` ``eval/detection`` (``algo.py``: ``accumulate``, ``calc_ap``, ``calc_tp``;
``data_classes.DetectionMetrics``: mAP, TP errors, NDS; ``common/loaders.filter_eval_boxes``) with the
configuration ``detection_cvpr_2019`` (:data:`DETECTION_CVPR_2019`), written over our drives' ground
truth and our detections. ``tests/evaluation/test_nuscenes_protocol.py`` runs the devkit's own functions
on the same boxes and checks every number to 1e-6.

Classes
    The devkit maps nuScenes categories onto its ten detection classes
    (:data:`CATEGORY_TO_DETECTION`, its ``category_to_detection_name``; note that pedestrian excludes
    ``stroller``, ``wheelchair`` and ``personal_mobility``). Our four labels express six of its
    classes, and barrier and traffic cone not at all (:data:`DETECTION_TO_LABEL`)::

        devkit class                               -> our label   range (devkit class_range)
        car                                        -> car         50 m
        truck, bus, trailer, construction_vehicle  -> truck       50 m
        pedestrian                                 -> pedestrian  40 m
        bicycle, motorcycle                        -> cyclist     40 m
        barrier, traffic_cone                      -> (none: not evaluated)

    The protocol is evaluated per *our* label: ground truth of a devkit class counts as our label's
    ground truth. ``car`` and ``pedestrian`` are therefore exactly the devkit's car and pedestrian AP;
    ``truck`` and ``cyclist`` are the devkit's algorithm on the union of their classes (our detector
    has one label for them), so they are not the leaderboard's truck or bicycle AP. Per-class results
    exist only for our labels.

Which boxes count (``filter_eval_boxes``), per sample, for ground truth and detections alike
    * BEV distance from the ego (``base_link`` origin at the sample) ``< class_range`` of the class;
    * ground truth with ``num_lidar_pts + num_radar_pts == 0`` is removed (a box whose counts are
      unknown, ``-1`` in the devkit, is kept);
    * bicycles and motorcycles (our ``cyclist``; detections included) whose centre is inside an
      annotated ``static_object.bicycle_rack`` box (the drive's ground-truth regions) are removed;
    * at most ``max_boxes_per_sample`` (500) detections per sample: the devkit rejects a submission
      with more; here the best-scored 500 are kept and the rest counted (``detections_over_limit``).

Matching and AP (``accumulate``, ``calc_ap``)
    Per class and distance threshold (0.5, 1, 2, 4 m): detections of all samples sorted by
    descending score (equal scores: the later one first, as the devkit's sort does); each takes the
    nearest untaken ground-truth box of its class in its sample by BEV centre distance, a match if
    that distance is ``< threshold``. Precision and confidence are *linearly interpolated* at 101
    recall points (``np.interp``, 0 beyond the highest recall reached), the points at recall
    ``<= min_recall`` dropped, ``min_precision`` subtracted and clipped at 0, mean normalised by
    ``1 - min_precision``. A class's AP is the mean over thresholds.

TP errors (``calc_tp``, at the 2 m threshold)
    ATE (BEV centre distance, m), ASE (``1 - IoU`` of the boxes aligned: sizes only), AOE (yaw
    difference, rad; period pi for barrier), AVE (velocity L2, m/s), AAE (``1 -`` attribute
    accuracy). Each is the NaN-aware cumulative mean over matches, interpolated at the recall
    points, averaged between ``min_recall`` and the highest recall reached; 1.0 when no match
    reaches ``min_recall``. Ground truth with an unknown velocity (NaN) or no attribute is left out of
    AVE/AAE as the devkit does (all NaN -> 1; and, as its ``cummean`` does, the recall points before the
    first known value count 0, which is why AAE can come out a little below 1 without attributes).
    AVE/AAE are undefined for barrier and traffic cone, AOE too for traffic cone (rules kept in
    :func:`tp_error`, though our labels have neither class).

    **Attributes.** Our detections carry no attribute (``attribute_name == ""`` in devkit terms), so
    every match with an attributed ground-truth box has an attribute error of 1 and AAE is 1.0 (or just
    below, see above) for every class with matches: what the devkit scores for a submission without
    attributes. NDS counts it like that (its AAE term is about 0); the report says
    ``attributes_predicted: false``.

Summary (``DetectionMetrics``)
    mAP = mean AP over the evaluated classes; TP error per metric = ``nanmean`` over those classes;
    TP score = ``max(0, 1 - error)``; NDS = ``(5 * mAP + sum of the 5 TP scores) / 10``. The
    evaluated classes are our labels *that have ground truth* in the evaluated samples after
    filtering — the devkit run with ``class_range`` restricted to them. (The devkit over a fixed class
    list gives a class without ground truth AP 0 and errors 1; over a full nuScenes split every class
    has ground truth, so the two agree there.) A class without ground truth is reported as ``None``.

Samples and frames
    A sample is one ground-truth message of the drive (a nuScenes keyframe). Its predictions are the
    detections of the replayed frame nearest in time (the keyframe's lidar sweep on a nuScenes drive:
    the same timestamp). When the two times differ the ground truth is moved to the frame time as in
    the native protocol (ego motion, and each object's velocity where known); a sample with no frame
    has no predictions.

Frame of comparison
    The devkit compares boxes in the global frame; ground truth and detections are in ``base_link``
    here, so with the ego pose of the sample (``ego_at``) both are turned onto the global frame's axes
    (origin at the ego: BEV distances, ranges and rack containment are then the devkit's; yaw is the
    heading projected on the ground, velocity the horizontal part). The ego's roll and pitch matter: a
    few degrees on a ramp change BEV distances by centimetres. The drive keeps each box's yaw only,
    so ground-truth yaw and velocity come back from ``base_link`` with an error of second order in the
    ego's tilt. Without an ego pose boxes are compared in ``base_link`` (said in ``notes``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.evaluation._bootstrap import FrameMatches
from perception.evaluation._detection import move_ground_truth
from perception.fusion import invert_transform, transform_points
from perception.importers import BIKE_RACK
from perception.types import LABELS, Detection3D, EgoPose, GroundTruth, GroundTruthRegion, Transform

__all__ = [
    "CATEGORY_TO_DETECTION",
    "DETECTION_CVPR_2019",
    "DETECTION_TO_LABEL",
    "TP_METRICS",
    "EvalBox",
    "MetricData",
    "NuScenesConfig",
    "NuScenesEvaluator",
    "accumulate",
    "ap_by_range",
    "calc_ap",
    "calc_tp",
    "filter_boxes",
    "frame_matches",
    "precision_by_source",
    "recall_breakdown",
    "tp_error",
]

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]

#: The devkit's ``category_to_detection_name``.
CATEGORY_TO_DETECTION: Mapping[str, str] = {
    "movable_object.barrier": "barrier",
    "vehicle.bicycle": "bicycle",
    "vehicle.bus.bendy": "bus",
    "vehicle.bus.rigid": "bus",
    "vehicle.car": "car",
    "vehicle.construction": "construction_vehicle",
    "vehicle.motorcycle": "motorcycle",
    "human.pedestrian.adult": "pedestrian",
    "human.pedestrian.child": "pedestrian",
    "human.pedestrian.construction_worker": "pedestrian",
    "human.pedestrian.police_officer": "pedestrian",
    "movable_object.trafficcone": "traffic_cone",
    "vehicle.trailer": "trailer",
    "vehicle.truck": "truck",
}

#: Devkit detection class -> our label (``None``: our labels cannot express it).
DETECTION_TO_LABEL: Mapping[str, str | None] = {
    "car": "car",
    "truck": "truck",
    "bus": "truck",
    "trailer": "truck",
    "construction_vehicle": "truck",
    "pedestrian": "pedestrian",
    "motorcycle": "cyclist",
    "bicycle": "cyclist",
    "traffic_cone": None,
    "barrier": None,
}

#: The devkit's TP metric names, in its order, with the names the nuScenes paper gives them.
TP_METRICS: Mapping[str, str] = {
    "trans_err": "ATE",
    "scale_err": "ASE",
    "orient_err": "AOE",
    "vel_err": "AVE",
    "attr_err": "AAE",
}

#: Devkit classes whose bicycles/motorcycles inside a bike rack are not evaluated.
_CYCLES = frozenset({"bicycle", "motorcycle"})
_NELEM = 101  # DetectionMetricData.nelem


@dataclass(frozen=True)
class NuScenesConfig:
    """A devkit ``DetectionConfig`` (centre distance matching)."""

    class_range: Mapping[str, float]
    dist_ths: tuple[float, ...]
    dist_th_tp: float
    min_recall: float
    min_precision: float
    max_boxes_per_sample: int
    mean_ap_weight: float

    def __post_init__(self) -> None:
        if self.dist_th_tp not in self.dist_ths:
            raise ValueError(f"dist_th_tp {self.dist_th_tp} must be one of dist_ths {list(self.dist_ths)}")

    def label_range(self, label: str) -> float:
        """Range of our label: the class_range of the devkit classes it stands for (they agree)."""
        ranges = {self.class_range[c] for c, lab in DETECTION_TO_LABEL.items() if lab == label}
        if len(ranges) != 1:
            raise ValueError(f"label {label!r} stands for devkit classes with ranges {sorted(ranges)}")
        return float(ranges.pop())

    def serialize(self) -> dict[str, Any]:
        out = asdict(self)
        out["class_range"] = dict(self.class_range)
        out["dist_ths"] = list(self.dist_ths)
        out["dist_fcn"] = "center_distance"
        return out


#: The devkit's ``configs/detection_cvpr_2019.json``.
DETECTION_CVPR_2019 = NuScenesConfig(
    class_range={
        "car": 50,
        "truck": 50,
        "bus": 50,
        "trailer": 50,
        "construction_vehicle": 50,
        "pedestrian": 40,
        "motorcycle": 40,
        "bicycle": 40,
        "traffic_cone": 30,
        "barrier": 30,
    },
    dist_ths=(0.5, 1.0, 2.0, 4.0),
    dist_th_tp=2.0,
    min_recall=0.1,
    min_precision=0.1,
    max_boxes_per_sample=500,
    mean_ap_weight=5,
)


@dataclass(frozen=True, slots=True)
class EvalBox:
    """A devkit ``DetectionBox``: ground truth (``score`` -1) or a detection, of ``sample``.

    ``size`` is any fixed order (the scale IoU does not care, as long as ground truth and detections
    agree); ``yaw`` is about +z; ``num_pts`` -1 = unknown (never filtered).
    """

    sample: int
    name: str
    center: tuple[float, float, float]
    size: tuple[float, float, float]
    yaw: float
    velocity: tuple[float, float]
    score: float = -1.0
    attribute: str = ""
    num_pts: int = -1
    sources: tuple[str, ...] = ()  # a detection's sensors (and pseudo-sources): for precision per source

    @property
    def ego_dist(self) -> float:
        return math.sqrt(self.center[0] ** 2 + self.center[1] ** 2)


@dataclass(frozen=True)
class MetricData:
    """The devkit's ``DetectionMetricData``: 101 recall points and what is interpolated at them."""

    recall: F64
    precision: F64
    confidence: F64
    trans_err: F64
    vel_err: F64
    scale_err: F64
    orient_err: F64
    attr_err: F64

    @classmethod
    def no_predictions(cls) -> MetricData:
        ones = np.ones(_NELEM)
        errors = {key: ones.copy() for key in TP_METRICS}
        return cls(np.linspace(0, 1, _NELEM), np.zeros(_NELEM), np.zeros(_NELEM), **errors)

    @property
    def max_recall_ind(self) -> int:
        """Index of the highest recall reached: the last point with a non-zero confidence."""
        non_zero = np.nonzero(self.confidence)[0]
        return 0 if len(non_zero) == 0 else int(non_zero[-1])


# --------------------------------------------------------------------------------------------------
# the devkit's algorithm
# --------------------------------------------------------------------------------------------------


def _velocity_l2(gt: EvalBox, pred: EvalBox) -> float:
    return float(np.linalg.norm(np.array(pred.velocity) - np.array(gt.velocity)))


def _scale_iou(gt: EvalBox, pred: EvalBox) -> float:
    """IoU of the two boxes aligned (same centre and orientation): sizes only. A non-positive size
    (the devkit asserts against it) gives 0."""
    sa, sr = np.array(gt.size, dtype=np.float64), np.array(pred.size, dtype=np.float64)
    if not (np.all(sa > 0) and np.all(sr > 0)):
        return 0.0
    inter = float(np.prod(np.minimum(sa, sr)))
    return inter / (float(np.prod(sa)) + float(np.prod(sr)) - inter)


def _yaw_diff(gt: EvalBox, pred: EvalBox, period: float) -> float:
    """The devkit's ``yaw_diff``: |smallest angle from the prediction's yaw to the ground truth's|."""
    # quaternion_yaw of a rotation about z: the yaw itself, in (-pi, pi]
    yaw_gt = math.atan2(math.sin(gt.yaw), math.cos(gt.yaw))
    yaw_est = math.atan2(math.sin(pred.yaw), math.cos(pred.yaw))
    diff = (yaw_gt - yaw_est + period / 2) % period - period / 2
    if diff > np.pi:
        diff = diff - 2 * np.pi
    return abs(diff)


def _attr_err(gt: EvalBox, pred: EvalBox) -> float:
    """1 - the devkit's ``attr_acc``: NaN when the ground truth has no attribute."""
    if gt.attribute == "":
        return math.nan
    return 1.0 - float(gt.attribute == pred.attribute)


def _cummean(x: F64) -> F64:
    """The devkit's NaN-aware cumulative mean (all NaN -> ones)."""
    if int(np.sum(np.isnan(x))) == len(x):
        return np.ones(len(x))
    sum_vals = np.nancumsum(x.astype(float))
    count_vals = np.cumsum(~np.isnan(x))
    out: F64 = np.divide(sum_vals, count_vals, out=np.zeros_like(sum_vals), where=count_vals != 0)
    return out


def _matches(
    gt: Sequence[Sequence[EvalBox]], pred: Sequence[Sequence[EvalBox]], class_name: str, dist_th: float
) -> Iterator[tuple[EvalBox, int | None, float]]:
    """The devkit's matching: the predictions of ``class_name`` by descending confidence, each with the
    position in ``gt[p.sample]`` of the ground truth it takes (the nearest untaken one closer than
    ``dist_th``) and its distance, or ``None`` and ``inf``."""
    preds = [b for boxes in pred for b in boxes if b.name == class_name]
    # sorted((conf, i))[::-1]: descending confidence, equal confidences by descending position
    order = sorted(range(len(preds)), key=lambda i: (preds[i].score, i), reverse=True)
    # per sample: its ground truth of the class (positions in the sample's list) and their BEV centres
    cands: dict[int, tuple[list[int], F64, npt.NDArray[np.bool_]]] = {}
    for i in order:
        p = preds[i]
        if p.sample not in cands:
            idx = [j for j, g in enumerate(gt[p.sample]) if g.name == class_name]
            xy = np.array([gt[p.sample][j].center[:2] for j in idx], dtype=np.float64).reshape(-1, 2)
            cands[p.sample] = (idx, xy, np.zeros(len(idx), dtype=bool))
        idx, xy, taken = cands[p.sample]
        # the nearest untaken one (the first of equals, as the devkit's strict '<' scan); NaN never matches
        dist = np.sqrt(np.sum((np.asarray(p.center[:2], dtype=np.float64) - xy) ** 2, axis=1))
        dist[taken | np.isnan(dist)] = np.inf
        k = int(np.argmin(dist)) if len(idx) else -1
        if k >= 0 and dist[k] < dist_th:
            taken[k] = True
            yield p, idx[k], float(dist[k])
        else:
            yield p, None, math.inf


def accumulate(
    gt: Sequence[Sequence[EvalBox]], pred: Sequence[Sequence[EvalBox]], class_name: str, dist_th: float
) -> MetricData:
    """The devkit's ``accumulate``: ``gt[s]`` / ``pred[s]`` are the boxes of sample ``s`` (all classes,
    in the order the devkit's ``EvalBoxes`` would hold them)."""
    npos = sum(1 for boxes in gt for b in boxes if b.name == class_name)
    if npos == 0:
        return MetricData.no_predictions()
    period = np.pi if class_name == "barrier" else 2 * np.pi
    tp: list[int] = []
    conf: list[float] = []
    match: dict[str, list[float]] = {k: [] for k in (*TP_METRICS, "conf")}
    for p, j, dist in _matches(gt, pred, class_name, dist_th):
        conf.append(p.score)
        if j is None:
            tp.append(0)
            continue
        tp.append(1)
        g = gt[p.sample][j]
        match["trans_err"].append(dist)
        match["vel_err"].append(_velocity_l2(g, p))
        match["scale_err"].append(1.0 - _scale_iou(g, p))
        match["orient_err"].append(_yaw_diff(g, p, period))
        match["attr_err"].append(_attr_err(g, p))
        match["conf"].append(p.score)
    if not match["trans_err"]:
        return MetricData.no_predictions()

    rec, prec_i = _precision_curve(np.array(tp, dtype=bool), npos)
    rec_interp = np.linspace(0, 1, _NELEM)
    conf_i = np.interp(rec_interp, rec, np.array(conf), right=0)
    match_conf = np.array(match["conf"])
    errors = {
        key: np.interp(conf_i[::-1], match_conf[::-1], _cummean(np.array(match[key]))[::-1])[::-1] for key in TP_METRICS
    }
    return MetricData(recall=rec_interp, precision=prec_i, confidence=conf_i, **errors)


def _precision_curve(tp: B, npos: int) -> tuple[F64, F64]:
    """Detections' true-positive flags in ranking order -> their recall and the precision interpolated at
    the 101 recall points (the devkit's ``accumulate``: linear, 0 beyond the highest recall reached)."""
    tp_c = np.cumsum(tp).astype(float)
    fp_c = np.cumsum(~tp).astype(float)
    prec = tp_c / (fp_c + tp_c)
    rec = tp_c / float(npos)
    prec_i: F64 = np.interp(np.linspace(0, 1, _NELEM), rec, prec, right=0)
    return rec, prec_i


def calc_ap(md: MetricData, min_recall: float, min_precision: float) -> float:
    """The devkit's ``calc_ap``."""
    return _ap_of_precision(md.precision, min_recall, min_precision)


def _ap_of_precision(precision: F64, min_recall: float, min_precision: float) -> float:
    if not (0 <= min_precision < 1 and 0 <= min_recall <= 1):
        raise ValueError(f"min_precision {min_precision} / min_recall {min_recall} out of range")
    prec = np.copy(precision)[round(100 * min_recall) + 1 :]
    prec -= min_precision
    prec[prec < 0] = 0
    return float(np.mean(prec)) / (1.0 - min_precision)


def calc_tp(md: MetricData, min_recall: float, metric_name: str) -> float:
    """The devkit's ``calc_tp``: mean error from just above ``min_recall`` to the highest recall reached."""
    first_ind = round(100 * min_recall) + 1
    last_ind = md.max_recall_ind
    if last_ind < first_ind:
        return 1.0
    values: F64 = getattr(md, metric_name)
    return float(np.mean(values[first_ind : last_ind + 1]))


def tp_error(md: MetricData, class_name: str, metric_name: str, min_recall: float) -> float:
    """A class's TP error as the devkit's ``DetectionEval.evaluate`` takes it (NaN where undefined)."""
    if class_name == "traffic_cone" and metric_name in ("attr_err", "vel_err", "orient_err"):
        return math.nan
    if class_name == "barrier" and metric_name in ("attr_err", "vel_err"):
        return math.nan
    return calc_tp(md, min_recall, metric_name)


def _in_region(region: GroundTruthRegion, points: F64) -> npt.NDArray[np.bool_]:
    """Which points ``[N,3]`` are inside the region's box (boundary included, as ``points_in_box``)."""
    box = Transform(region.center, (0.0, 0.0, math.sin(region.yaw / 2), math.cos(region.yaw / 2))).matrix()
    local = transform_points(invert_transform(box), points)
    half = np.asarray(region.size, dtype=np.float64) / 2
    inside: npt.NDArray[np.bool_] = np.all(np.abs(local) <= half, axis=1)
    return inside


@dataclass
class FilterCounts:
    """Boxes left after each step of ``filter_eval_boxes`` (the devkit's verbose counts)."""

    total: int = 0
    after_range: int = 0
    after_points: int = 0
    after_bike_racks: int = 0


def filter_boxes(
    boxes: Sequence[EvalBox],
    max_dist: Mapping[str, float],
    racks: Sequence[GroundTruthRegion],
    counts: FilterCounts | None = None,
    *,
    cycles: frozenset[str] = _CYCLES,
) -> list[EvalBox]:
    """The devkit's ``filter_eval_boxes`` for one sample: range, zero points, bicycles in racks.

    ``cycles``: the class names the bike-rack rule applies to (the devkit's bicycle and motorcycle,
    or our ``cyclist``)."""
    counts = counts if counts is not None else FilterCounts()
    counts.total += len(boxes)
    kept = [b for b in boxes if b.ego_dist < max_dist[b.name]]
    counts.after_range += len(kept)
    kept = [b for b in kept if b.num_pts != 0]
    counts.after_points += len(kept)
    racks = [r for r in racks if r.kind == BIKE_RACK]
    if racks:
        centres = np.array([b.center for b in kept], dtype=np.float64).reshape(-1, 3)
        in_rack = np.zeros(len(kept), dtype=bool)
        for r in racks:
            in_rack |= _in_region(r, centres)
        kept = [b for b, inside in zip(kept, in_rack, strict=True) if not (b.name in cycles and inside)]
    counts.after_bike_racks += len(kept)
    return kept


#: Bins of :func:`recall_breakdown`: BEV range from the ego (m) and annotated lidar + radar points.
RANGE_BINS: tuple[float, ...] = (0.0, 10.0, 20.0, 30.0, 40.0, 50.0)
POINT_BINS: tuple[int, ...] = (1, 5, 20, 100)


def recall_breakdown(
    gt: Sequence[Sequence[EvalBox]], pred: Sequence[Sequence[EvalBox]], class_name: str, dist_th: float
) -> dict[str, list[dict[str, Any]]]:
    """Which ground truth of ``class_name`` a detection reaches, at every score (a diagnosis, not part of
    the devkit): the matching of :func:`accumulate` (:func:`_matches`), counted per BEV range bin (:data:`RANGE_BINS`)
    and per bin of annotated points (:data:`POINT_BINS`; unknown counts are left out). ``recall`` is
    ``None`` for an empty bin."""
    taken = {(p.sample, j) for p, j, _ in _matches(gt, pred, class_name, dist_th) if j is not None}
    of_class = [(s, j, b) for s, boxes in enumerate(gt) for j, b in enumerate(boxes) if b.name == class_name]
    ranges = [b.ego_dist for _, _, b in of_class]
    points = [b.num_pts for _, _, b in of_class]
    hit = [(s, j) in taken for s, j, _ in of_class]
    r, n, h = np.array(ranges), np.array(points), np.array(hit, dtype=bool)

    def rows(values: npt.NDArray[Any], edges: Sequence[float], key: str) -> list[dict[str, Any]]:
        out = []
        for lo, hi in zip(edges, [*edges[1:], math.inf], strict=True):
            sel = (values >= lo) & (values < hi)
            m = int(sel.sum())
            out.append(
                {key: [lo, None if math.isinf(hi) else hi], "n": m, "recall": float(h[sel].mean()) if m else None}
            )
        return out

    return {"by_range_m": rows(r, RANGE_BINS[:-1], "range_m"), "by_points": rows(n, POINT_BINS, "points")}


def _bands(edges: Sequence[float]) -> list[tuple[float, float]]:
    return list(zip(edges, [*edges[1:], math.inf], strict=True))


def _in_band(boxes: Sequence[Sequence[EvalBox]], lo: float, hi: float) -> list[list[EvalBox]]:
    return [[b for b in s if lo <= b.ego_dist < hi] for s in boxes]


def ap_by_range(
    gt: Sequence[Sequence[EvalBox]],
    pred: Sequence[Sequence[EvalBox]],
    class_name: str,
    config: NuScenesConfig = DETECTION_CVPR_2019,
) -> list[dict[str, Any]]:
    """``class_name``'s AP (mean over the distance thresholds, as the class AP) within each BEV range bin
    of :data:`RANGE_BINS` (a diagnosis, not part of the devkit): ground truth *and* detections whose
    centre lies in ``[lo, hi)`` from the ego, matched and scored as :func:`accumulate` / :func:`calc_ap`
    do. A detection across a bin edge from its object counts as a false positive in its bin and the
    object as missed in its own, so the bins' APs are each a little below what the whole range scores.
    ``AP`` is ``None`` for a bin without ground truth."""
    out = []
    for lo, hi in _bands(RANGE_BINS[:-1]):
        g, p = _in_band(gt, lo, hi), _in_band(pred, lo, hi)
        n = sum(1 for s in g for b in s if b.name == class_name)
        ap = None
        if n:
            aps = [
                calc_ap(accumulate(g, p, class_name, t), config.min_recall, config.min_precision)
                for t in config.dist_ths
            ]
            ap = float(np.mean(aps))
        out.append({"range_m": [lo, None if math.isinf(hi) else hi], "n": n, "AP": ap})
    return out


def precision_by_source(
    gt: Sequence[Sequence[EvalBox]], pred: Sequence[Sequence[EvalBox]], classes: Sequence[str], dist_th: float
) -> dict[str, dict[str, Any]]:
    """Per source named in the detections' ``sources`` (a sensor, e.g. ``lidar_top``, or a pseudo-source such as
    ``camera_guided``): the share of its detections, at every score, that take a ground-truth object of
    their class within ``dist_th`` under the protocol's matching (:func:`_matches`, all detections of the
    class competing by score, so a detection beaten to its object by a better-scored one is a false
    positive), in all and per BEV range bin of the detection (:data:`RANGE_BINS`) and per class. A
    detection with several sources counts for each. A diagnosis, not part of the devkit; ``precision``
    is ``None`` where there are no detections."""
    hits: dict[str, list[tuple[str, float, bool]]] = {}
    for label in classes:
        for p, j, _ in _matches(gt, pred, label, dist_th):
            for source in p.sources:
                hits.setdefault(source, []).append((label, p.ego_dist, j is not None))

    def share(rows: Sequence[tuple[str, float, bool]]) -> dict[str, Any]:
        return {"n": len(rows), "precision": sum(ok for _, _, ok in rows) / len(rows) if rows else None}

    out: dict[str, dict[str, Any]] = {}
    for source, rows in sorted(hits.items()):
        out[source] = {
            **share(rows),
            "by_range_m": [
                {"range_m": [lo, None if math.isinf(hi) else hi], **share([x for x in rows if lo <= x[1] < hi])}
                for lo, hi in _bands(RANGE_BINS[:-1])
            ],
            "per_class": {label: share([x for x in rows if x[0] == label]) for label in classes},
        }
    return out


def frame_matches(
    gt: Sequence[Sequence[EvalBox]],
    pred: Sequence[Sequence[EvalBox]],
    classes: Sequence[str],
    config: NuScenesConfig = DETECTION_CVPR_2019,
) -> FrameMatches:
    """The protocol's matching per class, threshold and sample, for :func:`paired_bootstrap`. AP of the
    concatenated samples is the devkit's (ranking as :func:`_matches` sorts: by score, equals the later
    one first), so on all samples it equals the class AP of :meth:`NuScenesEvaluator.summary`."""
    samples = len(gt)
    num_gt: dict[str, npt.NDArray[np.int64]] = {}
    scores: dict[str, list[F64]] = {}
    tps: dict[str, list[list[B]]] = {}
    for label in classes:
        num_gt[label] = np.array([sum(1 for b in s if b.name == label) for s in gt], dtype=np.int64)
        of_class = [[b for b in s if b.name == label] for s in pred]
        scores[label] = [np.array([b.score for b in s], dtype=np.float64) for s in of_class]
        position = {id(b): k for s in of_class for k, b in enumerate(s)}
        per_threshold = []
        for t in config.dist_ths:
            flags = [np.zeros(len(s), dtype=bool) for s in of_class]
            for p, j, _ in _matches(gt, pred, label, t):
                if j is not None:
                    flags[p.sample][position[id(p)]] = True
            per_threshold.append(flags)
        tps[label] = per_threshold

    def ap(score: F64, tp: B, npos: int) -> float:
        if npos == 0:
            return math.nan
        if not tp.any():
            return 0.0  # the devkit's no_predictions
        order = np.lexsort((-np.arange(len(score)), -score))  # by score, equals the later one first
        _, prec = _precision_curve(tp[order], npos)
        return _ap_of_precision(prec, config.min_recall, config.min_precision)

    return FrameMatches(samples, tuple(config.dist_ths), num_gt, scores, tps, ap)


# --------------------------------------------------------------------------------------------------
# over a drive
# --------------------------------------------------------------------------------------------------


def _label_of(category: str | None, label: str) -> str | None:
    """Our label of a ground-truth object for this protocol (``None``: the devkit does not evaluate it)."""
    if category is None:
        return label  # no category in the drive: its label is all we know
    detection = CATEGORY_TO_DETECTION.get(category)
    return None if detection is None else DETECTION_TO_LABEL[detection]


def _tuple3(v: F64) -> tuple[float, float, float]:
    return (float(v[0]), float(v[1]), float(v[2]))


def _level(rot: F64 | None, xyz: F64, yaw: F64, vel: F64) -> tuple[F64, F64, F64]:
    """Boxes in ``base_link`` -> the frame the devkit compares them in: the global frame's axes (``rot``,
    the ego's rotation ``map <- base_link``), origin at the ego; yaw is the heading's projection on the
    ground plane (the devkit's ``quaternion_yaw``), velocity the horizontal part of the rotated vector."""
    if rot is None:
        return xyz, yaw, vel
    zeros = np.zeros(len(yaw))
    heading = np.column_stack([np.cos(yaw), np.sin(yaw), zeros]) @ rot.T
    v3 = np.column_stack([vel, zeros]) @ rot.T
    out_yaw: F64 = np.arctan2(heading[:, 1], heading[:, 0])
    return xyz @ rot.T, out_yaw, v3[:, :2]


def _opt(x: float) -> float | None:
    return None if math.isnan(x) else x


@dataclass
class _Notes:
    no_category: int = 0
    no_points: int = 0
    no_attribute: int = 0
    over_limit: int = 0
    no_ego_pose: int = 0
    samples_without_frame: int = 0
    max_offset_ns: int = 0


class NuScenesEvaluator:
    """Accumulates samples and reports the nuScenes detection metrics (see the module docstring).

    >>> ev = NuScenesEvaluator()
    >>> ev.add(ground_truth, detections, frame_t_ns)   # once per ground-truth sample
    >>> ev.summary()["NDS"]
    """

    def __init__(
        self,
        config: NuScenesConfig = DETECTION_CVPR_2019,
        *,
        ego_at: Callable[[int], EgoPose | None] | None = None,
    ) -> None:
        self.config = config
        self.labels = tuple(LABELS)
        self.max_dist = {label: config.label_range(label) for label in self.labels}
        self._ego_at = ego_at
        self._gt: list[list[EvalBox]] = []
        self._pred: list[list[EvalBox]] = []
        self._gt_counts = FilterCounts()
        self._pred_counts = FilterCounts()
        self._notes = _Notes()

    def add(self, ground_truth: GroundTruth, detections: Sequence[Detection3D] | None, frame_t_ns: int | None) -> None:
        """One sample: its ground truth and the detections of the frame at ``frame_t_ns`` (``None``:
        no frame for this sample, so no predictions)."""
        sample = len(self._gt)
        notes = self._notes
        objs = [(o, lab) for o in ground_truth.objects if (lab := _label_of(o.category, o.label)) in self.max_dist]
        xyz = np.array([o.center for o, _ in objs], dtype=np.float64).reshape(-1, 3)
        vel = np.array([o.velocity for o, _ in objs], dtype=np.float64).reshape(-1, 2)
        yaw = np.array([o.yaw for o, _ in objs], dtype=np.float64)
        regions = ground_truth.regions
        r_xyz = np.array([r.center for r in regions], dtype=np.float64).reshape(-1, 3)
        r_yaw = np.array([r.yaw for r in regions], dtype=np.float64)
        t_eval = ground_truth.t_ns
        if frame_t_ns is not None and frame_t_ns != ground_truth.t_ns:
            notes.max_offset_ns = max(notes.max_offset_ns, abs(frame_t_ns - ground_truth.t_ns))
            t0, t1, ego, t_eval = ground_truth.t_ns, frame_t_ns, self._ego_at, frame_t_ns
            xyz, vel, dyaw = move_ground_truth(xyz, vel, t0, t1, ego)
            r_xyz, _, _ = move_ground_truth(r_xyz, np.zeros((len(regions), 2)), t0, t1, ego)
            yaw, r_yaw = yaw + dyaw, r_yaw + dyaw
        pose = self._ego_at(t_eval) if self._ego_at is not None else None
        rot = None if pose is None else pose.pose.rotation_matrix()
        if rot is None:
            notes.no_ego_pose += 1
        xyz, yaw, vel = _level(rot, xyz, yaw, vel)
        r_xyz, r_yaw, _ = _level(rot, r_xyz, r_yaw, np.zeros((len(regions), 2)))
        racks = [
            GroundTruthRegion(r.kind, _tuple3(c), r.size, float(y))
            for r, c, y in zip(regions, r_xyz, r_yaw, strict=True)
        ]
        gt_boxes = []
        for k, (o, label) in enumerate(objs):
            if o.category is None:
                notes.no_category += 1
            if o.num_lidar_pts is None or o.num_radar_pts is None:
                notes.no_points += 1
                num_pts = -1
            else:
                num_pts = o.num_lidar_pts + o.num_radar_pts
            if o.attribute is None:
                notes.no_attribute += 1
            v = (float(vel[k, 0]), float(vel[k, 1]))
            attribute = o.attribute or ""
            gt_boxes.append(EvalBox(sample, label, _tuple3(xyz[k]), o.size, float(yaw[k]), v, -1.0, attribute, num_pts))
        preds = []
        if detections is None:
            notes.samples_without_frame += 1
        else:
            dets = [d for d in detections if d.label in self.max_dist]
            if len(dets) > self.config.max_boxes_per_sample:
                notes.over_limit += len(dets) - self.config.max_boxes_per_sample
                dets = sorted(dets, key=lambda d: -d.score)[: self.config.max_boxes_per_sample]
            d_xyz, d_yaw, d_vel = _level(
                rot,
                np.array([d.center for d in dets], dtype=np.float64).reshape(-1, 3),
                np.array([d.yaw for d in dets], dtype=np.float64),
                np.array([d.velocity for d in dets], dtype=np.float64).reshape(-1, 2),
            )
            preds = [
                EvalBox(
                    sample,
                    d.label,
                    _tuple3(d_xyz[k]),
                    d.size,
                    float(d_yaw[k]),
                    (float(d_vel[k, 0]), float(d_vel[k, 1])),
                    float(d.score),
                    sources=tuple(d.sources),
                )
                for k, d in enumerate(dets)
            ]
        cycles = frozenset({"cyclist"})
        self._gt.append(filter_boxes(gt_boxes, self.max_dist, racks, self._gt_counts, cycles=cycles))
        self._pred.append(filter_boxes(preds, self.max_dist, racks, self._pred_counts, cycles=cycles))

    def summary(self) -> dict[str, Any]:
        """Metrics so far; undefined values are ``None``."""
        cfg = self.config
        per_class_ap: dict[str, float | None] = {}
        ap_by_threshold: dict[str, dict[str, float | None]] = {}
        per_class_tp: dict[str, dict[str, float | None]] = {}
        recall: dict[str, dict[str, list[dict[str, Any]]]] = {}
        by_range: dict[str, list[dict[str, Any]]] = {}
        num_gt = {label: sum(1 for s in self._gt for b in s if b.name == label) for label in self.labels}
        num_det = {label: sum(1 for s in self._pred for b in s if b.name == label) for label in self.labels}
        evaluated = [label for label in self.labels if num_gt[label] > 0]
        tp_by_class: dict[str, dict[str, float]] = {}
        for label in self.labels:
            if num_gt[label] == 0:
                per_class_ap[label] = None
                ap_by_threshold[label] = {f"{t:g}": None for t in cfg.dist_ths}
                per_class_tp[label] = {short: None for short in TP_METRICS.values()}
                continue
            mds = {t: accumulate(self._gt, self._pred, label, t) for t in cfg.dist_ths}
            aps = {t: calc_ap(md, cfg.min_recall, cfg.min_precision) for t, md in mds.items()}
            ap_by_threshold[label] = {f"{t:g}": a for t, a in aps.items()}
            per_class_ap[label] = float(np.mean(list(aps.values())))
            md = mds[cfg.dist_th_tp]
            tp_by_class[label] = {m: tp_error(md, label, m, cfg.min_recall) for m in TP_METRICS}
            per_class_tp[label] = {short: _opt(tp_by_class[label][m]) for m, short in TP_METRICS.items()}
            recall[label] = recall_breakdown(self._gt, self._pred, label, cfg.dist_th_tp)
            by_range[label] = ap_by_range(self._gt, self._pred, label, cfg)
        mean_ap = float(np.mean([ap for c in evaluated if (ap := per_class_ap[c]) is not None])) if evaluated else None
        tp_errors: dict[str, float | None] = {}
        tp_scores: dict[str, float] = {}
        for m, short in TP_METRICS.items():
            vals = [tp_by_class[c][m] for c in evaluated]
            err = float(np.nanmean(vals)) if vals and not all(math.isnan(v) for v in vals) else math.nan
            tp_errors[short] = _opt(err)
            tp_scores[short] = max(0.0, 1.0 - err)  # as the devkit: a NaN error scores 0 (max keeps 0.0)
        nds = None
        if mean_ap is not None:
            total = cfg.mean_ap_weight * mean_ap + sum(tp_scores.values())
            nds = total / float(cfg.mean_ap_weight + len(tp_scores))
        return {
            "protocol": "nuscenes",
            "protocol_detail": "nuScenes detection protocol (nuscenes-devkit eval/detection, detection_cvpr_2019)",
            "mAP": mean_ap,
            "NDS": nds,
            "ate": tp_errors["ATE"],
            "ave": tp_errors["AVE"],
            "tp_errors": tp_errors,
            "tp_scores": tp_scores,
            "per_class_ap": per_class_ap,
            "ap_by_threshold": ap_by_threshold,
            "per_class_tp": per_class_tp,
            "recall_breakdown": recall,
            "recall_breakdown_detail": f"diagnosis (not devkit): recall at {cfg.dist_th_tp:g} m at every score",
            "ap_by_range": by_range,
            "ap_by_range_detail": "diagnosis (not devkit): AP of ground truth and detections within each range bin",
            "precision_by_source": precision_by_source(self._gt, self._pred, evaluated, cfg.dist_th_tp),
            "precision_by_source_detail": (
                f"diagnosis (not devkit): share of each source's detections matched at {cfg.dist_th_tp:g} m, "
                "at every score, by the detection's range"
            ),
            "num_ground_truth": num_gt,
            "num_detections": num_det,
            "classes": evaluated,
            "class_mapping": {c: lab for c, lab in DETECTION_TO_LABEL.items()},
            "class_range_m": dict(self.max_dist),
            "attributes_predicted": False,
            "filtering": {"ground_truth": asdict(self._gt_counts), "detections": asdict(self._pred_counts)},
            "samples": len(self._gt),
            "samples_without_frame": self._notes.samples_without_frame,
            "max_frame_offset_ms": self._notes.max_offset_ns / 1e6,
            "detections_over_limit": self._notes.over_limit,
            "notes": self._summary_notes(),
            "config": cfg.serialize(),
        }

    def frame_matches(self) -> FrameMatches:
        """The matching of every class with ground truth, per sample (:func:`frame_matches`), for
        :func:`perception.evaluation.paired_bootstrap`."""
        classes = [label for label in self.labels if any(b.name == label for s in self._gt for b in s)]
        return frame_matches(self._gt, self._pred, classes, self.config)

    def _summary_notes(self) -> list[str]:
        n = self._notes
        out = []
        if n.no_category:
            out.append(
                f"{n.no_category} ground-truth objects have no nuScenes category (drive imported before the "
                "protocol existed, or not from nuScenes): their label stands for the devkit class; re-import it"
            )
        if n.no_points:
            out.append(f"{n.no_points} ground-truth objects have no lidar/radar point counts: none of them removed")
        if n.no_attribute:
            out.append(f"{n.no_attribute} ground-truth objects have an unknown attribute: left out of AAE")
        if n.over_limit:
            out.append(f"{n.over_limit} detections beyond {self.config.max_boxes_per_sample} per sample dropped")
        if n.no_ego_pose:
            out.append(
                f"{n.no_ego_pose} samples have no ego pose: their boxes are compared in base_link, not on the "
                "global frame's axes (BEV distances then differ by the ego's roll and pitch)"
            )
        if n.samples_without_frame:
            out.append(f"{n.samples_without_frame} samples had no replayed frame: scored with no detections")
        return out
