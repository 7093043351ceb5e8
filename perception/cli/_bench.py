"""``perception bench``: the runtime's variants side by side on one drive, one server, one run."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from perception.cli._args import output_dir, positive_int
from perception.cli._common import DEFAULT_CONFIG, check_drive, make_folder, repo_root
from perception.config import load_config, with_overrides
from perception.errors import ConfigError

__all__ = ["register", "run"]

#: A generated drive is this long at most (frames beyond it are the same frames again).
_MAX_GENERATED_S = 4.0


def register(sub: Any) -> None:
    from perception.benchmark import SECTIONS

    p: argparse.ArgumentParser = sub.add_parser(
        "bench",
        help="benchmark the runtime's variants side by side (sequential vs concurrent, gRPC vs shm, ...)",
        description="Measure, on the same drive, models and server and in one run, with the variants "
        "interleaved: sequential blocking dispatch (sync tritonclient) vs the concurrent runtime; gRPC vs "
        "system shared memory per tensor size; 1 vs 4 gRPC channels; per-camera vs batched camera "
        "requests; 1..K frames in flight. Writes OUT/bench.json (raw numbers, environment) and "
        "OUT/bench.md (ratio tables). See bench/README.md.",
    )
    p.add_argument(
        "drive",
        type=Path,
        nargs="?",
        default=None,
        help="recorded drive (.mcap); default: the first replay_data/*.mcap, else a short generated one",
    )
    p.add_argument(
        "--config", type=Path, default=None, help=f"launch profile (default: {DEFAULT_CONFIG.relative_to(repo_root())})"
    )
    p.add_argument("--url", default=None, help="external Triton gRPC URL host:port (default: embedded server)")
    p.add_argument("--frames", type=positive_int, default=None, help="frames per variant (default: 60; --quick: 12)")
    p.add_argument(
        "--out", type=output_dir, default=Path("bench/results"), help="output directory (default: bench/results)"
    )
    p.add_argument("--quick", action="store_true", help="fewer frames and repeats (about a minute)")
    p.add_argument(
        "--sections",
        default=None,
        help=f"comma-separated subset of {','.join(SECTIONS)} (default: all)",
    )
    p.add_argument(
        "--points",
        default=None,
        help="transport section: comma-separated point counts (default: 10000,100000,300000)",
    )
    p.add_argument(
        "--repeat",
        type=positive_int,
        default=1,
        help="run the whole comparison this many times on the same server and frames and report whether "
        "the headline ratios agree within noise (default 1)",
    )
    p.set_defaults(func=run)


def _settings(args: argparse.Namespace) -> Any:
    from perception.benchmark import SECTIONS, BenchSettings

    settings = BenchSettings.preset(quick=args.quick, frames=args.frames)
    if args.sections:
        wanted = tuple(s.strip() for s in args.sections.split(",") if s.strip())
        unknown = sorted(set(wanted) - set(SECTIONS))
        if unknown or not wanted:
            raise ConfigError(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}", key="--sections")
        settings = dataclasses.replace(settings, sections=wanted)
    if args.points:
        try:
            points = tuple(int(p) for p in args.points.split(",") if p.strip())
        except ValueError:
            raise ConfigError(
                f"--points must be comma-separated integers, got {args.points!r}", key="--points"
            ) from None
        if not points or min(points) < 1:
            raise ConfigError(f"--points must be positive, got {args.points!r}", key="--points")
        settings = dataclasses.replace(settings, transport_points=points)
    return settings


def run(args: argparse.Namespace) -> int:
    from perception.benchmark import (
        find_drive,
        generate_drive_for_bench,
        load_frames,
        render_markdown,
        run_bench,
        write_report,
    )

    settings = _settings(args)
    make_folder(args.out, "--out")  # now: one that cannot be made lost the whole run's numbers at its end
    config = with_overrides(load_config(args.config or DEFAULT_CONFIG), url=args.url)
    with tempfile.TemporaryDirectory(prefix="perception-bench-drive-") as tmp:
        drive: Path | None = args.drive or find_drive(repo_root() / "replay_data")
        generated: str | None = None
        if drive is None:
            seconds = min(_MAX_GENERATED_S, settings.frames / 10 + 0.5)
            drive = generate_drive_for_bench(Path(tmp), seconds)
            generated = f"generated: perception sim --scenario urban --seed 0 --duration {seconds:g}"
        else:
            check_drive(drive)
        from perception.drives import DriveReader
        from perception.scheduler import Session

        # the drive read once, the profile assembled once against it: the frames and every variant use it
        with DriveReader(drive, strict=False) as reader:
            session = Session.assemble(config, reader.source)
            frames, info = load_frames(reader, session, settings.frames)
        if generated is not None:
            info["drive"] = generated
    report = anyio.run(
        lambda: run_bench(session, frames, settings, input_info=info, repeat=args.repeat), backend="asyncio"
    )
    json_path, md_path = write_report(report, args.out)
    sys.stdout.write(render_markdown(report))
    sys.stdout.write(f"\nwrote {json_path} and {md_path}\n")
    return 0
