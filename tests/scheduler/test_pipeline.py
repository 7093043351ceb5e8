"""Ordering, K-in-flight and overflow policies of the pipeline (pure scheduling logic, no server)."""

from __future__ import annotations

import logging
import time
import types
from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import pytest
from pipeline_helpers import collect

from perception.config import PipelineConfig
from perception.scheduler import OrderedPipeline, _pipeline
from perception.scheduler._admission import Admission
from perception.types import Frame, FrameResult, FrameStatus, SensorResult, SensorStatus

pytestmark = pytest.mark.anyio

MS = 1_000_000


def frame(i: int) -> Frame:
    return Frame(frame_id=i, t_ns=i * 100_000_000, samples={})


def make(delays: dict[int, float], in_flight: list[int]):  # type: ignore[no-untyped-def]
    active = 0

    async def process(f: Frame) -> FrameResult:
        nonlocal active
        active += 1
        in_flight.append(active)
        await anyio.sleep(delays.get(f.frame_id, 0.01))
        active -= 1
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    def dropped(f: Frame, reason: str) -> FrameResult:
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason)

    return process, dropped


async def paced(n: int, period: float) -> AsyncIterator[Frame]:
    for i in range(n):
        yield frame(i)
        await anyio.sleep(period)


async def test_in_order_with_k_in_flight() -> None:
    # Ordered by events, not by sleeps (frame 0's 50 ms sleep once stood for "still running when frame 2
    # starts", which a loaded host need not keep): no frame ends until the source has offered all six (so
    # every frame the pipeline starts meanwhile is in flight together: 3, not 2 or 4), then frames 0-2 end
    # in the order 1, 2, 0.
    in_flight: list[int] = []
    active = 0
    offered = anyio.Event()
    ended = {i: anyio.Event() for i in range(6)}
    ends_after = {0: 2, 2: 1}  # frame 0 ends once frame 2 has, frame 2 once frame 1 has

    async def source() -> AsyncIterator[Frame]:
        for i in range(6):
            yield frame(i)
            await anyio.lowlevel.checkpoint()
        offered.set()

    async def process(f: Frame) -> FrameResult:
        nonlocal active
        active += 1
        in_flight.append(active)
        await offered.wait()
        if f.frame_id in ends_after:
            await ended[ends_after[f.frame_id]].wait()
        active -= 1
        ended[f.frame_id].set()
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    p = OrderedPipeline(process, _dropped, PipelineConfig(max_in_flight=3, queue_size=10, overflow="block"))
    with anyio.fail_after(5):  # watchdog
        out = await collect(p, source())
    assert [r.frame_id for r in out] == list(range(6))
    assert all(r.status is FrameStatus.OK for r in out)
    assert max(in_flight) == 3


async def test_block_never_drops() -> None:
    in_flight: list[int] = []
    process, dropped = make({}, in_flight)
    p = OrderedPipeline(process, dropped, PipelineConfig(max_in_flight=1, queue_size=0, overflow="block"))
    with anyio.fail_after(5):
        out = await collect(p, paced(20, 0))
    assert [r.status for r in out] == [FrameStatus.OK] * 20


async def test_block_starts_the_budget_clock_when_a_slot_is_free() -> None:
    """Under ``block`` a frame held back by a full pipeline is not charged the wait to its deadline.

    Checked as an order of events, not a speed: each frame's budget clock (``created_ns``) starts after
    the previous frame's processing ended (how small the gap is, is scheduling noise: see bench/).
    """
    stamped: list[int] = []
    ended: list[int] = []

    async def process(f: Frame) -> FrameResult:
        stamped.append(f.created_ns)
        await anyio.sleep(0.05)
        ended.append(time.monotonic_ns())
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    def dropped(f: Frame, reason: str) -> FrameResult:
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason)

    p = OrderedPipeline(process, dropped, PipelineConfig(max_in_flight=1, queue_size=0, overflow="block"))
    with anyio.fail_after(5):
        out = await collect(p, paced(4, 0))
    assert [r.status for r in out] == [FrameStatus.OK] * 4
    # Each frame waited ~50 ms for the previous one: its clock started only once that one was done.
    assert len(stamped) == len(ended) == 4 and all(stamped)
    for i in range(1, 4):
        assert stamped[i] >= ended[i - 1], f"frame {i} was stamped before frame {i - 1} ended"


def _dropped(f: Frame, reason: str) -> FrameResult:
    return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason)


@pytest.mark.parametrize("policy", ["drop-oldest", "drop-newest"])
async def test_overflow_emits_dropped_records_in_order(policy: str) -> None:
    # Frame 0 is processed until every frame has been offered (an event, not a race of sleeps): with one
    # slot and a queue of one, frames 1-9 overflow it, whatever the machine's speed.
    offered = anyio.Event()

    async def process(f: Frame) -> FrameResult:
        await offered.wait()
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    async def source() -> AsyncIterator[Frame]:
        for i in range(10):
            yield frame(i)
        offered.set()

    p = OrderedPipeline(process, _dropped, PipelineConfig(max_in_flight=1, queue_size=1, overflow=policy))  # type: ignore[arg-type]
    with anyio.fail_after(5):
        out = await collect(p, source())
    assert [r.frame_id for r in out] == list(range(10))  # exactly one record per frame, in order
    drops = [r for r in out if r.status is FrameStatus.DROPPED]
    assert drops and all(policy in (r.reason or "") for r in drops)
    assert out[0].status is FrameStatus.OK
    if policy == "drop-oldest":
        assert out[-1].status is FrameStatus.OK  # the freshest frame survives
        assert [r.frame_id for r in drops] == list(range(1, 9))
    else:
        assert [r.frame_id for r in drops] == list(range(2, 10))  # the queued frame 1 survives
    assert p.dropped_count == len(drops)


async def test_stop_drains_and_records_every_frame() -> None:
    # stop() comes once three frames are done (an event, not a sleep), with many frames still to come.
    three_done = anyio.Event()
    done = 0

    async def process(f: Frame) -> FrameResult:
        nonlocal done
        await anyio.sleep(0.02)
        done += 1
        if done == 3:
            three_done.set()
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    p = OrderedPipeline(process, _dropped, PipelineConfig(max_in_flight=2, queue_size=4, overflow="block"))

    async def stopper() -> None:
        await three_done.wait()
        p.stop()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(stopper)
            out = await collect(p, paced(100, 0.001))
    ids = [r.frame_id for r in out]
    assert ids == list(range(len(ids)))
    assert sum(r.status is FrameStatus.OK for r in out) >= 3
    assert len(out) < 100  # stopped mid-stream: the rest of the source was never taken
    assert all(r.status is FrameStatus.OK or (r.reason or "").startswith("shutdown") for r in out)


async def test_processing_bug_is_recorded_not_lost() -> None:
    async def process(f: Frame) -> FrameResult:
        if f.frame_id == 1:
            raise ValueError("boom")
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    def dropped(f: Frame, reason: str) -> FrameResult:
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason)

    p = OrderedPipeline(process, dropped, PipelineConfig(max_in_flight=2))
    with anyio.fail_after(5):
        out = await collect(p, paced(3, 0))
    assert [r.status for r in out] == [FrameStatus.OK, FrameStatus.DROPPED, FrameStatus.OK]
    assert "ValueError: boom" in (out[1].reason or "")


async def test_an_error_of_the_source_lets_the_frames_taken_finish_then_is_raised_as_it_is() -> None:
    # Before: the source's error, raised in the pipeline's task group, cancelled the frames taken (in flight:
    # 'shutdown: cancelled while in flight', queued: 'shutdown: never started') and came out in an
    # ExceptionGroup. Frames 0 and 1 are in flight and 2 and 3 queued when it raises; they end after it.
    two_started, failed = anyio.Event(), anyio.Event()
    started = 0

    async def process(f: Frame) -> FrameResult:
        nonlocal started
        started += 1
        if started == 2:
            two_started.set()
        await failed.wait()
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    async def source() -> AsyncIterator[Frame]:
        for i in range(4):
            yield frame(i)
        await two_started.wait()
        failed.set()
        raise ValueError("source broke")

    cfg = PipelineConfig(max_in_flight=2, admission="fixed", queue_size=4, overflow="drop-oldest", overload="queue")
    p = OrderedPipeline(process, _dropped, cfg, deadline_ns=600_000_000_000)
    send, recv = anyio.create_memory_object_stream[FrameResult](10)
    with anyio.fail_after(5), pytest.raises(ValueError, match="source broke"):
        await p.run(source(), send)
    with recv:
        out = list(recv.receive_nowait() for _ in range(4))  # sent before the error was raised
    assert [(r.frame_id, r.status) for r in out] == [(i, FrameStatus.OK) for i in range(4)]


class _MeasuredAdmission(Admission):
    """A fixed admission that records the measure of each frame given back."""

    def __init__(self, max_in_flight: int) -> None:
        super().__init__(max_in_flight, 0, adaptive=False)
        self.measures: list[int | None] = []

    def release(self, service_ns: int | None, *, late: bool = False) -> None:
        self.measures.append(service_ns)
        super().release(service_ns, late=late)


async def test_the_admission_measures_a_frame_from_its_admission_not_its_intake(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before: the pipeline gave the admission intake to result, the wait for a slot included: frames queued
    # under overload inflated the measure, and the adaptive limit fell exactly when more frames in flight
    # would help. The pipeline's clock is the test's: frame 1 waits 100 ms for frame 0's slot, then takes 10.
    now = [1_000 * MS]
    monkeypatch.setattr(_pipeline, "time", types.SimpleNamespace(monotonic_ns=lambda: now[0]))
    started0, answer0 = anyio.Event(), anyio.Event()

    async def process(f: Frame) -> FrameResult:
        if f.frame_id == 0:
            started0.set()
            await answer0.wait()
        else:
            now[0] += 10 * MS
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    async def answer() -> None:
        await started0.wait()  # frame 1 is queued by then (the source does not wait)
        now[0] += 100 * MS
        answer0.set()

    admission = _MeasuredAdmission(1)
    config = PipelineConfig(max_in_flight=1, admission="fixed", queue_size=4, overflow="drop-oldest", overload="queue")
    p = OrderedPipeline(process, _dropped, config, deadline_ns=60_000 * MS, admission=admission)
    with anyio.fail_after(5):  # watchdog
        async with anyio.create_task_group() as tg:
            tg.start_soon(answer)
            out = await collect(p, _frames(2))
    assert [(r.frame_id, r.status) for r in out] == [(0, FrameStatus.OK), (1, FrameStatus.OK)]
    assert admission.measures == [100 * MS, 10 * MS]  # frame 1's 100 ms in the queue is not its service


async def test_a_frame_with_a_late_sensor_is_reported_late_to_the_admission() -> None:
    # A sensor late at the join halves the adaptive admission's limit even when the frame kept its
    # deadline (the join cut it off): the pipeline must say so when it gives the slot back.
    late = {1, 3, 4}

    async def process(f: Frame) -> FrameResult:
        status = SensorStatus.LATE if f.frame_id in late else SensorStatus.OK
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DEGRADED, {"lidar": SensorResult("lidar", status)})

    def dropped(f: Frame, reason: str) -> FrameResult:
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason)

    config = PipelineConfig(max_in_flight=2, queue_size=10, overflow="block", admission="adaptive")
    p = OrderedPipeline(process, dropped, config, deadline_ns=60_000_000_000)  # no frame nears its deadline
    with anyio.fail_after(10):  # watchdog
        out = await collect(p, _frames(8))
    assert [r.frame_id for r in out] == list(range(8)) and not any(r.deadline_missed for r in out)
    report = p.admission.report()
    assert report["mode"] == "adaptive" and report["overloaded_frames"] == len(late), report


async def _frames(n: int) -> AsyncIterator[Frame]:
    for i in range(n):
        yield frame(i)


async def test_a_stopped_pipeline_still_gives_a_slow_reader_every_record() -> None:
    # A stop bounds the wait for a consumer that takes nothing (issue 45), not for one that reads: with
    # no buffer, each of the 10 records waits for the reader, which takes one every 0.3 s -- 3 s in all,
    # beyond the 2 s drain timeout -- and gets every one of them.
    go = anyio.Event()

    async def process(f: Frame) -> FrameResult:
        await go.wait()
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    def dropped(f: Frame, reason: str) -> FrameResult:
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason)

    async def source() -> AsyncIterator[Frame]:
        async for f in _frames(10):
            yield f
        await anyio.sleep_forever()  # a live source: the stop ends it

    config = PipelineConfig(max_in_flight=10, queue_size=0, overflow="block", admission="fixed", drain_timeout_s=2)
    p = OrderedPipeline(process, dropped, config)
    send, recv = anyio.create_memory_object_stream[FrameResult](0)
    got: list[FrameResult] = []
    with anyio.fail_after(60):  # watchdog
        async with anyio.create_task_group() as tg:
            tg.start_soon(p.run, source(), send)
            await anyio.wait_all_tasks_blocked()
            assert p.in_flight == 10
            p.stop()
            go.set()
            async with recv:
                async for r in recv:
                    got.append(r)
                    await anyio.sleep(0.3)
    assert [r.frame_id for r in got] == list(range(10)) and all(r.status is FrameStatus.OK for r in got)
    assert p.undelivered == 0


@pytest.mark.parametrize("overflow", ["drop-oldest", "drop-newest"])
async def test_a_source_that_does_not_wait_is_not_held_back_by_a_slow_consumer(overflow: str) -> None:
    """A consumer that takes no record for a while (a sink writing, the server split waiting for a
    trace) does not hold the intake: every frame of the source is taken meanwhile (they used to wait
    behind the consumer and arrive together, a burst the queue overflowed), and then every record
    reaches the consumer, in order. Ordered by events, not by time."""
    n = 20
    taken: list[int] = []
    all_taken = anyio.Event()

    async def source() -> AsyncIterator[Frame]:
        for i in range(n):
            taken.append(i)
            yield frame(i)
            await anyio.lowlevel.checkpoint()
        all_taken.set()

    async def process(f: Frame) -> FrameResult:
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    def dropped(f: Frame, reason: str) -> FrameResult:
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason)

    p = OrderedPipeline(process, dropped, PipelineConfig(max_in_flight=1, queue_size=1, overflow=overflow))  # type: ignore[arg-type]
    send, recv = anyio.create_memory_object_stream[FrameResult](1)  # room for one record
    out: list[FrameResult] = []
    with anyio.fail_after(10):  # watchdog: the intake used to wait for the consumer, which waits for it
        async with anyio.create_task_group() as tg:
            tg.start_soon(p.run, source(), send)
            await all_taken.wait()  # the consumer reads nothing until the source is exhausted
            async with recv:
                out = [r async for r in recv]
    assert taken == list(range(n))
    assert [r.frame_id for r in out] == list(range(n))  # one record per frame, in order
    assert p.intake_held == 0


class _SteppedAdmission:
    """Slots under a limit that rises by one every third frame that ends (up to 3): an admission whose
    limit changes while frames run."""

    def __init__(self) -> None:
        self.limit = 1
        self.in_use = 0
        self.ended = 0

    def try_acquire(self) -> bool:
        if self.in_use < self.limit:
            self.in_use += 1
            return True
        return False

    def release(self, service_ns: int | None, *, late: bool = False) -> None:
        self.in_use -= 1
        self.ended += 1
        self.limit = min(3, 1 + self.ended // 3)

    async def granted(self) -> None:
        await anyio.sleep_forever()

    def report(self) -> dict[str, object]:
        return {"limit": self.limit}


async def test_each_result_carries_the_admission_limit_in_force_when_its_frame_started() -> None:
    admission = _SteppedAdmission()
    at_start: dict[int, int] = {}

    async def process(f: Frame) -> FrameResult:
        at_start[f.frame_id] = admission.limit
        await anyio.lowlevel.checkpoint()
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    def dropped(f: Frame, reason: str) -> FrameResult:
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason)

    config = PipelineConfig(max_in_flight=3, queue_size=0, overflow="block")
    p = OrderedPipeline(process, dropped, config, admission=admission)
    with anyio.fail_after(10):  # watchdog
        out = await collect(p, _frames(12))
    assert [r.frame_id for r in out] == list(range(12))
    assert [r.admission_limit for r in out] == [at_start[i] for i in range(12)]
    assert {r.admission_limit for r in out} == {1, 2, 3}  # it changed while the frames ran, and each says so


@pytest.mark.anyio
async def test_a_frame_left_without_a_record_is_logged_as_a_bug(caplog: pytest.LogCaptureFixture) -> None:
    # Every frame taken has its record (the property tests); should a bug ever leave one without, the records
    # after it cannot go out in order: the end of the stream says so, loudly, instead of delivering fewer.
    class Lossy(OrderedPipeline):
        def _abandon(self) -> None:
            super()._abandon()
            self._done.pop(1, None)  # the bug: frame 1's record lost

    never = anyio.Event()

    async def process(f: Frame) -> FrameResult:
        if f.frame_id == 0:
            return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})
        await never.wait()
        raise AssertionError("never reached")

    p = Lossy(process, _dropped, PipelineConfig(max_in_flight=1, drain_timeout_s=0.1))

    async def source() -> AsyncIterator[Frame]:
        for i in range(3):
            yield frame(i)
            await anyio.lowlevel.checkpoint()
        p.stop()

    with caplog.at_level(logging.ERROR, logger="perception.scheduler._pipeline"), anyio.fail_after(10):
        out = await collect(p, source())
    assert [r.frame_id for r in out] == [0]
    assert "frame 1 of this stream has no record (a bug): it and the 1 after it were not delivered" in caplog.text
