"""Per-model quality: each reference model's raw outputs scored against exact ground truth.

Unlike :class:`~perception.evaluation.DetectionEvaluator` (fused 3D detections), this scores every
sensor's model on its own, on every sample, with the ground truth *at the sample's capture time*
(``ground_truth(t_ns)``; the simulator gives it exactly, so no interpolation error enters the scores).

Protocol (also in :data:`DEFINITIONS`, which reports carry):

* **camera** -- per class, 2D AP at IoU >= 0.5 (:class:`perception.modelkit.APAccumulator`: greedy by
  score, all-points precision envelope). Ground truth: the 3D boxes projected into the image
  (:func:`perception.sim.project_ground_truth`); an object less than 50 % visible or under 10 px tall is
  "don't care" (:func:`perception.modelkit.camera_ground_truth`, the rule the model is trained and
  evaluated with). ``null`` for a class without a counted object.
* **lidar** -- car BEV AP (:func:`perception.modelkit.average_precision`): boxes moved to ``base_link``
  by the lidar extrinsic; car detections by descending score, each matched to the nearest unmatched
  ground-truth car within 2 m (BEV centre distance); only ground-truth cars within 50 m of
  ``base_link`` count; an unmatched car detection is a false positive when it is within 50 m and
  ignored beyond.
* **radar** -- per scan, in ``base_link`` (detections and returns moved by the radar's extrinsic).
  *Moving objects*: ground-truth objects (any class) with over-ground speed > 1 m/s whose centre is
  inside the radar's horizontal field of view and range. *Association* accounts for what a radar
  measures well (range, Doppler) and badly (azimuth): the offset from a detection to the nearest point
  of an object's BEV box (radar returns come from the surface, not the centre) is split along and
  across the detection's line of sight, ``d2 = (along / 0.6 m)^2 + (across / hypot(0.5 m, range *
  2 deg))^2`` (the fusion stage's radar model), and the Doppler residual is ``dvr = RADIAL_VELOCITY -
  v_gt . u`` (``u`` the detection's horizontal line of sight). A pair is allowed when ``d2 <= 9.21``
  (chi-square 2 dof, 99 %) and ``|dvr| <= 3 m/s`` (a detection reading a Doppler more than 3 m/s off
  an object is not a detection of it: at long range a static post's return lands inside a passing
  car's gate); allowed pairs are assigned one-to-one minimising ``d2 + (dvr / 1 m/s)^2`` (Hungarian).
  Moving objects that had a detection inside the position gate but none within the Doppler gate are
  counted (``radar_doppler_rejected``) so the Doppler gate hides nothing.
  *Observed*: a moving object with at least one return of the scan inside its position gate whose
  Doppler agrees with the object's (``|vr_i - v_gt . u_i| <= 1 m/s``): the radar saw it (occluded,
  too small or too far objects give no return).
  *Detection rate*: matched observed moving objects / observed moving objects; ``_fov``: matched / all
  moving objects (sensor visibility included).
  *Precision (moving)*: of the detections whose ``|RADIAL_VELOCITY|`` > 1 m/s (the model says
  "something moves here"), the share matched to a moving object.
  *Radial velocity RMSE* (the target): over matched moving objects, ``RADIAL_VELOCITY`` against the
  true over-ground velocity projected on the detection's line of sight, ``v_gt . u``. A radar measures
  exactly this for every object (the Doppler of its returns, ego-motion compensated).
  *Over-ground velocity RMSE*: ``|VELOCITY - v_gt|`` (2D) over the matched moving objects whose
  ``VELOCITY`` is finite (the model reports it only when the returns' azimuth spread determines it);
  its *coverage* is that count over all matched moving objects.

Samples may be added from several threads and in any order: :meth:`ModelQualityEvaluator.summary`
combines them in ``(t_ns, sensor)`` order, so the result does not depend on completion order.
:func:`evaluate_models` runs a drive's samples through a Triton server and fills an evaluator.
"""

from __future__ import annotations

import logging
import math
import operator
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import anyio
import numpy as np
import numpy.typing as npt
from scipy.optimize import linear_sum_assignment

from perception.config import CAMERA_MODEL_SIMULATED, SensorDefaults
from perception.errors import ConfigError, ModelContractError, PerceptionError
from perception.evaluation._detection import _greedy_match
from perception.kinds import FusionRole, kind_def
from perception.modelkit import APAccumulator, CameraDetections, average_precision, camera_ground_truth
from perception.types import LABELS, GroundTruth, PointCloudSample, Sample, SensorKind, SensorSpec, label_id

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream

    from perception.triton import TritonClient

__all__ = [
    "DEFAULT_MODELS",
    "DEFINITIONS",
    "TARGETS",
    "ModelQualityEvaluator",
    "QualitySettings",
    "RadarCoverage",
    "Target",
    "check_targets",
    "evaluate_models",
    "scored_model",
]

log = logging.getLogger(__name__)

F64 = npt.NDArray[np.float64]
Array = npt.NDArray[Any]


#: The model serving each sensor kind by default (``models/``; the profile's ``sensor_defaults``).
#: These scores are taken on simulated drives: the camera model is the simulator's.
def scored_model(kind: str) -> str:
    """The model scored for ``kind`` unless the caller names one: the simulator's camera model for
    cameras, else the kind's default (the profile's ``sensor_defaults``, or the registered kind's)."""
    if kind == SensorKind.CAMERA:
        return CAMERA_MODEL_SIMULATED
    try:
        return SensorDefaults().of(kind).model
    except KeyError:
        raise ConfigError(f"sensor kind {kind!r} has no default model: name one in models", key="models") from None


DEFAULT_MODELS: Mapping[str, str] = {kind.value: scored_model(kind.value) for kind in SensorKind}

_CAR = label_id("car")


@dataclass(frozen=True, slots=True)
class QualitySettings:
    """The protocol's parameters (defaults: the documented protocol)."""

    camera_iou: float = 0.5
    camera_min_visible: float = 0.5
    camera_min_height_px: float = 10.0
    lidar_max_range_m: float = 50.0
    lidar_match_m: float = 2.0
    radar_min_speed_mps: float = 1.0
    radar_range_sigma_m: float = 0.6  # along the line of sight (includes the spread over the surface)
    radar_azimuth_sigma_deg: float = 2.0  # across it, times the range...
    radar_lateral_floor_m: float = 0.5  # ...and this in quadrature
    radar_gate_chi2: float = 9.21  # 2 dof, 99 %
    radar_doppler_sigma_mps: float = 1.0  # scale of the Doppler residual in the assignment cost
    radar_doppler_gate_mps: float = 3.0  # larger Doppler residual: not a detection of that object
    radar_return_doppler_mps: float = 1.0  # a return agrees with an object (observed) within this


@dataclass(frozen=True, slots=True)
class RadarCoverage:
    """Where a radar can see: horizontal field of view about its x axis and range, in its own frame."""

    fov_deg: float
    max_range_m: float
    min_range_m: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 < self.fov_deg <= 360.0:
            raise ConfigError(f"radar fov must be in (0, 360] deg, got {self.fov_deg}", key="fov_deg")
        if not 0.0 <= self.min_range_m < self.max_range_m:
            raise ConfigError(
                f"radar range must satisfy 0 <= min < max, got [{self.min_range_m}, {self.max_range_m}] m",
                key="max_range_m",
            )

    def contains(self, xy_sensor: F64) -> npt.NDArray[np.bool_]:
        """Which points ``[N,2]`` (sensor frame) lie inside the field of view and range."""
        rng = np.hypot(xy_sensor[:, 0], xy_sensor[:, 1])
        bearing = np.abs(np.arctan2(xy_sensor[:, 1], xy_sensor[:, 0]))
        out: npt.NDArray[np.bool_] = (
            (rng >= self.min_range_m) & (rng <= self.max_range_m) & (bearing <= math.radians(self.fov_deg) / 2)
        )
        return out


@dataclass(frozen=True, slots=True)
class Target:
    """A pass/fail bar on one metric (``None``/NaN never passes). ``count`` names the entry of a
    summary's ``counts`` that says how many samples the metric rests on (reported as ``n``)."""

    metric: str
    op: Literal[">=", "<="]
    threshold: float
    count: str | None = None

    def passes(self, value: float | None) -> bool:
        if value is None or math.isnan(value):
            return False
        return bool((operator.ge if self.op == ">=" else operator.le)(value, self.threshold))

    def report(self, value: float | None, n: int | None = None) -> dict[str, Any]:
        out = {"value": value, "op": self.op, "threshold": self.threshold, "pass": self.passes(value)}
        return out if n is None else {**out, "n": n}


#: The quality bars of the reference models.
TARGETS: tuple[Target, ...] = (
    Target("camera_ap50_car", ">=", 0.7, count="camera_gt_car"),
    Target("lidar_bev_ap_car", ">=", 0.7, count="lidar_gt_car"),
    Target("radar_velocity_rmse", "<=", 0.5, count="radar_matched_moving"),
)

_CAMERA_KEYS = tuple(f"camera_ap50_{name}" for name in LABELS)
_COMMON = "ground truth is exact at each sample's capture time"

#: What every metric of a report means (copied into reports as ``definitions``).
DEFINITIONS: Mapping[str, str] = {
    **{
        key: f"camera 2D AP (all-points, precision envelope) at IoU >= 0.5 for {name}s over every image of "
        "every camera; ground truth = 3D boxes projected into the image; objects < 50% visible or < 10 px "
        "tall are don't-care (a detection on them counts neither way); null if no counted object; " + _COMMON
        for key, name in zip(_CAMERA_KEYS, LABELS, strict=True)
    },
    "lidar_bev_ap_car": "lidar BEV AP (all-points) for cars: boxes moved to base_link by the lidar extrinsic; "
    "car detections by descending score each take the nearest unmatched ground-truth car within 2 m BEV "
    "centre distance; only ground-truth cars within 50 m of base_link count; unmatched car detections "
    "within 50 m are false positives, farther ones are ignored; " + _COMMON,
    "radar_detection_rate": "over all radar scans: matched / observed moving objects. Moving: ground-truth "
    "objects (any class) with over-ground speed > 1 m/s whose centre is inside the radar's horizontal field of "
    "view and range. Observed: at least one return of the scan inside the object's position gate with a "
    "Doppler within 1 m/s of the object's radial velocity. Position gate: the offset from a detection (or "
    "return) to the nearest point of the object's BEV box, split along/across the line of sight, "
    "(along/0.6 m)^2 + (across/hypot(0.5 m, range*2 deg))^2 <= 9.21. Matched: one-to-one assignment "
    "(Hungarian, cost = that distance + (Doppler residual / 1 m/s)^2) among pairs inside the position gate "
    "whose detection's RADIAL_VELOCITY is within 3 m/s of v_gt . u (u: the detection's line of sight); " + _COMMON,
    "radar_detection_rate_fov": "as radar_detection_rate but over all moving objects in the field of view and "
    "range, observed or not (occluded, too small or too far objects count as missed): the sensor's "
    "visibility times the model's recall",
    "radar_precision_moving": "of the detections whose |RADIAL_VELOCITY| > 1 m/s (the model reports something "
    "moving), the share matched to a moving ground-truth object (in view or not); the rest are clutter, "
    "multipath ghosts, a moving object's extra fragment, or a wrong Doppler on a static object",
    "radar_velocity_rmse": "sqrt(mean (RADIAL_VELOCITY - v_gt . u)^2), m/s, over every matched moving object "
    "(see radar_detection_rate): the model's ego-motion-compensated radial velocity against the true "
    "over-ground velocity projected on the detection's horizontal line of sight u (in base_link). This is "
    "what a radar measures for every object; null if none",
    "radar_velocity_rmse_over_ground": "sqrt(mean |VELOCITY - v_gt|^2), m/s, of 2D over-ground velocity "
    "vectors in base_link, over the matched moving objects whose detection reports a finite VELOCITY (the "
    "model reports it only where the returns' azimuth spread determines it, else NaN); null if none",
    "radar_velocity_coverage_over_ground": "fraction of the matched moving objects (see radar_detection_rate) "
    "whose detection reports a finite VELOCITY",
}


# -- per-sample records ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _CameraRecord:
    det: CameraDetections
    gt_boxes: npt.NDArray[np.float32]
    gt_labels: npt.NDArray[np.int32]
    gt_ignore: npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class _LidarRecord:
    scores: F64
    is_tp: npt.NDArray[np.bool_]
    num_gt: int


@dataclass(frozen=True, slots=True)
class _RadarRecord:
    moving: int  # moving objects in the field of view and range
    matched: int  # of those, matched
    observed: int  # of those, with an agreeing return (0 when the points were not given)
    matched_observed: int
    radial_sq_errors: F64  # one per matched moving object
    over_ground_sq_errors: F64  # one per matched moving object with a finite VELOCITY
    doppler_rejected: int  # moving, matched by a position-only assignment but not by the full one
    moving_claims: int  # detections with |RADIAL_VELOCITY| > min speed...
    moving_claims_matched: int  # ...matched to a moving object
    has_points: bool


_Record = _CameraRecord | _LidarRecord | _RadarRecord


def _nan_to_none(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def _output(outputs: Mapping[str, Array], name: str, spec: SensorSpec, model: str) -> Array:
    if name not in outputs:
        raise ModelContractError(f"output {name} missing from the response", sensor=spec.name, model=model)
    return np.asarray(outputs[name])


def _rows(outputs: Mapping[str, Array], name: str, cols: int, spec: SensorSpec, model: str) -> F64:
    arr = _output(outputs, name, spec, model)
    if arr.size % cols:
        raise ModelContractError(
            f"output {name} of shape {list(arr.shape)} is not rows of {cols}", sensor=spec.name, model=model
        )
    out: F64 = arr.astype(np.float64).reshape(-1, cols)
    return out


@dataclass(frozen=True, slots=True)
class _BevBoxes:
    """Ground-truth objects as arrays (base_link): centres, BEV length/width, yaw, velocity."""

    center3: F64  # [G,3]
    lw: F64  # [G,2]
    yaw: F64  # [G]
    velocity: F64  # [G,2]

    @staticmethod
    def of(gt: GroundTruth) -> _BevBoxes:
        n = len(gt.objects)
        return _BevBoxes(
            np.array([o.center for o in gt.objects], dtype=np.float64).reshape(n, 3),
            np.array([o.size[:2] for o in gt.objects], dtype=np.float64).reshape(n, 2),
            np.array([o.yaw for o in gt.objects], dtype=np.float64).reshape(n),
            np.array([o.velocity for o in gt.objects], dtype=np.float64).reshape(n, 2),
        )

    def __len__(self) -> int:
        return int(self.yaw.shape[0])

    def offsets(self, xy: F64) -> F64:
        """``[G, K, 2]``: each point ``xy [K,2]`` minus its nearest point on each box (0 inside)."""
        c: F64 = np.cos(self.yaw)[:, None]
        s: F64 = np.sin(self.yaw)[:, None]
        dx: F64 = xy[None, :, 0] - self.center3[:, None, 0]
        dy: F64 = xy[None, :, 1] - self.center3[:, None, 1]
        lx: F64 = c * dx + s * dy  # box frame
        ly: F64 = c * dy - s * dx
        hl, hw = self.lw[:, 0:1] / 2, self.lw[:, 1:2] / 2
        ex: F64 = lx - np.clip(lx, -hl, hl)
        ey: F64 = ly - np.clip(ly, -hw, hw)
        out: F64 = np.stack([c * ex - s * ey, s * ex + c * ey], axis=-1)
        return out


def _assign(cost: F64, allowed: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Minimum-cost one-to-one assignment among ``allowed`` pairs: ``(rows, cols)``."""
    rows = np.flatnonzero(allowed.any(axis=1))
    cols = np.flatnonzero(allowed.any(axis=0))
    if rows.size == 0:
        return np.zeros(0, np.intp), np.zeros(0, np.intp)
    sub_allowed = allowed[np.ix_(rows, cols)]
    big = 1.0 + float(cost[allowed].max()) * (min(rows.size, cols.size) + 1)
    r, c = linear_sum_assignment(np.where(sub_allowed, cost[np.ix_(rows, cols)], big))
    ok = sub_allowed[r, c]
    return rows[r[ok]].astype(np.intp), cols[c[ok]].astype(np.intp)


def _role(name: str, spec: SensorSpec) -> FusionRole:
    role = kind_def(spec.kind).fusion  # an unknown kind: ConfigError naming the known ones
    if role is None:
        raise ConfigError(
            f"sensor {name!r}: kind {spec.kind!r} has no fusion role, so its model's outputs have no quality protocol",
            key="sensor",
        )
    return role


class ModelQualityEvaluator:
    """Scores each sensor model's raw outputs (see the module docstring for the protocol).

    >>> ev = ModelQualityEvaluator(rig, radar_coverage={"radar_front": RadarCoverage(120, 90)})
    >>> ev.add("lidar_top", sample.t_ns, outputs, ground_truth)   # once per sample, any thread
    >>> ev.summary()["lidar_bev_ap_car"]

    ``rig`` gives each sensor's kind and extrinsic (and a camera's calibration); ``radar_coverage``
    each radar's field of view (a radar without one raises on its first sample); ``models`` the model
    name per sensor kind (:data:`DEFAULT_MODELS`, else the kind's default model). A sensor is scored by
    its kind's fusion role (:class:`~perception.kinds.FusionRole`: 3D boxes as the lidar's, Doppler
    points as the radar's, image boxes as the camera's); a kind without one is a :class:`ConfigError`
    naming the sensor, here rather than on its first sample.
    """

    def __init__(
        self,
        rig: Mapping[str, SensorSpec],
        *,
        radar_coverage: Mapping[str, RadarCoverage] | None = None,
        models: Mapping[str, str] = DEFAULT_MODELS,
        settings: QualitySettings = QualitySettings(),
    ) -> None:
        self.rig = dict(rig)
        self.radar_coverage = dict(radar_coverage or {})
        self._roles = {name: _role(name, spec) for name, spec in self.rig.items()}
        self.models = {**{spec.kind: scored_model(spec.kind) for spec in self.rig.values()}, **models}
        self.settings = settings
        self._records: dict[tuple[int, str], _Record] = {}
        self._lock = threading.Lock()

    def add(
        self,
        sensor: str,
        t_ns: int,
        outputs: Mapping[str, Array],
        ground_truth: GroundTruth,
        *,
        points: npt.ArrayLike | None = None,
    ) -> None:
        """Score one sample's model ``outputs`` against ``ground_truth`` at the sample's capture time
        (objects in ``base_link``). ``points`` (a radar scan's rows, sensor frame) enable the observed
        detection rate. Thread-safe; a second sample of a sensor at the same time replaces the first."""
        spec = self.rig.get(sensor)
        if spec is None:
            raise ConfigError(f"sensor {sensor!r} is not in the rig ({', '.join(self.rig)})", key="sensor")
        model = self.models[spec.kind]
        record: _Record
        role = self._roles[sensor]
        if role is FusionRole.IMAGE_BOXES:
            record = self._camera(spec, model, outputs, ground_truth)
        elif role is FusionRole.BOXES_3D:
            record = self._lidar(spec, model, outputs, ground_truth)
        else:
            record = self._radar(spec, model, outputs, ground_truth, points)
        with self._lock:
            self._records[(t_ns, sensor)] = record

    def role(self, sensor: str) -> FusionRole:
        """How ``sensor``'s model outputs are scored (its kind's fusion role)."""
        return self._roles[sensor]

    # -- per kind ----------------------------------------------------------------------------------

    def _camera(self, spec: SensorSpec, model: str, outputs: Mapping[str, Array], gt: GroundTruth) -> _CameraRecord:
        from perception.sim import project_ground_truth  # the simulator is heavy; only cameras need it

        if spec.calibration is None:
            raise ConfigError(f"camera {spec.name!r} has no calibration", key="sensor")
        names = ("BOXES", "SCORES", "LABELS", "COUNT")
        boxes, scores, labels, count = (_output(outputs, n, spec, model) for n in names)
        det = CameraDetections.from_padded(boxes, scores, labels, count)
        if not (det.boxes.shape[0] == det.scores.shape[0] == det.labels.shape[0]):
            raise ModelContractError(
                f"COUNT {int(np.asarray(count).reshape(-1)[0])} exceeds the rows of BOXES/SCORES/LABELS",
                sensor=spec.name,
                model=model,
            )
        if det.labels.size and (int(det.labels.min()) < 0 or int(det.labels.max()) >= len(LABELS)):
            raise ModelContractError(
                f"LABELS outside [0, {len(LABELS)}): {sorted(set(det.labels.tolist()))}", sensor=spec.name, model=model
            )
        s = self.settings
        projected = project_ground_truth(gt, spec)
        gt_boxes, gt_labels, gt_ignore = camera_ground_truth(
            [(b.label, b.x1, b.y1, b.x2, b.y2, b.visible_fraction) for b in projected],
            min_visible=s.camera_min_visible,
            min_height=s.camera_min_height_px,
        )
        return _CameraRecord(det, gt_boxes, gt_labels, gt_ignore)

    def _lidar(self, spec: SensorSpec, model: str, outputs: Mapping[str, Array], gt: GroundTruth) -> _LidarRecord:
        s = self.settings
        boxes = _rows(outputs, "BOXES", 7, spec, model)
        labels = _output(outputs, "LABELS", spec, model).reshape(-1)
        scores = _output(outputs, "SCORES", spec, model).astype(np.float64).reshape(-1)
        if not (boxes.shape[0] == labels.shape[0] == scores.shape[0]):
            raise ModelContractError(
                f"BOXES/LABELS/SCORES disagree in length ({boxes.shape[0]}/{labels.shape[0]}/{scores.shape[0]})",
                sensor=spec.name,
                model=model,
            )
        cars = labels == _CAR
        xy = spec.extrinsic.apply(boxes[cars, :3])[:, :2]
        car_scores = scores[cars]
        order = np.argsort(-car_scores, kind="stable")
        xy, car_scores = xy[order], car_scores[order]
        gt_xy = np.array([o.center[:2] for o in gt.objects if o.label == "car"], dtype=np.float64).reshape(-1, 2)
        gt_xy = gt_xy[np.hypot(gt_xy[:, 0], gt_xy[:, 1]) <= s.lidar_max_range_m]
        dist = np.hypot(xy[:, None, 0] - gt_xy[None, :, 0], xy[:, None, 1] - gt_xy[None, :, 1])
        tp = _greedy_match(dist, s.lidar_match_m) >= 0
        keep = tp | (np.hypot(xy[:, 0], xy[:, 1]) <= s.lidar_max_range_m)
        return _LidarRecord(car_scores[keep], tp[keep], int(gt_xy.shape[0]))

    def _radar(
        self,
        spec: SensorSpec,
        model: str,
        outputs: Mapping[str, Array],
        gt: GroundTruth,
        points: npt.ArrayLike | None,
    ) -> _RadarRecord:
        coverage = self.radar_coverage.get(spec.name)
        if coverage is None:
            raise ConfigError(f"no field of view given for radar {spec.name!r}", key="radar_coverage")
        s = self.settings
        positions = _rows(outputs, "POSITIONS", 3, spec, model)
        radial = _output(outputs, "RADIAL_VELOCITY", spec, model).astype(np.float64).reshape(-1)
        velocity = _rows(outputs, "VELOCITY", 2, spec, model)
        scores = _output(outputs, "SCORES", spec, model).reshape(-1)
        if not (positions.shape[0] == radial.shape[0] == velocity.shape[0] == scores.shape[0]):
            raise ModelContractError(
                f"POSITIONS/RADIAL_VELOCITY/VELOCITY/SCORES disagree in length ({positions.shape[0]}/"
                f"{radial.shape[0]}/{velocity.shape[0]}/{scores.shape[0]})",
                sensor=spec.name,
                model=model,
            )
        rot = spec.extrinsic.rotation_matrix()
        origin = np.asarray(spec.extrinsic.translation, dtype=np.float64)[:2]
        det_xy = spec.extrinsic.apply(positions)[:, :2]
        det_v = (np.column_stack([velocity, np.zeros(len(velocity))]) @ rot.T)[:, :2]
        boxes = _BevBoxes.of(gt)
        in_sensor = (boxes.center3 - np.asarray(spec.extrinsic.translation)) @ rot  # base_link -> sensor frame
        speed = np.hypot(boxes.velocity[:, 0], boxes.velocity[:, 1])
        moving = speed > s.radar_min_speed_mps
        counted = moving & coverage.contains(in_sensor[:, :2])

        d2, u = self._gate(det_xy, origin, boxes)  # [G, D], [D, 2]
        dvr = radial[None, :] - boxes.velocity @ u.T  # Doppler residual, [G, D]
        in_gate = d2 <= s.radar_gate_chi2
        allowed = in_gate & (np.abs(dvr) <= s.radar_doppler_gate_mps)
        gt_idx, det_idx = _assign(d2 + (dvr / s.radar_doppler_sigma_mps) ** 2, allowed)
        matched = np.zeros(len(boxes), dtype=bool)
        matched[gt_idx] = True
        det_match = np.full(det_xy.shape[0], -1, np.intp)
        det_match[det_idx] = gt_idx

        hit = counted[gt_idx]
        g, d = gt_idx[hit], det_idx[hit]
        radial_err = dvr[g, d]
        finite = np.isfinite(det_v[d]).all(axis=1)
        og_err = det_v[d[finite]] - boxes.velocity[g[finite]]
        claims = np.abs(radial) > s.radar_min_speed_mps
        claims_matched = np.zeros(det_xy.shape[0], dtype=bool)  # claims matched to a moving object
        claims_matched[det_idx] = claims[det_idx] & moving[gt_idx]
        # what the Doppler gate changed: moving objects a position-only assignment would have matched
        by_position = np.zeros(len(boxes), dtype=bool)
        by_position[_assign(d2, in_gate)[0]] = True
        rejected = counted & by_position & ~matched
        observed = matched_observed = 0
        if points is not None:
            seen = self._observed(spec, points, boxes, origin) & counted
            observed = int(seen.sum())
            matched_observed = int((seen & matched).sum())
        return _RadarRecord(
            moving=int(counted.sum()),
            matched=int(g.size),
            observed=observed,
            matched_observed=matched_observed,
            radial_sq_errors=radial_err**2,
            over_ground_sq_errors=np.einsum("ij,ij->i", og_err, og_err),
            doppler_rejected=int(rejected.sum()),
            moving_claims=int(claims.sum()),
            moving_claims_matched=int(claims_matched.sum()),
            has_points=points is not None,
        )

    def _gate(self, xy: F64, origin: F64, boxes: _BevBoxes) -> tuple[F64, F64]:
        """Squared normalised distance ``[G, K]`` of points ``xy [K,2]`` (base_link) to each box's nearest
        point, split along/across each point's line of sight from ``origin``; and those lines ``[K,2]``."""
        s = self.settings
        rel = xy - origin
        rng = np.maximum(np.hypot(rel[:, 0], rel[:, 1]), 1e-9)
        u = rel / rng[:, None]
        off = boxes.offsets(xy)  # [G, K, 2], from the nearest box point to the point
        along = off[..., 0] * u[None, :, 0] + off[..., 1] * u[None, :, 1]
        across = off[..., 1] * u[None, :, 0] - off[..., 0] * u[None, :, 1]
        sigma_across = np.hypot(s.radar_lateral_floor_m, rng * math.radians(s.radar_azimuth_sigma_deg))
        d2: F64 = (along / s.radar_range_sigma_m) ** 2 + (across / sigma_across[None, :]) ** 2
        return d2, u

    def _observed(
        self, spec: SensorSpec, points: npt.ArrayLike, boxes: _BevBoxes, origin: F64
    ) -> npt.NDArray[np.bool_]:
        """Which objects have a return of the scan inside their position gate with an agreeing Doppler."""
        pts = np.asarray(points, dtype=np.float64)
        if pts.ndim != 2 or pts.shape[1] < 4:
            raise ConfigError(
                f"radar points must be [N, >=4] (x, y, z, vr, ...), got shape {list(pts.shape)}", key="points"
            )
        pts = pts[np.isfinite(pts[:, :4]).all(axis=1)]
        if len(boxes) == 0 or pts.shape[0] == 0:
            return np.zeros(len(boxes), dtype=bool)
        xy = spec.extrinsic.apply(pts[:, :3])[:, :2]
        d2, u = self._gate(xy, origin, boxes)
        agree = np.abs(pts[None, :, 3] - boxes.velocity @ u.T) <= self.settings.radar_return_doppler_mps
        seen: npt.NDArray[np.bool_] = ((d2 <= self.settings.radar_gate_chi2) & agree).any(axis=1)
        return seen

    # -- report ------------------------------------------------------------------------------------

    def _ordered(self) -> Iterator[tuple[str, _Record]]:
        with self._lock:
            items = sorted(self._records.items())
        for (_, sensor), record in items:
            yield sensor, record

    def frames(self) -> dict[str, int]:
        """Samples scored per model."""
        counts = dict.fromkeys(sorted({self.models[s.kind] for s in self.rig.values()}), 0)
        for sensor, _ in self._ordered():
            counts[self.models[self.rig[sensor].kind]] += 1
        return counts

    def summary(self) -> dict[str, Any]:
        """The metrics (``null`` where undefined), ``frames`` per model, ``counts`` behind each metric
        and ``definitions``. Keys: ``camera_ap50_<class>``, ``lidar_bev_ap_car`` and the ``radar_*``
        keys of :data:`DEFINITIONS`. ``radar_detection_rate`` needs the scans' points (``add(points=)``)."""
        camera = APAccumulator(num_classes=len(LABELS), iou_threshold=self.settings.camera_iou)
        lidar_scores: list[F64] = []
        lidar_tp: list[npt.NDArray[np.bool_]] = []
        lidar_gt = 0
        radar: list[_RadarRecord] = []
        for _, rec in self._ordered():
            if isinstance(rec, _CameraRecord):
                d = rec.det
                camera.add(d.boxes, d.scores, d.labels, rec.gt_boxes, rec.gt_labels, rec.gt_ignore)
            elif isinstance(rec, _LidarRecord):
                lidar_scores.append(rec.scores)
                lidar_tp.append(rec.is_tp)
                lidar_gt += rec.num_gt
            else:
                radar.append(rec)
        cam = camera.results()
        scores = np.concatenate(lidar_scores) if lidar_scores else np.zeros(0)
        tp = np.concatenate(lidar_tp) if lidar_tp else np.zeros(0, dtype=bool)

        def total(name: str) -> int:
            return sum(int(getattr(r, name)) for r in radar)

        def rms(name: str) -> tuple[float | None, int]:
            sq = np.concatenate([getattr(r, name) for r in radar]) if radar else np.zeros(0)
            return (math.sqrt(float(sq.mean())) if sq.size else None), int(sq.size)

        moving, matched, observed = total("moving"), total("matched"), total("observed")
        claims = total("moving_claims")
        radial_rmse, n_radial = rms("radial_sq_errors")
        og_rmse, n_og = rms("over_ground_sq_errors")
        metrics: dict[str, Any] = {key: _nan_to_none(r.ap) for key, r in zip(_CAMERA_KEYS, cam, strict=True)}
        metrics["lidar_bev_ap_car"] = _nan_to_none(average_precision(scores, tp, lidar_gt))
        metrics["radar_detection_rate"] = total("matched_observed") / observed if observed else None
        metrics["radar_detection_rate_fov"] = matched / moving if moving else None
        metrics["radar_precision_moving"] = total("moving_claims_matched") / claims if claims else None
        metrics["radar_velocity_rmse"] = radial_rmse
        metrics["radar_velocity_rmse_over_ground"] = og_rmse
        metrics["radar_velocity_coverage_over_ground"] = n_og / matched if matched else None
        counts: dict[str, int] = {}
        for name, r in zip(LABELS, cam, strict=True):
            counts[f"camera_gt_{name}"] = r.num_gt
            counts[f"camera_tp_{name}"] = r.true_positives
            counts[f"camera_fp_{name}"] = r.false_positives
        counts.update(
            lidar_gt_car=lidar_gt,
            lidar_tp_car=int(tp.sum()),
            lidar_fp_car=int((~tp).sum()),
            radar_scans=len(radar),
            radar_scans_with_points=sum(r.has_points for r in radar),
            radar_moving_objects=moving,
            radar_observed_moving=observed,
            radar_matched_observed=total("matched_observed"),
            radar_matched_moving=matched,
            radar_doppler_rejected=total("doppler_rejected"),
            radar_moving_claims=claims,
            radar_moving_claims_matched=total("moving_claims_matched"),
            radar_velocity_radial=n_radial,
            radar_velocity_over_ground=n_og,
        )
        return {**metrics, "frames": self.frames(), "counts": counts, "definitions": dict(DEFINITIONS)}


def check_targets(summary: Mapping[str, Any], targets: Iterable[Target] = TARGETS) -> dict[str, dict[str, Any]]:
    """``{metric: {value, op, threshold, pass, n}}`` of each target against a :meth:`summary`
    (``n``: the samples behind the value, when the summary's ``counts`` has them)."""
    counts = summary.get("counts", {})
    return {t.metric: t.report(summary.get(t.metric), counts.get(t.count) if t.count else None) for t in targets}


# -- running the models ----------------------------------------------------------------------------


@dataclass
class _Failure:
    error: PerceptionError | None = None


@dataclass(frozen=True, slots=True)
class _Job:
    sample: Sample
    kind: str
    inputs: dict[str, Array] = field(repr=False)


async def evaluate_models(
    client: TritonClient,
    samples: Iterable[Sample],
    evaluator: ModelQualityEvaluator,
    ground_truth: Callable[[int], GroundTruth | None],
    *,
    concurrency: int = 4,
    timeout_s: float = 60.0,
    ready_timeout_s: float = 30.0,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Send every sample once to its kind's model and score the outputs; returns the samples sent.

    Waits until the evaluator's models are ready and checks their contracts first. ``samples`` is
    iterated in a worker thread (it may read a file); ``concurrency`` requests are in flight at a time,
    each with ``timeout_s``. ``ground_truth(t_ns)`` gives the ground truth at a capture time (``None``:
    the sample is not scored). A failed request raises its :class:`PerceptionError` (a quality score
    with holes in it would be misleading). ``progress(n)`` is called with the samples done so far.
    """
    from perception.scheduler import output_names, prepare_inputs
    from perception.triton import check_contract

    if concurrency < 1:
        raise ConfigError(f"concurrency must be >= 1, got {concurrency}", key="concurrency")
    kinds = sorted({spec.kind for spec in evaluator.rig.values()})
    models = {kind: evaluator.models[kind] for kind in kinds}
    await client.wait_ready(sorted(set(models.values())), timeout_s=ready_timeout_s)
    for kind, model in models.items():
        check_contract(kind, await client.model_contract(model))

    it = iter(samples)

    def next_job() -> _Job | None:
        for sample in it:
            spec = evaluator.rig.get(sample.sensor)
            if spec is None:
                continue  # not a sensor of the rig given to the evaluator
            return _Job(sample, spec.kind, prepare_inputs(spec.kind, sample))
        return None

    failure = _Failure()
    done = 0
    send, receive = anyio.create_memory_object_stream[_Job](max_buffer_size=concurrency)

    async def produce() -> None:
        async with send:
            while (job := await anyio.to_thread.run_sync(next_job)) is not None:
                await send.send(job)

    async def consume(jobs: MemoryObjectReceiveStream[_Job]) -> None:
        nonlocal done
        async with jobs:
            async for job in jobs:
                s = job.sample
                result = await client.infer(
                    models[job.kind],
                    job.inputs,
                    outputs=output_names(job.kind),
                    timeout_ns=round(timeout_s * 1e9),
                    sensor=s.sensor,
                    frame=s.seq,
                )
                gt = ground_truth(s.t_ns)
                if gt is None:
                    log.debug("%s at %d ns: no ground truth, not scored", s.sensor, s.t_ns)
                else:
                    doppler = evaluator.role(s.sensor) is FusionRole.DOPPLER_POINTS
                    points = s.points if doppler and isinstance(s, PointCloudSample) else None
                    score = partial(evaluator.add, s.sensor, s.t_ns, result.outputs, gt, points=points)
                    await anyio.to_thread.run_sync(score)
                done += 1
                if progress is not None:
                    progress(done)

    async def guarded(fn: Callable[..., Awaitable[None]], *args: Any, scope: anyio.CancelScope) -> None:
        try:
            await fn(*args)
        except PerceptionError as exc:  # re-raised below as itself, not inside an exception group
            if failure.error is None:
                failure.error = exc
            scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(guarded, produce, scope=tg.cancel_scope))
        with receive:
            for _ in range(concurrency):
                tg.start_soon(partial(guarded, consume, receive.clone(), scope=tg.cancel_scope))
    if failure.error is not None:
        raise failure.error
    return done
