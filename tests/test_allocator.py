"""perception._allocator: glibc's malloc keeps freed memory while a runtime or drive writer holds it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

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
    monkeypatch.setattr(_allocator._Kept, "holders", 0)  # this test's count (another test's runtime may hold it)
    with freed_memory_kept():
        assert libc.calls == [("mallopt", -3, MMAP_THRESHOLD), ("mallopt", -1, TRIM_THRESHOLD)]
        with freed_memory_kept():  # nested (a second runtime): nothing set again
            pass
        assert len(libc.calls) == 2  # the inner exit does not unset it
    assert libc.calls[2:] == [("mallopt", -3, 128 << 10), ("mallopt", -1, 128 << 10), ("trim", 0)]


def test_an_exception_inside_unsets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = _FakeLibc()
    monkeypatch.setattr(_allocator, "_glibc", lambda: libc)
    monkeypatch.setattr(_allocator._Kept, "holders", 0)
    with pytest.raises(RuntimeError), freed_memory_kept():
        raise RuntimeError("boom")
    assert libc.calls[-1] == ("trim", 0)
    assert _allocator._Kept.holders == 0


def test_without_glibc_it_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_allocator, "_glibc", lambda: None)
    monkeypatch.setattr(_allocator._Kept, "holders", 0)
    with freed_memory_kept():
        assert _allocator._Kept.holders == 1
    assert _allocator._Kept.holders == 0


_BURSTS = """
import json, resource, threading
import numpy as np
from perception._allocator import freed_memory_kept

np.core.multiarray._set_madvise_hugepage(False)  # 4 kB pages whatever the host's transparent huge pages

def bursts():  # in a thread of its own: its faults alone (RUSAGE_THREAD)
    faults = []

    def churn():
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
print(json.dumps({"kept": kept, "unset": bursts()}))
"""


@pytest.mark.skipif(_allocator._glibc() is None, reason="glibc's malloc only (this platform has none)")
def test_blocks_freed_in_a_burst_are_reused_without_faulting_their_pages_in_again() -> None:
    """The point of it: six 4 MB blocks held a while, then freed together: once the setting is unset (glibc's
    initial thresholds: such a block is an mmap of its own), the next burst faults ~6000 pages in again; kept,
    they are reused. In a process of its own: the setting is the process's, and another test's runtime may
    hold it (a holder keeps it set for everyone)."""
    out = subprocess.run([sys.executable, "-c", _BURSTS], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    faults = json.loads(out.stdout)
    assert max(faults["kept"][1:]) < 64, faults  # the first burst grows the arena; the others reuse it
    assert min(faults["unset"][1:]) > 1000, faults  # unset: glibc's defaults again (what the setting is for)
