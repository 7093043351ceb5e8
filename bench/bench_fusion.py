"""Cost of the fusion stage: fusion + tracking per frame for 50 objects, 2 cameras, 2 radars, 1 lidar.

Synthetic inputs (no models, no Triton): a traffic scene of 50 road users around a moving ego, rendered
by ideal sensor models with noise (:mod:`perception.fusion._testing`); cameras captured 15 ms and radars
30 ms before the lidar-triggered frame time, so ego-motion and time-offset compensation run as in a
drive. Frames are pre-rendered; only ``fuser(frame, results)`` is timed.

Target: p50 of fusion + tracking <= 2 ms. Writes ``bench/results/fusion.json``.

    .venv/bin/python bench/bench_fusion.py [--frames 300] [--objects 50]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from perception.config import FusionConfig
from perception.fusion import Fuser
from perception.fusion._testing import make_rig, scene_results, traffic_scene
from perception.types import Frame

log = logging.getLogger("bench_fusion")

RESULTS = Path(__file__).resolve().parent / "results" / "fusion.json"
TARGET_P50_MS = 2.0
FRAME_NS = 100_000_000


def _stats(values_ns: list[int]) -> dict[str, float]:
    a = np.asarray(values_ns, dtype=np.float64) / 1e6
    return {
        "p50_ms": round(float(np.percentile(a, 50)), 4),
        "p90_ms": round(float(np.percentile(a, 90)), 4),
        "p99_ms": round(float(np.percentile(a, 99)), 4),
        "mean_ms": round(float(a.mean()), 4),
        "max_ms": round(float(a.max()), 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--objects", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    rig = make_rig(cameras=2, radars=2)
    scene = traffic_scene(args.objects, seed=7, ego_speed=10.0)
    offsets = {"cam_front": -15_000_000, "cam_back": -15_000_000, "radar_front": -30_000_000, "radar_rear": -30_000_000}
    n = args.warmup + args.frames
    frames = [
        (Frame(k, k * FRAME_NS, {}), scene_results(scene, rig, k * FRAME_NS, offsets_ns=offsets, seed=k))
        for k in range(n)
    ]
    fuser = Fuser(FusionConfig(), rig, ego_at=scene.ego_at)
    fusion_ns: list[int] = []
    tracking_ns: list[int] = []
    total_ns: list[int] = []
    detections: list[int] = []
    for k, (frame, results) in enumerate(frames):
        t0 = time.perf_counter_ns()
        dets, stages = fuser(frame, results)
        t1 = time.perf_counter_ns()
        if k < args.warmup:
            continue
        fusion_ns.append(stages["fusion"])
        tracking_ns.append(stages.get("tracking", 0))
        total_ns.append(t1 - t0)
        detections.append(len(dets))

    combined = [f + t for f, t in zip(fusion_ns, tracking_ns, strict=True)]
    stats = _stats(combined)
    report = {
        "benchmark": "fusion",
        "target": f"fusion + tracking p50 <= {TARGET_P50_MS} ms for {args.objects} objects, 2 cameras, 2 radars",
        "pass": stats["p50_ms"] <= TARGET_P50_MS,
        "objects": len(scene.world),
        "sensors": sorted(rig),
        "frames": args.frames,
        "detections_mean": round(float(np.mean(detections)), 2),
        "fusion_plus_tracking": stats,
        "fusion": _stats(fusion_ns),
        "tracking": _stats(tracking_ns),
        "call_wall": _stats(total_ns),
        "host": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpus": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "machine": platform.machine(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    log.info(
        "fusion+tracking p50 %.3f ms (p90 %.3f, p99 %.3f); fusion p50 %.3f, tracking p50 %.3f; "
        "%.1f detections/frame -> %s",
        stats["p50_ms"],
        stats["p90_ms"],
        stats["p99_ms"],
        report["fusion"]["p50_ms"],
        report["tracking"]["p50_ms"],
        report["detections_mean"],
        args.out,
    )
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
