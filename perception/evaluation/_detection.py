"""The ``native`` protocol: nuScenes-style 3D detection metrics (centre-distance matching in BEV) and
tracking ID switches, on any drive, every frame with ground truth. Its departures from nuScenes (the
precision envelope, ``<=`` thresholds, which ground truth counts, mAP over classes with ground truth,
per-frame scoring) are deliberate and documented below; the nuScenes protocol itself, as the devkit
computes it, is :mod:`perception.evaluation._nuscenes` (the default for drives imported from nuScenes).

Protocol (per frame, then accumulated over a drive):

* **Frames.** ``add(frame_t_ns, detections, ground_truth)``: detections are in ``base_link`` at the
  frame time; ground truth in ``base_link`` at its own sample time. When the two times differ, ground
  truth is moved to the frame time: objects by their velocity where it is known (ground truth may leave
  it unknown, NaN: such an object is not moved by it), and by the ego motion between the times
  when ``ego_at`` is given (otherwise the ego is taken as static over that gap). A frame without ground
  truth is not evaluated (counted in ``frames_without_ground_truth``).
* **Which ground truth counts.** Objects whose BEV centre is within ``max_range_m`` of ``base_link``'s
  origin and — when a ``rig`` is given — that at least one sensor could plausibly see, by its kind's
  fusion role: a lidar (3D boxes) sees all around; a camera (image boxes) sees an object any part of
  whose 3D box projects into its image in front of it; a radar (Doppler points) sees an object whose
  centre is within ``radar_fov_deg`` of its boresight. Occlusion is not modelled. Detections farther
  than ``max_range_m`` are dropped too (they can neither match nor count as false positives).
* **Matching.** Per class and per distance threshold (0.5, 1, 2, 4 m), detections are taken in
  descending score order and each is matched to the nearest unmatched ground-truth object of the same
  class in the same frame within the threshold (BEV centre distance ``<=`` the threshold; nuScenes: ``<``),
  else it is a false positive.
* **AP** per class and threshold as in nuScenes: precision sampled at 101 recall points, the points at
  recall <= ``min_recall`` (0.1) dropped, precision reduced by ``min_precision`` (0.1) and clipped at 0,
  mean normalised by ``1 - min_precision``. One deliberate difference: precision is sampled from its
  envelope (best precision at that recall or more, as COCO/VOC do) instead of nuScenes' linear
  interpolation, so false positives ranked after the last true positive do not lower AP. A class's AP
  is the mean over thresholds.
* **mAP** is the mean over classes *that have ground truth* in the evaluated frames; a class without
  ground truth has AP ``None`` (undefined) and is left out of the mean (its detections are false
  positives of nothing: they are not penalised). ``mAP`` is ``None`` when no class has ground truth.
* **ATE / AVE** per class: mean BEV centre error / mean velocity error (``|v_det - v_gt|``, m/s) of the
  true positives at the 2 m threshold; AVE over those whose ground-truth velocity is known (as
  nuScenes leaves unknown, NaN, velocities out), ``None`` when there are none. The headline values
  are the means over the classes that have a value (``None`` if none has).
* **ID switches** (CLEAR-MOT): for each ground-truth track, the detection id it is matched to (2 m
  matches) is remembered; a match to a different id than last time is one switch. Frames in which the
  object is unmatched do not reset its last id. Meaningful when detections carry track ids.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.evaluation._bootstrap import FrameMatches
from perception.fusion import invert_transform, project_boxes
from perception.kinds import FusionRole, fusion_role
from perception.modelkit import precision_recall
from perception.types import LABELS, Detection3D, EgoPose, GroundTruth, SensorSpec

__all__ = ["DEFAULT_THRESHOLDS", "DetectionEvaluator", "move_ground_truth", "nuscenes_ap"]

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]

DEFAULT_THRESHOLDS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
_NUM_LABELS = len(LABELS)
_LABEL_INDEX = {name: i for i, name in enumerate(LABELS)}


def nuscenes_ap(
    scores: npt.ArrayLike, is_tp: npt.ArrayLike, num_gt: int, *, min_recall: float = 0.1, min_precision: float = 0.1
) -> float:
    """nuScenes average precision of detections (``scores``, true-positive flags) over ``num_gt`` objects.

    ``nan`` when ``num_gt`` is 0; 0.0 when there are objects but no detections.
    """
    if num_gt <= 0:
        return math.nan
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    tp = np.asarray(is_tp, dtype=bool).reshape(-1)
    if s.size == 0:
        return 0.0
    recall, precision = precision_recall(s, tp, num_gt)
    precision = np.maximum.accumulate(precision[::-1])[::-1]  # envelope: best precision at >= recall
    rec_interp = np.linspace(0.0, 1.0, 101)
    at = np.searchsorted(recall, rec_interp, side="left")  # first detection reaching each recall level
    prec = np.where(at < recall.size, precision[np.minimum(at, recall.size - 1)], 0.0)
    prec = prec[round(100 * min_recall) + 1 :] - min_precision
    prec[prec < 0] = 0.0
    return min(1.0, float(np.mean(prec)) / (1.0 - min_precision))


def move_ground_truth(
    xyz: F64,
    vel: F64,
    gt_t_ns: int,
    frame_t_ns: int,
    ego_at: Callable[[int], EgoPose | None] | None,
) -> tuple[F64, F64, float]:
    """Objects (centres ``[N,3]``, velocities ``[N,2]``, ``base_link`` at ``gt_t_ns``) -> ``base_link`` at
    ``frame_t_ns``: moved by their velocity where known (an unknown, NaN, velocity moves nothing: the
    object stays where it was, its velocity stays unknown) and by the ego motion between the times when
    ``ego_at`` gives both poses (else the ego is taken as static). Also returns the yaw change of the
    frame (rad)."""
    dt = (frame_t_ns - gt_t_ns) * 1e-9
    if dt == 0.0:
        return xyz, vel, 0.0
    xyz = xyz.copy()
    xyz[:, :2] += np.nan_to_num(vel, nan=0.0) * dt
    dyaw = 0.0
    if ego_at is not None:
        pose_f, pose_g = ego_at(frame_t_ns), ego_at(gt_t_ns)
        if pose_f is not None and pose_g is not None:
            m = invert_transform(pose_f.pose.matrix()) @ pose_g.pose.matrix()
            xyz = xyz @ m[:3, :3].T + m[:3, 3]
            vel = vel @ m[:2, :2].T
            dyaw = math.atan2(m[1, 0], m[0, 0])
    return xyz, vel, dyaw


@dataclass
class _ClassRecord:
    scores: list[F64] = field(default_factory=list)
    tp: list[list[B]] = field(default_factory=list)  # per frame: one flag array per threshold
    frame: list[int] = field(default_factory=list)  # the evaluated frame of each entry of scores / tp
    gt_per_frame: list[int] = field(default_factory=list)  # ground-truth objects in each evaluated frame
    num_gt: int = 0
    trans_err: list[float] = field(default_factory=list)
    vel_err: list[float] = field(default_factory=list)


def _greedy_match(dist: F64, threshold: float) -> npt.NDArray[np.intp]:
    """Rows (detections, best first) -> matched column (ground truth) or -1, nearest unmatched within threshold
    (ties: the first column, as ``np.argmin``)."""
    n_det, n_gt = dist.shape
    match = np.full(n_det, -1, np.intp)
    if n_gt == 0:
        return match
    # A few detections and objects per class and frame: plain Python over the rows beats a NumPy call per row.
    free = list(range(n_gt))
    for i, row in enumerate(dist.tolist()):
        best, at = math.inf, -1
        for j in free:
            v = row[j]
            if math.isnan(v):  # NaN: as np.argmin, the first NaN is the minimum, and it is within no threshold
                at = -1
                break
            if v < best:
                best, at = v, j
        if at >= 0 and best <= threshold:
            match[i] = at
            free.remove(at)
    return match


class DetectionEvaluator:
    """Accumulates frames and reports detection/tracking metrics (see the module docstring).

    >>> ev = DetectionEvaluator(max_range_m=50)
    >>> ev.add(frame_t_ns, detections, ground_truth)   # once per frame
    >>> ev.summary()["mAP"]
    """

    def __init__(
        self,
        max_range_m: float = 50.0,
        *,
        rig: Mapping[str, SensorSpec] | None = None,
        thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
        tp_threshold: float = 2.0,
        radar_fov_deg: float = 120.0,
        ego_at: Callable[[int], EgoPose | None] | None = None,
    ) -> None:
        if max_range_m <= 0:
            raise ValueError(f"max_range_m must be > 0, got {max_range_m}")
        if not thresholds or any(t <= 0 for t in thresholds):
            raise ValueError(f"thresholds must be positive, got {list(thresholds)}")
        if tp_threshold not in thresholds:
            raise ValueError(f"tp_threshold {tp_threshold} must be one of the thresholds {list(thresholds)}")
        self.max_range_m = float(max_range_m)
        self.thresholds = tuple(float(t) for t in thresholds)
        self._tp_index = self.thresholds.index(tp_threshold)
        self._rig = dict(rig) if rig is not None else None
        #: Each rig sensor's view, computed once: (role, extrinsic, camera (cam_from_base, K, width, height)).
        self._views: list[tuple[FusionRole | None, F64, tuple[F64, F64, int, int] | None]] = []
        for spec in (self._rig or {}).values():
            ext = spec.extrinsic.matrix()
            role = fusion_role(spec.kind)
            cal = spec.calibration
            if role is FusionRole.IMAGE_BOXES and cal is None:
                continue  # a camera without calibration sees nothing here
            cam = (invert_transform(ext), cal.matrix(), cal.width, cal.height) if cal is not None else None
            self._views.append((role, ext, cam if role is FusionRole.IMAGE_BOXES else None))
        self._sees_all = any(role is FusionRole.BOXES_3D for role, _, _ in self._views)
        self._half_fov = math.radians(radar_fov_deg) / 2
        self._ego_at = ego_at
        self.reset()

    def reset(self) -> None:
        self._records = [_ClassRecord() for _ in range(_NUM_LABELS)]
        self._last_match: dict[int, int] = {}
        self.id_switches = 0
        self.frames = 0
        self.frames_without_ground_truth = 0
        self.detections = 0
        self.ground_truth_objects = 0

    # -- ground truth -----------------------------------------------------------------------------------
    def _align(self, gt: GroundTruth, frame_t_ns: int, xyz: F64, vel: F64, yaw: F64) -> tuple[F64, F64, F64]:
        """Ground truth at ``gt.t_ns`` -> ``base_link`` at the frame time (centres, velocities, yaws)."""
        xyz, vel, dyaw = move_ground_truth(xyz, vel, gt.t_ns, frame_t_ns, self._ego_at)
        return xyz, vel, yaw + dyaw

    def visible(self, centers: F64, sizes: F64, yaws: F64) -> B:
        """Which objects (``base_link``) count: within range and, with a rig, in some sensor's view."""
        n = centers.shape[0]
        ok: B = np.hypot(centers[:, 0], centers[:, 1]) <= self.max_range_m
        if self._rig is None or n == 0 or self._sees_all:
            return ok  # no rig: range only; a 3D-box sensor (lidar) sees every object in range
        near = np.flatnonzero(ok)  # each object is judged on its own: only those in range need a view
        centers, sizes, yaws = centers[near], sizes[near], yaws[near]
        seen = np.zeros(near.size, bool)
        boxes = np.column_stack([centers, sizes, yaws])
        for role, ext, view in self._views:
            if role is FusionRole.IMAGE_BOXES and view is not None:
                cam_from_base, k, width, height = view
                seen |= project_boxes(boxes, cam_from_base, k, width, height).in_image
            elif role is FusionRole.DOPPLER_POINTS:
                rel = centers[:, :2] - ext[:2, 3]
                bearing = np.arctan2(rel[:, 1], rel[:, 0]) - math.atan2(ext[1, 0], ext[0, 0])
                seen |= np.abs((bearing + np.pi) % (2 * np.pi) - np.pi) <= self._half_fov
        out: B = np.zeros(n, bool)
        out[near[seen]] = True
        return out

    # -- accumulation -----------------------------------------------------------------------------------
    def add(self, frame_t_ns: int, detections: Sequence[Detection3D], ground_truth: GroundTruth | None) -> None:
        """Evaluate one frame's detections against its ground truth (``None``: frame not evaluated)."""
        if ground_truth is None:
            self.frames_without_ground_truth += 1
            return
        self.frames += 1
        gts = [o for o in ground_truth.objects if o.label in _LABEL_INDEX]
        g_label = np.array([_LABEL_INDEX[o.label] for o in gts], dtype=np.intp)
        g_xyz = np.array([o.center for o in gts], dtype=np.float64).reshape(-1, 3)
        g_vel = np.array([o.velocity for o in gts], dtype=np.float64).reshape(-1, 2)
        g_size = np.array([o.size for o in gts], dtype=np.float64).reshape(-1, 3)
        g_yaw = np.array([o.yaw for o in gts], dtype=np.float64)
        g_track = np.array([o.track_id for o in gts], dtype=np.int64)
        g_xyz, g_vel, g_yaw = self._align(ground_truth, frame_t_ns, g_xyz, g_vel, g_yaw)
        keep = self.visible(g_xyz, g_size, g_yaw)
        g_label, g_xy, g_vel, g_track = g_label[keep], g_xyz[keep, :2], g_vel[keep], g_track[keep]

        dets = [d for d in detections if d.label in _LABEL_INDEX]
        d_label = np.array([_LABEL_INDEX[d.label] for d in dets], dtype=np.intp)
        d_xy = np.array([d.center[:2] for d in dets], dtype=np.float64).reshape(-1, 2)
        d_vel = np.array([d.velocity for d in dets], dtype=np.float64).reshape(-1, 2)
        d_score = np.array([d.score for d in dets], dtype=np.float64)
        d_id = np.array([d.id for d in dets], dtype=np.int64)
        near = np.hypot(d_xy[:, 0], d_xy[:, 1]) <= self.max_range_m
        d_label, d_xy, d_vel, d_score, d_id = d_label[near], d_xy[near], d_vel[near], d_score[near], d_id[near]
        self.detections += int(d_label.size)
        self.ground_truth_objects += int(g_label.size)

        gt_count = np.bincount(g_label, minlength=_NUM_LABELS).tolist()
        detected = set(d_label.tolist())
        for c in range(_NUM_LABELS):
            rec = self._records[c]
            rec.num_gt += gt_count[c]
            rec.gt_per_frame.append(gt_count[c])
            if c not in detected:
                continue
            di = np.flatnonzero(d_label == c)
            gi = np.flatnonzero(g_label == c)
            di = di[np.argsort(-d_score[di], kind="stable")]
            dist = np.hypot(d_xy[di, None, 0] - g_xy[None, gi, 0], d_xy[di, None, 1] - g_xy[None, gi, 1])
            flags = []
            for t_index, threshold in enumerate(self.thresholds):
                match = _greedy_match(dist, threshold)
                flags.append(match >= 0)
                if t_index == self._tp_index:
                    hit = np.flatnonzero(match >= 0)
                    rec.trans_err.extend(dist[hit, match[hit]].tolist())
                    dv = d_vel[di[hit]] - g_vel[gi[match[hit]]]
                    v_err = np.hypot(dv[:, 0], dv[:, 1])
                    rec.vel_err.extend(v_err[~np.isnan(v_err)].tolist())  # a velocity unknown (NaN): no error
                    self._count_switches(g_track[gi[match[hit]]].tolist(), d_id[di[hit]].tolist())
            rec.scores.append(d_score[di])
            rec.tp.append(flags)
            rec.frame.append(self.frames - 1)

    def _count_switches(self, tracks: list[int], ids: list[int]) -> None:
        for track, det_id in zip(tracks, ids, strict=True):
            last = self._last_match.get(track)
            if last is not None and last != det_id:
                self.id_switches += 1
            self._last_match[track] = det_id

    def frame_matches(self) -> FrameMatches:
        """The matching of every class with ground truth, per evaluated frame, for
        :func:`perception.evaluation.paired_bootstrap` (AP: :func:`nuscenes_ap`, as :meth:`summary`)."""
        num_gt: dict[str, npt.NDArray[np.int64]] = {}
        scores: dict[str, list[F64]] = {}
        tps: dict[str, list[list[B]]] = {}
        empty_s, empty_b = np.zeros(0, np.float64), np.zeros(0, bool)
        for c, name in enumerate(LABELS):
            rec = self._records[c]
            if not rec.num_gt:
                continue
            num_gt[name] = np.array(rec.gt_per_frame, dtype=np.int64)
            per_frame = [empty_s] * self.frames
            for f, sc in zip(rec.frame, rec.scores, strict=True):
                per_frame[f] = sc
            scores[name] = per_frame
            tps[name] = []
            for t_index in range(len(self.thresholds)):
                flags = [empty_b] * self.frames
                for f, fl in zip(rec.frame, rec.tp, strict=True):
                    flags[f] = fl[t_index]
                tps[name].append(flags)

        def ap(score: F64, tp: B, npos: int) -> float:
            return nuscenes_ap(score, tp, npos)

        return FrameMatches(self.frames, self.thresholds, num_gt, scores, tps, ap)

    # -- report -----------------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """Metrics so far (see the module docstring); undefined values are ``None``."""
        per_class_ap: dict[str, float | None] = {}
        ap_by_threshold: dict[str, dict[str, float | None]] = {}
        per_class_ate: dict[str, float | None] = {}
        per_class_ave: dict[str, float | None] = {}
        num_gt: dict[str, int] = {}
        num_det: dict[str, int] = {}
        for c, name in enumerate(LABELS):
            rec = self._records[c]
            scores = np.concatenate(rec.scores) if rec.scores else np.zeros(0)
            aps = []
            for t_index in range(len(self.thresholds)):
                tp = np.concatenate([f[t_index] for f in rec.tp]) if rec.tp else np.zeros(0, bool)
                aps.append(nuscenes_ap(scores, tp, rec.num_gt))
            ap_by_threshold[name] = {f"{t:g}": _opt(a) for t, a in zip(self.thresholds, aps, strict=True)}
            per_class_ap[name] = _opt(float(np.mean(aps))) if rec.num_gt else None
            per_class_ate[name] = _opt(float(np.mean(rec.trans_err))) if rec.trans_err else None
            per_class_ave[name] = _opt(float(np.mean(rec.vel_err))) if rec.vel_err else None
            num_gt[name] = rec.num_gt
            num_det[name] = int(scores.size)
        return {
            "protocol": "native",
            "mAP": _mean(per_class_ap.values()),
            "ate": _mean(per_class_ate.values()),
            "ave": _mean(per_class_ave.values()),
            "per_class_ap": per_class_ap,
            "per_class_ate": per_class_ate,
            "per_class_ave": per_class_ave,
            "ap_by_threshold": ap_by_threshold,
            "num_ground_truth": num_gt,
            "num_detections": num_det,
            "id_switches": self.id_switches,
            "frames": self.frames,
            "frames_without_ground_truth": self.frames_without_ground_truth,
            "max_range_m": self.max_range_m,
            "thresholds_m": list(self.thresholds),
        }


def _opt(value: float) -> float | None:
    return None if math.isnan(value) else value


def _mean(values: Any) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None
