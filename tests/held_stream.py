"""A stream of ``Runtime.run`` whose consumer falls behind and then leaves (no Triton: :class:`EmptyAnswers`): the
runtime's ``intake_held`` and ``undelivered`` counted through the real pipeline. Each step waits for the
counter, not the clock."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel
import numpy as np

from perception.config import RuntimeConfig, from_data
from perception.scheduler import Runtime
from perception.types import Frame, FrameResult, PointCloudSample, SensorSpec, Transform

MS = 1_000_000
LIDAR = ("x", "y", "z", "intensity")
#: The rig of :func:`held_stream_config`'s one sensor (a live runtime's).
RIG = {"lidar": SensorSpec("lidar", "lidar", "lidar", Transform.identity(), "/lidar", rate_hz=10.0)}


def held_stream_config() -> RuntimeConfig:
    """One lidar, a source that does not wait (``drop-oldest``), a short drain timeout (the consumer that
    left is waited for that long at close)."""
    return from_data(
        RuntimeConfig,
        {
            "server": {"url": "localhost:1"},  # never reached: the test's client answers
            "sensors": [{"name": "lidar", "kind": "lidar", "model": "lid", "transport": "grpc"}],
            "trigger": {"sensor": "lidar"},
            "fusion": {"enabled": False},
            "budget": {"total_ms": 600_000, "fusion_reserve_ms": 10},  # no frame is late here
            "pipeline": {
                "max_in_flight": 1,
                "admission": "fixed",
                "queue_size": 1,
                "overflow": "drop-oldest",
                "overload": "queue",
                "drain_timeout_s": 0.2,
            },
        },
    )


def lidar_frame(i: int) -> Frame:
    points = np.zeros((4, 4), np.float32)
    return Frame(
        frame_id=i,
        t_ns=i * 100 * MS,
        samples={"lidar": PointCloudSample("lidar", i * 100 * MS, "lidar", points, LIDAR)},
    )


@dataclass
class HeldStream:
    """The stream's generator, kept by its consumer; the records it took; the frames taken from the source."""

    stream: AsyncIterator[FrameResult]
    got: list[FrameResult]
    taken: list[int] = field(default_factory=list)


async def consumer_behind(rt: Runtime) -> HeldStream:
    """Run an endless source that does not wait through ``rt``, its consumer taking the first record and no
    other: returns once the intake waited for it (:data:`perception.scheduler._pipeline.RECORD_BACKLOG`
    records behind), counted in ``rt.intake_held`` while the stream runs. Closing ``rt`` then stops the
    stream: the records the consumer does not take are counted in ``rt.undelivered``."""
    taken: list[int] = []

    async def endless() -> AsyncIterator[Frame]:
        for i in itertools.count():
            taken.append(i)
            yield lidar_frame(i)
            await anyio.lowlevel.checkpoint()

    stream = rt.run(endless())
    got = [await anext(stream)]
    while rt.intake_held == 0:  # noqa: ASYNC110 - the count is what is awaited: nothing else says the wait began
        await anyio.sleep(0.001)
    return HeldStream(stream, got, taken)
