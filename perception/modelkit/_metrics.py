"""Average precision of 2D detections (model-agnostic, pure numpy).

Matching follows the usual VOC/COCO protocol, with "don't care" ground truth:

* per class, detections are taken in descending score order (ties: input order); each one is matched
  to the unmatched *counted* ground-truth box of the same class with the highest IoU >= threshold
  (true positive);
* a detection that matches no counted box but overlaps an *ignored* box (too occluded, too small...)
  with IoU >= threshold is dropped: neither a true nor a false positive;
* every other detection is a false positive.

AP is the area under the precision envelope over all recall points (VOC 2010+ "all points"). A class
with no counted ground truth in the whole set has AP ``nan`` (undefined), never 0 or 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["APAccumulator", "APResult", "average_precision", "box_iou", "precision_recall"]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


def box_iou(a: npt.ArrayLike, b: npt.ArrayLike) -> F64:
    """IoU matrix ``[N, M]`` of boxes ``a [N,4]`` and ``b [M,4]`` given as ``x1, y1, x2, y2``."""
    aa = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    bb = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    ix1 = np.maximum(aa[:, None, 0], bb[None, :, 0])
    iy1 = np.maximum(aa[:, None, 1], bb[None, :, 1])
    ix2 = np.minimum(aa[:, None, 2], bb[None, :, 2])
    iy2 = np.minimum(aa[:, None, 3], bb[None, :, 3])
    inter = np.clip(ix2 - ix1, 0.0, None) * np.clip(iy2 - iy1, 0.0, None)
    area_a = np.clip(aa[:, 2] - aa[:, 0], 0.0, None) * np.clip(aa[:, 3] - aa[:, 1], 0.0, None)
    area_b = np.clip(bb[:, 2] - bb[:, 0], 0.0, None) * np.clip(bb[:, 3] - bb[:, 1], 0.0, None)
    union = area_a[:, None] + area_b[None, :] - inter
    out: F64 = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    return out


def precision_recall(scores: npt.ArrayLike, is_tp: npt.ArrayLike, num_gt: int) -> tuple[F64, F64]:
    """Cumulative recall and precision of detections taken in descending score order (ties: input
    order), one value per detection. Shared by the 2D AP here and the nuScenes AP of
    :mod:`perception.evaluation`."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    tp = np.asarray(is_tp, dtype=bool).reshape(-1)
    order = np.argsort(-s, kind="stable")
    tp_cum = np.cumsum(tp[order]).astype(np.float64)
    fp_cum = np.cumsum(~tp[order]).astype(np.float64)
    return tp_cum / float(num_gt), tp_cum / np.maximum(tp_cum + fp_cum, 1.0)


def average_precision(scores: npt.ArrayLike, is_tp: npt.ArrayLike, num_gt: int) -> float:
    """All-points interpolated AP of detections (``scores``, ``is_tp`` flags) against ``num_gt`` objects.

    ``nan`` when ``num_gt`` is 0 (undefined); 0.0 when there are objects but no detection.
    """
    if num_gt <= 0:
        return math.nan
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    tp = np.asarray(is_tp, dtype=bool).reshape(-1)
    if s.size == 0:
        return 0.0
    recall, precision = precision_recall(s, tp, num_gt)
    # Precision envelope (monotonically non-increasing from the right), integrated over recall steps.
    mrec = np.concatenate(([0.0], recall, [recall[-1]]))
    mpre = np.concatenate(([1.0], precision, [0.0]))
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]
    steps = np.nonzero(mrec[1:] != mrec[:-1])[0]
    return float(np.sum((mrec[steps + 1] - mrec[steps]) * mpre[steps + 1]))


@dataclass(frozen=True, slots=True)
class APResult:
    """AP of one class: ``ap`` is ``nan`` when the class had no counted object."""

    label: int
    ap: float
    num_gt: int
    num_detections: int
    true_positives: int
    false_positives: int

    @property
    def recall(self) -> float:
        return self.true_positives / self.num_gt if self.num_gt else math.nan


def _match_image(
    det_boxes: F64, det_scores: F64, gt_boxes: F64, gt_ignore: npt.NDArray[np.bool_], iou_threshold: float
) -> tuple[F64, npt.NDArray[np.bool_]]:
    """Match one image's detections of one class. Returns (scores, is_tp) of the detections kept."""
    n = det_boxes.shape[0]
    if n == 0:
        return np.zeros(0), np.zeros(0, dtype=bool)
    order = np.argsort(-det_scores, kind="stable")
    iou = box_iou(det_boxes[order], gt_boxes)
    counted = ~gt_ignore
    taken = np.zeros(gt_boxes.shape[0], dtype=bool)
    keep = np.ones(n, dtype=bool)
    is_tp = np.zeros(n, dtype=bool)
    for i in range(n):
        row = iou[i]
        candidates = np.where(counted & ~taken & (row >= iou_threshold), row, -1.0)
        if candidates.size and candidates.max() >= 0.0:
            j = int(np.argmax(candidates))
            taken[j] = True
            is_tp[i] = True
        elif np.any(gt_ignore & (row >= iou_threshold)):
            keep[i] = False
    return det_scores[order][keep], is_tp[keep]


@dataclass
class APAccumulator:
    """Accumulates per-image detections and ground truth, then reports per-class AP.

    >>> acc = APAccumulator(num_classes=4, iou_threshold=0.5)
    >>> acc.add(det_boxes, det_scores, det_labels, gt_boxes, gt_labels, gt_ignore)  # once per image
    >>> acc.results()[0].ap  # class 0
    """

    num_classes: int
    iou_threshold: float = 0.5
    _scores: list[list[F64]] = field(init=False, repr=False)
    _tp: list[list[npt.NDArray[np.bool_]]] = field(init=False, repr=False)
    _num_gt: list[int] = field(init=False, repr=False)
    _num_det: list[int] = field(init=False, repr=False)
    images: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.num_classes <= 0:
            raise ValueError(f"num_classes must be positive, got {self.num_classes}")
        if not 0.0 < self.iou_threshold <= 1.0:
            raise ValueError(f"iou_threshold must be in (0, 1], got {self.iou_threshold}")
        self._scores = [[] for _ in range(self.num_classes)]
        self._tp = [[] for _ in range(self.num_classes)]
        self._num_gt = [0] * self.num_classes
        self._num_det = [0] * self.num_classes

    def add(
        self,
        det_boxes: npt.ArrayLike,
        det_scores: npt.ArrayLike,
        det_labels: npt.ArrayLike,
        gt_boxes: npt.ArrayLike,
        gt_labels: npt.ArrayLike,
        gt_ignore: npt.ArrayLike | None = None,
    ) -> None:
        """Add one image: detections ``[N,4]/[N]/[N]`` and ground truth ``[M,4]/[M]`` (+ ignore ``[M]``)."""
        db = np.asarray(det_boxes, dtype=np.float64).reshape(-1, 4)
        ds = np.asarray(det_scores, dtype=np.float64).reshape(-1)
        dl = np.asarray(det_labels, dtype=np.int64).reshape(-1)
        gb = np.asarray(gt_boxes, dtype=np.float64).reshape(-1, 4)
        gl = np.asarray(gt_labels, dtype=np.int64).reshape(-1)
        gi = (
            np.zeros(gl.shape[0], dtype=bool)
            if gt_ignore is None
            else np.asarray(gt_ignore, dtype=bool).reshape(-1)
        )
        if not (db.shape[0] == ds.shape[0] == dl.shape[0]):
            raise ValueError(f"detections disagree in length: {db.shape[0]}, {ds.shape[0]}, {dl.shape[0]}")
        if not (gb.shape[0] == gl.shape[0] == gi.shape[0]):
            raise ValueError(f"ground truth disagrees in length: {gb.shape[0]}, {gl.shape[0]}, {gi.shape[0]}")
        for labels, what in ((dl, "detection"), (gl, "ground-truth")):
            if labels.size and (labels.min() < 0 or labels.max() >= self.num_classes):
                raise ValueError(f"{what} label out of range [0, {self.num_classes}): {labels.tolist()}")
        for c in range(self.num_classes):
            dmask = dl == c
            gmask = gl == c
            scores, is_tp = _match_image(db[dmask], ds[dmask], gb[gmask], gi[gmask], self.iou_threshold)
            self._scores[c].append(scores)
            self._tp[c].append(is_tp)
            self._num_gt[c] += int(np.count_nonzero(gmask & ~gi))
            self._num_det[c] += int(scores.size)
        self.images += 1

    def results(self) -> list[APResult]:
        """One :class:`APResult` per class, in label order."""
        out = []
        for c in range(self.num_classes):
            scores = np.concatenate(self._scores[c]) if self._scores[c] else np.zeros(0)
            tp = np.concatenate(self._tp[c]) if self._tp[c] else np.zeros(0, dtype=bool)
            ntp = int(np.count_nonzero(tp))
            out.append(
                APResult(
                    label=c,
                    ap=average_precision(scores, tp, self._num_gt[c]),
                    num_gt=self._num_gt[c],
                    num_detections=self._num_det[c],
                    true_positives=ntp,
                    false_positives=int(tp.size - ntp),
                )
            )
        return out

    @staticmethod
    def mean_ap(results: Sequence[APResult]) -> float:
        """Mean AP over the classes that had counted objects (``nan`` if none had)."""
        aps = [r.ap for r in results if not math.isnan(r.ap)]
        return float(np.mean(aps)) if aps else math.nan
