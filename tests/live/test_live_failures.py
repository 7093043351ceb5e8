"""Every frame a LiveRuntime makes reaches ``on_result`` (and ``results()`` and its future), also when it
is lost in assembly, taken down with a failing stream, or abandoned at close after the drain timeout: as
the record a stream makes of a failed frame (status dropped, the reason by ``failure_reason``)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

import pytest
from test_live_lifetime import _check_clean, _config, _outcomes, _own_shm, _push_all, _threads

from perception.errors import RuntimeClosedError, SampleDroppedError
from perception.live import LiveRuntime
from perception.scheduler import CANCELLED_IN_FLIGHT, Lifetime, failure_reason
from perception.server import EmbeddedTriton
from perception.types import Frame, FrameResult, FrameStatus, SensorResult

MS = 1_000_000


def _ids(results: list[FrameResult]) -> list[int]:
    return [r.frame_id for r in results]


def test_a_frame_lost_in_assembly_reaches_on_result_as_dropped_and_costs_no_other(triton: EmbeddedTriton) -> None:
    # Before: the frame whose making raised (and any made with it in that call) reached nobody but its
    # future: on_result and results() skipped its id, status()["frames"] never counted it.
    cfg, rig, samples = _config(triton.grpc_url)
    got: list[FrameResult] = []
    live = LiveRuntime(cfg, rig, on_result=got.append)
    accumulator = live._assembler.accumulator
    apply = accumulator.apply
    calls = [0]
    broken = RuntimeError("the motion model broke")

    def apply_breaking_the_fifth(frame: Frame, buffers: Any) -> Frame:
        calls[0] += 1
        if calls[0] == 5:
            raise broken
        return apply(frame, buffers)

    accumulator.apply = apply_breaking_the_fifth  # type: ignore[method-assign]
    with live:
        futures = _push_all(live, samples, {})
        assert _outcomes(futures)[0] == len(futures)  # the lost frame's future has its record too
    status = live.status()
    made = status["intake"]["frames"]
    assert made >= 10 and _ids(got) == list(range(made)) and status["frames"] == made
    lost = [r for r in got if r.status is FrameStatus.DROPPED]
    assert [(r.frame_id, r.reason) for r in lost] == [(4, failure_reason(broken))]
    assert status["failed"] == {"assembly": 1}


def test_frames_abandoned_at_close_reach_on_result_as_cancelled(
    triton: EmbeddedTriton, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: a frame still in flight past the drain timeout (and those queued behind it) reached no
    # on_result and no results(); only its future said RuntimeClosedError.
    cfg, rig, samples = _config(triton.grpc_url, drain_s=0.5)
    # the frames behind the stuck one wait for it (none shed under overload: no wall-clock judgement)
    cfg = dataclasses.replace(cfg, pipeline=dataclasses.replace(cfg.pipeline, overload="queue"))
    release = threading.Event()

    class _ReleaseOnAbandon(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "abandoned" in record.getMessage():
                release.set()  # the runtime gave up on the frames: the stuck fusion may return now

    def stuck_fusion(frame: Frame, results: Mapping[str, SensorResult]) -> tuple[tuple[()], dict[str, int]]:
        if frame.frame_id >= 3:
            release.wait(60)  # frame 3 never finishes while the runtime waits for it
        return (), {}

    got: list[FrameResult] = []
    handler = _ReleaseOnAbandon()
    logging.getLogger("perception.live").addHandler(handler)
    try:
        live = LiveRuntime(cfg, rig, on_result=got.append, fusion=stuck_fusion)
        with caplog.at_level(logging.WARNING), live:
            futures = _push_all(live, samples[: len(samples) // 2], {})
    finally:
        logging.getLogger("perception.live").removeHandler(handler)
        release.set()
    status = live.status()
    made = status["intake"]["frames"]
    assert made >= 6 and _ids(got) == list(range(made)), (made, _ids(got))
    assert all(r.status is not FrameStatus.DROPPED for r in got[:3])
    assert [r.reason for r in got[3:]] == [CANCELLED_IN_FLIGHT] * (made - 3)
    for future in futures:  # each future has the very record on_result got
        record = future.result(timeout=0)  # type: ignore[attr-defined]
        assert got[record.frame_id] is record
    assert status["frames"] == made and status["drop_reasons"] == {CANCELLED_IN_FLIGHT: made - 3}


def test_frames_taken_down_by_a_failing_stream_have_the_one_failure_reason(triton: EmbeddedTriton) -> None:
    # Before: LiveRuntime wrote its own reason, "internal error (RuntimeError('...'))", not failure_reason's.
    cfg, rig, samples = _config(triton.grpc_url)
    got: list[FrameResult] = []
    live = LiveRuntime(cfg, rig, on_result=got.append)
    run = live._runtime.run
    failure = RuntimeError("the stream broke")
    broke = [False]

    async def run_failing_once(frames: Any, **kwargs: Any) -> AsyncIterator[FrameResult]:
        if not broke[0]:
            broke[0] = True
            async for _ in frames:  # takes a frame and fails with it
                raise failure
        async for result in run(frames, **kwargs):  # (checked=: the intake checked the frames' samples)
            yield result

    live._runtime.run = run_failing_once  # type: ignore[method-assign]
    with live:
        futures = _push_all(live, samples[: len(samples) // 2], {})
        _outcomes(futures)
    status = live.status()
    assert got[0].status is FrameStatus.DROPPED and got[0].reason == failure_reason(failure)
    assert _ids(got) == list(range(status["intake"]["frames"])) and status["failed"] == {"processing": 1}


def test_a_future_done_callback_that_closes_the_runtime_closes_it(triton: EmbeddedTriton) -> None:
    # Before: futures are answered on the event-loop thread, and close() there could not join that thread:
    # the host logged "live-loop failed while running", marked itself closed and released nothing -- the
    # runtime went on taking pushes on a loop nobody would stop (threads and shared memory leaked), and
    # every later close() returned at once.
    cfg, rig, samples = _config(triton.grpc_url)
    before = _threads(), _own_shm()
    live = LiveRuntime(cfg, rig)
    closing = threading.Event()

    def close_on_third(future: object) -> None:
        live.close()  # on the event-loop thread
        closing.set()

    with live:
        stall = threading.Event()
        assert live._loop is not None
        live._loop.call_soon_threadsafe(stall.wait, 60)  # the loop answers no future before the hook is on
        try:
            futures = _push_all(live, samples[:40], {})
            assert len(futures) >= 3
            futures[2].add_done_callback(close_on_third)  # type: ignore[attr-defined]
        finally:
            stall.set()
        assert closing.wait(60)
    with pytest.raises(RuntimeClosedError):
        live.push(samples[0])
    _check_clean(before, live)  # released: the runtime, its threads and shared memory


def test_a_done_callback_of_a_future_dropped_by_a_full_intake_may_push(triton: EmbeddedTriton) -> None:
    # Before: the future of a trigger sample pushed out of the full intake queue was answered under the
    # intake lock, on the pushing thread: its done callback pushing a sample deadlocked that thread (and
    # then the event loop, and close).
    cfg, rig, samples = _config(triton.grpc_url, drain_s=1.0)
    cfg = dataclasses.replace(cfg, live=dataclasses.replace(cfg.live, intake_queue=4))
    live = LiveRuntime(cfg, rig)
    lidar = [s for s in samples if s.sensor == "lidar_top"][:8]
    camera = next(s for s in samples if s.sensor != "lidar_top")
    pushed = threading.Event()
    dropped: list[BaseException | None] = []

    def push_a_camera_sample(future: concurrent.futures.Future[FrameResult]) -> None:
        dropped.append(future.exception())
        live.push(dataclasses.replace(camera, t_ns=time.monotonic_ns()))

    def pusher() -> None:
        now = time.monotonic_ns()
        for i, s in enumerate(lidar):
            future = live.push(dataclasses.replace(s, t_ns=now - (len(lidar) - i) * 100 * MS))
            assert future is not None
            future.add_done_callback(push_a_camera_sample)
        pushed.set()

    live.__enter__()
    stall = threading.Event()
    assert live._loop is not None
    live._loop.call_soon_threadsafe(stall.wait, 60)  # the loop takes nothing: the intake fills
    threading.Thread(target=pusher, daemon=True).start()
    finished = pushed.wait(30)
    stall.set()
    assert finished, "the pushing thread deadlocked"  # (the runtime is left open: its lock is held)
    live.close()
    assert len(dropped) >= 4 and all(isinstance(e, SampleDroppedError) for e in dropped[:4])
    assert live.status()["intake"]["intake_overflow"] >= 4


def test_close_stops_intake_at_once_while_the_loop_is_busy(triton: EmbeddedTriton) -> None:
    # Before: intake stopped only once the event loop got to the close; hosts pushing faster than the loop
    # took kept pushing meanwhile (a 4-thread flood: the pushes stopped 153 s after close() was called).
    cfg, rig, samples = _config(triton.grpc_url)
    live = LiveRuntime(cfg, rig)
    live.__enter__()
    stall = threading.Event()
    assert live._loop is not None
    live._loop.call_soon_threadsafe(stall.wait, 60)  # the loop is busy until the test has seen the refusal
    closer = threading.Thread(target=live.close)
    try:
        closer.start()
        refused = False
        deadline = time.monotonic() + 30  # a safety net only: the close's first step refuses pushes
        while not refused and time.monotonic() < deadline:
            try:
                live.push(dataclasses.replace(samples[1], t_ns=time.monotonic_ns()))
            except RuntimeClosedError:
                refused = True
            time.sleep(0.001)
    finally:
        stall.set()
        closer.join(60)
    assert refused and not closer.is_alive()


def test_pushes_without_pause_do_not_hold_the_event_loop(triton: EmbeddedTriton) -> None:
    # Before: while the intake was never empty when the assembler looked again, it took the next batch
    # without yielding: the loop's other tasks (results, a close) waited as long as the host pushed.
    cfg, rig, samples = _config(triton.grpc_url)
    live = LiveRuntime(cfg, rig)
    radar = next(s for s in samples if s.sensor == "radar_front")
    flooding = threading.Event()
    add = live._assembler.add

    adds = [0]
    after = [0]  # batches the assembler took after the other task was scheduled, before it ran
    spinning = threading.Event()
    scheduled = threading.Event()

    def add_while_the_host_pushes_another(
        sample: Any, arrival_ns: int, token: Any = None, *, host_ns: int | None = None
    ) -> str | None:
        if flooding.is_set():  # the host's next push lands before the assembler looks again
            live.push(dataclasses.replace(radar, t_ns=time.monotonic_ns()))
            adds[0] += 1
            if adds[0] == 3:
                spinning.set()
            if scheduled.is_set() and not other_task_ran.is_set():
                after[0] += 1
        return add(sample, arrival_ns, token, host_ns=host_ns)

    live._assembler.add = add_while_the_host_pushes_another  # type: ignore[method-assign]
    other_task_ran = threading.Event()
    with live:
        assert live._loop is not None
        flooding.set()
        try:
            lidar = next(s for s in samples if s.sensor == "lidar_top")
            live.push(dataclasses.replace(lidar, t_ns=time.monotonic_ns()))  # a trigger's push wakes the loop
            assert spinning.wait(30)  # the assembler is taking batch after batch
            live._loop.call_soon_threadsafe(other_task_ran.set)
            scheduled.set()
            ran = other_task_ran.wait(30)  # a safety net only: it runs at the assembler's next batch
        finally:
            flooding.clear()
    assert ran and after[0] <= 10, after  # before: tens of thousands of batches (one push each) first


def test_a_close_under_a_flood_of_trigger_samples_makes_at_most_what_the_pipeline_holds(
    triton: EmbeddedTriton,
) -> None:
    # Before: close() made every frame pending in the assembler, on the event loop, before it drained: 838
    # frames at ~58 ms of assembly each, a close of ~74 s. Now the newest max_in_flight + queue_size are made
    # (the freshest run, as shedding has it); the older ones are recorded dropped, unassembled, each pushed
    # trigger still answered (its frame's record), counted (closed_unassembled).
    cfg, rig, samples = _config(triton.grpc_url, drain_s=1.0)
    limit = cfg.pipeline.max_in_flight + cfg.pipeline.queue_size
    got: list[FrameResult] = []
    live = LiveRuntime(cfg, rig, on_result=got.append)
    made = [0]
    apply = live._assembler.accumulator.apply

    def counted_apply(frame: Frame, buffers: Any) -> Frame:
        made[0] += 1  # once per frame made
        return apply(frame, buffers)

    live._assembler.accumulator.apply = counted_apply  # type: ignore[method-assign]
    lidar = next(s for s in samples if s.sensor == "lidar_top")
    live.__enter__()
    stall = threading.Event()
    assert live._loop is not None
    live._loop.call_soon_threadsafe(stall.wait, 60)  # the loop takes nothing: the flood waits in the intake
    closer = threading.Thread(target=live.close)
    try:
        futures = [live.push(dataclasses.replace(lidar, t_ns=time.monotonic_ns())) for _ in range(100)]
        closer.start()
        deadline = time.monotonic() + 30  # a safety net only: close's first step stops intake
        while live._state is Lifetime.OPENED and time.monotonic() < deadline:
            time.sleep(0.001)
    finally:
        stall.set()
        closer.join(60)
    assert not closer.is_alive()
    with pytest.raises(RuntimeClosedError):
        live.push(lidar)  # refused after close, as before
    status = live.status()
    frames = status["intake"]["frames"]
    assert made[0] <= limit < frames, (made, limit, frames)  # before: all 100 made at close
    unassembled = status["intake"]["closed_unassembled"]
    assert unassembled == frames - made[0], (made, frames, unassembled)
    # every frame made or not reached on_result once, in order, and its trigger's future has its record
    assert _ids(got) == list(range(frames)) and status["frames"] == frames
    reasons = Counter(r.reason for r in got[:unassembled])
    assert len(reasons) == 1 and next(iter(reasons)).startswith("shutdown: closed before the frame was assembled")
    answered = refused = 0
    for future in futures:
        assert future is not None
        try:
            record = future.result(timeout=0)
            assert got[record.frame_id] is record
            answered += 1
        except SampleDroppedError:
            refused += 1
    assert answered == frames and answered + refused == len(futures) == status["intake"]["frames_by_trigger"] + refused


@dataclasses.dataclass
class _Flood:
    """A flood's outcome: the records, the frames made (their times), the frames each call of due() made, the
    runtime's status and each pushed trigger's future."""

    got: list[FrameResult]
    made: list[int]
    per_call: list[int]
    status: dict[str, Any]
    futures: list[concurrent.futures.Future[FrameResult] | None]


def _flood(cfg: Any, rig: Any, samples: list[Any], flood: int = 100) -> _Flood:
    """``flood`` lidar sweeps pushed while the event loop is stalled, their stamps past their horizon (every
    frame due at once, within the stamp skew); the frames made and due()'s calls counted."""
    cfg = dataclasses.replace(cfg, live=dataclasses.replace(cfg.live, transit_ms=20.0))
    got: list[FrameResult] = []
    live = LiveRuntime(cfg, rig, on_result=got.append)
    asm = live._assembler
    made: list[int] = []  # the frames made, by time
    per_call: list[int] = []  # frames made by each call of due()
    apply, due = asm.accumulator.apply, asm.due

    def counted_apply(frame: Frame, buffers: Any) -> Frame:
        made.append(frame.t_ns)  # once per frame made
        return apply(frame, buffers)

    def counted_due(now: int, *args: Any, **kwargs: Any) -> Any:
        before = len(made)
        frames = due(now, *args, **kwargs)
        per_call.append(len(made) - before)
        return frames

    asm.accumulator.apply = counted_apply  # type: ignore[method-assign]
    asm.due = counted_due  # type: ignore[method-assign]
    lidar = next(s for s in samples if s.sensor == "lidar_top")
    with live:
        assert live._loop is not None
        stall = threading.Event()
        live._loop.call_soon_threadsafe(stall.wait, 60)  # the loop takes nothing: the flood waits in the intake
        try:
            t0 = time.monotonic_ns() - asm._horizon_ns - 10 * MS
            futures = [live.push(dataclasses.replace(lidar, t_ns=t0 + k * 1000)) for k in range(flood)]
        finally:
            stall.set()
        deadline = time.monotonic() + 60  # a watchdog only
        while live.status()["intake"]["frames"] < flood:
            assert time.monotonic() < deadline, live.status()["intake"]
            time.sleep(0.005)
    return _Flood(got, made, per_call, live.status(), futures)


def _check_flood_records(flood: _Flood) -> None:
    """Every frame made or not reached on_result once, in order, and its trigger's future has its record."""
    got, frames = flood.got, flood.status["intake"]["frames"]
    assert _ids(got) == list(range(frames)) and flood.status["frames"] == frames
    assert [r.t_ns for r in got] == sorted(r.t_ns for r in got)
    for future in flood.futures:
        assert future is not None
        record = future.result(timeout=0)
        assert got[record.frame_id] is record


def test_a_flood_of_due_frames_makes_at_most_what_the_pipeline_holds_and_sheds_the_rest(
    triton: EmbeddedTriton,
) -> None:
    # Before: due() made every frame of a flood in one batch on the event loop (each tens of ms of samples
    # and sweeps), though the pipeline then shed all but the newest: 100 frames made in one call here. Now
    # one call makes at most max_in_flight + queue_size (the newest); the older ones reach the pipeline
    # unmade and are shed in their turn (the tracker's prediction), each trigger's future answered with its
    # record, every id once and in time order, counted (superseded_unassembled).
    cfg, rig, samples = _config(triton.grpc_url)
    limit = cfg.pipeline.max_in_flight + cfg.pipeline.queue_size
    out = _flood(cfg, rig, samples, flood := 100)
    status, made = out.status, len(out.made)
    frames = status["intake"]["frames"]
    assert max(out.per_call) <= limit and made < frames, (out.per_call, made, frames)  # before: [100]
    superseded = status["intake"]["superseded_unassembled"]
    assert superseded >= flood - limit and superseded + made == frames, (superseded, made, frames)
    _check_flood_records(out)
    unmade = [r for r in out.got if (r.reason or "").startswith("overload (superseded before assembly")]
    assert len(unmade) == superseded and all(r.status is FrameStatus.DROPPED for r in unmade)
    assert all(r.predicted for r in unmade)  # each the tracker's prediction, as every shed frame's
    assert status["shed"] >= superseded


@pytest.mark.parametrize(
    ("overload", "overflow"), [("queue", "drop-oldest"), ("queue", "drop-newest"), ("shed", "drop-newest")]
)
def test_a_flood_of_due_frames_makes_at_most_what_the_pipeline_keeps_under_every_dropping_policy(
    triton: EmbeddedTriton, overload: Literal["queue", "shed"], overflow: Literal["drop-oldest", "drop-newest"]
) -> None:
    # Before: only under the default policies (shed, drop-oldest) was a flood's backlog bounded; with
    # overload: queue or overflow: drop-newest every due frame was made on the event loop (100 in one call
    # here), then dropped by the pipeline all but what it holds. Now one call makes at most max_in_flight +
    # queue_size, those the pipeline keeps (drop-oldest: the newest; drop-newest: the oldest); each other one
    # reaches it unmade and is recorded in its turn: dropped (queue overflow), or shed with the tracker's
    # prediction under the overload policy. Every id once, in time order, each trigger's future answered.
    cfg, rig, samples = _config(triton.grpc_url)
    cfg = dataclasses.replace(cfg, pipeline=dataclasses.replace(cfg.pipeline, overload=overload, overflow=overflow))
    limit = cfg.pipeline.max_in_flight + cfg.pipeline.queue_size
    out = _flood(cfg, rig, samples, flood := 100)
    status, made = out.status, len(out.made)
    frames = status["intake"]["frames"]
    assert max(out.per_call) <= limit and made < frames, (out.per_call, made, frames)  # before: [100]
    unassembled = {k: status["intake"][f"{k}_unassembled"] for k in ("superseded", "overflowed")}
    kept, other = ("overflowed", "superseded") if overflow == "drop-newest" else ("superseded", "overflowed")
    assert unassembled[other] == 0 and unassembled[kept] >= flood - limit, unassembled
    assert unassembled[kept] + made == frames, (unassembled, made, frames)
    _check_flood_records(out)
    prefix = f"queue overflow ({overflow}; not assembled"
    unmade = [r for r in out.got if r.reason and r.reason.startswith((prefix, f"overload ({prefix}"))]
    assert len(unmade) == unassembled[kept] and all(r.status is FrameStatus.DROPPED for r in unmade)
    assert all(r.predicted == (overload == "shed") for r in unmade)  # shed: the tracker's prediction
    if overflow == "drop-newest":  # the oldest of the first backlog were made, the newest not
        assert min(r.t_ns for r in unmade) > min(out.made)


def test_a_fusion_that_hangs_holds_close_no_longer_than_its_drain_and_nothing_is_fused_beside_it(
    triton: EmbeddedTriton,
) -> None:
    # Before: fusion runs in a worker thread the runtime waited for even when cancelled, so a fusion call
    # that never returned held close() forever (past the drain timeout the frames in flight are cancelled,
    # but not that thread). Now the call is abandoned in its thread at the drain timeout, reported (logged
    # as an error, status()["failed"]["fusion"]), every frame gets its record, and no other fusion starts
    # while it runs (the tracker is not thread-safe).
    cfg, rig, samples = _config(triton.grpc_url, drain_s=0.5)
    # the frames behind the stuck one wait for it (none shed under overload: no wall-clock judgement)
    cfg = dataclasses.replace(cfg, pipeline=dataclasses.replace(cfg.pipeline, overload="queue"))
    hang = threading.Event()  # set only once close() returned (or gave up)
    entered = threading.Event()
    fused: list[int] = []

    def hanging_fusion(frame: Frame, results: Mapping[str, SensorResult]) -> tuple[tuple[()], dict[str, int]]:
        fused.append(frame.frame_id)
        if frame.frame_id == 3:
            entered.set()
            hang.wait(120)  # frame 3's fusion never returns while the runtime runs
        return (), {}

    got: list[FrameResult] = []
    live = LiveRuntime(cfg, rig, on_result=got.append, fusion=hanging_fusion)
    live.__enter__()
    closer = threading.Thread(target=live.close)
    try:
        futures = _push_all(live, samples[: len(samples) // 2], {})
        assert entered.wait(60)
        closer.start()
        closer.join(30)  # a watchdog only: the close takes the drain timeout and the release
        closed = not closer.is_alive()
    finally:
        hang.set()
        closer.join(60) if closer.ident is not None else live.close()
    assert closed  # before: close waited for the fusion call that never returned
    assert fused == [0, 1, 2, 3]  # nothing fused beside (or after) the hung call
    status = live.status()
    made = status["intake"]["frames"]
    assert made >= 6 and _ids(got) == list(range(made)) and status["frames"] == made, (made, _ids(got))
    assert all(r.status is not FrameStatus.DROPPED for r in got[:3])
    assert all(r.status is FrameStatus.DROPPED for r in got[3:])
    assert got[3].reason == CANCELLED_IN_FLIGHT and status["failed"] == {"fusion": 1}
    for future in futures:  # each future has the very record on_result got
        record = future.result(timeout=0)  # type: ignore[attr-defined]
        assert got[record.frame_id] is record


def test_a_stream_that_fails_before_taking_a_frame_ends_serving_instead_of_retrying_for_ever(
    triton: EmbeddedTriton,
) -> None:
    # Before: the serving loop started the failed stream again at once, for ever (nothing awaited a frame
    # between two attempts): the loop spun, close waited on it. Now serving ends with that error; every frame
    # made is answered (dropped) and the failure is counted.
    cfg, rig, samples = _config(triton.grpc_url)
    got: list[FrameResult] = []
    live = LiveRuntime(cfg, rig, on_result=got.append)
    failure = RuntimeError("the stream cannot start")
    attempts = [0]

    async def run_failing_at_start(frames: Any, **kwargs: Any) -> AsyncIterator[FrameResult]:
        attempts[0] += 1
        raise failure
        yield  # pragma: no cover - an async generator

    live._runtime.run = run_failing_at_start  # type: ignore[method-assign]

    def host() -> None:
        with contextlib.suppress(RuntimeClosedError), live:  # the runtime failed: closed under the host
            _outcomes(_push_all(live, samples[: len(samples) // 4], {}))

    hosting = threading.Thread(target=host, daemon=True)
    hosting.start()
    hosting.join(120)  # a watchdog only (before: never)
    assert not hosting.is_alive(), "the failed stream was started again and again"
    status = live.status()
    assert attempts[0] == 1, attempts
    # the runtime's failure (logged: "live runtime failed; everything it held is released"), no frame's
    assert status["failed"] == {"runtime": 1}, status["failed"]
    assert all(r.status is FrameStatus.DROPPED for r in got) and _ids(got) == list(range(status["intake"]["frames"]))
