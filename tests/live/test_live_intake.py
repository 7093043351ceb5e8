"""LiveRuntime's intake against the real Triton: pushes that can neither open nor complete a frame leave the
event loop asleep (LAZY_WAIT_NS), and whatever the threads push, nothing is lost."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from test_live_runtime import S, _config

from perception.live import LiveRuntime
from perception.live import _runtime as live_runtime
from perception.server import EmbeddedTriton
from perception.types import EgoPose, PointCloudSample, Transform

#: The live margins of the tests put the loop's deadlines seconds away: let every push that may wait, wait.
FOREVER_NS = 3600 * S


def _count_wakes(live: LiveRuntime) -> list[int]:
    """Counts the wake-ups of the loop that pushes ask for, as they ask (on the pushing thread)."""
    loop = live._loop
    assert loop is not None
    asked = [0]
    original = loop.call_soon_threadsafe

    def call_soon_threadsafe(callback: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if callback == live._set_wake:
            asked[0] += 1
        return original(callback, *args, **kwargs)

    loop.call_soon_threadsafe = call_soon_threadsafe  # type: ignore[method-assign,assignment]
    return asked


def _wait_for(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 60  # a watchdog, not a timing assumption
    while not predicate():
        assert time.monotonic() < deadline, "the loop never took the sample"
        time.sleep(0.005)


def test_ego_poses_do_not_wake_the_loop_and_are_all_taken(
    triton: EmbeddedTriton, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live_runtime, "LAZY_WAIT_NS", FOREVER_NS)
    cfg, rig, samples = _config(triton.grpc_url)
    lidar = next(s for s in samples if s.sensor == "lidar_top")
    with LiveRuntime(cfg, rig, fusion=None) as live:
        asked = _count_wakes(live)
        now = time.monotonic_ns()
        frame = live.push(dataclasses.replace(lidar, t_ns=now))
        assert frame is not None and asked == [1]  # the trigger's sample opens a frame: the loop wakes
        _wait_for(lambda: live.status()["intake"]["samples"] == 1)  # taken: the loop has a deadline now
        for k in range(20):  # 50 Hz odometry around the frame
            live.push_ego(EgoPose(now - 100_000_000 + k * 20_000_000, Transform.identity(), (5.0, 0.0, 0.0)))
        assert asked == [1]  # none of them woke it (the old intake woke it for each that found it asleep)
    status = live.status()
    assert status["intake"]["ego_poses"] == 20 and status["intake"]["invalid"] == 0
    assert frame.result(timeout=30).frame_id == 0 and status["frames"] == 1


def test_a_burst_of_pushes_from_several_threads_loses_nothing(
    triton: EmbeddedTriton, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live_runtime, "LAZY_WAIT_NS", FOREVER_NS)  # every push that may wait does
    cfg, rig, samples = _config(triton.grpc_url)
    lidar = next(s for s in samples if s.sensor == "lidar_top")
    radar = {name: next(s for s in samples if s.sensor == name) for name in ("radar_front", "radar_rear")}
    per_thread, sweeps = 150, 5
    start = threading.Barrier(5)
    futures: list[Any] = []

    with LiveRuntime(cfg, rig, fusion=None) as live:

        def poses() -> None:
            start.wait()
            for _ in range(per_thread):
                live.push_ego(EgoPose(time.monotonic_ns(), Transform.identity(), (5.0, 0.0, 0.0)))

        def returns(sample: PointCloudSample) -> None:
            start.wait()
            for _ in range(per_thread):  # as fast as the thread goes, each stamped as it is pushed
                live.push(dataclasses.replace(sample, t_ns=time.monotonic_ns(), points=np.array(sample.points)))

        def sweeps_() -> None:
            start.wait()
            for _ in range(sweeps):
                futures.append(live.push(dataclasses.replace(lidar, t_ns=time.monotonic_ns())))
                time.sleep(0.01)  # spacing the sweeps apart (their order, not the test's timing)

        threads = [threading.Thread(target=poses) for _ in range(2)]
        threads += [threading.Thread(target=returns, args=(s,)) for s in radar.values()]
        threads.append(threading.Thread(target=sweeps_))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    intake = live.status()["intake"]
    assert intake["ego_poses"] == 2 * per_thread and intake["intake_overflow"] == 0
    # every sample pushed is in exactly one of the sample counters
    counted = sum(
        intake[k] for k in ("samples", "invalid", "late", "clock_jump", "out_of_order", "duplicate", "unknown_sensor")
    )
    assert counted == 2 * per_thread + sweeps, intake
    assert intake["samples"] >= sweeps and all(f is not None for f in futures)
