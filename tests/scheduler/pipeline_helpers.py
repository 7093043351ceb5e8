"""What the pipeline tests share: a pipeline run to its end, its results collected."""

from __future__ import annotations

from collections.abc import AsyncIterable

import anyio
import anyio.lowlevel

from perception.scheduler import OrderedPipeline, Superseded
from perception.types import Frame, FrameResult


async def collect(pipeline: OrderedPipeline, source: AsyncIterable[Frame | Superseded]) -> list[FrameResult]:
    """Run ``pipeline`` over ``source`` and return every result it sent, in order."""
    send, recv = anyio.create_memory_object_stream[FrameResult](100)
    out: list[FrameResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(pipeline.run, source, send)
        async with recv:
            async for r in recv:
                out.append(r)
    return out


async def settled() -> None:
    """Return once every other task is blocked (:func:`anyio.wait_all_tasks_blocked`), without its poll.

    On asyncio that function sleeps 0.1 s whenever it finds a task woken but not yet run, which a chain of
    wake-ups (one task ending lets the next run) nearly always leaves: test_order's hypothesis test paid it
    ~300 times. Yielding to the loop first lets such chains run out; the wait itself is still what decides.
    Only for tasks alone: work on another thread (a runtime's fusion stage) is not waited for by either,
    and a test of it that relied on the 0.1 s for that thread to finish would turn on the clock."""
    for _ in range(20):
        await anyio.lowlevel.checkpoint()
    await anyio.wait_all_tasks_blocked()
