"""The callback thread of the facades for hosts that are not async (perception/scheduler/_callbacks.py):
its state is one :class:`~perception._lifetime.Lifetime`; closing runs what is queued, closing twice
returns at once; a closed queue takes no more calls."""

from __future__ import annotations

import logging
import threading

import pytest

from perception._lifetime import Lifetime
from perception.scheduler import CallbackQueue


def test_close_runs_what_is_queued_then_reports_closed() -> None:
    ran: list[int] = []
    q = CallbackQueue(4, name="test-cb")
    assert q.state is Lifetime.OPENED
    q.submit(ran.append, 1)
    q.submit(ran.append, 2)
    assert q.close(30.0)  # generous: a safety net, not a timing
    assert q.state is Lifetime.CLOSED and not q.alive and ran == [1, 2]
    assert q.close(30.0)  # idempotent
    q.submit(ran.append, 3)  # refused, counted (it was refused without a count: a host's callback lost unsaid)
    assert q.state is Lifetime.CLOSED and ran == [1, 2] and len(q) == 0 and q.dropped == 1


def test_a_stuck_callback_is_abandoned_and_the_queue_closed() -> None:
    started, release = threading.Event(), threading.Event()

    def stuck() -> None:
        started.set()
        release.wait()

    q = CallbackQueue(4, name="test-cb-stuck")
    q.submit(stuck)
    assert started.wait(30.0)  # safety net: the callback thread is inside the callback
    q.submit(lambda: None)  # still waiting when the bound passes: dropped
    assert not q.close(0.0)
    assert q.state is Lifetime.CLOSED and q.dropped == 1
    assert not q.close(0.0)  # returns at once: the thread is still in the callback
    release.set()


def test_a_callback_that_closes_the_queue_is_not_waited_for() -> None:
    # Before: close on the callback thread joined that very thread: RuntimeError("cannot join current
    # thread"), counted as the callback's failure, with the host's close left half done.
    ran: list[int] = []
    gate = threading.Event()
    q = CallbackQueue(4, name="test-cb-self")

    def close_it() -> None:
        gate.wait(30.0)  # the next call is queued by then
        ran.append(0 if q.close(30.0) else -1)  # returns at once: the thread cannot end under itself

    q.submit(close_it)
    q.submit(ran.append, 1)
    gate.set()
    q._thread.join(30.0)  # the safety net: the thread runs what was queued, then ends
    assert ran == [-1, 1] and q.failed == 0 and q.dropped == 0
    assert q.state is Lifetime.CLOSED and not q.alive


def test_a_raising_callback_is_counted_and_logged_once_per_type(caplog: pytest.LogCaptureFixture) -> None:
    # Before: a traceback logged for every call that raised (a callback failing on every result at
    # 10 Hz is a traceback flood). Now the first of each type is logged, and close logs the counts.
    def bad(kind: type[Exception]) -> None:
        raise kind("the host's bug")

    q = CallbackQueue(64, name="test-cb-raise")
    with caplog.at_level(logging.WARNING, logger="perception.scheduler._callbacks"):
        for i in range(23):
            q.submit(bad, ValueError if i < 20 else KeyError)
        assert q.close(30.0)
    assert q.failed == 23
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert [r.exc_info[0] for r in tracebacks if r.exc_info] == [ValueError, KeyError]
    assert [r.getMessage() for r in caplog.records if not r.exc_info] == [
        "result callbacks raised 23 times (ValueError x20, KeyError x3)"
    ]
