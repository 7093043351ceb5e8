"""The transport's lifetimes (issue 46 item 2): one :class:`~perception._lifetime.Lifetime` each, closing
twice a no-op, a closed client refusing work with the error it always raised. No server: the client's
channels connect lazily, the pool's close has nothing registered to undo."""

from __future__ import annotations

import anyio
import pytest

from perception._lifetime import Lifetime
from perception.errors import RuntimeClosedError
from perception.triton import ClientOptions, SharedMemoryPool, TritonClient

pytestmark = pytest.mark.anyio


async def test_client_state_runs_unopened_opened_closed() -> None:
    client = TritonClient(ClientOptions(urls=("127.0.0.1:1",)))  # nothing goes on the wire
    with anyio.fail_after(20):  # watchdog
        assert client.state is Lifetime.UNOPENED
        with pytest.raises(RuntimeClosedError, match="TritonClient is not open"):
            await client.server_ready()
        async with client:
            assert client.state is Lifetime.OPENED
        assert client.state is Lifetime.CLOSED
        await client.close()  # idempotent
        assert client.state is Lifetime.CLOSED
        with pytest.raises(RuntimeClosedError, match="TritonClient is closed"):
            await client.server_ready()
        with pytest.raises(RuntimeClosedError, match="opened once"):
            await client.open()


async def test_pool_state_runs_opened_closed() -> None:
    pool = SharedMemoryPool()
    with anyio.fail_after(20):  # watchdog
        assert pool.state is Lifetime.OPENED and not pool.closed
        await pool.close()
        assert pool.state is Lifetime.CLOSED and pool.closed
        await pool.close()  # idempotent
        assert pool.state is Lifetime.CLOSED
