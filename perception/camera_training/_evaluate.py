"""AP@0.5 of an exported camera detector on a simulated drive (numpy + onnxruntime; no torch).

Every camera frame of the drive is detected with :class:`perception.modelkit.CameraDetector` (the exact
code the Triton model runs) and matched against :func:`perception.sim.project_ground_truth` at the
frame's capture time. Counted objects: at least 50 % visible and at least 10 px tall; the others are
"don't care" (see :func:`perception.modelkit.camera_ground_truth`).
"""

from __future__ import annotations

import math
import os

from perception.modelkit import APAccumulator, APResult, CameraDetector, camera_ground_truth
from perception.types import LABELS

from ._sources import camera_samples

__all__ = ["EVAL_DRIVE_S", "evaluate_onnx", "format_results"]

#: Length of the evaluation drive (the default of ``perception sim``).
EVAL_DRIVE_S = 10.0


def evaluate_onnx(
    onnx_path: str | os.PathLike[str],
    *,
    seed: int,
    scenario: str = "urban",
    duration_s: float = EVAL_DRIVE_S,
    iou_threshold: float = 0.5,
) -> list[APResult]:
    """Per-class AP of the network at ``onnx_path`` on every camera frame of a simulated drive."""
    detector = CameraDetector(onnx_path, intra_op_threads=2)
    acc = APAccumulator(num_classes=len(LABELS), iou_threshold=iou_threshold)
    for _, _, image, labels in camera_samples(scenario, seed, duration_s=duration_s, frame_step_s=None):
        (det,) = detector([image])
        gt_boxes, gt_labels, gt_ignore = camera_ground_truth(labels)
        acc.add(det.boxes, det.scores, det.labels, gt_boxes, gt_labels, gt_ignore)
    return acc.results()


def format_results(results: list[APResult]) -> str:
    """A small table: class, AP, counted objects, detections kept, TP, FP, recall."""
    lines = [f"{'class':<11} {'AP@0.5':>7} {'objects':>8} {'dets':>6} {'TP':>5} {'FP':>6} {'recall':>7}"]
    for r in results:
        ap = "n/a" if math.isnan(r.ap) else f"{r.ap:.3f}"
        rec = "n/a" if math.isnan(r.recall) else f"{r.recall:.3f}"
        lines.append(
            f"{LABELS[r.label]:<11} {ap:>7} {r.num_gt:>8} {r.num_detections:>6} {r.true_positives:>5} "
            f"{r.false_positives:>6} {rec:>7}"
        )
    lines.append(f"mAP (classes with objects): {APAccumulator.mean_ap(results):.3f}")
    return "\n".join(lines)
