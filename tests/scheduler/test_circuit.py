"""The circuit breaker: errors and a model that stops answering open it, answers late for load do not
(latencies and times fed in)."""

from __future__ import annotations

from perception.config import CircuitConfig
from perception.scheduler._circuit import HANG_FACTOR, LOAD_PATIENCE, CircuitBreaker, CircuitState, LateVerdict

MS = 1_000_000


def breaker(threshold: int = 3) -> CircuitBreaker:
    return CircuitBreaker("lidar_detector", CircuitConfig(failure_threshold=threshold, reset_after_ms=1000))


def test_errors_open_the_circuit() -> None:
    b = breaker()
    b.record_success(60 * MS)
    for t in range(3):
        b.record_failure(t * 50 * MS)
    assert b.state is CircuitState.OPEN and b.opened_count == 1


def test_late_answers_made_late_by_load_do_not_open_it() -> None:
    # measured 60-115 ms; late after 190 ms (the join deadline, after waiting in a loaded host): load
    b = breaker()
    for ms in (60, 115, 80):
        b.record_success(ms * MS)
    verdicts = [b.record_late(t * 50 * MS, 190 * MS) for t in range(3 * 3)]
    assert verdicts == [LateVerdict.LOAD] * 9
    assert b.state is CircuitState.CLOSED and b.opened_count == 0
    assert b.late == {"fault": 0, "load": 9, "unmeasured": 0}


def test_a_model_that_stops_answering_far_beyond_its_service_time_opens_it() -> None:
    b = breaker()
    b.record_success(40 * MS)
    waited = int(HANG_FACTOR * 40 * MS)
    assert [b.record_late(t, waited) for t in range(3)] == [LateVerdict.FAULT] * 3
    assert b.state is CircuitState.OPEN


def test_with_nothing_measured_a_late_answer_counts_as_before_and_says_it_cannot_tell() -> None:
    b = breaker(threshold=2)  # a model hung from the start: no answer ever measured
    assert b.record_late(0, 140 * MS) is LateVerdict.UNMEASURED
    assert b.state is CircuitState.CLOSED
    assert b.record_late(100 * MS, 140 * MS) is LateVerdict.UNMEASURED
    assert b.state is CircuitState.OPEN
    assert b.late["unmeasured"] == 2


def test_late_for_long_within_the_service_range_opens_it_saying_it_cannot_tell() -> None:
    b = breaker(threshold=2)
    b.record_success(100 * MS)
    n = LOAD_PATIENCE * 2
    for t in range(n - 1):
        b.record_late(t, 150 * MS)
    assert b.state is CircuitState.CLOSED
    b.record_success(100 * MS)  # an answer in between starts the count again
    for t in range(n - 1):
        b.record_late(t, 150 * MS)
    assert b.state is CircuitState.CLOSED
    b.record_late(n, 150 * MS)
    assert b.state is CircuitState.OPEN and b.opened_count == 1


def test_a_slow_model_late_on_every_frame_stays_on() -> None:
    # 'perception live --burst lidar_top:2:4' on a busy host (load ~17): the lidar's warm-up took 961 ms,
    # each frame gave it ~150-185 ms, it was late 12 times in a row and its circuit opened ("load or a
    # fault cannot be told apart") for 2 s of frames: a working lidar switched off for being slow.
    b = breaker()
    b.observe(961 * MS)  # the warm-up's answer, on the busy host
    verdicts = [b.record_late(t * 100 * MS, 185 * MS) for t in range(4 * LOAD_PATIENCE * 3)]
    assert verdicts == [LateVerdict.LOAD] * (4 * LOAD_PATIENCE * 3)
    assert b.state is CircuitState.CLOSED and b.opened_count == 0
    # a request sent with little of its frame's deadline left (it waited for a slot) does not count either
    b = breaker()
    b.record_success(100 * MS)
    for t in range(4 * LOAD_PATIENCE * 3):
        b.record_late(t, 20 * MS)
    assert b.state is CircuitState.CLOSED
    # given the model's time, late all the same: counted, and the patience still opens it
    for t in range(LOAD_PATIENCE * 3):
        b.record_late(t, 150 * MS)
    assert b.state is CircuitState.OPEN and b.opened_count == 1


def test_a_half_open_probe_late_for_load_is_given_back() -> None:
    b = breaker(threshold=1)
    b.record_success(50 * MS)
    b.record_failure(0)  # an error opens it
    assert b.allow(1000 * MS)  # half-open: the probe
    assert not b.allow(1000 * MS)
    assert b.record_late(1000 * MS, 60 * MS) is LateVerdict.LOAD
    assert b.state is CircuitState.HALF_OPEN
    assert b.allow(1100 * MS)  # probed again by the next frame


def test_the_measured_service_time_is_the_slowest_recent_answer() -> None:
    b = breaker()
    assert b.service_ns is None
    b.observe(300 * MS)  # a warm-up's seed
    b.record_success(50 * MS)
    assert b.service_ns == 300 * MS


def measuring_breaker(threshold: int = 2) -> CircuitBreaker:
    b = breaker(threshold)
    b.can_measure = True  # its owner runs measuring requests (the runtime's dispatcher)
    return b


def test_where_it_can_be_measured_the_patience_asks_for_a_measuring_request_instead_of_opening() -> None:
    # the hole: a model whose only measure is a slow cold warm-up (900 ms), then hung: every frame gives it
    # 140 ms, less than "the time it takes", and no late answer counted -- it stayed on for good
    b = measuring_breaker()
    b.observe(900 * MS)
    n = LOAD_PATIENCE * 2
    for t in range(n - 1):
        assert b.record_late(t * 100 * MS, 140 * MS) is LateVerdict.LOAD
    assert not b.measuring and b.take_measurement(140 * MS) is None
    b.record_late(n * 100 * MS, 140 * MS)
    assert b.measuring and b.state is CircuitState.CLOSED
    budget = b.take_measurement(140 * MS)
    assert budget == int(HANG_FACTOR * 900 * MS)  # the measured service time, 3x
    assert b.take_measurement(140 * MS) is None  # one at a time
    for t in range(3 * n):  # the frames meanwhile: late, nothing more asked
        b.record_late(t, 140 * MS)
    assert b.take_measurement(140 * MS) is None
    b.measured(5000 * MS, None, budget)  # no answer: a fault
    assert b.state is CircuitState.OPEN and b.opened_count == 1
    assert b.measurements == {"answered": 0, "unanswered": 1, "abandoned": 0}


def test_a_measuring_request_answered_keeps_a_slow_model_on_and_measures_it() -> None:
    # the busy host's lidar (test_a_slow_model_late_on_every_frame_stays_on): slow, not stopped
    b = measuring_breaker()
    b.observe(100 * MS)
    for t in range(LOAD_PATIENCE * 2):
        b.record_late(t, 185 * MS)  # given its time (100 ms), late all the same: load or a fault?
    assert b.state is CircuitState.CLOSED
    budget = b.take_measurement(185 * MS)
    assert budget == int(HANG_FACTOR * 100 * MS)
    b.measured(0, 240 * MS, budget)
    assert b.state is CircuitState.CLOSED and b.service_ns == 240 * MS
    assert b.measurements["answered"] == 1
    # its lates now judged by what it takes under this load: each asks nothing until the patience again
    for t in range(LOAD_PATIENCE * 2 - 1):
        b.record_late(t, 185 * MS)
    assert not b.measuring


def test_a_measuring_request_never_sent_or_cut_by_the_close_gives_no_verdict() -> None:
    b = measuring_breaker()
    b.observe(100 * MS)
    for t in range(LOAD_PATIENCE * 2):
        b.record_late(t, 150 * MS)
    assert b.take_measurement(150 * MS) is not None
    b.abandon_measurement()
    assert b.state is CircuitState.CLOSED and not b.measuring
    assert b.measurements["abandoned"] == 1
    # an answer in between starts the count again, and drops a measure wanted but not yet taken
    for t in range(LOAD_PATIENCE * 2):
        b.record_late(t, 150 * MS)
    assert b.measuring
    b.record_success(90 * MS)
    assert not b.measuring and b.take_measurement(150 * MS) is None


def test_a_verdict_with_no_measuring_request_out_is_ignored() -> None:
    # one measurement, one verdict: a second (or one never asked for) neither counts nor moves the circuit
    b = measuring_breaker()
    b.observe(100 * MS)
    b.measured(0, None, 300 * MS)  # none out
    b.abandon_measurement()
    assert b.state is CircuitState.CLOSED and b.measurements == {"answered": 0, "unanswered": 0, "abandoned": 0}
    for t in range(LOAD_PATIENCE * 2):
        b.record_late(t, 150 * MS)
    budget = b.take_measurement(150 * MS)
    assert budget is not None
    b.measured(0, 200 * MS, budget)  # answered: the model stays on
    b.measured(0, None, budget)  # a second verdict for the same measurement
    assert b.state is CircuitState.CLOSED and b.opened_count == 0
    assert b.measurements == {"answered": 1, "unanswered": 0, "abandoned": 0}
