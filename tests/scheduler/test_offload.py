"""run_off_loop: a frame's CPU work in a worker thread, waited for as ``anyio.to_thread.run_sync`` does
(not started when the caller is already cancelled; once started, never abandoned half-way)."""

from __future__ import annotations

import threading

import anyio
import anyio.lowlevel
import pytest

from perception.scheduler import run_off_loop


@pytest.mark.anyio
async def test_the_work_runs_in_another_thread_and_answers_or_raises() -> None:
    with anyio.fail_after(30):
        total, thread = await run_off_loop(lambda a, b: (a + b, threading.get_ident()), 2, 3)
        assert total == 5 and thread != threading.get_ident()

        def fails() -> None:
            raise ValueError("bad frame")

        with pytest.raises(ValueError, match="bad frame"):
            await run_off_loop(fails)


@pytest.mark.anyio
async def test_a_cancelled_caller_does_not_start_the_work() -> None:
    ran = threading.Event()
    with anyio.fail_after(30):
        with anyio.CancelScope() as scope:
            scope.cancel()
            await run_off_loop(ran.set)
        assert scope.cancelled_caught
    assert not ran.is_set()


@pytest.mark.anyio
async def test_started_work_is_waited_for_when_the_caller_is_cancelled_meanwhile() -> None:
    """The fusion of a frame whose caller is cancelled finishes before the caller goes on (the tracker's
    state is never left half-updated by an abandoned thread); the cancellation then lands."""
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def work() -> str:
        started.set()
        release.wait(30)
        finished.set()
        return "fused"

    after: list[str] = []
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:

            async def caller() -> None:
                with anyio.CancelScope() as scope:
                    cancel_scopes.append(scope)
                    after.append(await run_off_loop(work))
                    await anyio.lowlevel.checkpoint()  # the cancellation lands here
                    after.append("not reached")
                after.append("finished" if finished.is_set() else "abandoned")

            cancel_scopes: list[anyio.CancelScope] = []
            tg.start_soon(caller)
            await anyio.to_thread.run_sync(started.wait, 30)
            cancel_scopes[0].cancel()
            await anyio.sleep(0.05)  # the caller is still waiting for its thread
            assert after == []
            release.set()
    assert after == ["fused", "finished"]
