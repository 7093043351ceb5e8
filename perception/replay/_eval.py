"""Evaluate a drive in every sensor mode from ONE inference pass.

The drive is replayed once in lockstep with every sensor (deterministic, nothing late or dropped) and
the per-sensor model outputs are kept. Each mode (``fused``, ``lidar_only``, ``no_radar``, ...) then
re-runs fusion and tracking offline on the same outputs with the other sensors marked ``missing`` —
exactly what fusion would see in a replay with those sensors disabled, without re-running the models.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from perception.config import RuntimeConfig
from perception.drives import DriveReader
from perception.errors import DriveError
from perception.evaluation import DetectionEvaluator
from perception.fusion import Fuser
from perception.replay._session import ReplayOptions, ReplayOutcome, replay_drive
from perception.replay._source import GT_TOLERANCE_NS, match_rig
from perception.types import Frame, FrameResult, FrameStatus, SensorResult, SensorStatus

__all__ = ["MODES", "evaluate_modes", "score_modes"]

KINDS = ("lidar", "radar", "camera")

#: Mode name -> sensor kinds that contribute.
MODES: Mapping[str, frozenset[str]] = {
    "fused": frozenset(KINDS),
    "lidar_only": frozenset({"lidar"}),
    "radar_only": frozenset({"radar"}),
    "camera_only": frozenset({"camera"}),
    "no_lidar": frozenset({"radar", "camera"}),
    "no_radar": frozenset({"lidar", "camera"}),
    "no_camera": frozenset({"lidar", "radar"}),
}


def _masked(
    results: Mapping[str, SensorResult], kinds: Mapping[str, str], keep: frozenset[str]
) -> dict[str, SensorResult]:
    return {
        name: r if kinds[name] in keep else SensorResult(name, SensorStatus.MISSING, sample_t_ns=r.sample_t_ns)
        for name, r in results.items()
    }


def score_modes(
    results: list[FrameResult], config: RuntimeConfig, reader: DriveReader, modes: Mapping[str, frozenset[str]] = MODES
) -> dict[str, dict[str, Any]]:
    """Fusion + evaluation of kept replay results for each mode."""
    rig = match_rig(config, reader)
    kinds = {s.name: s.kind for s in config.sensors}
    ego_at = reader.ego_pose_at if reader.ego_poses() else None
    out: dict[str, dict[str, Any]] = {}
    for mode, keep in modes.items():
        fuser = Fuser(config.fusion, rig, ego_at=ego_at)
        ev = DetectionEvaluator(rig=rig, ego_at=ego_at)
        for r in results:
            if r.status is FrameStatus.DROPPED:
                continue
            gt = reader.ground_truth_at(r.t_ns, GT_TOLERANCE_NS)
            frame = Frame(frame_id=r.frame_id, t_ns=r.t_ns, samples={}, ego=ego_at(r.t_ns) if ego_at else None)
            detections, _ = fuser(frame, _masked(r.sensors, kinds, keep))
            if gt is not None:
                ev.add(r.t_ns, detections, gt)
        summary = ev.summary()
        summary["sensors"] = sorted(n for n, k in kinds.items() if k in keep)
        out[mode] = summary
    return out


async def evaluate_modes(
    drive: str | os.PathLike[str], config: RuntimeConfig, **replay_kwargs: Any
) -> tuple[dict[str, dict[str, Any]], ReplayOutcome]:
    """Replay ``drive`` once (lockstep, all sensors) and score every mode against its ground truth."""
    cfg = dataclasses.replace(config, sensors=tuple(dataclasses.replace(s, enabled=True) for s in config.sensors))
    with DriveReader(drive, strict=False) as reader:
        _require_ground_truth(reader, drive)  # before spending a replay on a drive that cannot be scored
    opts = ReplayOptions(rate="lockstep", fusion=False, evaluate=False, progress=replay_kwargs.pop("progress", None))
    outcome = await replay_drive(drive, cfg, opts, keep_results=True, **replay_kwargs)
    with DriveReader(drive, strict=False) as reader:
        return score_modes(outcome.results, cfg, reader), outcome


def _require_ground_truth(reader: DriveReader, drive: str | os.PathLike[str]) -> None:
    if not reader.has_ground_truth:
        raise DriveError(
            "drive has no ground truth to evaluate against", file=str(drive), topic="/ground_truth/objects"
        )
