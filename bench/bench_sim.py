"""Benchmark of the drive generator: a ``dense`` drive (128-beam lidar, ~250k points per sweep).

Writes ``bench/results/sim.json``: wall and CPU time, real-time factor (wall / simulated seconds;
< 1 means faster than real time), lidar points per sweep, sizes, and the machine's load at the
start (the machine is shared, so the load says how much of it the run had).

    .venv/bin/python bench/bench_sim.py            # 60 s dense drive, workers = cores (max 2)
    .venv/bin/python bench/bench_sim.py --duration 10 --workers 1

On a machine shared with other heavy jobs the wall time mostly measures their load (the kernel's
autogroup scheduler gives each login session a fair share, whatever its ``nice``), so the result also
records the CPU time, the cores the run actually obtained, and the real-time factor the measured CPU
time implies on free cores (``cpu_bound_realtime_factor_estimate``). ``cpu_s_per_sim_s_by_component``
then splits the CPU cost by stage (scene, each sensor model, ground-truth and drive encoding), from a
short in-process run (``--components-duration``) of the same scenario.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

from perception.sim import generate_drive

RESULTS = Path(__file__).resolve().parent / "results" / "sim.json"


def component_breakdown(scenario: str, seed: int, duration: float, compression: str) -> dict[str, float]:
    """CPU seconds per simulated second of each stage, measured in this process (with the allocator
    setting that generate_drive and its capture workers use)."""
    from perception.drives import DriveWriter
    from perception.sim import Simulator
    from perception.sim._generate import _freed_memory_kept

    sim = Simulator(scenario, seed=seed, duration_s=duration)
    cpu: dict[str, float] = {"scene": 0.0}
    samples = []
    with _freed_memory_kept(), tempfile.TemporaryDirectory(prefix="bench_sim_") as tmp:
        for t, name, k in sorted((t, s.name, k) for s in sim.rig.sensors
                                 for k, t in enumerate(sim.capture_times(s.name))):
            kind = sim.rig.sensor(name).kind
            t0 = time.process_time()
            sim.scene(t)
            t1 = time.process_time()
            samples.append(sim.sample(name, k))
            cpu["scene"] += t1 - t0
            cpu[kind] = cpu.get(kind, 0.0) + time.process_time() - t1
        gts = [sim.ground_truth(t) for t in sim.ground_truth_times()]
        t0 = time.process_time()
        with DriveWriter(Path(tmp) / "parts.mcap", sim.rig.specs, compression=compression) as writer:
            for gt in gts:
                writer.write_ground_truth(gt)
            t1 = time.process_time()
            for sample in samples:
                writer.write(sample)
        cpu["ground_truth_write"] = t1 - t0
        cpu["sensor_write"] = time.process_time() - t1
    return {k: round(v / duration, 3) for k, v in cpu.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", default="dense")
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=None, help="capture processes (default: cores, at most 2)")
    p.add_argument("--compression", default="lz4", choices=("zstd", "lz4", "none"),
                   help="drive chunk compression (default lz4: the dense drive is ~40 MB/s of points)")
    p.add_argument("--components-duration", type=float, default=3.0,
                   help="simulated seconds of the per-stage CPU breakdown (0: skip it)")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench_sim_") as tmp:
        path = Path(tmp) / f"{args.scenario}.mcap"
        t0 = time.monotonic()
        summary = generate_drive(path, scenario=args.scenario, seed=args.seed, duration_s=args.duration,
                                 workers=args.workers, compression=args.compression, progress=sys.stderr.isatty())
        wall = time.monotonic() - t0
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = {
        "benchmark": "sim",
        "scenario": args.scenario,
        "seed": args.seed,
        "duration_s": args.duration,
        "workers": summary.workers,
        "compression": args.compression,
        "wall_s": round(wall, 2),
        "realtime_factor": round(wall / args.duration, 3),
        "faster_than_realtime": wall < args.duration,
        "cpu_s_main": round(summary.cpu_s, 2),
        "cpu_s_workers": round(children.ru_utime + children.ru_stime, 2),
        # what the wall time would be if the run had the machine's cores to itself (CPU-bound estimate)
        "cpu_bound_realtime_factor_estimate": round(
            (summary.cpu_s + children.ru_utime + children.ru_stime) / (min(os.cpu_count() or 1, summary.workers + 1)
                                                                       * args.duration), 3),
        "lidar_points_per_sweep_mean": round(summary.lidar_points_mean),
        "lidar_points_per_sweep_max": summary.lidar_points_max,
        "ground_truth_objects_within_100m_mean": round(summary.objects_mean, 1),
        "messages": dict(summary.messages),
        "drive_bytes": summary.bytes,
        "loadavg_1m_before": round(load_before[0], 2),
        "cores_obtained": round((summary.cpu_s + children.ru_utime + children.ru_stime) / wall, 2),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
        "cpu_s_per_sim_s": round((summary.cpu_s + children.ru_utime + children.ru_stime) / args.duration, 3),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    if args.components_duration > 0:
        result["cpu_s_per_sim_s_by_component"] = component_breakdown(
            args.scenario, args.seed, args.components_duration, args.compression)
        result["loadavg_1m_after_components"] = round(os.getloadavg()[0], 2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
