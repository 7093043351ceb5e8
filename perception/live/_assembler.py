"""Live frame assembly on a clock passed in (pure logic): the host's monotonic clock, or the clock the samples
are stamped on when it is no real time (a ROS node on simulated time: a bag's ``/clock``, at whatever rate
it is played, paused).

Samples arrive as the host's middleware delivers them, each with its arrival time on that clock (the
"host clock" below). Their stamps are converted to it (:class:`TimeBase`), then:

* **trigger** — a sample of the trigger sensor opens a frame at its capture time; with ``rate_hz``
  frames open on a fixed grid instead;
* **timer fallback** — frames sit on the trigger's slots, one per period. When the trigger's sample
  for the next slot has not arrived by its expected arrival (its capture time plus the trigger's
  usual delivery delay) plus ``live.trigger_tolerance_ms``, the timer opens that slot's frame with the
  trigger ``missing``. A trigger sample for a slot the timer opened takes the frame over while it is
  pending, and is counted late once it was emitted: every slot has exactly one frame, in time order,
  however the trigger's delivery jitters;
* **completion** — a frame is complete once no sample still to come can be nearer its time for any
  active sensor (one at or after the frame time has arrived, or by the sensor's nominal rate its next
  sample will be farther than its last even if it comes early: its capture times jitter, by up to
  ``JITTER_ALLOWANCE`` of its period or twice its recent gaps' distance from the period grid, whichever
  is more), or when the host clock passes the frame time plus the widest
  sync window plus ``live.transit_ms``: a silent sensor never holds a frame back longer than that.
  While the host pushes odometry, a frame also waits (as long at most) for a pose at or after its time,
  so that its pose and its sweeps' motion are interpolated between the poses around them, as replay
  interpolates the recorded ones (not held at the latest pose before it);
* **selection** — each sensor contributes the sample nearest the frame time within its sync window
  and not older than its staleness limit, measured on capture times; the frame's ego pose is the
  odometry nearest its time, none further than ``live.ego_max_age_ms`` (past it the frame's ego motion
  is unknown, counted in ``ego_stale``: a dead localisation is not the last twist extrapolated forever).

Selection, de-duplication, the ego pose, sweep accumulation, eviction and the keep horizon are replay's
(:class:`perception.scheduler.AlignCore`, the one core); this module adds the host clock, the timer and
the buffer caps.

Samples that can no longer be used are counted, never raised: invalid ones (refused by the intake
check against the rig, :class:`perception.scheduler.RigCheck`: a stamp that is not integer ns in range (on the
host clock too), a wrong sample type, too few point fields or columns it would misread, over the
size limits, an image of another size than its camera's calibration; a sample in another sensor's frame, the
vehicle's or the map's; counted per sensor),
out of order (older than one already seen), duplicates, late (after every frame that could have used them
was emitted), clock jumps (stamp too far from arrival) and unknown sensors. Ego poses pass
:func:`perception.kinds.ego_problem` (the zero quaternion, non-finite values are refused).

Bounded whatever arrives: each sensor keeps at most ``MAX_BUFFERED`` samples and ``MAX_BUFFER_BYTES``
(oldest evicted, counted), also before any frame was made (a trigger dead at boot); the trigger's period
is measured on its capture stamps (median of recent gaps, at least ``MIN_PERIOD_NS``), never on arrival
times a burst after a stall squeezes together; and one call opens at most ``MAX_CATCH_UP`` timer or rate
frames: slots beyond are skipped (counted), not frames opened by the thousand. :meth:`LiveAssembler.due` and
:meth:`LiveAssembler.close` make at most a ``limit`` of the frames they complete (the newest; :meth:`due`'s
may keep the oldest): the others keep their ids as stubs, to be recorded shed or dropped
(``superseded_unassembled``, ``overflowed_unassembled``, ``closed_unassembled``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from perception.config import LiveConfig, SensorConfig, TriggerConfig
from perception.errors import ConfigError, RuntimeClosedError
from perception.kinds import ego_problem, stamp_problem
from perception.scheduler import AlignCore, AlignStats, RigCheck, SweepAccumulator
from perception.types import EgoPose, Frame, PointCloudSample, Sample, SensorSpec

log = logging.getLogger(__name__)

__all__ = ["LiveAssembler", "LiveStats", "LostFrame", "TimeBase", "check_trigger"]

T = TypeVar("T")

_WINDOW = 32  # samples over which a sensor's stamp offset is estimated
#: Per-sensor buffer caps (the oldest sample goes first; counted in ``LiveStats.buffer_evicted``).
MAX_BUFFERED = 256
MAX_BUFFER_BYTES = 256 * 2**20
#: The shortest trigger period believed when it is measured (200 Hz).
MIN_PERIOD_NS = 5_000_000
#: Frames one call opens at most for slots the trigger skipped, the silence timer or the rate grid.
MAX_CATCH_UP = 64
#: A sensor's next sample may come this fraction of its nominal period early (its capture times jitter,
#: up to +-5 % of the period) when a frame is completed before it by its rate (``_settled``); more
#: if its measured gaps say so.
JITTER_ALLOWANCE = 0.1
#: What :meth:`LiveAssembler.awaited` names the ego poses (odometry) by.
EGO = "ego"
#: How stamps on another clock are taken, as the warnings of stamps off the host clock say it (a host that sets
#: the time base its own way, a ROS node's parameter, says its own).
TIME_BASE_REMEDY = "live.time_base: offset (with offset_ms) or estimate"
#: The clock the live assembly runs on by default, as its warnings name it (a host on another clock names its own).
HOST_CLOCK = "the host's monotonic clock"


@dataclass
class LiveStats(AlignStats):
    """Counters of the live intake (replay's :class:`~perception.scheduler.AlignStats` and live's own);
    every sample pushed is in exactly one of the sample counters (``buffer_evicted`` counts those of
    ``samples`` a full buffer dropped)."""

    invalid: int = 0  # refused by the intake check (invalid_by_sensor says whose; "ego" for poses)
    late: int = 0
    clock_jump: int = 0  # stamps that jumped against arrival (re-anchored, or dropped with a fixed offset)
    #: Of those, the samples dropped for it (a fixed time base); a re-anchored one goes on (``samples``, or
    #: the counter that drops it later): the sample counter of the two.
    clock_jump_dropped: int = 0
    intake_overflow: int = 0  # dropped before assembly: the intake queue was full
    frames_by_trigger: int = 0
    frames_by_timer: int = 0  # fallback frames while the trigger sensor was silent
    frames_by_rate: int = 0
    trigger_silences: int = 0  # times the trigger fell silent and the timer took over
    ego_poses: int = 0
    buffer_evicted: int = 0  # samples dropped from a full sensor buffer before their time
    slots_skipped: int = 0  # trigger slots beyond MAX_CATCH_UP in one call: no frame opened
    closed_unassembled: int = 0  # pending frames close() did not make (its limit): dropped records
    #: Due frames due() did not make (its limit: a backlog beyond what the pipeline holds), the older ones:
    #: shed records (dropped without the overload policy).
    superseded_unassembled: int = 0
    #: Likewise the newer ones (``keep="oldest"``: the pipeline refuses the newest, ``drop-newest``).
    overflowed_unassembled: int = 0
    invalid_by_sensor: dict[str, int] = field(default_factory=dict)
    #: The last reason each sensor's sample was refused for (bounded: one per sensor).
    invalid_reasons: dict[str, str] = field(default_factory=dict)

    def count_invalid(self, sensor: str, reason: str) -> None:
        self.invalid += 1
        self.invalid_by_sensor[sensor] = self.invalid_by_sensor.get(sensor, 0) + 1
        self.invalid_reasons[sensor] = reason


@dataclass
class _Offset:
    window: deque[int] = field(default_factory=lambda: deque(maxlen=_WINDOW))
    value: int | None = None


class TimeBase:
    """Stamps -> the assembler's clock (ns), per sensor: none, a fixed offset, or an estimated one."""

    def __init__(self, live: LiveConfig) -> None:
        self._mode = live.time_base
        self._fixed = live.offset_ns if live.time_base == "offset" else 0
        self._skew = live.max_stamp_skew_ns
        self._est: dict[str, _Offset] = {}

    def to_host(self, sensor: str, stamp_ns: int, arrival_ns: int) -> tuple[int | None, bool]:
        """The stamp on the host clock (None: unusable) and whether it was a clock jump."""
        if self._mode != "estimate":
            t = stamp_ns + self._fixed
            if abs(arrival_ns - t) > self._skew:
                return None, True
            return t, False
        est = self._est.setdefault(sensor, _Offset())
        d = arrival_ns - stamp_ns
        jump = est.value is not None and abs(d - est.value) > self._skew
        if jump:
            est.window.clear()  # re-anchor on the new clock
        est.window.append(d)
        est.value = min(est.window)
        return stamp_ns + est.value, jump

    def jumps(self, sensor: str, stamp_ns: int, arrival_ns: int) -> bool:
        """Estimating: whether this stamp would re-anchor the sensor's offset (its clock jumped, e.g. a
        reboot or a glitch): a stamp behind the sensor's last one is then a new clock, not out of order."""
        est = self._est.get(sensor)
        if self._mode != "estimate" or est is None or est.value is None:
            return False
        return abs(arrival_ns - stamp_ns - est.value) > self._skew

    def offsets_ns(self) -> dict[str, int]:
        """Current offset per sensor (host = stamp + offset); one shared value unless estimating."""
        if self._mode != "estimate":
            return {"*": self._fixed}
        return {s: e.value for s, e in sorted(self._est.items()) if e.value is not None}


@dataclass(frozen=True)
class LostFrame(Generic[T]):
    """A frame opened but not made: building it raised ``error`` (a pose or sweep that breaks the motion
    model, a bug), or the assembler was closed first (``error``: a :class:`RuntimeClosedError`,
    :meth:`LiveAssembler.close`'s ``limit``). ``frame`` is its stub -- the id it took, its time and
    opening, no samples -- of which a host makes the frame's dropped record; ``token`` is its trigger
    sample's."""

    frame: Frame
    token: T | None
    error: Exception


@dataclass
class _Pending(Generic[T]):
    t_ns: int
    created_ns: int  # when the frame opened on the host's monotonic clock (its latency origin)
    due_ns: int
    by: str  # trigger | timer | rate
    token: T | None = None  # what the caller attached to the trigger sample


def check_trigger(enabled: Sequence[str], trigger: TriggerConfig) -> None:
    """A :class:`ConfigError` unless live frames can be triggered: by an enabled sensor, or at a rate. (A
    trigger left out by --sensors said "is not configured", of a sensor the profile and the rig have.)"""
    if trigger.sensor is not None and trigger.sensor not in enabled:
        raise ConfigError(
            f"trigger sensor {trigger.sensor!r} is not enabled (enabled: {', '.join(enabled) or 'none'}): "
            "enable it (--sensors), or trigger by another sensor (trigger.sensor) or a rate (trigger.rate_hz)",
            key="trigger.sensor",
        )
    if trigger.automatic:
        raise ConfigError("live assembly needs a trigger sensor or rate_hz", key="trigger")


class LiveAssembler(Generic[T]):
    """Assemble frames from live samples; :meth:`add` them, take :meth:`due` frames at host time ``now``.

    Host time is the clock the caller passes in (arrivals, ``now``); the frames' ``created_ns`` (their latency
    and budget origin) is the host's monotonic time of their opening, ``host_ns`` where that clock is another.

    ``rates`` gives each sensor's nominal rate (Hz, from the rig) for the trigger's silence timer; a
    trigger without one has its period measured from its arrivals. ``clock_name``: the host clock as the
    warnings name it; ``time_base_remedy``: what they say stamps on another clock need.
    """

    def __init__(
        self,
        sensors: Sequence[SensorConfig],
        trigger: TriggerConfig,
        live: LiveConfig,
        *,
        rates: Mapping[str, float] | None = None,
        rig: Mapping[str, SensorSpec] | None = None,
        clock_name: str = HOST_CLOCK,
        check: RigCheck | None = None,
        time_base_remedy: str = TIME_BASE_REMEDY,
    ) -> None:
        self._sensors = {s.name: s for s in sensors}
        check_trigger(list(self._sensors), trigger)
        self._trigger = trigger.sensor
        self._live = live
        self._time = TimeBase(live)
        self.stats = LiveStats()
        self._core = AlignCore(sensors, self.stats, ego_max_age_ns=live.ego_max_age_ns, rig=rig)
        #: Earlier sweeps merged into point sensors' samples (``SensorConfig.accumulate_ms``, needs ``rig``),
        #: moved by the ego poses the host pushed (interpolated), else by the frame's ego twist.
        self.accumulator: SweepAccumulator = self._core.accumulator
        self._horizon_ns = self._core.horizon_ns + live.transit_ns
        #: The intake check against the rig (:class:`perception.scheduler.RigCheck`): an image of another size
        #: than its camera's calibration, a sample in another sensor's frame, the vehicle's or the map's are
        #: refused. ``check``: the runtime's (``Runtime.intake_check``, of these sensors and rig), which then
        #: does not check the frames' samples again.
        self._check = check if check is not None else RigCheck(sensors, rig, image_sizes=True)
        self._columns: dict[str, int] = {}  # a point sensor's column count, from its first sample
        self._off_clock_said: set[str] = set()  # sensors whose stamps off the host clock were explained
        self._clock_name = clock_name  # the host clock as the warnings name it
        self._time_base_remedy = time_base_remedy  # and what they say stamps on another clock need
        self._last_host: dict[str, int] = {}  # the last stamp of each sensor on the host clock
        self._pending: deque[_Pending[T]] = deque()
        self._last_frame_t: int | None = None
        self._periods = {n: round(1e9 / r) for n, r in (rates or {}).items() if r > 0}
        #: Per sensor of a nominal rate: how far its recent capture-stamp gaps were from a whole number of
        #: periods (its jitter, a skipped sample aside), for the early-completion rule (:meth:`_settled`).
        self._gap_errors: dict[str, deque[int]] = {n: deque(maxlen=_WINDOW) for n in self._periods}
        rate = trigger.rate_hz or (rates or {}).get(trigger.sensor or "", 0.0)
        self._period_ns = round(1e9 / rate) if rate else 0
        self._fixed_rate = trigger.rate_hz is not None
        self._next_rate_t: int | None = None
        self._slot_t: int | None = None  # time of the latest trigger slot a frame was opened for
        self._trigger_last_t: int | None = None
        self._trigger_gaps: deque[int] = deque(maxlen=16)  # capture-time gaps of recent trigger samples
        self._trigger_lags: deque[int] = deque(maxlen=16)  # arrival - capture of recent trigger samples
        self._silent = False
        self._lost: list[LostFrame[T]] = []  # frames whose making raised, until take_lost()
        self._unassembled: list[LostFrame[T]] = []  # frames close() did not make, until take_unassembled()
        self._superseded: list[tuple[Frame, T | None]] = []  # due frames due() did not make, until taken
        self._overflowed: list[tuple[Frame, T | None]] = []  # likewise, the newer ones (keep="oldest")

    # -- intake ---------------------------------------------------------------------------------
    def add(self, sample: Sample, arrival_ns: int, token: T | None = None, *, host_ns: int | None = None) -> str | None:
        """Take one sample that arrived at ``arrival_ns``: None when taken, else why it was dropped
        (counted in :attr:`stats`). Frames come from :meth:`due`, a trigger sample's with its ``token``.
        ``host_ns``: its arrival on the host's monotonic clock (default ``arrival_ns``), the ``created_ns``
        of the frame it opens."""
        name = getattr(sample, "sensor", None)
        if not isinstance(name, str) or name not in self._sensors:
            self.stats.unknown_sensor += 1
            return "unknown sensor"
        problem = self._check.problem(name, sample)
        if problem is None and isinstance(sample, PointCloudSample):
            columns = self._columns.setdefault(name, sample.points.shape[1])
            if sample.points.shape[1] != columns:
                problem = f"{sample.points.shape[1]} point columns, the sensor's earlier samples had {columns}"
        if problem is not None:
            self.stats.count_invalid(name, problem)
            return f"invalid: {problem}"
        if type(sample.t_ns) is not int:  # a numpy integer: plain int from here on (no int64 wrap-around)
            sample = dataclasses.replace(sample, t_ns=int(sample.t_ns))
        stamp = sample.t_ns
        problem = self._core.order_problem(name, stamp, new_clock=self._time.jumps(name, stamp, arrival_ns))
        if problem is not None:
            return problem
        host_t, jump = self._time.to_host(name, sample.t_ns, arrival_ns)
        if jump:
            self.stats.clock_jump += 1
        if host_t is None:
            self.stats.clock_jump_dropped += 1
            self._off_clock(name, stamp, arrival_ns)
            return "clock jump"
        if (problem := stamp_problem(host_t)) is not None:  # the stamp the frames carry passes the check too
            problem = f"on the host clock: {problem}"
            self.stats.count_invalid(name, problem)
            return f"invalid: {problem}"
        last_host = self._last_host.get(name)
        if last_host is not None and host_t <= last_host:
            # A re-anchored clock whose host time still lands behind what the sensor gave already.
            self.stats.out_of_order += 1
            return "out of order"
        self._core.seen(name, stamp)
        if last_host is not None and not jump:
            self._gap_seen(name, host_t - last_host)
        self._last_host[name] = host_t
        if self._last_frame_t is not None and host_t < self._last_frame_t - self._sensors[name].sync_window_ns:
            # Every frame that could have used it is gone; a trigger this late opens no frame either.
            self.stats.late += 1
            return "late"
        if name == self._trigger and not self._fixed_rate and self._covered(host_t):
            # The timer already emitted this slot's frame (the sample came after the silence timeout):
            # a second frame at the same time would break time order and double the sweep. Its delay
            # still teaches the timer to wait longer.
            self._trigger_seen(host_t, arrival_ns)
            self.stats.late += 1
            return "late"
        if host_t != sample.t_ns:
            sample = dataclasses.replace(sample, t_ns=host_t)
        self._core.take(sample, stamp)
        self.stats.buffer_evicted += self._core.cap(name, MAX_BUFFERED, MAX_BUFFER_BYTES)
        if name == self._trigger and not self._fixed_rate:
            self._on_trigger(host_t, arrival_ns, token, arrival_ns if host_ns is None else host_ns)
        elif self._fixed_rate and self._next_rate_t is None:
            self._next_rate_t = host_t
        self._settle(arrival_ns)
        return None

    def add_ego(self, pose: EgoPose, arrival_ns: int) -> str | None:
        """An ego pose (odometry) from the host; frames carry the one nearest their time, if within
        ``live.ego_max_age_ms`` of it (else none: counted in ``ego_stale``). None when taken, else why it
        was dropped (counted)."""
        problem = ego_problem(pose)
        if problem is not None:
            self.stats.count_invalid("ego", problem)
            return f"invalid: {problem}"
        host_t, jump = self._time.to_host("ego", int(pose.t_ns), arrival_ns)
        if jump:
            self.stats.clock_jump += 1
        if host_t is None:
            self.stats.clock_jump_dropped += 1
            self._off_clock("ego", int(pose.t_ns), arrival_ns)
            return "clock jump"
        self.stats.ego_poses += 1
        self._core.add_ego(pose if host_t == pose.t_ns else dataclasses.replace(pose, t_ns=host_t))
        self._settle(arrival_ns)
        return None

    def _off_clock(self, name: str, stamp_ns: int, arrival_ns: int) -> None:
        """Say once per sensor why its stamps are dropped as clock jumps under a fixed time base: a host
        pushing recorded stamps (from 0) or another clock's saw only 'clock jump' and a count."""
        if name in self._off_clock_said:
            return
        self._off_clock_said.add(name)
        live = self._live
        off_s = (arrival_ns - stamp_ns - (live.offset_ns if live.time_base == "offset" else 0)) / 1e9
        log.warning(
            "live: %s: stamp %d ns is %.3f s off %s at its arrival (live.time_base: %s, "
            "max_stamp_skew_ms: %g): dropped and counted as clock jumps; stamps on another clock need %s",
            name,
            stamp_ns,
            off_s,
            self._clock_name,
            live.time_base,
            live.max_stamp_skew_ns / 1e6,
            self._time_base_remedy,
        )

    def _trigger_seen(self, t: int, arrival: int) -> None:
        if self._trigger_last_t is not None and t > self._trigger_last_t:
            self._trigger_gaps.append(t - self._trigger_last_t)
        self._trigger_last_t = t if self._trigger_last_t is None else max(t, self._trigger_last_t)
        self._trigger_lags.append(max(0, arrival - t))
        self._silent = False

    def _pending_timer_frame(self, t: int, half: int) -> int | None:
        """Position in the pending frames of the timer frame of the slot of capture time ``t``, if any."""
        for i, p in enumerate(self._pending):
            if p.by == "timer" and abs(p.t_ns - t) <= half:
                return i
        return None

    def _on_trigger(self, t: int, arrival: int, token: T | None, created: int) -> None:
        self._trigger_seen(t, arrival)
        period = self.trigger_period_ns()
        half = period // 2
        in_open_slot = self._slot_t is not None and t <= self._slot_t + half
        if in_open_slot and (i := self._pending_timer_frame(t, half)) is not None:
            # The timer opened this slot's frame and it is still pending: the real sample takes it over.
            self._pending[i] = _Pending(t, created, t + self._horizon_ns, "trigger", token)
            return
        if period and self._slot_t is not None and self._slot_t + period < t - half:
            # Slots the trigger skipped before its timer ran out: their samples can no longer come
            # (they would be out of order), so their frames open now, as the timer would have (the
            # latest MAX_CATCH_UP of them: older ones are beyond any staleness limit).
            skipped = (t - half - self._slot_t - 1) // period
            self._skip_slots(skipped)
            while self._slot_t + period < t - half:
                self._slot_t += period
                self._open(self._slot_t, created, "timer")
        self._open(t, created, "trigger", token)
        self._slot_t = t

    def _covered(self, t: int) -> bool:
        """The timer opened a frame for the slot of capture time ``t`` and that frame was emitted."""
        if self._last_frame_t is None or self._slot_t is None:
            return False
        half = self.trigger_period_ns() // 2
        if t > self._slot_t + half or t > self._last_frame_t + half:
            return False  # a new slot, or its frame is still pending
        return self._pending_timer_frame(t, half) is None

    def _skip_slots(self, slots: int) -> None:
        """Move past all but the last ``MAX_CATCH_UP`` of ``slots`` trigger slots without frames (counted)."""
        if slots > MAX_CATCH_UP:
            assert self._slot_t is not None
            self._slot_t += (slots - MAX_CATCH_UP) * self.trigger_period_ns()
            self.stats.slots_skipped += slots - MAX_CATCH_UP

    def _open(self, t: int, created: int, by: str, token: T | None = None) -> None:
        self._pending.append(_Pending(t, created, t + self._horizon_ns, by, token))

    # -- time -----------------------------------------------------------------------------------
    def trigger_period_ns(self) -> int:
        """The trigger's nominal period: from the rig's rate, else the median of the gaps between its
        capture stamps (at least ``MIN_PERIOD_NS``)."""
        if self._period_ns:
            return self._period_ns
        if len(self._trigger_gaps) >= 2:
            return max(MIN_PERIOD_NS, sorted(self._trigger_gaps)[len(self._trigger_gaps) // 2])
        return 0

    def _tick(self, now: int, created: int) -> None:
        """Open the frames the host clock calls for: the fixed-rate grid, or the silence timer (``created``:
        their ``created_ns``)."""
        period = self.trigger_period_ns()
        if self._fixed_rate:
            if self._next_rate_t is None:
                return
            behind = (now - self._next_rate_t) // period + 1
            if behind > MAX_CATCH_UP:
                self._next_rate_t += (behind - MAX_CATCH_UP) * period
                self.stats.slots_skipped += behind - MAX_CATCH_UP
            while self._next_rate_t <= now:
                self._open(self._next_rate_t, created, "rate")
                self._next_rate_t += period
            return
        if (at := self._timer_at(period)) is not None and now >= at:
            assert self._slot_t is not None
            self._skip_slots((now - at) // period + 1)
        while (at := self._timer_at(period)) is not None and now >= at:
            # The trigger's sample for the next slot would have arrived by now: it is silent, the
            # timer opens the slot.
            if not self._silent:
                self._silent = True
                self.stats.trigger_silences += 1
            assert self._slot_t is not None
            self._slot_t += period
            self._open(self._slot_t, created, "timer")

    def _timer_at(self, period: int) -> int | None:
        """Host time at which the timer opens the next slot if the trigger's sample for it is missing:
        the slot's time plus the trigger's usual delivery delay (median of recent ones) plus the tolerance."""
        if not period or self._slot_t is None:
            return None
        lags = sorted(self._trigger_lags)
        lag = lags[len(lags) // 2] if lags else 0
        return self._slot_t + period + lag + self._live.trigger_tolerance_ns

    def _settle(self, now: int) -> None:
        """Complete now the pending frames no later sample or pose could improve (:meth:`_settled`)."""
        for p in self._pending:
            if (
                p.due_ns > now
                and self._ego_settled(p.t_ns)
                and all(self._settled(n, p.t_ns) for n in self._core.active)
            ):
                p.due_ns = now

    def _ego_settled(self, t: int) -> bool:
        """No ego pose still to come can change the frame at ``t``: odometry has reached ``t`` (a pose at or
        after it: the frame's pose and its sweeps' motion are interpolated between the poses around them,
        as replay interpolates the recorded ones), or none was pushed yet, or the latest is past
        ``live.ego_max_age_ms`` before ``t`` (odometry stopped: the frame's ego motion is unknown)."""
        newest = self._core.newest_ego_t()
        return newest is None or newest >= t or t - newest > self._live.ego_max_age_ns

    def _settled(self, name: str, t: int) -> bool:
        """No sample still to come can be nearer ``t`` than what ``name`` has: it has one at or after
        ``t``, or, by its nominal period, its next sample is expected farther from ``t`` than its last
        one is (or outside the sync window, when the last one is too old to be used), even if it comes
        as early as its jitter allows (:meth:`_jitter_allowance`)."""
        last = self._core.newest_t(name)
        if last is None:
            return False
        if last >= t:
            return True
        period = self._periods.get(name, 0)
        if not period:
            return False
        window = self._sensors[name].sync_window_ns
        expected = last + period - self._jitter_allowance(name, period)  # the earliest it may come
        return expected - t >= t - last or (t - last > window and expected - t > window)

    def _gap_seen(self, name: str, gap: int) -> None:
        errors = self._gap_errors.get(name)
        if errors is not None and gap > 0:
            period = self._periods[name]
            errors.append(abs(gap - max(1, round(gap / period)) * period))

    def _jitter_allowance(self, name: str, period: int) -> int:
        """How much earlier than its nominal period after its last one a sensor's next sample may come:
        :data:`JITTER_ALLOWANCE` of the period, or twice the furthest its recent gaps were from the period
        grid if more (a sensor's capture times jitter: a frame completed on the nominal period alone took
        the farther of two samples when the next one came early)."""
        errors = self._gap_errors[name]
        return max(round(JITTER_ALLOWANCE * period), 2 * max(errors, default=0))

    def next_deadline(self) -> int | None:
        """The host time at which :meth:`due` next has work (a frame to complete or to open)."""
        times = [p.due_ns for p in self._pending]
        if self._fixed_rate:
            if self._next_rate_t is not None:
                times.append(self._next_rate_t)
        elif (at := self._timer_at(self.trigger_period_ns())) is not None:
            times.append(at)
        return min(times) if times else None

    def awaited(self) -> tuple[frozenset[str], ...]:
        """For each pending frame, the sensors it waits for (not yet past it, :meth:`_settled`), and
        :data:`EGO` while odometry has not reached it (:meth:`_ego_settled`); one empty set while the
        fixed-rate grid waits for its first sample.

        A frame completes when a sample or pose is taken and each of its sensors (and odometry) is past
        it, and only a sensor's own samples (odometry's poses) move it there: until samples of every
        sensor of one of these sets have arrived (an empty set: any sample or pose -- a timer or rate
        frame whose sensors were all past it when it opened completes with the next one), a sample of a
        sensor other than the trigger (a pose) makes :meth:`due` return no frame before
        :meth:`next_deadline`. It only joins the buffers and the counters: taken later, just before
        :meth:`due`, it makes the same frames."""
        if self._fixed_rate and self._next_rate_t is None:
            return (frozenset(),)
        return tuple(
            frozenset(n for n in self._core.active if not self._settled(n, p.t_ns))
            | (frozenset() if self._ego_settled(p.t_ns) else frozenset({EGO}))
            for p in self._pending
        )

    def due(
        self,
        now: int,
        limit: int | None = None,
        *,
        keep: Literal["newest", "oldest"] = "newest",
        host_now: int | None = None,
    ) -> list[tuple[Frame, T | None]]:
        """Frames complete at host time ``now``, in time order, each with its trigger sample's token.
        A frame's ``created_ns`` is the host monotonic time it opened (its trigger's arrival; a frame the
        timer or the rate grid opens here: ``host_now``, default ``now``). A frame whose making
        raises is not among them and costs no other: it waits in :meth:`take_lost`.

        ``limit``: at most that many are made (a backlog of due frames beyond what the pipeline holds, after
        a flood of trigger samples or a stalled loop: making them all, tens of milliseconds each, held the
        event loop for frames the runtime then shed or dropped), those the pipeline would keep (``keep``):

        * ``"newest"`` (the overload policy runs the freshest; ``drop-oldest`` drops the older): each older
          one keeps its id, in time order, and waits in :meth:`take_superseded` as a stub of its time,
          opening and ego pose (what its shed record's prediction reads), counted in
          ``superseded_unassembled``;
        * ``"oldest"`` (``drop-newest`` refuses the newer): each newer one, likewise, in
          :meth:`take_overflowed`, counted in ``overflowed_unassembled``."""
        self._tick(now, now if host_now is None else host_now)
        out: list[tuple[Frame, T | None]] = []
        due = 0
        while due < len(self._pending) and self._pending[due].due_ns <= now:
            due += 1
        excess = due - limit if limit is not None and due > limit else 0
        if keep == "newest":
            for _ in range(excess):
                p = self._pending.popleft()
                self._superseded.append((self._stub(p, ego=True), p.token))
                self.stats.superseded_unassembled += 1
            while self._pending and self._pending[0].due_ns <= now:
                self._emit(self._pending.popleft(), out)
        else:
            for _ in range(due - excess):
                self._emit(self._pending.popleft(), out)
            for _ in range(excess):
                p = self._pending.popleft()
                self._overflowed.append((self._stub(p, ego=True), p.token))
                self.stats.overflowed_unassembled += 1
        self._evict(now)
        return out

    def take_superseded(self) -> list[tuple[Frame, T | None]]:
        """The due frames :meth:`due` did not make (its ``limit``), the older ones, stubs with their tokens, in
        time order, since the last call."""
        superseded, self._superseded = self._superseded, []
        return superseded

    def take_overflowed(self) -> list[tuple[Frame, T | None]]:
        """The due frames :meth:`due` did not make (its ``limit``, ``keep="oldest"``), the newer ones, stubs with
        their tokens, in time order, since the last call."""
        overflowed, self._overflowed = self._overflowed, []
        return overflowed

    def close(self, limit: int | None = None) -> list[tuple[Frame, T | None]]:
        """Complete the pending frames with what has arrived (the host is closing); as :meth:`due`.

        ``limit``: at most that many are made, the newest (under overload the freshest runs, as the
        runtime's shedding has it); the older ones are not assembled (a frame's making may cost tens of
        milliseconds, and a flood of trigger samples left hundreds pending: a close took minutes). Each
        keeps its id, in time order, and waits in :meth:`take_unassembled` as a stub of its time and
        opening, of which a host makes the frame's dropped record; counted in ``closed_unassembled``."""
        out: list[tuple[Frame, T | None]] = []
        while self._pending and limit is not None and len(self._pending) > limit:
            p = self._pending.popleft()
            stub = self._stub(p, ego=False)  # a frame all the same: its id taken, its record to come
            error = RuntimeClosedError(
                f"closed before the frame was assembled (at most {limit} pending frames are made at close)"
            )
            self._unassembled.append(LostFrame(stub, p.token, error))
            self.stats.closed_unassembled += 1
        while self._pending:
            self._emit(self._pending.popleft(), out)
        return out

    def take_unassembled(self) -> list[LostFrame[T]]:
        """The frames :meth:`close` did not assemble (its ``limit``), in time order, since the last call."""
        unassembled, self._unassembled = self._unassembled, []
        return unassembled

    def take_lost(self) -> list[LostFrame[T]]:
        """The frames whose making raised since the last call (their ids are among the frames' ids)."""
        lost, self._lost = self._lost, []
        return lost

    def offsets_ns(self) -> dict[str, int]:
        return self._time.offsets_ns()

    def pending_tokens(self) -> list[T | None]:
        """The tokens of the frames still pending (opened, not yet emitted), in time order."""
        return [p.token for p in self._pending]

    def buffered(self, sensor: str) -> tuple[Sample, ...]:
        """The samples the assembler still holds for ``sensor`` (a copy, oldest first)."""
        return self._core.buffered(sensor)

    # -- frames ---------------------------------------------------------------------------------
    def _emit(self, p: _Pending[T], out: list[tuple[Frame, T | None]]) -> None:
        frame_id = self._core.next_id
        try:
            out.append((self._make_frame(p), p.token))
        except Exception as exc:
            stub = Frame(frame_id, p.t_ns, {}, created_ns=p.created_ns)
            self._lost.append(LostFrame(stub, p.token, exc))

    def _stub(self, p: _Pending[T], *, ego: bool) -> Frame:
        """The stub of pending frame ``p``, not made (:meth:`AlignCore.stub`): counted by its opening, and
        emitted as far as time order goes (a trigger sample for its slot is late, as for a made frame's)."""
        self._count_opening(p)
        self._last_frame_t = p.t_ns if self._last_frame_t is None else max(self._last_frame_t, p.t_ns)
        return self._core.stub(p.t_ns, created_ns=p.created_ns, ego=ego)

    def _count_opening(self, p: _Pending[T]) -> None:
        if p.by == "trigger":
            self.stats.frames_by_trigger += 1
        elif p.by == "timer":
            self.stats.frames_by_timer += 1
        else:
            self.stats.frames_by_rate += 1

    def _make_frame(self, p: _Pending[T]) -> Frame:
        self._count_opening(p)
        self._last_frame_t = p.t_ns if self._last_frame_t is None else max(self._last_frame_t, p.t_ns)
        return self._core.make_frame(p.t_ns, created_ns=p.created_ns)

    def _evict(self, now: int) -> None:
        """Drop samples no frame can use any more: older than the oldest pending (else the last) frame
        by the keep horizon. Before any frame, older than the host clock by the keep horizon and the
        stamp skew (a frame still to open lies no further back: a trigger sample further back than the
        skew is a clock jump)."""
        oldest = self._pending[0].t_ns if self._pending else self._last_frame_t
        if oldest is None:
            oldest = now - self._live.max_stamp_skew_ns
        self._core.evict(oldest)
