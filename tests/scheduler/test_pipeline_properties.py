"""The ordered pipeline with a circuit breaker, under random processing delays, failures, bugs, overflow
policies and a stop at a random moment (hypothesis). Delays are event-loop checkpoints, not sleeps:
every interleaving is reproducible and a failure shrinks to a small plan.

Properties: exactly one record per frame taken, in order, with no gap (all of them without a stop);
never more than ``max_in_flight`` frames processed at once; a half-open breaker lets exactly one probe
out at a time however many frames are in flight, and a dropped or failed frame never leaves it stuck.
The same with the pipeline's slots taken from a shared admission (``shared``), which every slot goes back
to however the run ends."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel
from hypothesis import given, settings
from hypothesis import strategies as st

from perception.config import CircuitConfig, PipelineConfig
from perception.scheduler import OrderedPipeline, RemoteAdmission, SharedAdmission, Superseded
from perception.scheduler._circuit import CircuitBreaker, CircuitState
from perception.types import Frame, FrameResult, FrameStatus

MS = 1_000_000

STEP = st.tuples(st.integers(0, 6), st.sampled_from(["ok", "ok", "ok", "fail", "fail", "bug"]))


@dataclass
class _Run:
    breaker: CircuitBreaker
    active: int = 0
    max_active: int = 0
    probe_out: bool = False
    probes: int = 0
    started: list[int] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)  # found inside process (an exception there is a record)


def _frame(i: int) -> Frame:
    return Frame(frame_id=i, t_ns=1_000 * MS + i * 100 * MS, samples={})


@settings(max_examples=200, deadline=None)
@given(
    plan=st.lists(STEP, min_size=1, max_size=30),
    k=st.integers(1, 3),
    queue=st.integers(0, 3),
    overflow=st.sampled_from(["block", "drop-oldest", "drop-newest"]),
    stop_at=st.none() | st.integers(0, 29),
    threshold=st.integers(1, 3),
    reset_frames=st.integers(1, 4),
    shared=st.booleans(),
)
def test_ordered_lossless_bounded_and_one_probe_at_a_time(
    plan: list[tuple[int, str]],
    k: int,
    queue: int,
    overflow: str,
    stop_at: int | None,
    threshold: int,
    reset_frames: int,
    shared: bool,
) -> None:
    circuit = CircuitConfig(failure_threshold=threshold, reset_after_ms=reset_frames * 100 - 1)
    run = _Run(CircuitBreaker("m", circuit))
    pipeline: OrderedPipeline

    async def process(f: Frame) -> FrameResult:
        run.active += 1
        run.max_active = max(run.max_active, run.active)
        run.started.append(f.frame_id)
        try:
            if stop_at is not None and f.frame_id >= stop_at:
                pipeline.stop()
            allowed = run.breaker.allow(f.t_ns)
            if allowed and run.breaker.state is CircuitState.HALF_OPEN:
                if run.probe_out:
                    run.violations.append(f"frame {f.frame_id}: a second probe while one is out")
                run.probe_out, run.probes = True, run.probes + 1
            if not allowed:
                await anyio.lowlevel.checkpoint()
                return FrameResult(f.frame_id, f.t_ns, FrameStatus.DEGRADED, {}, reason="circuit open")
            delay, outcome = plan[f.frame_id]
            for _ in range(delay):
                await anyio.lowlevel.checkpoint()
            run.probe_out = False
            if outcome == "ok":
                run.breaker.record_success()
                return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})
            run.breaker.record_failure(f.t_ns)
            if outcome == "bug":
                raise ValueError(f"bug in frame {f.frame_id}")
            return FrameResult(f.frame_id, f.t_ns, FrameStatus.DEGRADED, {}, reason="model failed")
        finally:
            run.active -= 1

    def dropped(f: Frame, reason: str) -> FrameResult:
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason)

    async def source() -> AsyncIterator[Frame]:
        for i in range(len(plan)):
            yield _frame(i)
            await anyio.lowlevel.checkpoint()

    config = PipelineConfig(max_in_flight=k, queue_size=queue, overflow=overflow)  # type: ignore[arg-type]

    admission = SharedAdmission()
    leftover: list[int] = []

    async def main() -> list[FrameResult]:
        nonlocal pipeline
        out: list[FrameResult] = []
        async with contextlib.AsyncExitStack() as stack:
            slots = None
            if shared:
                # another stream attached beside it: the admission outlives this one's detach
                admission.attach(k, 10**12, adaptive=False, owner="other")
                slots = await stack.enter_async_context(
                    RemoteAdmission(admission.in_process()).open(k, 10**12, adaptive=False)
                )
            pipeline = OrderedPipeline(process, dropped, config, admission=slots)
            send, recv = anyio.create_memory_object_stream[FrameResult](len(plan) + 1)
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(pipeline.run, source(), send)
                    async with recv:
                        out.extend([r async for r in recv])
            # every frame's slot went back; at most one granted that no frame was left to take (asked
            # for by a frame dropped or stopped meanwhile), which the stream's detach frees
            leftover.append(admission.in_flight)
        leftover.append(admission.in_flight)
        return out

    out = anyio.run(main)
    assert leftover[0] <= 1 and leftover[1] == 0, leftover
    assert not run.violations
    ids = [r.frame_id for r in out]
    assert ids == list(range(len(ids))), ids  # one record per frame taken, in order, no gap
    if stop_at is None or stop_at >= len(plan):
        assert len(out) == len(plan)
    assert run.max_active <= k
    assert sorted(set(run.started)) == sorted(run.started)  # no frame processed twice
    for r in out:
        if r.status is FrameStatus.DROPPED:
            assert r.reason and (overflow in r.reason or r.reason.startswith("shutdown") or "ValueError" in r.reason), r
            assert r.frame_id not in run.started or "ValueError" in (r.reason or ""), r
        else:
            assert r.frame_id in run.started
    if overflow == "block" and stop_at is None:
        assert all(r.status is not FrameStatus.DROPPED or "ValueError" in (r.reason or "") for r in out)
    assert not run.probe_out  # every probe came back


@settings(max_examples=200, deadline=None)
@given(
    plan=st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=1, max_size=30),
    k=st.integers(1, 3),
    queue=st.integers(0, 3),
    overflow=st.sampled_from(["drop-oldest", "drop-newest"]),
    stop_at=st.none() | st.integers(0, 29),
)
def test_under_the_overload_policy_every_frame_takes_its_fusion_turn_in_hand_in_order(
    plan: list[tuple[int, bool]], k: int, queue: int, overflow: str, stop_at: int | None
) -> None:
    # Frames processed (each after some checkpoints) and frames the source superseded (``True``: handed in
    # unbuilt), through a pipeline that sheds (overload policy; a budget nothing outlasts, so only the queue's
    # overflow and the source shed). Properties: one record per frame taken, in order, no gap; a superseded
    # frame is never processed; and the frames take their turns into fusion -- process or shed called, where
    # the runtime takes its HandInOrder ticket -- in the order they were handed in, whatever waits or overflows.
    turns: list[int] = []
    processed: list[int] = []
    pipeline: OrderedPipeline

    async def process(f: Frame) -> FrameResult:
        turns.append(f.frame_id)
        processed.append(f.frame_id)
        if stop_at is not None and f.frame_id >= stop_at:
            pipeline.stop()
        for _ in range(plan[f.frame_id][0]):
            await anyio.lowlevel.checkpoint()
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    async def shed(f: Frame, reason: str) -> FrameResult:
        turns.append(f.frame_id)
        await anyio.lowlevel.checkpoint()
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason, predicted=True)

    def dropped(f: Frame, reason: str) -> FrameResult:
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason)

    async def source() -> AsyncIterator[Frame | Superseded]:
        for i, (_, superseded) in enumerate(plan):
            yield Superseded(_frame(i), "overload (superseded)") if superseded else _frame(i)
            await anyio.lowlevel.checkpoint()

    config = PipelineConfig(max_in_flight=k, queue_size=queue, overflow=overflow)  # type: ignore[arg-type]

    async def main() -> list[FrameResult]:
        nonlocal pipeline
        pipeline = OrderedPipeline(process, dropped, config, deadline_ns=10**12, shed=shed)
        send, recv = anyio.create_memory_object_stream[FrameResult](len(plan) + 1)
        out: list[FrameResult] = []
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(pipeline.run, source(), send)
                async with recv:
                    out.extend([r async for r in recv])
        return out

    out = anyio.run(main)
    ids = [r.frame_id for r in out]
    assert ids == list(range(len(ids))), ids  # one record per frame taken, in order, no gap
    if stop_at is None:
        assert len(out) == len(plan)
    assert turns == sorted(turns) and len(set(turns)) == len(turns), turns  # hand-in order, each once
    assert not {i for i in processed if plan[i][1]}, processed  # a superseded frame is never processed
    for r in out:
        if r.frame_id in processed:
            assert r.status is FrameStatus.OK or (r.reason or "").startswith("shutdown"), r
        else:
            assert r.status is FrameStatus.DROPPED, r
            assert r.predicted == (r.frame_id in turns), r  # shed in its turn, or at a stop without one
