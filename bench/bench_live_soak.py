"""Live soak: >= 100,000 frames through one LiveRuntime, with faults, and what it holds at the end.

A compressed clock: two host threads push a lidar (the trigger) and a radar at ``--rate`` Hz each
(default 400: 2.5 ms frames instead of a real lidar's 100 ms), stamped on the host's monotonic clock,
into a :class:`perception.live.LiveRuntime` whose two models are copies of the sleepy test models
(``tests/triton_models``) that sleep ``--delay-ms`` (default 2 ms) with 4 instances each, served by
an embedded Triton on a fixed port. gRPC transport, fusion off (the soak is about the runtime's
lifetime, not fusion's cost), 8 frames in flight, drop-oldest when the runtime falls behind (counted).

Faults, in the middle of the run:

* **hung model**: the lidar model is reloaded (Triton's model control, a config override) to sleep
  1.5 s, far past the 200 ms budget, for ``--hung-s`` seconds: frames go late, its circuit opens and
  is probed; then it is reloaded at its normal delay and the circuit closes again;
* **server restart**: the embedded Triton is stopped and started again on the same port: requests
  fail (unavailable) while it is down, circuits open, and the runtime reconnects when it is back.

Sampled at the start, after warm-up, at the middle (before the faults), after them and at the end: RSS,
open fds, threads, ``/dev/shm`` entries (all, and this process's ``perception_<pid>_*``), and
``status()`` timed from the host side about every 50 ms all along (wall time, and the calling
thread's CPU time: the wall time also holds the waits for the GIL held by the pushing threads and the
event loop). ``rss_growth_pct`` is end vs
after warm-up.

    .venv/bin/python bench/bench_live_soak.py [--frames 100000] [--rate 400]

Writes ``bench/results/live_soak.json``; exit 1 when a target is missed (RSS growth >= 2 %, status()
p99 >= 1 ms, fds/threads/shm entries grown, fewer frames than asked).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from anyio.from_thread import start_blocking_portal

from perception.benchmark import environment
from perception.config import RuntimeConfig, from_data
from perception.live import LiveRuntime
from perception.server import EmbeddedTriton
from perception.types import PointCloudSample, SensorSpec, Transform

log = logging.getLogger("bench_live_soak")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "live_soak.json"
TEST_MODELS = ROOT / "tests" / "triton_models"
LIDAR_FIELDS = ("x", "y", "z", "intensity")
RADAR_FIELDS = ("x", "y", "z", "radial_velocity", "rcs")


def _repository(tmp: Path, delay_ms: float) -> Path:
    """soak_lidar / soak_radar: the sleepy test models at ``delay_ms``, 4 instances each."""
    repo = tmp / "models"
    for src, name in (("sleepy_lidar", "soak_lidar"), ("sleepy_radar", "soak_radar")):
        shutil.copytree(TEST_MODELS / src, repo / name)
        cfg = repo / name / "config.pbtxt"
        text = cfg.read_text()
        text = text.replace("count: 2,", "count: 4,").replace("count: 1,", "count: 4,")
        lines = [
            f'parameters {{ key: "delay_ms", value: {{ string_value: "{delay_ms:g}" }} }}'
            if '"delay_ms"' in line
            else line
            for line in text.splitlines()
        ]
        cfg.write_text("\n".join(lines) + "\n")
    return repo


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _resources() -> dict[str, Any]:
    with open("/proc/self/statm") as f:
        rss_pages = int(f.read().split()[1])
    shm = os.listdir("/dev/shm")
    return {
        "rss_mb": round(rss_pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 2),
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": threading.active_count(),
        "os_threads": len(os.listdir("/proc/self/task")),
        "shm_entries": len(shm),
        "own_shm_entries": sum(1 for n in shm if n.startswith(f"perception_{os.getpid()}_")),
    }


def _config(url: str) -> RuntimeConfig:
    data: dict[str, Any] = {
        "server": {"url": url, "channels": 2, "startup_timeout_s": 60},
        "sensors": [
            {"name": "lidar", "kind": "lidar", "model": "soak_lidar", "transport": "grpc", "accumulate_ms": 0},
            {"name": "radar", "kind": "radar", "model": "soak_radar", "transport": "grpc"},
        ],
        "trigger": {"sensor": "lidar"},
        "fusion": {"enabled": False},
        "budget": {"total_ms": 200, "fusion_reserve_ms": 5},
        "pipeline": {
            "max_in_flight": 8,
            "queue_size": 32,
            "overflow": "drop-oldest",
            "circuit": {"failure_threshold": 3, "reset_after_ms": 500},
            "drain_timeout_s": 5,
        },
        "live": {"transit_ms": 5},
    }
    return from_data(RuntimeConfig, data)


def _rig(rate: float) -> dict[str, SensorSpec]:
    return {
        "lidar": SensorSpec("lidar", "lidar", "lidar", Transform(), "/lidar", rate_hz=rate),
        "radar": SensorSpec("radar", "radar", "radar", Transform(), "/radar", rate_hz=rate),
    }


class _Pusher:
    """One thread per sensor pushing at ``rate`` Hz on a monotonic schedule (catching up, never bursting)."""

    def __init__(self, live: LiveRuntime, rate: float) -> None:
        self.live, self.period_ns = live, int(1e9 / rate)
        self.stop = threading.Event()
        rng = np.random.default_rng(0)
        self.lidar = rng.normal(size=(2000, 4)).astype(np.float32)
        self.radar = rng.normal(size=(40, 5)).astype(np.float32)
        self.pushed = {"lidar": 0, "radar": 0}
        self.threads = [
            threading.Thread(target=self._run, args=(name,), name=f"push-{name}") for name in ("lidar", "radar")
        ]

    def _run(self, name: str) -> None:
        points, fields = (self.lidar, LIDAR_FIELDS) if name == "lidar" else (self.radar, RADAR_FIELDS)
        nxt = time.monotonic_ns()
        while not self.stop.is_set():
            now = time.monotonic_ns()
            if now < nxt:
                time.sleep((nxt - now) / 1e9)
                continue
            nxt = max(nxt + self.period_ns, now - self.period_ns)  # a stalled thread does not burst
            try:
                self.live.push(PointCloudSample(name, time.monotonic_ns(), name, points, fields))
            except Exception:  # closing
                return
            self.pushed[name] += 1

    def __enter__(self) -> _Pusher:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def _set_delay(server: EmbeddedTriton, model: str, delay_ms: float) -> None:
    """Reload ``model`` with its ``delay_ms`` parameter changed (Triton model control, config override: the
    server's owner's control header, as model control is restricted)."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        cfg = client.get_model_config(model, as_json=True)["config"]
        cfg["parameters"]["delay_ms"] = {"string_value": f"{delay_ms:g}"}
        client.load_model(model, config=json.dumps(cfg), headers=server.control_headers)
    finally:
        client.close()


def _pct(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    return {
        "n": int(a.size),
        "p50": round(float(np.percentile(a, 50)), 4),
        "p99": round(float(np.percentile(a, 99)), 4),
        "max": round(float(a.max()), 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=400.0)
    parser.add_argument("--delay-ms", type=float, default=2.0)
    parser.add_argument("--hung-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    samples: dict[str, dict[str, Any]] = {"start": _resources()}
    status_ms: list[float] = []  # wall time of the call, from a host thread
    status_cpu_ms: list[float] = []  # its CPU time (the wall time also holds waits for the GIL)
    status_by_phase: dict[str, list[float]] = {}
    status_cpu_by_phase: dict[str, list[float]] = {}
    events: list[dict[str, Any]] = []
    warm = max(1000, args.frames // 10)
    middle = args.frames // 2
    restart_at = int(args.frames * 0.6)
    restarted_at: int | None = None
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="live-soak-") as tmp, start_blocking_portal() as portal:
        repo = _repository(Path(tmp), args.delay_ms)
        port = _free_port()
        url = f"127.0.0.1:{port}"

        def start_server() -> EmbeddedTriton:
            server = EmbeddedTriton([repo], grpc_port=port, log_path=Path(tmp) / "triton.log", startup_timeout_s=120)
            portal.call(server.__aenter__)
            return server

        server = start_server()
        try:
            cfg = _config(url)
            live = LiveRuntime(cfg, _rig(args.rate))
            with live, _Pusher(live, args.rate) as pusher:
                phase = "warm-up"
                hung_until: float | None = None
                restarted = False
                hung_done = False
                while True:
                    t0, c0 = time.perf_counter(), time.thread_time_ns()
                    st = live.status()
                    dt = (time.perf_counter() - t0) * 1e3
                    cpu = (time.thread_time_ns() - c0) / 1e6
                    status_cpu_ms.append(cpu)
                    status_ms.append(dt)
                    status_by_phase.setdefault(phase, []).append(dt)
                    status_cpu_by_phase.setdefault(phase, []).append(cpu)
                    frames = st["frames"]
                    if phase == "warm-up" and frames >= warm:
                        samples["after_warm_up"] = {**_resources(), "frames": frames}
                        phase = "steady"
                    if phase == "steady" and frames >= middle:
                        samples["middle"] = {**_resources(), "frames": frames}
                        phase = "faults"
                    if phase == "faults" and not hung_done and hung_until is None:
                        _set_delay(server, "soak_lidar", 1500)
                        hung_until = time.monotonic() + args.hung_s
                        events.append({"event": "lidar model hung (1.5 s sleeps)", "frames": frames})
                    if hung_until is not None and time.monotonic() >= hung_until:
                        _set_delay(server, "soak_lidar", args.delay_ms)
                        hung_until, hung_done = None, True
                        events.append({"event": "lidar model back to normal", "frames": frames})
                    if phase == "faults" and hung_done and not restarted and frames >= restart_at:
                        events.append({"event": "server stopping", "frames": frames})
                        portal.call(server.__aexit__, None, None, None)
                        server = start_server()
                        restarted = True
                        restarted_at = live.status()["frames"]
                        events.append({"event": "server restarted", "frames": restarted_at})
                        samples["after_faults"] = {**_resources(), "frames": restarted_at}
                        phase = "after faults"
                        continue
                    # the end: the frames asked for, and a steady stretch (15 % of them) after the faults
                    if (
                        phase == "after faults"
                        and restarted_at is not None
                        and frames >= max(args.frames, restarted_at + args.frames * 0.15)
                    ):
                        break
                    time.sleep(0.05)
                samples["end"] = {**_resources(), "frames": frames}
                final = live.status()
            samples["after_close"] = _resources()
            pushed = dict(pusher.pushed)
        finally:
            portal.call(server.__aexit__, None, None, None)
    wall_s = time.monotonic() - t_start
    base, end = samples["after_warm_up"], samples["end"]
    rss_growth = (end["rss_mb"] - base["rss_mb"]) / base["rss_mb"] * 100
    result: dict[str, Any] = {
        "environment": environment(),
        "settings": {
            "rate_hz": args.rate,
            "model_delay_ms": args.delay_ms,
            "hung_s": args.hung_s,
            "sensors": ["lidar (trigger)", "radar"],
            "transport": "grpc",
            "fusion": False,
        },
        "frames": final["frames"],
        "ok": final["ok"],
        "degraded": final["degraded"],
        "dropped": final["dropped"],
        "drop_reasons": final["drop_reasons"],
        "sensor_status": final["sensor_status"],
        "failed": final["failed"],
        "callbacks_dropped": final["callbacks_dropped"],
        "intake": final["intake"],
        "latency_ms": final["latency_ms"],
        "pushed": pushed,
        "wall_s": round(wall_s, 1),
        "frames_per_s": round(final["frames"] / wall_s, 1),
        "rss_growth_pct": round(rss_growth, 3),
        "status_ms": _pct(status_ms),
        "status_cpu_ms": _pct(status_cpu_ms),
        "status_ms_by_phase": {k: _pct(v) for k, v in status_by_phase.items()},
        "status_cpu_ms_by_phase": {k: _pct(v) for k, v in status_cpu_by_phase.items()},
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "samples": samples,
        "events": events,
    }
    grown = {
        k: end[k] - base[k] for k in ("fds", "threads", "os_threads", "own_shm_entries") if end[k] - base[k] > 0
    }
    result["grown_after_warm_up"] = grown
    result["targets"] = {
        "frames >= 100000": final["frames"] >= 100_000,
        "rss_growth_pct < 2": rss_growth < 2.0,
        "status p99 < 1 ms": result["status_ms"]["p99"] < 1.0,  # wall time, as the host sees it
        "status CPU p99 < 1 ms": result["status_cpu_ms"]["p99"] < 1.0,
        "nothing else grew": not grown,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    keys = ("frames", "rss_growth_pct", "status_ms", "status_cpu_ms", "targets", "wall_s")
    print(json.dumps({k: result[k] for k in keys}, indent=1))
    print(f"wrote {args.out}")
    return 0 if all(result["targets"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
