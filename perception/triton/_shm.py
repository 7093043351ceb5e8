"""A pool of POSIX shared-memory regions registered with Triton (system shared memory).

Large input tensors are copied once into a region the server has mapped, and the request carries only
the region name, offset and size instead of the bytes: no protobuf serialisation, no socket copy.

* Regions are ``/dev/shm/perception_<pid>_<8 hex>_<n>`` (the prefix from
  :func:`make_shm_prefix`), so the embedded server manager can remove the
  leftovers of a dead process by its ``perception_<pid>_`` prefix.
* Sizes come in power-of-two classes (at least ``min_region_bytes``); a released region is reused
  by the next request of its class. Each region is registered once per server (URL), lazily, and
  unregistered + unlinked on :meth:`SharedMemoryPool.close`.
* The total size is capped (``max_total_bytes``): when full, idle regions of other classes are
  evicted; if that is not enough :meth:`~SharedMemoryPool.acquire` returns ``None`` and the caller
  sends the tensor over plain gRPC.
* A region whose ``/dev/shm`` entry disappeared (unlinked or replaced behind our back) is detected at
  acquire time by its inode, dropped (unregistered) and replaced by a fresh one.
* A released slot may be reused while a cancelled request that used it is still queued in the
  server; that request's answer is discarded by nobody waiting for it, so reuse is safe.

The pool is used from one event loop (no locks); creation and registration are the only awaits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from types import TracebackType
from typing import Any, Protocol

import anyio
import numpy as np
import numpy.typing as npt
from tritonclient.utils import shared_memory as triton_shm

from perception._lifetime import Lifetime
from perception.errors import PerceptionError, SharedMemoryError
from perception.triton._shm_names import SHM_DIR, make_shm_prefix

from ._errors import translate

__all__ = ["SharedMemoryPool", "ShmRegionInfo", "ShmRegistrar", "ShmSlot"]

log = logging.getLogger(__name__)

#: Tensors inside a region start at multiples of this (cache line; keeps numpy views aligned).
ALIGNMENT = 64
_CLOSE_TIMEOUT_S = 5.0
_IN_USE_RETRY_S = 0.01
_ORPHAN_RETRY_S = 0.1


class ShmRegistrar(Protocol):
    """Registers regions with one server (the client implements it per URL)."""

    @property
    def url(self) -> str: ...

    async def register(self, name: str, key: str, byte_size: int) -> None:
        """Register; raise a translated :class:`~perception.errors.TransportError` on failure."""

    async def unregister(self, name: str) -> None:
        """Unregister; raise a translated :class:`~perception.errors.TransportError` on failure."""


@dataclass(eq=False)
class _Region:
    name: str
    key: str
    byte_size: int
    handle: Any  # tritonclient.utils.shared_memory.SharedMemoryRegion
    inode: int
    registered: set[str] = field(default_factory=set)
    # URLs where a registration RPC was interrupted: maybe registered, unregistered on close.
    pending: set[str] = field(default_factory=set)
    in_use: bool = False


@dataclass(frozen=True, slots=True)
class ShmRegionInfo:
    """A snapshot of one pooled region (for tests, metrics and debugging)."""

    name: str
    key: str
    byte_size: int
    registered_urls: frozenset[str]
    in_use: bool


def aligned(nbytes: int) -> int:
    return (nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def packed_size(arrays: Sequence[npt.NDArray[Any]]) -> int:
    """Bytes a slot needs to hold ``arrays`` back to back (each aligned)."""
    return sum(aligned(a.nbytes) for a in arrays)


class ShmSlot:
    """A region lent to one request; write the inputs, then hand it back with ``pool.release``."""

    __slots__ = ("_region",)

    def __init__(self, region: _Region) -> None:
        self._region = region

    @property
    def name(self) -> str:
        """The region's name on the server (what ``InferInput.set_shared_memory`` takes)."""
        return self._region.name

    @property
    def byte_size(self) -> int:
        return self._region.byte_size

    def write(self, arrays: Sequence[npt.NDArray[Any]]) -> list[int]:
        """Copy ``arrays`` back to back (aligned) into the region; return their offsets."""
        offsets: list[int] = []
        offset = 0
        for array in arrays:
            offsets.append(offset)
            offset += aligned(array.nbytes)
        if offset > self._region.byte_size:
            raise SharedMemoryError(
                f"{offset} bytes do not fit in region of {self._region.byte_size}", region=self._region.name
            )
        try:
            for array, at in zip(arrays, offsets, strict=True):
                triton_shm.set_shared_memory_region(self._region.handle, [np.asarray(array)], offset=at)
        except triton_shm.SharedMemoryException as exc:
            raise translate(exc) from exc
        return offsets


def _size_class(nbytes: int, minimum: int) -> int:
    size = max(nbytes, minimum, 1)
    return 1 << (size - 1).bit_length()


class SharedMemoryPool:
    """Power-of-two classes of registered system shared-memory regions, reused across requests.

    Use as an async context manager (or call :meth:`close`). ``prefix`` defaults to a fresh
    ``perception_<pid>_<8 hex>_``.
    """

    def __init__(
        self,
        *,
        min_region_bytes: int = 64 * 1024,
        max_total_bytes: int = 256 * 1024 * 1024,
        prefix: str | None = None,
    ) -> None:
        if min_region_bytes <= 0 or max_total_bytes < min_region_bytes:
            raise ValueError("need 0 < min_region_bytes <= max_total_bytes")
        self._min = min_region_bytes
        self._max_total = max_total_bytes
        self._prefix = prefix or make_shm_prefix()
        self._counter = 0
        self._regions: list[_Region] = []
        self._registrars: dict[str, ShmRegistrar] = {}
        # (url, name) of dropped regions the server still used when we tried to unregister them.
        self._orphans: set[tuple[str, str]] = set()
        self._orphans_retry_at = 0.0
        self._state = Lifetime.OPENED  # lends regions from construction on

    @property
    def prefix(self) -> str:
        return self._prefix

    @property
    def total_bytes(self) -> int:
        return sum(r.byte_size for r in self._regions)

    @property
    def closed(self) -> bool:
        """A close has begun: the pool lends no more regions."""
        return self._state.done

    @property
    def state(self) -> Lifetime:
        """Where the pool is in its life (:class:`~perception._lifetime.Lifetime`)."""
        return self._state

    def regions(self) -> tuple[ShmRegionInfo, ...]:
        return tuple(
            ShmRegionInfo(r.name, r.key, r.byte_size, frozenset(r.registered), r.in_use) for r in self._regions
        )

    async def __aenter__(self) -> SharedMemoryPool:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- lending ------------------------------------------------------------------------------------

    async def acquire(self, nbytes: int, registrar: ShmRegistrar) -> ShmSlot | None:
        """A region of at least ``nbytes`` registered with ``registrar``'s server.

        ``None`` when the pool is closed or full (send over gRPC instead). Raises
        :class:`~perception.errors.SharedMemoryError` (or another translated transport error) when a
        region cannot be created or registered; the caller falls back to gRPC.
        """
        if self._state.done:
            return None
        size = _size_class(nbytes, self._min)
        if size > self._max_total:
            return None
        self._registrars.setdefault(registrar.url, registrar)
        if self._orphans and time.monotonic() >= self._orphans_retry_at:
            self._orphans_retry_at = time.monotonic() + _ORPHAN_RETRY_S
            await self._retry_orphans()
        region = await self._take(size)
        if region is None:
            return None
        try:
            if registrar.url not in region.registered:
                await self._register(region, registrar)
        except BaseException:
            region.in_use = False
            raise
        return ShmSlot(region)

    def release(self, slot: ShmSlot) -> None:
        """Give a slot back (always, also after errors and cancellation)."""
        slot._region.in_use = False

    def forget_registrations(self, url: str) -> None:
        """The server at ``url`` lost our registrations (it restarted): register again on next use."""
        for region in self._regions:
            region.registered.discard(url)
            region.pending.discard(url)

    async def _take(self, size: int) -> _Region | None:
        for region in self._regions:
            if region.in_use or region.byte_size != size:
                continue
            if self._vanished(region):
                log.warning("shared-memory region %s disappeared from %s; replacing it", region.key, SHM_DIR)
                await self._drop(region)
                break
            region.in_use = True
            return region
        while self.total_bytes + size > self._max_total:
            idle = [r for r in self._regions if not r.in_use]
            if not idle:
                log.debug("shared-memory pool full (%d bytes in use)", self.total_bytes)
                return None
            await self._drop(max(idle, key=lambda r: r.byte_size))
        region = self._create(size)
        region.in_use = True
        return region

    def _create(self, size: int) -> _Region:
        name = f"{self._prefix}{self._counter}"
        self._counter += 1
        key = f"/{name}"
        try:
            handle = triton_shm.create_shared_memory_region(name, key, size, create_only=True)
        except triton_shm.SharedMemoryException as exc:
            raise translate(exc) from exc
        try:
            inode = (SHM_DIR / name).stat().st_ino
        except OSError:
            inode = -1  # no /dev/shm (not Linux): vanish detection disabled
        region = _Region(name, key, size, handle, inode)
        self._regions.append(region)
        log.debug("created shared-memory region %s (%d bytes)", key, size)
        return region

    def _vanished(self, region: _Region) -> bool:
        if region.inode < 0:
            return False
        try:
            return (SHM_DIR / region.name).stat().st_ino != region.inode
        except FileNotFoundError:
            return True
        except OSError:
            return False

    async def _register(self, region: _Region, registrar: ShmRegistrar) -> None:
        region.pending.add(registrar.url)
        try:
            await registrar.register(region.name, region.key, region.byte_size)
        except SharedMemoryError as exc:
            if "already" not in exc.message:
                region.pending.discard(registrar.url)
                raise
            # An earlier, interrupted registration of this very region went through.
        except PerceptionError:
            region.pending.discard(registrar.url)
            raise
        region.pending.discard(registrar.url)
        region.registered.add(registrar.url)
        log.debug("registered %s with %s", region.name, registrar.url)

    async def _unregister(self, url: str, name: str, *, patient: bool) -> bool:
        """Unregister ``name`` from ``url``; True when done (or nothing to do).

        The server refuses while a request still reads the region (e.g. one we cancelled that it has
        not finished): ``patient`` retries until the caller's scope times out; otherwise the name is kept
        in ``_orphans`` and retried later (at the latest on close).
        """
        registrar = self._registrars.get(url)
        if registrar is None:
            return True
        while True:
            try:
                await registrar.unregister(name)
                return True
            except SharedMemoryError as exc:
                if "in use" not in exc.message:
                    log.warning("could not unregister shared-memory region %s from %s: %s", name, url, exc)
                    return True
                if not patient:
                    self._orphans.add((url, name))
                    return False
            except PerceptionError as exc:
                log.warning("could not unregister shared-memory region %s from %s: %s", name, url, exc)
                return True
            await anyio.sleep(_IN_USE_RETRY_S)

    async def _retry_orphans(self) -> None:
        for url, name in list(self._orphans):
            self._orphans.discard((url, name))
            await self._unregister(url, name, patient=False)

    async def _drop(self, region: _Region, *, patient: bool = False) -> None:
        """Forget ``region``: unregister it everywhere, unmap and unlink it.

        Unlinking while the server still maps the region is fine: its mapping lives on until it
        unregisters.
        """
        self._regions.remove(region)
        region.in_use = True  # never lent again, even if the unregistering below is interrupted
        try:
            for url in sorted(region.registered | region.pending):
                await self._unregister(url, region.name, patient=patient)
        finally:
            region.registered.clear()
            region.pending.clear()
            _destroy(region)

    # -- closing ------------------------------------------------------------------------------------

    async def close(self) -> None:
        """Unregister every region from every server and unlink it. Idempotent; runs under cancellation.

        Waits (up to a few seconds) for the server to finish requests still reading a region.
        """
        if self._state.done:
            return
        self._state = Lifetime.CLOSING
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT_S) as scope:
            while self._orphans:
                url, name = self._orphans.pop()
                await self._unregister(url, name, patient=True)
            while self._regions:
                await self._drop(self._regions[0], patient=True)
        for region in list(self._regions):  # unregistering timed out: still unlink locally
            self._regions.remove(region)
            _destroy(region)
        self._state = Lifetime.CLOSED
        if scope.cancelled_caught or self._orphans:
            log.warning(
                "timed out unregistering shared-memory regions from the server; it keeps them mapped until it restarts"
            )


def _destroy(region: _Region) -> None:
    try:
        triton_shm.destroy_shared_memory_region(region.handle)
    except FileNotFoundError:
        # Unlinked behind our back: multiprocessing's resource tracker still lists it; tell it.
        _untrack(region.key)
    except (OSError, BufferError, triton_shm.SharedMemoryException) as exc:
        log.warning("could not destroy shared-memory region %s: %s", region.key, exc)


def _untrack(key: str) -> None:
    # multiprocessing.shared_memory prefixes the (already slash-prefixed) key with "/" and registers
    # that name with its resource tracker, which would otherwise warn about a leak at exit.
    try:
        resource_tracker.unregister("/" + key, "shared_memory")
    except Exception:  # pragma: no cover - best effort
        log.debug("resource tracker did not know %s", key, exc_info=True)
