"""A frame's CPU work handed to a worker thread with one trip through the event loop.

``anyio.to_thread.run_sync`` goes through the event loop twice before the thread gets the work (its
own checkpoint, then its capacity limiter's); a frame that hands its work off twice (reading the drive,
fusion) pays four loop iterations for it, ~0.15 ms of the client's CPU per frame in a lockstep replay
(issue 44). :func:`run_off_loop` gives the work to the event loop's own executor at once and waits for
it the way ``run_sync`` does: it is not started when the caller is already cancelled, and once started
it is waited for even when the caller is cancelled meanwhile (the cancellation lands at the caller's
next checkpoint), so the work is never abandoned half-way (fusion's tracker state stays whole).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.lowlevel

__all__ = ["run_off_loop"]

T = TypeVar("T")


async def run_off_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a worker thread of the running event loop's executor (see the module docs)."""
    await anyio.lowlevel.checkpoint_if_cancelled()
    future = asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args))
    with anyio.CancelScope(shield=True):
        return await future
