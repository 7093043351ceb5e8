from __future__ import annotations

import numpy as np
import pytest

from perception.config import SensorConfig, TriggerConfig
from perception.errors import ConfigError
from perception.scheduler import FrameAssembler
from perception.scheduler._align import UNKNOWN_LIMIT
from perception.types import PointCloudSample

MS = 1_000_000


def cloud(sensor: str, t_ms: float) -> PointCloudSample:
    return PointCloudSample(sensor, round(t_ms * MS), sensor, np.zeros((1, 4), np.float32), ("x", "y", "z", "i"))


SENSORS = [
    SensorConfig(name="lidar", kind="lidar", model="m", sync_window_ms=0),
    SensorConfig(name="radar", kind="radar", model="r", sync_window_ms=30, max_staleness_ms=40),
    SensorConfig(name="cam", kind="camera", model="c", sync_window_ms=20, max_staleness_ms=100),
]


def times(frame, name):  # type: ignore[no-untyped-def]
    s = frame.samples[name]
    return None if s is None else s.t_ns // MS


def test_nearest_within_window_including_future_samples() -> None:
    asm = FrameAssembler(SENSORS, TriggerConfig(sensor="lidar"))
    stream = [cloud("radar", 80), cloud("cam", 95), cloud("lidar", 100), cloud("radar", 110), cloud("cam", 160)]
    frames = list(asm.feed(stream))
    assert len(frames) == 1
    f = frames[0]
    assert f.t_ns == 100 * MS
    assert times(f, "lidar") == 100
    assert times(f, "radar") == 110  # nearer than 80 and inside the 30 ms window
    assert times(f, "cam") == 95


def test_outside_window_is_missing_and_silent_sensor_does_not_stall() -> None:
    asm = FrameAssembler(SENSORS, TriggerConfig(sensor="lidar"))
    out = []
    for t in range(0, 1000, 100):  # radar and camera never speak
        out += asm.push(cloud("lidar", t))
    # every frame but the last is complete as soon as the stream moves past its horizon
    assert [f.t_ns // MS for f in out] == list(range(0, 900, 100))
    assert all(f.samples["radar"] is None and f.samples["cam"] is None for f in out)
    assert len(asm.flush()) == 1


def test_staleness_limit_is_never_exceeded() -> None:
    sensors = [SENSORS[0], SensorConfig(name="radar", kind="radar", model="r", sync_window_ms=100, max_staleness_ms=10)]
    asm = FrameAssembler(sensors, TriggerConfig(sensor="lidar"))
    frames = list(asm.feed([cloud("radar", 50), cloud("lidar", 100)]))
    assert frames[0].samples["radar"] is None  # inside the window, but 50 ms old > 10 ms staleness


def test_rate_trigger_and_frame_ids() -> None:
    asm = FrameAssembler(SENSORS, TriggerConfig(rate_hz=20))
    stream = [cloud("cam", t) for t in range(0, 200, 33)]
    frames = list(asm.feed(stream))
    assert [f.t_ns // MS for f in frames] == [0, 50, 100, 150]
    assert [f.frame_id for f in frames] == [0, 1, 2, 3]


def test_backwards_and_repeated_timestamps_are_counted_not_used() -> None:
    asm = FrameAssembler(SENSORS, TriggerConfig(sensor="lidar"))
    stream = [cloud("lidar", 100), cloud("lidar", 100), cloud("lidar", 50), cloud("lidar", 200)]
    frames = list(asm.feed(stream))
    assert [f.t_ns // MS for f in frames] == [100, 200]
    assert asm.stats.duplicate == 1
    assert asm.stats.out_of_order == 1


def test_disabled_sensor_clocks_but_does_not_contribute() -> None:
    sensors = [SensorConfig(name="lidar", kind="lidar", model="m", enabled=False), SENSORS[1]]
    asm = FrameAssembler(sensors, TriggerConfig(sensor="lidar"))
    frames = list(asm.feed([cloud("lidar", 100), cloud("radar", 105)]))
    assert len(frames) == 1
    assert set(frames[0].samples) == {"radar"}


def test_buffers_stay_bounded() -> None:
    asm = FrameAssembler(SENSORS, TriggerConfig(sensor="lidar"))
    for t in range(0, 100_000, 10):
        asm.push(cloud("cam", t))
        if t % 100 == 0:
            asm.push(cloud("lidar", t))
    assert max(len(asm.buffered(s.name)) for s in SENSORS) < 50


def test_no_sensors_is_an_error_saying_what_to_pass() -> None:
    """A profile that leaves its sensors to the drive has none until resolved: its sensors assemble nothing,
    which used to be 0 frames and no word (issue 27)."""
    with pytest.raises(ConfigError, match=r"no sensors to assemble frames from: pass the resolved sensors"):
        FrameAssembler([], TriggerConfig())


def test_a_stream_of_only_unconfigured_sensors_is_refused() -> None:
    asm = FrameAssembler(SENSORS, TriggerConfig(sensor="lidar"))
    for t in range(UNKNOWN_LIMIT - 1):
        assert asm.push(cloud("roof_lidar", t)) == []
    with pytest.raises(ConfigError, match=r"none of the first 64 samples .*samples of: roof_lidar; configured: lidar"):
        asm.push(cloud("roof_lidar", UNKNOWN_LIMIT))


def test_unconfigured_sensors_beside_configured_ones_are_counted_not_refused() -> None:
    asm = FrameAssembler(SENSORS, TriggerConfig(sensor="lidar"))
    frames = list(asm.feed([cloud("lidar", 0), *(cloud("other", t) for t in range(1, 200)), cloud("lidar", 300)]))
    assert len(frames) == 2 and asm.stats.unknown_sensor == 199


def test_aliases_name_a_sources_sensors_as_configured() -> None:
    asm = FrameAssembler(SENSORS, TriggerConfig(sensor="lidar"), aliases={"LIDAR_TOP": "lidar"})
    (frame,) = asm.feed([cloud("LIDAR_TOP", 100)])
    sample = frame.samples["lidar"]
    assert sample is not None and sample.sensor == "lidar"
