"""Runtime.run's streams over a fake inference client (no Triton): a stream still starting as the runtime
closes, a source that fails, a consumer that falls behind and leaves. Each step waits for an event, not the
clock."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
import pytest
from fake_answers import EmptyAnswers
from held_stream import consumer_behind, held_stream_config

from perception.config import RuntimeConfig, from_data
from perception.kinds import kind_def
from perception.scheduler import Lifetime, Runtime
from perception.scheduler._admission import Admission, AdmissionControl
from perception.triton import InferRequest
from perception.types import Frame, FrameResult, FrameStatus, PointCloudSample

pytestmark = pytest.mark.anyio

MS = 1_000_000
LIDAR = ("x", "y", "z", "intensity")
#: Safety net: a close or a stream that never ends fails the test instead of hanging the suite.
WATCHDOG_S = 20.0


class _Answers:
    """A model that answers each request with empty outputs of its kind; with ``gate``, once it is set."""

    def __init__(self, gate: anyio.Event | None = None) -> None:
        self.outputs = {
            spec.name: np.zeros(tuple(0 if d == -1 else d for d in spec.dims), dtype=spec.numpy_dtype)
            for spec in kind_def("lidar").contract.outputs
        }
        self.gate = gate
        self.asked: list[int | None] = []
        self.two_asked = anyio.Event()

    async def infer_request(self, req: InferRequest) -> Any:
        self.asked.append(req.frame)
        if len(self.asked) == 2:
            self.two_asked.set()
        if self.gate is not None:
            await self.gate.wait()
        return type("Result", (), {"outputs": self.outputs})()


def _config(**pipeline: Any) -> RuntimeConfig:
    return from_data(
        RuntimeConfig,
        {
            "server": {"url": "localhost:1"},  # never reached: the test's client answers
            "sensors": [{"name": "lidar", "kind": "lidar", "model": "lid", "transport": "grpc"}],
            "trigger": {"rate_hz": 10},
            "fusion": {"enabled": False},
            "budget": {"total_ms": 600_000, "fusion_reserve_ms": 10},  # no frame is late here
            "pipeline": pipeline,
        },
    )


def _frame(i: int) -> Frame:
    points = np.zeros((4, 4), np.float32)
    return Frame(
        frame_id=i,
        t_ns=i * 100 * MS,
        samples={"lidar": PointCloudSample("lidar", i * 100 * MS, "lidar", points, LIDAR)},
    )


class _AttachedAsTheRuntimeCloses:
    """An admission provider whose attach answers only once the runtime has begun closing (a remote
    admission's call under way as the host leaves ``async with``)."""

    def __init__(self) -> None:
        self.rt: Runtime | None = None
        self.attaching = anyio.Event()

    @contextlib.asynccontextmanager
    async def open(self, max_in_flight: int, deadline_ns: int, *, adaptive: bool) -> AsyncIterator[AdmissionControl]:
        assert self.rt is not None
        self.attaching.set()
        while self.rt.state is Lifetime.OPENED:  # the host leaves its block meanwhile
            await anyio.lowlevel.checkpoint()
        yield Admission(max_in_flight, deadline_ns, adaptive=adaptive)


async def test_a_stream_still_starting_as_the_runtime_closes_is_stopped(caplog: pytest.LogCaptureFixture) -> None:
    # Before: the close stopped only the streams already registered and never set the runtime's stop, so
    # a stream whose pipeline was made after the host left took its source (here a live one: it never
    # ends) with every frame failing in process() (a traceback each), and the close never returned.
    caplog.set_level(logging.WARNING)
    provider = _AttachedAsTheRuntimeCloses()
    taken: list[int] = []
    got: list[FrameResult] = []

    async def live() -> AsyncIterator[Frame]:
        for i in range(3):
            taken.append(i)
            yield _frame(i)
            await anyio.lowlevel.checkpoint()
        await anyio.sleep_forever()  # no more messages: a live source waits for the next one

    async def consume(rt: Runtime) -> None:
        async for r in rt.run(live()):
            got.append(r)

    with anyio.fail_after(WATCHDOG_S):
        async with anyio.create_task_group() as outer:
            rt = Runtime(_config(), client=_Answers(), check_models=False, fusion=None, admission=provider)
            provider.rt = rt
            async with rt:
                outer.start_soon(consume, rt)
                await provider.attaching.wait()  # the stream is starting: its pipeline not made yet
            assert rt.state is Lifetime.CLOSED  # the close returned
    assert rt.stopping
    assert [r.frame_id for r in got] == taken  # every frame taken has its record
    assert all(r.status is FrameStatus.DROPPED and (r.reason or "").startswith("shutdown") for r in got)
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


class DriveReadError(Exception):
    """A drive's reader failing mid-stream (the host's own error type)."""


async def test_an_error_of_the_source_is_raised_as_it_is_after_the_frames_taken_finish() -> None:
    # Before: the source's error cancelled the frames taken (in flight: 'shutdown: cancelled while in flight',
    # queued: 'shutdown: never started'), and the consumer got an ExceptionGroup, which `except DriveReadError`
    # missed.
    gate = anyio.Event()
    client = _Answers(gate)

    async def failing() -> AsyncIterator[Frame]:
        for i in range(3):
            yield _frame(i)
        await client.two_asked.wait()  # frames 0 and 1 in flight, frame 2 queued
        gate.set()  # they are answered once the source has failed
        raise DriveReadError("corrupt message at frame 3")

    got: list[FrameResult] = []
    with anyio.fail_after(WATCHDOG_S):
        async with Runtime(
            _config(max_in_flight=2, admission="fixed", overload="queue"),
            client=client,
            check_models=False,
            fusion=None,
        ) as rt:
            with pytest.raises(DriveReadError, match="frame 3"):
                async for r in rt.run(failing()):
                    got.append(r)
    assert [(r.frame_id, r.status) for r in got] == [(i, FrameStatus.OK) for i in range(3)]


async def test_the_runtime_counts_a_running_stream_s_held_intake_and_then_its_undelivered_records() -> None:
    # The runtime summed its streams' intake_held and undelivered only once a stream ended: a live host's status
    # (the ROS node's /diagnostics) read 0 of the stream that runs for its whole life.
    with anyio.fail_after(WATCHDOG_S):
        async with Runtime(held_stream_config(), client=EmptyAnswers(), check_models=False, fusion=None) as rt:
            held = await consumer_behind(rt)  # returns once rt.intake_held counts the running stream's wait
            assert rt.intake_held == 1 and rt.undelivered == 0  # counted once a wait, logged once
        rest = [r async for r in held.stream]  # what the stream's buffer kept for the consumer that left
    assert rt.intake_held == 1 and rt.undelivered > 0
    delivered = [r.frame_id for r in held.got + rest]
    assert delivered == list(range(len(delivered)))
    assert len(delivered) + rt.undelivered == len(held.taken)  # every frame taken: delivered, or counted
