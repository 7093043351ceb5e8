"""Hostile input into live assembly (issue 33): every bad sample is counted and dropped, nothing grows
and nothing runs away, whatever the stamps, shapes, bursts and silences. The host clock is the test's."""

from __future__ import annotations

import dataclasses

import numpy as np

from perception._imageio import encode_jpeg
from perception.config import LiveConfig, SensorConfig, TriggerConfig
from perception.live._assembler import MAX_BUFFER_BYTES, MAX_BUFFERED, MAX_CATCH_UP, LiveAssembler
from perception.types import CameraCalibration, EgoPose, ImageSample, PointCloudSample, SensorSpec, Transform

MS = 1_000_000
LIDAR = ("x", "y", "z", "intensity")
RADAR = ("x", "y", "z", "radial_velocity", "rcs")
SENSORS = (
    SensorConfig("lidar", "lidar", "m", sync_window_ms=60, max_staleness_ms=150, accumulate_ms=120),
    SensorConfig("radar", "radar", "m", sync_window_ms=50, max_staleness_ms=150),
    SensorConfig("cam", "camera", "m", sync_window_ms=50, max_staleness_ms=150),
)
LIVE = LiveConfig(transit_ms=20, trigger_tolerance_ms=50)
CAL = CameraCalibration(64, 48, (50.0, 0, 32, 0, 50, 24, 0, 0, 1))
RIG = {
    s.name: SensorSpec(s.name, s.kind, s.name, Transform(), f"/{s.name}", CAL if s.kind == "camera" else None)
    for s in SENSORS
}


def lidar(t: object, fields: tuple[str, ...] = LIDAR, n: int = 3) -> PointCloudSample:
    return PointCloudSample("lidar", t, "lidar", np.ones((n, len(fields)), np.float32), fields)  # type: ignore[arg-type]


def radar(t: int) -> PointCloudSample:
    return PointCloudSample("radar", t, "radar", np.ones((2, 5), np.float32), RADAR)


def make(live: LiveConfig = LIVE, rates: dict[str, float] | None = None, **trigger: object) -> LiveAssembler[int]:
    trig = TriggerConfig(**trigger) if trigger else TriggerConfig(sensor="lidar")  # type: ignore[arg-type]
    rates = {"lidar": 10.0, "radar": 13.0} if rates is None else rates
    return LiveAssembler(SENSORS, trig, live, rates=rates, rig=RIG)


def run(asm: LiveAssembler[int], until: int, step: int = 10 * MS, start: int = 0) -> list[int]:
    """Tick the host clock; the frame times emitted."""
    out: list[int] = []
    for now in range(start, until, step):
        out += [f.t_ns for f, _ in asm.due(now)]
    return out


def test_a_nan_or_float_stamp_is_counted_against_its_sensor_and_assembly_goes_on() -> None:
    asm = make()
    assert asm.add(lidar(float("nan")), 1000 * MS) == "invalid: stamp must be integer nanoseconds, got float nan"
    assert asm.add(lidar(1.1e9), 1000 * MS) is not None
    assert asm.add(lidar(-5), 1000 * MS) is not None
    assert asm.add(lidar(2**63), 1000 * MS) is not None
    assert asm.add(lidar(True), 1000 * MS) is not None
    assert asm.add(lidar(np.int64(1000 * MS)), 1001 * MS) is None  # a numpy integer is a stamp
    assert asm.add(radar(1010 * MS), 1011 * MS) is None
    assert asm.stats.invalid == 5 and asm.stats.invalid_by_sensor == {"lidar": 5}
    assert "stamp" in asm.stats.invalid_reasons["lidar"]
    [(frame, _)] = asm.due(1100 * MS)
    assert frame.t_ns == 1000 * MS and type(frame.t_ns) is int
    deadline = asm.next_deadline()
    assert deadline is not None and deadline > 1100 * MS  # nothing left due: no spin


def test_samples_that_would_break_accumulation_or_fusion_are_refused() -> None:
    asm = make()
    assert asm.add(lidar(1000 * MS, ("x", "y")), 1001 * MS) == (
        "invalid: a lidar sample needs at least 4 fields ('x', 'y', 'z', 'intensity'), got ('x', 'y')"
    )
    assert asm.add(lidar(1000 * MS), 1001 * MS) is None
    five = lidar(1050 * MS, (*LIDAR, "ring"))
    assert asm.add(five, 1051 * MS) == "invalid: 5 point columns, the sensor's earlier samples had 4"
    assert asm.add(ImageSample("lidar", 1060 * MS, "lidar", b"x"), 1061 * MS) is not None  # wrong type
    assert asm.add(ImageSample("cam", 1060 * MS, "cam", b""), 1061 * MS) == "invalid: empty image data"
    huge_png = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dIHDR" + (40_000).to_bytes(4, "big") * 2 + bytes(8)
    assert "exceeds the limit" in (asm.add(ImageSample("cam", 1070 * MS, "cam", huge_png, "png"), 1071 * MS) or "")
    assert asm.stats.invalid_by_sensor == {"lidar": 3, "cam": 2}
    assert asm.add(lidar(1100 * MS), 1101 * MS) is None  # the sensor goes on
    frames = run(asm, 1300 * MS, start=1101 * MS)
    assert frames[:2] == [1000 * MS, 1100 * MS] and asm.stats.frames_by_trigger == 2


def test_a_camera_image_cut_short_is_counted_and_dropped() -> None:
    # Its header whole and of the calibration's size, its body cut short (a camera link dropping the frame's
    # end): taken, for the camera's decode to fail later, far from its cause.
    asm = make()
    whole = encode_jpeg(np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8))
    cut = asm.add(ImageSample("cam", 1000 * MS, "cam", bytearray(whole[: len(whole) * 6 // 10])), 1001 * MS)
    assert (cut or "").startswith("invalid: JPEG image does not end with its end-of-image marker (FF D9): cut short")
    assert asm.add(ImageSample("cam", 1010 * MS, "cam", whole), 1011 * MS) is None
    assert asm.add(ImageSample("cam", 1020 * MS, "cam", whole + bytes(3)), 1021 * MS) is None  # a camera's padding
    assert asm.stats.invalid_by_sensor == {"cam": 1} and len(asm.buffered("cam")) == 2


def test_ego_poses_with_a_zero_quaternion_or_nan_are_refused_and_frames_go_on() -> None:
    asm = make()
    zero = EgoPose(1000 * MS, Transform((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0)))
    refused = asm.add_ego(zero, 1000 * MS)
    assert refused == "invalid: ego pose quaternion has norm 0, outside 0.5..2.0 (the zero quaternion)"
    assert asm.add_ego(dataclasses.replace(zero, pose=Transform((float("nan"), 0.0, 0.0))), 1000 * MS) is not None
    assert asm.add_ego(EgoPose(1000 * MS, Transform(), yaw_rate=float("inf")), 1000 * MS) is not None
    assert asm.add_ego(EgoPose(990 * MS, Transform(), (5.0, 0.0, 0.0)), 990 * MS) is None
    assert asm.stats.invalid_by_sensor == {"ego": 3} and asm.stats.ego_poses == 1
    # two sweeps within accumulate_ms: the accumulator moves the earlier one by the (valid) poses
    asm.add(lidar(1000 * MS), 1001 * MS)
    asm.add_ego(EgoPose(1100 * MS, Transform((0.5, 0.0, 0.0)), (5.0, 0.0, 0.0)), 1100 * MS)
    asm.add(lidar(1100 * MS), 1101 * MS)
    assert run(asm, 1300 * MS, start=1101 * MS)[:2] == [1000 * MS, 1100 * MS]
    assert asm.stats.frames_by_trigger == 2


def test_buffers_stay_bounded_when_the_trigger_never_delivers() -> None:
    # A lidar dead at boot: no trigger sample, so no frame ever opens; radar at 13 Hz, cameras at 30 Hz
    # for ten minutes must not be kept.
    asm = make()
    now = 1000 * MS
    for k in range(20_000):  # 30 Hz for ~11 minutes
        now += 33 * MS
        asm.add(ImageSample("cam", now - 2 * MS, "cam", b"\xff\xd8" + bytes(1000)), now)
        if k % 2 == 0:
            asm.add(radar(now - 1 * MS), now)
        asm.due(now)
    keep = 1000 * MS + 250 * MS  # stamp skew + keep horizon: nothing older can be used by a frame to come
    assert len(asm.buffered("cam")) <= keep // (33 * MS) + 2
    assert len(asm.buffered("radar")) <= keep // (66 * MS) + 2
    assert asm.stats.frames == 0 and asm.stats.samples == 30_000


def test_a_sensor_buffer_is_capped_by_count_and_bytes() -> None:
    # Samples that stay within the keep horizon (a flood at 100 kHz): the count cap evicts, counted.
    asm = make()
    for k in range(3 * MAX_BUFFERED):
        asm.add(radar(1000 * MS + k * 10_000), 1000 * MS + k * 10_000 + 1)
    assert len(asm.buffered("radar")) == MAX_BUFFERED
    assert asm.stats.buffer_evicted == 2 * MAX_BUFFERED
    # and by bytes: 8 MB sweeps (the byte cap, 256 MiB, holds 32 of them)
    for k in range(40):
        t = 2000 * MS + k * MS
        assert asm.add(lidar(t, n=500_000), t + 1) is None
    kept = [s.points.nbytes for s in asm.buffered("lidar") if isinstance(s, PointCloudSample)]
    assert len(kept) < 40 and sum(kept) <= MAX_BUFFER_BYTES


def test_a_burst_of_trigger_samples_after_a_stall_opens_one_frame_per_slot() -> None:
    # No rig rate for the trigger: its period is measured. Ten sweeps at 10 Hz, a 2 s stall, then the
    # middleware delivers the 20 queued sweeps within 2 ms (stamps 100 ms apart, as captured; within
    # the stamp skew allowed, so they are taken, not clock jumps).
    asm = make(LiveConfig(transit_ms=20, trigger_tolerance_ms=50, max_stamp_skew_ms=5000), rates={})
    frames: list[int] = []
    t = 1000 * MS
    for k in range(10):
        asm.add(lidar(t + k * 100 * MS), t + k * 100 * MS + 5 * MS)
        frames += [f.t_ns for f, _ in asm.due(t + k * 100 * MS + 5 * MS)]
    assert asm.trigger_period_ns() == 100 * MS
    stall = t + 3000 * MS
    frames += run(asm, stall, start=t + 905 * MS)
    for k in range(20):
        stamp = t + 1000 * MS + k * 100 * MS
        assert asm.add(lidar(stamp), stall + k * 100_000) in (None, "late")  # 0.1 ms apart on arrival
        frames += [f.t_ns for f, _ in asm.due(stall + k * 100_000)]
        assert asm.trigger_period_ns() == 100 * MS  # measured on capture stamps, not arrivals
    frames += run(asm, stall + 500 * MS, start=stall + 2 * MS)
    # exactly one frame per 100 ms slot, in time order (the timer's during the stall, the burst's own
    # for the slot after it, the timer's after), not one per microsecond of the burst's arrivals
    assert frames == [t + k * 100 * MS for k in range(len(frames))]
    assert 30 <= len(frames) <= 36 and asm.stats.frames == len(frames)


def test_trigger_stamps_microseconds_apart_cannot_open_frames_by_the_thousand() -> None:
    asm = make(rates={})
    t = 1000 * MS
    for k in range(50):  # a broken driver: stamps 1 us apart
        asm.add(lidar(t + k * 1000), t + k * 1000 + 1)
        asm.due(t + k * 1000 + 1)
    assert asm.trigger_period_ns() >= 5 * MS  # the floor
    # then a real sweep 10 s later: the 2000 slots in between are not opened one by one, and the timer
    # opens at most one frame per floor period after it
    asm.add(lidar(t + 10_000 * MS), t + 10_000 * MS + 1)
    per_call = [len(asm.due(now)) for now in range(t + 10_000 * MS + 1, t + 10_500 * MS, 10 * MS)]
    assert asm.stats.slots_skipped >= 2000 - 2 * MAX_CATCH_UP
    # (the sample's skipped slots and the timer's: each at most MAX_CATCH_UP)
    assert max(per_call) <= 2 * MAX_CATCH_UP + 1 and sum(per_call) <= 2 * MAX_CATCH_UP + 500 // 5 + 2


def test_the_silence_timer_and_the_rate_grid_catch_up_boundedly_after_a_long_host_pause() -> None:
    asm = make()  # rig rate 10 Hz
    asm.add(lidar(1000 * MS), 1001 * MS)
    assert len(asm.due(1100 * MS)) == 1
    after = asm.due(1000 * MS + 3_600_000 * MS)  # the host did not tick for an hour
    assert len(after) <= MAX_CATCH_UP and asm.stats.slots_skipped >= 36_000 - MAX_CATCH_UP - 2
    rate = make(LiveConfig(time_base="estimate"), sensor=None, rate_hz=20.0)
    rate.add(radar(5 * MS), 1000 * MS)
    assert len(rate.due(1000 * MS + 3_600_000 * MS)) <= MAX_CATCH_UP
    assert rate.stats.slots_skipped > 70_000


def test_estimate_one_far_future_stamp_or_a_reboot_does_not_silence_the_sensor() -> None:
    asm = make(LiveConfig(time_base="estimate", max_stamp_skew_ms=500, transit_ms=20, trigger_tolerance_ms=50))
    ptp = 1_700_000_000_000 * MS
    arrival = 1000 * MS

    def push(stamp: int) -> str | None:
        nonlocal arrival
        arrival += 100 * MS
        r = asm.add(lidar(stamp), arrival + 3 * MS)
        asm.due(arrival + 3 * MS)
        return r

    assert [push(ptp + k * 100 * MS) for k in range(5)] == [None] * 5
    assert push(ptp + 10**18) is None  # one glitch: re-anchored (counted), not the sensor's new "last"
    taken = [push(ptp + k * 100 * MS) for k in range(6, 11)]
    assert taken == [None] * 5, taken  # the clock is back: taken at once, not dropped until 2**60 ns
    assert [push(k * 100 * MS) for k in range(1, 6)] == [None] * 5  # a reboot: stamps restart near 0
    assert asm.stats.clock_jump == 3 and asm.stats.out_of_order == 0
    assert asm.stats.frames_by_trigger + len(asm.close()) == 16


def test_trigger_samples_delivered_in_bunches_keep_their_period_and_one_frame_per_slot() -> None:
    # Middleware that delivers the 10 Hz trigger five sweeps at a time, every 500 ms, 0.1 ms apart: the
    # arrival gaps are mostly 0.1 ms, the capture stamps' 100 ms.
    asm = make(LiveConfig(transit_ms=20, trigger_tolerance_ms=600, max_stamp_skew_ms=5000), rates={})
    t = 1000 * MS
    frames: list[int] = []
    calls: list[int] = []
    for batch in range(8):
        now = t + (batch + 1) * 500 * MS
        for j in range(5):
            k = batch * 5 + j
            assert asm.add(lidar(t + k * 100 * MS), now + j * 100_000) in (None, "late")
            got = [f.t_ns for f, _ in asm.due(now + j * 100_000)]
            frames += got
            calls.append(len(got))
        assert batch == 0 or asm.trigger_period_ns() == 100 * MS
    frames += [f.t_ns for f, _ in asm.close()]
    assert frames == [t + k * 100 * MS for k in range(len(frames))] and len(frames) == 40
    assert max(calls) <= 6
