"""RunRecorder called from the run's threads at once: what it drops is counted, every item, whichever thread."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from pathlib import Path

from perception.record import RecordOptions, RunRecorder
from perception.types import EgoPose, ImageSample, Transform

#: How long a gated read waits for a second reader at most (only the run where something keeps them apart waits).
GATE_S = 1.0
WATCHDOG_S = 30.0


class _GatedCounts(Counter[str]):
    """Counters whose read of ``key`` waits (bounded) for a second reader: two threads counting it at once both
    read it before either writes, unless something keeps them apart."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key
        self.readers = threading.Barrier(2)

    def __getitem__(self, key: str) -> int:
        value = super().__getitem__(key)
        if key == self.key:
            with contextlib.suppress(threading.BrokenBarrierError):
                self.readers.wait(timeout=GATE_S)
        return value


def test_samples_two_threads_drop_at_once_are_both_counted(tmp_path: Path) -> None:
    # Before: the queue's bound and its drop counters were read and written by every thread without a lock:
    # two cameras' threads finding the queue full at once counted one drop (the recording's losses said one).
    rec = RunRecorder(tmp_path / "run.mcap", RecordOptions(queue_items=1))
    rec.ego(EgoPose(0, Transform()), 0)  # the queue is full (its writer not started)
    rec.stats = _GatedCounts("dropped_sample")
    images = [ImageSample(f"cam{i}", 1, f"cam{i}", b"not decoded here") for i in range(2)]
    threads = [threading.Thread(target=rec.sample, args=(image, 1)) for image in images]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WATCHDOG_S)
        assert not t.is_alive()
    assert rec.stats.get("dropped_sample") == 2


def test_an_item_handed_over_after_the_close_is_counted_dropped(tmp_path: Path) -> None:
    # Before: it was queued after the queue's end, never written and never counted
    with RunRecorder(tmp_path / "run.mcap") as rec:
        pass
    rec.ego(EgoPose(0, Transform()), 0)  # a host thread's push racing the close
    rec.sample(ImageSample("cam", 1, "cam", b"not decoded here"), 1)
    assert rec.stats["dropped_ego"] == 1 and rec.stats["dropped_sample"] == 1
