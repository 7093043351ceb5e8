"""``perception_fusion`` on simulated time over real rclpy on loopback: a bag played at twice its rate (its
``/clock`` running 2x faster than the wall clock, its messages stamped on it) and looped, and the stamps of the
outputs."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from ros_helpers import DRIVE, wait_for, write_profile

from perception.server import EmbeddedTriton

S = 1_000_000_000
MS = 1_000_000


@pytest.mark.parametrize("time_base", ["auto", "estimate"])
def test_a_bag_played_at_twice_its_rate_and_looped_gives_its_frames_stamped_with_their_trigger_s_stamps(
    triton: EmbeddedTriton, tmp_path: Path, time_base: str
) -> None:
    # On sim time the offset of the ROS clock to the host's was fixed at activation: a bag played at --rate 2
    # drifted past max_stamp_skew_ms (1 s) within a second of wall time, and every sample after was dropped as
    # a clock jump (estimate: re-anchored again and again). And under estimate the outputs were stamped with the
    # frame's host time plus that offset, not with their trigger's stamp (which every ROS consumer matches by).
    # Played --loop, the clock and the stamps go back to the bag's start: a new live runtime takes them.
    import numpy as np
    import rclpy
    from builtin_interfaces.msg import Time
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter
    from rclpy.qos import qos_profile_sensor_data
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import PointCloud2, PointField
    from std_msgs.msg import Header
    from visualization_msgs.msg import MarkerArray

    from perception.kinds import kind_def
    from perception.ros._convert import sample_to_cloud, stamp_ns, to_stamp
    from perception.ros._node import FusionNode
    from perception.types import PointCloudSample

    profile = write_profile(tmp_path / "ros.yaml")
    params = {
        "profile": str(profile),
        "rig": str(DRIVE),
        "url": triton.grpc_url,
        "sensors": "lidar_top",
        "time_base": time_base,
    }
    context = rclpy.Context()
    rclpy.init(context=context)
    node = FusionNode(
        context=context,
        parameter_overrides=[
            *(Parameter(k, value=v) for k, v in params.items()),
            Parameter("use_sim_time", value=True),
        ],
    )
    bag = rclpy.create_node("bag_player", context=context)
    clock = bag.create_publisher(Clock, "/clock", 10)
    lidar = bag.create_publisher(PointCloud2, "/sensors/lidar_top/points", qos_profile_sensor_data)
    stamps: list[int] = []
    lock = threading.Lock()

    def keep(msg: Any) -> None:
        with lock:
            stamps.append(stamp_ns(msg.markers[0].header.stamp))

    objects = bag.create_subscription(MarkerArray, "/perception_fusion/objects", keep, 100)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    executor.add_node(bag)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.02)

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    fields = kind_def("lidar").point_fields
    sample = PointCloudSample("lidar_top", 0, "lidar_top", np.zeros((8, len(fields)), np.float32), fields)
    ok = TransitionCallbackReturn.SUCCESS
    start = 1_700_000_000 * S + 123_456_789  # ns that a float of ms would not keep
    sent: list[int] = []
    taken = ("samples", "clock_jump_dropped", "late", "out_of_order", "duplicate")

    def play() -> None:
        """3 s of the bag in 1.5 s: a lidar sweep every 100 ms of it, the clock before each (as bag play --clock)."""
        for i in range(1, 31):
            t = start + i * 100 * MS
            clock.publish(Clock(clock=to_stamp(Time, t)))
            lidar.publish(sample_to_cloud(PointCloud2, PointField, sample, Header(stamp=to_stamp(Time, t))))
            sent.append(t)
            time.sleep(0.05)

    def played(live: Any) -> None:
        """Every sample of a play taken by ``live``, none dropped for its stamp, a frame for each."""
        wait_for(lambda: sum(live.status()["intake"][k] for k in taken) >= 27, 30, "the bag's samples taken")
        intake = live.status()["intake"]
        assert intake["clock_jump"] == 0 and intake["out_of_order"] == 0, intake
        wait_for(lambda: live.status()["intake"]["frames_by_trigger"] >= 25, 30, "the bag's frames")

    try:
        assert node.trigger_configure() == ok, node.failure
        clock.publish(Clock(clock=to_stamp(Time, start)))
        wait_for(lambda: not node.waiting_for_clock(), 30, "the node's clock")
        assert node.trigger_activate() == ok, node.failure
        first = node.live
        assert first is not None
        wait_for(lambda: objects.get_publisher_count() > 0, 30, "the node's objects")
        play()
        played(first)
        clock.publish(Clock(clock=to_stamp(Time, start)))  # looped: back to the start
        play()
        again = node.live
        assert again is not None and again is not first
        played(again)
        wait_for(lambda: len(stamps) >= 50, 30, "the frames' objects")
        with lock:
            got = list(stamps)
        # every output carries its trigger's own stamp, to the ns
        assert set(got) <= set(sent), sorted(set(got) - set(sent))[:5]
    finally:
        node.release()
        stop.set()
        spinner.join(timeout=10)
        executor.shutdown()
        bag.destroy_node()
        node.destroy_node()
        context.try_shutdown()


def test_under_time_base_estimate_a_frame_is_stamped_with_its_trigger_s_header_stamp(
    triton: EmbeddedTriton, tmp_path: Path
) -> None:
    # On the system clock, time_base estimate: a frame was stamped with its host time (stamp + the sensor's
    # estimated offset: its delivery delay among it) plus the offset of the clocks at activation, not with
    # its trigger's stamp. Messages 30 ms old as they come (a driver's delay), handed to the node's callback.
    import numpy as np
    import rclpy
    from builtin_interfaces.msg import Time
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import PointCloud2, PointField
    from std_msgs.msg import Header

    from perception.kinds import kind_def
    from perception.ros._convert import sample_to_cloud, stamp_ns, to_stamp
    from perception.ros._node import FusionNode
    from perception.types import PointCloudSample

    profile = write_profile(tmp_path / "ros.yaml")
    params = {"profile": str(profile), "rig": str(DRIVE), "url": triton.grpc_url, "sensors": "lidar_top"}
    context = rclpy.Context()
    rclpy.init(context=context)
    node = FusionNode(
        context=context,
        parameter_overrides=[
            *(Parameter(k, value=v) for k, v in params.items()),
            Parameter("time_base", value="estimate"),
        ],
    )
    ok = TransitionCallbackReturn.SUCCESS
    try:
        assert node.trigger_configure() == ok and node.trigger_activate() == ok, node.failure
        assert node._pubs is not None
        stamps: list[int] = []
        objects = node._pubs.objects
        publish = objects.publish
        objects.publish = lambda msg: (stamps.append(stamp_ns(msg.markers[0].header.stamp)), publish(msg))
        (on_cloud,) = [cb for _, topic, cb in node.inputs() if topic == node.topics["lidar_top"].data]
        fields = kind_def("lidar").point_fields
        sample = PointCloudSample("lidar_top", 0, "lidar_top", np.zeros((8, len(fields)), np.float32), fields)
        sent = []
        for _ in range(5):
            t = node.get_clock().now().nanoseconds - 30 * MS
            on_cloud(sample_to_cloud(PointCloud2, PointField, sample, Header(stamp=to_stamp(Time, t))))
            sent.append(t)
            time.sleep(0.1)
        wait_for(lambda: len(stamps) >= 4, 30, "the frames' objects")
        assert set(stamps[:4]) <= set(sent), ([s - sent[0] for s in stamps], [s - sent[0] for s in sent])
    finally:
        node.release()
        node.destroy_node()
        context.try_shutdown()
