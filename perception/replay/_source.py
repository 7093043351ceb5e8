"""Frames from a recorded drive, paced by recorded time (or not at all)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import anyio

from perception._imageio import image_size
from perception.config import RuntimeConfig
from perception.drives import DriveReader
from perception.errors import DriveError
from perception.scheduler import RunObserver, Session
from perception.types import Frame, ImageSample

__all__ = ["DriveSource"]

log = logging.getLogger(__name__)


@dataclass
class DriveSource:
    """Iterate a drive's frames. ``rate``: 1.0 = recorded speed, 2.0 = twice as fast, ``None`` = max."""

    reader: DriveReader
    #: The profile, or the session already assembled from it against ``reader.source`` (an entry point
    #: that assembled it once for the run: then it is used as it is).
    config: RuntimeConfig | Session
    rate: float | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    #: Camera samples whose image size differs from the camera's calibration, per sensor (counted,
    #: warned once: fusion projects with the calibration, so its camera boxes are misplaced).
    image_size_mismatch: Counter[str] = field(default_factory=Counter)
    #: The drive became unreadable mid-stream: frames stop there (see :meth:`frames`).
    error: DriveError | None = None
    #: Sees every sample as it is read (with the host's monotonic time), e.g. a recorder.
    observer: RunObserver | None = None

    def __post_init__(self) -> None:
        #: The profile resolved against the drive (the one assembly every entry point shares).
        self.session = (
            self.config if isinstance(self.config, Session) else Session.assemble(self.config, self.reader.source)
        )
        self.config = self.session.config
        self.rig = dict(self.session.rig)
        self.assembler = self.session.assembler()
        self.frames_emitted = 0
        #: The reader's skipped samples before this source read any (a reader read before: not this run's).
        self._invalid_before = dict(self.reader.invalid)

    @property
    def invalid(self) -> dict[str, int]:
        """What the reader skipped of this run, the intake check refusing it (an empty image, a zero
        quaternion...): samples per sensor (configured name), ego poses as ``"ego"`` (all of them: the
        reader reads its poses once)."""
        names = {src: name for name, src in self.session.source_names.items()}
        out = {}
        for sensor, total in self.reader.invalid.items():
            n = total - (0 if sensor == "ego" else self._invalid_before.get(sensor, 0))
            if n:
                out[names.get(sensor, sensor)] = n
        return out

    def iter_frames(self) -> Iterator[Frame]:
        """Synchronous frame iterator (no pacing). Only the samples of the sensors the run uses are read (and
        seen by :attr:`observer`): the enabled ones and the trigger (a disabled one still clocks frames). A
        recording of a run with ``--sensors lidar_top`` held every camera's images too (~30 of 61 MiB on a
        nuScenes scene), none of which any frame or a replay as recorded reads."""
        config = self.session.config
        used = {s.name for s in config.sensors if s.enabled} | {config.trigger.sensor}
        names = self.session.source_names
        configured = {src: name for name, src in names.items() if name in used}
        for sample in self.reader.samples(self.start_ns, self.end_ns, sensors=list(configured)):
            if isinstance(sample, ImageSample):
                self._check_image_size(configured[sample.sensor], sample)
            if self.observer is not None:
                self.observer.sample(sample, time.monotonic_ns())
            yield from self.assembler.push(sample)
        yield from self.assembler.flush()

    def _check_image_size(self, name: str, sample: ImageSample) -> None:
        cal = self.rig[name].calibration
        # None for an unreadable header: not this check's to report (the dispatcher reports
        # undecodable images as that camera's error)
        size = image_size(sample.data)
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
