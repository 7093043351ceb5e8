"""perception._gc: the objects alive once a runtime is open are frozen out of the garbage collector's walks."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from perception import _gc
from perception._gc import startup_heap_frozen


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the garbage collector frees it


@pytest.fixture(autouse=True)
def _nothing_frozen(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test from a process with nothing frozen and no holder (another test's runtime may have left none)."""
    monkeypatch.setattr(_gc._Frozen, "holders", 0)
    monkeypatch.setattr(_gc._Frozen, "ours", False)
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    yield
    gc.unfreeze()
    if frozen:
        gc.freeze()


def test_the_first_holder_freezes_and_the_last_unfreezes() -> None:
    with startup_heap_frozen():
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with startup_heap_frozen():  # nested (a second runtime): nothing frozen again
            pass
        assert gc.get_freeze_count() > 0  # the inner exit does not unfreeze (0 once unfrozen; an object frozen
        # may be freed meanwhile: the count is not compared exactly)
    assert gc.get_freeze_count() == 0


def test_a_cycle_frozen_is_collected_once_unfrozen() -> None:
    node = _Node()
    ref = weakref.ref(node)
    with startup_heap_frozen():
        del node
        gc.collect()  # a full collection walks what was allocated since, not the objects frozen
        assert ref() is not None
    gc.collect()
    assert ref() is None


def test_a_host_that_froze_its_heap_keeps_its_policy() -> None:
    # (the calls are watched, not the count: an object frozen may be freed meanwhile, the count one less)
    gc.freeze()
    calls: list[str] = []
    with pytest.MonkeyPatch.context() as mp:  # undone before the fixture unfreezes for real
        mp.setattr(gc, "freeze", lambda: calls.append("freeze"))
        mp.setattr(gc, "unfreeze", lambda: calls.append("unfreeze"))
        with startup_heap_frozen():
            assert calls == []  # nothing more frozen
        assert calls == []  # nor unfrozen
    assert gc.get_freeze_count() > 0  # the host's heap still frozen
