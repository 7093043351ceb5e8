"""The dispatcher's reading of one request's outcomes, for its model's circuit breaker: the same for a frame's
request, judged at the join, and for a measuring request, judged when it ends."""

from __future__ import annotations

import time

import anyio
import numpy as np
import pytest

from perception._imageio import encode_jpeg
from perception.config import PipelineConfig, SensorConfig
from perception.scheduler._circuit import CircuitBreaker, CircuitState
from perception.scheduler._dispatch import Dispatcher
from perception.triton import InferRequest
from perception.types import Frame, ImageSample, PointCloudSample, SensorStatus

MS = 1_000_000


class _Hung:
    """A model that takes requests and never answers."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def infer_request(self, req: InferRequest) -> object:
        self.sent.append(req.request_id)
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


def _wanting_a_measurement(breaker: CircuitBreaker, service_ns: int) -> None:
    """``breaker``'s model measured at ``service_ns``, then late (given 1.5x that) until a measuring request is
    wanted: load or a fault? (:mod:`perception.scheduler._circuit`)."""
    breaker.observe(service_ns)
    for t in range(1000):
        breaker.record_late(t, service_ns * 3 // 2)
        if breaker.measuring:
            break
    assert breaker.measuring


@pytest.mark.anyio
async def test_a_measuring_request_unanswered_beside_a_refused_camera_is_a_fault_as_at_the_join() -> None:
    """Two cameras batched to one model: one's image does not decode (its own input, refused before the
    request), the other's is sent and never answered. At a frame's join that is a late answer of the model;
    a measuring request given 3x the model's time and still unanswered is a fault (its circuit opens). It was
    read as "nothing reached the model" (no verdict), which the join never says while a member was sent."""
    sensors = [SensorConfig("cam_a", "camera", "cam"), SensorConfig("cam_b", "camera", "cam")]
    small = encode_jpeg(np.full((32, 48, 3), 128, np.uint8))  # decoded on the event loop, before any await
    samples = {
        "cam_a": ImageSample("cam_a", 0, "cam_a", b"not a jpeg"),
        "cam_b": ImageSample("cam_b", 0, "cam_b", small),
    }
    client = _Hung()
    dispatcher = Dispatcher(client, sensors, PipelineConfig())  # type: ignore[arg-type]
    breaker = dispatcher.breakers["cam"]
    with anyio.fail_after(30):
        async with anyio.create_task_group() as measurements:
            dispatcher.measure_in(measurements)
            _wanting_a_measurement(breaker, 500 * MS)  # a measuring request is given 1.5 s
            # the frame's deadline: ample for the request to be prepared and sent (on a busy host too), then cut
            results = await dispatcher.dispatch(Frame(7, 0, samples), time.monotonic_ns() + 300 * MS)
            a, b = results["cam_a"], results["cam_b"]
            assert a.status is SensorStatus.ERROR and a.error is not None and "cam_a" in a.error
            assert b.status is SensorStatus.LATE and "measuring the model" in (b.error or "")
        # the measuring request has ended (its task group waited for it)
    assert client.sent == ["7:cam_a,cam_b"]  # one request, sent: cam_b in it
    assert breaker.measurements == {"answered": 0, "unanswered": 1, "abandoned": 0}
    assert breaker.state is CircuitState.OPEN


@pytest.mark.anyio
async def test_a_model_shared_by_sensors_not_batched_sends_one_measuring_request() -> None:
    """Two radars on one model (one request each): the breaker asks for one measuring request. Each radar's
    request was sent as one, and each reported a verdict: two "unanswered" for one measurement."""
    sensors = [SensorConfig("radar_a", "radar", "rad"), SensorConfig("radar_b", "radar", "rad")]
    points = np.zeros((10, 5), np.float32)
    fields = ("x", "y", "z", "radial_velocity", "rcs")
    samples = {n: PointCloudSample(n, 0, n, points, fields) for n in ("radar_a", "radar_b")}
    client = _Hung()
    dispatcher = Dispatcher(client, sensors, PipelineConfig())  # type: ignore[arg-type]
    breaker = dispatcher.breakers["rad"]
    with anyio.fail_after(30):
        async with anyio.create_task_group() as measurements:
            dispatcher.measure_in(measurements)
            _wanting_a_measurement(breaker, 100 * MS)  # a measuring request is given 300 ms
            results = await dispatcher.dispatch(Frame(7, 0, samples), time.monotonic_ns() + 200 * MS)
            measuring = [r for r in results.values() if "measuring the model" in (r.error or "")]
            assert [r.sensor for r in measuring] == ["radar_a"]  # the model's first request (configuration order)
            assert results["radar_b"].status is SensorStatus.LATE
    assert sorted(client.sent) == ["7:radar_a", "7:radar_b"]
    assert breaker.measurements == {"answered": 0, "unanswered": 1, "abandoned": 0}
    assert breaker.state is CircuitState.OPEN and breaker.opened_count == 1
