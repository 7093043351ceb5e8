"""A thread-backed facade for hosts that are not async (future and callback styles).

The runtime runs on its own event-loop thread (an anyio blocking portal). ``submit(frame)`` returns a
:class:`concurrent.futures.Future`; ``submit(frame, callback)`` also calls ``callback(result)`` — for every
frame: one whose future raised (a frame holding what is not a sample, a bug, a close that cancelled it) is
passed as the record a stream of :meth:`Runtime.run` makes of it, status ``dropped`` with the reason
(``invalid input: ...``, ``internal error: ...``, ``shutdown: ...``). A future's own done callbacks run on the
event-loop thread: a frame submitted from one is started by a thread of its own (the loop's portal takes no task
from that thread). Callbacks run on a separate callback thread, never on the I/O thread, in completion order,
so a slow callback cannot stall the scheduler; at most :data:`CALLBACK_QUEUE` wait, beyond that the oldest
waiting is dropped and counted (:attr:`ThreadedRuntime.callbacks_dropped`); a callback that raises is counted
(:attr:`ThreadedRuntime.callbacks_failed`) and logged once per exception type. Frames submitted concurrently
are processed concurrently up to the admission's limit -- the same
:class:`~perception.scheduler._admission.Admission` a stream of :meth:`Runtime.run` has: adaptive up to
``pipeline.max_in_flight`` (``pipeline.admission``), so frames do not queue in the servers inside their
deadlines; beyond it they wait. A host submits frames as its sensors deliver them, without waiting: when
they come faster than the servers finish them, the overload policy of every real-time path decides
(:mod:`perception.scheduler._shedding`): the waiting frames run while they can finish within their budgets,
the oldest are shed when they cannot all (their futures answered with a ``dropped`` result, reason
``overload``, and the tracker's prediction at their time). With ``pipeline.overload: queue`` or ``overflow:
block`` they wait first come, first served instead, and none is dropped.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace
from types import TracebackType
from typing import Literal

import anyio

from perception.config import RuntimeConfig
from perception.errors import ConfigError, InputError, RuntimeClosedError
from perception.scheduler._admission import Admission
from perception.scheduler._callbacks import CallbackQueue
from perception.scheduler._lifetime import Lifetime, ThreadHost
from perception.scheduler._pipeline import CANCELLED_IN_FLIGHT, admission_adapts, ended_late, failure_reason
from perception.scheduler._runtime import Runtime
from perception.scheduler._session import FusionStage
from perception.scheduler._shedding import OverloadPolicy, sheds
from perception.types import Frame, FrameResult, SensorSpec, SessionSource

__all__ = ["ThreadedRuntime"]

log = logging.getLogger(__name__)

Callback = Callable[[FrameResult], None]


#: Results whose callbacks may wait on the callback thread; beyond it the oldest waiting is dropped.
CALLBACK_QUEUE = 256


class _Waiter:
    """A submitted frame waiting for a slot: set when it may start, or when it is shed (``shed``: why)."""

    __slots__ = ("event", "limit", "shed", "started_ns")

    def __init__(self, started_ns: int) -> None:
        self.event = anyio.Event()
        self.started_ns = started_ns
        self.shed: str | None = None
        self.limit: int | None = None  # the admission's limit when it was shed


class ThreadedRuntime:
    """``with ThreadedRuntime(config) as rt: fut = rt.submit(frame)`` — no asyncio needed by the host.

    A :class:`~perception.scheduler._lifetime.ThreadHost` holds the :class:`Runtime` on the event-loop
    thread: one task there enters it (``async with``, :meth:`_serving`) and, on close, drains the frames
    in flight (bounded by the pipeline's drain timeout) and leaves it, so the runtime is opened and
    closed by the same task, and released (server, channels, shared memory) even when something
    failed. Frames still running after the drain are cancelled (their futures say so; a circuit
    breaker's probe they held is given back), and have ended, before the runtime is left: none is using
    its client or server as they close.
    """

    def __init__(
        self,
        config: RuntimeConfig,
        *,
        source: SessionSource | None = None,
        rig: Mapping[str, SensorSpec] | None = None,
        fusion: FusionStage | Literal["profile"] | None = "profile",
        callback_queue: int = CALLBACK_QUEUE,
    ) -> None:
        if callback_queue < 1:  # before anything is opened
            raise ConfigError(f"must be >= 1, got {callback_queue}", key="callback_queue")
        self._runtime = Runtime(config, source=source, rig=rig, fusion=fusion)
        self._host = ThreadHost(self._serving, name="perception-loop")
        self._drain_s = self._runtime.config.pipeline.drain_timeout_s  # close's drain (close(timeout_s))
        self._callback_queue = callback_queue
        self._callbacks: CallbackQueue | None = None
        self._admission: Admission | None = None
        self._waiting: deque[_Waiter] = deque()  # frames waiting for a slot, in submission order
        self._overload: OverloadPolicy | None = None  # when frames are shed under overload (module docs)
        self._active = 0  # frames submitted and not finished (waiting or in flight)
        self._idle: anyio.Event | None = None  # set when the last active frame finishes
        #: The futures of the frames submitted and not done (cancelled after the drain), under their lock.
        self._futures: set[concurrent.futures.Future[FrameResult]] = set()
        self._futures_lock = threading.Lock()

    def __enter__(self) -> ThreadedRuntime:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def open(self) -> None:
        # Returns once the runtime is open; an error opening it is raised here (rolled back).
        self._host.open()
        try:
            self._callbacks = CallbackQueue(self._callback_queue, name="perception-cb")
        except BaseException:
            self._host.close(self._drain_s)  # nothing submitted yet: the runtime is only left
            raise

    @contextlib.asynccontextmanager
    async def _serving(self) -> AsyncIterator[None]:
        """The runtime's whole lifetime, in the one task of the event-loop thread (class docs)."""
        config = self._runtime.config
        pipeline, deadline_ns = config.pipeline, config.budget.total_ns
        async with self._runtime:
            self._admission = Admission(
                pipeline.max_in_flight, deadline_ns, adaptive=admission_adapts(pipeline, deadline_ns)
            )
            self._runtime.admission = self._admission  # its limit and how it moved: runtime.admission.report()
            if sheds(pipeline):
                self._overload = OverloadPolicy(deadline_ns)
            yield
            with anyio.move_on_after(self._drain_s):
                await self._all_ended()
            # the frames still running are cancelled, and end, before the runtime is left (class docs)
            with self._futures_lock:
                left = list(self._futures)
            for future in left:
                future.cancel()  # the portal cancels its task (on this thread: at once)
            await self._all_ended()

    async def _all_ended(self) -> None:
        """Return once no frame is waiting or in flight."""
        while self._active:
            self._idle = anyio.Event()
            await self._idle.wait()

    def submit(self, frame: Frame, callback: Callback | None = None) -> concurrent.futures.Future[FrameResult]:
        """Process ``frame`` (module docs). Its budget clock (``created_ns``, unless the host set it) starts now:
        a wait for a slot is in its latency (``schedule_wait``) and its deadline, as a stream's. What is not a
        :class:`Frame` is an :class:`InputError` here."""
        if not isinstance(frame, Frame):
            raise InputError(f"submit takes a Frame, got {type(frame).__name__}")
        if self._host.state is not Lifetime.OPENED:
            raise RuntimeClosedError("the runtime is closed", frame=frame.frame_id)
        if not frame.created_ns:  # its budget clock starts when it is handed in, as a stream's at intake
            frame = replace(frame, created_ns=time.monotonic_ns())
        future = self._start_from_loop(frame) if self._host.in_loop_thread() else self._start(frame)
        with self._futures_lock:
            self._futures.add(future)
        future.add_done_callback(self._forget)
        if callback is not None:
            callbacks = self._callbacks
            assert callbacks is not None
            future.add_done_callback(lambda f: callbacks.submit(self._run_callback, callback, frame, f))
        return future

    def _start(self, frame: Frame) -> concurrent.futures.Future[FrameResult]:
        """The frame's task, started in the portal (from any thread but the event loop's)."""
        portal = self._host.portal
        try:
            return portal.start_task_soon(self._process, frame)
        except RuntimeError:  # a close on another thread stopped the portal since it was read
            if self._host.state is Lifetime.OPENED:
                raise
            raise RuntimeClosedError("the runtime is closed", frame=frame.frame_id) from None

    def _start_from_loop(self, frame: Frame) -> concurrent.futures.Future[FrameResult]:
        """On the event-loop thread (a future's done callback runs there), where the portal takes no task: a
        thread of its own starts the frame's (as :meth:`close` is handed to one); the future returned follows
        that task's, and cancelling it cancels the task."""
        outer: concurrent.futures.Future[FrameResult] = concurrent.futures.Future()

        def start() -> None:
            try:
                inner = self._start(frame)
            except Exception as exc:  # closed meanwhile (RuntimeClosedError): its future says so
                with contextlib.suppress(concurrent.futures.InvalidStateError):  # cancelled meanwhile
                    outer.set_exception(exc)
                return
            inner.add_done_callback(functools.partial(_follow, outer))
            outer.add_done_callback(lambda f: inner.cancel() if f.cancelled() else None)

        threading.Thread(target=start, name="perception-submit", daemon=True).start()
        return outer

    def _forget(self, future: concurrent.futures.Future[FrameResult]) -> None:
        with self._futures_lock:
            self._futures.discard(future)

    async def _process(self, frame: Frame) -> FrameResult:
        admission = self._admission
        assert admission is not None
        self._active += 1
        slot = False
        try:
            if not self._waiting and admission.try_acquire():
                slot = True
            else:
                turn = _Waiter(frame.created_ns)
                self._waiting.append(turn)
                try:
                    await turn.event.wait()
                finally:
                    if turn.event.is_set():
                        slot = turn.shed is None  # granted by _pump (a slot taken for this frame), or shed
                    else:
                        self._waiting.remove(turn)  # cancelled while waiting
                if turn.shed is not None:
                    return replace(await self._runtime.shed(frame, turn.shed), admission_limit=turn.limit)
            start = time.monotonic_ns()
            limit = admission.limit  # in force as the frame starts (recorded with its result)
            result = replace(await self._runtime.process(frame), admission_limit=limit)
            slot = False
            # admission to result, as a stream's pipeline measures it
            end = time.monotonic_ns()
            admission.release(end - start, late=ended_late(result))
            if self._overload is not None:
                self._overload.observe(end - start, cut=ended_late(result))
            return result
        finally:
            if slot:
                admission.release(None)  # cancelled or failed: the slot only goes back
            self._pump()
            self._active -= 1
            if not self._active and self._idle is not None:
                self._idle.set()

    def _pump(self) -> None:
        """Give free slots to the frames waiting longest (the admission may probe one more for them);
        under the overload policy to the freshest that can finish in time, the others shed."""
        admission = self._admission
        while self._waiting and admission is not None and admission.try_acquire():
            if self._overload is None:
                self._waiting.popleft().event.set()
                continue
            waiting = list(self._waiting)
            self._waiting.clear()
            started = [w.started_ns for w in waiting]
            verdict = self._overload.choose(started, time.monotonic_ns(), parallel=admission.limit)
            for i, reason in verdict.shed:  # woken first: their records take their fusion turns first
                waiting[i].shed = reason
                waiting[i].limit = admission.limit
                waiting[i].event.set()
            if verdict.start is None:
                admission.release(None)
                return
            waiting[verdict.start].event.set()
            self._waiting.extend(waiting[verdict.start + 1 :])  # the fresher ones wait for their slots

    def _run_callback(self, callback: Callback, frame: Frame, future: concurrent.futures.Future[FrameResult]) -> None:
        """On the callback thread: ``callback`` gets the frame's result, or the record of its failure
        (module docs) -- the host learns of every frame it submitted."""
        if future.cancelled():
            reason = CANCELLED_IN_FLIGHT
        elif (exc := future.exception()) is not None:
            reason = failure_reason(exc)
        else:
            callback(future.result())
            return
        log.warning("frame %d dropped: %s", frame.frame_id, reason)
        callback(self._runtime.dropped(frame, reason))

    @property
    def callbacks_dropped(self) -> int:
        """Callbacks dropped because the callback thread fell :data:`CALLBACK_QUEUE` behind."""
        return self._callbacks.dropped if self._callbacks is not None else 0

    @property
    def callbacks_failed(self) -> int:
        """Callback calls that raised (each counted; logged once per exception type)."""
        return self._callbacks.failed if self._callbacks is not None else 0

    def close(self, timeout_s: float | None = None) -> None:
        """Drain submitted frames (bounded by ``timeout_s``, default the pipeline's drain timeout),
        cancel what is left, release everything (runtime, event-loop thread, callback thread)."""
        if self._host.state is Lifetime.CLOSED:
            return
        if self._host.state is Lifetime.OPENED and self._host.in_loop_thread():
            # a future's done callback (they run on the event-loop thread): that thread cannot wait for
            # itself; a thread of its own closes the runtime (ThreadHost.close)
            threading.Thread(target=self.close, args=(timeout_s,), name="perception-close").start()
            return
        if timeout_s is not None:
            self._drain_s = timeout_s
        if self._callbacks is not None:
            self._callbacks.host_closing()  # a callback closing the runtime: close does not wait for it
        self._host.close(self._drain_s)  # while another thread closes it: returns once that one has
        if self._callbacks is not None:
            self._callbacks.close(self._drain_s)

    @property
    def runtime(self) -> Runtime:
        return self._runtime


def _follow(outer: concurrent.futures.Future[FrameResult], inner: concurrent.futures.Future[FrameResult]) -> None:
    """``outer`` ends as ``inner`` did (unless it was cancelled first)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):  # outer cancelled meanwhile
        if inner.cancelled():
            outer.cancel()
        elif (exc := inner.exception()) is not None:
            outer.set_exception(exc)
        else:
            outer.set_result(inner.result())
