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


#: In a process of its own: a second SIGTERM landing while the first one's handler sets the stop event.
_SECOND_SIGNAL_WHILE_STOPPING = """
import signal, threading
from perception.ros._run import _signals_to

stop = threading.Event()
notify_all = stop._cond.notify_all

def notify_all_after_another_signal():
    signal.raise_signal(signal.SIGTERM)  # its handler runs here, inside the first one's stop.set()
    notify_all()

stop._cond.notify_all = notify_all_after_another_signal
with _signals_to(stop):
    signal.raise_signal(signal.SIGTERM)
    assert stop.wait(60)
print("stopped")
"""


def test_a_second_signal_while_the_first_is_handled_still_stops_the_node() -> None:
    # The publisher of `perception live` hung so (its handler ran again inside its own stop.set(), which
    # waited for the lock its thread held); the ROS commands' handler had the same flaw: a service manager's
    # SIGTERM after a Ctrl-C could hang the node in its handler instead of taking it down.
    import subprocess
    import sys

    cmd = [sys.executable, "-c", _SECOND_SIGNAL_WHILE_STOPPING]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=60)  # timeout: a watchdog
    assert done.returncode == 0 and done.stdout == "stopped\n", done.stderr
    assert "SIGTERM: shutting down" in done.stderr and "SIGTERM again: still shutting down" in done.stderr
