"""``perception sim``: generate a deterministic synthetic drive with exact ground truth."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from perception.cli._args import non_negative_int, output_file, positive_int, within
from perception.cli._common import make_folder

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    from perception.sim import MAX_DURATION_S, SCENARIOS

    p = subparsers.add_parser(
        "sim",
        help="generate a synthetic drive (MCAP) with exact ground truth",
        description="Simulate an ego vehicle in traffic with a lidar/radar/camera rig and write the drive. "
        "Identical arguments give byte-identical files.",
    )
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="urban", help="traffic preset (default: urban)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="random seed (default: 0)")
    p.add_argument(
        "--duration",
        type=within(0.0, MAX_DURATION_S),  # a bad one named the key "duration", not the option, after parsing
        default=10.0,
        metavar="S",
        help=f"seconds to simulate, up to {MAX_DURATION_S:g} (default: 10)",
    )
    p.add_argument("--rig", metavar="FILE", help="rig YAML (default: the scenario's rig in launch/rigs/)")
    p.add_argument("-o", "--output", type=output_file, required=True, metavar="OUT.mcap", help="drive file to write")
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="capture processes (default: one per core, at most 2); output is identical for any N",
    )
    p.add_argument(
        "--compression",
        choices=("zstd", "lz4", "none"),
        default="zstd",
        help="chunk compression (default zstd; lz4 is faster for big 128-beam drives)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar (it is only drawn on a terminal)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perception.sim import generate_drive

    make_folder(args.output.parent, "--output")  # output_file's promise: its folder made when missing
    show = not args.no_progress and sys.stderr.isatty()
    summary = generate_drive(
        args.output,
        scenario=args.scenario,
        seed=args.seed,
        duration_s=args.duration,
        rig=args.rig,
        progress=show,
        workers=args.workers,
        compression=args.compression,
    )
    sys.stdout.write(summary.format() + "\n")
    return 0
