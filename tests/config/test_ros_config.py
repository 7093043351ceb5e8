"""The profile's ``ros`` section: its topics are full ROS 2 topic names, checked where the profile loads
(the node's and the player's subscriptions and publishers raised rclpy's exception on them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perception.config import RosConfig, load_config
from perception.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        ("ros: {odometry_topic: '/localization/kinematic state'}\n", "ros.odometry_topic", "ROS 2 topic name"),
        ("ros: {odometry_topic: odom}\n", "ros.odometry_topic", "absolute topic name"),
        ("ros: {odometry_topic: ''}\n", "ros.odometry_topic", "absolute topic name"),
        ("ros: {topics: {lidar_top: /a b}}\n", "ros.topics.lidar_top", "ROS 2 topic name"),
        ("ros: {topics: {lidar_top: /sensors//points}}\n", "ros.topics.lidar_top", "ROS 2 topic name"),
        ("ros: {topics: {lidar_top: /sensors/3d/points}}\n", "ros.topics.lidar_top", "starting with a digit"),
        ("ros: {topics: {lidar_top: /sensors/lidar/}}\n", "ros.topics.lidar_top", "ROS 2 topic name"),
        ("ros: {topics: {lidar_top: /}}\n", "ros.topics.lidar_top", "ROS 2 topic name"),
        ("ros: {topics: {cam: /cam-front/image}}\n", "ros.topics.cam", "ROS 2 topic name"),
        (f"ros: {{topics: {{lidar_top: /{'a' * 247}}}}}\n", "ros.topics.lidar_top", "at most 247 characters"),
    ],
)
def test_a_topic_that_is_no_ros_2_topic_name_names_the_file_and_key(
    tmp_path: Path, text: str, key: str, fragment: str
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: {key}: ") and fragment in msg and "\n" not in msg, msg


def test_full_topic_names_are_taken() -> None:
    ros = RosConfig(
        topics={"lidar_top": "/sensors/lidar_top/points", "cam": "/_hidden/Cam_2/image_raw"},
        odometry_topic="/localization/kinematic_state",
    )
    assert ros.odometry_topic == "/localization/kinematic_state"
    assert RosConfig(odometry_topic=f"/{'a' * 246}").odometry_topic.endswith("a")
