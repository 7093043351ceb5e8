"""A thread-backed facade for hosts that are not async (future and callback styles).

The runtime runs on its own event-loop thread (an anyio blocking portal). ``submit(frame)`` returns
a :class:`concurrent.futures.Future`; ``submit(frame, callback)`` also calls ``callback(result)`` —
callbacks run on a separate callback thread, never on the I/O thread, in completion order, so a slow
callback cannot stall the scheduler. Frames submitted concurrently are processed concurrently up to
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
from perception.scheduler._runtime import Runtime
from perception.scheduler._session import FusionStage
from perception.types import Frame, FrameResult, SensorSpec, SessionSource

__all__ = ["ThreadedRuntime"]

log = logging.getLogger(__name__)

Callback = Callable[[FrameResult], None]


class ThreadedRuntime:
    """``with ThreadedRuntime(config) as rt: fut = rt.submit(frame)`` — no asyncio needed by the host."""

    def __init__(
        self,
        config: RuntimeConfig,
        *,
        source: SessionSource | None = None,
        rig: Mapping[str, SensorSpec] | None = None,
        fusion: FusionStage | Literal["profile"] | None = "profile",
    ) -> None:
        self._runtime = Runtime(config, source=source, rig=rig, fusion=fusion)
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._callbacks = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="perception-cb")
        self._slots: anyio.Semaphore | None = None
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
            portal.call(self._runtime.__aenter__)
            self._slots = portal.call(anyio.Semaphore, self._runtime.config.pipeline.max_in_flight)
        except BaseException as exc:
            cm.__exit__(type(exc), exc, exc.__traceback__)
            self._callbacks.shutdown(wait=False)
            raise
        self._portal_cm, self._portal = cm, portal

    def submit(self, frame: Frame, callback: Callback | None = None) -> concurrent.futures.Future[FrameResult]:
        if self._closed or self._portal is None:
            raise RuntimeClosedError("the runtime is closed", frame=frame.frame_id)
        future: concurrent.futures.Future[FrameResult] = self._portal.start_task_soon(self._process, frame)
        if callback is not None:
            future.add_done_callback(lambda f: self._callbacks.submit(self._run_callback, callback, f))
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
        try:
            callback(future.result())
        except Exception:
            log.exception("result callback raised")

    def close(self, timeout_s: float | None = None) -> None:
        """Drain submitted frames (bounded by the pipeline's drain timeout), then release everything."""
        if self._closed:
            return
        self._closed = True
        portal, cm = self._portal, self._portal_cm
        self._portal = self._portal_cm = None
        if portal is not None and cm is not None:
            drain = timeout_s if timeout_s is not None else self._runtime.config.pipeline.drain_timeout_s
            try:
                portal.call(self._drain, drain)
                portal.call(self._runtime.aclose)
            finally:
                cm.__exit__(None, None, None)
        self._callbacks.shutdown(wait=True)

    async def _drain(self, timeout_s: float) -> None:
        assert self._slots is not None
        k = self._runtime.config.pipeline.max_in_flight
        with anyio.move_on_after(timeout_s):
            for _ in range(k):
                await self._slots.acquire()

    @property
    def runtime(self) -> Runtime:
        return self._runtime
