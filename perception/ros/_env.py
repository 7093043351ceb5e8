"""The one place that knows what rclpy needs from the process environment.

From the ``ros`` extra (PyPI wheels, no ROS distribution): ``ros-rclpy`` brings
``ros-wheels-bootstrapper``, whose ``.pth`` file re-executes the venv's interpreter once at start-up with
the wheels' library directories on ``LD_LIBRARY_PATH`` (the dynamic linker reads it only when a process
starts, so it cannot be set from here). ``rmw_fastrtps_cpp`` is the wheels' default middleware and they
need no ``AMENT_PREFIX_PATH``. In a sourced ROS 2 workspace the system rclpy is used as it is. Either
way nothing is set here; a process in which rclpy cannot load gets one line saying how to fix it.
"""

from __future__ import annotations

from perception.errors import ConfigError

__all__ = ["require_rclpy"]

_HINT = (
    "install the ROS 2 extra into this environment (pip install -e '.[ros]'; a process started by this venv's "
    "python then finds the wheels' libraries), or source a ROS 2 workspace (source /opt/ros/<distro>/setup.bash)"
)


def require_rclpy() -> None:
    """Import rclpy, or raise :class:`ConfigError` naming the cause and the fix."""
    try:
        import rclpy  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"rclpy cannot be loaded ({str(exc).splitlines()[0]}): {_HINT}") from exc
