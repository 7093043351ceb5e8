"""What lets the live runtime leave its event loop asleep for some pushes (LiveRuntime LAZY_WAIT_NS): an ego
pose, or a sample of another sensor than the trigger's while :meth:`LiveAssembler.waiting` is false, taken
later -- just before the next item that does wake the loop, or the next deadline -- makes the same frames,
the same counters and the same deadlines as taken at once. On a clock the test drives (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_assembler import MS, make, pc

from perception.config import TriggerConfig
from perception.live._assembler import LiveAssembler
from perception.types import EgoPose, Frame, PointCloudSample, Transform

PERIODS = {"lidar": 100 * MS, "radar": 77 * MS, "ego": 20 * MS}
TRIGGERS = {"lidar": TriggerConfig(sensor="lidar"), "rate": TriggerConfig(rate_hz=10.0)}
#: (sensor, delivery lag in ms, whether a push that may wait does, whether the sensor skips this one)
STEP = st.tuples(st.sampled_from(["lidar", "radar", "ego", "ego"]), st.integers(0, 160), st.booleans(), st.booleans())

Item = tuple[PointCloudSample | EgoPose, int]


def _summary(frame: Frame, token: object) -> tuple[Any, ...]:
    samples = tuple(sorted((k, None if v is None else v.t_ns) for k, v in frame.samples.items()))
    ego = None if frame.ego is None else (frame.ego.t_ns, frame.ego.linear_velocity)
    return frame.t_ns, frame.created_ns, samples, ego, token


class _Run:
    """One assembler driven as the live runtime's loop drives it: items taken in push order, then ``due``."""

    def __init__(self, trigger: str) -> None:
        self.asm: LiveAssembler[str] = make(trigger=TRIGGERS[trigger])
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
        """The runtime's rule: a pose always; another sensor's sample while no frame waits for samples."""
        return isinstance(item, EgoPose) or (item.sensor != trigger and not self.asm.waiting())


@settings(max_examples=300, deadline=None)
@given(trigger=st.sampled_from(sorted(TRIGGERS)), steps=st.lists(STEP, max_size=80))
def test_items_that_may_wait_make_the_same_frames_taken_later(
    trigger: str, steps: list[tuple[str, int, bool, bool]]
) -> None:
    at_once, later = _Run(trigger), _Run(trigger)
    now = 1000 * MS
    next_t = {"lidar": 1000 * MS, "radar": 1013 * MS, "ego": 990 * MS}
    last_arrival = dict.fromkeys(next_t, 0)

    def deadlines_until(t: int) -> None:
        """The loop wakes at each deadline up to ``t`` (both runs have the same ones)."""
        for _ in range(1000):
            deadline = at_once.asm.next_deadline()
            assert later.asm.next_deadline() == deadline
            if deadline is None or deadline > t:
                return
            assert at_once.take(deadline) == later.take(deadline)
        raise AssertionError("deadlines do not advance")

    for sensor, lag_ms, wait, skip in steps:
        t = next_t[sensor]
        next_t[sensor] += PERIODS[sensor]
        if skip and sensor == "lidar":
            continue  # a sweep never delivered: the timer covers its slot
        arrival = max(now, last_arrival[sensor], t + lag_ms * MS)
        last_arrival[sensor] = now = arrival
        deadlines_until(arrival)
        item: PointCloudSample | EgoPose = (
            EgoPose(t, Transform.identity(), (float(lag_ms), 0.0, 0.0)) if sensor == "ego" else pc(sensor, t)
        )
        may_wait = later.may_wait(item, "lidar" if trigger == "lidar" else "")
        assert at_once.may_wait(item, "lidar" if trigger == "lidar" else "") == may_wait
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


def test_waiting_while_a_frame_is_pending_or_the_rate_grid_has_not_started() -> None:
    asm = make()
    assert not asm.waiting()  # nothing pending: a radar sample only joins the buffers
    asm.add(pc("lidar", 1000 * MS), 1005 * MS, token="f0")
    assert asm.waiting()  # the frame at 1000 ms waits for the radar
    asm.add(pc("radar", 1010 * MS), 1012 * MS)
    assert [f.t_ns for f, _ in asm.due(1012 * MS)] == [1000 * MS]
    assert not asm.waiting()
    rate = make(trigger=TriggerConfig(rate_hz=10.0))
    assert rate.waiting()  # the grid starts at the first sample
    rate.add(pc("radar", 1000 * MS), 1001 * MS)
    assert not rate.waiting() and rate.next_deadline() == 1000 * MS
