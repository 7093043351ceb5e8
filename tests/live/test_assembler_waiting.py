"""What lets the live runtime leave its event loop asleep for some pushes (LiveRuntime LAZY_WAIT_NS): an ego
pose or a sample of a sensor other than the trigger after which no set of :meth:`LiveAssembler.awaited`
has items of all its sensors (odometry: ``EGO``) among those pushed since the loop last looked, taken
later -- just before the next item that does wake the loop, or the next deadline -- makes the same
frames, the same counters and the same deadlines as taken at once. On a clock the test drives (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_assembler import MS, RATES, SENSORS, make, pc

from perception.config import LiveConfig, SensorConfig, TriggerConfig
from perception.live._assembler import EGO, LiveAssembler
from perception.types import EgoPose, Frame, PointCloudSample, Transform

#: The lidar (the trigger, or not with a fixed rate) and two radars: a frame may wait for one, not the other.
RADAR_B = SensorConfig("radar_b", "radar", "m", sync_window_ms=40, max_staleness_ms=150)
PERIODS = {"lidar": 100 * MS, "radar": 77 * MS, "radar_b": 62 * MS, "ego": 20 * MS}
TRIGGERS = {"lidar": TriggerConfig(sensor="lidar"), "rate": TriggerConfig(rate_hz=10.0)}
SENSOR = st.sampled_from(["lidar", "radar", "radar_b", "ego", "ego"])
#: (sensor, delivery lag in ms, whether a push that may wait does, whether the sensor skips this one)
STEP = st.tuples(SENSOR, st.integers(0, 160), st.booleans(), st.booleans())


def _assembler(trigger: str) -> LiveAssembler[str]:
    return LiveAssembler(
        (*SENSORS, RADAR_B),
        TRIGGERS[trigger],
        LiveConfig(transit_ms=20, trigger_tolerance_ms=50),
        rates={**RATES, "radar_b": 16.0},
    )


def _sample(sensor: str, t: int) -> PointCloudSample:
    radar = pc("radar", t)
    return (
        radar
        if sensor == "radar"
        else pc(sensor, t)
        if sensor == "lidar"
        else PointCloudSample(sensor, t, sensor, radar.points, radar.fields)
    )


Item = tuple[PointCloudSample | EgoPose, int]


def _summary(frame: Frame, token: object) -> tuple[Any, ...]:
    samples = tuple(sorted((k, None if v is None else v.t_ns) for k, v in frame.samples.items()))
    ego = None if frame.ego is None else (frame.ego.t_ns, frame.ego.linear_velocity)
    return frame.t_ns, frame.created_ns, samples, ego, token


def _name(item: PointCloudSample | EgoPose) -> str:
    return EGO if isinstance(item, EgoPose) else item.sensor


class _Run:
    """One assembler driven as the live runtime's loop drives it: items taken in push order, then ``due``."""

    def __init__(self, trigger: str) -> None:
        self.asm = _assembler(trigger)
        self.waiting: list[Item] = []  # pushed, not yet taken (the loop was not woken for them)
        self.frames: list[tuple[Any, ...]] = []

    def _add(self, item: PointCloudSample | EgoPose, arrival: int) -> None:
        if isinstance(item, EgoPose):
            self.asm.add_ego(item, arrival)
        else:
            self.asm.add(item, arrival, token=f"{item.sensor}@{item.t_ns}")

    def take(self, now: int) -> list[tuple[Any, ...]]:
        for item, arrival in self.waiting:
            self._add(item, arrival)
        self.waiting.clear()
        out = [_summary(f, tok) for f, tok in self.asm.due(now)]
        self.frames += out
        return out

    def push(self, item: PointCloudSample | EgoPose, arrival: int, *, wait: bool) -> list[tuple[Any, ...]]:
        self.waiting.append((item, arrival))
        return [] if wait else self.take(arrival)

    def may_wait(self, item: PointCloudSample | EgoPose, trigger: str) -> bool:
        """The runtime's rule: a pose, or another sensor's sample, while, with the items waiting, no
        pending frame has items of every sensor it waits for (odometry's poses: ``EGO``)."""
        queued = {_name(x) for x, _ in [*self.waiting, (item, 0)]}
        return _name(item) != trigger and not any(waits <= queued for waits in self.asm.awaited())


#: Each sensor's captures over 1.2 s, in capture order: (capture time, sensor).
CAPTURES = sorted(
    (start + k * PERIODS[sensor], sensor)
    for sensor, start in {"lidar": 1000 * MS, "radar": 1013 * MS, "radar_b": 1029 * MS, "ego": 990 * MS}.items()
    for k in range(1200 * MS // PERIODS[sensor])
)
#: Per capture: its delivery lag in ms (mostly short, sometimes long), whether it may wait if it may, and
#: whether it is lost (a lidar sweep: the timer covers its slot).
DELIVERY = st.tuples(st.one_of(st.integers(0, 15), st.integers(0, 160)), st.booleans(), st.booleans())


@settings(max_examples=300, deadline=None)
@given(
    trigger=st.sampled_from(sorted(TRIGGERS)),
    deliveries=st.lists(DELIVERY, min_size=len(CAPTURES), max_size=len(CAPTURES)),
)
def test_items_that_may_wait_make_the_same_frames_taken_later(
    trigger: str, deliveries: list[tuple[int, bool, bool]]
) -> None:
    at_once, later = _Run(trigger), _Run(trigger)
    last_arrival: dict[str, int] = {}
    arrivals = []  # (arrival, capture index): each sensor's in order, after its capture by its lag
    for i, ((t, sensor), (lag_ms, _, lost)) in enumerate(zip(CAPTURES, deliveries, strict=True)):
        if lost and sensor == "lidar":
            continue
        last_arrival[sensor] = max(last_arrival.get(sensor, 0), t + lag_ms * MS)
        arrivals.append((last_arrival[sensor], i))
    arrivals.sort()

    def deadlines_until(t: int) -> None:
        """The loop wakes at each deadline up to ``t`` (both runs have the same ones)."""
        for _ in range(1000):
            deadline = at_once.asm.next_deadline()
            assert later.asm.next_deadline() == deadline
            if deadline is None or deadline > t:
                return
            assert at_once.take(deadline) == later.take(deadline)
        raise AssertionError("deadlines do not advance")

    now = 0
    for arrival, i in arrivals:
        (t, sensor), (lag_ms, wait, _) = CAPTURES[i], deliveries[i]
        now = arrival
        deadlines_until(arrival)
        item: PointCloudSample | EgoPose = (
            EgoPose(t, Transform.identity(), (float(lag_ms), 0.0, 0.0)) if sensor == "ego" else _sample(sensor, t)
        )
        may_wait = later.may_wait(item, "lidar" if trigger == "lidar" else "")
        taken_at_once = at_once.push(item, arrival, wait=False)
        if may_wait:
            assert taken_at_once == []  # nothing a wake-up for it would have made
        later.push(item, arrival, wait=may_wait and wait)
    deadlines_until(now)
    at_once.take(now)
    later.take(now)
    assert at_once.frames == later.frames
    assert [_summary(f, tok) for f, tok in at_once.asm.close()] == [_summary(f, tok) for f, tok in later.asm.close()]
    assert vars(at_once.asm.stats) == vars(later.asm.stats)


def test_awaited_are_the_sensors_each_pending_frame_waits_for() -> None:
    asm = _assembler("lidar")
    assert asm.awaited() == ()  # nothing pending: a radar sample only joins the buffers
    asm.add(_sample("radar_b", 995 * MS), 996 * MS)  # 5 ms before the next frame, next one 57 ms after it
    asm.add(pc("lidar", 1000 * MS), 1005 * MS, token="f0")
    assert asm.awaited() == (frozenset({"radar"}),)  # the frame at 1000 ms waits for the radar, not for radar_b
    asm.add(pc("lidar", 1100 * MS), 1105 * MS, token="f1")
    assert asm.awaited() == (frozenset({"radar"}), frozenset({"radar", "radar_b"}))
    asm.add(pc("radar", 1010 * MS), 1012 * MS)
    assert [f.t_ns for f, _ in asm.due(1012 * MS)] == [1000 * MS]
    assert asm.awaited() == (frozenset({"radar", "radar_b"}),)
    rate = make(trigger=TriggerConfig(rate_hz=10.0))
    assert rate.awaited() == (frozenset(),)  # the grid starts at the first sample: any sample
    rate.add(pc("radar", 1000 * MS), 1001 * MS)
    assert rate.awaited() == () and rate.next_deadline() == 1000 * MS
