"""LiveRuntime.results() asked after the close ends (async hosts; a fake inference client, no Triton)."""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

import anyio
import numpy as np
import pytest

from perception.live import LiveRuntime, _runtime
from perception.scheduler import Runtime
from perception.types import FrameResult, PointCloudSample

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_live_columns import MS, RIG, WATCHDOG_S, _config, _Radar


def test_results_asked_after_the_close_end(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: a host task iterating results() once the block was left (to read what was left, or started late)
    # got anyio's bare ClosedResourceError (no message), not the end the docstring promises.
    monkeypatch.setattr(_runtime, "Runtime", functools.partial(Runtime, client=_Radar(), check_models=False))
    cloud = np.zeros((1, 5), np.float32)

    async def main() -> tuple[list[FrameResult], list[FrameResult]]:
        with anyio.fail_after(WATCHDOG_S):
            live = LiveRuntime(_config(), RIG)
            inside: list[FrameResult] = []
            async with live:
                t = time.monotonic_ns() - 10_000 * MS
                live.push(PointCloudSample("radar", t, "radar", cloud, ("x", "y", "z", "radial_velocity", "rcs")))
                async for result in live.results():
                    inside.append(result)
                    break
            return inside, [r async for r in live.results()]

    inside, after = anyio.run(main)
    assert [r.frame_id for r in inside] == [0] and after == []
