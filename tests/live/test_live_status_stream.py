"""``LiveRuntime.status()`` says what its runtime's stream counted of the results' consumer: the frames whose
intake waited for it far behind (``intake_held``) and the records it did not take (``undelivered``), while the
stream runs and once it closed. No Triton: the stream is a runtime's over a fake client, the status the live
runtime's own."""

from __future__ import annotations

import anyio
import pytest
from fake_answers import EmptyAnswers
from held_stream import RIG, consumer_behind, held_stream_config

from perception.live import LiveRuntime
from perception.scheduler import Runtime

pytestmark = pytest.mark.anyio


async def test_status_says_the_runtime_s_held_intake_and_undelivered_records() -> None:
    # Runtime.intake_held and Runtime.undelivered were logged (a warning each) and reached no status, so neither
    # `perception live`'s summary nor the ROS node's /diagnostics.
    live = LiveRuntime(held_stream_config(), RIG, fusion=None)
    assert (live.status()["intake_held"], live.status()["undelivered"]) == (0, 0)
    with anyio.fail_after(20):  # watchdog
        async with Runtime(held_stream_config(), client=EmptyAnswers(), check_models=False, fusion=None) as rt:
            live._runtime = rt  # the live runtime's stream: one whose consumer fell behind, then left
            await consumer_behind(rt)
            live._publish_frames()  # as after each result
            assert (live.status()["intake_held"], live.status()["undelivered"]) == (1, 0), live.status()
    live._publish_frames()  # as at close, once the runtime closed
    assert rt.undelivered > 0
    assert (live.status()["intake_held"], live.status()["undelivered"]) == (1, rt.undelivered), live.status()
