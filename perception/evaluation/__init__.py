"""Evaluation of fused detections against ground truth, under one of two protocols.

* ``native``: nuScenes-style AP/mAP, ATE, AVE and ID switches on any drive, with its documented
  departures from nuScenes (:class:`DetectionEvaluator`, :mod:`perception.evaluation._detection`).
* ``nuscenes``: the nuScenes detection protocol exactly as the official devkit computes it (mAP, the
  TP errors ATE/ASE/AOE/AVE/AAE, NDS; class mapping, ranges and ground-truth filters), for drives
  imported from nuScenes (:class:`NuScenesEvaluator`, :mod:`perception.evaluation._nuscenes`).

>>> ev = DetectionEvaluator(max_range_m=50)
>>> ev.add(result.t_ns, result.detections, frame.ground_truth)   # once per frame
>>> ev.summary()   # {"mAP", "ate", "ave", "per_class_ap", "id_switches", "frames", ...}

The protocol (matching, AP definition, which ground truth counts, undefined values) is documented in
:mod:`perception.evaluation._detection`.

Each sensor's model on its own (camera 2D AP, lidar BEV AP, radar detection rate and velocity error),
from raw model outputs: :class:`ModelQualityEvaluator`, run over a drive by :func:`evaluate_models`
(``perception model-quality``); protocol in :mod:`perception.evaluation._models`.

Whether two runs on the same drive differ beyond noise: :func:`paired_bootstrap` of the evaluators'
:meth:`~NuScenesEvaluator.frame_matches` (frames resampled with replacement, the same draw for both).
"""

from __future__ import annotations

from perception.evaluation._bootstrap import FrameMatches, paired_bootstrap
from perception.evaluation._detection import DetectionEvaluator
from perception.evaluation._models import (
    DEFINITIONS,
    ModelQualityEvaluator,
    QualitySettings,
    RadarCoverage,
    check_targets,
    evaluate_models,
    scored_model,
)
from perception.evaluation._nuscenes import NuScenesEvaluator

#: Evaluation protocols by name (``perception eval --protocol``).
PROTOCOLS = ("native", "nuscenes")

__all__ = [
    "DEFINITIONS",
    "PROTOCOLS",
    "DetectionEvaluator",
    "FrameMatches",
    "ModelQualityEvaluator",
    "NuScenesEvaluator",
    "QualitySettings",
    "RadarCoverage",
    "check_targets",
    "evaluate_models",
    "paired_bootstrap",
    "scored_model",
]
