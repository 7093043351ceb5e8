"""The one readiness wait (client, server package and embedded server start all poll with it)."""

from __future__ import annotations

import anyio
import pytest

from perception.triton import wait_until_ready


@pytest.mark.anyio
async def test_polls_until_nothing_keeps_it_from_ready() -> None:
    answers = ["loading", "loading", None]

    async def problem() -> str | None:
        return answers.pop(0)

    with anyio.fail_after(30):  # watchdog
        assert await wait_until_ready(problem, 60, poll_s=0) == (True, None)
    assert answers == []


@pytest.mark.anyio
async def test_time_up_answers_the_last_problem() -> None:
    async def problem() -> str | None:
        return "not ready"  # no checkpoint: the first probe always finishes

    with anyio.fail_after(30):
        assert await wait_until_ready(problem, 0.05, poll_s=0.01) == (False, "not ready")


@pytest.mark.anyio
async def test_a_hopeless_probe_ends_the_wait_by_raising() -> None:
    async def problem() -> str | None:
        raise RuntimeError("process exited")

    with anyio.fail_after(30), pytest.raises(RuntimeError, match="exited"):
        await wait_until_ready(problem, 60)
