"""The shared test models of ``tests/triton_models`` behave as documented (through the session server)."""

from __future__ import annotations

import time

import anyio
import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException

from perception.server import EmbeddedTriton

pytestmark = pytest.mark.anyio


def _input(name: str, data: npt.NDArray[np.float32]) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    return tensor


async def test_sleepers_sleep_then_sum(triton: EmbeddedTriton) -> None:
    with anyio.fail_after(30):
        client = grpcclient.InferenceServerClient(triton.grpc_url)
        try:
            data = np.arange(4, dtype=np.float32)
            for delay_ms in (20, 30, 40):
                start = time.perf_counter()
                result = await client.infer(f"sleeper_{delay_ms}", [_input("INPUT", data)])
                elapsed_ms = (time.perf_counter() - start) * 1000
                assert result.as_numpy("OUTPUT").tolist() == [6.0]
                assert elapsed_ms >= delay_ms
            # The request's delay_ms parameter overrides the configured one: asked for longer, it sleeps
            # longer (a lower bound: a loaded host only adds time; the fast path is timed in bench/).
            start = time.perf_counter()
            await client.infer("sleeper_20", [_input("INPUT", data)], parameters={"delay_ms": 250})
            assert (time.perf_counter() - start) * 1000 >= 250
        finally:
            await client.close()


async def test_sleeper_stops_sleeping_when_the_client_gives_up(triton: EmbeddedTriton) -> None:
    with anyio.fail_after(30):
        client = grpcclient.InferenceServerClient(triton.grpc_url)
        try:
            data = np.ones(3, dtype=np.float32)
            start = time.perf_counter()
            with pytest.raises(InferenceServerException, match="Deadline"):
                await client.infer(
                    "sleeper_20", [_input("INPUT", data)], parameters={"delay_ms": 10_000}, client_timeout=0.2
                )
            # The single instance is free again long before the 10 s sleep would have ended.
            result = await client.infer("sleeper_20", [_input("INPUT", data)], parameters={"delay_ms": 1})
            assert result.as_numpy("OUTPUT").tolist() == [3.0]
            assert time.perf_counter() - start < 5
        finally:
            await client.close()


async def test_failer_and_echo(triton: EmbeddedTriton) -> None:
    with anyio.fail_after(30):
        client = grpcclient.InferenceServerClient(triton.grpc_url)
        try:
            with pytest.raises(InferenceServerException, match="deliberate failure"):
                await client.infer("failer", [_input("INPUT", np.ones(2, dtype=np.float32))])
            data = np.arange(6, dtype=np.float32).reshape(2, 3)
            result = await client.infer("echo", [_input("INPUT", data)])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT"), data * 2)
        finally:
            await client.close()
