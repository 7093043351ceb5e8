"""The one readiness wait: poll what keeps a server from being ready until nothing does, or time is up."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

__all__ = ["wait_until_ready"]

P = TypeVar("P")


async def wait_until_ready(
    problem: Callable[[], Awaitable[P | None]], timeout_s: float, *, poll_s: float = 0.1
) -> tuple[bool, P | None]:
    """Ask ``problem()`` what keeps a server from being ready every ``poll_s`` seconds, until it answers
    None or ``timeout_s`` passes (a probe still running then is cancelled).

    Returns ``(True, None)`` when ready, else ``(False, the last problem)`` (None when no probe finished
    in time). A probe that finds the wait hopeless (a server process that exited, an address silent
    too long) raises: the exception ends the wait. :meth:`TritonClient.wait_ready`,
    :func:`perception.server.wait_for_server` and the embedded server's start all wait with this.
    """
    last: P | None = None
    with anyio.move_on_after(timeout_s):
        while True:
            last = await problem()
            if last is None:
                return True, None
            await anyio.sleep(poll_s)
    return False, last
