"""Fill a profile's sensors and trigger from a rig: the drive's sensors, when the profile leaves them open."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from perception.config._drive_source import default_camera_model
from perception.config._model import RuntimeConfig, SensorConfig, SensorDefaults, TriggerConfig, reference_problem
from perception.errors import ConfigError
from perception.types import SensorKind, SensorSpec

__all__ = ["auto_trigger", "resolve_sensors"]

#: ``model: auto`` in ``sensor_defaults``: the reference model for the drive's source.
AUTO = "auto"
_BUILTIN = SensorDefaults()

# Which kind triggers a frame when the profile does not say: the lidar sweeps a drive is built around,
# else a camera, else a radar, else another registered kind (by name).
_TRIGGER_ORDER = (SensorKind.LIDAR, SensorKind.CAMERA, SensorKind.RADAR)


def resolve_sensors(
    config: RuntimeConfig,
    rig: Mapping[str, SensorSpec],
    *,
    where: str = "the rig",
    metadata: Mapping[str, str] | None = None,
) -> RuntimeConfig:
    """``config`` with its sensors and trigger known.

    A profile that lists no sensors gets one per sensor of ``rig`` (in the rig's order), served by
    ``config.sensor_defaults`` for its kind. An auto trigger (neither ``sensor`` nor ``rate_hz``)
    becomes the first lidar by name, else the first camera, else the first radar. A config that is
    already resolved keeps its sensors and trigger. ``where`` names the rig in messages (e.g. the drive's path);
    ``metadata`` is the drive's: its source picks ``model: auto`` (none: a recording of real sensors)
    and the budget (:meth:`BudgetConfig.for_drive`; none: ``budget.total_ms`` as it is) and the fusion
    settings that depend on the sensors (:meth:`FusionConfig.for_drive`).
    """
    if metadata is not None:
        config = dataclasses.replace(
            config, budget=config.budget.for_drive(metadata), fusion=config.fusion.for_drive(metadata)
        )
    if config.resolved:
        return config
    file = str(config.source) if config.source else None
    sensors = config.sensors
    if not sensors:
        if not rig:
            raise ConfigError(f"the profile lists no sensors and {where} has none", file=file, key="sensors")
        sensors = tuple(_from_spec(config, spec, metadata or {}) for spec in rig.values())
    trigger = config.trigger
    if trigger.automatic:
        trigger = auto_trigger(sensors)
    unknown = reference_problem(config, sensors)
    if unknown is not None:
        key, problem = unknown
        raise ConfigError(f"{problem}; the sensors are those of {where}", file=file, key=key)
    try:
        return dataclasses.replace(config, sensors=sensors, trigger=trigger)
    except ValueError as exc:  # e.g. two drive sensors that are not valid sensor names
        raise ConfigError(f"cannot take the sensors from {where}: {exc}", file=file, key="sensors") from None


def auto_trigger(sensors: Sequence[SensorConfig]) -> TriggerConfig:
    """The trigger of a profile that leaves it to the drive (neither ``sensor`` nor ``rate_hz``): the first
    lidar of the enabled sensors by name, else the first camera, else the first radar, else the first of
    another kind (every sensor when none is enabled). The one rule for a profile's sensors and for the
    sensors a run enables (``--sensors``: :meth:`perception.scheduler.Session.with_overrides`)."""
    kinds = {s.name: s.kind for s in sensors if s.enabled} or {s.name: s.kind for s in sensors}
    for kind in (*_TRIGGER_ORDER, *sorted(set(kinds.values()) - set(_TRIGGER_ORDER))):
        names = sorted(n for n, k in kinds.items() if k == kind)
        if names:
            return TriggerConfig(sensor=names[0])
    return TriggerConfig()


def _from_spec(config: RuntimeConfig, spec: SensorSpec, metadata: Mapping[str, str]) -> SensorConfig:
    kind = spec.kind
    d = config.sensor_defaults.of(kind)
    model = d.model
    if model == AUTO:
        model = default_camera_model(metadata) if kind == "camera" else _BUILTIN.of(kind).model
    try:
        return SensorConfig(
            name=spec.name,
            kind=kind,
            model=model,
            transport=d.transport,
            sync_window_ms=d.sync_window_ms,
            max_staleness_ms=d.max_staleness_ms,
            accumulate_ms=d.accumulate_ms,
            decode=d.decode,
        )
    except ValueError as exc:
        raise ConfigError(
            f"sensor {spec.name!r} ({kind}): {exc}",
            file=str(config.source) if config.source else None,
            key=f"sensor_defaults.{kind}",
        ) from None
