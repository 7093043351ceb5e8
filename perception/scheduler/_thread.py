"""A thread-backed facade for hosts that are not async (future and callback styles).

The runtime runs on its own event-loop thread (an anyio blocking portal). ``submit(frame)`` returns
a :class:`concurrent.futures.Future`; ``submit(frame, callback)`` also calls ``callback(result)`` —
callbacks run on a separate callback thread, never on the I/O thread, in completion order, so a slow
callback cannot stall the scheduler; at most :data:`CALLBACK_QUEUE` wait, beyond that the oldest
waiting is dropped and counted (:attr:`ThreadedRuntime.callbacks_dropped`). Frames submitted
concurrently are processed concurrently up to
``pipeline.max_in_flight``; beyond that they wait (this API never drops: the caller owns pacing).
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Literal

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from perception.config import RuntimeConfig
from perception.errors import RuntimeClosedError
from perception.scheduler._callbacks import CallbackQueue
from perception.scheduler._runtime import Runtime
from perception.scheduler._session import FusionStage
from perception.types import Frame, FrameResult, SensorSpec, SessionSource

__all__ = ["ThreadedRuntime"]

log = logging.getLogger(__name__)

Callback = Callable[[FrameResult], None]


#: Results whose callbacks may wait on the callback thread; beyond it the oldest waiting is dropped.
CALLBACK_QUEUE = 256
#: Beyond the drain timeout, how long close waits for the runtime's own release (server, channels).
_RELEASE_MARGIN_S = 30.0


class ThreadedRuntime:
    """``with ThreadedRuntime(config) as rt: fut = rt.submit(frame)`` — no asyncio needed by the host.

    One long-lived task on the event-loop thread owns the :class:`Runtime`: it enters it (``async
    with``), waits for the stop event, drains the frames in flight (bounded by the pipeline's drain
    timeout) and leaves it, so the runtime is opened and closed by the same task, and released (server,
    channels, shared memory) even when something failed. Frames still running after the drain are
    cancelled (their futures say so; a circuit breaker's probe they held is given back).
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
        self._runtime = Runtime(config, source=source, rig=rig, fusion=fusion)
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._callback_queue = callback_queue
        self._callbacks: CallbackQueue | None = None
        self._slots: anyio.Semaphore | None = None
        self._stop: anyio.Event | None = None
        self._owner: concurrent.futures.Future[None] | None = None
        self._closed = False

    def __enter__(self) -> ThreadedRuntime:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def open(self) -> None:
        cm = start_blocking_portal(backend="asyncio")
        portal = cm.__enter__()
        try:
            # Returns once the runtime is open; an error opening it is raised here (rolled back).
            self._owner, _ = portal.start_task(self._own)
        except BaseException as exc:
            cm.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._callbacks = CallbackQueue(self._callback_queue, name="perception-cb")
        self._portal_cm, self._portal = cm, portal

    async def _own(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The runtime's whole lifetime, in this one task (class docs)."""
        self._stop = anyio.Event()
        pipeline = self._runtime.config.pipeline
        async with self._runtime:
            self._slots = anyio.Semaphore(pipeline.max_in_flight)
            task_status.started()
            await self._stop.wait()
            with anyio.move_on_after(pipeline.drain_timeout_s):
                for _ in range(pipeline.max_in_flight):  # every slot free: nothing in flight
                    await self._slots.acquire()

    def submit(self, frame: Frame, callback: Callback | None = None) -> concurrent.futures.Future[FrameResult]:
        if self._closed or self._portal is None:
            raise RuntimeClosedError("the runtime is closed", frame=frame.frame_id)
        future: concurrent.futures.Future[FrameResult] = self._portal.start_task_soon(self._process, frame)
        if callback is not None:
            callbacks = self._callbacks
            assert callbacks is not None
            future.add_done_callback(lambda f: callbacks.submit(self._run_callback, callback, f))
        return future

    async def _process(self, frame: Frame) -> FrameResult:
        assert self._slots is not None
        async with self._slots:
            return await self._runtime.process(frame)

    @staticmethod
    def _run_callback(callback: Callback, future: concurrent.futures.Future[FrameResult]) -> None:
        if future.cancelled() or future.exception() is not None:
            log.warning("frame future failed: %r", future.exception() if not future.cancelled() else "cancelled")
            return
        callback(future.result())

    @property
    def callbacks_dropped(self) -> int:
        """Callbacks dropped because the callback thread fell :data:`CALLBACK_QUEUE` behind."""
        return self._callbacks.dropped if self._callbacks is not None else 0

    def close(self, timeout_s: float | None = None) -> None:
        """Drain submitted frames (bounded by ``timeout_s``, default the pipeline's drain timeout),
        cancel what is left, release everything (runtime, event-loop thread, callback thread)."""
        if self._closed:
            return
        self._closed = True
        portal, cm, owner = self._portal, self._portal_cm, self._owner
        self._portal = self._portal_cm = None
        drain = timeout_s if timeout_s is not None else self._runtime.config.pipeline.drain_timeout_s
        if portal is not None and cm is not None:
            try:
                if self._stop is not None:
                    portal.call(self._stop.set)
                if owner is not None:
                    try:
                        owner.result(timeout=drain + _RELEASE_MARGIN_S)
                    except concurrent.futures.TimeoutError:
                        log.warning("the runtime did not close within %.0f s: cancelling it", drain + _RELEASE_MARGIN_S)
                    except Exception:
                        log.exception("the runtime failed while running; it was released")
                # Frames still running (past the drain) are cancelled, and the owner if it is stuck.
                portal.call(portal.stop, True)
            finally:
                cm.__exit__(None, None, None)
        if self._callbacks is not None:
            self._callbacks.close(drain)

    @property
    def runtime(self) -> Runtime:
        return self._runtime
