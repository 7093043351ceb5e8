"""The runtime inside a ROS 2 stack: ``perception_fusion``, a lifecycle node around
:class:`perception.live.LiveRuntime`, and a player of recorded drives as ROS 2 topics.

Importing this package does not import rclpy; :func:`run_node` and :func:`run_play` do (the ``ros``
extra's wheels, or a sourced ROS 2 workspace). Nothing else in ``perception`` imports rclpy.
"""

from __future__ import annotations

from perception.ros._run import run_node, run_play

__all__ = ["run_node", "run_play"]
