"""Live ingestion: the host pushes samples from its own threads; fused results come back.

``LiveRuntime`` wraps a :class:`perception.scheduler.Runtime` (which builds its fusion stage from the
profile) with a :class:`LiveAssembler` on the host's monotonic clock. Two ways to hold it:

* from threads (no asyncio in the host): ``with LiveRuntime(config, rig, on_result=cb) as live:`` —
  an event loop runs in a background thread, callbacks run on a callback thread;
* from async code: ``async with LiveRuntime(config, rig) as live: async for r in live.results(): ...``.

:meth:`LiveRuntime.push` is thread-safe and never blocks: the sample goes into a bounded intake
queue (the oldest is dropped, and counted, when it is full) and the event loop is woken. For a sample
of the trigger sensor it returns a future of the frame that sample triggers (or
:class:`~perception.errors.SampleDroppedError` when it could not be used). Closing stops intake,
completes the pending frames with what has arrived, drains the frames in flight within
``pipeline.drain_timeout_s`` and releases the runtime (server, channels, shared memory, threads).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Literal

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from perception.config import RuntimeConfig
from perception.errors import RuntimeClosedError, SampleDroppedError
from perception.live._assembler import LiveAssembler, LiveStats
from perception.metrics import LatencyAccumulator
from perception.scheduler import FusionStage, Runtime, Session
from perception.types import EgoPose, Frame, FrameResult, Sample, SensorSpec, SessionSource

__all__ = ["LiveRuntime"]

log = logging.getLogger(__name__)

Callback = Callable[[FrameResult], None]
ResultFuture = concurrent.futures.Future[FrameResult]


@dataclasses.dataclass
class _Item:
    sample: Sample | EgoPose
    arrival_ns: int
    future: ResultFuture | None


class LiveRuntime:
    """Frames from live samples on the host clock, processed by a :class:`Runtime` (see module docs)."""

    def __init__(
        self,
        config: RuntimeConfig,
        rig: Mapping[str, SensorSpec] | SessionSource,
        *,
        on_result: Callback | None = None,
        fusion: FusionStage | Literal["profile"] | None = "profile",
        results_buffer: int = 256,
    ) -> None:
        # The vehicle's rig is a live source of real sensors; a drive's source (``perception live DRIVE``)
        # resolves as its replay does. Poses come from the host (push_ego), never from a file.
        source = rig if isinstance(rig, SessionSource) else SessionSource.live(rig)
        source = dataclasses.replace(source, ego_at=None, gt_at=None)
        session = Session.assemble(config, source)
        rig = session.rig
        self.config = config = session.config
        self._runtime = Runtime(session, fusion=fusion)
        rates = {name: spec.rate_hz for name, spec in rig.items() if spec.rate_hz > 0}
        self._assembler: LiveAssembler[ResultFuture] = LiveAssembler(
            config.active_sensors, config.trigger, config.live, rates=rates, rig=rig
        )
        self._trigger = config.trigger.sensor
        self._on_result = on_result
        self._lock = threading.Lock()
        self._intake: deque[_Item] = deque()
        self._intake_max = config.live.intake_queue
        self._wake_pending = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: anyio.Event | None = None
        self._open = False
        self._closing = False
        self._futures: dict[int, ResultFuture] = {}
        self._results_send: MemoryObjectSendStream[FrameResult] | None = None
        self._results_recv: MemoryObjectReceiveStream[FrameResult] | None = None
        self._results_buffer = results_buffer
        self._results_overflow = 0
        self._assembly_cpu_ns = 0  # CPU time of the event-loop thread in intake and assembly
        self._frames_send: MemoryObjectSendStream[Frame] | None = None
        self._latency = LatencyAccumulator(budget_ns=config.budget.total_ns)
        self._callbacks: concurrent.futures.ThreadPoolExecutor | None = None
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._served: anyio.Event | None = None  # set when the result task has ended
        self._release: anyio.Event | None = None  # the thread-side lifetime ends when it is set
        self._held: concurrent.futures.Future[None] | None = None

    # -- pushing (any thread) -------------------------------------------------------------------
    def push(self, sample: Sample) -> ResultFuture | None:
        """Hand one sample over; thread-safe and non-blocking. Returns a future of the frame a
        trigger sample opens, else None. Raises :class:`RuntimeClosedError` once closing."""
        future: ResultFuture | None = ResultFuture() if sample.sensor == self._trigger else None
        self._enqueue(_Item(sample, time.monotonic_ns(), future))
        return future

    def push_ego(self, pose: EgoPose) -> None:
        """Hand over an ego pose (odometry); frames carry the nearest one for the tracker."""
        self._enqueue(_Item(pose, time.monotonic_ns(), None))

    def _enqueue(self, item: _Item) -> None:
        with self._lock:
            if not self._open or self._closing:
                raise RuntimeClosedError("the live runtime is not open")
            if len(self._intake) >= self._intake_max:
                old = self._intake.popleft()
                self._assembler.stats.intake_overflow += 1
                if old.future is not None:
                    old.future.set_exception(SampleDroppedError("intake queue full", sensor=_sensor(old.sample)))
            self._intake.append(item)
            wake = not self._wake_pending
            self._wake_pending = True
            loop = self._loop
        if wake and loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closing: close() takes what is left
                loop.call_soon_threadsafe(self._set_wake)

    def _set_wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # -- results --------------------------------------------------------------------------------
    async def results(self) -> AsyncIterator[FrameResult]:
        """Every frame's result in order (async hosts); ends when the runtime closes."""
        if self._results_recv is None:
            raise RuntimeClosedError("the live runtime is not open")
        async for r in self._results_recv:
            yield r

    def status(self) -> dict[str, Any]:
        """Counters, current time-base offsets and latency from the trigger's arrival to the result."""
        summary = self._latency.summary()
        stats: LiveStats = self._assembler.stats
        return {
            "intake": dataclasses.asdict(stats),
            "accumulation": self._assembler.accumulator.report(),
            "offsets_ms": {k: v / 1e6 for k, v in self._assembler.offsets_ns().items()},
            "frames": summary["frames"],
            "ok": summary["ok"],
            "degraded": summary["degraded"],
            "dropped": summary["dropped"],
            "drop_reasons": summary["drop_reasons"],
            "deadline_misses": summary["deadline_misses"],
            "latency_ms": summary["latency_ms"]["total"],
            "sensor_status": summary["sensor_status"],
            "results_overflow": self._results_overflow,
            "assembly_cpu_us_per_frame": round(self._assembly_cpu_ns / 1e3 / max(1, stats.frames), 1),
        }

    # -- lifetime (async) -----------------------------------------------------------------------
    async def __aenter__(self) -> LiveRuntime:
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            await stack.enter_async_context(self._runtime)
            self._callbacks = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="live-cb")
            stack.callback(self._callbacks.shutdown, wait=True)
            frames_send, frames_recv = anyio.create_memory_object_stream[Frame](
                max_buffer_size=self.config.pipeline.max_in_flight + self.config.pipeline.queue_size
            )
            self._frames_send = frames_send
            results_send, results_recv = anyio.create_memory_object_stream[FrameResult](
                max_buffer_size=self._results_buffer
            )
            self._results_send, self._results_recv = results_send, results_recv
            self._wake = anyio.Event()
            self._served = anyio.Event()
            self._loop = asyncio.get_running_loop()
            with self._lock:
                self._open = True
        except BaseException:
            with anyio.CancelScope(shield=True):
                await stack.aclose()
            raise
        self._stack = stack
        # Entered last and left first, by the same task, with no scope in between (see aclose).
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self._assemble, frames_send)
        tg.start_soon(self._serve, frames_recv, results_send)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop intake, complete pending frames, drain in-flight ones (bounded), release everything."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        self._set_wake()
        stack, self._stack = self._stack, None
        if stack is None:
            return
        tg, self._tg = self._tg, None
        if tg is not None:
            # The tasks end once the assembler has sent the last frames and the runtime has answered
            # them; the watchdog bounds that by the drain timeout.
            tg.start_soon(self._drain_watchdog, tg, self.config.pipeline.drain_timeout_s + 1.0)
            await tg.__aexit__(None, None, None)
        with anyio.CancelScope(shield=True):
            await stack.aclose()  # the callback thread, then the runtime (server, channels, shm)
        for fut in list(self._futures.values()):
            if not fut.done():
                fut.set_exception(RuntimeClosedError("closed before the frame finished"))
        self._futures.clear()

    async def _drain_watchdog(self, tg: anyio.abc.TaskGroup, seconds: float) -> None:
        assert self._served is not None
        with anyio.move_on_after(seconds) as scope:
            await self._served.wait()
        if scope.cancelled_caught:
            log.warning("live runtime: frames still in flight after %.1f s were abandoned", seconds)
            tg.cancel_scope.cancel()

    # -- lifetime (threads) ---------------------------------------------------------------------
    def __enter__(self) -> LiveRuntime:
        cm = start_blocking_portal(backend="asyncio")
        portal = cm.__enter__()
        try:
            # One task holds the whole lifetime: a task group is entered and left by the same task.
            self._held, _ = portal.start_task(self._hold)
        except BaseException as exc:
            cm.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._portal_cm, self._portal = cm, portal
        return self

    async def _hold(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self._release = anyio.Event()
        async with self:
            task_status.started()
            await self._release.wait()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Thread-side close (see :meth:`aclose`); returns once everything is released."""
        portal, cm = self._portal, self._portal_cm
        self._portal = self._portal_cm = None
        if portal is None or cm is None:
            return
        try:
            if self._release is not None:
                portal.call(self._release.set)
            if self._held is not None:
                self._held.result()
        finally:
            cm.__exit__(None, None, None)

    # -- the loop -------------------------------------------------------------------------------
    def _take_intake(self) -> list[_Item]:
        with self._lock:
            items = list(self._intake)
            self._intake.clear()
            self._wake_pending = False
            return items

    async def _assemble(self, frames: MemoryObjectSendStream[Frame]) -> None:
        asm = self._assembler
        async with frames:
            while True:
                assert self._wake is not None
                cpu0 = time.thread_time_ns()
                for item in self._take_intake():
                    if isinstance(item.sample, EgoPose):
                        asm.add_ego(item.sample, item.arrival_ns)
                        continue
                    dropped = asm.add(item.sample, item.arrival_ns, token=item.future)
                    if dropped is not None and item.future is not None:
                        item.future.set_exception(SampleDroppedError(dropped, sensor=item.sample.sensor))
                now = time.monotonic_ns()
                closing = self._closing
                ready = asm.close() if closing else asm.due(now)
                self._assembly_cpu_ns += time.thread_time_ns() - cpu0
                for frame, token in ready:
                    if token is not None:
                        self._futures[frame.frame_id] = token
                    await frames.send(frame)
                if closing:
                    return
                deadline = asm.next_deadline()
                wait_s = None if deadline is None else max(0.0, (deadline - time.monotonic_ns()) / 1e9)
                self._wake = anyio.Event() if self._wake.is_set() else self._wake
                if self._intake:
                    continue
                with anyio.move_on_after(wait_s if wait_s is not None else 3600.0):
                    await self._wake.wait()

    async def _serve(
        self, frames: MemoryObjectReceiveStream[Frame], results: MemoryObjectSendStream[FrameResult]
    ) -> None:
        try:
            await self._serve_results(frames, results)
        finally:
            assert self._served is not None
            self._served.set()

    async def _serve_results(
        self, frames: MemoryObjectReceiveStream[Frame], results: MemoryObjectSendStream[FrameResult]
    ) -> None:
        async with results, frames:
            async for result in self._runtime.run(frames):
                self._latency.add(result)
                fut = self._futures.pop(result.frame_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(result)
                if self._on_result is not None and self._callbacks is not None:
                    self._callbacks.submit(_run_callback, self._on_result, result)
                try:
                    results.send_nowait(result)
                except anyio.WouldBlock:
                    self._results_overflow += 1  # nobody reads results(): the oldest is not kept
                    with contextlib.suppress(anyio.WouldBlock, anyio.EndOfStream):
                        assert self._results_recv is not None
                        self._results_recv.receive_nowait()
                        results.send_nowait(result)


def _run_callback(callback: Callback, result: FrameResult) -> None:
    try:
        callback(result)
    except Exception:
        log.exception("live result callback raised (frame %d)", result.frame_id)


def _sensor(sample: Sample | EgoPose) -> str:
    return sample.sensor if not isinstance(sample, EgoPose) else "ego"
