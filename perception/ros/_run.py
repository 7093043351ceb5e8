"""The processes behind ``perception ros node`` and ``perception ros play``: rclpy's context, an
executor, and SIGINT/SIGTERM handled here (not by rclpy) so that a signal takes the node down through
its lifecycle: deactivate (drain, release the live runtime), cleanup (stop the embedded server)."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from perception.config import RuntimeConfig
from perception.errors import ConfigError, PerceptionError
from perception.live import Faults, StopOnSignal
from perception.ros._env import require_rclpy
from perception.scheduler import RunObserver
from perception.types import FrameResult

__all__ = ["run_node", "run_play"]

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _signals_to(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop`` while inside (main thread only)."""

    stopper = StopOnSignal(stop)  # re-entrant: a signal landing inside the first one's stop.set() hung it

    def handler(signum: int, frame: FrameType | None) -> None:
        again = bool(stopper.received)
        stopper(signum, frame)
        if again:
            log.warning("%s again: still shutting down", signal.Signals(signum).name)
        else:
            log.warning("%s: shutting down", signal.Signals(signum).name)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _rcl_quiet(ros_args: Sequence[str]) -> Iterator[None]:
    """rcl's logger silenced (but for fatal) while rclpy reads the ROS arguments: for ones it cannot parse
    it logged '[ERROR] [rcl]: Failed to parse global arguments' beside the error of ours that says which
    and why. Its level is left as it was after -- unless the ROS arguments set it (``--log-level rcl:=``)."""
    from rclpy.impl.logging_severity import LoggingSeverity
    from rclpy.logging import get_logger_level, set_logger_level

    before = get_logger_level("rcl")
    set_logger_level("rcl", LoggingSeverity.FATAL)
    try:
        yield
    finally:
        if not any(a.startswith("rcl:=") for a in ros_args):
            set_logger_level("rcl", before)


@contextlib.contextmanager
def _rclpy_context(ros_args: Sequence[str]) -> Iterator[Any]:
    require_rclpy()
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    context = rclpy.Context()
    # rcl reads ROS arguments only after a "--ros-args" (the one the command line's option consumed): without it
    # "-p name:=value" set no parameter, silently, and a malformed argument went unnoticed.
    args = ["perception", "--ros-args", *ros_args] if ros_args else ["perception"]
    try:
        with _rcl_quiet(ros_args):
            rclpy.init(args=args, context=context, signal_handler_options=SignalHandlerOptions.NO)
    except RuntimeError as exc:  # rclpy's RCLError, UnknownROSArgsError: a mistake in the ROS arguments
        detail = str(exc).split(", at ")[0]  # rcl appends where in its sources it failed
        if type(exc).__name__ == "UnknownROSArgsError":
            detail = f"unknown ROS arguments {detail}"
        raise ConfigError(f"{detail} (in: {' '.join(ros_args)})", key="--ros-args") from exc
    try:
        yield context
    finally:
        with contextlib.suppress(Exception):
            context.try_shutdown()


def run_node(
    parameters: dict[str, str],
    *,
    autostart: bool = True,
    ros_args: Sequence[str] = (),
    stop: threading.Event | None = None,
    on_published: Callable[[FrameResult], None] | None = None,
    observer: RunObserver | None = None,
    defaults: Mapping[str, str] | None = None,
) -> int:
    """Run ``perception_fusion`` until SIGINT/SIGTERM (or ``stop``); with ``autostart`` it configures and
    activates itself (exit code 2 when that fails on a mistake in the profile, rig or parameters, 1 on another
    failure), else a lifecycle manager drives it. ``on_published`` is called with each frame's
    result once its outputs are published (from the live runtime's callback thread). ``observer``: each
    activation's live runtime's (a recorder, ``--record``). ``parameters`` override the node's parameters,
    ``--ros-args -p`` too; ``defaults`` are its parameters' defaults (what ``-p`` overrides). Returns the exit code."""
    stop = stop or threading.Event()
    with _signals_to(stop), _rclpy_context(ros_args) as context:
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.lifecycle import TransitionCallbackReturn
        from rclpy.parameter import Parameter

        from perception.ros._node import FusionNode

        overrides = [Parameter(k, value=v) for k, v in parameters.items()]
        node = FusionNode(
            context=context,
            parameter_overrides=overrides,
            on_published=on_published,
            observer=observer,
            defaults=defaults,
        )
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        code = 0
        try:
            if autostart:
                for step in (node.trigger_configure, node.trigger_activate):
                    if step == node.trigger_activate and node.waiting_for_clock():
                        node.get_logger().info("use_sim_time: waiting for /clock to activate")
                        while node.waiting_for_clock() and not stop.is_set() and context.ok():
                            executor.spin_once(timeout_sec=0.1)
                    if stop.is_set():
                        break
                    if step() != TransitionCallbackReturn.SUCCESS:
                        # the node logged why; a mistake in the profile, rig or parameters is a usage error
                        code = 2 if isinstance(node.failure, ConfigError) else 1
                        break
            if code == 0:
                while not stop.is_set() and context.ok():
                    executor.spin_once(timeout_sec=0.1)
        finally:
            node.release()
            executor.remove_node(node)
            executor.shutdown()
            node.destroy_node()
        return code


def run_play(
    drive: Path,
    config: RuntimeConfig,
    faults: Faults,
    *,
    rate: float = 1.0,
    span_s: tuple[float, float | None] = (0.0, None),
    wait_subscribers_s: float = 0.0,
    subscribers: Mapping[str, int] | None = None,
    ros_args: Sequence[str] = (),
    stop: threading.Event | None = None,
) -> dict[str, int]:
    """Play ``drive`` once as ROS 2 topics (``config.ros`` names them), or ``span_s`` of it (seconds from
    its start; faults count from the start of the play); returns the messages published per topic.

    With ``wait_subscribers_s`` the play starts once every sensor topic has a matched subscriber, or
    ``subscribers[sensor]`` of them, at most that long."""
    stop = stop or threading.Event()
    with _signals_to(stop), _rclpy_context(ros_args) as context:
        from rclpy.node import Node

        from perception.ros._play import PLAYER_NAME, Player

        node = Node(PLAYER_NAME, context=context)
        try:
            player = Player(node, drive, config.ros, faults, span_s=span_s)
            if wait_subscribers_s > 0 and not player.wait_for_subscribers(wait_subscribers_s, stop, subscribers):
                if stop.is_set():
                    return {}
                raise PerceptionError(f"no subscriber on every sensor topic within {wait_subscribers_s:g} s")
            return player.play(rate=rate, stop=stop)
        finally:
            node.destroy_node()
