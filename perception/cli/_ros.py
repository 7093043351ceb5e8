"""``perception ros``: the runtime as a ROS 2 lifecycle node (``node``) and a drive played as ROS 2
topics (``play``). rclpy is imported only when one of them runs."""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
from pathlib import Path
from typing import Any

from perception.cli._args import speed
from perception.cli._common import DEFAULT_CONFIG, add_fault_options, check_drive, repo_root
from perception.cli._exitcodes import EXIT_INTERRUPTED, EXIT_OK
from perception.cli._record import add_record_options, recorder, recording
from perception.config import load_config
from perception.errors import ConfigError
from perception.live import parse_faults

__all__ = ["register"]


def _ros_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ros-args",
        dest="ros_args",
        nargs=argparse.REMAINDER,
        default=[],
        help="the rest goes to rclpy as ROS arguments (e.g. --ros-args -r __ns:=/perception -p topics.lidar_top:=/x)",
    )


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "ros",
        help="the runtime as a ROS 2 lifecycle node, and drives played as ROS 2 topics",
        description="ROS 2 (rclpy from the 'ros' extra or a sourced workspace). 'node' runs the lifecycle node "
        "perception_fusion on the live API; 'play' publishes a drive's sensors, camera info and odometry at "
        "their recorded timing.",
    )
    cmds = p.add_subparsers(dest="ros_command", metavar="{node,play}", required=True)
    n = cmds.add_parser(
        "node",
        help="run the lifecycle node perception_fusion until Ctrl-C",
        description="Subscribes to each sensor's topic (sensor-data QoS) and publishes ~/objects (MarkerArray), "
        "~/detections (vision_msgs, when installed), ~/debug/processing_time_ms, ~/debug/pipeline_latency_ms and "
        "/diagnostics. Configures and activates itself unless --no-autostart (then drive it with ros2 lifecycle).",
    )
    n.add_argument(
        "--rig", type=Path, required=True, help="the sensor rig: a drive recorded with it (.mcap) or a rig file (.yaml)"
    )
    n.add_argument(
        "--config", type=Path, default=None, help=f"launch profile (default: {DEFAULT_CONFIG.relative_to(repo_root())})"
    )
    n.add_argument("--url", default=None, help="external Triton gRPC URL host:port (default: the profile's, embedded)")
    n.add_argument("--sensors", default=None, help="comma-separated subset of sensors to enable")
    n.add_argument(
        "--time-base",
        choices=("auto", "offset", "estimate"),
        default=None,
        help="how header stamps map to the host clock (auto: the ROS clock's offset, or the profile's estimate; "
        "default auto; on simulated time, use_sim_time, frames are assembled on the ROS clock itself)",
    )
    n.add_argument(
        "--no-autostart", action="store_true", help="stay unconfigured until a lifecycle manager configures it"
    )
    add_record_options(n)
    _ros_args(n)
    n.set_defaults(func=run_node_cmd)
    pl = cmds.add_parser(
        "play",
        help="publish a drive as ROS 2 topics at its recorded timing",
        description="Each sensor on its own thread at the recorded timing; headers stamped on the ROS clock; camera "
        "info from the rig; the drive's ego poses as nav_msgs/Odometry. Fault options as in 'perception live'. "
        "Ctrl-C cuts the play short: the messages published so far are reported, exit code 130.",
    )
    pl.add_argument("drive", type=Path, help="recorded drive (.mcap)")
    pl.add_argument("--config", type=Path, default=None, help="launch profile whose ros.topics rename topics")
    pl.add_argument("--from", dest="start", type=float, default=0.0, metavar="S", help="start S seconds into the drive")
    pl.add_argument("--to", dest="end", type=float, default=None, metavar="S", help="stop S seconds into the drive")
    pl.add_argument(
        "--rate", type=speed, default=1.0, help="playback speed factor, 0.01 to 1000 (default: %(default)s)"
    )
    pl.add_argument(
        "--wait-subscribers",
        type=float,
        default=0.0,
        metavar="S",
        help="wait up to S seconds for a subscriber on every sensor topic first; still none then: an error, "
        "nothing played (exit 1)",
    )
    add_fault_options(pl)
    pl.add_argument("--json", action="store_true", help="print the messages published as JSON")
    _ros_args(pl)
    pl.set_defaults(func=run_play_cmd)


def run_node_cmd(args: argparse.Namespace) -> int:
    from perception.ros import run_node

    # Only the options given override the node's parameters: one left out is the node's own default, or what
    # --ros-args -p sets (the options' defaults, passed as overrides, silently beat every -p of the same name).
    given = {"profile": args.config, "url": args.url, "sensors": args.sensors, "time_base": args.time_base}
    params = {"rig": str(args.rig)} | {k: str(v) for k, v in given.items() if v is not None}
    defaults = {"profile": str(DEFAULT_CONFIG)}
    rec = recorder(args)
    if rec is None:
        return run_node(params, autostart=not args.no_autostart, ros_args=args.ros_args, defaults=defaults)
    with recording(rec):
        return run_node(
            params, autostart=not args.no_autostart, ros_args=args.ros_args, observer=rec, defaults=defaults
        )


def run_play_cmd(args: argparse.Namespace) -> int:
    from perception.ros import run_play

    _check_play_numbers(args)
    check_drive(args.drive)  # as every command that reads a drive: a directory (a ROS 2 bag's) is named, exit 2
    faults = parse_faults(args.silence, args.burst, args.jitter_ms, args.clock_jump)
    cfg = load_config(args.config or DEFAULT_CONFIG)
    stop = threading.Event()  # set by Ctrl-C/SIGTERM: the play cut short
    published = run_play(
        args.drive,
        cfg,
        faults,
        rate=args.rate,
        span_s=(args.start, args.end),
        wait_subscribers_s=args.wait_subscribers,
        ros_args=args.ros_args,
        stop=stop,
    )
    if args.json:
        sys.stdout.write(json.dumps(published) + "\n")
    else:
        sys.stdout.write(", ".join(f"{k} {v}" for k, v in sorted(published.items())) + " messages published\n")
    if stop.is_set():  # it printed what it had published and exited 0, as if the play were whole
        sys.stdout.write("interrupted: the play was cut short\n")
        return EXIT_INTERRUPTED
    return EXIT_OK


def _check_play_numbers(args: argparse.Namespace) -> None:
    """``--from``, ``--to`` and ``--wait-subscribers``: a :class:`ConfigError` naming the option (``--rate``:
    refused while parsing, :func:`perception.cli._args.speed`).
    (NaN passed ``<= 0``, then crashed the player: a traceback, or one per sensor thread and exit 0; a
    negative wait was silently no wait.)"""
    for key, value in (
        ("--from", args.start),
        ("--to", args.end),
        ("--wait-subscribers", args.wait_subscribers),
    ):
        if value is not None and not math.isfinite(value):
            raise ConfigError(f"must be a finite number, got {value}", key=key)
    for key, value in (("--from", args.start), ("--wait-subscribers", args.wait_subscribers)):
        if value < 0:
            raise ConfigError(f"must be >= 0, got {value}", key=key)
    if args.end is not None and args.end <= args.start:
        raise ConfigError(f"must be after --from ({args.start:g} s), got {args.end:g}", key="--to")
