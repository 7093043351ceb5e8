"""Replay outputs without Triton: frame results built by hand from a generated drive's ground truth."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt

from perception.drives import DriveReader
from perception.sim import project_ground_truth
from perception.types import (
    LABELS,
    Detection3D,
    FrameResult,
    FrameStatus,
    GroundTruth,
    LatencyTree,
    SensorKind,
    SensorResult,
    SensorSpec,
    SensorStatus,
)
from perception.viz._outputs import McapOutput
from perception.viz._record import VizRecorder

#: Every fused box of the hand-made frames has all three kinds as sources: drawn in this combination.
ALL_KINDS = "lidar+camera+radar"


def detections_from_truth(gt: GroundTruth, sources: tuple[str, ...]) -> tuple[Detection3D, ...]:
    return tuple(
        Detection3D(
            id=o.track_id,
            label=o.label,
            score=0.9,
            center=o.center,
            size=o.size,
            yaw=o.yaw,
            velocity=o.velocity,
            uncertainty=(0.2, 0.2),
            sources=sources,
        )
        for o in gt.objects
    )


def camera_outputs(gt: GroundTruth, spec: SensorSpec) -> dict[str, npt.NDArray[np.float32]]:
    """What an ideal camera model would answer: the visible ground-truth boxes, padded like the model."""
    labels = project_ground_truth(gt, spec, min_visible=0.3)
    rows = max(len(labels), 4)
    boxes = np.zeros((rows, 4), np.float32)
    scores = np.zeros(rows, np.float32)
    ids = np.zeros(rows, np.float32)
    for i, b in enumerate(labels):
        boxes[i] = (b.x1, b.y1, b.x2, b.y2)
        scores[i] = 0.8
        ids[i] = LABELS.index(b.label)
    return {"BOXES": boxes, "SCORES": scores, "LABELS": ids, "COUNT": np.array([len(labels)], np.float32)}


def gt_results(reader: DriveReader) -> list[FrameResult]:
    """One frame per ground-truth snapshot: every sensor ok with its latest sample at or before the frame
    (cameras answer the ideal 2D boxes), the fused detections = the ground truth."""
    rig: Mapping[str, SensorSpec] = reader.rig
    times: dict[str, list[int]] = {name: [] for name in rig}
    for s in reader.samples():
        times[s.sensor].append(s.t_ns)
    results = []
    for i, gt in enumerate(reader.ground_truth()):
        sensors = {}
        for name, spec in rig.items():
            before = [t for t in times[name] if t <= gt.t_ns + 30_000_000]
            if not before:
                sensors[name] = SensorResult(name, SensorStatus.MISSING)
                continue
            outputs = camera_outputs(gt, spec) if spec.kind == SensorKind.CAMERA else {}
            sensors[name] = SensorResult(
                name, SensorStatus.OK, latency_ns=5_000_000 + i, outputs=outputs, sample_t_ns=before[-1]
            )
        status = FrameStatus.OK if all(s.status is SensorStatus.OK for s in sensors.values()) else FrameStatus.DEGRADED
        latency = LatencyTree(
            total_ns=20_000_000 + 1000 * i,
            stages={"dispatch": 15_000_000, "fusion": 2_000_000 + i},
            sensors={n: {"total": 5_000_000} for n, s in sensors.items() if s.status is SensorStatus.OK},
        )
        results.append(FrameResult(i, gt.t_ns, status, sensors, detections_from_truth(gt, tuple(rig)), latency=latency))
    return results


def record(
    drive: Path, out_dir: Path, results: list[FrameResult] | None = None, *, chunk_size: int | None = None
) -> list[FrameResult]:
    """``out_dir/fused.mcap`` of the hand-made frames (all of them unless ``results`` is given); ``chunk_size``:
    the output's (small ones give a file of many chunks, as a long replay writes)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with DriveReader(drive) as reader:
        frames = gt_results(reader) if results is None else results
        rig = dict(reader.rig)
    output = McapOutput(out_dir / "fused.mcap", **({} if chunk_size is None else {"chunk_size": chunk_size}))
    with VizRecorder(drive, rig, [output]) as rec:
        for r in frames:
            rec.write(r)
    return frames
