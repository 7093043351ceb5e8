"""Evaluate a drive in every sensor mode from ONE inference pass.

The drive is replayed once in lockstep with every sensor (deterministic, nothing late or dropped) and
the per-sensor model outputs are kept. Each mode (``fused``, ``lidar_only``, ``no_radar``, ...) then
re-runs fusion and tracking offline on the same outputs with the other sensors marked ``missing`` —
exactly what fusion would see in a replay with those sensors disabled, without re-running the models.

Each mode is scored under one protocol (:mod:`perception.evaluation`): ``nuscenes`` — the nuScenes
detection protocol, one sample per ground-truth keyframe scored on the frame nearest it — by default for
drives imported from nuScenes (drive metadata ``source: nuscenes``), ``native`` otherwise (every frame
with ground truth within :data:`GT_TOLERANCE_NS`).
"""

from __future__ import annotations

import bisect
import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perception.config import RuntimeConfig
from perception.drives import GROUND_TRUTH_TOPIC, GT_TOLERANCE_NS, DriveReader
from perception.errors import DriveError
from perception.evaluation import PROTOCOLS, DetectionEvaluator, FrameMatches, NuScenesEvaluator
from perception.fusion import Fuser, FusionParams
from perception.replay._session import ReplayOptions, ReplayOutcome, replay_drive
from perception.replay._sinks import each_frame
from perception.scheduler import Session
from perception.types import Detection3D, Frame, FrameResult, FrameStatus, PointCloudSample, SensorResult, SensorStatus

__all__ = ["MODES", "SensorMode", "default_protocol", "evaluate_modes", "score_modes"]


@dataclass(frozen=True, slots=True)
class SensorMode:
    """Which sensors an evaluation mode lets contribute, by kind: only the kinds in ``only`` (``None``:
    every kind, registered ones included), less those in ``without``."""

    only: frozenset[str] | None = None
    without: frozenset[str] = frozenset()

    def keeps(self, kind: str) -> bool:
        return (self.only is None or kind in self.only) and kind not in self.without


#: Mode name -> the sensors that contribute. ``fused`` is every sensor of the drive, whatever its kind.
MODES: Mapping[str, SensorMode] = {
    "fused": SensorMode(),
    "lidar_only": SensorMode(only=frozenset({"lidar"})),
    "radar_only": SensorMode(only=frozenset({"radar"})),
    "camera_only": SensorMode(only=frozenset({"camera"})),
    "no_lidar": SensorMode(without=frozenset({"lidar"})),
    "no_radar": SensorMode(without=frozenset({"radar"})),
    "no_camera": SensorMode(without=frozenset({"camera"})),
}


def _masked(results: Mapping[str, SensorResult], kinds: Mapping[str, str], mode: SensorMode) -> dict[str, SensorResult]:
    return {
        name: r if mode.keeps(kinds[name]) else SensorResult(name, SensorStatus.MISSING, sample_t_ns=r.sample_t_ns)
        for name, r in results.items()
    }


def default_protocol(reader: DriveReader) -> str:
    """The protocol a drive is scored with unless one is asked for: by the drive's source."""
    return "nuscenes" if reader.metadata.get("source") == "nuscenes" else "native"


def _nearest(times: list[int], t_ns: int) -> int | None:
    """Index of the time nearest ``t_ns`` within :data:`GT_TOLERANCE_NS` (earlier wins a tie)."""
    i = bisect.bisect_left(times, t_ns)
    best = min((j for j in (i - 1, i) if 0 <= j < len(times)), key=lambda j: abs(times[j] - t_ns), default=None)
    return None if best is None or abs(times[best] - t_ns) > GT_TOLERANCE_NS else best


def score_modes(
    results: list[FrameResult],
    config: RuntimeConfig | Session,
    reader: DriveReader,
    modes: Mapping[str, SensorMode] = MODES,
    protocol: str | None = None,
    fusion_params: FusionParams | None = None,
    detections: dict[str, list[tuple[int, tuple[Detection3D, ...]]]] | None = None,
    matches: dict[str, FrameMatches] | None = None,
) -> dict[str, dict[str, Any]]:
    """Fusion + evaluation of kept replay results for each mode, under ``protocol`` (``None``: the
    drive's :func:`default_protocol`). Each mode's summary names its ``protocol``. ``fusion_params``
    replaces fusion's built-in constants (to compare settings on the same model outputs). ``detections``,
    when given, receives each mode's fused ``(frame time, detections)`` per frame (for diagnoses);
    ``matches`` each mode's evaluator's :class:`~perception.evaluation.FrameMatches` (to compare two
    settings' scores with :func:`~perception.evaluation.paired_bootstrap`). ``config``: a profile, or the
    run's session (assembled against ``reader``'s source: used as it is). A mode none of whose sensors
    is enabled is not scored: ``{"mAP": None, "sensors": [], "skipped": ...}``, no detections or matches."""
    protocol = default_protocol(reader) if protocol is None else protocol
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown evaluation protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
    session = config if isinstance(config, Session) else Session.assemble(config, reader.source)
    config, rig, ego_at = session.config, session.rig, session.source.ego_at
    kinds = {s.name: s.kind for s in config.sensors}
    enabled = [s.name for s in config.active_sensors]
    clouds = _lidar_clouds(results, reader, kinds) if config.fusion.camera_guided.enabled else {}
    out: dict[str, dict[str, Any]] = {}
    for mode, sensor_mode in modes.items():
        kept = sorted(n for n in enabled if sensor_mode.keeps(kinds[n]))
        if not kept:  # nothing of this mode ran (e.g. --sensors without a camera): no score, not a 0
            out[mode] = {"protocol": protocol, "mAP": None, "sensors": [], "skipped": "no enabled sensor"}
            continue
        fuser = Fuser(config.fusion, rig, ego_at=ego_at, params=fusion_params)
        native = DetectionEvaluator(rig=rig, ego_at=ego_at) if protocol == "native" else None
        fused: list[tuple[int, tuple[Detection3D, ...]]] = []
        for r in results:
            if r.status is FrameStatus.DROPPED:
                continue
            samples = {n: c for n, c in clouds.get(r.frame_id, {}).items() if sensor_mode.keeps(kinds[n])}
            frame = Frame(frame_id=r.frame_id, t_ns=r.t_ns, samples=samples, ego=ego_at(r.t_ns) if ego_at else None)
            dets, _ = fuser(frame, _masked(r.sensors, kinds, sensor_mode))
            if detections is not None:
                detections.setdefault(mode, []).append((r.t_ns, tuple(dets)))
            if native is not None:
                gt = session.source.gt_at(r.t_ns) if session.source.gt_at is not None else None
                if gt is not None:
                    native.add(r.t_ns, dets, gt)
            else:
                fused.append((r.t_ns, tuple(dets)))
        if native is not None:
            summary = native.summary()
            if matches is not None:
                matches[mode] = native.frame_matches()
        else:
            ev = NuScenesEvaluator(ego_at=ego_at)
            fused.sort(key=lambda td: td[0])
            times = [t for t, _ in fused]
            for gt in reader.ground_truth():
                k = _nearest(times, gt.t_ns)
                ev.add(gt, None if k is None else fused[k][1], None if k is None else times[k])
            summary = ev.summary()
            if matches is not None:
                matches[mode] = ev.frame_matches()
        summary["sensors"] = kept
        out[mode] = summary
    return out


def _lidar_clouds(
    results: list[FrameResult], reader: DriveReader, kinds: Mapping[str, str]
) -> dict[int, dict[str, PointCloudSample]]:
    """Per frame, each lidar's sweep the replay sent (by its sample time), for the fusion steps that read
    points (``fusion.camera_guided``). Earlier sweeps merged by ``accumulate_ms`` are not re-merged here."""
    out: dict[int, dict[str, PointCloudSample]] = {}
    for r in results:
        for name, sr in r.sensors.items():
            if kinds.get(name) != "lidar" or sr.sample_t_ns is None:
                continue
            for sample in reader.samples(sr.sample_t_ns, sr.sample_t_ns + 1, sensors=name):
                if isinstance(sample, PointCloudSample):
                    out.setdefault(r.frame_id, {})[name] = sample
    return out


async def evaluate_modes(
    drive: str | os.PathLike[str] | DriveReader,
    config: RuntimeConfig,
    protocol: str | None = None,
    **replay_kwargs: Any,
) -> tuple[dict[str, dict[str, Any]], ReplayOutcome]:
    """Replay ``drive`` once (lockstep, the sensors ``config`` enables) and score every mode against its
    ground truth under ``protocol`` (``None``: by the drive's source, :func:`default_protocol`); a mode none
    of whose sensors is enabled is not scored (:func:`score_modes`). ``drive``: a path, or the caller's open
    reader (the drive is read through one reader: the check, the replay, the scoring). It enabled every
    sensor itself: ``perception eval --sensors`` scored them all."""
    if protocol is not None and protocol not in PROTOCOLS:
        raise ValueError(f"unknown evaluation protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
    with contextlib.ExitStack() as stack:
        reader = drive if isinstance(drive, DriveReader) else stack.enter_context(DriveReader(drive, strict=False))
        _require_ground_truth(reader, reader.path)  # before spending a replay on a drive that cannot be scored
        progress = replay_kwargs.pop("progress", None)
        opts = ReplayOptions(rate="lockstep", fusion=False, evaluate=False, progress=progress)
        results: list[FrameResult] = []
        sinks = (*replay_kwargs.pop("sinks", ()), each_frame(results.append))
        session = Session.assemble(config, reader.source)  # once: the replay and the scoring run it
        outcome = await replay_drive(reader, session, opts, sinks=sinks, **replay_kwargs)
        return score_modes(results, session, reader, protocol=protocol), outcome


def _require_ground_truth(reader: DriveReader, drive: str | os.PathLike[str]) -> None:
    if not reader.has_ground_truth:
        raise DriveError("drive has no ground truth to evaluate against", file=str(drive), topic=GROUND_TRUTH_TOPIC)
