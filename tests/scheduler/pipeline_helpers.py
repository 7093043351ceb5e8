"""What the pipeline tests share: a pipeline run to its end, its results collected."""

from __future__ import annotations

from collections.abc import AsyncIterable

import anyio

from perception.scheduler import OrderedPipeline
from perception.types import Frame, FrameResult


async def collect(pipeline: OrderedPipeline, source: AsyncIterable[Frame]) -> list[FrameResult]:
    """Run ``pipeline`` over ``source`` and return every result it sent, in order."""
    send, recv = anyio.create_memory_object_stream[FrameResult](100)
    out: list[FrameResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(pipeline.run, source, send)
        async with recv:
            async for r in recv:
                out.append(r)
    return out
