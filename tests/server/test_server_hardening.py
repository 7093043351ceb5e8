"""What the embedded server exposes locally (issue 33): model control needs this process's secret header,
and headers sent in plaintext off this host
are warned about."""

from __future__ import annotations

import logging

import anyio
import pytest

from perception.errors import PerceptionError
from perception.server import EmbeddedTriton
from perception.triton import ClientOptions, TritonClient


@pytest.mark.anyio
async def test_model_control_needs_the_servers_own_header(triton: EmbeddedTriton) -> None:
    with anyio.fail_after(120):
        async with TritonClient(ClientOptions(urls=(triton.grpc_url,))) as client:
            with pytest.raises(PerceptionError) as info:
                await client.unload_model("echo")  # any other local user, without the secret
            assert "echo" in str(info.value)
            await client.wait_ready(["echo"], timeout_s=10)  # still loaded
            stats = await client.model_statistics("echo")  # what the runtime uses stays open
            assert stats is not None
            await client.load_model("echo", headers=triton.control_headers)  # the owner may
            await client.wait_ready(["echo"], timeout_s=60)


@pytest.mark.anyio
async def test_headers_in_plaintext_off_this_host_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with anyio.fail_after(10):  # watchdog
        caplog.set_level(logging.WARNING, logger="perception")
        async with TritonClient(ClientOptions(urls=("192.0.2.1:8001",), headers={"authorization": "Bearer x"})):
            pass
        assert "plaintext to 192.0.2.1:8001" in caplog.text and "authorization" in caplog.text
        caplog.clear()
        async with TritonClient(ClientOptions(urls=("127.0.0.1:8001",), headers={"authorization": "Bearer x"})):
            pass
        assert "plaintext" not in caplog.text
