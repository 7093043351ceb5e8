"""The frames every variant is measured on: read once from a drive (bundled or generated) into memory."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from perception.drives import DriveReader
from perception.errors import DriveError
from perception.replay import DriveSource
from perception.scheduler import Session
from perception.types import Frame, ImageSample, PointCloudSample

__all__ = ["find_drive", "generate_drive_for_bench", "load_frames"]

log = logging.getLogger(__name__)


def find_drive(directory: Path) -> Path | None:
    """The first ``*.mcap`` drive in ``directory`` (sorted by name), if any."""
    if not directory.is_dir():
        return None
    drives = sorted(directory.glob("*.mcap"))
    return drives[0] if drives else None


def generate_drive_for_bench(directory: Path, duration_s: float, seed: int = 0) -> Path:
    """A short synthetic drive (default rig, urban traffic) in ``directory``: the fallback when no drive
    is bundled. Deterministic, so runs on different days measure the same data."""
    from perception.sim import generate_drive

    path = directory / f"bench_urban_{duration_s:g}s.mcap"
    log.info("no drive given or bundled: generating a %g s synthetic drive (%s)", duration_s, path)
    generate_drive(path, scenario="urban", seed=seed, duration_s=duration_s, workers=1)
    return path


def load_frames(reader: DriveReader, session: Session, count: int) -> tuple[list[Frame], dict[str, Any]]:
    """``count`` frames of the open drive assembled as the runtime would (the drive is cycled when
    shorter) for ``session`` (assembled against it by the caller, once for the run: the runtimes run it
    too), and a description of the input for the results file."""
    drive, config = reader.path, session.config
    source = DriveSource(reader, session)
    frames: list[Frame] = []
    for frame in source.iter_frames():
        frames.append(dataclasses.replace(frame, ground_truth=None))
        if len(frames) >= count:
            break
    if not frames:
        raise DriveError("the drive yields no frame for the configured trigger", file=str(drive))
    distinct = len(frames)
    while len(frames) < count:
        frames.append(dataclasses.replace(frames[len(frames) % distinct], frame_id=len(frames)))
    largest: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for frame in frames[:distinct]:
        for name, sample in frame.samples.items():
            if isinstance(sample, PointCloudSample) and len(sample.points) >= sizes.get(name, 0):
                sizes[name] = len(sample.points)
                largest[name] = f"{len(sample.points)} points"
            elif isinstance(sample, ImageSample) and len(sample.data) >= sizes.get(name, 0):
                sizes[name] = len(sample.data)
                largest[name] = f"{len(sample.data)} bytes ({sample.format})"
    info = {
        "drive": str(drive),
        "frames": len(frames),
        "distinct_frames": distinct,
        "sensors": {
            s.name: {"kind": s.kind, "model": s.model, "transport": s.transport} for s in config.active_sensors
        },
        "largest_sample": largest,
    }
    return frames, info
