"""``perception render DIR --frame N``: PNGs of a replayed frame (bird's-eye view and every camera).

Reads ``DIR/fused.mcap`` (written by ``perception replay``), or ``DIR/detections.jsonl`` plus the drive
(``--drive``, default: the drive named in ``DIR/report.json``). Writes ``frame_<NNNNNN>_bev.png`` and
``frame_<NNNNNN>_<camera>.png`` (the frame id in 6 digits: ``--frame 10`` writes ``frame_000010_bev.png``)
into ``--out`` (default ``DIR/frames``) and prints their paths.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from perception.cli._args import output_dir, within
from perception.cli._common import check_drive, make_folder

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "render",
        help="render frames of a replay output to PNG",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dir", type=Path, help="replay output directory (perception replay --out)")
    p.add_argument("--frame", type=int, action="append", required=True, help="frame id to render (repeat for several)")
    p.add_argument("--drive", type=Path, default=None, help="drive to read sensor data from when DIR has no fused.mcap")
    p.add_argument("--out", type=output_dir, default=None, help="where to write the PNGs (default: DIR/frames)")
    p.add_argument(
        "--range",
        type=within(0.0, 500.0),
        default=60.0,
        dest="range_m",
        help="bird's-eye view half-width in m (default 60)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perception.viz import load_frame_views, render_frame

    if args.drive is not None:
        check_drive(args.drive)
    views = load_frame_views(args.dir, args.frame, drive=args.drive)
    out = args.out if args.out is not None else args.dir / "frames"
    make_folder(out, "--out")  # a folder that cannot be made: exit 2, as every command's --out
    for view in views:
        # a PNG the file system refuses to take is a run-time failure naming it (exit 1), as elsewhere
        sys.stdout.write("".join(f"{r.path}\n" for r in render_frame(view, out, range_m=args.range_m)))
    return 0
