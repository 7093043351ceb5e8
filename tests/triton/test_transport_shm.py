"""System shared memory: the pool on its own, and through TritonClient against the real server."""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import anyio
import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException

from perception.errors import SharedMemoryError
from perception.server import EmbeddedTriton
from perception.triton import ClientOptions, SharedMemoryPool, TritonClient
from perception.triton._shm import SHM_DIR

pytestmark = pytest.mark.anyio

POINTS = np.random.default_rng(1).random((50_000, 4), dtype=np.float32)  # 800 kB -> 1 MiB class


def _files(prefix: str) -> list[str]:
    return sorted(p.name for p in SHM_DIR.iterdir() if p.name.startswith(prefix))


class _Recorder:
    """Records registrations instead of sending them (pool bookkeeping only; no server involved)."""

    def __init__(self, url: str = "test:1", fail_with: str | None = None) -> None:
        self._url = url
        self.fail_with = fail_with
        self.registered: dict[str, str] = {}
        self.calls: list[str] = []

    @property
    def url(self) -> str:
        return self._url

    async def register(self, name: str, key: str, byte_size: int) -> None:
        self.calls.append(f"register {name}")
        if self.fail_with is not None:
            raise SharedMemoryError(self.fail_with)
        self.registered[name] = key

    async def unregister(self, name: str) -> None:
        self.calls.append(f"unregister {name}")
        self.registered.pop(name, None)


# -- the pool alone ----------------------------------------------------------------------------------


async def test_pool_reuses_power_of_two_classes_and_cleans_up() -> None:
    with anyio.fail_after(10):  # watchdog
        registrar = _Recorder()
        async with SharedMemoryPool(min_region_bytes=4096) as pool:
            assert pool.prefix.startswith(f"perception_{os.getpid()}_")
            first = await pool.acquire(5000, registrar)
            assert first is not None and first.byte_size == 8192
            pool.release(first)
            again = await pool.acquire(8000, registrar)
            assert again is not None and again.name == first.name  # same class: reused
            other = await pool.acquire(5000, registrar)  # first one is lent: a second region of the class
            small = await pool.acquire(10, registrar)
            assert other is not None and other.name != first.name
            assert small is not None and small.byte_size == 4096
            assert registrar.calls == [f"register {r.name}" for r in pool.regions()]  # each registered once
            assert len(_files(pool.prefix)) == 3
        assert _files(pool.prefix) == [] and registrar.registered == {}


async def test_slot_write_packs_aligned_tensors() -> None:
    with anyio.fail_after(10):  # watchdog
        a = np.arange(10, dtype=np.float32)
        b = np.arange(6, dtype=np.int64).reshape(2, 3)
        async with SharedMemoryPool() as pool:
            slot = await pool.acquire(1000, _Recorder())
            assert slot is not None
            assert slot.write([a, b]) == [0, 64]
            raw = (SHM_DIR / slot.name).read_bytes()
            assert raw[:40] == a.tobytes() and raw[64 : 64 + 48] == b.tobytes()
            with pytest.raises(SharedMemoryError, match="do not fit"):
                slot.write([np.zeros(slot.byte_size, np.uint8), a])


@pytest.mark.anyio
async def test_regions_are_owner_only() -> None:
    # sensor data: other local users must not read it (tritonclient creates them 0600; a guard)
    with anyio.fail_after(10):  # watchdog
        async with SharedMemoryPool() as pool:
            slot = await pool.acquire(1000, _Recorder())
            assert slot is not None
            mode = stat.S_IMODE((SHM_DIR / slot.name).stat().st_mode)
            assert mode == 0o600, oct(mode)


async def test_pool_cap_evicts_idle_regions_then_gives_up() -> None:
    with anyio.fail_after(10):  # watchdog
        registrar = _Recorder()
        async with SharedMemoryPool(min_region_bytes=4096, max_total_bytes=16384) as pool:
            small = await pool.acquire(4096, registrar)
            assert small is not None
            pool.release(small)
            big = await pool.acquire(16384, registrar)  # evicts the idle small region to fit
            assert big is not None and [r.byte_size for r in pool.regions()] == [16384]
            assert f"unregister {small.name}" in registrar.calls
            assert await pool.acquire(4096, registrar) is None  # everything lent: caller uses gRPC
            assert await pool.acquire(1 << 20, registrar) is None  # larger than the whole pool
            assert _files(pool.prefix) == [big.name]


async def test_registration_failure_is_raised_and_region_stays_usable() -> None:
    with anyio.fail_after(10):  # watchdog
        registrar = _Recorder(fail_with="Unable to open shared memory region")
        async with SharedMemoryPool() as pool:
            with pytest.raises(SharedMemoryError):
                await pool.acquire(100, registrar)
            assert not any(r.in_use for r in pool.regions())
            registrar.fail_with = "shared memory region 'x' already in manager"  # an earlier attempt went through
            slot = await pool.acquire(100, registrar)
            assert slot is not None and pool.regions()[0].registered_urls == {"test:1"}


async def test_closed_pool_lends_nothing() -> None:
    with anyio.fail_after(10):  # watchdog
        pool = SharedMemoryPool()
        await pool.close()
        assert await pool.acquire(100, _Recorder()) is None
        await pool.close()


# -- through the client, against the server -----------------------------------------------------------


@pytest.fixture
async def client(triton: EmbeddedTriton) -> AsyncIterator[TritonClient]:
    async with TritonClient(ClientOptions(urls=(triton.grpc_url,))) as c:
        yield c


async def _ours(client: TritonClient) -> dict[str, str]:
    pool = client.shm_pool
    assert pool is not None
    return {n: k for n, k in (await client.server_shm_regions()).items() if n.startswith(pool.prefix)}


async def test_regions_are_registered_once_and_reused(client: TritonClient) -> None:
    with anyio.fail_after(20):
        results = [await client.infer("echo", {"INPUT": POINTS}) for _ in range(5)]
        pool = client.shm_pool
        assert pool is not None
        assert all(r.used_shm for r in results)
        (region,) = pool.regions()
        assert region.key == f"/{region.name}" and region.registered_urls == {client.urls[0]}
        assert await _ours(client) == {region.name: region.key}
        # A different size class gets its own region; concurrent requests of one class get one each.
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(client.infer, "echo", {"INPUT": POINTS})
        bigger = await client.infer("echo", {"INPUT": np.tile(POINTS, (3, 1))})
        assert bigger.used_shm
        np.testing.assert_array_equal(bigger.outputs["OUTPUT"], 2 * np.tile(POINTS, (3, 1)))
        sizes = sorted(r.byte_size for r in pool.regions())
        assert sizes.count(1 << 20) <= 3 and sizes[-1] == 4 << 20
        assert set(await _ours(client)) == {r.name for r in pool.regions()}


async def test_region_unlinked_behind_our_back_is_replaced(client: TritonClient) -> None:
    with anyio.fail_after(20):
        await client.infer("echo", {"INPUT": POINTS})
        pool = client.shm_pool
        assert pool is not None
        (old,) = pool.regions()
        (SHM_DIR / old.name).unlink()
        res = await client.infer("echo", {"INPUT": POINTS})
        assert res.used_shm
        np.testing.assert_array_equal(res.outputs["OUTPUT"], 2 * POINTS)
        (new,) = pool.regions()
        assert new.name != old.name and (SHM_DIR / new.name).exists()
        # The old one is unregistered: at once, or (if the server still held it for the request that just
        # finished) on a later acquire.
        while len(await _ours(client)) > 1:
            await client.infer("echo", {"INPUT": POINTS})
        assert await _ours(client) == {new.name: new.key}


async def test_server_forgetting_registrations_falls_back_then_re_registers(
    client: TritonClient, triton: EmbeddedTriton
) -> None:
    with anyio.fail_after(20):
        await client.infer("echo", {"INPUT": POINTS})
        pool = client.shm_pool
        assert pool is not None
        (region,) = pool.regions()
        # As after a server restart: the server no longer knows the region. The server lets go of the region
        # after it has answered (a busy fresh-clone run got "currently in use" right after the answer):
        # wait for that, under the watchdog, as the pool itself does when it unregisters.
        other = grpcclient.InferenceServerClient(triton.grpc_url)
        try:
            while True:
                try:
                    await other.unregister_system_shared_memory(region.name)
                    break
                except InferenceServerException as exc:
                    if "in use" not in str(exc):
                        raise
                    await anyio.sleep(0.01)
        finally:
            await other.close()
        fallback = await client.infer("echo", {"INPUT": POINTS})
        assert not fallback.used_shm
        np.testing.assert_array_equal(fallback.outputs["OUTPUT"], 2 * POINTS)
        again = await client.infer("echo", {"INPUT": POINTS})
        assert again.used_shm and pool.regions()[0].name == region.name
        assert await _ours(client) == {region.name: region.key}


async def test_unusable_shared_memory_falls_back_to_grpc(client: TritonClient, monkeypatch: pytest.MonkeyPatch) -> None:
    async def cannot_register(self: SharedMemoryPool, nbytes: int, registrar: object) -> None:
        raise SharedMemoryError("Unable to open shared memory region: '/x'")  # e.g. server in another IPC ns

    monkeypatch.setattr(SharedMemoryPool, "acquire", cannot_register)
    with anyio.fail_after(20):
        first = await client.infer("echo", {"INPUT": POINTS})
        second = await client.infer("echo", {"INPUT": POINTS})
    assert not first.used_shm and not second.used_shm
    np.testing.assert_array_equal(second.outputs["OUTPUT"], 2 * POINTS)


async def test_shm_modes(triton: EmbeddedTriton) -> None:
    with anyio.fail_after(20):
        async with TritonClient(ClientOptions(urls=(triton.grpc_url,), shm="off")) as client:
            assert not (await client.infer("echo", {"INPUT": POINTS})).used_shm
            assert client.shm_pool is None
        options = ClientOptions(urls=(triton.grpc_url,), shm="on", shm_threshold_bytes=0)
        async with TritonClient(options) as client:
            assert (await client.infer("echo", {"INPUT": np.ones((2, 2), np.float32)})).used_shm


async def _until_exists(path: Path) -> None:
    """Until ``path`` exists (a sleeper's started marker): a poll, bounded by the caller's watchdog."""
    while True:
        if await anyio.Path(path).exists():
            return
        await anyio.sleep(0.005)


async def test_close_unregisters_and_unlinks_everything(triton: EmbeddedTriton, tmp_path: Path) -> None:
    started = tmp_path / "started"
    with anyio.fail_after(20):
        async with TritonClient(ClientOptions(urls=(triton.grpc_url,))) as client:
            await client.infer("echo", {"INPUT": POINTS})
            await client.infer("echo", {"INPUT": np.tile(POINTS, (4, 1))})
            # A cancelled request may still hold a region on the server when we close: cancelled once the
            # server runs it (its started marker; a 5 ms timer once stood for that, which a loaded host
            # could fire before the request was even sent, and the case went untested).
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    params = {"delay_ms": 500, "started": str(started)}
                    tg.start_soon(partial(client.infer, "sleeper_40", {"INPUT": POINTS.ravel()}, parameters=params))
                    await _until_exists(started)
                    scope.cancel()
            pool = client.shm_pool
            assert pool is not None and len(_files(pool.prefix)) == 2  # 1 MiB (twice used) and 4 MiB
            prefix = pool.prefix
        assert _files(prefix) == []
        async with TritonClient(ClientOptions(urls=(triton.grpc_url,))) as probe:
            assert not [n for n in await probe.server_shm_regions() if n.startswith(prefix)]


async def test_cancelled_owner_still_cleans_up(triton: EmbeddedTriton) -> None:
    with anyio.fail_after(20):
        with anyio.CancelScope() as scope:
            async with TritonClient(ClientOptions(urls=(triton.grpc_url,))) as client:
                await client.infer("echo", {"INPUT": POINTS})
                pool = client.shm_pool
                assert pool is not None
                prefix = pool.prefix
                scope.cancel()
                await anyio.sleep(1)  # cancelled here; close() runs shielded
        assert scope.cancelled_caught
        assert _files(prefix) == []
        async with TritonClient(ClientOptions(urls=(triton.grpc_url,))) as probe:
            assert not [n for n in await probe.server_shm_regions() if n.startswith(prefix)]
