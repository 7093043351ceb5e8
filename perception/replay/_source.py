"""Frames from a recorded drive, paced by recorded time (or not at all)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, replace

import anyio

from perception.config import RuntimeConfig
from perception.drives import DriveReader
from perception.errors import ConfigError
from perception.scheduler import FrameAssembler
from perception.types import Frame, Sample, SensorSpec

__all__ = ["DriveSource", "match_rig"]

log = logging.getLogger(__name__)

GT_TOLERANCE_NS = 60_000_000


def match_rig(config: RuntimeConfig, reader: DriveReader) -> dict[str, SensorSpec]:
    """Map each configured sensor to the drive's sensor (by ``topic`` when set, else by name).

    A configured sensor the drive does not have is a :class:`ConfigError` naming the sensor, the
    drive and what it has; a kind mismatch too.
    """
    by_topic = {spec.topic: spec for spec in reader.rig.values()}
    out: dict[str, SensorSpec] = {}
    for i, s in enumerate(config.sensors):
        spec = by_topic.get(s.topic) if s.topic else reader.rig.get(s.name)
        if spec is None:
            have = ", ".join(f"{n} ({sp.kind.value})" for n, sp in reader.rig.items())
            what = f"topic {s.topic!r}" if s.topic else f"sensor {s.name!r}"
            raise ConfigError(
                f"{what} is not in drive {reader.path} (it has: {have})",
                file=str(config.source) if config.source else None,
                key=f"sensors[{i}]",
            )
        if spec.kind.value != s.kind:
            raise ConfigError(
                f"sensor {s.name!r} is configured as {s.kind} but is a {spec.kind.value} in drive {reader.path}",
                file=str(config.source) if config.source else None,
                key=f"sensors[{i}].kind",
            )
        out[s.name] = spec
    return out


def _renamed(sample: Sample, name: str) -> Sample:
    return sample if sample.sensor == name else replace(sample, sensor=name)


@dataclass
class DriveSource:
    """Iterate a drive's frames. ``rate``: 1.0 = recorded speed, 2.0 = twice as fast, ``None`` = max."""

    reader: DriveReader
    config: RuntimeConfig
    rate: float | None = None
    start_ns: int | None = None
    end_ns: int | None = None

    def __post_init__(self) -> None:
        self.rig = match_rig(self.config, self.reader)
        self._drive_to_cfg: Mapping[str, str] = {spec.name: name for name, spec in self.rig.items()}
        gt = self.reader.has_ground_truth
        ego = bool(self.reader.ego_poses())
        self.assembler = FrameAssembler(
            self.config.sensors,
            self.config.trigger,
            ego_at=self.reader.ego_pose_at if ego else None,
            gt_at=(lambda t: self.reader.ground_truth_at(t, GT_TOLERANCE_NS)) if gt else None,
        )
        self.frames_emitted = 0

    def iter_frames(self) -> Iterator[Frame]:
        """Synchronous frame iterator (no pacing)."""
        sensors = list(self._drive_to_cfg)
        for sample in self.reader.samples(self.start_ns, self.end_ns, sensors=sensors):
            yield from self.assembler.push(_renamed(sample, self._drive_to_cfg[sample.sensor]))
        yield from self.assembler.flush()

    async def frames(self) -> AsyncIterator[Frame]:
        """Frames, read in a worker thread (decoding is CPU work) and paced by recorded time."""
        it = self.iter_frames()
        wall0: float | None = None
        t0 = 0
        while True:
            frame = await anyio.to_thread.run_sync(next, it, None)
            if frame is None:
                return
            if self.rate is not None:
                if wall0 is None:
                    wall0, t0 = time.monotonic(), frame.t_ns
                due = wall0 + (frame.t_ns - t0) / 1e9 / self.rate
                delay = due - time.monotonic()
                if delay > 0:
                    await anyio.sleep(delay)
            self.frames_emitted += 1
            yield frame
