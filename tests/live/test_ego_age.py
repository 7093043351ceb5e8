"""Odometry has an age limit (``live.ego_max_age_ms``): past it a frame's ego motion is unknown."""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from pathlib import Path

import numpy as np

from perception.config import FusionConfig, LiveConfig, SensorConfig, TriggerConfig
from perception.fusion import Fuser
from perception.fusion._testing import SimObject, lidar_result, make_rig
from perception.live import LiveRuntime
from perception.live._assembler import LiveAssembler
from perception.server import EmbeddedTriton
from perception.types import EgoPose, Frame, PointCloudSample, Transform

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_live_runtime import _config

S = 1_000_000_000

MS = 1_000_000
RIG = make_rig(cameras=0, radars=0)
SENSORS = (SensorConfig("lidar_top", "lidar", "m", sync_window_ms=60, max_staleness_ms=150),)
PARKED = SimObject("car", (15.0, 3.5, 0.8))


def sweep(t_ns: int) -> PointCloudSample:
    return PointCloudSample("lidar_top", t_ns, "lidar_top", np.zeros((1, 4), np.float32), ("x", "y", "z", "i"))


def assembler(live: LiveConfig) -> LiveAssembler[None]:
    return LiveAssembler(SENSORS, TriggerConfig(sensor="lidar_top"), live, rates={"lidar_top": 10.0})


def frames_after(asm: LiveAssembler[None], start: int, n: int) -> list[Frame]:
    out: list[Frame] = []
    for k in range(n):
        t = start + k * 100 * MS
        assert asm.add(sweep(t), t + 5 * MS) is None
        out += [f for f, _ in asm.due(t + 5 * MS)]
    return out + [f for f, _ in asm.close()]


def test_odometry_a_minute_old_is_not_extrapolated_onto_a_parked_car() -> None:
    # Localisation died a minute ago at 15 m/s; the car has stopped since, beside one parked car.
    asm = assembler(LiveConfig(transit_ms=20, trigger_tolerance_ms=50))
    t0 = 1_000_000 * MS
    assert asm.add_ego(EgoPose(t0, Transform.identity(), (15.0, 0.0, 0.0)), t0) is None
    frames = frames_after(asm, t0 + 60_000 * MS, 20)
    assert len(frames) == 20
    assert all(f.ego is None for f in frames), "past the age limit the frame's ego motion is unknown"
    assert asm.stats.ego_stale == 20
    fuser = Fuser(FusionConfig(score_threshold=0.0), RIG)
    for frame in frames:
        dets, _ = fuser(frame, {"lidar_top": lidar_result(RIG, "lidar_top", [PARKED], t_ns=frame.t_ns)})
    [car] = dets
    assert math.hypot(*car.velocity) < 0.5, f"a parked car reported at {car.velocity} m/s"


def test_fresh_odometry_is_still_used_and_the_limit_is_the_profiles() -> None:
    live = LiveConfig(transit_ms=20, trigger_tolerance_ms=50, ego_max_age_ms=150)
    asm = assembler(live)
    t0 = 1_000_000 * MS
    asm.add_ego(EgoPose(t0 - 140 * MS, Transform.identity(), (15.0, 0.0, 0.0)), t0)
    [first, second] = frames_after(asm, t0, 2)
    assert first.ego is not None and first.ego.t_ns == t0 - 140 * MS  # 140 ms old: within 150 ms
    assert second.ego is None  # 240 ms old
    assert asm.stats.ego_stale == 1
    assert LiveConfig().ego_max_age_ms == 300.0


def test_live_status_counts_frames_whose_odometry_is_too_old(triton: EmbeddedTriton) -> None:
    # One odometry message at the start, then the drive's first second without any: the frames past the
    # limit are counted in status() (and so in the ROS node's /diagnostics).
    cfg, rig, samples = _config(triton.grpc_url, ego_max_age_ms=150.0)
    samples = [s for s in samples if s.t_ns < samples[0].t_ns + S]
    t0_drive, t0 = samples[0].t_ns, time.monotonic_ns() + 50_000_000
    with LiveRuntime(cfg, rig, fusion=None) as live:
        live.push_ego(EgoPose(t0, Transform.identity(), (15.0, 0.0, 0.0)))
        for s in samples:
            delay = (t0 + s.t_ns - t0_drive - time.monotonic_ns()) / 1e9
            if delay > 0:
                time.sleep(delay)
            live.push(dataclasses.replace(s, t_ns=t0 + s.t_ns - t0_drive))
    intake = live.status()["intake"]
    frames = intake["frames"]
    # frames more than 150 ms after the pose: all but the first two of the 10 Hz trigger's (or so)
    assert frames >= 8 and frames - 3 <= intake["ego_stale"] < frames, intake


def test_a_hand_built_frame_s_old_odometry_is_not_extrapolated_either() -> None:
    # A host that builds its frames itself (rt.process) and hands each the last odometry it had, a minute
    # old at 15 m/s: the fuser applies the same age limit, so the parked car is not reported moving.
    t0 = 1_000_000 * MS
    stale = EgoPose(t0, Transform.identity(), (15.0, 0.0, 0.0))
    limit = LiveConfig().ego_max_age_ns
    fuser = Fuser(FusionConfig(score_threshold=0.0), RIG, ego_max_age_ns=limit)
    unlimited = Fuser(FusionConfig(score_threshold=0.0), RIG)
    for k in range(20):
        t = t0 + 60_000 * MS + k * 100 * MS
        frame = Frame(k, t, {"lidar_top": sweep(t)}, ego=stale)
        dets, _ = fuser(frame, {"lidar_top": lidar_result(RIG, "lidar_top", [PARKED], t_ns=t)})
        old, _ = unlimited(frame, {"lidar_top": lidar_result(RIG, "lidar_top", [PARKED], t_ns=t)})
    [car] = dets
    assert math.hypot(*car.velocity) < 0.5, f"a parked car reported at {car.velocity} m/s"
    [moving] = old  # without the limit, the old twist is extrapolated: the defect this guards against
    assert math.hypot(*moving.velocity) > 10.0


def test_the_session_s_fuser_applies_the_profiles_age_limit() -> None:
    from perception.config import RuntimeConfig
    from perception.scheduler import Session
    from perception.types import SessionSource

    trigger = TriggerConfig(sensor="lidar_top")
    config = RuntimeConfig(sensors=SENSORS, trigger=trigger, live=LiveConfig(ego_max_age_ms=150))
    fuser = Session.assemble(config, SessionSource.live(RIG)).fusion()
    assert isinstance(fuser, Fuser) and fuser._ego_max_age_ns == 150 * MS
