"""``perception import {ros2,nuscenes,kitti} ...``: convert real recordings into drives.

::

    perception import ros2 BAG --map topics.yaml -o drive.mcap
    perception import nuscenes DATAROOT --scene scene-0061 [--version v1.0-mini] -o drive.mcap
    perception import kitti ROOT [--sequence 0000] [--frames 0-99] -o drive.mcap

Prints a summary (messages per topic, what was skipped and why) and the command that replays the
drive. Errors are one line on stderr:
exit 2 for an input that does not exist (the bag, dataroot or root; as every command that reads a drive
says of a missing one), a topic map that does not fit (file + key path) and an output that is the input (a bag's
own file: refused with ``--force`` too), 1 for data that cannot be imported.
The output file only appears when the import succeeded; an existing one is kept unless ``--force``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from perception._progress import Progress
from perception.cli._args import int_within, output_file
from perception.cli._common import make_folder, same_file
from perception.drives import GROUND_TRUTH_TOPIC
from perception.errors import ConfigError
from perception.importers import (
    OBJECT_FRAME_GAP_NS,
    TOPIC_MAP_HELP,
    ImportSummary,
    import_kitti,
    import_nuscenes,
    import_ros2,
    parse_frames,
)

__all__ = ["register", "run"]


def _frames(text: str) -> frozenset[int]:
    try:
        return parse_frames(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _channels(text: str) -> list[str]:
    channels = [c.strip() for c in text.split(",") if c.strip()]
    if not channels:
        raise argparse.ArgumentTypeError(f"expected channel names like LIDAR_TOP,CAM_FRONT, got {text!r}")
    return channels


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "import",
        help="import a ROS 2 bag, a nuScenes scene or a KITTI-format tree as a drive",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sources = p.add_subparsers(dest="source", metavar="SOURCE", required=True)

    ros2 = sources.add_parser(
        "ros2",
        help="a rosbag2 directory or .mcap file",
        description="Import the topics that a topics.yaml maps from a ROS 2 bag.\n\n" + TOPIC_MAP_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ros2.add_argument("bag", type=Path, help="rosbag2 directory (metadata.yaml + storage) or a .mcap file")
    ros2.add_argument("--map", dest="topic_map", type=Path, required=True, help="topics.yaml: ROS topics -> sensors")
    ros2.add_argument("--jpeg-quality", type=int_within(1, 100), default=90, help="for raw images (default: 90)")
    _common(ros2)

    nus = sources.add_parser(
        "nuscenes",
        help="one scene of a nuScenes-format dataset",
        description="Import one scene of a nuScenes-format dataset (v1.0 JSON tables + sensor files).",
    )
    nus.add_argument("dataroot", type=Path, help="dataset root (holds the version directory, samples/, sweeps/)")
    nus.add_argument("--scene", required=True, help="scene name, e.g. scene-0061")
    nus.add_argument("--version", default="v1.0-mini", help="table directory (default: v1.0-mini)")
    nus.add_argument(
        "--channels",
        type=_channels,
        default=None,
        help="comma-separated channels, e.g. LIDAR_TOP,CAM_FRONT (default: all)",
    )
    nus.add_argument(
        "--no-radar-filter", action="store_true", help="keep every radar point (default: the devkit's default filters)"
    )
    _common(nus)

    kitti = sources.add_parser(
        "kitti",
        help="a KITTI-format tree: object frames, a tracking sequence, or View-of-Delft (with radar)",
        description="Import a KITTI-format tree: the object layout (velodyne/, image_2/, calib/, label_2/; "
        f"unrelated frames at frame number x {OBJECT_FRAME_GAP_NS / 1e9:g} s), a tracking sequence "
        "(velodyne/<seq>/, image_02/, label_02/, oxts/; 10 Hz) "
        "or View-of-Delft's lidar/ and radar/ trees. Boxes go from the rectified camera frame into base_link "
        "(the IMU frame moved down to the road, or the lidar's frame when the calib has no Tr_imu_to_velo); "
        "Car and Van -> car, Truck and "
        "Tram -> truck, Pedestrian and Person_sitting -> pedestrian, Cyclist -> cyclist; other types skipped.",
    )
    kitti.add_argument(
        "root", type=Path, help="the split directory, the dataset root holding it, or a View-of-Delft root"
    )
    kitti.add_argument("--split", default="training", help="subdirectory to look in under ROOT (default: training)")
    kitti.add_argument("--sequence", default=None, help="tracking sequence, e.g. 0000 (required if there are several)")
    kitti.add_argument(
        "--frames", type=_frames, default=None, help="frame numbers to import, e.g. 0-99,120 (default: all)"
    )
    _common(kitti)
    p.set_defaults(func=run)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o", "--output", type=output_file, required=True, help="drive to write (.mcap; its folder made if missing)"
    )
    p.add_argument("--force", action="store_true", help="replace the output if it exists")


#: The input each source reads: (its argument, what to call it when it is not there).
_INPUTS = {"ros2": ("bag", "bag"), "nuscenes": ("dataroot", "nuScenes dataroot"), "kitti": ("root", "KITTI root")}


def run(args: argparse.Namespace) -> int:
    dest, what = _INPUTS[args.source]
    source: Path = getattr(args, dest)
    if not source.exists():  # a user error, as for every command that reads a drive (exit 2)
        raise ConfigError(f"{what} not found", file=str(source))
    if _replaces_input(args.output, source):  # said whatever --force: "output exists (pass --force...)" misled
        message = f"is the {what} being imported (or a file of it): write the drive elsewhere"
        raise ConfigError(message, file=str(args.output), key="--output")
    make_folder(args.output.parent, "--output")
    with Progress(1.0, f"import {args.source}") as bar:
        if args.source == "ros2":
            summary = import_ros2(
                args.bag,
                args.topic_map,
                args.output,
                overwrite=args.force,
                jpeg_quality=args.jpeg_quality,
                on_progress=bar.update,
            )
        elif args.source == "kitti":
            summary = import_kitti(
                args.root,
                args.output,
                split=args.split,
                sequence=args.sequence,
                frames=args.frames,
                overwrite=args.force,
                on_progress=bar.update,
            )
        else:
            summary = import_nuscenes(
                args.dataroot,
                args.scene,
                args.output,
                version=args.version,
                channels=args.channels,
                radar_filters=not args.no_radar_filter,
                overwrite=args.force,
                on_progress=bar.update,
            )
    _print(summary, args.output)
    return 0


def _replaces_input(output: Path, source: Path) -> bool:
    """Whether the drive written to ``output`` would replace the input it is made from: the input file itself
    (a bag's ``.mcap``), or a file directly in the input directory that a bag's storage may be (a rosbag2
    directory's ``bag_0.mcap``); a dataset root's own drives beside its folders are not its data."""
    if same_file(output, source):
        return True
    bag_dir = source.is_dir() and (source / "metadata.yaml").is_file()
    return bag_dir and output.exists() and same_file(output.parent, source)


def _print(summary: ImportSummary, output: Path) -> None:
    sys.stdout.write("\n".join(summary.lines()) + "\n")
    # The default profile takes its sensors from the drive: no profile to write first.
    drive = shlex.quote(str(output))
    out_dir = shlex.quote(f"{output.with_suffix('')}-replay")
    sys.stdout.write(f"\nreplay it with:  perception replay {drive} --out {out_dir}\n")
    if summary.messages.get(GROUND_TRUTH_TOPIC):  # eval refuses a drive without ground truth
        sys.stdout.write(f"score it with:   perception eval {drive}\n")
