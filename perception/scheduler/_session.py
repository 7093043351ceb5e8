"""One session assembly: a profile resolved against its source, the same for every entry point.

Replay is the vehicle's rehearsal only if both run the same thing. Everything that depends on the
source is decided here, once, and nowhere else:

* the sensors and the model of each (a profile without ``sensors:`` takes the source's rig, each
  sensor served by its kind's default: ``model: auto`` picks the camera model by the source);
* the frame budget and the fusion settings that depend on the source (``budget.recorded_total_ms``,
  ``fusion.radar_truck_returns``);
* which sensor of the source each configured sensor is (by ``topic`` when set, else by name), with
  its mount and calibration;
* sweep accumulation (the frame assembler gets the mounts and the source's ego poses);
* the fusion stage (the profile's ``fusion:`` section over the rig, with the source's ego poses).

``Runtime``, ``ThreadedRuntime``, ``LiveRuntime``, replay, evaluation, budget, fleet, ``perception
live`` and the benchmarks all go through :meth:`Session.assemble`; a drive's source is
``DriveReader.source``, a vehicle's ``SessionSource.live(rig)``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from perception.config import RuntimeConfig, auto_trigger, resolve_sensors, with_overrides
from perception.errors import ConfigError, DriveError, InputError
from perception.scheduler._align import FrameAssembler
from perception.types import Detection3D, Frame, SensorResult, SensorSpec, SessionSource

__all__ = ["FusionStage", "Session"]

log = logging.getLogger(__name__)


class FusionStage(Protocol):
    """Turns a joined frame into fused detections; returns ``(detections, stage_ns)``.

    ``stage_ns`` maps stage names (e.g. ``fusion``, ``tracking``) to the nanoseconds they took.
    Must never raise because a sensor is missing: missing sensors simply have no outputs.
    """

    def __call__(
        self, frame: Frame, results: Mapping[str, SensorResult]
    ) -> tuple[tuple[Detection3D, ...], Mapping[str, int]]: ...


@runtime_checkable
class TrackingStage(FusionStage, Protocol):
    """A fusion stage that tracks objects from frame to frame (:class:`perception.fusion.Fuser`).

    ``predict``: a frame it does not fuse (shed under overload) answered with its tracks' prediction at
    the frame's time, read-only (the tracker is left as it was). ``tracker_state``: its tracks' state
    after the latest frame fused (arrays by name), which a recording digests."""

    def predict(self, frame: Frame) -> tuple[Detection3D, ...]: ...

    def tracker_state(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class Session:
    """A profile resolved against a source: what every entry point runs (see module docs).

    ``config`` is resolved (sensors, models, trigger, budget, fusion settings); ``rig`` maps each
    configured sensor to its spec in the source (empty when the source gave no rig: then there is
    no fusion and no accumulation); ``source`` is what it was resolved against.
    """

    config: RuntimeConfig
    rig: Mapping[str, SensorSpec]
    source: SessionSource
    #: The profile left the trigger to the source (neither ``sensor`` nor ``rate_hz``): it is chosen
    #: again from the sensors a run enables (:meth:`with_overrides`), by the same rule.
    auto_trigger: bool = False

    @classmethod
    def assemble(cls, config: RuntimeConfig, source: SessionSource | None = None) -> Session:
        """Resolve ``config`` against ``source``. A profile that leaves its sensors to the source and a
        source without sensors, or an assembly that enables no sensor, is a :class:`ConfigError` saying
        what to pass; a configured sensor the source lacks names both sides."""
        if source is None:
            source = SessionSource(rig={})
        file = str(config.source) if config.source else None
        if not config.resolved and not source.rig:
            raise ConfigError(
                "the profile lists no sensors (they come from the source): pass the source "
                "(source=reader.source for a drive, source=SessionSource.live(rig) or rig= for a vehicle), "
                "or list them under sensors:",
                file=file,
                key="sensors",
            )
        # Without any source (only listed sensors, no rig) nothing is known of it: the profile as it is.
        metadata = source.metadata if source.rig or source.metadata else None
        resolved = resolve_sensors(config, source.rig, where=source.name, metadata=metadata)
        if not resolved.active_sensors:
            raise ConfigError(
                f"no sensor is enabled ({len(resolved.sensors)} configured, all with enabled: false)",
                file=file,
                key="sensors",
            )
        rig = _match_rig(resolved, source) if source.rig else {}
        return cls(config=resolved, rig=rig, source=source, auto_trigger=config.trigger.automatic)

    def with_overrides(
        self, *, url: str | None = None, sensors: Sequence[str] | None = None, budget_ms: float | None = None
    ) -> Session:
        """This session with the CLI's overrides applied to its config
        (:func:`perception.config.with_overrides`: a server URL, the enabled sensors, a frame budget);
        the rig stays (it maps every configured sensor, enabled or not). A trigger the profile left to the
        source is chosen again from the sensors enabled (:func:`perception.config.auto_trigger`): it was
        the lidar that ``--sensors`` had left out."""
        config = with_overrides(self.config, url=url, sensors=sensors, budget_ms=budget_ms)
        if sensors is not None and self.auto_trigger:
            config = dataclasses.replace(config, trigger=auto_trigger(config.sensors))
        return dataclasses.replace(self, config=config)

    @property
    def source_names(self) -> Mapping[str, str]:
        """The source's sensor name of each configured sensor (they differ when matched by topic)."""
        return {name: spec.name for name, spec in self.rig.items()}

    def fusion(self) -> FusionStage | None:
        """The fusion stage the profile asks for: a :class:`perception.fusion.Fuser` over the rig with the
        source's ego poses (``None`` when fusion is off, or when there is no rig to fuse over)."""
        if not self.config.fusion.enabled:
            return None
        if not self.rig:
            log.warning("fusion is enabled but no rig was given: results carry no fused detections (pass rig=)")
            return None
        from perception.fusion import Fuser  # the fusion stage sits beside the scheduler, not below it

        fuser: FusionStage = Fuser(
            self.config.fusion, self.rig, ego_at=self.source.ego_at, ego_max_age_ns=self.config.live.ego_max_age_ns
        )
        return fuser

    def assembler(self) -> FrameAssembler:
        """A frame assembler for this session's sensors and trigger: samples named as configured, the
        source's ego poses and ground truth on each frame, point sensors accumulating their sweeps."""
        return FrameAssembler(
            self.config.sensors,
            self.config.trigger,
            ego_at=self.source.ego_at,
            gt_at=self.source.gt_at,
            rig=self.rig,
            aliases={src: name for name, src in self.source_names.items()},
        )


def _match_rig(config: RuntimeConfig, source: SessionSource) -> dict[str, SensorSpec]:
    """Map each configured sensor to the source's sensor (by ``topic`` when set, else by name).

    A configured sensor the source does not have is a :class:`ConfigError` naming the sensor, the source
    and what it has; a kind mismatch too; an unusable camera calibration names the camera.
    """
    rig = source.rig
    by_topic = {spec.topic: spec for spec in rig.values()}
    file = str(config.source) if config.source else None
    out: dict[str, SensorSpec] = {}
    for i, s in enumerate(config.sensors):
        spec = by_topic.get(s.topic) if s.topic else rig.get(s.name)
        if spec is None:
            have = ", ".join(f"{n} ({sp.kind})" for n, sp in rig.items())
            what = f"topic {s.topic!r}" if s.topic else f"sensor {s.name!r}"
            raise ConfigError(f"{what} is not in {source.name} (it has: {have})", file=file, key=f"sensors[{i}]")
        if spec.kind != s.kind:
            raise ConfigError(
                f"sensor {s.name!r} is configured as {s.kind} but is a {spec.kind} in {source.name}",
                file=file,
                key=f"sensors[{i}].kind",
            )
        if spec.calibration is not None:
            problem = spec.calibration.problem()
            if problem is not None:
                if source.file is not None:
                    raise DriveError(
                        f"camera {spec.name!r}: {problem}", file=source.file, topic=spec.topic, sensor=spec.name
                    )
                raise InputError(f"camera {spec.name!r}: {problem}", sensor=spec.name)
        out[s.name] = spec
    return out
