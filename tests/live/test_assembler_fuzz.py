"""Fuzz of live assembly (issue 33): random samples -- stamps of any type and range, shapes, NaN/Inf,
sizes, quaternions, bursts and silences -- pushed on a host clock the test drives. Invariants: nothing
raises, frames come in time order with consecutive ids, every trigger sample taken is in exactly one
frame, buffers stay within their caps."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perception.config import LiveConfig, SensorConfig, TriggerConfig
from perception.live._assembler import MAX_BUFFERED, LiveAssembler
from perception.types import CameraCalibration, EgoPose, ImageSample, PointCloudSample, SensorSpec, Transform

MS = 1_000_000
SENSORS = (
    SensorConfig("lidar", "lidar", "m", sync_window_ms=60, max_staleness_ms=150, accumulate_ms=300),
    SensorConfig("radar", "radar", "m", sync_window_ms=50, max_staleness_ms=150),
    SensorConfig("cam", "camera", "m", sync_window_ms=50, max_staleness_ms=150),
)
CAL = CameraCalibration(64, 48, (50.0, 0, 32, 0, 50, 24, 0, 0, 1))
RIG = {
    s.name: SensorSpec(
        s.name, s.kind, s.name, Transform((1.0, 0.0, 1.5)), f"/{s.name}", CAL if s.kind == "camera" else None
    )
    for s in SENSORS
}
FIELDS = {"lidar": ("x", "y", "z", "intensity"), "radar": ("x", "y", "z", "radial_velocity", "rcs")}

FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=32)
STAMP_JUNK = st.one_of(st.floats(), st.integers(min_value=-(2**64), max_value=2**64), st.none(), st.text(max_size=2))
EVENT = st.one_of(
    # a sample of a sensor: stamp offset from the host clock (ms), columns, rows, a fill value
    st.tuples(
        st.just("sample"),
        st.sampled_from(["lidar", "radar", "cam", "sonar"]),
        st.one_of(st.integers(-3000, 3000), STAMP_JUNK),
        st.integers(0, 7),
        st.integers(0, 50),
        FLOATS,
    ),
    st.tuples(st.just("ego"), st.one_of(st.integers(-500, 500), STAMP_JUNK), st.tuples(*[FLOATS] * 4), FLOATS),
    st.tuples(st.just("tick"), st.integers(0, 3000)),  # the host clock advances this many ms (a silence)
    st.tuples(st.just("burst"), st.integers(1, 30), st.integers(0, 200)),  # trigger sweeps this many, gap us
)


def _sample(sensor: str, t: Any, cols: int, rows: int, fill: float) -> PointCloudSample | ImageSample:
    if sensor == "cam":
        data = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR" + (cols * 3000).to_bytes(4, "big") * 2 + bytes(8)
        return ImageSample("cam", t, "cam", data if rows else b"", "png")
    fields = (*FIELDS.get(sensor, FIELDS["lidar"]), "a", "b", "c")[:cols]
    return PointCloudSample(sensor, t, sensor, np.full((rows, cols), fill, np.float32), fields)


def _run(live: LiveConfig, trigger: TriggerConfig, events: list[Any]) -> LiveAssembler[int]:
    asm: LiveAssembler[int] = LiveAssembler(SENSORS, trigger, live, rates={"radar": 13.0}, rig=RIG)
    now = 1_000_000 * MS
    token = 0
    taken: set[int] = set()
    frames: list[tuple[Any, int | None]] = []

    def push(sample: Any) -> None:
        nonlocal token
        token += 1
        if asm.add(sample, now, token=token) is None and sample.sensor == trigger.sensor:
            taken.add(token)

    for ev in events:
        if ev[0] == "sample":
            _, sensor, t, cols, rows, fill = ev
            push(_sample(sensor, now + t * MS if isinstance(t, int) and abs(t) <= 3000 else t, cols, rows, fill))
        elif ev[0] == "ego":
            _, t, q, v = ev
            stamp = now + t * MS if isinstance(t, int) and abs(t) <= 3000 else t
            asm.add_ego(EgoPose(stamp, Transform((0.0, 0.0, 0.0), q), (float(v), 0.0, 0.0)), now)
        elif ev[0] == "tick":
            now += ev[1] * MS
        else:
            _, count, gap_us = ev
            for k in range(count):
                push(_sample("lidar", now - (count - k) * 100 * MS, 4, 3, 1.0))
                now += gap_us * 1000
        frames += asm.due(now)
        assert all(len(asm.buffered(s.name)) <= MAX_BUFFERED for s in SENSORS)
        assert len(asm.pending_tokens()) <= 10_000
    frames += asm.close()
    ids = [f.frame_id for f, _ in frames]
    assert ids == list(range(len(ids)))
    times = [f.t_ns for f, _ in frames]
    assert times == sorted(times) and len(set(times)) == len(times), "one frame per slot, in time order"
    tokens = [tok for _, tok in frames if tok is not None]
    assert len(tokens) == len(set(tokens)) and set(tokens) <= taken, "a frame per trigger sample, at most"
    if trigger.sensor is not None:
        assert set(tokens) == taken, "each trigger sample taken: exactly one frame"
    assert asm.stats.frames == len(frames)
    return asm


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(EVENT, max_size=60), mode=st.sampled_from(["monotonic", "estimate", "offset"]))
def test_random_samples_into_trigger_assembly(events: list[Any], mode: str) -> None:
    live = LiveConfig(time_base=mode, offset_ms=0.0, transit_ms=20, trigger_tolerance_ms=50)  # type: ignore[arg-type]
    _run(live, TriggerConfig(sensor="lidar"), events)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(EVENT, max_size=60))
def test_random_samples_into_fixed_rate_assembly(events: list[Any]) -> None:
    _run(LiveConfig(time_base="estimate"), TriggerConfig(rate_hz=20.0), events)
