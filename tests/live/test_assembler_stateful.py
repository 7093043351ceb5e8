"""The live assembler as a state machine (hypothesis): any interleaving of deliveries, silences, stalls
and clock advances keeps one frame per trigger slot, in order, with no hole, and every sweep accounted
for. Replaces a loop over 40 fixed seeds: hypothesis explores the same space and shrinks a failure to
a short sequence of steps."""

from __future__ import annotations

import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from test_assembler import MS, make, pc

from perception.types import Frame

PERIODS = {"lidar": 100 * MS, "radar": 77 * MS}
#: Longest gap between consecutive frames: a missed sweep's slot is covered by the timer.
MAX_GAP = 150 * MS


class LiveAssembly(RuleBasedStateMachine):
    """Lidar (the trigger, 10 Hz) and radar (13 Hz) captured on schedule, each delivered in order with a
    lag; the host clock only moves forward; the event loop may wake late for a deadline."""

    def __init__(self) -> None:
        super().__init__()
        self.asm = make()
        self.now = 1000 * MS
        self.next_t = {"lidar": 1000 * MS, "radar": 1013 * MS}
        self.last_arrival = {"lidar": 0, "radar": 0}
        self.frames: list[Frame] = []
        self.sweeps = 0  # lidar sweeps delivered
        self.closed = False

    def _emit(self, frames: list[tuple[Frame, object]]) -> None:
        self.frames += [f for f, _ in frames]

    @rule(sensor=st.sampled_from(["lidar", "radar"]), lag_ms=st.integers(0, 320))
    def deliver(self, sensor: str, lag_ms: int) -> None:
        """The sensor's next sample, arriving ``lag_ms`` after its capture (never before an earlier
        sample of the same sensor, never before now)."""
        t = self.next_t[sensor]
        self.next_t[sensor] += PERIODS[sensor]
        arrival = max(self.now, self.last_arrival[sensor], t + lag_ms * MS)
        self.last_arrival[sensor] = arrival
        self.now = arrival
        self.asm.add(pc(sensor, t), arrival)
        self.sweeps += sensor == "lidar"
        self._emit(self.asm.due(self.now))

    @rule(sweeps=st.integers(1, 25))
    def lidar_silent(self, sweeps: int) -> None:
        """The lidar misses ``sweeps`` sweeps (they are never delivered)."""
        self.next_t["lidar"] += sweeps * PERIODS["lidar"]

    @rule(stall_ms=st.sampled_from([0, 0, 1, 5, 30, 200]))
    def wake_for_the_deadline(self, stall_ms: int) -> None:
        """The event loop wakes for the assembler's next deadline, possibly late."""
        deadline = self.asm.next_deadline()
        if deadline is not None:
            self.now = max(self.now, deadline + stall_ms * MS)
        self._emit(self.asm.due(self.now))

    @rule(ms=st.integers(1, 400))
    def time_passes(self, ms: int) -> None:
        self.now += ms * MS
        self._emit(self.asm.due(self.now))

    def teardown(self) -> None:
        """Closing completes the pending frames; then every check holds over the whole run."""
        self._emit(self.asm.close())
        self.closed = True
        self.one_frame_per_slot_in_order()
        self.never_a_hole()
        self.every_frame_and_sweep_is_accounted_for()

    @invariant()
    def one_frame_per_slot_in_order(self) -> None:
        times = [f.t_ns for f in self.frames]
        assert times == sorted(set(times)), times  # strictly in time order: never two frames for one slot

    @invariant()
    def never_a_hole(self) -> None:
        times = [f.t_ns for f in self.frames]
        assert all(b - a <= MAX_GAP for a, b in itertools.pairwise(times)), times

    @invariant()
    def every_frame_and_sweep_is_accounted_for(self) -> None:
        s = self.asm.stats
        assert s.frames == len(self.frames) == s.frames_by_trigger + s.frames_by_timer
        # a frame by trigger carries its own sweep; a sweep without its own frame was counted late
        own = [f for f in self.frames if (x := f.samples["lidar"]) is not None and x.t_ns == f.t_ns]
        assert s.frames_by_trigger == len(own)
        if self.closed:
            assert self.sweeps - len(own) <= s.late + s.clock_jump


LiveAssembly.TestCase.settings = settings(max_examples=100, stateful_step_count=50, deadline=None)
test_live_assembly = LiveAssembly.TestCase
