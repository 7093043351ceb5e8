"""The runtime against the real embedded Triton: concurrency, deadlines, circuit, contracts, facades."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import gc
import itertools
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
import pytest

from perception._imageio import encode_jpeg
from perception.config import RuntimeConfig, from_data
from perception.errors import InputError, ModelContractError, ModelNotReadyError, RuntimeClosedError
from perception.scheduler import Lifetime, Runtime, ThreadedRuntime, abandoned_fusion_running
from perception.scheduler._admission import HOLD
from perception.scheduler._circuit import LOAD_PATIENCE
from perception.scheduler._tensors import INLINE_DECODE_PIXELS
from perception.server import EmbeddedTriton
from perception.triton import ClientOptions, InferRequest, TritonClient
from perception.types import (
    Frame,
    FrameResult,
    FrameStatus,
    ImageSample,
    PointCloudSample,
    SensorResult,
    SensorStatus,
)

pytestmark = pytest.mark.anyio

MS = 1_000_000
LIDAR = ("x", "y", "z", "intensity")
RADAR = ("x", "y", "z", "radial_velocity", "rcs")


def config(url: str, models: dict[str, str], **extra: Any) -> RuntimeConfig:
    kinds = {"lidar": "lidar", "radar": "radar", "cam_a": "camera", "cam_b": "camera"}
    data: dict[str, Any] = {
        "server": {"url": url, "channels": 2},
        "sensors": [{"name": n, "kind": kinds[n], "model": m, "transport": "grpc"} for n, m in models.items()],
        "trigger": {"rate_hz": 10},
        "fusion": {"enabled": False},
        # Generous by default: the CI machine is shared; tests that are about deadlines set their own.
        "budget": {"total_ms": 3000, "fusion_reserve_ms": 10},
    }
    for key, value in extra.items():
        data[key] = value
    return from_data(RuntimeConfig, data)


def _hung_start(url: str) -> dict[str, Any]:
    """The ``server`` section of the tests with a hanging model. Each model's warm-up at start is bounded
    by the start-up timeout (and at most 10 s), which the hanging model always runs out: 3 s here, still
    ample for the other model's warm-up on a loaded host."""
    return {"url": url, "channels": 2, "startup_timeout_s": 3.0}


def _late_lidar(url: str, lidar: str = "hung_lidar") -> RuntimeConfig:
    """The tests of a lidar late on every frame (hung, or slow) beside a radar that answers: frames of 150 ms, the
    lidar's circuit opened by 2 failures and open for the rest of the test."""
    return config(
        url,
        {"lidar": lidar, "radar": "sleepy_radar"},
        budget={"total_ms": 150, "fusion_reserve_ms": 10},
        pipeline={"circuit": {"failure_threshold": 2, "reset_after_ms": 60_000}},
        server=_hung_start(url),
    )


def frame(i: int, names: list[str]) -> Frame:
    t = i * 100 * MS
    rng = np.random.default_rng(i)
    samples: dict[str, Any] = {}
    for n in names:
        if n == "lidar":
            samples[n] = PointCloudSample(n, t, n, rng.normal(size=(1000, 4)).astype(np.float32), LIDAR)
        elif n == "radar":
            samples[n] = PointCloudSample(n, t, n, rng.normal(size=(20, 5)).astype(np.float32), RADAR)
        else:
            img = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
            samples[n] = ImageSample(n, t, n, encode_jpeg(img))
    return Frame(frame_id=i, t_ns=t, samples=samples)


class _AllInFlight:
    """The real client; while ``gate`` is on, each request waits (bounded) until ``n`` requests are in
    flight at once before going to the server: a dispatcher that sends them one by one gets none through
    the gate (each waits out the bound alone)."""

    def __init__(self, client: TritonClient, n: int) -> None:
        self.client, self.n = client, n
        self.gate = False
        self.entered = 0
        self.all_in = anyio.Event()
        self.met_together: list[bool] = []

    async def infer_request(self, req: InferRequest) -> Any:
        if self.gate:
            self.entered += 1
            if self.entered == self.n:
                self.all_in.set()
            with anyio.move_on_after(10):
                await self.all_in.wait()
            self.met_together.append(self.all_in.is_set())
        return await self.client.infer_request(req)


async def test_requests_run_concurrently_and_join(triton: EmbeddedTriton) -> None:
    cfg = config(
        triton.grpc_url,
        {"lidar": "sleepy_lidar", "radar": "sleepy_radar", "cam_a": "sleepy_camera"},
        budget={"total_ms": 60_000, "fusion_reserve_ms": 10},  # the join is not what this test is about
    )
    with anyio.fail_after(90):
        async with TritonClient(ClientOptions(urls=(triton.grpc_url,))) as client:
            gated = _AllInFlight(client, 3)
            async with Runtime(cfg, client=gated) as rt:
                await rt.process(frame(0, ["lidar", "radar", "cam_a"]))  # warm-up
                gated.gate = True
                r = await rt.process(frame(1, ["lidar", "radar", "cam_a"]))
    assert r.status is FrameStatus.OK
    assert {s.status for s in r.sensors.values()} == {SensorStatus.OK}
    # The three requests were in flight at the same time (no wall-clock comparison: a gate that opens
    # only once all three have been issued; how much time the overlap saves is measured in bench/).
    assert gated.met_together == [True, True, True]
    latencies = [s.latency_ns for s in r.sensors.values()]
    assert min(latencies) >= 20 * MS  # each at least its model's sleep
    assert r.latency.stages["dispatch"] >= max(latencies)  # and the join waited for the last one


async def test_an_open_runtime_freezes_the_startup_heap(triton: EmbeddedTriton) -> None:
    # Full collections walk the frames' objects, not the runtime's ~150,000 long-lived ones (perception._gc):
    # 75-82 ms each in a replay of the bundled drive before; unfrozen once closed.
    cfg = config(triton.grpc_url, {"radar": "sleepy_radar"})
    assert gc.get_freeze_count() == 0
    with anyio.fail_after(90):
        async with Runtime(cfg) as rt:
            assert gc.get_freeze_count() > 0
            r = await rt.process(frame(0, ["radar"]))
    assert r.status is FrameStatus.OK
    assert gc.get_freeze_count() == 0


async def test_hanging_model_is_late_by_the_deadline_then_circuit_opens(triton: EmbeddedTriton) -> None:
    cfg = _late_lidar(triton.grpc_url)
    with anyio.fail_after(60):
        async with Runtime(cfg) as rt:
            results = [await rt.process(frame(i, ["lidar", "radar"])) for i in range(4)]
    for r in results:
        assert r.status is FrameStatus.DEGRADED
        assert r.sensors["radar"].status is SensorStatus.OK
        # The join waited for the lidar until its deadline (140 ms), then gave up on the 60 s sleeper:
        # bounded by the deadline, not by the model (how close to 140 ms is timed in bench/).
        waited = r.latency.stages["dispatch"] + r.latency.stages["join_wait"]
        assert waited < 10_000 * MS
        if r.sensors["lidar"].status is SensorStatus.LATE:
            assert waited >= 139 * MS
    assert [r.sensors["lidar"].status for r in results] == [
        SensorStatus.LATE,
        SensorStatus.LATE,
        SensorStatus.SKIPPED,
        SensorStatus.SKIPPED,
    ]
    assert "circuit open" in (results[2].sensors["lidar"].error or "")


class _SignalOnRequest:
    """The real client, setting an event when a given model's request for a given frame goes out."""

    def __init__(self, client: TritonClient, model: str, frame_id: int) -> None:
        self.client = client
        self.model, self.frame_id = model, frame_id
        self.sent = anyio.Event()

    async def infer_request(self, req: InferRequest) -> Any:
        if req.model == self.model and req.frame == self.frame_id:
            self.sent.set()
        return await self.client.infer_request(req)


async def test_a_cancelled_half_open_probe_is_released_and_the_model_probed_again(triton: EmbeddedTriton) -> None:
    # hung_lidar never answers in time: frames 0 and 1 open its circuit at t = 100 ms (sensor time);
    # frame 5 (t = 500 ms, 400 ms later) is its half-open probe. That frame is cancelled by its caller
    # while the probe is out. The probe must be given back: frame 6 probes the model again (late),
    # instead of finding its probe still reserved and skipping the model for good.
    names = ["lidar", "radar"]
    cfg = config(
        triton.grpc_url,
        {"lidar": "hung_lidar", "radar": "sleepy_radar"},
        budget={"total_ms": 400, "fusion_reserve_ms": 10},
        pipeline={"circuit": {"failure_threshold": 2, "reset_after_ms": 400}},
        server=_hung_start(triton.grpc_url),
    )
    with anyio.fail_after(60):
        async with TritonClient(ClientOptions(urls=(triton.grpc_url,))) as client:
            signal = _SignalOnRequest(client, "hung_lidar", 5)
            async with Runtime(cfg, client=signal) as rt:
                before = [await rt.process(frame(i, names)) for i in (0, 1, 2)]
                scope = anyio.CancelScope()

                async def cancelled_frame() -> None:
                    with scope:
                        await rt.process(frame(5, names))
                    assert scope.cancelled_caught

                async with anyio.create_task_group() as tg:
                    tg.start_soon(cancelled_frame)
                    await signal.sent.wait()  # the probe is out
                    scope.cancel()
                after = await rt.process(frame(6, names))
                breaker = rt.dispatcher.breakers["hung_lidar"]
    assert [r.sensors["lidar"].status for r in before] == [SensorStatus.LATE, SensorStatus.LATE, SensorStatus.SKIPPED]
    assert after.sensors["lidar"].status is SensorStatus.LATE, after.sensors["lidar"].error  # probed again
    assert after.sensors["radar"].status is SensorStatus.OK
    assert breaker.state.value == "open"  # the new probe failed: open again, to be probed after 400 ms


class _Delays:
    """The real client, a model's requests given their time through its ``delay_ms`` request parameter
    (``perception.modelkit._testing``): its warm-up's ``warm_up_ms``, every frame's ``frame_ms`` (None: the
    model's own). (Not :class:`TritonClient` itself: the runtime warms one instance up.)"""

    def __init__(self, client: TritonClient, model: str, warm_up_ms: float, frame_ms: float | None) -> None:
        self.client, self.model, self.warm_up_ms, self.frame_ms = client, model, warm_up_ms, frame_ms

    async def infer_request(self, req: InferRequest) -> Any:
        if req.model == self.model:
            delay_ms = self.warm_up_ms if req.frame is None else self.frame_ms
            if delay_ms is not None:
                req = dataclasses.replace(req, parameters={"delay_ms": delay_ms})
        return await self.client.infer_request(req)


async def test_a_model_that_answers_its_warm_up_then_hangs_is_measured_and_its_circuit_opens(
    triton: EmbeddedTriton,
) -> None:
    # Its circuit's only measure is the warm-up's answer, 900 ms (a cold first request). Every frame then gave it
    # 140 ms, less than that: no late answer counted ("not given the time the model takes") and the hung lidar
    # stayed on for good. Now 8 lates in a row, unanswered, send one request that may run 3x the measure past
    # its frame: no answer, so the circuit opens.
    cfg = _late_lidar(triton.grpc_url)
    results: list[FrameResult] = []
    with anyio.fail_after(60):
        async with TritonClient(ClientOptions(urls=(triton.grpc_url,))) as client:
            delays = _Delays(client, "hung_lidar", warm_up_ms=900.0, frame_ms=None)  # frames: its own 60 s
            async with Runtime(cfg, client=delays) as rt:
                breaker = rt.dispatcher.breakers["hung_lidar"]
                measured = breaker.service_ns
                while not results or results[-1].sensors["lidar"].status is not SensorStatus.SKIPPED:
                    results.append(await rt.process(frame(len(results), ["lidar", "radar"])))
                circuit = rt.circuits()["hung_lidar"]
    assert circuit["state"] == "open" and circuit["opened"] == 1
    assert circuit["measurements"] == {"answered": 0, "unanswered": 1, "abandoned": 0}
    assert measured is not None and measured >= 900 * MS
    statuses = [r.sensors["lidar"].status for r in results]
    assert set(statuses[:-1]) == {SensorStatus.LATE}, statuses
    errors = [r.sensors["lidar"].error or "" for r in results[:-1]]
    assert sum("measuring the model" in e for e in errors) == 1  # the frame whose request was the measure
    assert "measuring the model" in errors[LOAD_PATIENCE * 2]  # the one after the patience's last late
    assert breaker.measurements == {"answered": 0, "unanswered": 1, "abandoned": 0}
    assert breaker.state.value == "open" and breaker.opened_count == 1
    assert all(r.sensors["radar"].status is SensorStatus.OK for r in results)


async def test_a_slow_model_late_on_every_frame_is_measured_and_stays_on(triton: EmbeddedTriton) -> None:
    # Measured at 150 ms, it takes 200 ms a request from the first frame on, beyond the frames' 140 ms: late on
    # every frame, like a hung one. Its measuring requests are answered (in ~200 ms of the 450 they may take):
    # slow, not stopped, it stays on, its measure raised to what it takes now.
    cfg = _late_lidar(triton.grpc_url, "sleepy_lidar")
    frames = 3 * LOAD_PATIENCE * 2
    with anyio.fail_after(60):
        async with TritonClient(ClientOptions(urls=(triton.grpc_url,))) as client:
            delays = _Delays(client, "sleepy_lidar", warm_up_ms=150.0, frame_ms=200.0)
            async with Runtime(cfg, client=delays) as rt:
                breaker = rt.dispatcher.breakers["sleepy_lidar"]
                results = [await rt.process(frame(i, ["lidar", "radar"])) for i in range(frames)]
                # a measuring request still out is cut by the close, not waited for
    statuses = [r.sensors["lidar"].status for r in results]
    assert SensorStatus.SKIPPED not in statuses, statuses
    assert breaker.state.value == "closed" and breaker.opened_count == 0
    assert breaker.measurements["answered"] >= 1 and breaker.measurements["unanswered"] == 0
    assert breaker.service_ns is not None and breaker.service_ns >= 200 * MS


async def test_missing_sample_is_missing_not_waited_for(triton: EmbeddedTriton) -> None:
    cfg = config(triton.grpc_url, {"lidar": "sleepy_lidar", "radar": "sleepy_radar"})
    with anyio.fail_after(60):
        async with Runtime(cfg) as rt:
            r = await rt.process(frame(0, ["lidar"]))
    assert r.sensors["radar"].status is SensorStatus.MISSING
    assert r.sensors["lidar"].status is SensorStatus.OK
    assert r.status is FrameStatus.DEGRADED


@pytest.mark.parametrize("mode", ["batched", "per_camera"])
async def test_cameras_batched_or_per_camera(triton: EmbeddedTriton, mode: str) -> None:
    cfg = config(
        triton.grpc_url, {"cam_a": "sleepy_camera", "cam_b": "sleepy_camera"}, pipeline={"camera_requests": mode}
    )
    with anyio.fail_after(60):
        async with Runtime(cfg) as rt:
            r = await rt.process(frame(0, ["cam_a", "cam_b"]))
    assert r.status is FrameStatus.OK
    for name in ("cam_a", "cam_b"):
        out = r.sensors[name].outputs
        assert out["BOXES"].shape == (100, 4)
        assert int(out["COUNT"][0]) == 0


@pytest.mark.parametrize("mode", ["batched", "per_camera"])
async def test_large_images_decode_in_worker_threads(triton: EmbeddedTriton, mode: str) -> None:
    # Over INLINE_DECODE_PIXELS an image is decoded in a worker thread (several at once when batched);
    # the small one beside it (per_camera) on the event loop.
    big = np.random.default_rng(0).integers(0, 255, (240, 320, 3), dtype=np.uint8)
    assert big.shape[0] * big.shape[1] > INLINE_DECODE_PIXELS
    base = frame(0, ["cam_a", "cam_b"])
    samples = dict(base.samples)
    samples["cam_a"] = ImageSample("cam_a", 0, "cam_a", encode_jpeg(big))
    if mode == "batched":
        samples["cam_b"] = ImageSample("cam_b", 0, "cam_b", encode_jpeg(big[::-1]))
    cfg = config(
        triton.grpc_url, {"cam_a": "sleepy_camera", "cam_b": "sleepy_camera"}, pipeline={"camera_requests": mode}
    )
    with anyio.fail_after(60):
        async with Runtime(cfg) as rt:
            r = await rt.process(Frame(frame_id=0, t_ns=0, samples=samples))
    assert r.status is FrameStatus.OK, {n: s.error for n, s in r.sensors.items()}
    assert all(int(s.outputs["COUNT"][0]) == 0 for s in r.sensors.values())


class _IssueOrder:
    """The real client, noting the order in which requests are issued."""

    def __init__(self, client: TritonClient) -> None:
        self.client = client
        self.models: list[str] = []

    async def infer_request(self, req: InferRequest) -> Any:
        self.models.append(req.model)
        return await self.client.infer_request(req)


async def test_the_slowest_model_is_requested_first(triton: EmbeddedTriton) -> None:
    names = {"lidar": "sleepy_lidar", "radar": "sleepy_radar", "cam_a": "sleepy_camera"}
    cfg = config(triton.grpc_url, names)
    with anyio.fail_after(60):
        async with TritonClient(ClientOptions(urls=(triton.grpc_url,))) as client:
            issued = _IssueOrder(client)
            async with Runtime(cfg, client=issued) as rt:
                orders, expected = [], []
                for i in range(3):
                    issued.models.clear()
                    expected.append(dict(rt.dispatcher.expected_ns))
                    r = await rt.process(frame(i, list(names)))
                    assert r.status is FrameStatus.OK
                    orders.append(list(issued.models))
    assert orders[0] == list(names.values())  # no history yet: configuration order
    for order, known in zip(orders[1:], expected[1:], strict=True):
        assert order == sorted(known, key=lambda m: -known[m])  # by running-average latency
    # Each model's average is at least its sleep (20, 30, 40 ms).
    assert expected[-1]["sleepy_camera"] > 40 * MS and expected[-1]["sleepy_lidar"] > 20 * MS


async def test_warm_up_reaches_every_model_instance(triton: EmbeddedTriton) -> None:
    cfg = config(triton.grpc_url, {"lidar": "sleepy_lidar"})  # instance_group count 2
    with anyio.fail_after(60):
        async with TritonClient(ClientOptions(urls=(triton.grpc_url,))) as client:
            assert (await client.model_contract("sleepy_lidar")).instances == 2
            before = await client.model_statistics("sleepy_lidar")
            async with Runtime(cfg):
                pass
            # Triton counts a request a moment after answering it: wait (bounded) for both warm-ups
            after = await client.model_statistics(
                "sleepy_lidar", at_least={"inference_count": before["inference_count"] + 2}
            )
    assert after["inference_count"] - before["inference_count"] == 2


async def test_pipeline_emits_in_order_with_k_in_flight(triton: EmbeddedTriton) -> None:
    cfg = config(
        triton.grpc_url,
        {"lidar": "sleepy_lidar", "radar": "sleepy_radar"},
        pipeline={"max_in_flight": 3, "queue_size": 2, "overflow": "block"},
    )
    with anyio.fail_after(60):
        async with Runtime(cfg) as rt:
            out = [r async for r in rt.run(frame(i, ["lidar", "radar"]) for i in range(12))]
    assert [r.frame_id for r in out] == list(range(12))
    assert all(r.status is FrameStatus.OK for r in out)


async def test_unknown_model_and_wrong_contract_are_clear_errors(triton: EmbeddedTriton) -> None:
    with anyio.fail_after(60):
        cfg = config(
            triton.grpc_url, {"lidar": "no_such_model"}, server={"url": triton.grpc_url, "startup_timeout_s": 2}
        )
        with pytest.raises(ModelNotReadyError, match="no_such_model"):
            async with Runtime(cfg):
                pass
        cfg = config(triton.grpc_url, {"lidar": "sleepy_radar"})
        with pytest.raises(ModelContractError, match="sleepy_radar"):
            async with Runtime(cfg):
                pass


def test_threaded_facade_future_and_callback(triton: EmbeddedTriton) -> None:
    # submitted at once and all processed: queued, not shed (the overload policy is tested below)
    cfg = config(triton.grpc_url, {"lidar": "sleepy_lidar", "radar": "sleepy_radar"}, pipeline={"overload": "queue"})
    got: list[tuple[int, str]] = []
    done = threading.Event()

    def callback(result: Any) -> None:
        got.append((result.frame_id, threading.current_thread().name))
        if len(got) == 3:
            done.set()

    with ThreadedRuntime(cfg) as rt:
        futures = [rt.submit(frame(i, ["lidar", "radar"]), callback) for i in range(3)]
        results = [f.result(timeout=30) for f in concurrent.futures.as_completed(futures)]
        assert done.wait(10)
    assert sorted(r.frame_id for r in results) == [0, 1, 2]
    assert all(r.status is FrameStatus.OK for r in results)
    assert all(name.startswith("perception-cb") for _, name in got)  # never on the I/O thread


class _GatedFusion:
    """A fusion stage (called on fusion's worker thread, not the event loop's) that waits for ``gate``
    (bounded: a watchdog) before fusing nothing."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def __call__(self, frame: Frame, results: Mapping[str, SensorResult]) -> tuple[tuple[()], dict[str, int]]:
        assert self.gate.wait(60)
        return (), {}


def test_threaded_close_from_a_future_done_callback_closes_the_runtime(triton: EmbeddedTriton) -> None:
    # Before: a submitted frame's future is answered on the event-loop thread, where close() could not
    # join that thread: "perception-loop failed while running" was logged, the facade marked itself closed
    # and the runtime (client, channels, shared memory, the loop thread) was never released.
    cfg = config(triton.grpc_url, {"lidar": "sleepy_lidar", "radar": "sleepy_radar"}, pipeline={"overload": "queue"})
    closed = threading.Event()
    fusion = _GatedFusion()  # no future is answered before its done callback is on (and the loop runs on)
    called_on: list[str] = []

    def close_from_the_callback(_: concurrent.futures.Future[FrameResult]) -> None:
        called_on.append(threading.current_thread().name)
        rt.close()
        closed.set()

    before = {t.ident for t in threading.enumerate()}
    rt = ThreadedRuntime(cfg, fusion=fusion)
    with rt:
        try:
            futures = [rt.submit(frame(i, ["lidar", "radar"])) for i in range(3)]
            futures[0].add_done_callback(close_from_the_callback)
        finally:
            fusion.gate.set()
        assert closed.wait(60)
        assert called_on == ["perception-loop"]  # the event-loop thread, where close cannot wait for itself
        assert [f.result(timeout=60).status for f in futures] == [FrameStatus.OK] * 3
    assert rt.runtime.state is Lifetime.CLOSED  # released
    with pytest.raises(RuntimeClosedError):
        rt.submit(frame(3, ["lidar"]))
    for t in threading.enumerate():
        if t.ident not in before and "_poll_wrapper" not in t.name and not t.name.startswith("AnyIO worker"):
            t.join(10)
            assert not t.is_alive(), t.name


def test_threaded_close_is_bounded_with_a_stuck_callback_and_releases_its_threads(triton: EmbeddedTriton) -> None:
    # The host's callback never returns while the runtime runs: at most `callback_queue` calls wait (the
    # rest are dropped and counted), the futures are answered regardless, and close returns (bounded by
    # the drain timeout) instead of waiting for the callback; the runtime's threads are gone after it.
    cfg = config(
        triton.grpc_url,
        {"lidar": "sleepy_lidar", "radar": "sleepy_radar"},
        pipeline={"drain_timeout_s": 1, "overload": "queue"},  # all 8 processed (queued, not shed)
    )
    release = threading.Event()
    calls: list[int] = []

    def stuck(result: Any) -> None:
        calls.append(result.frame_id)
        release.wait(60)

    before = {t.ident for t in threading.enumerate()}
    rt = ThreadedRuntime(cfg, callback_queue=2)
    with rt:
        futures = [rt.submit(frame(i, ["lidar", "radar"]), stuck) for i in range(8)]
        results = [f.result(timeout=30) for f in futures]
    release.set()
    assert [r.status for r in results] == [FrameStatus.OK] * 8
    assert len(calls) == 1 and rt.callbacks_dropped >= 8 - 1 - 2
    for t in threading.enumerate():
        if t.ident not in before and "_poll_wrapper" not in t.name:
            t.join(10)  # the abandoned callback thread ends once released
            assert not t.is_alive(), t.name


async def test_fault_injection_from_the_profile_delays_and_fails_requests(triton: EmbeddedTriton) -> None:
    cfg = config(
        triton.grpc_url,
        {"lidar": "sleepy_lidar", "radar": "sleepy_radar"},
        budget={"total_ms": 400, "fusion_reserve_ms": 10},
        faults=[
            {"model": "sleepy_lidar", "delay_ms": 30_000},  # far past the 390 ms join
            {"model": "sleepy_radar", "error_probability": 1.0},
        ],
        pipeline={"circuit": {"failure_threshold": 100}},
    )
    with anyio.fail_after(60):
        async with Runtime(cfg) as rt:
            results = [await rt.process(frame(i, ["lidar", "radar"])) for i in range(2)]
    for r in results:
        assert r.sensors["lidar"].status is SensorStatus.LATE
        assert r.sensors["radar"].status is SensorStatus.ERROR
        assert "injected fault" in (r.sensors["radar"].error or "")
        joined = r.latency.stages["dispatch"] + r.latency.stages["join_wait"]
        assert joined < 30_000 * MS  # the injected delay was cut by the join


def test_threaded_frames_take_the_adaptive_admission_in_submission_order(triton: EmbeddedTriton) -> None:
    # The same admission as a stream of Runtime.run: it starts at one frame in flight and holds there
    # until it has measured HOLD frames, so the first HOLD frames submitted at once run one after
    # another, in submission order, never overlapping -- however loaded the host (no timing in it).
    cfg = config(
        triton.grpc_url,
        {"lidar": "sleepy_lidar", "radar": "sleepy_radar"},
        pipeline={"max_in_flight": 4, "admission": "adaptive", "overload": "queue"},  # queued, not shed
    )
    with ThreadedRuntime(cfg) as rt:
        futures = [rt.submit(frame(i, ["lidar", "radar"])) for i in range(HOLD)]
        results = [f.result(timeout=60) for f in futures]
        admission = rt.runtime.admission
        assert admission is not None
        report = admission.report()
    assert [r.status for r in results] == [FrameStatus.OK] * HOLD
    # each frame's run: from the end of its wait for a slot (its clock starts when it is submitted) to its result
    spans = sorted(
        (r.latency.start_ns + r.latency.stages["schedule_wait"], r.latency.start_ns + r.latency.total_ns, r.frame_id)
        for r in results
    )
    assert [fid for _, _, fid in spans] == list(range(HOLD))  # first come, first served
    assert all(end <= next_start for (_, end, _), (next_start, _, _) in itertools.pairwise(spans)), spans
    assert (report["mode"], report["peak"], report["max_in_flight"]) == ("adaptive", 1, 4), report


def test_threaded_frames_submitted_faster_than_they_finish_are_processed_or_shed(triton: EmbeddedTriton) -> None:
    # Ten frames submitted at once: those that find no slot wait, and each one submitted supersedes the
    # older ones waiting when they cannot all finish within their budgets (the overload policy,
    # pipeline.overload: shed by default). However fast the host,
    # every future gets its one result, each frame is processed or shed with reason overload, and the
    # last submitted (always the freshest waiting) is processed.
    cfg = config(triton.grpc_url, {"lidar": "sleepy_lidar", "radar": "sleepy_radar"}, pipeline={"max_in_flight": 1})
    with ThreadedRuntime(cfg) as rt:
        results = [f.result(timeout=60) for f in [rt.submit(frame(i, ["lidar", "radar"])) for i in range(10)]]
    assert [r.frame_id for r in results] == list(range(10))
    assert results[-1].status is FrameStatus.OK
    for r in results:
        assert r.status is FrameStatus.OK or (
            r.status is FrameStatus.DROPPED and (r.reason or "").startswith("overload") and not r.sensors
        ), r


def test_threaded_frames_with_a_late_sensor_are_reported_late_to_the_admission(triton: EmbeddedTriton) -> None:
    # A sensor late at the join halves the adaptive admission's limit even when the frame kept its
    # deadline's headroom: ThreadedRuntime must say so when it gives the slot back, as a stream's
    # pipeline does (issue 45, item 7's ended_late, on the threaded facade). The join cuts the hanging
    # lidar off at 2 s, far inside the headroom (0.6 x 10 s): only the late sensor marks the frames.
    cfg = config(
        triton.grpc_url,
        {"lidar": "hung_lidar", "radar": "sleepy_radar"},
        budget={"total_ms": 10_000, "fusion_reserve_ms": 8_000},
        pipeline={"max_in_flight": 2, "admission": "adaptive", "circuit": {"failure_threshold": 100}},
        server=_hung_start(triton.grpc_url),
    )
    with ThreadedRuntime(cfg) as rt:
        results = [rt.submit(frame(i, ["lidar", "radar"])).result(timeout=60) for i in range(2)]
        admission = rt.runtime.admission
        assert admission is not None
        report = admission.report()
    assert [r.sensors["lidar"].status for r in results] == [SensorStatus.LATE] * 2
    assert not any(r.deadline_missed for r in results)
    assert (report["mode"], report["overloaded_frames"]) == ("adaptive", 2), report


def test_threaded_fixed_admission_keeps_max_in_flight(triton: EmbeddedTriton) -> None:
    cfg = config(
        triton.grpc_url,
        {"lidar": "sleepy_lidar", "radar": "sleepy_radar"},
        pipeline={"max_in_flight": 3, "admission": "fixed"},
    )
    with ThreadedRuntime(cfg) as rt:
        results = [f.result(timeout=60) for f in [rt.submit(frame(i, ["lidar", "radar"])) for i in range(6)]]
        admission = rt.runtime.admission
        assert admission is not None and admission.limit == 3
    assert sorted(r.frame_id for r in results) == list(range(6))


def _stream_config(url: str) -> RuntimeConfig:
    return config(
        url,
        {"lidar": "sleepy_lidar", "radar": "sleepy_radar"},
        pipeline={"max_in_flight": 2, "queue_size": 2, "overflow": "block"},
    )


async def test_a_consumer_cancelled_between_results_keeps_its_cancel_scopes_and_the_runtime_closes(
    triton: EmbeddedTriton,
) -> None:
    # A second Ctrl-C cancels a replay while it handles a result: the stream's generator is then left
    # suspended at its ``yield``. A task group held across that ``yield`` was on the consumer's
    # cancel-scope stack, so leaving the consumer's scope raised "Attempted to exit a cancel scope that
    # isn't the current task's current cancel scope" (a traceback and exit 1 instead of 130).
    got: list[int] = []
    with anyio.fail_after(60):  # watchdog
        async with Runtime(_stream_config(triton.grpc_url)) as rt:
            with anyio.CancelScope() as scope:
                async for r in rt.run(frame(i, ["lidar", "radar"]) for i in range(1000)):
                    got.append(r.frame_id)
                    scope.cancel()
                    await anyio.lowlevel.checkpoint()  # the cancellation lands here, in the consumer's own await
            assert scope.cancelled_caught
            assert got == [0]
            # the runtime still works after the abandoned stream
            again = [r async for r in rt.run(frame(i, ["lidar", "radar"]) for i in range(3))]
            assert [r.frame_id for r in again] == [0, 1, 2]


async def test_a_consumer_that_leaves_early_closes_its_stream_and_the_rest_is_not_processed(
    triton: EmbeddedTriton,
) -> None:
    # Closing the generator (``break`` then ``aclose()``, or ``contextlib.aclosing``) ends the stream:
    # the frames it holds are cancelled and no further frame is taken from the source.
    taken: list[int] = []

    def frames() -> Iterator[Frame]:
        for i in itertools.count():
            taken.append(i)
            yield frame(i, ["lidar", "radar"])

    with anyio.fail_after(60):  # watchdog
        async with Runtime(_stream_config(triton.grpc_url)) as rt:
            stream = rt.run(frames())
            async for r in stream:
                assert r.frame_id == 0
                break
            await stream.aclose()  # raised BaseExceptionGroup([GeneratorExit]) from the task group it held
            n = len(taken)
            again = [r async for r in rt.run(frame(i, ["lidar", "radar"]) for i in range(3))]  # time passes
            assert [r.frame_id for r in again] == [0, 1, 2]
            assert len(taken) == n, "the source is still read after its stream was closed"


# -- close is bounded whatever the consumer of rt.run does (issue 45, defect 2) ---------------------------


def _counted(taken: list[int], enough: anyio.Event | None = None) -> Iterator[Frame]:
    """An endless source that records which frames were taken from it (``enough`` set at the 8th)."""
    for i in itertools.count():
        taken.append(i)
        if enough is not None and len(taken) == 8:
            enough.set()
        yield frame(i, ["lidar", "radar"])


def _draining_config(url: str) -> RuntimeConfig:
    return config(
        url,
        {"lidar": "sleepy_lidar", "radar": "sleepy_radar"},
        pipeline={"max_in_flight": 2, "queue_size": 2, "overflow": "block", "drain_timeout_s": 1},
    )


async def _every_frame_accounted(
    rt: Runtime, got: list[FrameResult], kept: AsyncIterator[FrameResult], taken: list[int]
) -> None:
    """After the close: the kept generator still gives the records that were waiting for it, in order, and
    every frame taken from the source has its record there or is counted as not delivered."""
    with anyio.fail_after(10):
        rest = [r async for r in kept]
    delivered = [r.frame_id for r in got + rest]
    assert delivered == list(range(len(delivered)))
    assert len(delivered) + rt.undelivered == len(taken), (delivered, rt.undelivered, len(taken))


async def test_close_is_bounded_when_the_consumer_leaves_the_loop_keeping_the_generator(
    triton: EmbeddedTriton,
) -> None:
    # `gen = rt.run(frames); async for r in gen: break`, then leaving `async with Runtime`: the stream went on
    # until its buffer was full, its frames blocked sending, and the close waited for them forever.
    taken: list[int] = []
    got: list[FrameResult] = []
    with anyio.fail_after(30):  # watchdog: the close used to never return
        async with Runtime(_draining_config(triton.grpc_url)) as rt:
            enough = anyio.Event()
            gen = rt.run(_counted(taken, enough))
            async for r in gen:
                got.append(r)
                break
            await enough.wait()  # the stream goes on without its consumer until its buffer (5) is full
    await _every_frame_accounted(rt, got, gen, taken)
    assert rt.undelivered > 0  # the buffer (5) was full: the rest were counted, not waited for


async def test_close_is_bounded_when_the_consumer_never_iterates(triton: EmbeddedTriton) -> None:
    taken: list[int] = []
    with anyio.fail_after(30):  # watchdog
        async with Runtime(_draining_config(triton.grpc_url)) as rt:
            gen = rt.run(_counted(taken))
    with anyio.fail_after(10), pytest.raises(RuntimeClosedError):
        await gen.__anext__()  # never started: a clear error once the runtime is closed
    assert taken == [] and rt.undelivered == 0


async def test_close_is_bounded_when_the_consumer_is_cancelled_mid_result_keeping_the_generator(
    triton: EmbeddedTriton,
) -> None:
    taken: list[int] = []
    got: list[FrameResult] = []
    with anyio.fail_after(30):  # watchdog
        async with Runtime(_draining_config(triton.grpc_url)) as rt:
            enough = anyio.Event()
            gen = rt.run(_counted(taken, enough))
            with anyio.CancelScope() as scope:
                async for r in gen:
                    got.append(r)
                    await enough.wait()  # handling the result while the stream fills its buffer (5)
                    scope.cancel()
                    await anyio.lowlevel.checkpoint()  # cancelled here, while handling the result
            assert scope.cancelled_caught and [r.frame_id for r in got] == [0]
    await _every_frame_accounted(rt, got, gen, taken)


async def test_close_is_bounded_when_the_consumer_raises_inside_the_loop(triton: EmbeddedTriton) -> None:
    taken: list[int] = []
    got: list[FrameResult] = []
    with anyio.fail_after(30):  # watchdog
        with pytest.raises(ValueError, match="the host's bug"):
            async with Runtime(_draining_config(triton.grpc_url)) as rt:
                enough = anyio.Event()
                gen = rt.run(_counted(taken, enough))
                async for r in gen:
                    got.append(r)
                    await enough.wait()  # handling the result while the stream fills its buffer (5)
                    raise ValueError("the host's bug")
    assert [r.frame_id for r in got] == [0]
    await _every_frame_accounted(rt, got, gen, taken)


async def test_a_frame_with_what_is_not_a_sample_is_refused_naming_the_sensor(triton: EmbeddedTriton) -> None:
    # Before: "internal error: AttributeError: 'str' object has no attribute 't_ns'" (a traceback logged),
    # from deep in the dispatcher, naming neither the sensor nor the frame.
    cfg = config(triton.grpc_url, {"lidar": "sleepy_lidar", "radar": "sleepy_radar"})
    frames = [frame(i, ["lidar", "radar"]) for i in range(3)]
    frames[1] = Frame(frame_id=1, t_ns=frames[1].t_ns, samples={**frames[1].samples, "radar": "junk"})  # type: ignore[dict-item]
    with anyio.fail_after(60):
        async with Runtime(cfg) as rt:
            with pytest.raises(InputError, match=r"^radar: not a sample: a str") as err:
                await rt.process(frames[1])
            assert err.value.sensor == "radar" and err.value.frame == 1
            results = [r async for r in rt.run(frames)]  # the stream goes on around it
    assert [r.frame_id for r in results] == [0, 1, 2]
    assert results[1].status is FrameStatus.DROPPED and results[1].reason is not None
    assert results[1].reason.startswith("invalid input: radar: not a sample: a str"), results[1].reason
    assert results[0].status is results[2].status is FrameStatus.OK


def test_threaded_callback_learns_of_a_failed_frame_and_a_raising_callback_is_counted(
    triton: EmbeddedTriton,
) -> None:
    # Before: a frame whose future raised never reached the callback (only a log line), so a host that
    # registered a callback never learned the frame failed. Now the callback gets the record a stream
    # makes of it (dropped, with the reason); the future still raises.
    cfg = config(triton.grpc_url, {"lidar": "sleepy_lidar", "radar": "sleepy_radar"}, pipeline={"overload": "queue"})
    frames = [frame(i, ["lidar", "radar"]) for i in range(3)]
    frames[1] = Frame(frame_id=1, t_ns=frames[1].t_ns, samples={**frames[1].samples, "radar": "junk"})  # type: ignore[dict-item]
    got: list[FrameResult] = []
    done = threading.Event()

    def callback(result: FrameResult) -> None:
        got.append(result)
        if len(got) == 3:
            done.set()
        raise RuntimeError("the host's callback fails too")

    with ThreadedRuntime(cfg) as rt:
        futures = [rt.submit(f, callback) for f in frames]
        with pytest.raises(InputError, match=r"^radar: not a sample"):
            futures[1].result(timeout=30)
        assert futures[0].result(timeout=30).status is futures[2].result(timeout=30).status is FrameStatus.OK
        assert done.wait(30)  # safety net
    by_id = {r.frame_id: r for r in got}
    assert sorted(by_id) == [0, 1, 2]
    assert by_id[1].status is FrameStatus.DROPPED and by_id[1].reason is not None
    assert by_id[1].reason.startswith("invalid input: radar: not a sample: a str"), by_id[1].reason
    assert rt.callbacks_failed == 3


def test_threaded_frames_cut_by_close_reach_the_callback_as_shutdown(triton: EmbeddedTriton) -> None:
    # Closed while one frame hangs in flight and three wait for its slot: the one in flight is cancelled
    # after the drain timeout, the waiting ones find the runtime closed. Each reaches the callback as a
    # shutdown record (the waiting ones read "internal error: RuntimeClosedError", as if a bug).
    cfg = config(
        triton.grpc_url,
        {"lidar": "hung_lidar", "radar": "sleepy_radar"},
        budget={"total_ms": 60_000, "fusion_reserve_ms": 10},
        pipeline={"max_in_flight": 1, "admission": "fixed", "overload": "queue", "circuit": {"failure_threshold": 100}},
        server=_hung_start(triton.grpc_url),
    )
    got: list[FrameResult] = []
    rt = ThreadedRuntime(cfg)
    with rt:
        futures = [rt.submit(frame(i, ["lidar", "radar"]), got.append) for i in range(4)]
        rt.close(timeout_s=0.5)
    assert all(f.done() for f in futures)
    assert sorted(r.frame_id for r in got) == [0, 1, 2, 3]
    assert all(r.status is FrameStatus.DROPPED and (r.reason or "").startswith("shutdown: ") for r in got), [
        (r.frame_id, r.reason) for r in got
    ]


async def test_a_fusion_call_cancelled_while_it_runs_is_abandoned_and_the_next_waits_for_it(
    triton: EmbeddedTriton,
) -> None:
    # Before: a frame cancelled during its fusion call waited for the call to return (a hung fusion held
    # its close forever). Now the call is abandoned in its worker thread, counted; the next frame's fusion
    # (and a shed frame's prediction) waits until it has returned: never two fusion calls at once.
    cfg = config(triton.grpc_url, {"lidar": "sleepy_lidar"})
    entered = threading.Event()
    release = threading.Event()
    lock = threading.Lock()
    running = [0]
    overlap: list[int] = []
    fused: list[int] = []
    running_before = abandoned_fusion_running()

    def fusion(f: Frame, results: Mapping[str, SensorResult]) -> tuple[tuple[()], dict[str, int]]:
        with lock:
            running[0] += 1
            overlap.append(running[0])
        if f.frame_id == 0:
            entered.set()
            release.wait(20)  # frame 0's call hangs until the test releases it
        with lock:
            running[0] -= 1
            fused.append(f.frame_id)
        return (), {}

    try:
        with anyio.fail_after(60):
            async with Runtime(cfg, fusion=fusion) as rt:
                with anyio.CancelScope() as scope:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(rt.process, frame(0, ["lidar"]))
                        await anyio.to_thread.run_sync(entered.wait, 30)
                        scope.cancel()  # before: the cancellation waited for the call to return
                assert rt.fusion_abandoned == 1 and fused == []
                assert abandoned_fusion_running() == running_before + 1  # the process's count, till it returns
                second: list[FrameResult] = []
                at_fusion = anyio.Event()
                fuse = rt._fuse

                async def fuse_seen(*args: Any) -> Any:
                    at_fusion.set()  # the second frame's requests ended: its turn to fuse
                    return await fuse(*args)

                rt._fuse = fuse_seen  # type: ignore[method-assign]
                # Frame 1's fusion waits for frame 0's abandoned call (_fusion_idle): seen waiting there by
                # events, where a 0.1 s sleep once gave a fusion that did not wait its chance to start (a loaded
                # host could start it after the release, and the test passed).
                idle_entered, idle_left = anyio.Event(), [False]
                idle = rt._fusion_idle

                async def idle_seen() -> None:
                    idle_entered.set()
                    try:
                        await idle()
                    finally:
                        idle_left[0] = True

                rt._fusion_idle = idle_seen  # type: ignore[method-assign]

                async def process_second() -> None:
                    second.append(await rt.process(frame(1, ["lidar"])))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(process_second)
                    await at_fusion.wait()
                    await idle_entered.wait()
                    await anyio.wait_all_tasks_blocked()
                    assert not idle_left[0] and fused == []  # still waiting, while frame 0's call runs
                    release.set()
                assert second[0].frame_id == 1
    finally:
        release.set()
    assert fused == [0, 1] and max(overlap) == 1
    assert abandoned_fusion_running() == running_before  # frame 0's call returned (before frame 1's started)
