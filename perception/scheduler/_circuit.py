"""Per-model circuit breaker, so a dead or hanging model stops costing a full wait on every frame.

closed --(failure_threshold consecutive failures)--> open --(reset_after)--> half-open
half-open lets exactly one probe through: success closes the circuit, failure re-opens it.
Time is passed in (monotonic ns) so the breaker is deterministic and testable.

**Load is not a fault.** A failure is an error, or a model that stops answering. An answer made late
by load (frames queueing in the server, a CPU shared with other work) is neither: opening the circuit
for it takes the model away (the lidar, for seconds) because the computer was slow, when the frames
that overload it are the thing to give up (:mod:`perception.scheduler._shedding`). So a late answer
(:meth:`CircuitBreaker.record_late`) is judged against the model's measured service time (the slowest
of its latest :data:`SERVICE_WINDOW` answers, which include the load they met):

* a request that waited :data:`HANG_FACTOR` times that or more is a fault: the model stopped answering;
* a request late within that range is load: not a failure (``late_load``);
* with nothing measured yet (a model that never answered: hung from the start, or slower than its
  deadline) the breaker cannot tell, says so (``late_unmeasured``, logged once) and counts a failure,
  as any late answer was counted before;
* and where it cannot tell for long: :data:`LOAD_PATIENCE` times ``failure_threshold`` late answers in
  a row, none answered in between, open the circuit too, saying that load and a fault could not be
  told apart (a deadline too short for :data:`HANG_FACTOR` to be reached, and a model that stopped).
  Only requests given at least the model's measured service time count toward it: one sent with less
  of its frame's deadline left (a frame that waited for its slot, a host so busy that the model is
  slower than the deadline) was not given the time the model takes, and says nothing of a hang. A
  slow model that works is kept on; the overload policy sheds the frames that load it.

**Measured, where its owner can** (:attr:`CircuitBreaker.can_measure`: the runtime's dispatcher). No rule
over late answers alone tells a model slower than its frames' deadline from one that stopped: both are
cut at every deadline, and a model whose only measure is a slow first (cold) answer is never given "the
time it takes". So where the owner can run a request past its frame's deadline, :data:`LOAD_PATIENCE`
times ``failure_threshold`` late answers in a row, none answered in between (given the model's time or
not), ask for a **measuring request** instead of opening the circuit (:meth:`CircuitBreaker.take_measurement`):
one request given :data:`HANG_FACTOR` times the measured service time (at least its frame's deadline),
in a task that outlives its frame. An answer is a fresh measure (:meth:`CircuitBreaker.measured`): the
model works, slowly, and stays on; none is a fault: the circuit opens.
"""

from __future__ import annotations

import enum
import logging
from collections import deque

from perception.config import CircuitConfig

__all__ = ["HANG_FACTOR", "LOAD_PATIENCE", "SERVICE_WINDOW", "CircuitBreaker", "CircuitState", "LateVerdict"]

log = logging.getLogger(__name__)

#: A late request that waited this many times the model's measured service time is a fault.
HANG_FACTOR = 3.0
#: Late answers in a row within that range, per ``failure_threshold``, that open the circuit anyway.
LOAD_PATIENCE = 4
#: The latest answers whose latency is the model's measured service time (their slowest).
SERVICE_WINDOW = 16


class LateVerdict(str, enum.Enum):
    """What a late answer was taken for (:meth:`CircuitBreaker.record_late`)."""

    FAULT = "fault"  # waited HANG_FACTOR times its measured service time: a failure
    LOAD = "load"  # late within that range: not a failure
    UNMEASURED = "unmeasured"  # nothing measured to tell by: a failure, said so


class CircuitState(str, enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    def __init__(self, model: str, config: CircuitConfig) -> None:
        self.model = model
        self._threshold = config.failure_threshold
        self._reset_ns = config.reset_after_ns
        self._state = CircuitState.CLOSED
        self._failures = 0
        self._opened_at = 0
        self._probe_out = False
        self.opened_count = 0
        self._service: deque[int] = deque(maxlen=SERVICE_WINDOW)
        #: Late answers in a row judged load: those given the model's measured time (measured: every one).
        self._late_streak = 0
        #: Its owner runs measuring requests (module docs): the patience asks for one instead of opening.
        self.can_measure = False
        self._measure_wanted = False
        self._measuring = False
        #: Late answers by what they were taken for (:class:`LateVerdict`).
        self.late: dict[str, int] = {v.value: 0 for v in LateVerdict}
        #: Measuring requests by their outcome: ``answered`` (load: the model stays on), ``unanswered``
        #: (a fault: the circuit opened), ``abandoned`` (the runtime closed, the request went nowhere).
        self.measurements: dict[str, int] = {"answered": 0, "unanswered": 0, "abandoned": 0}

    @property
    def state(self) -> CircuitState:
        return self._state

    def allow(self, now_ns: int) -> bool:
        """May a request go out now? (Reserves the half-open probe when it says yes.)"""
        if self._state is CircuitState.CLOSED:
            return True
        if self._state is CircuitState.OPEN and now_ns - self._opened_at >= self._reset_ns:
            self._state = CircuitState.HALF_OPEN
            self._probe_out = False
        if self._state is CircuitState.HALF_OPEN and not self._probe_out:
            self._probe_out = True
            return True
        return False

    @property
    def service_ns(self) -> int | None:
        """The model's measured service time (the slowest of its latest answers), or ``None``."""
        return max(self._service) if self._service else None

    def observe(self, latency_ns: int) -> None:
        """An answer took ``latency_ns`` (a warm-up's seeds the measure before the first frame)."""
        self._service.append(latency_ns)

    def record_success(self, latency_ns: int | None = None) -> None:
        if latency_ns is not None:
            self.observe(latency_ns)
        if self._state is not CircuitState.CLOSED:
            log.info("model %s: circuit closed", self.model)
        self._state = CircuitState.CLOSED
        self._failures = 0
        self._late_streak = 0
        self._measure_wanted = False  # answered: no measure needed (one out still reports)
        self._probe_out = False

    def report(self) -> dict[str, object]:
        """Its state, the times it opened, its late answers by verdict and its measuring requests by outcome."""
        return {
            "state": self._state.value,
            "opened": self.opened_count,
            "late": dict(self.late),
            "measurements": dict(self.measurements),
        }

    # -- measuring requests (module docs) --------------------------------------------------------
    @property
    def measuring(self) -> bool:
        """A measuring request is wanted or out."""
        return self._measure_wanted or self._measuring

    def take_measurement(self, frame_budget_ns: int) -> int | None:
        """When a measuring request is wanted (and the circuit closed): the time it may run --
        :data:`HANG_FACTOR` times the measured service time, at least ``frame_budget_ns`` (its frame's) --
        and it is out from now on, until :meth:`measured` or :meth:`abandon_measurement`. Else None."""
        if not self._measure_wanted or self._state is not CircuitState.CLOSED:
            return None
        self._measure_wanted, self._measuring = False, True
        return max(frame_budget_ns, int(HANG_FACTOR * (self.service_ns or 0)))

    def measured(self, now_ns: int, latency_ns: int | None, budget_ns: int) -> None:
        """The measuring request's outcome: answered in ``latency_ns`` (load: a fresh measure, the model stays
        on), or no answer within ``budget_ns`` (None: a fault, the circuit opens). Ignored when no measuring
        request is out (one measurement, one verdict)."""
        if not self._measuring:
            log.debug("model %s: a measuring request's verdict with none out: ignored", self.model)
            return
        self._measuring = False
        if latency_ns is not None:
            self.measurements["answered"] += 1
            log.info(
                "model %s: its measuring request was answered in %.0f ms: slow, not stopped; it stays on",
                self.model,
                latency_ns / 1e6,
            )
            self.record_success(latency_ns)
            return
        self.measurements["unanswered"] += 1
        log.warning(
            "model %s: no answer to a request given %.0f ms (%.0fx its measured service time): it stopped "
            "answering; opening the circuit",
            self.model,
            budget_ns / 1e6,
            HANG_FACTOR,
        )
        if self._state is CircuitState.CLOSED:
            self._open(now_ns)

    def abandon_measurement(self) -> None:
        """The measuring request went nowhere (its runtime closed, its input was refused): no verdict.
        Ignored when none is out."""
        if self._measuring:
            self._measuring = False
            self.measurements["abandoned"] += 1

    def record_late(self, now_ns: int, waited_ns: int) -> LateVerdict:
        """A request got no answer after ``waited_ns`` (the join's deadline cut it): a fault, or load
        (module docs). A fault counts as :meth:`record_failure`; load does not (a half-open probe that
        was late for load is given back: the next frame probes again)."""
        service = self.service_ns
        if service is None:
            verdict = LateVerdict.UNMEASURED
            if not self.late[verdict.value]:
                log.info(
                    "model %s: late before any answer was measured: a fault or load cannot be told apart; "
                    "counted as a failure",
                    self.model,
                )
        elif waited_ns >= HANG_FACTOR * service:
            verdict = LateVerdict.FAULT
        else:
            verdict = LateVerdict.LOAD
        self.late[verdict.value] += 1
        if service is None or verdict is not LateVerdict.LOAD:
            self.record_failure(now_ns)
            return verdict
        # A request not given the time the model takes says nothing of a hang (module docs); where the model can
        # be measured, every late counts toward the measuring request.
        if waited_ns < service and not self.can_measure:
            if self._state is CircuitState.HALF_OPEN:
                self._probe_out = False
            return verdict
        self._late_streak += 1
        if self._late_streak >= LOAD_PATIENCE * self._threshold and self._state is CircuitState.CLOSED:
            if not self.can_measure:
                log.warning(
                    "model %s: late %d times in a row within %.0fx its measured %.0f ms: load or a fault cannot be "
                    "told apart; opening the circuit",
                    self.model,
                    self._late_streak,
                    HANG_FACTOR,
                    service / 1e6,
                )
                self._open(now_ns)
                self._late_streak = 0
            elif not self.measuring:  # a measuring request tells load from a fault (module docs)
                log.info(
                    "model %s: late %d times in a row, unanswered: one request is given %.0fx its measured %.0f ms "
                    "to tell load from a fault",
                    self.model,
                    self._late_streak,
                    HANG_FACTOR,
                    service / 1e6,
                )
                self._measure_wanted = True
                self._late_streak = 0
        elif self._state is CircuitState.HALF_OPEN:
            self._probe_out = False
        return verdict

    def record_failure(self, now_ns: int) -> None:
        self._failures += 1
        if self._state is CircuitState.HALF_OPEN or (
            self._state is CircuitState.CLOSED and self._failures >= self._threshold
        ):
            if self._state is CircuitState.CLOSED:
                log.warning("model %s: circuit opened after %d consecutive failures", self.model, self._failures)
            self._open(now_ns)

    def _open(self, now_ns: int) -> None:
        if self._state is CircuitState.CLOSED:
            self.opened_count += 1
        self._state = CircuitState.OPEN
        self._opened_at = now_ns
        self._probe_out = False
        self._measure_wanted = False

    def release_probe(self) -> None:
        """A reserved half-open probe was not sent after all (e.g. the frame was dropped)."""
        self._probe_out = False
