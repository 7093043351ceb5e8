"""Where the fused car boxes of a real drive are placed, against the annotated cars (issue #32, a diagnosis).

Replays the nuScenes scene once (lockstep, every sensor, as ``bench_real.py``), re-fuses at the merged
defaults and matches, per annotated keyframe, the car detections to the annotated cars (BEV centre
distance within 4 m, highest score first, one detection per car). Each match's centre error is split
along the line of sight from the ego origin to the annotated car and across it, and grouped:

* by what placed the detection: ``guided`` (camera-guided object), ``lidar`` (a lidar box, possibly
  refined by camera and radar), ``coasted`` (a track with no sensor this frame: its prediction), other;
* by the annotated car's lidar points (1-5, 5-20, 20-100, 100+);
* for the lidar model's own car boxes (before fusion), also by their yaw error (modulo pi; within
  0.3 rad or not) and by what the model took the view for: ``end-on`` (length within 45 degrees of the
  line of sight) or ``side-on``.

Then the length-axis oracle (:func:`axis_oracle`): the fused car AP if every lidar car box whose length
lies on the wrong axis were turned by 90 degrees, i.e. what a perfect end-on / side-on decision gives.

    PERCEPTION_REAL_DATA=/work/shared/real_data .venv/bin/python bench/diag_car_placement.py

Prints the tables; writes nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import anyio
import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_real  # the importers and the real-data root of the real-drive bench

from perception.config import load_config
from perception.drives import GT_TOLERANCE_NS, DriveReader
from perception.fusion import CAMERA_GUIDED_SOURCE
from perception.replay import MODES, each_frame, evaluate_modes, score_modes
from perception.types import LABELS, Detection3D, FrameResult, GroundTruthObject

log = logging.getLogger("diag_car_placement")

POINT_BINS: tuple[tuple[int, int], ...] = ((0, 5), (5, 20), (20, 100), (100, 1 << 30))
RADIUS = 4.0  # m, BEV centre distance of a match
YAW_GOOD = 0.3  # rad


def _points_bin(n: int | None) -> str:
    for lo, hi in POINT_BINS:
        if n is not None and lo <= n < hi:
            return f"{max(lo, 1)}-{hi}" if hi < 1 << 30 else f"{lo}+"
    return "?"


def _match(
    dets: Sequence[tuple[float, npt.NDArray[np.float64], float, str]], cars: Sequence[GroundTruthObject]
) -> list[tuple[str, str, float, float, float, float]]:
    """``(group, points bin, along, across, yaw error, |cos(model yaw - line of sight)|)`` per match."""
    out = []
    taken: set[int] = set()
    for _, centre, yaw, group in sorted(dets, key=lambda d: -d[0]):
        best, best_j = RADIUS, -1
        for j, o in enumerate(cars):
            dist = math.hypot(o.center[0] - centre[0], o.center[1] - centre[1])
            if j not in taken and dist <= best:
                best, best_j = dist, j
        if best_j < 0:
            continue
        taken.add(best_j)
        o = cars[best_j]
        err = np.asarray(centre[:2], np.float64) - np.asarray(o.center[:2])
        ray = np.asarray(o.center[:2]) / max(math.hypot(o.center[0], o.center[1]), 1e-6)
        los = math.atan2(ray[1], ray[0])
        yaw_err = abs((yaw - o.yaw + math.pi / 2) % math.pi - math.pi / 2)
        out.append(
            (
                group,
                _points_bin(o.num_lidar_pts),
                float(err @ ray),
                float(-err[0] * ray[1] + err[1] * ray[0]),
                yaw_err,
                abs(math.cos(yaw - los)),
            )
        )
    return out


def diagnose(drive: Path, results: list[FrameResult]) -> list[tuple[str, str, float, float, float, float]]:
    config = load_config(bench_real.ROOT / "launch" / "replay.yaml")
    car = LABELS.index("car")
    rows: list[tuple[str, str, float, float, float, float]] = []
    with DriveReader(drive, strict=False, quiet=True) as reader:
        kept: dict[str, list[tuple[int, tuple[Detection3D, ...]]]] = {}
        summary = score_modes(results, config, reader, modes={"fused": MODES["fused"]}, detections=kept)["fused"]
        log.info(
            "fused car AP %.3f, by threshold %s",
            summary["per_class_ap"].get("car") or 0.0,
            (summary.get("ap_by_threshold") or {}).get("car"),
        )
        frames = sorted(kept.get("fused", []), key=lambda td: td[0])
        times = [t for t, _ in frames]
        by_time = {r.t_ns: r for r in results}
        lidars = {s.name: s.extrinsic.matrix() for s in reader.rig.values() if s.kind == "lidar"}
        for gt in reader.ground_truth():
            if not times:
                break
            k = min(range(len(times)), key=lambda i: abs(times[i] - gt.t_ns))
            if abs(times[k] - gt.t_ns) > GT_TOLERANCE_NS:
                continue
            cars = [o for o in gt.objects if o.label == "car"]
            fused = []
            for d in frames[k][1]:
                if d.label != "car":
                    continue
                sources = d.sources
                group = (
                    "guided"
                    if CAMERA_GUIDED_SOURCE in sources
                    else "lidar"
                    if any(s in lidars for s in sources)
                    else "coasted"
                    if not sources
                    else "other"
                )
                fused.append((d.score, np.asarray(d.center, np.float64), d.yaw, "fused " + group))
            rows += _match(fused, cars)
            raw = []
            r = by_time.get(times[k])
            for name, ext in lidars.items():
                sr = r.sensors.get(name) if r is not None else None
                if sr is None or not sr.outputs:
                    continue
                b = np.asarray(sr.outputs["BOXES"], np.float64).reshape(-1, 7)
                labels, scores = np.asarray(sr.outputs["LABELS"]), np.asarray(sr.outputs["SCORES"])
                centre = b[:, :3] @ ext[:3, :3].T + ext[:3, 3]
                turn = math.atan2(ext[1, 0], ext[0, 0])
                raw += [
                    (float(scores[i]), centre[i], float(b[i, 6]) + turn, "lidar model")
                    for i in range(b.shape[0])
                    if labels[i] == car
                ]
            rows += _match(raw, cars)
    return rows


def table(rows: list[tuple[str, str, float, float, float, float]]) -> str:
    groups: dict[tuple[str, str], list[tuple[float, float, float, float]]] = defaultdict(list)
    for group, pts, along, across, yaw_err, cos_view in rows:
        for key in ((group, pts), (group, "all")):
            groups[key].append((along, across, yaw_err, cos_view))
            if group == "lidar model":
                sub = f"yaw {'ok' if yaw_err < YAW_GOOD else 'off'}, {'end-on' if cos_view > 0.707 else 'side-on'}"
                groups[(f"{group}: {sub}", key[1])].append((along, across, yaw_err, cos_view))
    lines = [
        "| placed by | car points | n | median error m | median along | median abs along | median abs across "
        "| share < 0.5 m | < 1 m | yaw within 0.3 rad |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in sorted(groups):
        v = np.asarray(groups[key])
        e = np.hypot(v[:, 0], v[:, 1])
        lines.append(
            f"| {key[0]} | {key[1]} | {len(v)} | {np.median(e):.2f} | {np.median(v[:, 0]):+.2f} | "
            f"{np.median(np.abs(v[:, 0])):.2f} | {np.median(np.abs(v[:, 1])):.2f} | {(e < 0.5).mean():.2f} | "
            f"{(e < 1.0).mean():.2f} | {(v[:, 2] < YAW_GOOD).mean():.2f} |"
        )
    return "\n".join(lines) + "\n"


def _turned(xy: npt.NDArray[np.float64], length: float, width: float, yaw: float) -> npt.NDArray[np.float64]:
    """BEV centre of a box (sensor frame) turned by 90 degrees over the same axes, anchored as the lidar
    model anchors it: along each axis the side nearer the sensor stays, the box extends away from it (an
    axis whose extent straddles the sensor keeps its middle)."""
    out = np.zeros(2)
    axes = ((math.cos(yaw), math.sin(yaw)), (-math.sin(yaw), math.cos(yaw)))
    for e_, half, new_half in zip(axes, (length / 2, width / 2), (width / 2, length / 2), strict=True):
        e = np.asarray(e_)
        p = float(xy @ e)
        lo, hi = p - half, p + half
        mid = lo + new_half if lo >= 0 else hi - new_half if hi <= 0 else p
        out += mid * e
    return out


def axis_oracle(drive: Path, results: list[FrameResult], off: float = 1.2) -> dict[str, object]:
    """What a right length axis would give (a diagnosis with the answers in hand, as bench_real's
    localisation oracle): every lidar car box whose yaw is more than ``off`` rad (modulo pi) from the
    annotated car it matches (BEV, within 4 m, highest score first) is turned by 90 degrees and anchored
    on its near faces (:func:`_turned`); the same outputs are re-fused and scored."""
    config = load_config(bench_real.ROOT / "launch" / "replay.yaml")
    car = LABELS.index("car")
    turned = 0
    changed: list[FrameResult] = []
    with DriveReader(drive, strict=False, quiet=True) as reader:
        lidars = {s.name: s.extrinsic.matrix() for s in reader.rig.values() if s.kind == "lidar"}
        gts = reader.ground_truth()
        for r in results:
            sensors = dict(r.sensors)
            gt = min(gts, key=lambda g: abs(g.t_ns - r.t_ns)) if gts else None
            cars = (
                [o for o in gt.objects if o.label == "car"] if gt and abs(gt.t_ns - r.t_ns) <= GT_TOLERANCE_NS else []
            )
            for name, ext in lidars.items():
                sr = sensors.get(name)
                if sr is None or not sr.outputs or not cars:
                    continue
                b = np.array(sr.outputs["BOXES"], np.float64).reshape(-1, 7)
                labels, scores = np.asarray(sr.outputs["LABELS"]), np.asarray(sr.outputs["SCORES"])
                centre = b[:, :3] @ ext[:3, :3].T + ext[:3, 3]
                rot = math.atan2(ext[1, 0], ext[0, 0])
                taken: set[int] = set()
                for i in np.argsort(-scores):
                    if labels[i] != car:
                        continue
                    dist = [
                        math.hypot(o.center[0] - centre[i, 0], o.center[1] - centre[i, 1]) if j not in taken else np.inf
                        for j, o in enumerate(cars)
                    ]
                    j = int(np.argmin(dist))
                    if dist[j] > RADIUS:
                        continue
                    taken.add(j)
                    if abs((b[i, 6] + rot - cars[j].yaw + math.pi / 2) % math.pi - math.pi / 2) > off:
                        b[i, :2] = _turned(b[i, :2], b[i, 3], b[i, 4], b[i, 6])
                        b[i, 6] += math.pi / 2
                        turned += 1
                sensors[name] = dataclasses.replace(sr, outputs={**sr.outputs, "BOXES": b.astype(np.float32)})
            changed.append(dataclasses.replace(r, sensors=sensors))
        fused = score_modes(changed, config, reader, modes={"fused": MODES["fused"]})["fused"]
    return {
        "boxes_turned": turned,
        "fused_car_AP": fused["per_class_ap"].get("car"),
        "fused_car_ap_by_threshold": (fused.get("ap_by_threshold") or {}).get("car"),
    }


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = bench_real.real_data_root()
    folder, importer = bench_real.IMPORTERS["nuscenes"]
    if not (root / folder).is_dir():
        log.error("%s is absent (set PERCEPTION_REAL_DATA)", root / folder)
        return 1
    config = load_config(bench_real.ROOT / "launch" / "replay.yaml")
    with tempfile.TemporaryDirectory(prefix="diag-car-") as tmp:
        drive = importer(root, Path(tmp))
        results: list[FrameResult] = []
        anyio.run(
            lambda: evaluate_modes(drive, config, progress=False, sinks=[each_frame(results.append)]),
            backend="asyncio",
        )
        sys.stdout.write(table(diagnose(drive, results)))
        sys.stdout.write(f"length-axis oracle: {axis_oracle(drive, results)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
