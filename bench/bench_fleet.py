"""Fleet scaling on a real local Ray cluster: aggregate frames/s with 1, 2, 4 workers and 1, 2 servers.

The drives' sensors are served by the latency-bound test models (``tests/triton_models/sleepy_*``: they
wait instead of computing, 2 instances each), here with their waits doubled (lidar 40 ms, camera 80 ms,
radar 60 ms), so that Triton's instances, not the 2 local cores, are the limit. The drives are recorded
on a light three-sensor rig (a 16-beam lidar, one 320x180 camera, one radar) and the profile keeps one
frame in flight per worker with fusion off: one worker then runs at most 1 / 80 ms = 12.5 frames/s and
one server saturates at its camera model's 2 instances / 80 ms = 25 frames/s (two servers: 50).

Every configuration replays the same N drives (one generated drive under N names) on one Ray cluster and
the same two servers, one configuration after another in one run:

* **throughput** = frames / the drive phase (first drive sent to the last answered, timed by the driver);
* **scaling efficiency** = throughput(N workers) / (N x throughput(1 worker)), per server count;
* **saturated** = N workers x throughput(1 worker) would exceed 90 % of the servers' instance limit;
* **where the time went**, per configuration: Ray's task overhead (the driver's time for each drive task
  beyond the worker's own wall time), the fleet's start and close (run wall - drive phase), Triton's
  queue and compute per request (the servers' statistics over the drives' windows, per model,
  request-weighted; a server shared by several workers counts all their requests), and the machine's
  CPU use during the drive phase (``/proc/stat``: the share of all cores busy, any process), which says
  whether the host, rather than Triton's instances, was the limit.

**The production models** (``production`` in the results): ``perception fleet`` with its defaults on
``--copies`` copies of the bundled drive, served by the default profile's models, which compute on the
same 2 cores as the workers (CPU-bound, unlike the sleepy ones); as a user runs it, its own local
cluster and embedded server. Per drive and in total: frames ok (%), deadline misses, frames whose
detections equal a ``replay --rate lockstep`` of the drive (the comparison of ``bench_faithful.py``), and
frames/s over the drive phase. Beside the defaults (one worker on 2 cores), ``--workers 2``: two workers
sharing the node's server and its admission (issue 27: workers sharing a server share its admission).
``--production-only`` runs just this part and keeps the other keys of the results file.

Writes ``bench/results/fleet.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import ray

from perception.benchmark import environment
from perception.fleet import FleetOptions, WorkerSettings, find_drives, run_fleet
from perception.server import EmbeddedTriton, cleanup_stale_shm, iter_processes
from perception.sim import generate_drive

log = logging.getLogger("bench_fleet")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "fleet.json"
MODELS = ROOT / "tests" / "triton_models"
SLOWER = 2  # the sleepy models' waits, multiplied
CAMERA_INSTANCES, CAMERA_S = 2, 0.040 * SLOWER
LIMIT_FPS = CAMERA_INSTANCES / CAMERA_S  # one server: the slowest model's instances bound it
TARGET_EFFICIENCY = 0.9

PROFILE = """
server: {{url: embedded, models: [{repo}], channels: 2}}
sensors:
  - {{name: lidar_top, kind: lidar, model: sleepy_lidar}}
  - {{name: cam_front, kind: camera, model: sleepy_camera}}
  - {{name: radar_front, kind: radar, model: sleepy_radar, transport: grpc}}
budget: {{total_ms: 1000, fusion_reserve_ms: 10}}
pipeline: {{max_in_flight: 1, queue_size: 0, overflow: block}}
fusion: {{enabled: false}}
faults: []
"""

RIG = """
name: bench_fleet
ego_pose_rate_hz: 50
sensors:
  - name: lidar_top
    kind: lidar
    mount: {xyz: [1.0, 0.0, 1.9], rpy_deg: [0.0, 0.0, 0.0]}
    rate_hz: 10
    lidar: {beams: 16, fov_up_deg: 10.0, fov_down_deg: -30.0, azimuth_step_deg: 1.0, max_range_m: 80.0}
  - name: cam_front
    kind: camera
    mount: {xyz: [1.6, 0.0, 1.55], rpy_deg: [0.0, 2.0, 0.0]}
    rate_hz: 12
    camera: {width: 320, height: 180, hfov_deg: 90.0, jpeg_quality: 80}
  - name: radar_front
    kind: radar
    mount: {xyz: [3.7, 0.0, 0.5], rpy_deg: [0.0, 0.0, 0.0]}
    rate_hz: 13
    radar: {fov_deg: 120.0, max_range_m: 90.0}
"""


def _slower_models(repo: Path) -> None:
    """The sleepy test models with their ``delay_ms`` multiplied by :data:`SLOWER` (same code)."""
    for kind in ("lidar", "camera", "radar"):
        src, dst = MODELS / f"sleepy_{kind}", repo / f"sleepy_{kind}"
        dst.mkdir()
        (dst / "1").symlink_to(src / "1", target_is_directory=True)
        text = (src / "config.pbtxt").read_text()
        delay = re.search(r'"delay_ms", value: \{ string_value: "(\d+)" \}', text)
        if delay is None:
            raise SystemExit(f"{src / 'config.pbtxt'}: no delay_ms parameter")
        slower = str(int(delay.group(1)) * SLOWER)
        (dst / "config.pbtxt").write_text(text[: delay.start(1)] + slower + text[delay.end(1) :])


#: ``/proc/<pid>/stat`` command names (15 characters at most) -> what the bench reports them as
_PROCESS_KINDS = {
    "tritonserver": "tritonserver",
    "triton_python_b": "python backend stubs",
    "raylet": "ray (raylet, gcs, ...)",
    "gcs_server": "ray (raylet, gcs, ...)",
}
#: command names not counted: the workers end with the run, and the drives' own cpu_s count them
_NOT_COUNTED = frozenset({"ray::DriveWorke"})


def _cpu_by_process() -> dict[str, float]:
    """CPU seconds used so far by every process, summed per kind (:data:`_PROCESS_KINDS`, else other)."""
    out: dict[str, float] = {}
    for p in iter_processes():
        if p.comm in _NOT_COUNTED:
            continue
        kind = _PROCESS_KINDS.get(p.comm, "ray (raylet, gcs, ...)" if p.comm.startswith("ray::") else "other")
        out[kind] = out.get(kind, 0.0) + p.cpu_ns / 1e9
    return out


def _cores(before: dict[str, float], after: dict[str, float], wall: float) -> dict[str, float]:
    """Cores busy per process kind over ``wall`` seconds (processes that ended meanwhile are not seen)."""
    return {k: round(max(after.get(k, 0.0) - before.get(k, 0.0), 0.0) / wall, 2) for k in sorted(after)}


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot (``/proc/stat``)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _server_ms(out: Path) -> dict[str, dict[str, float]]:
    """Queue and compute ms per request, per model, request-weighted over the configuration's drives."""
    sums: dict[str, dict[str, float]] = {}
    for report in sorted(out.glob("*/report.json")):
        for model, stats in json.loads(report.read_text()).get("server_ms", {}).items():
            n = float(stats.get("requests", 0.0))
            acc = sums.setdefault(model, {"requests": 0.0, "queue": 0.0, "compute": 0.0})
            acc["requests"] += n
            acc["queue"] += n * stats.get("queue_ms", 0.0)
            acc["compute"] += n * sum(v for k, v in stats.items() if k.startswith("compute_"))
    return {
        m: {"queue_ms": round(a["queue"] / a["requests"], 2), "compute_ms": round(a["compute"] / a["requests"], 2)}
        for m, a in sums.items()
        if a["requests"]
    }


async def _one(drives: list[Any], out: Path, profile: Path, workers: int, urls: tuple[str, ...]) -> dict[str, Any]:
    settings = WorkerSettings(profile=str(profile), fused_mcap=False, report_md=False)
    options = FleetOptions(out=out, profile=profile, workers=workers, urls=urls, settings=settings, progress=False)
    t0, cpu0, procs0 = time.monotonic(), _cpu_ticks(), _cpu_by_process()
    outcome = await run_fleet(drives, options)
    wall, cpu1, procs1 = time.monotonic() - t0, _cpu_ticks(), _cpu_by_process()
    report = outcome.report
    totals = report["totals"]
    phase = float(report.get("drive_phase_s") or 0.0)
    frames = int(totals["frames"])
    n = max(len(outcome.drives), 1)
    return {
        "workers": workers,
        "servers": len(urls),
        "drives": len(outcome.drives),
        "by_status": totals["by_status"],
        "frames": frames,
        "drive_phase_s": phase,
        "fps": round(frames / max(phase, 1e-9), 2),
        "frame_latency_ms": {k: totals["latency_ms"][k] for k in ("p50", "p99")},
        "time": {
            "run_wall_s": round(wall, 2),
            "fleet_start_close_s": round(wall - phase, 2),
            "ray_task_overhead_ms_per_drive": round(1000 * totals["ray_overhead_s"] / n, 1),
            "worker_s_per_drive": round(totals["worker_s"] / n, 3),
            # the whole run (start and close included), every process on the machine
            "host_cpu_busy": round((cpu1[0] - cpu0[0]) / max(cpu1[1] - cpu0[1], 1), 3),
            # the same run by process kind, in cores; the workers from their drives' own CPU time
            "cores_by_process": {
                "fleet workers": round(totals["worker_cpu_s"] / wall, 2),
                **_cores(procs0, procs1, wall),
            },
        },
        "server_ms_per_request": _server_ms(out),
    }


def _verdicts(rows: list[dict[str, Any]]) -> None:
    for servers in sorted({r["servers"] for r in rows}):
        mine = [r for r in rows if r["servers"] == servers]
        base = next(r["fps"] for r in mine if r["workers"] == 1)
        limit = LIMIT_FPS * servers
        for r in mine:
            r["efficiency"] = round(r["fps"] / (r["workers"] * base), 3)
            r["server_limit_fps"] = limit
            r["saturated"] = r["workers"] * base > TARGET_EFFICIENCY * limit
            # below saturation the target holds or not; past it, the limit's share is what counts
            r["meets_target"] = r["efficiency"] >= TARGET_EFFICIENCY if not r["saturated"] else None
            r["share_of_limit"] = round(r["fps"] / limit, 3)


def _production(copies: int, variants: list[tuple[str, ...]]) -> dict[str, Any]:
    """The fleet on the production models (see the module docs), each variant's totals beside its drives."""
    from bench_faithful import _fleet, lockstep_reference

    reference = anyio.run(lockstep_reference)
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-fleet-production-") as tmp:
        for extra in variants:
            run = _fleet(Path(tmp), copies, reference, extra)
            drives = run["drives"].values()
            frames = sum(d["frames"] for d in drives)
            run["totals"] = {
                "frames": frames,
                "expected_frames": copies * len(reference),
                "ok_pct": round(100 * sum(d["ok"] for d in drives) / max(frames, 1), 1),
                "deadline_misses": sum(d["deadline_misses"] for d in drives),
                "identical_to_lockstep": sum(d["identical_to_lockstep"] for d in drives),
                "every_drive_identical": all(d["identical_to_lockstep"] == len(reference) for d in drives),
            }
            log.info(
                "production %s: %s, %s frames/s",
                " ".join(extra) or "defaults",
                run["totals"],
                run["frames_per_s_drive_phase"],
            )
            runs.append(run)
    return {
        "drive": "replay_data/urban_seed7_10s.mcap",
        "copies": copies,
        "profile": "launch/replay.yaml (defaults)",
        "reference": "replay --rate lockstep of the drive",
        "reference_frames": len(reference),
        "runs": runs,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--drives", type=int, default=16, help="drives per configuration (default 16)")
    p.add_argument("--duration", type=float, default=6.0, help="seconds of each drive (default 6)")
    p.add_argument("--workers", default="1,2,4", help="worker counts (default 1,2,4)")
    p.add_argument("--copies", type=int, default=3, help="production: copies of the bundled drive (default 3)")
    p.add_argument("--production-only", action="store_true", help="only the production models' part")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("perception", "ray"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    production = _production(args.copies, [(), ("--workers", "2")])
    if args.production_only:
        kept = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"bench": "fleet"}
        RESULTS.write_text(json.dumps({**kept, "production": production}, indent=2) + "\n")
        log.info("wrote %s (production only)", RESULTS)
        return 0
    counts = [int(x) for x in args.workers.split(",")]
    env = environment()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        repo = t / "models"
        repo.mkdir()
        _slower_models(repo)
        profile = t / "fleet.yaml"
        profile.write_text(PROFILE.format(repo=repo))
        source = t / "source.mcap"
        rig = t / "rig.yaml"
        rig.write_text(RIG)
        generate_drive(source, scenario="urban", seed=0, duration_s=args.duration, rig=rig, workers=1)
        drives_dir = t / "drives"
        drives_dir.mkdir()
        for i in range(args.drives):
            (drives_dir / f"d{i}.mcap").hardlink_to(source)  # one drive under N names (a symlink resolves to one)
        drives = find_drives([drives_dir])

        async def run() -> None:
            async with EmbeddedTriton([repo]) as s1, EmbeddedTriton([repo]) as s2:
                for urls in ((s1.grpc_url,), (s1.grpc_url, s2.grpc_url)):
                    for workers in counts:
                        row = await _one(drives, t / f"out_{len(urls)}_{workers}", profile, workers, urls)
                        rows.append(row)
                        log.info("servers %d workers %d: %.1f frames/s", len(urls), workers, row["fps"])

        ray.init(num_cpus=max(counts), include_dashboard=False, logging_level=logging.WARNING)
        try:
            anyio.run(run)
        finally:
            ray.shutdown()
            cleanup_stale_shm()
    _verdicts(rows)
    env["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    result = {
        "bench": "fleet",
        "environment": env,
        "drives": args.drives,
        "drive_duration_s": args.duration,
        "models": f"sleepy_lidar {20 * SLOWER} ms, sleepy_camera {40 * SLOWER} ms, sleepy_radar {30 * SLOWER} ms; "
        "2 instances each",
        "rig": "lidar 16 beams x 1.0 deg, one camera 320x180, one radar",
        "limit_fps_per_server": LIMIT_FPS,
        "target_efficiency": TARGET_EFFICIENCY,
        "rows": rows,
        "production": production,
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    log.info(
        "%7s %7s %9s %6s %6s %9s %12s %5s  server queue/compute ms",
        "servers",
        "workers",
        "frames/s",
        "eff",
        "limit",
        "ray ms/dr",
        "start+close",
        "cpu",
    )
    for r in rows:
        q = ", ".join(f"{m} {v['queue_ms']}/{v['compute_ms']}" for m, v in r["server_ms_per_request"].items())
        log.info(
            "%7d %7d %9.1f %6.2f %6.0f %9.1f %12.1f %5.2f  %s",
            r["servers"],
            r["workers"],
            r["fps"],
            r["efficiency"],
            r["server_limit_fps"],
            r["time"]["ray_task_overhead_ms_per_drive"],
            r["time"]["fleet_start_close_s"],
            r["time"]["host_cpu_busy"],
            q,
        )
    log.info("wrote %s", RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
