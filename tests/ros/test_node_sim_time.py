"""``perception_fusion`` on simulated time over real rclpy on loopback: a bag played at twice its rate (its
``/clock`` running 2x faster than the wall clock, its messages stamped on it) and looped, and the stamps of the
outputs."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from ros_helpers import DRIVE, OwnRos, wait_for, write_profile

from perception.server import EmbeddedTriton

S = 1_000_000_000
MS = 1_000_000


@pytest.mark.parametrize("time_base", ["auto", "estimate"])
def test_a_bag_played_at_twice_its_rate_and_looped_gives_its_frames_stamped_with_their_trigger_s_stamps(
    triton: EmbeddedTriton, tmp_path: Path, time_base: str, ros: OwnRos
) -> None:
    # On sim time the offset of the ROS clock to the host's was fixed at activation: a bag played at --rate 2
    # drifted past max_stamp_skew_ms (1 s) within a second of wall time, and every sample after was dropped as
    # a clock jump (estimate: re-anchored again and again). And under estimate the outputs were stamped with the
    # frame's host time plus that offset, not with their trigger's stamp (which every ROS consumer matches by).
    # Played --loop, the clock and the stamps go back to the bag's start: a new live runtime takes them.
    import numpy as np
    from builtin_interfaces.msg import Time
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter
    from rclpy.qos import qos_profile_sensor_data
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import PointCloud2, PointField
    from std_msgs.msg import Header
    from visualization_msgs.msg import MarkerArray

    from perception.kinds import kind_def
    from perception.ros._convert import sample_to_cloud, stamp_ns, to_stamp
    from perception.types import PointCloudSample

    profile = write_profile(tmp_path / "ros.yaml")
    params = {
        "profile": str(profile),
        "rig": str(DRIVE),
        "url": triton.grpc_url,
        "sensors": "lidar_top",
        "time_base": time_base,
    }
    node = ros.node(params, overrides=[Parameter("use_sim_time", value=True)])
    bag = ros.other("bag_player")
    clock = bag.create_publisher(Clock, "/clock", 10)
    lidar = bag.create_publisher(PointCloud2, "/sensors/lidar_top/points", qos_profile_sensor_data)
    stamps: list[int] = []
    lock = threading.Lock()

    def keep(msg: Any) -> None:
        with lock:
            stamps.append(stamp_ns(msg.markers[0].header.stamp))

    objects = bag.create_subscription(MarkerArray, "/perception_fusion/objects", keep, 100)
    ros.executor(node, bag, spin_s=0.02)
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


def test_under_time_base_estimate_a_frame_is_stamped_with_its_trigger_s_header_stamp(
    triton: EmbeddedTriton, tmp_path: Path, ros: OwnRos
) -> None:
    # On the system clock, time_base estimate: a frame was stamped with its host time (stamp + the sensor's
    # estimated offset: its delivery delay among it) plus the offset of the clocks at activation, not with
    # its trigger's stamp. Messages 30 ms old as they come (a driver's delay), handed to the node's callback.
    import numpy as np
    from builtin_interfaces.msg import Time
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import PointCloud2, PointField
    from std_msgs.msg import Header

    from perception.kinds import kind_def
    from perception.ros._convert import sample_to_cloud, stamp_ns, to_stamp
    from perception.types import PointCloudSample

    profile = write_profile(tmp_path / "ros.yaml")
    params = {"profile": str(profile), "rig": str(DRIVE), "url": triton.grpc_url, "sensors": "lidar_top"}
    node = ros.node(params, overrides=[Parameter("time_base", value="estimate")])
    ok = TransitionCallbackReturn.SUCCESS
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


def _sim_node(
    ros: OwnRos, triton: EmbeddedTriton, tmp_path: Path, sensors: str, extra: str = "", *, sim: bool = True
) -> Any:
    """The test's node on simulated time (configured, not spun): the test sets its ROS clock as ``/clock`` would
    (rclpy's time source calls the same ``set_ros_time_override``) and hands messages to its subscription callbacks
    itself. ``sim`` False: on the system clock."""
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    profile = write_profile(tmp_path / "ros.yaml", extra=extra)
    params = {"profile": str(profile), "rig": str(DRIVE), "url": triton.grpc_url, "sensors": sensors}
    node = ros.node(params, overrides=[Parameter("use_sim_time", value=sim)])
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, node.failure
    return node


def _set_clock(node: Any, t: int) -> None:
    """The node's ROS clock at ``t`` (ns), as a ``/clock`` message sets it: its jump callbacks run here."""
    from rclpy.time import Time as RosTime

    node.get_clock().set_ros_time_override(RosTime(nanoseconds=t))


def _lidar_cloud(node: Any, t: int) -> Any:
    """A lidar_top PointCloud2 stamped ``t``, and the node's callback of its topic."""
    import numpy as np
    from builtin_interfaces.msg import Time
    from sensor_msgs.msg import PointCloud2, PointField
    from std_msgs.msg import Header

    from perception.kinds import kind_def
    from perception.ros._convert import sample_to_cloud, to_stamp
    from perception.types import PointCloudSample

    fields = kind_def("lidar").point_fields
    sample = PointCloudSample("lidar_top", 0, "lidar_top", np.zeros((8, len(fields)), np.float32), fields)
    (on_cloud,) = [cb for _, topic, cb in node.inputs() if topic == node.topics["lidar_top"].data]
    return on_cloud, sample_to_cloud(PointCloud2, PointField, sample, Header(stamp=to_stamp(Time, t)))


def test_a_frame_due_on_the_ros_clock_is_made_at_the_clock_that_makes_it_due_not_at_a_poll(
    triton: EmbeddedTriton, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ros: OwnRos
) -> None:
    # On the ROS clock the live loop slept min(50 ms, the deadline's distance on that clock) and looked again:
    # a bag played faster than 1x had a frame made up to 50 ms of real time after its /clock made it due. Now
    # each /clock forward wakes the loop when a frame is due by it. The frame waits for a silent radar, its
    # deadline an hour of ROS time ahead (transit_ms; the silence timer as far): the clock jumps there, and the
    # loop's own look, patched to an hour, would never come within the test.
    from rclpy.lifecycle import TransitionCallbackReturn

    import perception.live._runtime as live_runtime

    monkeypatch.setattr(live_runtime, "CLOCK_POLL_S", 3600.0)
    hour = 3600 * S
    extra = f"live: {{transit_ms: {hour // MS}, trigger_tolerance_ms: {hour // MS}}}\n"
    node = _sim_node(ros, triton, tmp_path, "lidar_top,radar_front", extra)
    start = 1_700_000_000 * S
    _set_clock(node, start)
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS, node.failure
    live = node.live
    assert live is not None and node._pubs is not None
    pipeline_ms: list[float] = []
    pipeline = node._pubs.pipeline
    publish = pipeline.publish
    pipeline.publish = lambda msg: (pipeline_ms.append(msg.data), publish(msg))
    on_cloud, cloud = _lidar_cloud(node, start)
    on_cloud(cloud)
    wait_for(lambda: live.status()["intake"]["samples"] == 1, 30, "the lidar sample taken")
    assert pipeline_ms == [] and live.status()["frames"] == 0  # pending: the radar's window is open
    # past the frame's deadline (its time + the widest sync window, 60 ms, + transit), before the timer's
    _set_clock(node, start + hour + 70 * MS)
    wait_for(lambda: len(pipeline_ms) == 1, 30, "the frame due at the /clock")
    # made on the clock that made it due: latency on the ROS clock, which stood still since
    assert pipeline_ms == [(hour + 70 * MS) / 1e6]


def test_a_reopen_as_the_clock_goes_back_does_not_block_the_executor_and_counts_what_it_could_not_hold(
    triton: EmbeddedTriton, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ros: OwnRos
) -> None:
    # The ROS clock going back reopened the live runtime in the subscription callback of the next message: the
    # executor stood still for the open (a few hundred ms), and the subscriptions' queues (sensor data: keep
    # the last 5) dropped what came meanwhile, counted nowhere. Now the reopen runs on a thread of its own; the
    # messages that come meanwhile are held and given to the new runtime, those past the hold (live.intake_queue,
    # 4 here) counted per sensor in /diagnostics. The reopen's open waits here until the test lets it go.
    from rclpy.lifecycle import TransitionCallbackReturn

    from perception.live import LiveRuntime
    from perception.ros._diagnostics import WARN

    gate = threading.Event()
    waited: list[bool] = []  # per gated open: whether the test let it go (False: it gave up waiting)
    opens = [0]
    enter = LiveRuntime.__enter__

    def gated_enter(self: LiveRuntime) -> LiveRuntime:
        opens[0] += 1
        if opens[0] > 1:  # the activation's open goes through
            waited.append(gate.wait(timeout=10))
        return enter(self)

    monkeypatch.setattr(LiveRuntime, "__enter__", gated_enter)
    node = _sim_node(ros, triton, tmp_path, "lidar_top", "live: {intake_queue: 4}\n")
    start = 1_700_000_000 * S
    try:
        _set_clock(node, start + 5 * S)
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS, node.failure
        first = node.live
        assert first is not None
        on_cloud, cloud = _lidar_cloud(node, start + 5 * S)
        on_cloud(cloud)
        wait_for(lambda: first.status()["intake"]["samples"] == 1, 30, "the first sample taken")
        _set_clock(node, start)  # looped
        for i in range(1, 7):  # each handed over as the executor would, one after the other
            _set_clock(node, start + i * 100 * MS)
            on_cloud, cloud = _lidar_cloud(node, start + i * 100 * MS)
            on_cloud(cloud)
        assert waited == [], "a message's callback waited for the reopen"
        # /diagnostics goes on while the runtime reopens (it said nothing till a runtime was open again)
        published: list[Any] = []
        monkeypatch.setattr(node._pubs.diagnostics, "publish", published.append)
        node._publish_diagnostics()
        said = {st.name: st for st in published[0].status}
        reopening = said["perception_fusion: live runtime"]
        assert reopening.level == bytes([2]) and reopening.message == "reopening", reopening
        assert "perception_fusion: frame budget" in said
        lidar_said = said["perception_fusion: sensor lidar_top"]  # the 2 past the hold, said in this status
        assert lidar_said.level >= bytes([WARN]) and "2 message(s) not taken while the live runtime reopened" in (
            lidar_said.message
        ), lidar_said
        gate.set()
        wait_for(lambda: node.live is not None and node.live is not first, 30, "the new live runtime")
        again = node.live
        taken = ("samples", "clock_jump_dropped", "late", "out_of_order", "duplicate")
        wait_for(lambda: sum(again.status()["intake"][k] for k in taken) == 4, 30, "the 4 samples held")
        intake = again.status()["intake"]
        assert intake["samples"] == 4 and intake["clock_jump_dropped"] == 0, intake
        assert waited == [True]
        assert node._diag is not None
        lidar = {s.name: s for s in node._diag.statuses(again.status())}["perception_fusion: sensor lidar_top"]
        assert lidar.values["dropped_reopening"] == "2", lidar.values  # (its WARN said above, once)
    finally:
        gate.set()


def test_a_stamp_off_the_ros_clock_is_said_off_the_ros_clock(
    triton: EmbeddedTriton, tmp_path: Path, caplog: pytest.LogCaptureFixture, ros: OwnRos
) -> None:
    # On simulated time the live assembly runs on the ROS clock, but a stamp dropped as a clock jump was said
    # to be "off the host's monotonic clock", and to need "live.time_base: offset (with offset_ms) or estimate",
    # where the node sets offset_ms itself. A message stamped 5 s behind the ROS clock (max_stamp_skew_ms: 1 s).
    import logging

    from rclpy.lifecycle import TransitionCallbackReturn

    node = _sim_node(ros, triton, tmp_path, "lidar_top")
    start = 1_700_000_000 * S
    _set_clock(node, start + 5 * S)
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS, node.failure
    live = node.live
    assert live is not None
    on_cloud, cloud = _lidar_cloud(node, start)
    with caplog.at_level(logging.WARNING, logger="perception.live"):
        on_cloud(cloud)
        wait_for(lambda: live.status()["intake"]["clock_jump_dropped"] == 1, 30, "the sample dropped")
    assert "stamp 1700000000000000000 ns is 5.000 s off the node's ROS clock (use_sim_time: /clock)" in caplog.text
    # and what it needs is the node's own parameter (the profile's live.offset_ms the node sets itself)
    assert "stamps on another clock need the node's parameter time_base: estimate (-p time_base:=estimate)\n" in (
        caplog.text
    )


def test_diagnostics_counts_what_every_live_runtime_of_the_node_dropped(
    triton: EmbeddedTriton, tmp_path: Path, ros: OwnRos
) -> None:
    # A live runtime's counts start at 0: after a reopen as the ROS clock went back, or a deactivate and
    # activate, /diagnostics' frame budget said the new runtime's drops only, the earlier ones' gone. A message
    # stamped 5 s off the ROS clock (max_stamp_skew_ms: 1 s) dropped by each of three runtimes.
    from rclpy.lifecycle import TransitionCallbackReturn

    node = _sim_node(ros, triton, tmp_path, "lidar_top")
    start = 1_700_000_000 * S
    ok = TransitionCallbackReturn.SUCCESS
    _set_clock(node, start + 5 * S)
    assert node.trigger_activate() == ok, node.failure
    assert node._pubs is not None
    published: list[Any] = []
    node._pubs.diagnostics.publish = published.append

    def budget() -> dict[str, str]:
        """The frame budget's values in the /diagnostics the node publishes now."""
        node._publish_diagnostics()
        (status,) = [s for s in published[-1].status if s.name == "perception_fusion: frame budget"]
        return {v.key: v.value for v in status.values}

    def dropped(now: int) -> None:
        """A message stamped 5 s before ``now`` dropped by the node's live runtime."""
        live = node.live
        assert live is not None
        on_cloud, cloud = _lidar_cloud(node, now - 5 * S)
        on_cloud(cloud)
        wait_for(lambda: live.status()["intake"]["clock_jump_dropped"] == 1, 30, "the sample dropped")

    dropped(start + 5 * S)
    assert budget()["samples_clock_jump"] == "1"
    first = node.live
    _set_clock(node, start)  # looped: the live runtime reopens
    wait_for(lambda: node.live is not None and node.live is not first, 30, "the reopened live runtime")
    assert budget()["samples_clock_jump"] == "1"
    dropped(start)
    assert budget()["samples_clock_jump"] == "2"
    assert node.trigger_deactivate() == ok and node.trigger_activate() == ok, node.failure
    assert budget()["samples_clock_jump"] == "2"
    dropped(start)
    assert budget()["samples_clock_jump"] == "3"


def test_a_live_runtime_that_stopped_serving_is_reopened_and_what_it_refused_is_counted(
    triton: EmbeddedTriton, tmp_path: Path, ros: OwnRos
) -> None:
    # A live runtime that failed (serving ended: closed under the node) refused every message after it with
    # RuntimeClosedError, which the node took as a close of its own and dropped, uncounted, for ever. Now the
    # message is counted (dropped_reopening) and the next one reopens the runtime.
    from rclpy.lifecycle import TransitionCallbackReturn

    node = _sim_node(ros, triton, tmp_path, "lidar_top")
    start = 1_700_000_000 * S
    _set_clock(node, start + 5 * S)
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS, node.failure
    dead = node.live
    assert dead is not None
    dead.close()  # as a failed runtime's lifetime ends: the node was not asked
    on_cloud, cloud = _lidar_cloud(node, start + 5 * S)
    on_cloud(cloud)  # refused: the runtime is closed
    assert node._diag is not None
    lidar = {st.name: st for st in node._diag.statuses(None)}["perception_fusion: sensor lidar_top"]
    assert lidar.values["dropped_reopening"] == "1", lidar.values
    on_cloud(cloud)  # the reopen backs off (0.5 s after a failure): counted too
    lidar = {st.name: st for st in node._diag.statuses(None)}["perception_fusion: sensor lidar_top"]
    assert lidar.values["dropped_reopening"] == "2", lidar.values
    while time.monotonic() < node._reopen_after:  # the back-off's end (not a synchronisation)
        time.sleep(0.05)
    _set_clock(node, start + 5 * S + 100 * MS)
    on_cloud, cloud = _lidar_cloud(node, start + 5 * S + 100 * MS)
    on_cloud(cloud)  # held while the runtime reopens, then taken
    wait_for(lambda: node.live is not None and node.live is not dead, 60, "a new live runtime")
    again = node.live
    wait_for(lambda: again.status()["intake"]["samples"] == 1, 30, "the held sample taken by the new runtime")


def test_messages_held_while_a_runtime_on_the_system_clock_reopens_arrive_on_its_clock(
    triton: EmbeddedTriton, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ros: OwnRos
) -> None:
    # A reopen on the system clock (the runtime stopped serving): the messages held meanwhile were handed over
    # with their arrival read on the ROS clock (epoch ns), where the runtime assembles on the monotonic clock:
    # each dropped as a clock jump (time_base offset; under estimate, every sample after it out of order).
    from rclpy.lifecycle import TransitionCallbackReturn

    from perception.live import LiveRuntime

    gate = threading.Event()
    opens = [0]
    enter = LiveRuntime.__enter__

    def gated_enter(self: LiveRuntime) -> LiveRuntime:
        opens[0] += 1
        if opens[0] > 1:  # the activation's open goes through; the reopen's waits for the test
            gate.wait(timeout=10)
        return enter(self)

    monkeypatch.setattr(LiveRuntime, "__enter__", gated_enter)
    node = _sim_node(ros, triton, tmp_path, "lidar_top", sim=False)
    try:
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS, node.failure
        dead = node.live
        assert dead is not None
        dead.close()  # failed: closed under the node
        now = node.get_clock().now().nanoseconds
        on_cloud, cloud = _lidar_cloud(node, now)
        on_cloud(cloud)  # refused, counted: the runtime reopens after its back-off
        while time.monotonic() < node._reopen_after:  # the back-off's end (not a synchronisation)
            time.sleep(0.05)
        for _ in range(2):  # the first starts the reopen and is held, the second is held
            on_cloud, cloud = _lidar_cloud(node, node.get_clock().now().nanoseconds)
            on_cloud(cloud)
        assert node._held is not None and len(node._held) == 2, node._held
        gate.set()
        wait_for(lambda: node.live is not None and node.live is not dead, 30, "the new live runtime")
        again = node.live
        taken = ("samples", "clock_jump_dropped", "late", "out_of_order", "duplicate")
        wait_for(lambda: sum(again.status()["intake"][k] for k in taken) >= 2, 30, "the 2 held samples")
        intake = again.status()["intake"]
        assert intake["samples"] == 2 and intake["clock_jump_dropped"] == 0, intake
    finally:
        gate.set()
