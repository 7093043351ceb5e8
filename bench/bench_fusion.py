"""Cost of the fusion stage: fusion + tracking per frame for 50 objects, 2 cameras, 2 radars, 1 lidar.

Synthetic inputs (no models, no Triton): a traffic scene of 50 road users around an ego driving at
10 m/s, rendered by ideal sensor models with noise (:mod:`perception.fusion._testing`); cameras
captured 15 ms and radars 30 ms before the lidar-triggered frame time, so ego-motion and time-offset
compensation run as in a drive. Two scenarios, measured in the same run: ``clean`` (every sensor sees
every object it can) and ``imperfect`` (``_testing.imperfect``: missed detections, random scores,
wrong camera classes, radar clutter, as real models give; this exercises the camera-only and
radar-only paths). Frames are pre-rendered; only ``fuser(frame, results)`` is timed, with the
``fusion`` and ``tracking`` stage times the fuser itself reports.

The machine this runs on may be shared. The whole sequence is therefore replayed ``--repeats`` times
with a fresh fuser (identical work each time) and, per frame, the fastest replay is kept
("intrinsic" cost, the usual min-of-repeats way to strip interference). Each call is timed twice: in
wall time (the ``fusion`` / ``tracking`` stage times the fuser reports) and in CPU time of the calling
thread (``time.thread_time_ns``), which leaves out the time the thread waited for a core while other
processes ran. The target is judged on CPU time, the cost of the stage; the wall-time numbers, the
plain first-replay numbers, the load average and the cost of a reference numpy operation
(``[50,3] + 1``, under 1 us on a quiet desktop) before and after are recorded next to it, to judge how
loaded the host was (on a loaded host CPU time is inflated too, by caches and cores shared).
Target: intrinsic CPU-time p50 of fusion + tracking <= 2 ms in both scenarios. Writes
``bench/results/fusion.json`` (the clean scenario at the top level, as before; ``imperfect`` beside it).

    .venv/bin/python bench/bench_fusion.py [--frames 300] [--objects 50] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
import timeit
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from perception.config import FusionConfig
from perception.fusion import Fuser
from perception.fusion._testing import imperfect, make_rig, scene_results, traffic_scene
from perception.metrics import percentiles
from perception.types import EgoPose, Frame, PointCloudSample, SensorResult, SensorSpec

log = logging.getLogger("bench_fusion")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "fusion.json"
BUNDLED = ROOT / "replay_data" / "urban_seed7_10s.mcap"
TARGET_P50_MS = 2.0
TARGET_REAL_P50_MS = 3.0
FRAME_NS = 100_000_000
OFFSETS_NS = {"cam_front": -15_000_000, "cam_back": -15_000_000, "radar_front": -30_000_000, "radar_rear": -30_000_000}


def _reference_op_us() -> float:
    """Cost of one tiny numpy operation (``[50,3] + 1``): how fast this host runs numpy right now."""
    a = np.ones((50, 3))
    return min(timeit.repeat(lambda: a + 1.0, number=2000, repeat=5)) / 2000 * 1e6


def _measure(
    frames: list[tuple[Frame, dict[str, SensorResult]]],
    rig: Mapping[str, SensorSpec],
    ego_at: Callable[[int], EgoPose | None] | None,
    args: argparse.Namespace,
    config: FusionConfig | None = None,
) -> dict[str, Any]:
    """Replay ``frames`` ``args.repeats`` times with a fresh fuser; per frame the fastest replay."""
    n_frames = len(frames) - args.warmup
    fusion = np.zeros((args.repeats, n_frames), np.int64)
    tracking = np.zeros((args.repeats, n_frames), np.int64)
    cpu = np.zeros((args.repeats, n_frames), np.int64)
    detections = []
    for r in range(args.repeats):
        fuser = Fuser(config or FusionConfig(), rig, ego_at=ego_at)
        for k, (frame, results) in enumerate(frames):
            c0 = time.thread_time_ns()
            dets, stages = fuser(frame, results)
            c1 = time.thread_time_ns()
            if k >= args.warmup:
                cpu[r, k - args.warmup] = c1 - c0
                fusion[r, k - args.warmup] = stages["fusion"]
                tracking[r, k - args.warmup] = stages["tracking"]
                if r == 0:
                    detections.append(len(dets))
    combined = fusion + tracking
    best = combined.argmin(axis=0)
    cols = np.arange(n_frames)
    return {
        "detections_mean": round(float(np.mean(detections)), 2),
        "fusion_plus_tracking_cpu": percentiles(cpu.min(axis=0)),
        "fusion_plus_tracking": percentiles(combined[best, cols]),
        "fusion": percentiles(fusion[best, cols]),
        "tracking": percentiles(tracking[best, cols]),
        "first_replay": {
            "fusion_plus_tracking_cpu": percentiles(cpu[0]),
            "fusion_plus_tracking": percentiles(combined[0]),
            "fusion": percentiles(fusion[0]),
            "tracking": percentiles(tracking[0]),
        },
    }


def _real_frames(
    drive: Path, url: str | None
) -> tuple[list[tuple[Frame, dict[str, SensorResult]]], Mapping[str, SensorSpec], Any, FusionConfig]:
    """A drive's frames as fusion sees them: one lockstep replay (every sensor awaited, fusion off) for the
    models' outputs, and each frame's samples read back from the drive by their capture times (lidar points,
    radar points, camera images; earlier lidar sweeps are not re-merged, as in ``perception eval``)."""
    import anyio

    from perception.config import load_config, with_overrides
    from perception.drives import DriveReader
    from perception.replay import ReplayOptions, each_frame, replay_drive
    from perception.scheduler import Session
    from perception.types import FrameResult, FrameStatus

    cfg = load_config(ROOT / "launch" / "replay.yaml")
    with DriveReader(drive, strict=False, quiet=True) as reader:
        cfg = Session.assemble(cfg, reader.source).config
    cfg = with_overrides(cfg, url=url)
    results: list[FrameResult] = []
    opts = ReplayOptions(rate="lockstep", fusion=False, evaluate=False, progress=False)

    async def replay() -> None:
        await replay_drive(drive, cfg, opts, sinks=[each_frame(results.append)])

    anyio.run(replay)
    frames: list[tuple[Frame, dict[str, SensorResult]]] = []
    with DriveReader(drive, strict=False, quiet=True) as reader:
        session = Session.assemble(cfg, reader.source)
        ego_at = session.source.ego_at
        for r in results:
            if r.status is FrameStatus.DROPPED:
                continue
            samples = {}
            for name, sr in r.sensors.items():
                if sr.sample_t_ns is not None:
                    for sample in reader.samples(sr.sample_t_ns, sr.sample_t_ns + 1, sensors=name):
                        samples[name] = sample
            ego = ego_at(r.t_ns) if ego_at else None
            frames.append((Frame(frame_id=r.frame_id, t_ns=r.t_ns, samples=samples, ego=ego), dict(r.sensors)))
    return frames, session.rig, ego_at, session.config.fusion


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--objects", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--drive", type=Path, default=BUNDLED, help="real frames: a recorded drive ('' to skip)")
    parser.add_argument("--url", help="external Triton for the drive's replay (default: embedded server)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    rig = make_rig(cameras=2, radars=2)
    scene = traffic_scene(args.objects, seed=7, ego_speed=10.0)
    n = args.warmup + args.frames
    frames = [
        (Frame(k, k * FRAME_NS, {}), scene_results(scene, rig, k * FRAME_NS, offsets_ns=OFFSETS_NS, seed=k))
        for k in range(n)
    ]
    load_before = os.getloadavg()[0]
    ref_before = _reference_op_us()
    clean = _measure(frames, rig, scene.ego_at, args)
    rng = np.random.default_rng(0)
    imperfect_frames = [(frame, imperfect(results, rig, rng)) for frame, results in frames]
    noisy = _measure(imperfect_frames, rig, scene.ego_at, args)
    real: dict[str, Any] | None = None
    if str(args.drive):
        real_frames, real_rig, real_ego, real_fusion = _real_frames(args.drive, args.url)
        real = _measure(real_frames, real_rig, real_ego, args, real_fusion)
        clouds = [s for f, _ in real_frames for s in f.samples.values() if isinstance(s, PointCloudSample)]
        points = [s.points.shape[0] for s in clouds]
        real.update(
            drive=args.drive.name,
            frames=len(real_frames) - args.warmup,
            samples_per_frame=round(float(np.mean([len(f.samples) for f, _ in real_frames])), 2),
            points_per_frame=round(float(np.sum(points)) / max(len(real_frames), 1), 1),
            target=f"fusion + tracking CPU-time p50 <= {TARGET_REAL_P50_MS} ms (issue 44)",
            met=real["fusion_plus_tracking_cpu"]["p50"] <= TARGET_REAL_P50_MS,
        )
    ref_after = _reference_op_us()
    report: dict[str, Any] = {
        "benchmark": "fusion",
        "target": f"fusion + tracking CPU-time p50 <= {TARGET_P50_MS} ms for {args.objects} objects, 2 cameras, "
        "2 radars, with clean and with imperfect sensor outputs",
        "pass": max(r["fusion_plus_tracking_cpu"]["p50"] for r in (clean, noisy)) <= TARGET_P50_MS
        and (real is None or bool(real["met"])),
        "objects": len(scene.world),
        "sensors": sorted(rig),
        "frames": args.frames,
        "repeats": args.repeats,
        **clean,
        "imperfect": noisy,
        "real": real,
        "host": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
            "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "reference_op_us": [round(ref_before, 3), round(ref_after, 3)],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    for name, r in (("clean", clean), ("imperfect", noisy), ("real", real)):
        if r is None:
            continue
        log.info(
            "%-9s fusion+tracking CPU p50 %.3f ms (p99 %.3f); wall p50 %.3f ms; fusion p50 %.3f, tracking p50 %.3f; "
            "%.1f detections/frame",
            name,
            r["fusion_plus_tracking_cpu"]["p50"],
            r["fusion_plus_tracking_cpu"]["p99"],
            r["fusion_plus_tracking"]["p50"],
            r["fusion"]["p50"],
            r["tracking"]["p50"],
            r["detections_mean"],
        )
    log.info("target %s; load %.1f; reference op %.2f us -> %s", "met" if report["pass"] else "NOT met", load_before,
             ref_before, args.out)  # fmt: skip
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
