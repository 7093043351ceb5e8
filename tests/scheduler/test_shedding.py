"""The overload policy: service times and clocks fed in (no wall-clock luck), then the pipeline using it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Literal

import anyio
import anyio.lowlevel
import pytest
from pipeline_helpers import collect

from perception.config import PipelineConfig
from perception.scheduler import OrderedPipeline, Superseded
from perception.scheduler._shedding import (
    MEASURED_MIN,
    OVERLOAD,
    WARMUP_FRAMES,
    OverloadPolicy,
    ServiceTimes,
    Verdict,
    sheds,
)
from perception.types import Frame, FrameResult, FrameStatus, SensorResult, SensorStatus

MS = 1_000_000
BUDGET = 200 * MS


def _measuring() -> OverloadPolicy:
    """A policy whose every measurement counts (no warm-up, one is enough): the rule itself, tested."""
    return OverloadPolicy(BUDGET, ServiceTimes(warmup=0, least=1))


def _warmed(policy: OverloadPolicy, service_ns: int) -> None:
    """``policy`` past its warm-up with ``service_ns`` measured as every frame's service time."""
    for _ in range(WARMUP_FRAMES + MEASURED_MIN):
        policy.observe(service_ns)


def test_service_estimate_is_the_90th_percentile_of_the_recent_frames() -> None:
    service = ServiceTimes(window=3, warmup=0, least=1)
    assert service.estimate() is None
    for ms in (100, 140, 90):
        service.observe(ms * MS)
    assert service.estimate() == 140 * MS  # of 3, the slowest
    service.observe(95 * MS)  # 100 leaves the window, 140 stays
    service.observe(96 * MS)  # 140 leaves
    assert service.estimate() == 96 * MS
    twenty = ServiceTimes(window=20, warmup=0, least=1)
    for ms in range(1, 21):
        twenty.observe(ms * MS)
    twenty.observe(500 * MS)  # one stall among 20 does not make the estimate
    assert twenty.estimate() == 19 * MS


def test_under_sustained_overload_the_freshest_waiting_frame_runs_and_the_older_are_superseded() -> None:
    policy = _measuring()
    policy.observe(115 * MS)
    # three waited (115, 65, 15 ms): the two older cannot run before the freshest within its budget
    verdict = policy.choose([0, 50 * MS, 100 * MS], now_ns=115 * MS)
    assert verdict.start == 2
    assert [i for i, _ in verdict.shed] == [0, 1]
    assert all(reason.startswith(f"{OVERLOAD} (superseded") for _, reason in verdict.shed)
    assert policy.superseded == 2 and policy.too_late == 0


def test_waiting_frames_that_can_all_finish_within_their_budgets_all_run_oldest_first() -> None:
    # a burst: three frames waited 30, 20, 10 ms; at 40 ms a frame, one after another they end by 150 ms
    policy = _measuring()
    policy.observe(40 * MS)
    assert policy.choose([0, 10 * MS, 20 * MS], now_ns=30 * MS) == Verdict(0, ())
    # at 80 ms a frame the third would end at 30 + 240 ms: the oldest is superseded, the other two run
    policy.observe(80 * MS)
    policy.observe(80 * MS)
    verdict = policy.choose([0, 10 * MS, 20 * MS], now_ns=30 * MS)
    assert verdict.start == 1 and [i for i, _ in verdict.shed] == [0]


def test_a_frame_that_cannot_finish_within_its_budget_is_shed() -> None:
    policy = _measuring()
    policy.observe(115 * MS)
    # waited 90 ms: 110 ms left < 115 ms measured
    verdict = policy.choose([0], now_ns=90 * MS)
    assert verdict.start is None
    ((index, reason),) = verdict.shed
    assert index == 0 and reason.startswith(OVERLOAD)
    assert "110 ms of its budget left" in reason and "115 ms" in reason
    # waited 80 ms: 120 ms left covers 115 ms
    assert policy.choose([0], now_ns=80 * MS).start == 0
    assert policy.too_late == 1


def test_a_frame_arriving_to_a_free_slot_runs_whatever_it_spent_before() -> None:
    # a live frame's clock starts at its trigger's arrival; assembly took 120 ms before it reached a free slot
    policy = _measuring()
    policy.observe(115 * MS)
    assert policy.choose([0], now_ns=120 * MS, arrived=True).start == 0
    assert policy.choose([0], now_ns=120 * MS).start is None  # the same frame after waiting for a slot


def test_no_frame_is_shed_before_anything_was_measured() -> None:
    policy = _measuring()
    assert policy.choose([0], now_ns=190 * MS).start == 0  # nothing measured yet


def test_when_frames_take_longer_than_the_budget_a_frame_that_waited_is_shed() -> None:
    policy = _measuring()
    policy.observe(250 * MS)  # slower than the budget: no frame may spend any of it waiting
    assert policy.choose([0], now_ns=10 * MS).start is None
    assert policy.choose([0], now_ns=10 * MS, arrived=True).start == 0  # one that waited for none runs


def test_a_frame_cut_short_by_its_deadline_counts_as_taking_its_whole_budget() -> None:
    # 'perception budget DRIVE --budget-ms 200 --rate 2' (busy host): frames 1-3 ran first come, first
    # served after waiting 116-178 ms, every sensor late, 97, 23 and 43 ms after they started; taken as
    # their times, frames seemed to take 97 ms (a whole frame took 176), and frame 6, which had waited 81 ms,
    # was started and was late in every sensor.
    policy = OverloadPolicy(BUDGET)
    policy.observe(176 * MS)  # the warm-up frame
    for ms in (97, 23, 43):
        policy.observe(ms * MS, cut=True)
    assert policy.service.estimate() == BUDGET
    verdict = policy.choose([0], now_ns=81 * MS)
    assert verdict.start is None and "frames take up to 200 ms" in verdict.shed[0][1]
    # a frame not cut short is taken as it is
    whole = OverloadPolicy(BUDGET, ServiceTimes(warmup=0, least=1))
    whole.observe(97 * MS)
    assert whole.service.estimate() == 97 * MS and whole.choose([0], now_ns=81 * MS).start == 0


@pytest.mark.anyio
async def test_the_pipeline_tells_the_policy_which_frames_ended_late() -> None:
    # every frame with a sensor late: the policy's estimate is the budget, not the frames' few ms
    async def process(f: Frame) -> FrameResult:
        late = SensorResult("lidar", SensorStatus.LATE, error="no answer by the join deadline")
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DEGRADED, {"lidar": late})

    async def source() -> AsyncIterator[Frame]:
        for i in range(WARMUP_FRAMES + MEASURED_MIN):
            yield frame(i)

    p = OrderedPipeline(process, _dropped, PipelineConfig(max_in_flight=1), deadline_ns=30_000 * MS)
    assert p.overload is not None
    with anyio.fail_after(10):
        out = await collect(p, source())
    assert len(out) == WARMUP_FRAMES + MEASURED_MIN
    assert p.overload.service.estimate() == 30_000 * MS


def test_only_sources_that_do_not_wait_shed() -> None:
    assert sheds(PipelineConfig())
    assert not sheds(PipelineConfig(overflow="block"))
    assert not sheds(PipelineConfig(overload="queue"))


# -- the pipeline under the policy ---------------------------------------------------------------------


def frame(i: int, created_ns: int = 0) -> Frame:
    return Frame(frame_id=i, t_ns=i * 50 * MS, samples={}, created_ns=created_ns)


def _dropped(f: Frame, reason: str) -> FrameResult:
    return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason)


@pytest.mark.anyio
async def test_frames_overflowing_the_queue_are_shed_with_a_predicted_record_and_the_rest_run() -> None:
    # Frame 0 is processed until frames 1-9 were offered (an event): 1-5 overflow the queue of 4 and are
    # shed before any of them is processed, each recorded by `shed`, in order; 6-9 can all finish within
    # their (generous) budgets one after another, and run.
    offered = anyio.Event()
    processed: list[int] = []
    shed_calls: list[int] = []

    async def process(f: Frame) -> FrameResult:
        processed.append(f.frame_id)
        await offered.wait()
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    async def shed(f: Frame, reason: str) -> FrameResult:
        shed_calls.append(f.frame_id)
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason, predicted=True)

    async def source() -> AsyncIterator[Frame]:
        for i in range(10):
            yield frame(i)
        offered.set()

    config = PipelineConfig(max_in_flight=1, queue_size=4)
    p = OrderedPipeline(process, _dropped, config, deadline_ns=30_000 * MS, shed=shed)
    with anyio.fail_after(10):
        out = await collect(p, source())
    assert [r.frame_id for r in out] == list(range(10))  # exactly one record per frame, in order
    assert processed == [0, 6, 7, 8, 9]
    assert shed_calls == [1, 2, 3, 4, 5]
    for r in out[1:6]:
        assert r.status is FrameStatus.DROPPED and r.predicted
        assert (r.reason or "").startswith(f"{OVERLOAD} (queue overflow")
    assert all(r.status is FrameStatus.OK for r in out[6:])
    assert p.shed_count == 5
    assert [r.admission_limit for r in out] == [1] * 10  # processed or shed: the limit it met (recorded)


@pytest.mark.anyio
async def test_under_overload_the_freshest_waiting_frame_runs_and_the_older_are_superseded() -> None:
    # Frames 1-3 wait behind frame 0 with clocks started 29.95, 29.9 and 0 s ago (budget 30 s, frames
    # measured at 1 s): only the freshest still fits; 1 and 2 are superseded, unprocessed.
    release0 = anyio.Event()
    processed: list[int] = []

    async def process(f: Frame) -> FrameResult:
        processed.append(f.frame_id)
        if f.frame_id == 0:
            await release0.wait()
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    async def source() -> AsyncIterator[Frame]:
        now = time.monotonic_ns()
        yield frame(0)
        yield frame(1, created_ns=now - 29_950 * MS)
        yield frame(2, created_ns=now - 29_900 * MS)
        yield frame(3)
        release0.set()

    p = OrderedPipeline(process, _dropped, PipelineConfig(max_in_flight=1), deadline_ns=30_000 * MS)
    assert p.overload is not None
    _warmed(p.overload, 1_000 * MS)
    with anyio.fail_after(10):
        out = await collect(p, source())
    assert processed == [0, 3]
    assert [r.status for r in out] == [FrameStatus.OK, FrameStatus.DROPPED, FrameStatus.DROPPED, FrameStatus.OK]
    assert all("superseded" in (r.reason or "") for r in out[1:3])


@pytest.mark.anyio
async def test_a_frame_whose_budget_ran_out_while_waiting_is_shed_before_it_is_processed() -> None:
    # Frame 0 runs; frame 1 waits for it, stamped 60 s earlier with a 30 s budget: when the slot frees,
    # what is left of its budget (negative) cannot cover the frame measured, so it is shed unprocessed.
    # Frame 2 arrives after that, to a free slot: it runs.
    release0 = anyio.Event()
    shed1 = anyio.Event()
    processed: list[int] = []

    async def process(f: Frame) -> FrameResult:
        processed.append(f.frame_id)
        if f.frame_id == 0:
            await release0.wait()
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    async def shed(f: Frame, reason: str) -> FrameResult:
        shed1.set()
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason, predicted=True)

    async def source() -> AsyncIterator[Frame]:
        yield frame(0)
        yield frame(1, created_ns=time.monotonic_ns() - 60_000 * MS)
        release0.set()
        await shed1.wait()
        yield frame(2)

    p = OrderedPipeline(process, _dropped, PipelineConfig(max_in_flight=1), deadline_ns=30_000 * MS, shed=shed)
    assert p.overload is not None
    _warmed(p.overload, 1 * MS)  # a measured service time (well within the budget)
    with anyio.fail_after(10):
        out = await collect(p, source())
    assert [r.frame_id for r in out] == [0, 1, 2]
    assert processed == [0, 2]
    assert out[1].status is FrameStatus.DROPPED and "of its budget left" in (out[1].reason or "")
    assert p.overload.too_late == 1


@pytest.mark.anyio
async def test_a_source_that_waits_is_never_shed() -> None:
    async def process(f: Frame) -> FrameResult:
        await anyio.lowlevel.checkpoint()
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    async def source() -> AsyncIterator[Frame]:
        for i in range(6):
            yield frame(i)

    config = PipelineConfig(max_in_flight=1, queue_size=0, overflow="block")
    p = OrderedPipeline(process, _dropped, config, deadline_ns=1 * MS)
    assert p.overload is None
    with anyio.fail_after(10):
        out = await collect(p, source())
    assert [r.status for r in out] == [FrameStatus.OK] * 6


@pytest.mark.anyio
async def test_a_frame_arriving_to_an_idle_pipeline_runs_however_long_ago_its_clock_started() -> None:
    # Each frame's clock started 60 s ago (a live frame's trigger arrival, then assembly) with a 30 s
    # budget, and frames take 1 ms: each arrives to a free slot, waits for none, and runs.
    async def process(f: Frame) -> FrameResult:
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    async def source() -> AsyncIterator[Frame]:
        for i in range(4):
            yield frame(i, created_ns=time.monotonic_ns() - 60_000 * MS)

    p = OrderedPipeline(process, _dropped, PipelineConfig(max_in_flight=1), deadline_ns=30_000 * MS)
    assert p.overload is not None
    _warmed(p.overload, 1 * MS)
    with anyio.fail_after(10):
        out = await collect(p, source())
    assert [r.status for r in out] == [FrameStatus.OK] * 4


def test_frames_in_flight_together_finish_sooner_one_after_another() -> None:
    # four frames waiting, 60 ms each, two at a time: the last ends 120 ms from now, within its budget
    policy = _measuring()
    policy.observe(60 * MS)
    started = [0, 10 * MS, 20 * MS, 30 * MS]
    assert policy.choose(started, now_ns=80 * MS, parallel=2).start == 0
    assert policy.choose(started, now_ns=80 * MS).start == 2  # one at a time: the two oldest cannot


def test_the_first_frames_run_first_come_first_served_whatever_they_took() -> None:
    # A stream's first frame took 3 s (connections, first calls into the kernels, a busy host starting
    # things); frames queued behind it are not shed on its account: nothing is estimated from one frame
    # that paid one-time costs, nor from fewer than MEASURED_MIN after it (a busy fresh-clone run shed
    # frame 2 of a drive with a 3 s budget on the cold frame 0's time alone).
    policy = OverloadPolicy(BUDGET)
    policy.observe(3_000 * MS)  # the warm-up frame
    waiting = [0, 50 * MS, 100 * MS]
    for _ in range(MEASURED_MIN - 1):
        assert policy.choose(waiting, now_ns=3_000 * MS) == Verdict(0, ())
        policy.observe(60 * MS)
    assert policy.choose(waiting, now_ns=3_000 * MS) == Verdict(0, ())
    policy.observe(60 * MS)  # MEASURED_MIN measured, after the warm-up: the policy sheds from now on
    verdict = policy.choose(waiting, now_ns=3_000 * MS)
    assert verdict.start is None and len(verdict.shed) == 3  # all waited past their budgets
    assert policy.service.estimate() == 60 * MS  # the warm-up frame's 3 s is in no estimate


@pytest.mark.anyio
async def test_a_frame_the_source_superseded_is_shed_in_its_turn_and_never_processed() -> None:
    # A live source with a backlog beyond what the pipeline holds builds only the newest frames and hands
    # the older ones in unbuilt (Superseded): each gets its shed record (the prediction) in its place, the
    # policy counts it superseded, and it never takes a slot -- even a free one.
    processed: list[int] = []
    shed_calls: list[tuple[int, str]] = []

    async def process(f: Frame) -> FrameResult:
        processed.append(f.frame_id)
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    async def shed(f: Frame, reason: str) -> FrameResult:
        shed_calls.append((f.frame_id, reason))
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason, predicted=True)

    why = f"{OVERLOAD} (superseded before assembly)"

    async def source() -> AsyncIterator[Frame | Superseded]:
        for i in range(6):
            yield Superseded(frame(i), why) if i in (0, 1, 3) else frame(i)

    p = OrderedPipeline(process, _dropped, PipelineConfig(max_in_flight=2), deadline_ns=30_000 * MS, shed=shed)
    with anyio.fail_after(10):
        out = await collect(p, source())
    assert [r.frame_id for r in out] == list(range(6))
    assert sorted(processed) == [2, 4, 5] and shed_calls == [(0, why), (1, why), (3, why)]
    assert [r.predicted for r in out] == [True, True, False, True, False, False]
    assert p.shed_count == 3 and p.overload is not None and p.overload.report()["superseded"] == 3
    # without the overload policy (a source that waits) it is recorded dropped, with its reason
    q = OrderedPipeline(process, _dropped, PipelineConfig(overflow="block"), deadline_ns=30_000 * MS, shed=shed)
    with anyio.fail_after(10):
        out = await collect(q, source())
    assert [(r.frame_id, r.reason) for r in out if r.status is FrameStatus.DROPPED] == [(0, why), (1, why), (3, why)]
    assert q.dropped_count == 3 and len(shed_calls) == 3


@pytest.mark.anyio
@pytest.mark.parametrize("overflow", ["drop-oldest", "drop-newest"])
async def test_a_frame_shed_while_older_frames_wait_takes_its_turn_after_theirs(
    overflow: Literal["drop-oldest", "drop-newest"],
) -> None:
    # Frames 1 and 2 wait for the one slot (frame 0 holds it) when the source hands frame 3 in unbuilt
    # (Superseded). Its prediction must come after frames 1 and 2 are fused (a prediction at frame 3's time
    # from the tracker as frame 0 left it would miss them): each frame takes its turn into fusion (the runtime's
    # HandInOrder ticket, taken as process or shed is called) in the order the source handed them in. Frame 5
    # overflows the queue of 3: drop-newest sheds it after the older waiting frames too; drop-oldest sheds
    # frame 1, the oldest, at once.
    turns: list[int] = []
    gate = anyio.Event()

    async def process(f: Frame) -> FrameResult:
        turns.append(f.frame_id)  # (the ticket: taken before the first await, as Runtime.process does)
        if f.frame_id == 0:
            await gate.wait()
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    async def shed(f: Frame, reason: str) -> FrameResult:
        turns.append(f.frame_id)
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason, predicted=True)

    why = f"{OVERLOAD} (superseded before assembly)"

    async def source() -> AsyncIterator[Frame | Superseded]:
        for i in range(6):
            yield Superseded(frame(i), why) if i == 3 else frame(i)
            await anyio.lowlevel.checkpoint()
        gate.set()

    config = PipelineConfig(max_in_flight=1, queue_size=3, overflow=overflow)
    p = OrderedPipeline(process, _dropped, config, deadline_ns=30_000 * MS, shed=shed)
    with anyio.fail_after(10):
        out = await collect(p, source())
    assert [r.frame_id for r in out] == list(range(6))
    assert turns == list(range(6))
    predicted = [1, 3] if overflow == "drop-oldest" else [3, 5]
    assert [r.frame_id for r in out if r.predicted] == predicted
    assert p.overload is not None and p.overload.queue_overflow == 1


@pytest.mark.anyio
async def test_a_frame_shed_behind_waiting_frames_still_gets_its_record_when_the_pipeline_stops() -> None:
    # Stopped while frames 1 and 2 wait behind a frame that never ends, and frame 3 (superseded) waits for
    # them to take their turns: every frame has its record, frame 3's saying it was shed and why it has no
    # prediction.
    never = anyio.Event()

    async def process(f: Frame) -> FrameResult:
        await never.wait()
        raise AssertionError("never reached")

    async def shed(f: Frame, reason: str) -> FrameResult:
        raise AssertionError(f"frame {f.frame_id} shed with a prediction after the stop")

    why = f"{OVERLOAD} (superseded before assembly)"
    config = PipelineConfig(max_in_flight=1, queue_size=4, drain_timeout_s=0.1)
    p = OrderedPipeline(process, _dropped, config, deadline_ns=30_000 * MS, shed=shed)

    async def source() -> AsyncIterator[Frame | Superseded]:
        for i in range(4):
            yield Superseded(frame(i), why) if i == 3 else frame(i)
            await anyio.lowlevel.checkpoint()
        p.stop()

    with anyio.fail_after(10):
        out = await collect(p, source())
    assert [r.frame_id for r in out] == [0, 1, 2, 3]
    assert all(r.status is FrameStatus.DROPPED and not r.predicted for r in out)
    assert [r.reason for r in out][1:] == ["shutdown: never started"] * 2 + [f"{why}; shutdown before its record"]
    assert p.shed_count == 1
