"""TritonClient against the real embedded server: round trips, errors, deadlines, cancellation, URLs;
and, with fake servers below the wire layer, how work is spread over several URLs."""

from __future__ import annotations

import math
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import grpc  # type: ignore[import-untyped]
import numpy as np
import pytest
from tritonclient.grpc import InferResult, service_pb2, service_pb2_grpc

from perception.errors import (
    ConfigError,
    ConnectError,
    DeadlineError,
    InferenceError,
    InputError,
    ModelNotReadyError,
    RuntimeClosedError,
    TransportError,
)
from perception.server import EmbeddedTriton, free_port
from perception.triton import ClientOptions, InferRequest, TritonClient, _client, is_loopback

pytestmark = pytest.mark.anyio

TEST_MODELS = Path(__file__).resolve().parents[1] / "triton_models"
SMALL = np.arange(12, dtype=np.float32).reshape(3, 4)
LARGE = np.random.default_rng(0).random((100_000, 4), dtype=np.float32)  # 1.6 MB: over the shm threshold


@pytest.fixture
async def client(triton: EmbeddedTriton) -> AsyncIterator[TritonClient]:
    async with TritonClient(ClientOptions(urls=(triton.grpc_url,))) as c:
        yield c


async def test_round_trip_over_grpc_and_shared_memory_agree(client: TritonClient) -> None:
    with anyio.fail_after(20):
        small = await client.infer("echo", {"INPUT": SMALL}, sensor="lidar_top", frame=1)
        over_grpc = await client.infer("echo", {"INPUT": LARGE}, use_shm=False)
        over_shm = await client.infer("echo", {"INPUT": LARGE}, outputs=("OUTPUT",))
    assert not small.used_shm and not over_grpc.used_shm and over_shm.used_shm
    np.testing.assert_array_equal(small.outputs["OUTPUT"], 2 * SMALL)
    np.testing.assert_array_equal(over_grpc.outputs["OUTPUT"], 2 * LARGE)
    np.testing.assert_array_equal(over_shm.outputs["OUTPUT"], over_grpc.outputs["OUTPUT"])
    assert over_shm.url == client.urls[0] and over_shm.model == "echo"
    assert 0 < over_shm.prepare_ns < over_shm.client_ns
    assert over_shm.server_ns is None
    assert not over_shm.outputs["OUTPUT"].flags.writeable  # zero-copy views of the response


async def test_infer_request_object_and_non_contiguous_input(client: TritonClient) -> None:
    strided = LARGE[::2, 1:3]  # a view: not contiguous
    with anyio.fail_after(20):
        res = await client.infer_request(InferRequest("echo", {"INPUT": strided}, request_id="r-7"))
        res_grpc = await client.infer_request(InferRequest("echo", {"INPUT": strided}, use_shm=False))
    assert res.used_shm and res.request_id == "r-7"
    np.testing.assert_array_equal(res.outputs["OUTPUT"], 2 * strided)
    np.testing.assert_array_equal(res_grpc.outputs["OUTPUT"], 2 * strided)


async def test_unknown_model_is_model_not_ready(client: TritonClient) -> None:
    with anyio.fail_after(10), pytest.raises(ModelNotReadyError) as info:
        await client.infer("no_such_model", {"INPUT": SMALL}, sensor="lidar_top", frame=7)
    err = info.value
    assert (err.model, err.sensor, err.frame, err.url) == ("no_such_model", "lidar_top", 7, client.urls[0])
    assert isinstance(err.__cause__, Exception)
    assert "no_such_model" in str(err)


async def test_bad_dtype_and_bad_tensor_name_are_inference_errors(client: TritonClient) -> None:
    with anyio.fail_after(10):
        with pytest.raises(InferenceError) as info:
            await client.infer("echo", {"INPUT": SMALL.astype(np.int32)}, sensor="radar_front")
        assert info.value.tensor == "INPUT" and "INT32" in str(info.value)
        assert not isinstance(info.value, ModelNotReadyError)
        with pytest.raises(InferenceError) as info:
            await client.infer("echo", {"POINTS": SMALL})
        assert info.value.tensor == "POINTS"
        with pytest.raises(InferenceError, match="deliberate failure"):
            await client.infer("failer", {"INPUT": np.ones(3, np.float32)})


async def test_malformed_inputs_are_rejected_before_sending(client: TritonClient) -> None:
    with anyio.fail_after(10):  # watchdog
        with pytest.raises(InputError) as info:
            await client.infer("echo", {"INPUT": [[1.0, 2.0]]}, sensor="cam_front")  # type: ignore[dict-item]
        assert info.value.tensor == "INPUT" and info.value.sensor == "cam_front"
        with pytest.raises(InputError, match="no input tensors"):
            await client.infer("echo", {})


async def test_refused_connection_fails_fast_and_marks_url_unhealthy() -> None:
    url = f"127.0.0.1:{free_port()}"
    with anyio.fail_after(10):
        async with TritonClient(ClientOptions(urls=(url,))) as client:
            assert not await client.server_ready()
            with pytest.raises(ConnectError) as info:  # how fast it fails is timed in bench/
                await client.infer("echo", {"INPUT": SMALL}, sensor="lidar_top", frame=3)
            assert info.value.retryable and info.value.url == url and info.value.frame == 3
            assert client.healthy_urls() == ()
            with pytest.raises(ConnectError, match=r"not ready after 0\.2 s"):
                await client.wait_ready(["echo"], timeout_s=0.2)


async def test_deadline_becomes_deadline_error(client: TritonClient) -> None:
    data = np.ones(4, np.float32)
    with anyio.fail_after(20):
        # warm up, and wait until the server's statistics have counted it (they lag the response)
        before = await _warm_up(client, data)
        with pytest.raises(DeadlineError) as info:  # how soon after the 5 ms it raises is timed in bench/
            await client.infer(
                "sleeper_40", {"INPUT": data}, timeout_ns=5_000_000, frame=9, parameters={"delay_ms": 3000}
            )
        assert info.value.model == "sleeper_40" and info.value.frame == 9
        assert not info.value.retryable
        # The deadline also reached the server: the 3 s sleep was cut short (it checks is_cancelled()).
        # Not success_count: Triton 2.51 counts the model's CANCELLED response as a success.
        delta = await _wait_for_new_inference(client, "sleeper_40", before)
        assert delta["inference_count"] == 1 and delta["compute_infer_ns"] < 1_000_000_000
        res = await client.infer("sleeper_20", {"INPUT": data}, timeout_ns=2_000_000_000)
    assert res.outputs["OUTPUT"].tolist() == [4.0]


async def _warm_up(client: TritonClient, data: np.ndarray[Any, Any], **kwargs: Any) -> dict[str, int]:
    """One short request to ``sleeper_40``; its statistics once they count it (they lag the response)."""
    before = await client.model_statistics("sleeper_40")
    await client.infer("sleeper_40", {"INPUT": data}, parameters={"delay_ms": 1}, **kwargs)
    return await client.model_statistics("sleeper_40", at_least={"inference_count": before["inference_count"] + 1})


async def _wait_for_new_inference(client: TritonClient, model: str, before: dict[str, int]) -> dict[str, int]:
    """The change since ``before`` once the server has counted one more inference (a bounded wait)."""
    after = await client.model_statistics(
        model, at_least={"inference_count": before["inference_count"] + 1}, timeout_s=15
    )
    assert after["inference_count"] > before["inference_count"], "the server never counted the request"
    return {k: after[k] - before[k] for k in after}


async def _wait_for_file(path: Path, timeout_s: float = 15.0) -> None:
    """Until ``path`` exists (a model's ``started`` marker): a bounded poll."""
    for _ in range(round(timeout_s / 0.005)):
        if await anyio.Path(path).exists():
            return
        await anyio.sleep(0.005)
    raise AssertionError(f"{path} did not appear within {timeout_s:g} s")


@pytest.mark.parametrize("use_shm", [False, True])
async def test_cancelling_the_caller_cancels_the_server_side_work(
    client: TritonClient, use_shm: bool, tmp_path: Path
) -> None:
    data = np.ones(100_000, np.float32)  # 400 kB: goes through shared memory when use_shm
    started = tmp_path / "started"
    with anyio.fail_after(30):
        before = await _warm_up(client, data, use_shm=use_shm)
        scope = anyio.CancelScope()

        async def call() -> None:
            with scope:
                params = {"delay_ms": 3000, "started": str(started)}
                await client.infer("sleeper_40", {"INPUT": data}, use_shm=use_shm, parameters=params)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await _wait_for_file(started)  # the request is running on the server: cancel its caller now
            scope.cancel()
        assert scope.cancelled_caught  # the scope recognised its own cancellation through grpc
        # The caller did not wait for grpc to wind the call down: it ends in the background (no
        # deadline: cancelled at once), and only then gives its shared-memory slot back.
        await client.wait_abandoned()
        if use_shm:
            pool = client.shm_pool
            assert pool is not None and pool.regions() and not any(r.in_use for r in pool.regions())
        # The sleeper checks request.is_cancelled(): it ends long before its 3 s.
        delta = await _wait_for_new_inference(client, "sleeper_40", before)
    # the server's own account: the request was cut short, far from its 3 s (wall-clock bounds: bench/)
    assert delta["compute_infer_ns"] < 1_000_000_000


async def test_a_caller_cut_off_at_the_deadline_leaves_the_call_to_its_grpc_deadline(
    client: TritonClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A join that gives up at its deadline: the request's gRPC deadline is that same instant, so grpc
    # ends the call on its own timer (and resets the stream: the server cancels the work) with no
    # event-loop work for the caller. Widened here so the path is taken however late the timer fires.
    monkeypatch.setattr(_client, "_EXPIRE_WITHIN_NS", 10_000_000_000)
    data = np.ones(100_000, np.float32)  # 400 kB: through shared memory, which stays taken meanwhile
    with anyio.fail_after(20):
        before = await _warm_up(client, data, use_shm=True)
        abandoned = client.abandoned_calls
        start = time.perf_counter()
        with anyio.move_on_after(0.01) as scope:
            await client.infer(
                "sleeper_40", {"INPUT": data}, use_shm=True, timeout_ns=300_000_000, parameters={"delay_ms": 3000}
            )
        assert scope.cancelled_caught
        assert client.abandoned_calls == abandoned + 1 and client.abandoned_pending == 1
        pool = client.shm_pool
        assert pool is not None and any(r.in_use for r in pool.regions())  # the call may still read it
        await client.wait_abandoned()
        ended = time.perf_counter() - start
        assert client.abandoned_pending == 0
        assert not any(r.in_use for r in pool.regions())
        delta = await _wait_for_new_inference(client, "sleeper_40", before)
    # Ended by its gRPC deadline (0.3 s): not before it (a lower bound, safe on a loaded host), and the
    # server's work was cut short, far from the model's 3 s. How soon after 0.3 s it ends: bench/.
    assert ended >= 0.25
    assert delta["compute_infer_ns"] < 1_000_000_000


async def test_fail_after_around_infer_raises_timeout(client: TritonClient) -> None:
    with anyio.fail_after(10), pytest.raises(TimeoutError):
        with anyio.fail_after(0.01):
            await client.infer("sleeper_40", {"INPUT": np.ones(4, np.float32)})


async def test_wait_ready_and_readiness(client: TritonClient) -> None:
    with anyio.fail_after(10):
        assert await client.server_ready()
        await client.wait_ready(["echo", "sleeper_20"], timeout_s=5)
        with pytest.raises(ModelNotReadyError) as info:
            await client.wait_ready(["echo", "no_such_model"], timeout_s=0.2)
    assert info.value.model == "no_such_model" and info.value.url == client.urls[0]


async def test_a_model_the_server_does_not_have_is_said_at_once(triton: EmbeddedTriton) -> None:
    # wait_ready polled is_model_ready for the whole start-up timeout (90 s in the default profile) for a
    # model no repository of a ready server held: it never would be ready. (The embedded server shows its
    # repository index only to a client with its control header; a plain Triton shows it to any.)
    options = ClientOptions(urls=(triton.grpc_url,), headers=triton.control_headers)
    with anyio.fail_after(20):  # safety net only: the answer does not wait for the timeout below
        async with TritonClient(options) as client:
            with pytest.raises(ModelNotReadyError) as info:
                await client.wait_ready(["echo", "no_such_model"], timeout_s=3600)
    assert info.value.model == "no_such_model" and info.value.url == triton.grpc_url
    assert info.value.message.startswith("not in the server's model repository (it has: ")
    assert "echo" in info.value.message


async def test_model_statistics_count_inferences(client: TritonClient) -> None:
    with anyio.fail_after(10):
        before = await client.model_statistics("echo")
        for _ in range(3):
            await client.infer("echo", {"INPUT": SMALL})
        # Triton counts a request a moment after answering it: wait (bounded) for the third one
        after = await client.model_statistics("echo", at_least={"success_count": before["success_count"] + 3})
    assert after["success_count"] - before["success_count"] == 3
    assert after["inference_count"] - before["inference_count"] == 3
    assert after["compute_infer_ns"] > before["compute_infer_ns"]
    assert {"queue_ns", "compute_input_ns", "compute_output_ns", "fail_count"} <= after.keys()
    # several models from one statistics request: the same counts as each model's own
    with anyio.fail_after(10):
        many = await client.models_statistics(["echo", "sink"])
        alone = await client.model_statistics("sink")
    assert many["echo"]["success_count"] == after["success_count"]
    assert many["sink"]["success_count"] == alone["success_count"]
    with anyio.fail_after(10), pytest.raises(ModelNotReadyError, match="no_such_model"):
        await client.models_statistics(["echo", "no_such_model"])


async def test_statistics_wait_for_the_counts_asked_for_then_are_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """No server: Triton's accounting stands in as a counter that lags the answers by a few reads."""
    reads: list[int] = []

    async def lagging(self: TritonClient, models: Sequence[str], url: str | None) -> dict[str, dict[str, int]]:
        reads.append(len(reads))
        return {m: {"success_count": min(len(reads), 3), "inference_count": min(len(reads), 3)} for m in models}

    monkeypatch.setattr(TritonClient, "_read_statistics", lagging)
    client = TritonClient(ClientOptions(urls=("127.0.0.1:1",)))  # never opened: nothing goes on the wire
    with anyio.fail_after(10):
        assert (await client.model_statistics("m"))["success_count"] == 1  # a plain read: as it is
        reads.clear()
        got = await client.model_statistics("m", at_least={"success_count": 3})
        assert got["success_count"] == 3 and len(reads) == 3  # polled until counted, not one read more
        reads.clear()
        # at the bound: the last snapshot, as it is (the caller sees the shortfall)
        short = await client.model_statistics("m", at_least={"success_count": 4}, timeout_s=0.05)
        assert short["success_count"] == 3 and len(reads) >= 2
        with pytest.raises(ValueError, match="no_such_count"):
            await client.model_statistics("m", at_least={"no_such_count": 1})
        reads.clear()  # several models: one read per poll for all of them, until every one is counted
        both = await client.models_statistics(
            ["m", "n"], at_least={"m": {"success_count": 2}, "n": {"success_count": 3}}
        )
        assert both["m"]["success_count"] == both["n"]["success_count"] == 3 and len(reads) == 3


async def test_unload_then_load_model(client: TritonClient, triton: EmbeddedTriton) -> None:
    control = triton.control_headers  # model control is restricted to the server's owner (issue 33)
    with anyio.fail_after(60):
        await client.unload_model("failer", headers=control)
        try:
            with pytest.raises(ModelNotReadyError):
                await client.infer("failer", {"INPUT": np.ones(3, np.float32)})
        finally:
            await client.load_model("failer", headers=control)
        with pytest.raises(InferenceError, match="deliberate failure"):
            await client.infer("failer", {"INPUT": np.ones(3, np.float32)})


def _established_connections(port: int) -> set[str]:
    """Socket inodes of this process's TCP connections to ``port`` (grpc uses v4-mapped IPv6: read both)."""
    ours = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            ours.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in ours:
                found.add(fields[9])
    return found


async def test_channels_are_separate_connections_used_round_robin(triton: EmbeddedTriton) -> None:
    port = int(triton.grpc_url.rsplit(":", 1)[1])
    baseline = _established_connections(port)
    with anyio.fail_after(20):
        async with TritonClient(ClientOptions(urls=(triton.grpc_url,), channels=3)) as client:
            for _ in range(3):
                await client.infer("echo", {"INPUT": SMALL})
            connections = _established_connections(port) - baseline
            assert len(connections) == 3
            async with anyio.create_task_group() as tg:
                for _ in range(6):
                    tg.start_soon(client.infer, "sleeper_20", {"INPUT": np.ones(2, np.float32)})
            assert _established_connections(port) - baseline == connections


async def test_two_urls_round_robin(triton: EmbeddedTriton) -> None:
    port = triton.grpc_url.rsplit(":", 1)[1]
    urls = (f"127.0.0.1:{port}", f"localhost:{port}")  # two names for the same server
    with anyio.fail_after(20):
        async with TritonClient(ClientOptions(urls=urls, channels=1)) as client:
            used = [(await client.infer("echo", {"INPUT": SMALL})).url for _ in range(4)]
            await client.wait_ready(["echo"], timeout_s=5)
    assert used == [urls[0], urls[1], urls[0], urls[1]]


class _ManualClock:
    """The client's ``time`` module with a monotonic clock that only the test moves."""

    def __init__(self) -> None:
        self.now_ns = time.monotonic_ns()

    def monotonic_ns(self) -> int:
        return self.now_ns

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)


async def test_dead_url_is_skipped_then_retried_after_backoff(
    triton: EmbeddedTriton, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The back-off is kept on the client's monotonic clock: the test moves that clock past it instead
    # of sleeping and hoping the sleep was long enough.
    clock = _ManualClock()
    monkeypatch.setattr(_client, "time", clock)
    dead = f"127.0.0.1:{free_port()}"
    options = ClientOptions(urls=(dead, triton.grpc_url), channels=1, backoff_s=0.3)
    with anyio.fail_after(20):
        async with TritonClient(options) as client:
            with pytest.raises(ConnectError) as info:
                await client.infer("echo", {"INPUT": SMALL})
            assert info.value.url == dead
            assert client.healthy_urls() == (triton.grpc_url,)
            used = [(await client.infer("echo", {"INPUT": SMALL})).url for _ in range(4)]
            assert used == [triton.grpc_url] * 4
            clock.now_ns += 299_000_000
            assert client.healthy_urls() == (triton.grpc_url,)  # not before the 0.3 s are over...
            clock.now_ns += 1_000_000
            assert client.healthy_urls() == (dead, triton.grpc_url)  # ...and again right after
            with pytest.raises(ConnectError):  # retried once the back-off is over
                await client.infer("echo", {"INPUT": SMALL})
            assert client.healthy_urls() == (triton.grpc_url,)


class _FakeServer:
    """Stands in for one URL below the client's wire layer (its raw ``ModelInfer``): answers at once,
    or holds calls until released (a slow or hung server), or refuses them like a server that is down
    (gRPC UNAVAILABLE). A held call honours its gRPC deadline and ends when cancelled, like grpc's."""

    def __init__(self) -> None:
        self.refusing = False
        self.held: anyio.Event | None = None

    def hold(self) -> None:
        self.held = anyio.Event()

    def release(self) -> None:
        if self.held is not None:
            self.held.set()
            self.held = None

    def model_infer(
        self, payload: bytes, *, timeout: float | None = None, metadata: object = None
    ) -> Awaitable[object]:
        """Like grpc's ``unary_unary`` call object: called with the gRPC deadline, awaited for the answer."""
        return self._answer(math.inf if timeout is None else timeout)

    async def _answer(self, deadline_s: float) -> object:
        if self.refusing:
            raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, details="failed to connect to all addresses")
        if self.held is not None:
            with anyio.move_on_after(deadline_s) as scope:
                await self.held.wait()
            if scope.cancelled_caught:
                raise grpc.aio.AioRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, details="Deadline Exceeded")
        return InferResult(service_pb2.ModelInferResponse(model_name="echo"))


class _FakeChannel:
    """What ``TritonClient._new_channel`` makes, with a fake server where grpc's channel would be."""

    def __init__(self, server: _FakeServer) -> None:
        self._channel = server

    async def close(self) -> None:
        pass


URL_A, URL_B = "10.255.0.1:8001", "10.255.0.2:8001"  # never dialled: their channels are fakes


@pytest.fixture
def fake_servers(monkeypatch: pytest.MonkeyPatch) -> dict[str, _FakeServer]:
    servers = {URL_A: _FakeServer(), URL_B: _FakeServer()}
    monkeypatch.setattr(TritonClient, "_new_channel", lambda self, url: _FakeChannel(servers[url]))
    monkeypatch.setattr(_client, "model_infer_call", lambda channel: channel.model_infer)
    return servers


async def _until(condition: Callable[[], bool]) -> None:
    """Wait until the client's bookkeeping shows ``condition`` (it has no event to wait on: poll)."""
    while True:
        if condition():
            return
        await anyio.sleep(0.001)


async def _urls_used(client: TritonClient, n: int) -> list[str]:
    return [(await client.infer("echo", {"INPUT": SMALL})).url for _ in range(n)]


async def test_new_requests_go_to_the_url_with_fewer_outstanding_calls(fake_servers: dict[str, _FakeServer]) -> None:
    a, b = fake_servers[URL_A], fake_servers[URL_B]
    a.hold()
    b.hold()
    with anyio.fail_after(10):
        async with TritonClient(ClientOptions(urls=(URL_A, URL_B), channels=1)) as client:
            assert client.outstanding() == {URL_A: 0, URL_B: 0}
            async with anyio.create_task_group() as tg:
                for _ in range(6):
                    tg.start_soon(partial(client.infer, "echo", {"INPUT": SMALL}))
                await _until(lambda: sum(client.outstanding().values()) == 6)
                assert client.outstanding() == {URL_A: 3, URL_B: 3}  # equal load: spread evenly
                b.release()
                await _until(lambda: client.outstanding()[URL_B] == 0)
                # A still has 3 calls in flight, B none: new work goes to B, not in turns
                assert await _urls_used(client, 4) == [URL_B] * 4
                assert client.outstanding() == {URL_A: 3, URL_B: 0}
                a.release()
            assert client.outstanding() == {URL_A: 0, URL_B: 0}


async def test_equal_load_alternates(fake_servers: dict[str, _FakeServer]) -> None:
    with anyio.fail_after(10):
        async with TritonClient(ClientOptions(urls=(URL_A, URL_B), channels=1)) as client:
            assert await _urls_used(client, 5) == [URL_A, URL_B, URL_A, URL_B, URL_A]
            assert client.outstanding() == {URL_A: 0, URL_B: 0}


async def _abandon_one(client: TritonClient, **kwargs: object) -> str:
    """Start one inference, cancel its caller once it is in flight; the URL it went to."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(client.infer, "echo", {"INPUT": SMALL}, **kwargs))  # type: ignore[arg-type]
        await _until(lambda: sum(client.outstanding().values()) == 1)
        busy = next(url for url, n in client.outstanding().items() if n)
        tg.cancel_scope.cancel()
    return busy


async def test_abandoned_calls_stay_outstanding_until_they_really_end(
    fake_servers: dict[str, _FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    with anyio.fail_after(10):
        async with TritonClient(ClientOptions(urls=(URL_A, URL_B), channels=1)) as client:
            # No deadline: the abandoned call is cancelled at once; counted until it has ended.
            fake_servers[URL_A].hold()
            fake_servers[URL_B].hold()
            await _abandon_one(client)
            await client.wait_abandoned()
            assert client.abandoned_calls == 1 and client.outstanding() == {URL_A: 0, URL_B: 0}

            # Left to its gRPC deadline (a minute away): the caller is gone, the call is not, and the
            # hung server it sits on gets no new work while the other is idle.
            monkeypatch.setattr(_client, "_EXPIRE_WITHIN_NS", 10**12)
            busy = await _abandon_one(client, timeout_ns=60_000_000_000)
            idle = URL_B if busy == URL_A else URL_A
            fake_servers[idle].release()
            assert client.abandoned_pending == 1 and client.outstanding() == {busy: 1, idle: 0}
            assert await _urls_used(client, 3) == [idle] * 3
            fake_servers[busy].release()  # the server answers at last: the call really ends
            await client.wait_abandoned()
            assert client.abandoned_pending == 0 and client.outstanding() == {URL_A: 0, URL_B: 0}


async def test_a_refusing_url_is_skipped_probed_after_backoff_and_back_when_it_answers(
    fake_servers: dict[str, _FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _ManualClock()
    monkeypatch.setattr(_client, "time", clock)
    a, b = fake_servers[URL_A], fake_servers[URL_B]
    a.refusing = True
    with anyio.fail_after(10):
        async with TritonClient(ClientOptions(urls=(URL_A, URL_B), channels=1, backoff_s=0.3)) as client:
            with pytest.raises(ConnectError) as info:
                await client.infer("echo", {"INPUT": SMALL})
            assert info.value.url == URL_A and info.value.retryable
            assert client.healthy_urls() == (URL_B,) and client.outstanding() == {URL_A: 0, URL_B: 0}
            assert await _urls_used(client, 3) == [URL_B] * 3  # skipped although idle
            clock.now_ns += 300_000_000
            assert client.healthy_urls() == (URL_A, URL_B)
            with pytest.raises(ConnectError) as info:  # probed once the back-off is over: still down
                await client.infer("echo", {"INPUT": SMALL})
            assert info.value.url == URL_A
            clock.now_ns += 300_000_000  # the second back-off is twice as long
            assert client.healthy_urls() == (URL_B,)

            a.refusing = False  # A is up again
            a.hold()
            b.hold()
            async with anyio.create_task_group() as tg:
                for _ in range(2):  # B gets busy while A still backs off
                    tg.start_soon(partial(client.infer, "echo", {"INPUT": SMALL}))
                await _until(lambda: client.outstanding()[URL_B] == 2)
                clock.now_ns += 300_000_000
                assert client.healthy_urls() == (URL_A, URL_B)
                # A is probed one request at a time: the rest go to B although it is busier.
                for _ in range(3):
                    tg.start_soon(partial(client.infer, "echo", {"INPUT": SMALL}))
                await _until(lambda: sum(client.outstanding().values()) == 5)
                assert client.outstanding() == {URL_A: 1, URL_B: 4}
                a.release()  # the probe succeeds: A is back in full
                await _until(lambda: client.outstanding()[URL_A] == 0)
                assert await _urls_used(client, 3) == [URL_A] * 3  # B still has 4 in flight
                b.release()
            assert client.outstanding() == {URL_A: 0, URL_B: 0}
            used = await _urls_used(client, 4)
            assert sorted(used) == [URL_A, URL_A, URL_B, URL_B] and used[0] != used[1]


class _RecordingProxy(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """A gRPC server in front of the real Triton: forwards readiness and inference calls unchanged and
    records the metadata (headers) each call arrived with."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.seen: list[tuple[str, dict[str, str]]] = []

    def _record(self, method: str, context: grpc.aio.ServicerContext) -> None:
        self.seen.append((method, {m.key: m.value for m in context.invocation_metadata() or ()}))

    async def ServerReady(self, request: object, context: grpc.aio.ServicerContext) -> object:
        self._record("ServerReady", context)
        async with grpc.aio.insecure_channel(self.upstream) as channel:
            return await service_pb2_grpc.GRPCInferenceServiceStub(channel).ServerReady(request)

    async def ModelInfer(self, request: object, context: grpc.aio.ServicerContext) -> object:
        self._record("ModelInfer", context)
        async with grpc.aio.insecure_channel(self.upstream) as channel:
            return await service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)


async def test_headers_are_sent_and_closed_client_refuses(triton: EmbeddedTriton) -> None:
    proxy = _RecordingProxy(triton.grpc_url)
    server = grpc.aio.server()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(proxy, server)
    port = server.add_insecure_port("127.0.0.1:0")
    headers = {"authorization": "Bearer test-token", "x-fleet-vehicle": "v-042"}
    with anyio.fail_after(20):  # watchdog
        await server.start()
        try:
            options = ClientOptions(urls=(f"127.0.0.1:{port}",), headers=headers)
            async with TritonClient(options) as client:
                assert await client.server_ready()
                res = await client.infer("echo", {"INPUT": SMALL})
                np.testing.assert_array_equal(res.outputs["OUTPUT"], 2 * SMALL)  # through to the real server
        finally:
            await server.stop(None)
        # Every call, control plane and inference, arrived with every configured header and its value.
        assert [method for method, _ in proxy.seen] == ["ServerReady", "ModelInfer"]
        for method, metadata in proxy.seen:
            assert {k: metadata.get(k) for k in headers} == headers, (method, metadata)
        with pytest.raises(RuntimeClosedError):
            await client.infer("echo", {"INPUT": SMALL})
        await client.close()  # idempotent


async def test_tls_with_missing_certificate_is_a_config_error(tmp_path: Path) -> None:
    with anyio.fail_after(10):  # watchdog
        missing = tmp_path / "ca.pem"
        client = TritonClient(ClientOptions(urls=("127.0.0.1:1",), ssl=True, root_certificates=str(missing)))
        with pytest.raises(ConfigError) as info:
            await client.open()
        assert info.value.file == str(missing)


async def test_failed_open_closes_the_channels_already_made(
    triton: EmbeddedTriton, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[object] = []
    real = TritonClient._new_channel

    def flaky(self: TritonClient, url: str) -> object:
        if len(made) == 3:
            raise ConfigError("cannot read TLS file: boom", file="/nope.pem")
        made.append(real(self, url))
        return made[-1]

    monkeypatch.setattr(TritonClient, "_new_channel", flaky)
    client = TritonClient(ClientOptions(urls=(triton.grpc_url, f"localhost:{free_port()}"), channels=2))
    with anyio.fail_after(10), pytest.raises(ConfigError):
        await client.open()
    assert len(made) == 3
    with anyio.fail_after(10):  # watchdog
        for channel in made:  # closed: using it fails instead of connecting
            with pytest.raises(Exception, match=r"(?i)closed"):
                await channel.is_server_live()  # type: ignore[attr-defined]
        with pytest.raises(RuntimeClosedError):
            await client.infer("echo", {"INPUT": SMALL})


def test_options_are_validated() -> None:
    for kwargs, key in [
        ({"urls": ()}, "triton.urls"),
        ({"urls": "127.0.0.1:8001"}, "triton.urls"),
        ({"urls": ("a:1", "a:1")}, "triton.urls"),
        ({"urls": ("http://a:1",)}, "triton.urls"),
        ({"channels": 0}, "triton.channels"),
        ({"shm": "always"}, "triton.shm"),
        ({"shm_threshold_bytes": -1}, "triton.shm_threshold_bytes"),
        ({"control_timeout_s": 0}, "triton.control_timeout_s"),
        ({"root_certificates": "ca.pem"}, "triton.root_certificates"),
        # half a client certificate aborted the process inside gRPC (exit 134) when the client opened
        ({"ssl": True, "private_key": "key.pem"}, "triton.private_key"),
        ({"ssl": True, "certificate_chain": "chain.pem"}, "triton.certificate_chain"),
        # gRPC refused such metadata in a traceback of its own at the first call
        ({"headers": {"Authorization": "Bearer x"}}, "triton.headers.Authorization"),
        ({"headers": {"x-api key": "a"}}, "triton.headers.x-api key"),
        ({"headers": {"x-token-bin": "a"}}, "triton.headers.x-token-bin"),
        ({"headers": {"x-token": "a\nb"}}, "triton.headers.x-token"),
    ]:
        with pytest.raises(ConfigError) as info:
            ClientOptions(**kwargs)  # type: ignore[arg-type]
        assert info.value.key == key


async def test_bad_headers_of_one_call_are_a_config_error() -> None:
    # load_model(headers=...) took them as they were: gRPC refused the call in a traceback of its own
    with anyio.fail_after(10):  # watchdog
        async with TritonClient(ClientOptions(urls=("127.0.0.1:1",))) as client:  # never reached
            with pytest.raises(ConfigError) as info:
                await client.load_model("echo", headers={"Perception-Control": "x"})
        assert info.value.key == "headers.Perception-Control"


def test_is_loopback() -> None:
    for url in ("127.0.0.1:8001", "127.3.2.1:1", "localhost:8001", "[::1]:8001", "unix:/tmp/triton.sock"):
        assert is_loopback(url), url
    for url in ("10.0.0.5:8001", "triton.internal:8001", "[2001:db8::1]:8001"):
        assert not is_loopback(url), url


async def test_two_real_servers_share_the_load_and_a_killed_one_is_backed_off(
    triton: EmbeddedTriton, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The session's server and a second real one serving only echo and sleeper_20; the second is
    # SIGKILLed (with its backend stubs) while it holds requests.
    clock = _ManualClock()
    monkeypatch.setattr(_client, "time", clock)
    repo = tmp_path / "models"
    for name in ("echo", "sleeper_20"):
        shutil.copytree(TEST_MODELS / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    second = EmbeddedTriton([repo], log_path=tmp_path / "second.log", startup_timeout_s=120.0)
    a = triton.grpc_url
    with anyio.fail_after(240):
        async with second:
            b = second.grpc_url
            async with TritonClient(ClientOptions(urls=(a, b), channels=1, backoff_s=0.3)) as client:
                used: list[str] = []

                async def sleep_20(sink: list[str]) -> None:
                    sink.append((await client.infer("sleeper_20", {"INPUT": np.ones(2, np.float32)})).url)

                async with anyio.create_task_group() as tg:  # concurrent: spread by outstanding calls
                    for _ in range(6):
                        tg.start_soon(sleep_20, used)
                assert sorted(used) == sorted([a, a, a, b, b, b])

                failed: list[BaseException] = []
                done: list[str] = []

                async def call(sink: list[str]) -> None:
                    try:
                        await sleep_20(sink)
                    except TransportError as exc:
                        failed.append(exc)

                async with anyio.create_task_group() as tg:
                    for _ in range(4):
                        tg.start_soon(call, done)
                    await _until(lambda: client.outstanding() == {a: 2, b: 2})
                    pid = second.pid
                    assert pid is not None
                    os.killpg(pid, signal.SIGKILL)  # mid-run: two requests on it
                assert done == [a, a] and len(failed) == 2, (done, failed)
                assert all(getattr(e, "url", None) == b and getattr(e, "retryable", False) for e in failed), failed
                assert client.healthy_urls() == (a,)  # backed off
                assert await _urls_used(client, 3) == [a] * 3
                clock.now_ns += 10_000_000_000  # past any back-off (at most 10 s): probed, still dead, backed off
                assert client.healthy_urls() == (a, b)
                with pytest.raises(TransportError) as info:
                    await client.infer("echo", {"INPUT": SMALL})
                assert getattr(info.value, "url", None) == b
                assert client.healthy_urls() == (a,)
                assert await _urls_used(client, 2) == [a, a]
