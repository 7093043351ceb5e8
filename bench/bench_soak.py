"""Soak: 10,000+ frames at max rate through the real runtime, and nothing leaks.

An embedded Triton serves kind-contract sleepers (``perception.modelkit._testing.KindSleeperModel`` with
the tensor contracts of ``tests/triton_models/sleepy_*``) with small delays. Synthetic frames -- a
20k-point lidar sweep through shared memory, a radar scan over gRPC, two batched 320x180 JPEG cameras --
stream through :meth:`Runtime.run` at max rate (``block``: nothing dropped) with fusion and tracking
on, and every record is serialised and written like ``detections.jsonl``.

Sampled before the stream, after a warm-up, every ``--every`` frames and at the end (after a
``gc.collect()``): this process's RSS, open file descriptors, threads and ``/dev/shm`` regions of its
pid prefix (its shared-memory pool and the embedded server's python backend), and the server's RSS.
After closing the runtime and the server, the regions must be gone.

Pass: RSS grows < 5 % from the warm-up to the end; regions end where they were after the warm-up,
fds and threads within 2 of it (anyio's idle worker threads come and go); every frame emitted once,
in order; no region left once the runtime and the server are closed. Writes
``bench/results/soak.json``.

Usage: ``.venv/bin/python bench/bench_soak.py [--frames 10000] [--warmup 1000]``
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import os
import re
import tempfile
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from perception._imageio import encode_jpeg
from perception.benchmark import environment
from perception.config import RuntimeConfig, from_data
from perception.fusion import Fuser
from perception.metrics import frame_record, percentiles
from perception.scheduler import Runtime
from perception.server import EmbeddedTriton
from perception.types import (
    CameraCalibration,
    Frame,
    FrameStatus,
    ImageSample,
    PointCloudSample,
    Sample,
    SensorKind,
    SensorSpec,
    Transform,
)

log = logging.getLogger("bench_soak")

REPO = Path(__file__).resolve().parents[1]
TEST_MODELS = REPO / "tests" / "triton_models"
MS = 1_000_000
T0 = 1_700_000_000_000_000_000
#: name -> (kind, delay_ms) of the served sleepers
MODELS = {"soak_lidar": ("lidar", 2), "soak_radar": ("radar", 2), "soak_camera": ("camera", 3)}
RSS_GROWTH_LIMIT_PCT = 5.0
#: fds and threads may differ by this much between two samples (anyio's idle worker threads come and go,
#: gRPC opens and closes wake-up fds); a leak grows with the frames, far beyond it over 10,000.
COUNT_TOLERANCE = 2
IMAGE_HW = (180, 320)


def sleeper_repository(dest: Path) -> Path:
    """The sleepers with this benchmark's delays (contracts copied from tests/triton_models)."""
    for name, (kind, delay_ms) in MODELS.items():
        source = TEST_MODELS / f"sleepy_{kind}"
        config = (source / "config.pbtxt").read_text()
        config = re.sub(r'(key: "delay_ms", value: \{ string_value: )"[^"]*"', rf'\g<1>"{delay_ms}"', config)
        config = re.sub(r"count: \d+", "count: 1", config)
        (dest / name / "1").mkdir(parents=True)
        (dest / name / "config.pbtxt").write_text(config)
        (dest / name / "1" / "model.py").write_text((source / "1" / "model.py").read_text())
    return dest


def runtime_config(url: str) -> RuntimeConfig:
    sensors = [
        {"name": "lidar_top", "kind": "lidar", "model": "soak_lidar", "transport": "shm"},
        {"name": "radar_front", "kind": "radar", "model": "soak_radar", "transport": "grpc"},
        {"name": "cam_front", "kind": "camera", "model": "soak_camera", "transport": "grpc"},
        {"name": "cam_back", "kind": "camera", "model": "soak_camera", "transport": "grpc"},
    ]
    data = {
        "server": {"url": url, "channels": 2},
        "sensors": sensors,
        "trigger": {"sensor": "lidar_top"},
        "budget": {"total_ms": 200, "fusion_reserve_ms": 15},
        "pipeline": {"max_in_flight": 4, "admission": "fixed", "queue_size": 0, "overflow": "block"},
        "fusion": {"enabled": True, "tracking": True},
    }
    return from_data(RuntimeConfig, data)


def rig() -> dict[str, SensorSpec]:
    h, w = IMAGE_HW
    cal = CameraCalibration(w, h, (200.0, 0.0, w / 2, 0.0, 200.0, h / 2, 0.0, 0.0, 1.0))
    optical = (-np.pi / 2, 0.0, -np.pi / 2)
    specs = [
        SensorSpec("lidar_top", SensorKind.LIDAR, "lidar_top", Transform.from_xyz_rpy((0, 0, 1.9), (0, 0, 0)), "/l"),
        SensorSpec(
            "radar_front", SensorKind.RADAR, "radar_front", Transform.from_xyz_rpy((3.7, 0, 0.5), (0, 0, 0)), "/r"
        ),
        SensorSpec(
            "cam_front", SensorKind.CAMERA, "cam_front", Transform.from_xyz_rpy((1.6, 0, 1.5), optical), "/c", cal
        ),
        SensorSpec(
            "cam_back",
            SensorKind.CAMERA,
            "cam_back",
            Transform.from_xyz_rpy((-1.0, 0, 1.5), (optical[0], 0, np.pi / 2)),
            "/b",
            cal,
        ),
    ]
    return {s.name: s for s in specs}


class Frames:
    """``count`` frames built from a few pre-made samples (new ids and times, shared payloads)."""

    def __init__(self, count: int, variants: int = 4) -> None:
        rng = np.random.default_rng(0)
        self.count = count
        self.pool: list[dict[str, Sample]] = []
        for _ in range(variants):
            lidar = rng.normal(0, 15, (20_000, 4)).astype(np.float32)
            radar = rng.normal(0, 15, (60, 5)).astype(np.float32)
            images = [encode_jpeg(rng.integers(0, 255, (*IMAGE_HW, 3), dtype=np.uint8)) for _ in range(2)]
            self.pool.append(
                {
                    "lidar_top": PointCloudSample("lidar_top", 0, "lidar_top", lidar, ("x", "y", "z", "intensity")),
                    "radar_front": PointCloudSample(
                        "radar_front", 0, "radar_front", radar, ("x", "y", "z", "radial_velocity", "rcs")
                    ),
                    "cam_front": ImageSample("cam_front", 0, "cam_front", images[0]),
                    "cam_back": ImageSample("cam_back", 0, "cam_back", images[1]),
                }
            )

    async def __aiter__(self) -> AsyncIterator[Frame]:
        for i in range(self.count):
            t = T0 + i * 100 * MS
            samples = {n: dataclasses.replace(s, t_ns=t) for n, s in self.pool[i % len(self.pool)].items()}
            yield Frame(frame_id=i, t_ns=t, samples=samples)


def _status_kb(path: str, key: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def shm_regions(prefix: str) -> list[str]:
    return [p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(prefix)]


def sample(frame: int, server_pid: int | None) -> dict[str, Any]:
    gc.collect()
    prefix = f"perception_{os.getpid()}_"  # the client's pool and the embedded server's python backend
    return {
        "frame": frame,
        "t_s": round(time.monotonic(), 3),
        "rss_mb": round(_status_kb("/proc/self/status", "VmRSS") / 1024, 2),
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": _status_kb("/proc/self/status", "Threads"),
        "python_threads": threading.active_count(),
        "shm_regions": len(shm_regions(prefix)),
        "server_rss_mb": round(_status_kb(f"/proc/{server_pid}/status", "VmRSS") / 1024, 2) if server_pid else None,
    }


async def soak(frames: int, warmup: int, every: int, out_dir: Path) -> dict[str, Any]:
    total = warmup + frames
    source = Frames(total)
    latency_ns = np.zeros(total, dtype=np.int64)  # preallocated: the measurement must not grow
    statuses: Counter[str] = Counter()
    samples: list[dict[str, Any]] = []
    next_id = 0
    misses = 0
    prefix = f"perception_{os.getpid()}_"
    with tempfile.TemporaryDirectory(prefix="bench_soak_") as tmp:
        repo = sleeper_repository(Path(tmp) / "models")
        async with EmbeddedTriton([repo], startup_timeout_s=180.0) as server:
            cfg = runtime_config(server.grpc_url)
            samples.append({"phase": "before_runtime", **sample(0, server.pid)})
            specs = rig()
            async with Runtime(cfg, rig=specs, fusion=Fuser(cfg.fusion, specs)) as rt:
                started = measured_from = time.monotonic()
                with (out_dir / "detections.jsonl").open("w", encoding="utf-8") as out:
                    async for r in rt.run(source):
                        if r.frame_id != next_id:
                            raise AssertionError(f"frame {r.frame_id} emitted where {next_id} was due")
                        next_id += 1
                        out.write(json.dumps(frame_record(r)) + "\n")
                        statuses[r.status.value] += 1
                        misses += r.deadline_missed
                        latency_ns[r.frame_id] = r.latency.total_ns if r.status is not FrameStatus.DROPPED else 0
                        if next_id == warmup:
                            samples.append({"phase": "after_warmup", **sample(next_id, server.pid)})
                            measured_from = time.monotonic()
                        elif next_id > warmup and (next_id - warmup) % every == 0:
                            samples.append({"phase": "running", **sample(next_id, server.pid)})
                            log.info("frame %d: %s", next_id, samples[-1])
                    wall_s = time.monotonic() - started
                    measured_s = time.monotonic() - measured_from
                    samples.append({"phase": "end", **sample(next_id, server.pid)})  # output still open
                client_pool = getattr(rt.client, "shm_pool", None)
                client_prefix = client_pool.prefix if client_pool is not None else None
            samples.append({"phase": "runtime_closed", **sample(next_id, server.pid)})
            client_left = len(shm_regions(client_prefix)) if client_prefix else 0
        after_server = len(shm_regions(prefix))
    warm = next(s for s in samples if s["phase"] == "after_warmup")
    end = next(s for s in samples if s["phase"] == "end")
    growth_pct = 100.0 * (end["rss_mb"] - warm["rss_mb"]) / warm["rss_mb"]
    checks = {
        "one_record_per_frame_in_order": next_id == total,
        "rss_growth_below_limit": growth_pct < RSS_GROWTH_LIMIT_PCT,
        "fds_stable": end["fds"] <= warm["fds"] + COUNT_TOLERANCE,
        "threads_stable": end["threads"] <= warm["threads"] + COUNT_TOLERANCE,
        "shm_regions_stable": end["shm_regions"] == warm["shm_regions"],
        "client_shm_released_at_close": client_left == 0,
        "no_shm_left_after_server_stop": after_server == 0,
    }
    measured = latency_ns[warmup:][latency_ns[warmup:] > 0]
    return {
        "frames": total,
        "warmup_frames": warmup,
        "measured_frames": frames,
        "wall_s": round(wall_s, 1),
        "frames_per_s": round(frames / measured_s, 1),
        "statuses": dict(statuses),
        "deadline_misses": misses,
        "latency_ms_after_warmup": percentiles([int(x) for x in measured]),
        "rss_growth_pct": round(growth_pct, 2),
        "rss_mb": {"after_warmup": warm["rss_mb"], "end": end["rss_mb"]},
        "server_rss_mb": {"after_warmup": warm["server_rss_mb"], "end": end["server_rss_mb"]},
        "fds": {"after_warmup": warm["fds"], "end": end["fds"]},
        "threads": {"after_warmup": warm["threads"], "end": end["threads"]},
        "shm_regions": {
            "after_warmup": warm["shm_regions"],
            "end": end["shm_regions"],
            "client_pool_after_runtime_close": client_left,
            "after_server_stop": after_server,
        },
        "checks": checks,
        "passed": all(checks.values()),
        "samples": samples,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=10_000, help="frames measured after the warm-up")
    parser.add_argument("--warmup", type=int, default=1_000)
    parser.add_argument("--every", type=int, default=1_000, help="resource sample interval (frames)")
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results" / "soak.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    env = environment()
    with tempfile.TemporaryDirectory(prefix="bench_soak_out_") as out:
        body = anyio.run(soak, args.frames, args.warmup, args.every, Path(out))
    report = {
        "benchmark": "soak: max-rate stream through Runtime.run (fusion + tracking on), resource use over time",
        "setup": {
            "models": {name: {"kind": kind, "delay_ms": d} for name, (kind, d) in MODELS.items()},
            "frame": "lidar 20k points (shm), radar 60 points (gRPC), 2 batched 320x180 JPEG cameras",
            "pipeline": "max_in_flight 4, block (nothing dropped), budget 200 ms",
            "limits": {"rss_growth_pct": RSS_GROWTH_LIMIT_PCT, "fd_and_thread_tolerance": COUNT_TOLERANCE},
        },
        "environment": env,
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        **body,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    verdict = "PASS" if body["passed"] else "FAIL"
    log.info(
        "%s: %d frames, %.0f fps, RSS %+.2f%%, fds %s, threads %s, shm %s -> %s",
        verdict,
        body["frames"],
        body["frames_per_s"],
        body["rss_growth_pct"],
        body["fds"],
        body["threads"],
        body["shm_regions"],
        args.output,
    )
    return 0 if body["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
