"""Time alignment: turn a time-ordered stream of sensor samples into frames.

A frame is triggered by each sample of a reference sensor, or at a fixed rate. Every other sensor
contributes the sample nearest the frame time within its sync window, provided the sample is not
older than its staleness limit; otherwise the sensor is ``None`` (missing) in that frame.

What every assembler does the same way is :class:`AlignCore`: the per-sensor buffers, de-duplication
(a sample not after the sensor's last one is dropped, counted), selection, the frame's ego pose (none
older than ``live.ego_max_age_ms``), sweep accumulation, eviction and the keep horizon. Two entry points
drive it: :class:`FrameAssembler` (replay: driven by sample time) and
:class:`perception.live.LiveRuntime`'s assembler (the host's monotonic clock, a silence timer, buffer caps).

:class:`FrameAssembler` is driven by sample time, not wall time: a pending frame is completed as soon as
the stream has moved past ``t + max(sync windows)`` (later samples can no longer be nearer), so a silent
sensor never holds a frame back. :meth:`FrameAssembler.flush` completes whatever is pending at the end of
a stream.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from perception.config import SensorConfig, TriggerConfig
from perception.errors import ConfigError
from perception.scheduler._accumulate import SweepAccumulator
from perception.types import (
    EgoPose,
    Frame,
    GroundTruth,
    PointCloudSample,
    Sample,
    SensorSpec,
    interpolate_ego,
)

__all__ = ["EGO_POSES_KEPT", "UNKNOWN_LIMIT", "AlignCore", "AlignStats", "FrameAssembler"]

log = logging.getLogger(__name__)

#: Samples of unconfigured sensors taken before any configured one before the stream is refused.
UNKNOWN_LIMIT = 64
#: Ego poses an assembler holds (the latest; poses handed in one by one, e.g. odometry).
EGO_POSES_KEPT = 64

EgoAt = Callable[[int], EgoPose | None]


@dataclass
class AlignStats:
    samples: int = 0
    frames: int = 0
    unknown_sensor: int = 0  # samples of sensors that are not configured (ignored)
    out_of_order: int = 0  # samples older than one already seen for the same sensor (dropped, counted)
    duplicate: int = 0  # same sensor, same timestamp as the previous sample (dropped, counted)
    #: Frames whose nearest ego pose was further than the age limit from their time: ego motion unknown
    #: (the frame carries no pose; nothing is extrapolated from an old one).
    ego_stale: int = 0


class AlignCore:
    """What every frame assembler shares (module docstring): buffers, ordering, selection, ego, eviction.

    ``stats`` is the counters object the entry point reports (it may extend :class:`AlignStats`).
    ``ego_at``: the ego pose at a time, from a recording (interpolated between its poses); without it the
    poses handed in with :meth:`add_ego` are used, none further than ``ego_max_age_ns`` from the frame.
    With ``rig`` (the sensors' mounts), point sensors accumulate their earlier sweeps.

    **Keep horizon.** A sample at ``s`` can be selected for a frame at ``t`` only when ``|t - s|`` is within
    the sensor's sync window and ``t - s`` within its staleness limit, so frames at or after ``t0`` never
    select a sample older than ``t0 - min(sync window, staleness)``: that, the widest over the sensors
    (and widened to the accumulation windows), is how far back a buffer is kept. Anything more (``max`` of
    the two, as live once kept) only holds memory no frame can use; anything less would change frames.
    The newest sample of a sensor is always kept (its time tells a live assembler the sensor has moved on).
    """

    def __init__(
        self,
        sensors: Sequence[SensorConfig],
        stats: AlignStats,
        *,
        ego_at: EgoAt | None = None,
        ego_max_age_ns: int | None = None,
        rig: Mapping[str, SensorSpec] | None = None,
    ) -> None:
        self.sensors = {s.name: s for s in sensors}
        self.active = [s.name for s in sensors if s.enabled]
        self.stats = stats
        #: A frame at ``t`` can be completed once its sensors have moved past ``t`` plus this.
        self.horizon_ns = max((s.sync_window_ns for s in sensors if s.enabled), default=0)
        self._ego_at = ego_at
        self._ego_max_age_ns = ego_max_age_ns
        self._poses: deque[EgoPose] = deque(maxlen=EGO_POSES_KEPT)
        #: Whether a kept pose came before the one handed in ahead of it (odometry out of order).
        self._poses_unordered = False
        #: Earlier sweeps merged into point sensors' samples (``SensorConfig.accumulate_ms``, needs ``rig``),
        #: moved by the ego poses (``ego_at``, else those handed in, interpolated), else by the frame's twist.
        self.accumulator = SweepAccumulator(
            sensors,
            {n: spec.extrinsic for n, spec in (rig or {}).items()},
            ego_at=ego_at if ego_at is not None else self._pose_at,
        )
        self.keep_ns = max(
            max((min(s.sync_window_ns, s.max_staleness_ns) for s in sensors), default=0), self.accumulator.keep_ns
        )
        self._buffers: dict[str, deque[Sample]] = {name: deque() for name in self.sensors}
        self._bytes: dict[str, int] = dict.fromkeys(self.sensors, 0)
        self._last: dict[str, int] = {}
        self._next_id = 0

    @property
    def next_id(self) -> int:
        """The id :meth:`make_frame` gives its next frame (it takes it even when making the frame raises)."""
        return self._next_id

    def take_id(self) -> int:
        """Take the next frame id for a frame that is not made (its record is made of a stub)."""
        self._next_id += 1
        return self._next_id - 1

    def stub(self, t: int, *, created_ns: int = 0, ego: bool = False) -> Frame:
        """The next frame at ``t``, not made: its id taken and counted in ``frames``, no samples; with
        ``ego`` its ego pose (as :meth:`make_frame` selects it: a shed frame's prediction reads its time and
        ego pose, nothing else of it). A stub costs no selection, accumulation nor copy."""
        frame_id = self.take_id()
        self.stats.frames += 1
        return Frame(frame_id, t, {}, ego=self._frame_ego(t) if ego else None, created_ns=created_ns)

    # -- samples --------------------------------------------------------------------------------
    def order_problem(self, name: str, stamp: int, *, new_clock: bool = False) -> str | None:
        """``duplicate`` or ``out of order`` (counted) when ``stamp`` is not after the sensor's last taken
        one, else None. ``new_clock``: the sensor's clock was re-anchored, so an earlier stamp is new."""
        last = self._last.get(name)
        if last is None or stamp > last or new_clock:
            return None
        if stamp == last:
            self.stats.duplicate += 1
            return "duplicate"
        self.stats.out_of_order += 1
        return "out of order"

    def seen(self, name: str, stamp: int) -> None:
        """The sensor's latest stamp (its order checked), whether or not the sample is buffered: later
        ones are judged against it."""
        self._last[name] = stamp

    def take(self, sample: Sample, stamp: int | None = None) -> None:
        """Buffer ``sample`` (its sensor configured, its order checked): ``stamp`` is the time its order is
        judged by (default its ``t_ns``; live: the sensor's own stamp, before mapping to the host clock)."""
        name = sample.sensor
        self.seen(name, sample.t_ns if stamp is None else stamp)
        self.stats.samples += 1
        self._buffers[name].append(sample)
        self._bytes[name] += _nbytes(sample)

    def newest_t(self, name: str) -> int | None:
        """Time of the sensor's newest buffered sample (None before its first)."""
        buf = self._buffers[name]
        return buf[-1].t_ns if buf else None

    def buffered(self, name: str) -> tuple[Sample, ...]:
        """The sensor's buffered samples, oldest first (a copy)."""
        return tuple(self._buffers[name])

    def cap(self, name: str, max_samples: int, max_bytes: int) -> int:
        """Drop the sensor's oldest samples beyond ``max_samples`` or ``max_bytes`` (its newest is kept):
        how many were dropped."""
        buf = self._buffers[name]
        dropped = 0
        while len(buf) > 1 and (len(buf) > max_samples or self._bytes[name] > max_bytes):
            self._bytes[name] -= _nbytes(buf.popleft())
            dropped += 1
        return dropped

    def evict(self, oldest_needed: int) -> None:
        """Drop samples no frame at or after ``oldest_needed`` can use (the keep horizon, class docs)."""
        cutoff = oldest_needed - self.keep_ns
        for name, buf in self._buffers.items():
            while len(buf) > 1 and buf[0].t_ns < cutoff:
                self._bytes[name] -= _nbytes(buf.popleft())

    # -- ego ------------------------------------------------------------------------------------
    def add_ego(self, pose: EgoPose) -> None:
        """An ego pose (odometry, on the frames' clock); the latest :data:`EGO_POSES_KEPT` are kept."""
        poses = self._poses
        if poses and pose.t_ns < poses[-1].t_ns:
            self._poses_unordered = True
        poses.append(pose)
        if self._poses_unordered:  # ordered again once the pose out of order has left the window
            times = [e.t_ns for e in poses]
            self._poses_unordered = any(a > b for a, b in itertools.pairwise(times))

    def newest_ego_t(self) -> int | None:
        """Time of the latest ego pose handed in (None before the first)."""
        if not self._poses:
            return None
        return max(e.t_ns for e in self._poses) if self._poses_unordered else self._poses[-1].t_ns

    def _ordered_poses(self) -> tuple[list[EgoPose], list[int]]:
        """The kept poses in time order (the handed-in order, unless one came out of order) and their times."""
        poses = sorted(self._poses, key=lambda e: e.t_ns) if self._poses_unordered else list(self._poses)
        return poses, [e.t_ns for e in poses]

    def _pose_near(self, t: int) -> EgoPose | None:
        """The handed-in pose nearest ``t``, if within the age limit (of two as near, the one handed in
        first). Poses in time order (the usual case) are searched by bisection, not one by one."""
        if self._poses_unordered:
            pose = min(self._poses, key=lambda e: abs(e.t_ns - t), default=None)
        elif not self._poses:
            pose = None
        else:
            poses = self._poses
            times = [e.t_ns for e in poses]
            i = bisect.bisect_left(times, t)  # times[i] is the first at or after t
            if i == len(times):
                i = bisect.bisect_left(times, times[-1])
            elif i > 0:
                before = bisect.bisect_left(times, times[i - 1])  # the first handed in of that time
                if t - times[before] <= times[i] - t:
                    i = before
            pose = poses[i]
        if pose is None or (self._ego_max_age_ns is not None and abs(pose.t_ns - t) > self._ego_max_age_ns):
            return None
        return pose

    def _pose_at(self, t: int) -> EgoPose | None:
        """The pose at ``t`` interpolated from the handed-in ones (sweep accumulation), if one is near."""
        if self._pose_near(t) is None:
            return None
        poses, times = self._ordered_poses()
        return interpolate_ego(poses, t, times)

    def _frame_ego(self, t: int) -> EgoPose | None:
        if self._ego_at is not None:
            return self._ego_at(t)
        pose = self._pose_near(t)
        if pose is None and self._poses:
            self.stats.ego_stale += 1  # odometry stopped: motion unknown, not the last twist forever
        return pose

    # -- frames ---------------------------------------------------------------------------------
    def make_frame(self, t: int, *, created_ns: int = 0, ground_truth: GroundTruth | None = None) -> Frame:
        """The next frame (ids count up from 0) at ``t``: each active sensor's nearest usable sample, the
        ego pose, earlier sweeps accumulated."""
        frame_id = self._next_id  # taken first: a frame whose making raises has its id too (next_id)
        self._next_id += 1
        chosen = {name: self._nearest(self.sensors[name], t) for name in self.active}
        self.stats.frames += 1
        ego = self._frame_ego(t)
        frame = Frame(frame_id, t, chosen, ego=ego, ground_truth=ground_truth, created_ns=created_ns)
        return self.accumulator.apply(frame, self._buffers)

    def _nearest(self, cfg: SensorConfig, t: int) -> Sample | None:
        best: Sample | None = None
        best_dt = 0
        for s in self._buffers[cfg.name]:
            dt = abs(s.t_ns - t)
            if dt > cfg.sync_window_ns or t - s.t_ns > cfg.max_staleness_ns:
                continue
            if best is None or dt < best_dt:
                best, best_dt = s, dt
        return best


class FrameAssembler:
    """Assemble :class:`Frame` objects from a time-ordered sample stream (replay's entry to :class:`AlignCore`).

    Feed samples with :meth:`push` (returns frames that became complete) and finish with
    :meth:`flush`. ``ego_at``/``gt_at`` optionally attach ego pose and ground truth to each frame.
    A disabled sensor (``enabled: false``) contributes no sample, but as the trigger it still clocks frames.
    With ``rig`` (the sensors' mounts), point sensors accumulate their earlier sweeps
    (:class:`~perception.scheduler.SweepAccumulator`). ``aliases`` maps a source's sensor names to the
    configured ones where they differ (sensors matched by topic: :attr:`Session.source_names`).

    Nothing is silent: no sensors at all is a :class:`ConfigError` at once (pass the resolved
    ``rt.config.sensors``, or better ``rt.session.assembler()``), and so is a stream whose first
    :data:`UNKNOWN_LIMIT` samples all belong to sensors that are not configured.
    """

    def __init__(
        self,
        sensors: Sequence[SensorConfig],
        trigger: TriggerConfig,
        *,
        ego_at: EgoAt | None = None,
        gt_at: Callable[[int], GroundTruth | None] | None = None,
        rig: Mapping[str, SensorSpec] | None = None,
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        if not sensors:
            raise ConfigError(
                "no sensors to assemble frames from: pass the resolved sensors (rt.config.sensors, or use "
                "rt.session.assembler()), not those of a profile that leaves them to the drive",
                key="sensors",
            )
        if trigger.sensor is not None and trigger.sensor not in {s.name for s in sensors}:
            raise ConfigError(f"trigger sensor {trigger.sensor!r} is not configured", key="trigger.sensor")
        self.stats = AlignStats()
        self._core = AlignCore(sensors, self.stats, ego_at=ego_at, rig=rig)
        #: Earlier sweeps merged into point sensors' samples (``SensorConfig.accumulate_ms``, needs ``rig``).
        self.accumulator = self._core.accumulator
        self._aliases = {src: name for src, name in (aliases or {}).items() if src != name}
        self._unknown: set[str] = set()
        self._trigger = trigger
        self._pending: deque[int] = deque()  # frame times waiting for the horizon
        self._stream_t: int | None = None
        self._next_rate_t: int | None = None
        self._period_ns = round(1e9 / trigger.rate_hz) if trigger.rate_hz else 0
        self._gt_at = gt_at

    # ------------------------------------------------------------------------------------------
    def push(self, sample: Sample) -> list[Frame]:
        name = self._aliases.get(sample.sensor, sample.sensor)
        if name not in self._core.sensors:
            self.stats.unknown_sensor += 1
            self._unknown.add(name)
            if self.stats.samples == 0 and self.stats.unknown_sensor >= UNKNOWN_LIMIT:
                raise ConfigError(
                    f"none of the first {self.stats.unknown_sensor} samples is of a configured sensor "
                    f"(samples of: {', '.join(sorted(self._unknown))}; configured: {', '.join(self._core.sensors)})",
                    key="sensors",
                )
            return []
        if name != sample.sensor:
            sample = replace(sample, sensor=name)
        problem = self._core.order_problem(name, sample.t_ns)
        if problem is not None:
            log.warning("sensor %s: timestamp %d dropped (%s)", name, sample.t_ns, problem)
            return []
        self._core.take(sample)
        t = sample.t_ns
        self._stream_t = t if self._stream_t is None else max(self._stream_t, t)
        if self._trigger.sensor == name:
            self._pending.append(t)
        elif self._period_ns:
            if self._next_rate_t is None:
                self._next_rate_t = t
            while self._next_rate_t <= t:
                self._pending.append(self._next_rate_t)
                self._next_rate_t += self._period_ns
        return self._complete(final=False)

    def flush(self) -> list[Frame]:
        """Complete every pending frame with what has been seen (end of stream)."""
        return self._complete(final=True)

    def feed(self, samples: Iterable[Sample]) -> Iterator[Frame]:
        for s in samples:
            yield from self.push(s)
        yield from self.flush()

    def buffered(self, sensor: str) -> tuple[Sample, ...]:
        """The samples the assembler still holds for ``sensor`` (a copy, oldest first)."""
        return self._core.buffered(sensor)

    # ------------------------------------------------------------------------------------------
    def _complete(self, *, final: bool) -> list[Frame]:
        out: list[Frame] = []
        while self._pending:
            t = self._pending[0]
            if not final and self._stream_t is not None and self._stream_t <= t + self._core.horizon_ns:
                break
            self._pending.popleft()
            gt = self._gt_at(t) if self._gt_at else None
            out.append(self._core.make_frame(t, ground_truth=gt))
        oldest_needed = self._pending[0] if self._pending else self._stream_t
        if oldest_needed is not None:
            self._core.evict(oldest_needed)
        return out


def _nbytes(sample: Sample) -> int:
    return sample.points.nbytes if isinstance(sample, PointCloudSample) else len(sample.data)
