"""perception.ros._run: the rclpy context the commands run in."""

from __future__ import annotations

from perception.ros._run import _rclpy_context


def test_ros_arguments_reach_rcl_as_ros_arguments() -> None:
    # The command line's "--ros-args" is consumed by its option: rcl got "-p topics.lidar_top:=/x" without it
    # and read no parameter from it (the help's own example did nothing).
    from rclpy.node import Node

    with _rclpy_context(["-p", "topics.lidar_top:=/x", "-r", "__ns:=/probe"]) as context:
        node = Node("perception_args_probe", context=context)
        try:
            node.declare_parameter("topics.lidar_top", "/sensors/lidar_top/points")
            assert node.get_parameter("topics.lidar_top").value == "/x"
            assert node.get_namespace() == "/probe"
        finally:
            node.destroy_node()
