"""LiveRuntime over a fake inference client (no Triton): each sample a host pushes passes the rig's check exactly
once, at intake (the runtime's own check, ``Runtime.intake_check``): the frames made of them are not checked again
in ``Runtime.process``; a stamp the intake maps off the range on the host clock is refused there, as the frame's
check refused it before."""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

import numpy as np
import pytest

from perception.config import LiveConfig, RuntimeConfig, SensorConfig, TriggerConfig, from_data
from perception.kinds import kind_def
from perception.live import LiveRuntime, _runtime
from perception.live._assembler import LiveAssembler
from perception.scheduler import Runtime, _rig_check
from perception.triton import InferRequest
from perception.types import FrameStatus, PointCloudSample, SensorSpec, Transform

WATCHDOG_S = 30.0
MS = 1_000_000
RADAR = ("x", "y", "z", "radial_velocity", "rcs")
RIG = {"radar": SensorSpec("radar", "radar", "radar", Transform(), "/radar", rate_hz=10.0)}


class _Radar:
    """A radar model answering at once with no object."""

    def __init__(self) -> None:
        self.outputs = {
            spec.name: np.zeros(tuple(0 if d == -1 else d for d in spec.dims), dtype=spec.numpy_dtype)
            for spec in kind_def("radar").contract.outputs
        }

    async def infer_request(self, req: InferRequest) -> Any:
        return type("Result", (), {"outputs": self.outputs})()


def _config() -> RuntimeConfig:
    return from_data(
        RuntimeConfig,
        {
            "server": {"url": "localhost:1"},
            "sensors": [{"name": "radar", "kind": "radar", "model": "rad", "transport": "grpc"}],
            "trigger": {"sensor": "radar"},
            "fusion": {"enabled": False},
            "live": {"trigger_tolerance_ms": 600_000, "max_stamp_skew_ms": 600_000},
            "budget": {"total_ms": 60_000, "fusion_reserve_ms": 10},
        },
    )


def test_each_pushed_sample_is_checked_once_at_intake_not_again_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: the intake checked each sample against the rig, and Runtime.process checked the frame's samples
    # again (a JPEG's header and end, a cloud's columns: a few microseconds a sample, every frame).
    checked: list[Any] = []
    lock = threading.Lock()
    real = _rig_check.sample_check

    def counted(sample: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            checked.append(sample.t_ns)
        return real(sample, *args, **kwargs)

    monkeypatch.setattr(_rig_check, "sample_check", counted)
    monkeypatch.setattr(_runtime, "Runtime", functools.partial(Runtime, client=_Radar(), check_models=False))
    t0 = time.monotonic_ns() - 10_000 * MS
    pushed = [t0 + k * 100 * MS for k in range(3)]
    with LiveRuntime(_config(), RIG) as live:
        futures = [live.push(PointCloudSample("radar", t, "radar", np.ones((2, 5), np.float32), RADAR)) for t in pushed]
        results = [f.result(timeout=WATCHDOG_S) for f in futures if f is not None]
    assert [r.status for r in results] == [FrameStatus.OK] * 3
    assert [r.sensors["radar"].status for r in results] == ["ok"] * 3
    assert sorted(checked) == pushed  # once each, at intake


def test_a_stamp_off_the_range_on_the_host_clock_is_refused_at_intake() -> None:
    # The frames carry the stamps on the host clock: the frame's check refused one off the range there (a fixed
    # offset below the clock's start); the intake, whose check is the only one now, refuses it.
    live = LiveConfig(time_base="offset", offset_ms=-1000, max_stamp_skew_ms=5000)
    asm: LiveAssembler[None] = LiveAssembler(
        (SensorConfig("radar", "radar", "m"),), TriggerConfig(sensor="radar"), live, rig=RIG
    )
    sweep = PointCloudSample("radar", 500 * MS, "radar", np.ones((2, 5), np.float32), RADAR)
    said = asm.add(sweep, 100 * MS)
    assert said is not None and said.startswith("invalid: on the host clock: stamp -500000000 ns is outside"), said
    assert asm.stats.invalid_by_sensor == {"radar": 1}
    assert asm.add(PointCloudSample("radar", 1200 * MS, "radar", np.ones((2, 5), np.float32), RADAR), 300 * MS) is None
