"""LiveRuntime.batch: what a host hands over at once (a ROS node's messages held while it reopened its runtime)
is taken whole, the frames it opens made with all of it."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from test_live_lifetime import _config

from perception.live import LiveRuntime
from perception.server import EmbeddedTriton
from perception.types import FrameResult, SensorStatus

MS = 1_000_000
S = 1_000 * MS


def test_samples_handed_over_in_a_batch_make_their_frame_together(triton: EmbeddedTriton) -> None:
    # A host that held messages (a ROS node reopening its runtime as the clock went back) hands them over late:
    # their stamps are old, so the frame the trigger's sweep opens is due at once. Pushed one by one, the loop
    # took the sweep, made its frame, and the other sensors' samples pushed a moment later missed it (each
    # 'missing'). In a batch, the loop takes them together.
    cfg, rig, samples = _config(triton.grpc_url)
    trigger = cfg.trigger.sensor
    t0 = next(s.t_ns for s in samples if s.sensor == trigger)
    first: dict[str, Any] = {}
    for s in samples:  # each sensor's first sample at or after the sweep
        if s.t_ns >= t0 and s.sensor not in first:
            first[s.sensor] = s
    others = [s for name, s in first.items() if name != trigger]
    assert others, "the bundled drive has sensors besides the trigger"
    got: list[FrameResult] = []
    with LiveRuntime(cfg, rig, on_result=got.append) as live:
        now = time.monotonic_ns()
        base = now - 2 * S  # held for 2 s: arrived then, handed over now

        def arrived(s: Any) -> tuple[Any, tuple[int, int]]:
            at = base + (s.t_ns - t0)
            return dataclasses.replace(s, t_ns=at), (at + 1 * MS, now)

        with live.batch():
            future = live.push(*arrived(first[trigger]))
            assert future is not None
            time.sleep(0.3)  # the loop had the sweep, due at once, before the others (not a synchronisation)
            for s in others:
                live.push(*arrived(s))
        result = future.result(timeout=30)  # type: ignore[attr-defined]
    missing = sorted(n for n, r in result.sensors.items() if r.status is SensorStatus.MISSING)
    assert missing == [], (missing, {n: r.status for n, r in result.sensors.items()})
