"""How far an AP difference between two runs on the same ground truth is from noise: a paired bootstrap
over the evaluated frames (samples).

Each evaluator hands over what its matching decided, per class, distance threshold and frame
(:class:`FrameMatches`: the detections' scores and true-positive flags, and the ground-truth count).
A frame's flags depend on that frame alone (matching never crosses frames), so a resample of frames
(drawn with replacement, the same draw for both runs: *paired*) is scored by concatenating its frames'
flags and computing AP the way the evaluator does (:attr:`FrameMatches.ap`). The difference ``b - a``
of mAP and of every class's AP is reported with its percentile interval over the resamples.

A difference is *beyond noise* when its whole interval lies on one side of 0: ``worse`` when the upper
end is below 0, ``better`` when the lower end is above 0. The frames of one drive are not independent
(the same parked cars are seen in consecutive frames), so the interval is, if anything, too narrow: a
difference inside it is noise, one outside it may still be the drive's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["FrameMatches", "paired_bootstrap"]

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]

#: AP of detections (``scores``, true-positive flags, in the order the frames were concatenated) over
#: ``num_gt`` ground-truth objects.
APFunction = Callable[[F64, B, int], float]


@dataclass(frozen=True)
class FrameMatches:
    """What an evaluator's matching decided, frame by frame.

    ``num_gt[label]``: ground-truth objects of ``label`` per frame; ``scores[label][f]``: the scores of
    frame ``f``'s detections of ``label``; ``tp[label][t][f]``: their true-positive flags at threshold
    index ``t``; ``ap``: the evaluator's AP of concatenated frames. Labels without ground truth in any
    frame may be left out.
    """

    frames: int
    thresholds: tuple[float, ...]
    num_gt: Mapping[str, npt.NDArray[np.int64]]
    scores: Mapping[str, Sequence[F64]]
    tp: Mapping[str, Sequence[Sequence[B]]]
    ap: APFunction

    def class_ap(self, label: str, frames: npt.NDArray[np.intp]) -> float | None:
        """``label``'s AP (mean over thresholds) on ``frames`` (indices, repeats allowed); ``None`` without
        ground truth there."""
        num_gt = int(self.num_gt[label][frames].sum()) if label in self.num_gt else 0
        if num_gt == 0:
            return None
        per_frame = self.scores[label]
        scores = np.concatenate([per_frame[f] for f in frames]) if len(frames) else np.zeros(0)
        aps = []
        for flags in self.tp[label]:
            tp = np.concatenate([flags[f] for f in frames]) if len(frames) else np.zeros(0, bool)
            aps.append(self.ap(scores, tp, num_gt))
        return float(np.mean(aps))

    def mean_ap(self, frames: npt.NDArray[np.intp]) -> tuple[float | None, dict[str, float | None]]:
        per_class = {label: self.class_ap(label, frames) for label in self.num_gt}
        present = [v for v in per_class.values() if v is not None]
        return (float(np.mean(present)) if present else None), per_class


def paired_bootstrap(
    a: FrameMatches, b: FrameMatches, *, resamples: int = 1000, level: float = 0.95, seed: int = 0
) -> dict[str, Any]:
    """``b - a`` in mAP and per-class AP, with its paired-bootstrap interval over frames (module docstring).

    Both must cover the same frames with the same ground truth (two settings re-scored on one drive);
    otherwise ``ValueError``. Per key (``"mAP"`` and each label): ``difference`` (on all frames),
    ``low`` / ``high`` (the ``level`` percentile interval), ``worse`` / ``better`` (beyond noise)."""
    if a.frames != b.frames:
        raise ValueError(f"paired bootstrap needs the same frames: {a.frames} against {b.frames}")
    labels = sorted(set(a.num_gt) | set(b.num_gt))
    for label in labels:
        ga, gb = a.num_gt.get(label), b.num_gt.get(label)
        na = np.zeros(a.frames, np.int64) if ga is None else ga
        nb = np.zeros(b.frames, np.int64) if gb is None else gb
        if not np.array_equal(na, nb):
            raise ValueError(f"paired bootstrap needs the same ground truth: {label} differs between the runs")
    if resamples < 1 or not 0 < level < 1:
        raise ValueError(f"resamples must be >= 1 and level within (0, 1), got {resamples}, {level}")
    keys = ["mAP", *labels]

    def differences(frames: npt.NDArray[np.intp]) -> dict[str, float]:
        map_a, ap_a = a.mean_ap(frames)
        map_b, ap_b = b.mean_ap(frames)
        out = {"mAP": _diff(map_a, map_b)}
        for label in labels:
            out[label] = _diff(ap_a.get(label), ap_b.get(label))
        return out

    point = differences(np.arange(a.frames))
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(resamples):
        d = differences(rng.integers(0, a.frames, a.frames) if a.frames else np.zeros(0, np.intp))
        for k in keys:
            if not math.isnan(d[k]):
                draws[k].append(d[k])
    tail = (1.0 - level) / 2 * 100
    result: dict[str, Any] = {"frames": a.frames, "resamples": resamples, "level": level, "seed": seed}
    for k in keys:
        v = np.array(draws[k])
        lo, hi = (float(np.percentile(v, tail)), float(np.percentile(v, 100 - tail))) if v.size else (math.nan,) * 2
        diff = point[k]
        result[k] = {
            "difference": None if math.isnan(diff) else diff,
            "low": None if math.isnan(lo) else lo,
            "high": None if math.isnan(hi) else hi,
            "worse": bool(hi < 0),
            "better": bool(lo > 0),
        }
    return result


def _diff(x: float | None, y: float | None) -> float:
    return math.nan if x is None or y is None else y - x
