"""Replay's and live's assemblers share one core (``perception.scheduler.AlignCore``): fed the same
time-ordered samples -- live's on a clock the test drives, each sample arriving at its capture time --
they make the same frames from the same samples."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perception.config import LiveConfig, SensorConfig, TriggerConfig
from perception.live._assembler import LiveAssembler
from perception.scheduler import FrameAssembler
from perception.types import Frame, ImageSample, PointCloudSample, Sample

MS = 1_000_000
T0 = 1_000_000 * MS
LIDAR = ("x", "y", "z", "i")
RADAR = ("x", "y", "z", "radial_velocity", "rcs")
#: No silence timer within a stream (replay has none), no transit wait, stamps on the host clock.
LIVE = LiveConfig(transit_ms=0.0, trigger_tolerance_ms=1e7)


def _sample(sensor: str, t: int) -> Sample:
    if sensor == "cam":
        return ImageSample("cam", t, "cam", b"\xff\xd8" + bytes(8))
    fields = RADAR if sensor == "radar" else LIDAR
    return PointCloudSample(sensor, t, sensor, np.zeros((1, len(fields)), np.float32), fields)


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[SensorConfig], TriggerConfig, list[Sample]]:
    sensors = [
        SensorConfig(
            name,
            kind,
            "m",
            sync_window_ms=draw(st.sampled_from([0.0, 10.0, 30.0, 50.0, 120.0])),
            max_staleness_ms=draw(st.sampled_from([5.0, 40.0, 100.0, 250.0])),
            enabled=name == "lidar" or draw(st.booleans()) or draw(st.booleans()),
        )
        for name, kind in (("lidar", "lidar"), ("radar", "radar"), ("cam", "camera"))
    ]
    rate = draw(st.sampled_from([None, 7.0, 10.0]))
    trigger = TriggerConfig(rate_hz=rate) if rate is not None else TriggerConfig(sensor="lidar")
    samples: list[tuple[int, int, Sample]] = []
    # the trigger (lidar) every period, within 10 % (live measures its period; replay needs none)
    period = draw(st.integers(50, 150)) * MS
    jitter = st.integers(-period // 10, period // 10)
    for k in range(draw(st.integers(0, 25))):
        samples.append((T0 + k * period + draw(jitter), 0, _sample("lidar", 0)))
    for order, name in ((1, "radar"), (2, "cam")):
        t = T0 + draw(st.integers(-200, 200)) * MS
        for _ in range(draw(st.integers(0, 40))):
            t += draw(st.integers(0, 120)) * MS  # 0: a duplicate
            samples.append((t, order, _sample(name, 0)))
    samples.sort(key=lambda x: (x[0], x[1]))  # one time-ordered stream, as a recording plays
    out: list[Sample] = []
    for t, _, s in samples:
        out.append(type(s)(**{**{f: getattr(s, f) for f in s.__dataclass_fields__}, "t_ns": t}))
    return sensors, trigger, out


def _shape(frames: Sequence[Frame]) -> list[tuple[int, int, dict[str, int | None]]]:
    return [
        (f.frame_id, f.t_ns, {n: (None if s is None else s.t_ns) for n, s in sorted(f.samples.items())})
        for f in frames
    ]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=streams())
def test_replay_and_live_make_the_same_frames_from_the_same_samples(
    stream: tuple[list[SensorConfig], TriggerConfig, list[Sample]],
) -> None:
    sensors, trigger, samples = stream
    replay = FrameAssembler(sensors, trigger)
    replayed = list(replay.feed(samples))
    live: LiveAssembler[None] = LiveAssembler(sensors, trigger, LIVE)
    lived: list[Frame] = []
    for i, s in enumerate(samples):  # each arrives at its capture time; the host looks for due frames
        live.add(s, s.t_ns)  # once it has taken what arrived at that instant (as LiveRuntime takes its intake)
        if i + 1 == len(samples) or samples[i + 1].t_ns > s.t_ns:
            lived += [f for f, _ in live.due(s.t_ns)]
    lived += [f for f, _ in live.close()]
    assert _shape(lived) == _shape(replayed)
    assert (live.stats.duplicate, live.stats.out_of_order) == (replay.stats.duplicate, replay.stats.out_of_order)
    assert live.stats.samples == replay.stats.samples and live.stats.frames == replay.stats.frames
