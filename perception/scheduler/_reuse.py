"""Sensors that cannot keep up run at the rate they sustain, while frames are shed under overload.

When the machine cannot run every sensor's model at the trigger's rate, the overload policy sheds
whole frames (:mod:`perception.scheduler._shedding`). The sensors a frame cannot do without are the
trigger and ``pipeline.required_sensors``; the others are *decimated* while frames are being shed
(a frame was shed within :data:`OVERLOAD_MEMORY_NS` of sensor time): a frame does not send their
requests as long as each one's latest result is at most ``reuse_max_age_ms / 2`` old, and fusion uses
that result instead, marked in the frame's record as reused with its age
(:attr:`perception.types.SensorResult.reused_age_ns`), as Apollo fuses each sensor's latest cached
result. So each decimated sensor runs at least every half staleness limit of sensor time, a reused
result is never older than that plus one processed frame's interval, and the CPU it frees lets the
required sensors' frames finish sooner. A frame is never held back for a decimated sensor. Fusion
places a reused result at its own sample's time (ego motion compensated, as any late sample).

Without overload nothing is decimated: a replay slower than the machine gives lockstep's detections.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from perception.config import required_sensors_problem
from perception.errors import ConfigError
from perception.types import Frame, SensorResult, SensorStatus

__all__ = ["OVERLOAD_MEMORY_NS", "SensorReuse"]

#: Sensor time after a shed frame during which the sensors that are not required are decimated.
OVERLOAD_MEMORY_NS = 1_000_000_000


class SensorReuse:
    """Which sensors a frame sends requests for, and the reused results of the others (module docs).
    One per runtime; frames are planned and merged in the order they are processed."""

    def __init__(self, required: frozenset[str], sensors: tuple[str, ...], max_age_ns: int) -> None:
        self.required = required
        self.optional = tuple(s for s in sensors if s not in required)
        self.max_age_ns = max_age_ns
        self._latest: dict[str, SensorResult] = {}
        self._shed_t_ns: int | None = None
        #: Results reused, per sensor.
        self.reused: dict[str, int] = {}

    @classmethod
    def of(
        cls,
        sensors: tuple[str, ...],
        trigger: str | None,
        required: tuple[str, ...],
        max_age_ms: float,
        file: str | None,
    ) -> SensorReuse:
        """From the profile: ``pipeline.required_sensors`` must name configured sensors (a
        :class:`ConfigError` naming the key otherwise)."""
        problem = required_sensors_problem(required, sensors)  # (the profile's check, of the sensors that run)
        if problem is not None:
            raise ConfigError(problem, file=file, key="pipeline.required_sensors")
        # without a trigger sensor (frames at a fixed rate) no sensor is decimated unless named optional
        needed = frozenset(required) | ({trigger} if trigger else frozenset(sensors))
        return cls(needed, sensors, round(max_age_ms * 1e6))

    def shed(self, frame: Frame) -> None:
        """``frame`` was shed under overload."""
        self._shed_t_ns = frame.t_ns if self._shed_t_ns is None else max(self._shed_t_ns, frame.t_ns)

    def overloaded(self, t_ns: int) -> bool:
        return self._shed_t_ns is not None and abs(t_ns - self._shed_t_ns) <= OVERLOAD_MEMORY_NS

    def plan(self, frame: Frame) -> tuple[Frame, dict[str, SensorResult]]:
        """The frame to dispatch (without the decimated sensors' samples) and the results reused for them."""
        if not self.optional or not self.overloaded(frame.t_ns):
            return frame, {}
        reused: dict[str, SensorResult] = {}
        for name in self.optional:
            last = self._latest.get(name)
            if last is None or last.sample_t_ns is None or frame.samples.get(name) is None:
                continue
            age = frame.t_ns - last.sample_t_ns
            if 0 <= age <= self.max_age_ns // 2:
                reused[name] = dataclasses.replace(last, latency_ns=0, stages={}, reused_age_ns=age)
        if not reused:
            return frame, {}
        for name in reused:
            self.reused[name] = self.reused.get(name, 0) + 1
        samples = {k: v for k, v in frame.samples.items() if k not in reused}
        return dataclasses.replace(frame, samples=samples), reused

    def merge(self, results: Mapping[str, SensorResult], reused: Mapping[str, SensorResult]) -> dict[str, SensorResult]:
        """The frame's results with the reused ones in place; remembers each sensor's latest ok answer."""
        for name, result in results.items():
            if result.status is SensorStatus.OK and name not in reused and name in self.optional:
                self._latest[name] = result
        return {**results, **reused} if reused else dict(results)
