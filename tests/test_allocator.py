"""perception._allocator: glibc's malloc keeps freed memory while a runtime or drive writer holds it."""

from __future__ import annotations

import resource
import threading
from typing import Any

import numpy as np
import pytest

from perception import _allocator
from perception._allocator import MMAP_THRESHOLD, TRIM_THRESHOLD, freed_memory_kept


class _FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append(("mallopt", param, value))
        return 1

    def malloc_trim(self, pad: int) -> int:
        self.calls.append(("trim", pad))
        return 1


def test_the_first_holder_sets_it_and_the_last_unsets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = _FakeLibc()
    monkeypatch.setattr(_allocator, "_glibc", lambda: libc)
    with freed_memory_kept():
        assert libc.calls == [("mallopt", -3, MMAP_THRESHOLD), ("mallopt", -1, TRIM_THRESHOLD)]
        with freed_memory_kept():  # nested (a second runtime): nothing set again
            pass
        assert len(libc.calls) == 2  # the inner exit does not unset it
    assert libc.calls[2:] == [("mallopt", -3, 128 << 10), ("mallopt", -1, 128 << 10), ("trim", 0)]


def test_an_exception_inside_unsets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = _FakeLibc()
    monkeypatch.setattr(_allocator, "_glibc", lambda: libc)
    with pytest.raises(RuntimeError), freed_memory_kept():
        raise RuntimeError("boom")
    assert libc.calls[-1] == ("trim", 0)
    assert _allocator._Kept.holders == 0


def test_without_glibc_it_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_allocator, "_glibc", lambda: None)
    with freed_memory_kept():
        assert _allocator._Kept.holders == 1
    assert _allocator._Kept.holders == 0


@pytest.mark.skipif(_allocator._glibc() is None, reason="glibc's malloc only (this platform has none)")
def test_blocks_freed_in_a_burst_are_reused_without_faulting_their_pages_in_again() -> None:
    """The point of it: six 4 MB blocks held a while (a recorder's queue pins ~4 drive chunks) then freed
    together: glibc's defaults give the arena's top back to the kernel (its trim threshold follows the mmap
    threshold: 8 MB), and the next burst faults ~6000 pages in again; kept, it reuses them."""

    def bursts() -> list[int]:  # in a thread of its own: its faults alone (RUSAGE_THREAD)
        faults: list[int] = []

        def churn() -> None:
            for _ in range(4):
                before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
                blocks = [np.ones(4 << 20, dtype=np.uint8) for _ in range(6)]  # every page touched
                del blocks
                faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)

        thread = threading.Thread(target=churn)
        thread.start()
        thread.join()
        return faults

    with freed_memory_kept():
        kept = bursts()
    assert max(kept[1:]) < 64, kept  # the first burst grows the arena; the others reuse it
    assert min(bursts()[1:]) > 1000  # unset: glibc's defaults again (what the setting is for)
