"""``perception ros play``: a recorded drive as ROS 2 topics at its recorded timing, like ``ros2 bag play``.

Each sensor is played on its own thread (:func:`perception.live.play_schedule`, with the same faults as
``perception live``); headers are stamped on the player's ROS clock at the sample's capture time in the
play (plus an injected clock jump). Cameras also publish ``CameraInfo`` from the rig's calibration, and
the drive's ego poses go out as ``nav_msgs/Odometry`` (``map`` -> ``base_link``). Sensor-data QoS.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from builtin_interfaces.msg import Time
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo, CompressedImage, PointCloud2, PointField
from std_msgs.msg import Header

from perception.config import RosConfig
from perception.errors import ConfigError, PerceptionError
from perception.live import Faults, drive_items, play_schedule
from perception.ros._convert import (
    calibration_to_info,
    ego_to_odometry,
    sample_to_cloud,
    sample_to_compressed,
    to_stamp,
)
from perception.ros._topics import SensorTopics, sensor_topics
from perception.types import EgoPose, ImageSample, PointCloudSample, Sample, SensorSpec

__all__ = ["PLAYER_NAME", "Player"]

log = logging.getLogger(__name__)

PLAYER_NAME = "perception_player"


class Player:
    """Publishers for a drive's sensors on ``node``; :meth:`play` plays it once (returns at the end or
    soon after ``stop`` is set) and returns the number of messages published per topic kind."""

    def __init__(
        self,
        node: Node,
        drive: Path,
        ros: RosConfig,
        faults: Faults,
        *,
        span_s: tuple[float, float | None] = (0.0, None),
    ) -> None:
        self._node = node
        self.rig, items = drive_items(drive)
        # A slice of the drive (seconds from its first sample), played as if it started there.
        t0 = min(v[0].t_ns for k, v in items.items() if v and k != "ego")
        lo = t0 + round(span_s[0] * 1e9)
        hi = None if span_s[1] is None else t0 + round(span_s[1] * 1e9)
        if span_s != (0.0, None):
            last = max(v[-1].t_ns for k, v in items.items() if v and k != "ego")
            items = {k: [x for x in v if x.t_ns >= lo and (hi is None or x.t_ns < hi)] for k, v in items.items()}
            if not any(v for k, v in items.items() if k != "ego"):  # it published nothing, and said so with exit 0
                to = "its end" if span_s[1] is None else f"{span_s[1]:g} s"
                raise ConfigError(
                    f"no sample from {span_s[0]:g} s to {to}: the drive's samples span 0 to {(last - t0) / 1e9:.3f} s",
                    file=str(drive),
                )
        self._items = items
        faults.check_sensors(list(self.rig), drive)
        if played := [v for k, v in items.items() if v and k != "ego"]:  # faults count from the play's start
            faults.check_times((max(v[-1].t_ns for v in played) - min(v[0].t_ns for v in played)) / 1e9, drive)
        self._faults = faults
        self.topics: Mapping[str, SensorTopics] = sensor_topics(self.rig, ros)
        qos = qos_profile_sensor_data
        self._data: dict[str, Any] = {}
        self._info: dict[str, Any] = {}
        for name, t in self.topics.items():
            if t.image is None:
                self._data[name] = node.create_publisher(PointCloud2, t.data, qos)
            else:
                if t.image != "compressed":
                    raise ConfigError(f"the player publishes compressed images; {t.data} is raw", key="ros.topics")
                self._data[name] = node.create_publisher(CompressedImage, t.data, qos)
                if t.camera_info is not None:
                    self._info[name] = node.create_publisher(CameraInfo, t.camera_info, qos)
        self._odom = node.create_publisher(Odometry, ros.odometry_topic, qos)
        self.published: dict[str, int] = {}
        self._lock = threading.Lock()

    def wait_for_subscribers(
        self, timeout_s: float, stop: threading.Event, counts: Mapping[str, int] | None = None
    ) -> bool:
        """Until every data topic has a matched subscriber (DDS discovery), or as many as ``counts`` says
        for its sensor, at most ``timeout_s``. (A topic with a subscriber of its own, such as a recorder,
        would otherwise start the play before the node's subscription matched, and the node would miss
        the first sweeps.)"""
        wanted = {name: max(1, (counts or {}).get(name, 1)) for name in self._data}
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and not stop.is_set():
            if all(pub.get_subscription_count() >= wanted[name] for name, pub in self._data.items()):
                return True
            stop.wait(0.05)
        return False

    def play(self, *, rate: float, stop: threading.Event, start_delay_s: float = 0.2) -> dict[str, int]:
        clock = self._node.get_clock()
        start = time.monotonic_ns() + round(start_delay_s * 1e9)
        stamp_base = clock.now().nanoseconds + round(start_delay_s * 1e9)
        died: dict[str, str] = {}  # sensors whose publishing thread raised (the others played on)

        def sensor_died(sensor: str, exc: Exception) -> None:
            died[sensor] = f"{type(exc).__name__}: {exc}"

        play_schedule(
            self._items,
            self._faults,
            self._emit,
            start_ns=start,
            stamp_base_ns=stamp_base,
            rate=rate,
            stop=stop,
            on_error=sensor_died,
        )
        if died:  # the play went on without them: not a whole play (it ended in a log line and exit 0)
            published = ", ".join(f"{k} {v}" for k, v in sorted(self.published.items()))
            raise PerceptionError(
                "; ".join(f"the publisher of {sensor} died mid-play: {why}" for sensor, why in sorted(died.items()))
                + f" (published: {published or 'nothing'})"
            )
        return dict(self.published)

    def _emit(self, sensor: str, item: Sample | EgoPose) -> None:
        if isinstance(item, EgoPose):
            header = Header(stamp=to_stamp(Time, item.t_ns), frame_id="map")
            self._odom.publish(ego_to_odometry(Odometry, item, header))
            self._count("odometry")
            return
        spec: SensorSpec = self.rig[sensor]
        header = Header(stamp=to_stamp(Time, item.t_ns), frame_id=item.frame_id)
        if isinstance(item, PointCloudSample):
            self._data[sensor].publish(sample_to_cloud(PointCloud2, PointField, item, header))
        elif isinstance(item, ImageSample):
            if sensor in self._info and spec.calibration is not None:
                self._info[sensor].publish(calibration_to_info(CameraInfo, spec.calibration, header))
            self._data[sensor].publish(sample_to_compressed(CompressedImage, item, header))
        self._count(sensor)

    def _count(self, key: str) -> None:
        with self._lock:
            self.published[key] = self.published.get(key, 0) + 1
