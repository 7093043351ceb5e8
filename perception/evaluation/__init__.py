"""Evaluation of fused detections against ground truth: nuScenes-style AP/mAP, ATE, AVE, ID switches.

>>> ev = DetectionEvaluator(max_range_m=50)
>>> ev.add(result.t_ns, result.detections, frame.ground_truth)   # once per frame
>>> ev.summary()   # {"mAP", "ate", "ave", "per_class_ap", "id_switches", "frames", ...}

The protocol (matching, AP definition, which ground truth counts, undefined values) is documented in
:mod:`perception.evaluation._detection`.
"""

from __future__ import annotations

from perception.evaluation._detection import DEFAULT_THRESHOLDS, DetectionEvaluator, nuscenes_ap

__all__ = ["DEFAULT_THRESHOLDS", "DetectionEvaluator", "nuscenes_ap"]
