"""The one lifetime pattern (perception/scheduler/_lifetime.py): one task enters and leaves what it hosts,
a partial open is rolled back, close is bounded and idempotent, an object is opened once."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator

import anyio
import pytest
from test_runtime import config

from perception.errors import RuntimeClosedError
from perception.scheduler import Lifetime, Runtime, ThreadHost, _lifetime, hosted_in_task

#: Safety net of the thread-side tests: a close that hangs fails the test instead of the suite.
WATCHDOG_S = 30.0


class _Resource:
    """An async context manager that records which task entered and left it, and can be made to fail
    opening, hang closing (until cancelled) or fail while it is open."""

    def __init__(self, *, fail_open: bool = False, hang_close: bool = False, fail_close: bool = False) -> None:
        self.fail_open, self.hang_close, self.fail_close = fail_open, hang_close, fail_close
        self.tasks: list[int] = []
        self.released = False
        self.exit_cancelled = False

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[str]:
        self.tasks.append(anyio.get_current_task().id)
        try:
            if self.fail_open:
                raise ValueError("cannot open")
            yield "value"
            if self.hang_close:
                try:
                    await anyio.sleep_forever()
                except anyio.get_cancelled_exc_class():
                    self.exit_cancelled = True
                    raise
            if self.fail_close:
                raise ValueError("failed while open")
        finally:
            self.tasks.append(anyio.get_current_task().id)
            self.released = True


def _loop_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def _closed_within(host: ThreadHost[str], drain_s: float) -> float:
    done = threading.Event()
    t0 = time.monotonic()
    closer = threading.Thread(target=lambda: (host.close(drain_s), done.set()))
    closer.start()
    assert done.wait(WATCHDOG_S), "close did not return"
    closer.join()
    return time.monotonic() - t0


def test_thread_host_enters_and_leaves_in_one_task_and_close_is_idempotent() -> None:
    res = _Resource()
    host = ThreadHost(res.hold, name="test-host-a")
    assert host.state is Lifetime.UNOPENED
    assert host.open() == "value"
    assert host.state is Lifetime.OPENED and _loop_threads("test-host-a")
    assert host.portal.call(lambda: 7) == 7
    _closed_within(host, 1.0)
    host.close(1.0)  # again: nothing to do
    assert host.state is Lifetime.CLOSED and res.released
    assert len(res.tasks) == 2 and res.tasks[0] == res.tasks[1]  # entered and left by the same task
    assert not _loop_threads("test-host-a")  # the event-loop thread was joined
    with pytest.raises(RuntimeClosedError):
        host.portal  # noqa: B018
    with pytest.raises(RuntimeClosedError, match="opened once"):
        host.open()


class _WaitSeen(threading.Event):
    """A threading.Event that notes that a thread waits on it (``waited``)."""

    def __init__(self) -> None:
        super().__init__()
        self.waited = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waited.set()
        return super().wait(timeout)


def test_a_close_while_another_thread_closes_returns_once_everything_is_released() -> None:
    # Before: the second close saw CLOSING and returned at once, with the resource still held: a host
    # whose result callback closed the runtime left its with-block (and its process) mid-release.
    release = threading.Event()

    @contextlib.asynccontextmanager
    async def slow_exit() -> AsyncIterator[str]:
        try:
            yield "value"
            await anyio.to_thread.run_sync(release.wait, WATCHDOG_S)
        finally:
            released.append(True)

    released: list[bool] = []
    host = ThreadHost(slow_exit, name="test-host-e")
    host.open()
    first = threading.Thread(target=host.close, args=(WATCHDOG_S,))
    first.start()
    deadline = time.monotonic() + WATCHDOG_S
    while host.state is not Lifetime.CLOSING and time.monotonic() < deadline:
        time.sleep(0.01)  # until the first close is under way (bounded poll)
    seen: list[bool] = []
    returned = threading.Event()
    waiting = _WaitSeen()
    host._closed = waiting  # the first close sets it once released; a second close waits on it
    second = threading.Thread(target=lambda: (host.close(WATCHDOG_S), seen.append(bool(released)), returned.set()))
    second.start()
    # Until the second close has returned (wrongly early) or waits for the first: its chance to return early
    # is an event, not a 0.5 s wait (which a loaded host could let pass before the thread ever ran).
    deadline = time.monotonic() + WATCHDOG_S
    while not (returned.is_set() or waiting.waited.is_set()) and time.monotonic() < deadline:
        time.sleep(0.001)
    release.set()
    first.join(WATCHDOG_S)
    second.join(WATCHDOG_S)
    assert seen == [True], "the second close returned before the first had released the resource"
    assert host.state is Lifetime.CLOSED and not _loop_threads("test-host-e")


def test_thread_host_rolls_back_a_failed_open() -> None:
    res = _Resource(fail_open=True)
    host = ThreadHost(res.hold, name="test-host-b")
    with pytest.raises(ValueError, match="cannot open"):
        host.open()
    assert res.released and not _loop_threads("test-host-b")  # no thread left behind
    assert host.state is Lifetime.CLOSED
    host.close(1.0)  # harmless


def test_thread_host_cancel_open_gives_up_an_open_under_way_and_rolls_it_back() -> None:
    # The host's stop (a signal) had no way to end an open under way but a KeyboardInterrupt raised into
    # ThreadHost.open and anyio's portal, wherever they stood (perception live: a traceback, a hang, the
    # runtime never released). cancel_open asks the loop to cancel the open; open raises, rolled back.
    entering = threading.Event()
    left = threading.Event()

    @contextlib.asynccontextmanager
    async def slow_open() -> AsyncIterator[str]:
        entering.set()
        try:
            await anyio.sleep_forever()  # a server that takes its time to start
            yield "never"
        finally:
            left.set()

    host: ThreadHost[str] = ThreadHost(slow_open, name="cancel-open-test")
    errors: list[BaseException] = []

    def open_() -> None:
        try:
            host.open()
        except BaseException as exc:
            errors.append(exc)

    opener = threading.Thread(target=open_)
    opener.start()
    assert entering.wait(WATCHDOG_S)
    host.cancel_open()
    opener.join(WATCHDOG_S)
    assert not opener.is_alive() and left.is_set()
    assert [type(e) for e in errors] == [RuntimeClosedError], errors
    assert host.state is Lifetime.CLOSED and not _loop_threads("cancel-open-test")
    host.cancel_open()  # once closed it does nothing


def test_thread_host_close_is_bounded_when_the_exit_hangs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_lifetime, "RELEASE_MARGIN_S", 0.2)
    res = _Resource(hang_close=True)
    host = ThreadHost(res.hold, name="test-host-c")
    host.open()
    with caplog.at_level(logging.WARNING):
        _closed_within(host, 0.0)  # the watchdog only: the bound is 0.2 s
    assert res.exit_cancelled and res.released
    assert "not closed within" in caplog.text
    assert host.state is Lifetime.CLOSED and not _loop_threads("test-host-c")


def test_thread_host_cancels_tasks_still_running_and_logs_a_failure_while_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    res = _Resource(fail_close=True)
    host = ThreadHost(res.hold, name="test-host-d")
    host.open()
    straggler = host.portal.start_task_soon(anyio.sleep_forever)
    with caplog.at_level(logging.ERROR):
        _closed_within(host, 0.0)  # never raised into the closing thread
    assert "failed while running" in caplog.text
    assert straggler.cancelled()
    assert not _loop_threads("test-host-d")


@pytest.mark.anyio
async def test_hosted_in_task_holds_in_its_own_task_and_a_failing_block_waits_for_the_exit() -> None:
    res = _Resource()
    with anyio.fail_after(WATCHDOG_S):  # watchdog
        with pytest.raises(ValueError, match="the host's bug"):
            async with hosted_in_task(res.hold()) as value:
                assert value == "value"
                raise ValueError("the host's bug")
    assert res.released  # left before the error reached the host
    assert res.tasks[0] == res.tasks[1] != anyio.get_current_task().id


@pytest.mark.anyio
async def test_hosted_in_task_raises_an_error_opening_as_it_is() -> None:
    # Before: wrapped in the task group's ExceptionGroup (a host's ``except PerceptionError`` missed it), while
    # ThreadHost and an error of the block raise it as it is
    res = _Resource(fail_open=True)
    with anyio.fail_after(WATCHDOG_S):  # watchdog
        with pytest.raises(ValueError, match="cannot open"):
            async with hosted_in_task(res.hold()):
                raise AssertionError("the block does not run")
    assert res.released


@pytest.mark.anyio
async def test_a_runtime_is_opened_once_and_is_closed_after() -> None:
    class _Client:
        async def infer_request(self, req: object) -> object:
            raise AssertionError("no request in this test")

    rt = Runtime(config("localhost:1", {"lidar": "m"}), client=_Client(), check_models=False)  # type: ignore[arg-type]
    assert rt.state is Lifetime.UNOPENED
    with anyio.fail_after(WATCHDOG_S):  # watchdog
        async with rt:
            assert rt.state is Lifetime.OPENED
        assert rt.state is Lifetime.CLOSED
        with pytest.raises(RuntimeClosedError):
            rt.dispatcher  # noqa: B018
        with pytest.raises(RuntimeClosedError, match="opened once"):
            async with rt:
                pass
