"""One lifetime pattern for every object that owns tasks or a thread.

* Its state is one :class:`~perception._lifetime.Lifetime` (defined at the bottom layer, so transport,
  drives and the recorders use it too; re-exported here): ``UNOPENED``, ``OPENED``, ``CLOSING``,
  ``CLOSED``. An object is opened once; opening it again is a
  :class:`~perception.errors.RuntimeClosedError`.
* Its resources and task groups are entered with ``async with`` in one method (anyio's
  :class:`~anyio.AsyncContextManagerMixin`), so one task enters and leaves them, in reverse order, and a
  partial open is rolled back by the same ``async with``.
* A host that is not async holds it through a :class:`ThreadHost`: an event-loop thread (an anyio
  blocking portal) in which one task enters and leaves the context manager
  (:meth:`BlockingPortal.wrap_async_context_manager`); closing it is bounded and idempotent.
* An async host that must not be cancelled by a failure inside it (its task groups) holds it in a task
  of its own: :func:`hosted_in_task`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Generic, TypeVar

import anyio
import anyio.abc
from anyio.from_thread import BlockingPortal, start_blocking_portal

from perception._lifetime import Lifetime
from perception.errors import RuntimeClosedError

__all__ = ["RELEASE_MARGIN_S", "Lifetime", "ThreadHost", "hosted_in_task"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Beyond the drain timeout, how long a close waits for the hosted object's own release (server,
#: channels, shared memory) before it is cancelled.
RELEASE_MARGIN_S = 30.0


class ThreadHost(Generic[T]):
    """An async context manager held from threads: ``host.open()`` ... ``host.close(drain_s)``.

    ``open`` starts an event-loop thread (named ``name``) and enters the context manager ``factory()``
    in one task there, returning what it yields; an error opening it is raised here, with the thread
    stopped. ``close`` leaves it in the same task: its exit gets ``drain_s`` plus
    :data:`RELEASE_MARGIN_S` before it is cancelled (a warning); tasks still running in the portal
    (:attr:`portal`) are cancelled, and the thread is joined. A failure of the context manager while it
    was open is logged there, never raised into the closing thread. ``close`` is idempotent: a close
    while another thread's is under way returns once that one has released everything.
    """

    def __init__(self, factory: Callable[[], AbstractAsyncContextManager[T]], *, name: str) -> None:
        self._factory = factory
        self._name = name
        self.state = Lifetime.UNOPENED
        self._portal: BlockingPortal | None = None
        self._release_s = RELEASE_MARGIN_S  # the exit's bound, set by close
        self._held = contextlib.ExitStack()
        self._closing = threading.Lock()  # state checked and set at once by concurrent closes
        self._closed = threading.Event()  # set when a close has released everything
        self._loop_thread: int | None = None  # the event-loop thread's ident, while it holds the object
        #: While the object is being entered: its scope (cancel_open cancels it) and the loop running it.
        self._opening: anyio.CancelScope | None = None
        self._opening_loop: asyncio.AbstractEventLoop | None = None
        self._cancel_open = False  # cancel_open was called (before or while the object was being entered)

    @property
    def portal(self) -> BlockingPortal:
        """The event loop's portal, while open (else :class:`RuntimeClosedError`)."""
        if self.state is not Lifetime.OPENED or self._portal is None:
            raise RuntimeClosedError(f"the {self._name} is {self.state.value}")
        return self._portal

    def in_loop_thread(self) -> bool:
        """Whether the calling thread is the event-loop thread (while it holds the object)."""
        return self._loop_thread is not None and threading.get_ident() == self._loop_thread

    def open(self) -> T:
        self.state.check_unopened(self._name)
        self.state = Lifetime.CLOSED  # unless it opens: what a failed open entered is left (rolled back)
        with contextlib.ExitStack() as held:
            portal = held.enter_context(start_blocking_portal(backend="asyncio", name=self._name))
            # last out: tasks still running in the portal (past the drain) are cancelled
            held.callback(portal.call, portal.stop, True)
            value = held.enter_context(portal.wrap_async_context_manager(self._bounded()))
            self._held = held.pop_all()
        self._portal = portal
        self.state = Lifetime.OPENED
        return value

    @contextlib.asynccontextmanager
    async def _bounded(self) -> AsyncIterator[T]:
        """The context manager, whose exit is cancelled once past the close's bound. The bound is the
        deadline of a scope entered before it (so its task groups exit at the nesting they entered)."""
        self._loop_thread = threading.get_ident()
        opened = False
        with anyio.CancelScope() as scope:
            self._opening_loop = asyncio.get_running_loop()
            self._opening = scope
            if self._cancel_open:  # asked before this loop ran (cancel_open: no loop to call yet)
                scope.cancel()
            async with self._factory() as value:
                self._opening = None
                opened = True
                try:
                    yield value
                finally:
                    scope.deadline = anyio.current_time() + self._release_s
        self._opening = None
        if not opened:  # cancel_open: what the open entered was left (rolled back) by its own exits
            raise RuntimeClosedError(f"the {self._name} was closed while it opened")
        if scope.cancelled_caught:
            log.warning("%s: not closed within %.0f s; cancelled", self._name, self._release_s)

    def cancel_open(self) -> None:
        """Give up an open under way (:meth:`open` then raises :class:`RuntimeClosedError`, what it entered
        rolled back; called before :meth:`open`, the open gives up at once); once open, or closed, this
        does nothing. Callable from any thread and from a signal
        handler: it takes no lock and waits for nothing (a signal landing inside :meth:`open` raised into
        anyio's portal, half-registered: the command failed with a traceback, hung, or leaked the runtime)."""
        self._cancel_open = True
        loop = self._opening_loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has ended
                loop.call_soon_threadsafe(self._cancel_opening)

    def _cancel_opening(self) -> None:
        if self._opening is not None:
            self._opening.cancel()

    def close(self, drain_s: float) -> None:
        """Leave the context manager (bounded: ``drain_s`` + :data:`RELEASE_MARGIN_S`), stop the thread.

        Called on the event-loop thread (a future's done callback runs there), it cannot wait for that
        thread: a thread of its own closes it, and this returns at once."""
        if self.state is Lifetime.OPENED and self.in_loop_thread():
            threading.Thread(target=self.close, args=(drain_s,), name=f"{self._name}-close").start()
            return
        with self._closing:
            first = not self.state.done
            if first:
                self.state = Lifetime.CLOSING
        if not first:
            # another thread is closing it: wait for its release (bounded by that close's own bound),
            # unless this is the event-loop thread, which that close is waiting for
            if self.state is Lifetime.CLOSING and threading.get_ident() != self._loop_thread:
                self._closed.wait()
            return
        self._release_s = drain_s + RELEASE_MARGIN_S
        try:
            self._held.close()
        except Exception:
            log.exception("%s failed while running; it was released", self._name)
        finally:
            self._portal = None
            self.state = Lifetime.CLOSED
            self._closed.set()


@contextlib.asynccontextmanager
async def hosted_in_task(cm: AbstractAsyncContextManager[T]) -> AsyncIterator[T]:
    """``async with hosted_in_task(cm) as value:`` -- ``cm`` entered and left by a task of its own, held
    while the block runs: the async twin of :class:`ThreadHost`. A failure inside ``cm`` after it opened
    does not cancel the block (as long as ``cm`` does not raise it); leaving the block waits for ``cm``'s
    exit, also when the block raised (a cancellation of the block cancels it). An error opening ``cm``, and
    one of the block, is raised as it is, not wrapped in an exception group (as :class:`ThreadHost` raises
    it: a host's ``except PerceptionError`` catches it either way)."""
    release = anyio.Event()
    released = anyio.Event()

    async def hold(*, task_status: anyio.abc.TaskStatus[T] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            async with cm as value:
                task_status.started(value)
                await release.wait()
        finally:
            released.set()

    error: Exception | None = None
    async with anyio.create_task_group() as tg:
        try:
            value: T = await tg.start(hold)
        except Exception as exc:
            error = exc  # cm did not open (start raises it; the task group is not given it): nothing to hold
        else:
            try:
                yield value
            except Exception as exc:
                error = exc  # raised as it is once cm was left, not wrapped in the task group's group
            finally:
                release.set()
                await released.wait()
    if error is not None:
        raise error
