"""Helpers of the ROS 2 tests: a profile, a node under test with what spins it, a subscriber of the test's own,
a bounded wait."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DRIVE = ROOT / "replay_data" / "urban_seed7_10s.mcap"


def write_profile(path: Path, *, camera: str = "sleepy_camera", extra: str = "") -> Path:
    """The reference lidar and radar models (they find the objects); cameras answer by a latency-bound
    test model (no objects), so the two cores are not spent on the camera CNN.

    Margins that a loaded host cannot break (what a frame holds is tested here, keeping up in real time
    is ``bench/bench_ros.py``'s): a budget of seconds, a queue of as many frames, and a circuit that stays
    closed. With a budget of 400 ms, a busy 2-core host (two busy loops and the rest of the suite beside
    it) had the lidar model late in 10 of 100 frames; three late in a row opened its circuit, and it was
    skipped in 38 frames."""
    path.write_text(
        "sensor_defaults:\n"
        "  lidar: {model: lidar_detector, sync_window_ms: 60, max_staleness_ms: 150}\n"
        f"  camera: {{model: {camera}, sync_window_ms: 50, max_staleness_ms: 150}}\n"
        "  radar: {model: radar_detector, transport: grpc, sync_window_ms: 50, max_staleness_ms: 150}\n"
        "budget: {total_ms: 5000, recorded_total_ms: 5000}\n"
        "pipeline: {queue_size: 50, circuit: {failure_threshold: 1000}}\n"
        "ros: {diagnostics_period_ms: 200, diagnostics_window: 20, warn_rate: 0.1, error_rate: 0.9}\n" + extra
    )
    return path


class OwnRos:
    """What a test runs over real rclpy in this process, in a context of its own (the ``ros`` fixture): the node
    under test (:meth:`node`: a ``FusionNode``, unconfigured), other nodes beside it (:meth:`other`: a bag player, a
    camera driver), and an executor on some of them (:meth:`executor`: the test spins it, or a thread of its
    own does). :meth:`close` takes it down in the order every test did by hand, each step done whatever an
    earlier one raised: the node released (deactivated and cleaned up: its live runtime closed), the spinning
    stopped (its thread joined, 10 s at most), the executor shut down, the other nodes and the node destroyed,
    the context shut down."""

    def __init__(self) -> None:
        self._context: Any = None
        self._node: Any = None  # the FusionNode
        self._others: list[Any] = []
        self._executor: Any = None
        self._stop = threading.Event()
        self._spinner: threading.Thread | None = None

    @property
    def context(self) -> Any:
        """The context (initialised when first asked)."""
        if self._context is None:
            import rclpy

            self._context = rclpy.Context()
            rclpy.init(context=self._context)
        return self._context

    def node(self, params: Mapping[str, str], *, overrides: Sequence[Any] = (), **kwargs: Any) -> Any:
        """The ``FusionNode`` under test: ``params`` (and ``overrides``: rclpy Parameters) its parameter
        overrides, ``kwargs`` the rest of its constructor's."""
        from rclpy.parameter import Parameter

        from perception.ros._node import FusionNode

        assert self._node is None, "one node under test"
        parameters = [*(Parameter(k, value=v) for k, v in params.items()), *overrides]
        self._node = FusionNode(context=self.context, parameter_overrides=parameters, **kwargs)
        return self._node

    def other(self, name: str) -> Any:
        """A plain node ``name`` in the context."""
        import rclpy

        node = rclpy.create_node(name, context=self.context)
        self._others.append(node)
        return node

    def executor(self, *nodes: Any, spin_s: float | None = None) -> Any:
        """A ``SingleThreadedExecutor`` on ``nodes``; with ``spin_s``, spun (``spin_once(timeout_sec=spin_s)``) on a
        thread of its own until :meth:`close`."""
        from rclpy.executors import SingleThreadedExecutor

        assert self._executor is None, "one executor"
        self._executor = executor = SingleThreadedExecutor(context=self.context)
        for node in nodes:
            executor.add_node(node)
        if spin_s is not None:

            def spin() -> None:
                while not self._stop.is_set():
                    executor.spin_once(timeout_sec=spin_s)

            self._spinner = threading.Thread(target=spin, name="test-spin", daemon=True)
            self._spinner.start()
        return executor

    def _stop_spinning(self) -> None:
        self._stop.set()
        if self._spinner is not None:
            self._spinner.join(timeout=10)

    def close(self) -> None:
        with contextlib.ExitStack() as down:  # callbacks run last-pushed first, each whatever the others raise
            if self._context is not None:
                down.callback(self._context.try_shutdown)
            if self._node is not None:
                down.callback(self._node.destroy_node)
            for node in reversed(self._others):
                down.callback(node.destroy_node)
            if self._executor is not None:
                down.callback(self._executor.shutdown)
            down.callback(self._stop_spinning)
            if self._node is not None:
                down.callback(self._node.release)


@dataclass
class Observed:
    """What the test's own subscriber received."""

    markers: list[Any] = field(default_factory=list)  # MarkerArray
    diagnostics: list[Any] = field(default_factory=list)  # DiagnosticArray
    lidar_stamps: list[int] = field(default_factory=list)  # header stamps seen on the lidar topic
    processing_ms: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Subscriber:
    """A node of the test's own (own context), spinning on a thread: the node's outputs as any ROS 2
    client sees them."""

    def __init__(self) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import HistoryPolicy, QoSProfile, qos_profile_sensor_data
        from sensor_msgs.msg import PointCloud2
        from std_msgs.msg import Float64
        from visualization_msgs.msg import MarkerArray

        from perception.ros._convert import stamp_ns

        self.seen = Observed()
        self._context = rclpy.Context()
        rclpy.init(context=self._context)
        self._node = rclpy.create_node("perception_test_subscriber", context=self._context)
        seen = self.seen

        def keep(into: list[Any], value: Any) -> None:
            with seen.lock:
                into.append(value)

        self._outputs = [
            self._node.create_subscription(
                MarkerArray, "/perception_fusion/objects", lambda m: keep(seen.markers, m), 100
            ),
            self._node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: keep(seen.diagnostics, m), 100),
            self._node.create_subscription(
                Float64, "/perception_fusion/debug/processing_time_ms", lambda m: keep(seen.processing_ms, m.data), 100
            ),
        ]
        # Best effort, as the player publishes, but with room for a whole drive's sweeps (the sensor-data
        # profile keeps 5): the tests take the drive's span from these stamps, and this process also plays
        # the drive and runs the node, so its executor may fall behind on a loaded host.
        lidar_qos = QoSProfile(
            reliability=qos_profile_sensor_data.reliability, history=HistoryPolicy.KEEP_LAST, depth=200
        )
        self._node.create_subscription(
            PointCloud2,
            "/sensors/lidar_top/points",
            lambda m: keep(seen.lidar_stamps, stamp_ns(m.header.stamp)),
            lidar_qos,
        )
        self._executor = SingleThreadedExecutor(context=self._context)
        self._executor.add_node(self._node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name="test-subscriber", daemon=True)
        self._thread.start()

    def wait_matched(self, timeout_s: float) -> None:
        """Until each output subscription is matched with the node's publisher (DDS discovery between
        this context and the node's: on a loaded host it took seconds, and the node's first frames were
        published before it, to nobody)."""
        wait_for(lambda: all(s.get_publisher_count() > 0 for s in self._outputs), timeout_s, "the node's outputs")

    def _spin(self) -> None:
        while not self._stop.is_set():
            self._executor.spin_once(timeout_sec=0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._executor.shutdown()
        self._node.destroy_node()
        self._context.try_shutdown()


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``condition`` (bounded): the outputs of a real-time play arrive when they arrive."""
    end = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.05)


def orphan_dds_segments() -> set[str]:
    """Fast DDS shared-memory segments (its SHM transport between processes) that no process maps any
    more: what a participant that was not shut down leaves behind (its port files are meant to stay)."""
    shm = Path("/dev/shm")
    segments = {
        p.name
        for p in shm.iterdir()
        if p.name.startswith("fastdds_") and not p.name.startswith("fastdds_port") and not p.name.endswith("_el")
    }
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:
            continue
        segments = {s for s in segments if s not in text}
    return segments
