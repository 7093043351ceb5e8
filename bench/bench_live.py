"""Live ingestion: latency and overhead of the live API, with a publisher process at 1x real time.

Inputs: the bundled drive, played at its recorded timing by a separate publisher process over a Unix
socket (:func:`perception.live.live_session`, what ``perception live`` runs), into a LiveRuntime
whose sensors are served by the latency-bound test models ``sleepy_lidar`` / ``sleepy_radar`` /
``sleepy_camera`` (they wait 20 / 30 / 40 ms instead of computing, so the 2 local cores are not the
limit). Fusion runs as the profile says.

Figures, per frame:

* ``latency_ms``: from the trigger sample's arrival in the host to the frame's result (p50/p99);
* ``over_slowest_model_ms``: that latency minus the slowest answering model's own time (its sleep):
  what assembly (waiting for the other sensors' samples within their sync windows), scheduling,
  transport and fusion add on top of the models;
* ``assembly_wait_ms``: the part of it spent before dispatch (the frame's ``schedule_wait``);
* ``assembly_cpu_us_per_frame``: CPU time of the event-loop thread in intake and assembly;
* ``push_cpu_us_per_frame``: CPU time of the host thread receiving from the socket and pushing.

    .venv/bin/python bench/bench_live.py [--seconds 10]

Writes ``bench/results/live.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np

from perception.benchmark import environment
from perception.config import KindDefaults, SensorDefaults, load_config, resolve_sensors
from perception.drives import DriveReader
from perception.live import live_session
from perception.server import EmbeddedTriton

log = logging.getLogger("bench_live")

ROOT = Path(__file__).resolve().parents[1]
DRIVE = ROOT / "replay_data" / "urban_seed7_10s.mcap"
RESULTS = ROOT / "bench" / "results" / "live.json"
TEST_MODELS = ROOT / "tests" / "triton_models"
SLEEP_MS = {"lidar": 20.0, "radar": 30.0, "camera": 40.0}  # the sleepy_* models' delays


def _pct(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return {"n": 0}
    return {
        "n": int(a.size),
        "p50": round(float(np.percentile(a, 50)), 2),
        "p99": round(float(np.percentile(a, 99)), 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    repo = [TEST_MODELS / f"sleepy_{k}" for k in SLEEP_MS]
    with DriveReader(DRIVE) as reader:
        rig = dict(reader.rig)
    defaults = SensorDefaults(
        camera=KindDefaults("sleepy_camera", sync_window_ms=50, max_staleness_ms=150),
        lidar=KindDefaults("sleepy_lidar", sync_window_ms=60, max_staleness_ms=150),
        radar=KindDefaults("sleepy_radar", transport="grpc", sync_window_ms=50, max_staleness_ms=150),
    )
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench_live_") as tmp:
        models = Path(tmp) / "models"
        models.mkdir()
        for m in repo:
            (models / m.name).symlink_to(m, target_is_directory=True)
        from anyio.from_thread import start_blocking_portal

        server = EmbeddedTriton([models], startup_timeout_s=120.0)
        with start_blocking_portal(backend="asyncio") as portal, portal.wrap_async_context_manager(server):
            cfg = load_config(ROOT / "launch" / "replay.yaml")
            cfg = dataclasses.replace(
                cfg, sensor_defaults=defaults, server=dataclasses.replace(cfg.server, url=server.grpc_url)
            )
            cfg = resolve_sensors(cfg, rig)
            outcome = live_session(DRIVE, cfg)
    kinds = {s.name: s.kind for s in cfg.sensors}
    latency, over, wait = [], [], []
    for r in outcome.records:
        if r.status.value == "dropped":
            continue
        total = r.latency.total_ns / 1e6
        answered = [SLEEP_MS[kinds[n]] for n, s in r.sensors.items() if s.status.value == "ok"]
        latency.append(total)
        over.append(total - max(answered, default=0.0))
        wait.append(r.latency.stages.get("schedule_wait", 0) / 1e6)
    s = outcome.summary
    result: dict[str, Any] = {
        "environment": environment(),
        "drive": str(DRIVE.relative_to(ROOT)),
        "models_sleep_ms": SLEEP_MS,
        "frames": s["frames"],
        "expected_frames": s["expected_frames"],
        "statuses": {"ok": s["ok"], "degraded": s["degraded"], "dropped": s["dropped"]},
        "drop_reasons": s["drop_reasons"],
        "deadline_misses": s["deadline_misses"],
        "latency_ms": _pct(latency),
        "over_slowest_model_ms": _pct(over),
        "assembly_wait_ms": _pct(wait),
        "assembly_cpu_us_per_frame": s["assembly_cpu_us_per_frame"],
        "push_cpu_us_per_frame": outcome.push_cpu_us_per_frame,
        "intake": s["intake"],
        "offsets_ms": s["offsets_ms"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    sys.stdout.write(
        json.dumps({k: v for k, v in result.items() if k not in ("environment", "intake")}, indent=2) + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
