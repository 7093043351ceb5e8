"""LiveRuntime over a fake inference client (no Triton): what the assembler still held when serving was
abandoned at close (its frames waiting for room in the pipeline past the drain timeout) is recorded."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import numpy as np
import pytest

from perception.config import RuntimeConfig, from_data
from perception.live import LiveRuntime, _runtime
from perception.scheduler import CANCELLED_IN_FLIGHT, Runtime
from perception.triton import InferRequest
from perception.types import FrameResult, FrameStatus, PointCloudSample, SensorSpec, Transform

LIDAR = ("x", "y", "z", "intensity")
WATCHDOG_S = 30.0
RIG = {"lidar": SensorSpec("lidar", "lidar", "lidar", Transform(), "/lidar", rate_hz=10.0)}
MS = 1_000_000


class _Hangs:
    """A model that never answers (its requests end when they are cancelled); counts the requests sent."""

    def __init__(self) -> None:
        self.sent = 0

    async def infer_request(self, req: InferRequest) -> Any:
        self.sent += 1
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


def _sweep(t_ns: int) -> PointCloudSample:
    return PointCloudSample("lidar", t_ns, "lidar", np.zeros((10, 4), dtype=np.float32), LIDAR)


def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WATCHDOG_S  # a watchdog: the condition comes without any wait of its own
    while not condition():
        assert time.monotonic() < deadline, "watchdog"
        time.sleep(0.001)


def test_frames_the_assembler_held_when_serving_was_abandoned_are_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: serving abandoned past the drain timeout while the assembler waited for room in the pipeline
    # (overflow: block), the sample pushed meanwhile was never taken: its future was never answered (a host
    # waiting for it hung), its frame had no record (on_result, results()), and no count said so.
    client = _Hangs()
    monkeypatch.setattr(_runtime, "Runtime", functools.partial(Runtime, client=client, check_models=False))
    cfg = from_data(
        RuntimeConfig,
        {
            "server": {"url": "localhost:1"},
            "sensors": [{"name": "lidar", "kind": "lidar", "model": "lid", "transport": "grpc"}],
            "trigger": {"sensor": "lidar"},
            "fusion": {"enabled": False},
            # stamps on the rig's 10 Hz grid, taken earlier: frames come from the trigger's samples alone (no
            # timer), however long the test waits between them
            "live": {"trigger_tolerance_ms": 600_000, "max_stamp_skew_ms": 600_000},
            "budget": {"total_ms": 60_000, "fusion_reserve_ms": 10},  # no request is cut before the close
            "pipeline": {
                "max_in_flight": 1,
                "admission": "fixed",
                "queue_size": 1,
                "overflow": "block",
                "drain_timeout_s": 0.05,
            },
        },
    )
    got: list[FrameResult] = []
    lock = threading.Lock()

    def on_result(result: FrameResult) -> None:
        with lock:
            got.append(result)

    live = LiveRuntime(cfg, RIG, on_result=on_result)
    futures = []
    t0 = time.monotonic_ns() - 10_000 * MS
    with live:
        # frame 0 in flight (never answered), 1 queued, 2 waiting for room in the queue, 3 and 4 in the stream
        # to the pipeline: the assembler waits to hand over frame 5, and takes nothing more
        for i in range(6):
            futures.append(live.push(_sweep(t0 + i * 100 * MS)))
            _until(lambda n=i + 1: live.status()["intake"]["frames"] == n)
        _until(lambda: client.sent == 1)
        futures.append(live.push(_sweep(t0 + 600 * MS)))  # pushed before the close: its frame has a record
    assert all(f is not None and f.done() for f in futures)
    assert [r.frame_id for r in got] == list(range(7))
    assert [r.reason for r in got[:6]] == [CANCELLED_IN_FLIGHT] * 6
    assert got[6].status is FrameStatus.DROPPED and got[6].reason == _runtime._ABANDONED_UNASSEMBLED
    for future in futures:  # each future has the very record on_result got
        assert future is not None
        record = future.result(timeout=0)
        assert got[record.frame_id] is record
    status = live.status()
    assert status["frames"] == 7 and status["intake"]["closed_unassembled"] == 1
