"""Sensors that are not required are decimated while frames are shed, their latest results reused
(sensor times fed in); a profile naming an unknown required sensor is a ConfigError naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from perception.config import RuntimeConfig, from_data
from perception.errors import ConfigError
from perception.scheduler import Runtime
from perception.scheduler._reuse import OVERLOAD_MEMORY_NS, SensorReuse
from perception.types import Frame, SensorResult, SensorStatus

MS = 1_000_000
SENSORS = ("lidar_top", "cam_front", "radar_front")


def frame(t_ms: int) -> Frame:
    return Frame(frame_id=t_ms, t_ns=t_ms * MS, samples={name: object() for name in SENSORS})  # type: ignore[misc]


def answered(t_ms: int) -> dict[str, SensorResult]:
    return {name: SensorResult(name, SensorStatus.OK, latency_ns=5 * MS, sample_t_ns=t_ms * MS) for name in SENSORS}


def dispatched(sent: Frame, t_ms: int) -> dict[str, SensorResult]:
    """What the dispatcher answers for ``sent``: ok for the samples it has, missing for the others."""
    out = answered(t_ms)
    for name in SENSORS:
        if name not in sent.samples:
            out[name] = SensorResult(name, SensorStatus.MISSING)
    return out


def reuse(required: tuple[str, ...] = ()) -> SensorReuse:
    return SensorReuse.of(SENSORS, "lidar_top", required, max_age_ms=300.0, file=None)


def test_without_overload_every_sensor_is_requested() -> None:
    r = reuse()
    for t in range(0, 1000, 50):
        sent, reused = r.plan(frame(t))
        assert sent.samples.keys() == set(SENSORS) and not reused
        r.merge(dispatched(sent, t), reused)


def test_while_frames_are_shed_the_sensors_not_required_reuse_their_latest_result() -> None:
    r = reuse()
    sent, reused = r.plan(frame(0))
    r.merge(dispatched(sent, 0), reused)
    r.shed(frame(50))  # overload: a frame was shed
    sent, reused = r.plan(frame(100))
    assert set(sent.samples) == {"lidar_top"}  # the trigger is always requested
    assert {name: res.reused_age_ns for name, res in reused.items()} == {"cam_front": 100 * MS, "radar_front": 100 * MS}
    results = r.merge(dispatched(sent, 100), reused)
    assert results["cam_front"].status is SensorStatus.OK and results["cam_front"].sample_t_ns == 0
    assert list(results) == list(SENSORS)
    # older than half the staleness limit (150 ms): requested again, and reused from then on
    sent, reused = r.plan(frame(200))
    assert set(sent.samples) == set(SENSORS) and not reused
    r.merge(dispatched(sent, 200), reused)
    sent, reused = r.plan(frame(300))
    assert set(reused) == {"cam_front", "radar_front"} and reused["cam_front"].reused_age_ns == 100 * MS
    assert r.reused == {"cam_front": 2, "radar_front": 2}
    # the overload is over (no frame shed for a while): every sensor again
    sent, reused = r.plan(frame(50 + OVERLOAD_MEMORY_NS // MS + 1))
    assert set(sent.samples) == set(SENSORS) and not reused


def test_required_sensors_are_never_decimated() -> None:
    r = reuse(required=("cam_front",))
    r.merge(answered(0), {})
    r.shed(frame(50))
    sent, reused = r.plan(frame(100))
    assert set(sent.samples) == {"lidar_top", "cam_front"} and set(reused) == {"radar_front"}


def config(**pipeline: Any) -> RuntimeConfig:
    return from_data(
        RuntimeConfig,
        {
            "server": {"url": "127.0.0.1:1"},
            "sensors": [{"name": "lidar_top", "kind": "lidar", "model": "lidar_detector"}],
            "trigger": {"sensor": "lidar_top"},
            "fusion": {"enabled": False},
            "pipeline": pipeline,
        },
    )


def test_an_unknown_required_sensor_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        Runtime(config(required_sensors=["cam_left"]))
    assert info.value.key == "pipeline.required_sensors"
    assert "'cam_left' is not a configured sensor (configured: lidar_top)" in str(info.value)
    Runtime(config(required_sensors=["lidar_top"]))  # a configured one is fine
