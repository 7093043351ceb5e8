"""glibc's malloc told to keep freed memory for reuse, while the runtime or a drive writer runs.

Every frame allocates and frees arrays of hundreds of kB to a few MB: a drive's decompressed 4 MB chunks
(a replay), lidar sweeps, accumulated clouds, images. With glibc's defaults an allocation above the mmap
threshold (128 kB, raised as such blocks are freed) is a fresh ``mmap``, and a free that leaves more than the
trim threshold at an arena's top gives the pages back to the kernel: the next frame faults them in again, one
4 kB page at a time (~1.7 us each on the CI's VMs, zeroing included). Kept, the allocator reuses the blocks
freed: a replay of the bundled drive faulted 10-62 pages a frame instead of 62-120 (``bench/README.md``,
issue 47's section).

The price: the process keeps the memory of its peak use (a few hundred MB at most here) until the last holder
leaves, when glibc's initial thresholds are set again and the pool is trimmed (``malloc_trim``). A host that
embeds a runtime shares this setting while the runtime is open, as it shares the thread pools' limits
(:mod:`perception.scheduler._threads`). Elsewhere than glibc (macOS, musl) this is a no-op.
"""

from __future__ import annotations

import ctypes
import logging
import platform
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "freed_memory_kept", "keep_freed_memory"]

log = logging.getLogger(__name__)

#: glibc's ``mallopt`` parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: Allocations up to this size come from the arenas (glibc's maximum for the mmap threshold).
MMAP_THRESHOLD = 32 << 20
#: Free memory an arena keeps at its top before giving it back to the kernel.
TRIM_THRESHOLD = 256 << 20
#: glibc's initial settings, set again when the last holder leaves.
_INITIAL = (128 << 10, 128 << 10)


class _Kept:
    """The process's one setting: how many holders keep freed memory now."""

    lock = threading.Lock()
    holders = 0


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
    except OSError:  # pragma: no cover - no C library handle
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def keep_freed_memory(keep: bool = True) -> bool:
    """Set (``keep``) or unset the setting in this process, whoever holds it (a worker process sets it for
    its life); unset: glibc's initial thresholds, the pool trimmed. False where there is no glibc."""
    libc = _glibc()
    if libc is None:
        return False
    mmap, trim = (MMAP_THRESHOLD, TRIM_THRESHOLD) if keep else _INITIAL
    libc.mallopt(_M_MMAP_THRESHOLD, mmap)
    libc.mallopt(_M_TRIM_THRESHOLD, trim)
    if not keep:
        libc.malloc_trim(0)
    return True


@contextmanager
def freed_memory_kept() -> Iterator[None]:
    """Keep freed memory while inside (nestable, thread-safe: the first entry sets it, the last exit unsets it)."""
    with _Kept.lock:
        if _Kept.holders == 0 and keep_freed_memory(True):
            log.debug("malloc keeps freed memory (thresholds: mmap %d, trim %d)", MMAP_THRESHOLD, TRIM_THRESHOLD)
        _Kept.holders += 1
    try:
        yield
    finally:
        with _Kept.lock:
            _Kept.holders -= 1
            if _Kept.holders == 0:
                keep_freed_memory(False)
