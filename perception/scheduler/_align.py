"""Time alignment: turn a time-ordered stream of sensor samples into frames.

A frame is triggered by each sample of a reference sensor, or at a fixed rate. Every other sensor
contributes the sample nearest the frame time within its sync window, provided the sample is not
older than its staleness limit; otherwise the sensor is ``None`` (missing) in that frame.

The assembler is driven by sample time, not wall time: a pending frame is completed as soon as the
stream has moved past ``t + max(sync windows)`` (later samples can no longer be nearer), so a silent
sensor never holds a frame back. :meth:`flush` completes whatever is pending at the end of a stream
(or when a live host decides the horizon has passed).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from perception.config import SensorConfig, TriggerConfig
from perception.errors import ConfigError
from perception.scheduler._accumulate import SweepAccumulator
from perception.types import EgoPose, Frame, GroundTruth, Sample, SensorSpec

__all__ = ["UNKNOWN_LIMIT", "AlignStats", "FrameAssembler"]

log = logging.getLogger(__name__)

#: Samples of unconfigured sensors taken before any configured one before the stream is refused.
UNKNOWN_LIMIT = 64


@dataclass
class AlignStats:
    samples: int = 0
    frames: int = 0
    unknown_sensor: int = 0  # samples of sensors that are not configured (ignored)
    out_of_order: int = 0  # samples older than one already seen for the same sensor (dropped, counted)
    duplicate: int = 0  # same sensor, same timestamp as the previous sample (dropped, counted)


class FrameAssembler:
    """Assemble :class:`Frame` objects from a time-ordered sample stream.

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
        ego_at: Callable[[int], EgoPose | None] | None = None,
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
        self._sensors = {s.name: s for s in sensors}
        self._aliases = {src: name for src, name in (aliases or {}).items() if src != name}
        self._unknown: set[str] = set()
        self._active = [s.name for s in sensors if s.enabled]
        if trigger.sensor is not None and trigger.sensor not in self._sensors:
            raise ConfigError(f"trigger sensor {trigger.sensor!r} is not configured", key="trigger.sensor")
        self._trigger = trigger
        self._horizon_ns = max((s.sync_window_ns for s in sensors if s.enabled), default=0)
        # No future frame (t >= oldest pending) can use a sample older than this before it.
        self._keep_ns = max((min(s.sync_window_ns, s.max_staleness_ns) for s in sensors), default=0)
        #: Earlier sweeps merged into point sensors' samples (``SensorConfig.accumulate_ms``, needs ``rig``).
        self.accumulator = SweepAccumulator(
            sensors, {n: spec.extrinsic for n, spec in (rig or {}).items()}, ego_at=ego_at
        )
        self._keep_ns = max(self._keep_ns, self.accumulator.keep_ns)
        self._buffers: dict[str, deque[Sample]] = {name: deque() for name in self._sensors}
        self._last_t: dict[str, int] = {}
        self._pending: deque[int] = deque()  # frame times waiting for the horizon
        self._stream_t: int | None = None
        self._next_rate_t: int | None = None
        self._period_ns = round(1e9 / trigger.rate_hz) if trigger.rate_hz else 0
        self._next_id = 0
        self.stats = AlignStats()
        self._ego_at = ego_at
        self._gt_at = gt_at

    # ------------------------------------------------------------------------------------------
    def push(self, sample: Sample) -> list[Frame]:
        name = self._aliases.get(sample.sensor, sample.sensor)
        cfg = self._sensors.get(name)
        if cfg is None:
            self.stats.unknown_sensor += 1
            self._unknown.add(name)
            if self.stats.samples == 0 and self.stats.unknown_sensor >= UNKNOWN_LIMIT:
                raise ConfigError(
                    f"none of the first {self.stats.unknown_sensor} samples is of a configured sensor "
                    f"(samples of: {', '.join(sorted(self._unknown))}; configured: {', '.join(self._sensors)})",
                    key="sensors",
                )
            return []
        if name != sample.sensor:
            sample = replace(sample, sensor=name)
        last = self._last_t.get(name)
        if last is not None and sample.t_ns <= last:
            if sample.t_ns == last:
                self.stats.duplicate += 1
                log.warning("sensor %s: duplicate timestamp %d dropped", name, sample.t_ns)
            else:
                self.stats.out_of_order += 1
                log.warning("sensor %s: timestamp went backwards (%d after %d), dropped", name, sample.t_ns, last)
            return []
        self._last_t[name] = sample.t_ns
        self.stats.samples += 1
        self._buffers[name].append(sample)
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

    # ------------------------------------------------------------------------------------------
    def _complete(self, *, final: bool) -> list[Frame]:
        out: list[Frame] = []
        while self._pending:
            t = self._pending[0]
            if not final and self._stream_t is not None and self._stream_t <= t + self._horizon_ns:
                break
            self._pending.popleft()
            out.append(self._make_frame(t))
        self._evict()
        return out

    def _make_frame(self, t: int) -> Frame:
        chosen: dict[str, Sample | None] = {}
        for name in self._active:
            chosen[name] = self._nearest(self._sensors[name], t)
        frame_id = self._next_id
        self._next_id += 1
        self.stats.frames += 1
        ego = self._ego_at(t) if self._ego_at else None
        gt = self._gt_at(t) if self._gt_at else None
        frame = Frame(frame_id=frame_id, t_ns=t, samples=chosen, ego=ego, ground_truth=gt)
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

    def _evict(self) -> None:
        oldest_needed = self._pending[0] if self._pending else self._stream_t
        if oldest_needed is None:
            return
        cutoff = oldest_needed - self._keep_ns
        for buf in self._buffers.values():
            while len(buf) > 1 and buf[0].t_ns < cutoff:
                buf.popleft()
