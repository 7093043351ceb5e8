"""The ROS 2 node's overhead over the live API: per-frame latency from the trigger's arrival to the output.

Both runs play the bundled drive at 1x into the same embedded Triton serving the latency-bound test
models ``sleepy_lidar`` / ``sleepy_radar`` / ``sleepy_camera`` (they wait 20 / 30 / 40 ms instead of
computing, so the 2 local cores are not the limit), with the same profile:

* ``live``: ``perception live``'s path (:func:`perception.live.live_session`): a publisher process over a
  Unix socket, the host pushes into :class:`LiveRuntime`; latency from the trigger sample's arrival to
  its result;
* ``ros``: ``perception ros play`` publishing the drive as ROS 2 topics (Fast DDS on loopback) into
  ``perception ros node`` (both in this process, each with its own rclpy context), and a subscriber of
  the bench's own. Per frame:

  - ``processing_ms``: the node's ``~/debug/processing_time_ms``, from the trigger message's arrival in
    its callback to its ``MarkerArray`` being published;
  - ``live_ms``: the same frame's latency inside the live runtime (from the push to the result);
  - ``node_overhead_ms`` = processing - live: the message conversion before the push, and building and
    publishing the markers after the result;
  - ``stamp_to_received_ms``: from the trigger's header stamp (the player publishes at that moment) to
    the subscriber receiving the ``MarkerArray``: both DDS hops included.

    .venv/bin/python bench/bench_ros.py

Writes ``bench/results/ros.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from perception.benchmark import environment
from perception.config import KindDefaults, RuntimeConfig, SensorDefaults, load_config, resolve_sensors
from perception.drives import DriveReader
from perception.live import Faults, live_session
from perception.ros import run_node, run_play
from perception.server import EmbeddedTriton

log = logging.getLogger("bench_ros")

ROOT = Path(__file__).resolve().parents[1]
DRIVE = ROOT / "replay_data" / "urban_seed7_10s.mcap"
RESULTS = ROOT / "bench" / "results" / "ros.json"
TEST_MODELS = ROOT / "tests" / "triton_models"
KINDS = ("lidar", "radar", "camera")


def _pct(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return {"n": 0}
    return {
        "n": int(a.size),
        "p50": round(float(np.percentile(a, 50)), 2),
        "p99": round(float(np.percentile(a, 99)), 2),
        "mean": round(float(a.mean()), 2),
    }


def _live(cfg: RuntimeConfig) -> dict[str, Any]:
    outcome = live_session(DRIVE, cfg)
    latency = [r.latency.total_ns / 1e6 for r in outcome.records if r.status.value != "dropped"]
    s = outcome.summary
    return {"frames": s["frames"], "dropped": s["dropped"], "latency_ms": _pct(latency)}


class _Subscriber:
    def __init__(self) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from std_msgs.msg import Float64
        from visualization_msgs.msg import MarkerArray

        self.processing: list[float] = []
        self.received: list[tuple[int, int]] = []  # (frame stamp, receive time on the ROS clock)
        self._context = rclpy.Context()
        rclpy.init(context=self._context)
        self._node = rclpy.create_node("bench_ros_subscriber", context=self._context)
        clock = self._node.get_clock()

        def on_markers(msg: Any) -> None:
            st = msg.markers[0].header.stamp
            self.received.append((st.sec * 1_000_000_000 + st.nanosec, clock.now().nanoseconds))

        self._node.create_subscription(MarkerArray, "/perception_fusion/objects", on_markers, 200)
        self._node.create_subscription(
            Float64, "/perception_fusion/debug/processing_time_ms", lambda m: self.processing.append(m.data), 200
        )
        self._executor = SingleThreadedExecutor(context=self._context)
        self._executor.add_node(self._node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set():
            self._executor.spin_once(timeout_sec=0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._executor.shutdown()
        self._node.destroy_node()
        self._context.try_shutdown()


def _ros(cfg: RuntimeConfig, profile: Path, url: str) -> dict[str, Any]:
    live: list[float] = []  # each published frame's latency inside the live runtime, in publication order
    stop = threading.Event()
    sub = _Subscriber()
    node = threading.Thread(
        target=run_node,
        args=({"profile": str(profile), "rig": str(DRIVE), "url": url},),
        kwargs={"stop": stop, "on_published": lambda r: live.append(r.latency.total_ns / 1e6)},
        daemon=True,
    )
    try:
        node.start()
        counts = run_play(DRIVE, cfg, Faults(), wait_subscribers_s=120)
        end = time.monotonic() + 10
        while len(sub.processing) < counts["lidar_top"] and time.monotonic() < end:
            time.sleep(0.05)
    finally:
        stop.set()
        node.join(timeout=60)
        sub.close()
    # The drive's frames only (after it, the trigger is silent and the timer goes on opening frames).
    n = min(len(live), len(sub.processing), len(sub.received), counts["lidar_top"])
    processing = sub.processing[:n]
    overhead = [p - lv for p, lv in zip(processing, live[:n], strict=True)]
    e2e = [(r - s) / 1e6 for s, r in sub.received[:n]]
    return {
        "messages_published": counts,
        "frames": n,
        "processing_ms": _pct(processing),
        "live_ms": _pct(live[:n]),
        "node_overhead_ms": _pct(overhead),
        "stamp_to_received_ms": _pct(e2e),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 100))
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    with DriveReader(DRIVE) as reader:
        rig = dict(reader.rig)
    defaults = SensorDefaults(
        camera=KindDefaults("sleepy_camera", sync_window_ms=50, max_staleness_ms=150),
        lidar=KindDefaults("sleepy_lidar", sync_window_ms=60, max_staleness_ms=150),
        radar=KindDefaults("sleepy_radar", transport="grpc", sync_window_ms=50, max_staleness_ms=150),
    )
    with tempfile.TemporaryDirectory(prefix="bench_ros_") as tmp:
        models = Path(tmp) / "models"
        models.mkdir()
        for k in KINDS:
            (models / f"sleepy_{k}").symlink_to(TEST_MODELS / f"sleepy_{k}", target_is_directory=True)
        profile = Path(tmp) / "ros.yaml"
        profile.write_text(
            "sensor_defaults:\n"
            "  lidar: {model: sleepy_lidar, sync_window_ms: 60, max_staleness_ms: 150}\n"
            "  camera: {model: sleepy_camera, sync_window_ms: 50, max_staleness_ms: 150}\n"
            "  radar: {model: sleepy_radar, transport: grpc, sync_window_ms: 50, max_staleness_ms: 150}\n"
        )
        from anyio.from_thread import start_blocking_portal

        server = EmbeddedTriton([models], startup_timeout_s=120.0)
        with start_blocking_portal(backend="asyncio") as portal, portal.wrap_async_context_manager(server):
            base = load_config(ROOT / "launch" / "replay.yaml")
            cfg = dataclasses.replace(
                base, sensor_defaults=defaults, server=dataclasses.replace(base.server, url=server.grpc_url)
            )
            cfg = resolve_sensors(cfg, rig)
            live = _live(cfg)
            ros = _ros(base, profile, server.grpc_url)
    result: dict[str, Any] = {
        "environment": environment(),
        "drive": str(DRIVE.relative_to(ROOT)),
        "models": "sleepy_lidar/radar/camera (20/30/40 ms)",
        "live": live,
        "ros": ros,
        "node_overhead_p50_ms": round(ros["processing_ms"].get("p50", 0.0) - live["latency_ms"].get("p50", 0.0), 2),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    sys.stdout.write(json.dumps({k: v for k, v in result.items() if k != "environment"}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
