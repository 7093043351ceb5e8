"""Frames from a recorded drive, paced by recorded time (or not at all)."""

from __future__ import annotations

import io
import logging
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field, replace

import anyio

from perception.config import RuntimeConfig, resolve_sensors
from perception.drives import GT_TOLERANCE_NS, DriveReader
from perception.errors import ConfigError, DriveError
from perception.scheduler import FrameAssembler
from perception.types import CameraCalibration, Frame, ImageSample, Sample, SensorSpec

# GT_TOLERANCE_NS is perception.drives's, re-exported for _eval.py.
__all__ = ["GT_TOLERANCE_NS", "DriveSource", "drive_config", "match_rig"]

log = logging.getLogger(__name__)


def drive_config(config: RuntimeConfig, reader: DriveReader) -> RuntimeConfig:
    """``config`` with the drive's sensors when the profile leaves them open (see
    :func:`perception.config.resolve_sensors`); a profile that lists its sensors is returned as it is."""
    return resolve_sensors(config, reader.rig, where=f"drive {reader.path}", metadata=reader.metadata)


def match_rig(config: RuntimeConfig, reader: DriveReader) -> dict[str, SensorSpec]:
    """Map each configured sensor to the drive's sensor (by ``topic`` when set, else by name).

    ``config`` must be resolved (:func:`drive_config`). A configured sensor the drive does not have is
    a :class:`ConfigError` naming the sensor, the drive and what it has; a kind mismatch too.
    """
    by_topic = {spec.topic: spec for spec in reader.rig.values()}
    out: dict[str, SensorSpec] = {}
    for i, s in enumerate(config.sensors):
        spec = by_topic.get(s.topic) if s.topic else reader.rig.get(s.name)
        if spec is None:
            have = ", ".join(f"{n} ({sp.kind})" for n, sp in reader.rig.items())
            what = f"topic {s.topic!r}" if s.topic else f"sensor {s.name!r}"
            raise ConfigError(
                f"{what} is not in drive {reader.path} (it has: {have})",
                file=str(config.source) if config.source else None,
                key=f"sensors[{i}]",
            )
        if spec.kind != s.kind:
            raise ConfigError(
                f"sensor {s.name!r} is configured as {s.kind} but is a {spec.kind} in drive {reader.path}",
                file=str(config.source) if config.source else None,
                key=f"sensors[{i}].kind",
            )
        if spec.calibration is not None:
            problem = _calibration_problem(spec.calibration)
            if problem is not None:
                raise DriveError(f"camera {spec.name!r}: {problem}", file=str(reader.path), topic=spec.topic)
        out[s.name] = spec
    return out


def _calibration_problem(cal: CameraCalibration) -> str | None:
    """Why ``cal`` is not a usable pinhole calibration (fusion projects through K and inverts it)."""
    k = cal.k
    if not all(math.isfinite(v) for v in (*k, *cal.d)):
        return f"calibration has non-finite values (K={list(k)}, D={list(cal.d)})"
    if not (k[0] > 0 and k[4] > 0 and (k[3], k[6], k[7], k[8]) == (0, 0, 0, 1)):
        return f"calibration K={list(k)} is not a pinhole matrix [fx s cx; 0 fy cy; 0 0 1] with fx, fy > 0"
    return None


def _image_size(sample: ImageSample) -> tuple[int, int] | None:
    """Width and height from the image header (no decoding); None when unreadable (the dispatcher
    reports undecodable images as that camera's error)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(sample.data), formats=("JPEG", "PNG")) as img:
            return img.size
    except Exception:  # any header trouble: not this check's to report
        return None


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
    #: Camera samples whose image size differs from the camera's calibration, per sensor (counted,
    #: warned once: fusion projects with the calibration, so its camera boxes are misplaced).
    image_size_mismatch: Counter[str] = field(default_factory=Counter)
    #: The drive became unreadable mid-stream: frames stop there (see :meth:`frames`).
    error: DriveError | None = None

    def __post_init__(self) -> None:
        self.config = drive_config(self.config, self.reader)
        self.rig = match_rig(self.config, self.reader)
        self._drive_to_cfg: Mapping[str, str] = {spec.name: name for name, spec in self.rig.items()}
        gt = self.reader.has_ground_truth
        ego = bool(self.reader.ego_poses())
        self.assembler = FrameAssembler(
            self.config.sensors,
            self.config.trigger,
            ego_at=self.reader.ego_pose_at if ego else None,
            gt_at=(lambda t: self.reader.ground_truth_at(t, GT_TOLERANCE_NS)) if gt else None,
            rig=self.rig,
        )
        self.frames_emitted = 0

    def iter_frames(self) -> Iterator[Frame]:
        """Synchronous frame iterator (no pacing)."""
        sensors = list(self._drive_to_cfg)
        for sample in self.reader.samples(self.start_ns, self.end_ns, sensors=sensors):
            name = self._drive_to_cfg[sample.sensor]
            if isinstance(sample, ImageSample):
                self._check_image_size(name, sample)
            yield from self.assembler.push(_renamed(sample, name))
        yield from self.assembler.flush()

    def _check_image_size(self, name: str, sample: ImageSample) -> None:
        cal = self.rig[name].calibration
        size = _image_size(sample)
        if cal is None or size is None or size == (cal.width, cal.height):
            return
        if not self.image_size_mismatch[name]:
            log.warning(
                "camera %s: image is %dx%d but its calibration is %dx%d (t=%d); counting such images",
                name,
                *size,
                cal.width,
                cal.height,
                sample.t_ns,
            )
        self.image_size_mismatch[name] += 1

    async def frames(self) -> AsyncIterator[Frame]:
        """Frames, read in a worker thread (decoding is CPU work) and paced by recorded time.

        A drive that turns out unreadable mid-stream (a damaged chunk) ends the frames there, like the
        end of the drive: the frames already taken are processed and recorded, and :attr:`error` says
        what happened (the replay raises it once its outputs are written).
        """
        it = self.iter_frames()
        wall0: float | None = None
        t0 = 0
        while True:
            try:
                frame = await anyio.to_thread.run_sync(next, it, None)
            except DriveError as exc:
                log.error("%s; the replay stops at the last readable frame", exc)
                self.error = exc
                return
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
