"""The objects alive once a runtime is open, moved out of the garbage collector's generations while it runs.

Once a runtime is open the process holds some 150,000 objects that live as long as it does: modules, compiled
kernels, the Triton client, the models' metadata. Python's full collections (a few a minute at a frame rate,
whenever enough objects have survived the younger generations) walk every one of them again: each was 30-40 ms
of CPU in ``perception live`` and 75-82 ms in a replay of the bundled drive, 0.4-0.8 ms a frame, paid on
whichever of the run's threads allocated at that moment. :func:`gc.freeze` moves them into the permanent
generation, so a full collection walks what the frames allocated and nothing else.

The price: a cycle of garbage among the objects frozen is not collected until the last holder leaves, when
they are unfrozen (:func:`gc.unfreeze`). A host that froze its own heap before keeps its own policy: nothing
is frozen or unfrozen then. Like the allocator's setting (:mod:`perception._allocator`), it is the process's
while a runtime is open.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["startup_heap_frozen"]

log = logging.getLogger(__name__)


class _Frozen:
    """The process's one setting: how many holders are inside, and whether the first one froze the heap."""

    lock = threading.Lock()
    holders = 0
    ours = False


@contextmanager
def startup_heap_frozen() -> Iterator[None]:
    """Freeze the objects alive now while inside (nestable, thread-safe: the first entry freezes, unless the
    process had frozen its heap itself; the last exit unfreezes what the first froze)."""
    with _Frozen.lock:
        if _Frozen.holders == 0:
            _Frozen.ours = gc.get_freeze_count() == 0
            if _Frozen.ours:
                gc.freeze()
                log.debug("%d objects frozen out of the garbage collector", gc.get_freeze_count())
        _Frozen.holders += 1
    try:
        yield
    finally:
        with _Frozen.lock:
            _Frozen.holders -= 1
            if _Frozen.holders == 0 and _Frozen.ours:
                _Frozen.ours = False
                gc.unfreeze()
