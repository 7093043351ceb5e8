"""ThreadedRuntime over a fake inference client (no Triton): the frame's clock, its open and its inputs."""

from __future__ import annotations

import concurrent.futures
import functools
import threading
import time
from collections.abc import Mapping
from typing import Any

import anyio
import numpy as np
import pytest
from anyio.from_thread import BlockingPortal

from perception.config import RuntimeConfig, from_data
from perception.errors import ConfigError, InputError, RuntimeClosedError
from perception.kinds import kind_def
from perception.scheduler import CANCELLED_IN_FLIGHT, Lifetime, Runtime, ThreadedRuntime, ThreadHost, _thread
from perception.triton import InferRequest
from perception.types import Frame, FrameResult, PointCloudSample, SensorResult

MS = 1_000_000
LIDAR = ("x", "y", "z", "intensity")
WATCHDOG_S = 30.0


class _Answers:
    """A model that answers every request at once with empty outputs of its kind."""

    def __init__(self, kind: str) -> None:
        self.outputs = {
            spec.name: np.zeros(tuple(0 if d == -1 else d for d in spec.dims), dtype=spec.numpy_dtype)
            for spec in kind_def(kind).contract.outputs
        }

    async def infer_request(self, req: InferRequest) -> Any:
        return type("Result", (), {"outputs": self.outputs})()


class _GatedFusion:
    """Fuses nothing; frame 0's call waits for ``gate`` (bounded: a watchdog), saying when it started."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.gate = threading.Event()

    def __call__(self, frame: Frame, results: Mapping[str, SensorResult]) -> tuple[tuple[()], dict[str, int]]:
        if frame.frame_id == 0:
            self.entered.set()
            assert self.gate.wait(WATCHDOG_S)
        return (), {}


def _config(**extra: Any) -> RuntimeConfig:
    data: dict[str, Any] = {
        "server": {"url": "localhost:1"},
        "sensors": [{"name": "lidar", "kind": "lidar", "model": "lid", "transport": "grpc"}],
        "trigger": {"rate_hz": 10},
        "fusion": {"enabled": False},
        "budget": {"total_ms": 3000, "fusion_reserve_ms": 10},
        **extra,
    }
    return from_data(RuntimeConfig, data)


def _frame(i: int) -> Frame:
    points = np.random.default_rng(i).normal(size=(100, 4)).astype(np.float32)
    return Frame(
        frame_id=i,
        t_ns=i * 100 * MS,
        samples={"lidar": PointCloudSample("lidar", i * 100 * MS, "lidar", points, LIDAR)},
    )


@pytest.fixture
def faked(monkeypatch: pytest.MonkeyPatch) -> None:
    """ThreadedRuntime's runtime talks to :class:`_Answers` (no server)."""
    monkeypatch.setattr(_thread, "Runtime", functools.partial(Runtime, client=_Answers("lidar"), check_models=False))


@pytest.mark.usefixtures("faked")
def test_a_frame_waiting_for_its_slot_counts_the_wait_in_its_latency_and_deadline() -> None:
    # Before: submit left the frame's clock unset, so it started when the frame got its slot: schedule_wait
    # was 0 and the wait out of its total, its deadline and its join's deadline (a stream's counts it).
    budget_ms = 200
    cfg = _config(
        budget={"total_ms": budget_ms, "fusion_reserve_ms": 10},
        pipeline={"max_in_flight": 1, "admission": "fixed", "overload": "queue"},
    )
    fusion = _GatedFusion()
    with ThreadedRuntime(cfg, fusion=fusion) as rt:
        try:
            first = rt.submit(_frame(0))
            assert fusion.entered.wait(WATCHDOG_S)  # frame 0 holds the one slot until the gate opens
            second = rt.submit(_frame(1))
            submitted = time.monotonic_ns()
            time.sleep(budget_ms / 1e3 * 1.25)  # frame 1 waits longer than its budget, at least
            released = time.monotonic_ns()
        finally:
            fusion.gate.set()
        r0: FrameResult = first.result(WATCHDOG_S)
        r1: FrameResult = second.result(WATCHDOG_S)
    assert r1.latency.start_ns <= submitted  # its clock started when it was handed in
    assert r1.latency.stages["schedule_wait"] >= released - submitted  # it started after frame 0 ended
    assert r1.latency.total_ns >= released - submitted
    assert r1.deadline_missed
    assert r0.deadline_missed  # held past its budget by its fusion (the same clock)


def _loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "perception-loop"]


@pytest.mark.usefixtures("faked")
def test_a_callback_queue_below_one_is_a_config_error_before_anything_opens() -> None:
    # Before: a bare ValueError from open(), after the whole runtime had opened, which it left open.
    with pytest.raises(ConfigError, match="callback_queue: must be >= 1, got 0"):
        ThreadedRuntime(_config(), fusion=None, callback_queue=0)
    assert not _loop_threads()


@pytest.mark.usefixtures("faked")
def test_an_open_that_fails_after_the_runtime_opened_closes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_thread(maxsize: int, *, name: str) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(_thread, "CallbackQueue", no_thread)
    rt = ThreadedRuntime(_config(), fusion=None)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        rt.open()
    assert rt.runtime.state is Lifetime.CLOSED  # rolled back: was left open, its loop thread running
    assert not _loop_threads()
    with pytest.raises(RuntimeClosedError):
        rt.submit(_frame(0))


@pytest.mark.usefixtures("faked")
def test_submitting_what_is_not_a_frame_is_an_input_error() -> None:
    # Before: its future failed with an internal AttributeError, and its callback was never called (the
    # dropped record read frame_id on the callback thread, which raised: a failed callback)
    got: list[FrameResult] = []
    with ThreadedRuntime(_config(), fusion=None) as rt:
        with pytest.raises(InputError, match="submit takes a Frame, got dict"):
            rt.submit({"lidar": None}, got.append)  # type: ignore[arg-type]
        assert rt.submit(_frame(0)).result(WATCHDOG_S).frame_id == 0  # the runtime goes on
    assert not got and rt.callbacks_failed == 0


class _Hangs:
    """A model that never answers; notes that its request started, and the runtime's state when it is cancelled."""

    def __init__(self) -> None:
        self.runtime: Runtime | None = None
        self.started = threading.Event()
        self.state_when_cancelled: list[Lifetime] = []

    async def infer_request(self, req: InferRequest) -> Any:
        self.started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            assert self.runtime is not None
            self.state_when_cancelled.append(self.runtime.state)
            raise
        raise AssertionError("unreachable")


def test_frames_still_running_after_the_drain_are_cancelled_before_the_runtime_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before: the runtime (its client, its server) was closed first, the frames still using it cancelled after
    client = _Hangs()
    monkeypatch.setattr(_thread, "Runtime", functools.partial(Runtime, client=client, check_models=False))
    cfg = _config(budget={"total_ms": 60_000, "fusion_reserve_ms": 10})  # the request is not cut before the close
    rt = ThreadedRuntime(cfg, fusion=None)
    client.runtime = rt.runtime
    with rt:
        future = rt.submit(_frame(0))
        assert client.started.wait(WATCHDOG_S)
        rt.close(timeout_s=0.05)
    assert future.cancelled()
    assert client.state_when_cancelled == [Lifetime.OPENED]
    assert rt.runtime.state is Lifetime.CLOSED


@pytest.mark.usefixtures("faked")
def test_a_submit_racing_a_close_is_refused_as_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: a close on another thread that stopped the portal between submit's check and its start of the
    # frame's task raised anyio's bare RuntimeError ("This portal is not running") into the host
    rt = ThreadedRuntime(_config(), fusion=None)
    portal = ThreadHost.portal.fget
    assert portal is not None

    def closed_while_read(host: ThreadHost[None]) -> Any:
        value = portal(host)
        closer = threading.Thread(target=rt.close)  # the close lands right after the portal was read
        closer.start()
        closer.join(WATCHDOG_S)
        assert not closer.is_alive()
        return value

    with rt:
        monkeypatch.setattr(ThreadHost, "portal", property(closed_while_read))
        with pytest.raises(RuntimeClosedError, match="the runtime is closed"):
            rt.submit(_frame(0))
    assert rt.runtime.state is Lifetime.CLOSED


@pytest.mark.usefixtures("faked")
def test_the_callback_of_a_frame_submitted_as_the_runtime_closes_is_counted_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before: a close on another thread that ended between the start of the frame's task and the registration of
    # its callback left the callback to a closed queue, which refused it without a count: the host's callback
    # was never called, and callbacks_dropped said 0
    rt = ThreadedRuntime(_config(), fusion=None)
    start = BlockingPortal.start_task_soon

    def started_then_closed(portal: BlockingPortal, func: Any, *args: Any, **kwargs: Any) -> Any:
        future = start(portal, func, *args, **kwargs)
        if getattr(func, "__name__", "") == "_process":  # the frame's task (not the portal's own calls)
            closer = threading.Thread(target=rt.close)
            closer.start()
            closer.join(WATCHDOG_S)
            assert not closer.is_alive()
        return future

    got: list[FrameResult] = []
    with rt:
        monkeypatch.setattr(BlockingPortal, "start_task_soon", started_then_closed)
        future = rt.submit(_frame(0), got.append)
    assert future.done() and not got
    assert rt.callbacks_dropped == 1


def test_a_frame_submitted_from_a_future_s_done_callback_is_processed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: a future's done callback runs on the event-loop thread, where the portal takes no task: submit
    # raised anyio's bare RuntimeError ("This method cannot be called from the event loop thread"), which
    # concurrent.futures logged and swallowed -- the host's next frame was never submitted
    monkeypatch.setattr(_thread, "Runtime", functools.partial(Runtime, client=_Answers("lidar"), check_models=False))
    fusion = _GatedFusion()
    submitted = threading.Event()
    chained: list[concurrent.futures.Future[FrameResult]] = []
    errors: list[Exception] = []
    threads: list[str] = []
    with ThreadedRuntime(_config(), fusion=fusion) as rt:

        def submit_next(future: object) -> None:
            threads.append(threading.current_thread().name)
            try:
                chained.append(rt.submit(_frame(1)))
            except Exception as exc:
                errors.append(exc)
            finally:
                submitted.set()

        try:
            first = rt.submit(_frame(0))
            assert fusion.entered.wait(WATCHDOG_S)  # frame 0 is in fusion: its future is answered on the loop
            first.add_done_callback(submit_next)
        finally:
            fusion.gate.set()
        assert submitted.wait(WATCHDOG_S)
        assert threads == ["perception-loop"] and not errors
        assert chained[0].result(WATCHDOG_S).frame_id == 1


class _HangsOnFrame(_Answers):
    """Answers every frame's request at once but ``frame``'s, which never ends (until cancelled)."""

    def __init__(self, kind: str, frame: int) -> None:
        super().__init__(kind)
        self.frame = frame
        self.started = threading.Event()

    async def infer_request(self, req: InferRequest) -> Any:
        if req.frame == self.frame:
            self.started.set()
            await anyio.sleep_forever()
        return await super().infer_request(req)


def test_a_frame_submitted_from_a_done_callback_still_running_at_close_is_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the future submit returned on the event-loop thread follows the frame's task: the close's cancel reaches it
    client = _HangsOnFrame("lidar", frame=1)
    monkeypatch.setattr(_thread, "Runtime", functools.partial(Runtime, client=client, check_models=False))
    fusion = _GatedFusion()
    chained: list[concurrent.futures.Future[FrameResult]] = []
    got: list[FrameResult] = []
    rt = ThreadedRuntime(_config(budget={"total_ms": 60_000, "fusion_reserve_ms": 10}), fusion=fusion)
    with rt:
        try:
            first = rt.submit(_frame(0))
            assert fusion.entered.wait(WATCHDOG_S)
            first.add_done_callback(lambda f: chained.append(rt.submit(_frame(1), got.append)))
        finally:
            fusion.gate.set()
        assert client.started.wait(WATCHDOG_S)  # frame 1's request is out, never to be answered
        rt.close(timeout_s=2.0)  # the drain's bound; also the callback thread's, to run the record queued at the end
    assert chained[0].cancelled()
    assert [(r.frame_id, r.reason) for r in got] == [(1, CANCELLED_IN_FLIGHT)]
