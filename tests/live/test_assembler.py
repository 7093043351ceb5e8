"""Live assembly on a host clock that the test drives (no threads, no server)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from perception.config import LiveConfig, SensorConfig, TriggerConfig
from perception.live._assembler import LiveAssembler
from perception.types import EgoPose, Frame, PointCloudSample, Transform

MS = 1_000_000
SENSORS = (
    SensorConfig("lidar", "lidar", "m", sync_window_ms=60, max_staleness_ms=150),
    SensorConfig("radar", "radar", "m", sync_window_ms=50, max_staleness_ms=150),
)
TRIGGER = TriggerConfig(sensor="lidar")
RATES = {"lidar": 10.0, "radar": 13.0}


def pc(sensor: str, t_ns: int) -> PointCloudSample:
    # a sample of its sensor's kind (the intake refuses a radar sample without its 5 fields)
    fields = ("x", "y", "z", "radial_velocity", "rcs") if sensor == "radar" else ("x", "y", "z", "i")
    return PointCloudSample(sensor, t_ns, sensor, np.zeros((1, len(fields)), np.float32), fields)


def make(live: LiveConfig | None = None, trigger: TriggerConfig = TRIGGER) -> LiveAssembler[str]:
    return LiveAssembler(SENSORS, trigger, live or LiveConfig(transit_ms=20, trigger_tolerance_ms=50), rates=RATES)


def test_a_frame_completes_as_soon_as_every_sensor_has_moved_past_it() -> None:
    asm = make()
    assert asm.add(pc("lidar", 1000 * MS), 1005 * MS, token="f0") is None
    assert asm.due(1006 * MS) == []  # radar not yet past the frame time: wait (bounded)
    assert asm.add(pc("radar", 1010 * MS), 1012 * MS) is None
    [(frame, token)] = asm.due(1012 * MS)
    assert token == "f0" and frame.t_ns == 1000 * MS and frame.created_ns == 1005 * MS
    assert frame.samples["radar"] is not None and frame.samples["radar"].t_ns == 1010 * MS


def test_a_silent_sensor_holds_a_frame_back_only_until_the_horizon() -> None:
    asm = make()
    asm.add(pc("lidar", 1000 * MS), 1005 * MS)
    horizon = 1000 * MS + 60 * MS + 20 * MS  # widest sync window + transit
    assert asm.next_deadline() == horizon
    assert asm.due(horizon - 1) == []
    [(frame, _)] = asm.due(horizon)
    assert frame.samples["radar"] is None


def test_timer_fallback_while_the_trigger_is_silent_then_the_trigger_resumes() -> None:
    asm = make()
    t = 1000 * MS
    for k in range(3):  # lidar at 10 Hz, arriving 5 ms after capture; radar keeps going
        asm.add(pc("lidar", t + k * 100 * MS), t + k * 100 * MS + 5 * MS)
        asm.add(pc("radar", t + k * 100 * MS + 10 * MS), t + k * 100 * MS + 12 * MS)
    frames = [f for f, _ in asm.due(t + 300 * MS)]
    assert [f.t_ns for f in frames] == [t, t + 100 * MS, t + 200 * MS]
    # Lidar falls silent for 1 s; the radar goes on at 13 Hz.
    now = t + 212 * MS
    timer: list[int] = []
    while now < t + 1200 * MS:
        now += 10 * MS
        if (now // MS) % 77 == 0:
            asm.add(pc("radar", now - 2 * MS), now)
        timer += [f.t_ns for f, _ in asm.due(now) if f.samples["lidar"] is None]
    # One timer frame per missed sweep (period 100 ms), opened after period + tolerance.
    assert timer[:3] == [t + 300 * MS, t + 400 * MS, t + 500 * MS]
    assert len(timer) in (8, 9)
    assert asm.stats.trigger_silences == 1
    # The lidar is back: frames follow it again, no timer frame at the same time.
    back = t + 1250 * MS
    asm.add(pc("lidar", back), back + 5 * MS)
    asm.add(pc("radar", back + 10 * MS), back + 15 * MS)
    resumed = [f for f, _ in asm.due(back + 15 * MS)]
    assert [f.t_ns for f in resumed][-1] == back
    assert resumed[-1].samples["lidar"] is not None
    assert asm.stats.frames_by_timer == len(timer) + sum(f.samples["lidar"] is None for f in resumed)


def test_out_of_order_duplicate_late_and_unknown_are_counted() -> None:
    asm = make()
    asm.add(pc("lidar", 1000 * MS), 1001 * MS)
    asm.add(pc("radar", 1010 * MS), 1011 * MS)
    assert len(asm.due(1011 * MS)) == 1
    assert asm.add(pc("radar", 1010 * MS), 1012 * MS) == "duplicate"
    assert asm.add(pc("radar", 1005 * MS), 1012 * MS) == "out of order"
    assert asm.add(pc("sonar", 1005 * MS), 1012 * MS) == "unknown sensor"
    asm.add(pc("lidar", 1100 * MS), 1101 * MS)
    asm.add(pc("radar", 1110 * MS), 1111 * MS)
    assert len(asm.due(1111 * MS)) == 1
    s = asm.stats
    assert (s.duplicate, s.out_of_order, s.unknown_sensor) == (1, 1, 1)


def test_late_sample_of_a_sensor_is_counted() -> None:
    asm = make()
    asm.add(pc("lidar", 1000 * MS), 1001 * MS)
    asm.add(pc("lidar", 1100 * MS), 1101 * MS)
    asm.due(1200 * MS)
    assert asm.add(pc("radar", 990 * MS), 1200 * MS) == "late"  # 110 ms before the last emitted frame
    assert asm.stats.late == 1


def test_fixed_rate_frames_on_the_host_clock() -> None:
    asm = make(trigger=TriggerConfig(rate_hz=20))
    asm.add(pc("radar", 1000 * MS), 1001 * MS)
    frames: list[int] = []
    for now in range(1001, 1400, 5):
        frames += [f.t_ns for f, _ in asm.due(now * MS)]
    assert frames[:4] == [1000 * MS, 1050 * MS, 1100 * MS, 1150 * MS]
    assert asm.stats.frames_by_rate == len(frames)


def test_estimated_offset_converts_another_time_base_and_survives_a_jump() -> None:
    live = LiveConfig(time_base="estimate", max_stamp_skew_ms=500)
    asm = make(live)
    ptp = 1_700_000_000_000 * MS  # stamps in system time; the host's monotonic clock is near 1 s
    for k in range(5):
        asm.add(pc("lidar", ptp + k * 100 * MS), 1000 * MS + k * 100 * MS + 3 * MS + (k % 2) * MS)
    offsets = asm.offsets_ns()
    assert offsets["lidar"] == 1000 * MS + 3 * MS - ptp  # the fastest arrival sets it
    frames = [f for f, _ in asm.due(1500 * MS)]
    assert [f.t_ns for f in frames] == [1003 * MS + k * 100 * MS for k in range(5)]  # on the host clock
    # The lidar's clock jumps by +10 s: counted, re-anchored, frames keep their host times.
    asm.add(pc("lidar", ptp + 10_500 * MS), 1503 * MS)
    assert asm.stats.clock_jump == 1
    [(frame, _)] = asm.due(1600 * MS)
    assert frame.t_ns == 1503 * MS and frame.samples["lidar"] is not None


def test_a_re_anchored_sample_is_counted_as_used_and_a_dropped_one_as_dropped() -> None:
    # "every sample pushed is in exactly one of the sample counters": a jump re-anchored under time base
    # estimate was in `samples` and in `clock_jump` too, so `perception live --clock-jump radar_rear:6:3`
    # printed "samples 610 used; not used: {'clock_jump': 2}" of 610 samples sent, all used.
    from perception.cli._live import _render

    sample_counters = ("samples", "invalid", "late", "clock_jump_dropped", "out_of_order", "duplicate")
    estimate = make(LiveConfig(time_base="estimate", max_stamp_skew_ms=500))
    for k in range(4):
        assert estimate.add(pc("lidar", 1000 * MS + k * 100 * MS), 1003 * MS + k * 100 * MS) is None
    assert estimate.add(pc("lidar", 11_400 * MS), 1403 * MS) is None  # jumped by +10 s: re-anchored, used
    s = estimate.stats
    assert (s.clock_jump, s.clock_jump_dropped, s.samples) == (1, 0, 5)
    assert sum(getattr(s, k) for k in sample_counters) + s.unknown_sensor == 5
    summary = {"frames": 5, "expected_frames": 5, "ok": 5, "degraded": 0, "dropped": 0, "drop_reasons": {}}
    summary |= {"intake": vars(s), "latency_ms": {"p50": 1.0, "p99": 2.0}, "deadline_misses": 0}
    summary |= {"time_base": "estimate", "offsets_ms": {}}
    assert "samples 5 used; not used: none" in _render(summary), _render(summary)
    fixed = make(LiveConfig(time_base="offset", offset_ms=0, max_stamp_skew_ms=500))
    assert fixed.add(pc("lidar", 1000 * MS), 1003 * MS) is None
    assert fixed.add(pc("lidar", 11_100 * MS), 1103 * MS) == "clock jump"
    s = fixed.stats
    assert (s.clock_jump, s.clock_jump_dropped, s.samples) == (1, 1, 1)
    assert sum(getattr(s, k) for k in sample_counters) + s.unknown_sensor == 2
    summary |= {"intake": vars(s), "time_base": "offset"}
    assert "samples 1 used; not used: {'clock_jump': 1}" in _render(summary), _render(summary)


def test_fixed_offset_drops_a_jumped_stamp() -> None:
    asm = make(LiveConfig(time_base="offset", offset_ms=-5000, max_stamp_skew_ms=500))
    assert asm.add(pc("lidar", 6000 * MS), 1002 * MS) is None  # 6000 - 5000 = 1000 ms on the host
    assert asm.add(pc("lidar", 9000 * MS), 1102 * MS) == "clock jump"  # 4000 ms: 2.9 s off its arrival
    assert asm.stats.clock_jump == 1


def test_stamps_off_the_host_clock_are_explained_once_per_sensor(caplog: pytest.LogCaptureFixture) -> None:
    # A host pushing a recording's stamps (from 0) under the default time base saw its samples refused with
    # 'clock jump' and a count only; the log now says, once per sensor, how far off they are and what to set.
    asm = make()  # time_base: monotonic
    with caplog.at_level(logging.WARNING, logger="perception.live"):
        for k in range(3):
            assert asm.add(pc("lidar", k * 100 * MS), 50_000 * MS + k * 100 * MS) == "clock jump"
    said = [r.getMessage() for r in caplog.records if "off the host's monotonic clock" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("live: lidar: stamp 0 ns is 50.000 s off")
    assert "live.time_base: monotonic" in said[0] and "offset (with offset_ms) or estimate" in said[0]
    assert asm.stats.clock_jump == 3


def test_stamps_off_the_host_clock_are_told_the_host_s_own_remedy(caplog: pytest.LogCaptureFixture) -> None:
    # A host that sets the time base its own way (a ROS node: its parameter, offset_ms overwritten) was told to
    # set live.time_base and offset_ms all the same; it says its own remedy as it says its clock.
    asm = LiveAssembler(
        SENSORS,
        TRIGGER,
        LiveConfig(time_base="offset", max_stamp_skew_ms=500),
        rates=RATES,
        time_base_remedy="the node's parameter time_base: estimate",
    )
    with caplog.at_level(logging.WARNING, logger="perception.live"):
        assert asm.add(pc("lidar", 0), 50_000 * MS) == "clock jump"
    (said,) = [r.getMessage() for r in caplog.records if "off the host's monotonic clock" in r.getMessage()]
    assert said.endswith("stamps on another clock need the node's parameter time_base: estimate"), said
    assert "offset_ms" not in said, said


def test_frames_carry_the_nearest_ego_pose() -> None:
    asm = make()
    for k in range(5):
        asm.add_ego(EgoPose(990 * MS + k * 20 * MS, Transform.identity(), (float(k), 0.0, 0.0)), 1000 * MS)
    asm.add(pc("lidar", 1000 * MS), 1001 * MS)
    [(frame, _)] = asm.close()
    assert frame.ego is not None and frame.ego.t_ns == 990 * MS


def test_a_trigger_sample_after_its_timer_frame_is_late_not_a_second_frame() -> None:
    asm = make()
    t = 1000 * MS
    asm.add(pc("lidar", t), t + 5 * MS)
    asm.add(pc("radar", t + 10 * MS), t + 12 * MS)
    asm.due(t + 20 * MS)
    # The next sweep (t + 100 ms) arrives 90 ms late: the timer (100 + 50 ms after the last arrival)
    # opened a frame for it, emitted at its horizon (60 ms window + 20 ms transit).
    assert asm.due(t + 160 * MS) == []
    timer = [f.t_ns for f, _ in asm.due(t + 185 * MS)]
    assert timer == [t + 100 * MS]
    assert asm.add(pc("lidar", t + 100 * MS), t + 190 * MS) == "late"
    asm.add(pc("radar", t + 210 * MS), t + 212 * MS)
    # The sweep after that is on time: a normal trigger frame, and no timer frame in between.
    asm.add(pc("lidar", t + 200 * MS), t + 205 * MS)
    frames = [f.t_ns for f, _ in asm.due(t + 215 * MS)]
    assert frames == [t + 200 * MS]
    assert asm.stats.frames_by_timer == 1 and asm.stats.late == 1


@pytest.mark.parametrize("tolerance_ms", [50, 1000])
def test_a_two_second_silence_gives_one_timer_frame_per_missed_sweep_at_its_slot(tolerance_ms: int) -> None:
    """The end-to-end silent-lidar scenario (tests/live/test_live_runtime.py) with its exact slot checks,
    on a clock the test drives: lidar at 10 Hz muted for 2 s, radar at 13 Hz throughout."""
    asm = make(LiveConfig(transit_ms=20, trigger_tolerance_ms=tolerance_ms))
    t0, silence = 1000 * MS, (2000 * MS, 4000 * MS)
    events = sorted(
        [(t + 5 * MS, "lidar", t) for t in range(t0, 5000 * MS, 100 * MS) if not silence[0] <= t < silence[1]]
        + [(t + 2 * MS, "radar", t) for t in range(t0 + 13 * MS, 5000 * MS, 77 * MS)]
    )
    frames = []
    i = 0
    while i < len(events):
        deadline = asm.next_deadline()
        if deadline is not None and deadline < events[i][0]:
            now = deadline
        else:
            now, name, t = events[i]
            asm.add(pc(name, t), now)
            i += 1
        frames += [f for f, _ in asm.due(now)]
    frames += [f for f, _ in asm.close()]
    times = [f.t_ns for f in frames]
    assert times == list(range(t0, 5000 * MS, 100 * MS))  # every slot once, in order: no hole, no double
    muted = [f for f in frames if silence[0] <= f.t_ns < silence[1]]
    assert len(muted) == 20 and all(f.samples["lidar"] is None for f in muted)
    assert asm.stats.frames_by_timer == 20 and asm.stats.trigger_silences == 1
    # the lidar's first sweep after the silence is its slot's frame's lidar sample
    back = next(f for f in frames if f.t_ns >= silence[1])
    assert back.t_ns == silence[1] and back.samples["lidar"] is not None and back.samples["lidar"].t_ns == silence[1]
    assert asm.stats.late == 0 and asm.stats.frames_by_trigger == len(frames) - 20


def _flooded() -> tuple[LiveAssembler[str], list[int]]:
    """An assembler given a flood: ten lidar sweeps 1 ms apart (tokens f0-f9), taken at once, after an ego pose;
    and the count of the frames it makes (``made[0]``)."""
    asm = make()
    made = [0]
    make_frame = asm._core.make_frame

    def counted(t: int, **kwargs: int) -> Frame:
        made[0] += 1
        return make_frame(t, **kwargs)

    asm._core.make_frame = counted  # type: ignore[method-assign]
    asm.add_ego(EgoPose(995 * MS, Transform.identity(), (1.0, 0.0, 0.0)), 1000 * MS)
    for k in range(10):
        assert asm.add(pc("lidar", 1000 * MS + k * MS), 1020 * MS, token=f"f{k}") is None
    return asm, made


def test_a_backlog_of_due_frames_beyond_the_limit_makes_only_the_newest_and_stubs_the_rest() -> None:
    # Before: due() made every due frame of a flood (each tens of ms of selection and sweeps, on the event
    # loop), though the runtime would shed all but what its pipeline holds. Now the newest `limit` are made;
    # each older one is a stub of its id, time, opening and ego pose (what a shed frame's prediction reads),
    # in time order, counted, and no frame is lost or made twice.
    asm, made = _flooded()
    frames = asm.due(1100 * MS, limit=3)  # all past their horizon (60 ms window + 20 ms transit), no timer yet
    stubs = asm.take_superseded()
    assert made[0] == 3 and [tok for _, tok in frames] == ["f7", "f8", "f9"]
    assert [tok for _, tok in stubs] == [f"f{k}" for k in range(7)] and asm.take_superseded() == []
    ids = [f.frame_id for f, _ in stubs + frames]
    assert ids == list(range(10)) and [f.t_ns for f, _ in stubs + frames] == [1000 * MS + k * MS for k in range(10)]
    for stub, _ in stubs:
        assert stub.samples == {} and stub.created_ns == 1020 * MS
        assert stub.ego is not None and stub.ego.t_ns == 995 * MS  # the frame's own pose, for its prediction
    stats = asm.stats
    assert stats.frames == stats.frames_by_trigger == 10 and stats.superseded_unassembled == 7
    # a due frame at a time is made, whatever the limit; the next sweep's frame gets the next id
    asm.add(pc("lidar", 1100 * MS), 1101 * MS)
    [(frame, _)] = asm.due(1180 * MS, limit=3)
    assert frame.frame_id == 10 and made[0] == 4 and asm.take_superseded() == []


def test_a_backlog_kept_oldest_makes_only_the_oldest_and_stubs_the_newer() -> None:
    # drop-newest's backlog (keep="oldest"): the pipeline would refuse the newest frames, so the oldest `limit`
    # are made and each newer one is a stub (id, time, opening, ego pose), in time order, counted apart from the
    # superseded ones; ids follow time, none lost or made twice.
    asm, made = _flooded()
    frames = asm.due(1100 * MS, limit=3, keep="oldest")
    stubs = asm.take_overflowed()
    assert made[0] == 3 and [tok for _, tok in frames] == ["f0", "f1", "f2"]
    assert [tok for _, tok in stubs] == [f"f{k}" for k in range(3, 10)] and asm.take_overflowed() == []
    assert asm.take_superseded() == []
    ids = [f.frame_id for f, _ in frames + stubs]
    assert ids == list(range(10)) and [f.t_ns for f, _ in frames + stubs] == [1000 * MS + k * MS for k in range(10)]
    for stub, _ in stubs:
        assert stub.samples == {} and stub.created_ns == 1020 * MS and stub.ego is not None
    stats = asm.stats
    assert stats.frames == stats.frames_by_trigger == 10
    assert stats.overflowed_unassembled == 7 and stats.superseded_unassembled == 0
