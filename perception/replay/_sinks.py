"""What a replay does with its frame results: sinks.

A sink is opened with the open drive and the replay's rig (runtime sensor name -> drive sensor) before
the first frame; the value it opens to gets :meth:`FrameSink.add` with every frame result, in order; it
is closed when the replay ends, however it ends (done, stopped, failed, cancelled). Replay's own
outputs are sinks (the records, the ground-truth evaluation, the progress bar), and so are the extra
ones a caller adds (a fused MCAP recording, a live view, a timeline, :func:`each_frame`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from perception._progress import Progress
from perception.drives import DriveReader
from perception.metrics import frame_record
from perception.types import FrameResult, FrameStatus, GroundTruth, SensorSpec

if TYPE_CHECKING:
    from perception.evaluation import DetectionEvaluator

__all__ = ["FrameSink", "ReplaySink", "each_frame"]


class FrameSink(Protocol):
    """An open sink: gets every frame result of the replay, in order."""

    def add(self, result: FrameResult, /) -> None: ...


#: A sink of a replay: called with the open drive and the replay's rig, it returns a context manager whose
#: value is the open :class:`FrameSink`; it is exited when the replay ends, however it ends.
ReplaySink = Callable[[DriveReader, Mapping[str, SensorSpec]], AbstractContextManager[FrameSink]]


class _Call:
    __slots__ = ("add",)

    def __init__(self, fn: Callable[[FrameResult], None]) -> None:
        self.add = fn


def each_frame(fn: Callable[[FrameResult], None]) -> ReplaySink:
    """A sink calling ``fn`` with every frame result in order (a counter, a metrics exporter, a list's
    ``append`` to keep the results)."""

    @contextlib.contextmanager
    def open_sink(_reader: DriveReader, _rig: Mapping[str, SensorSpec]) -> Iterator[FrameSink]:
        yield _Call(fn)

    return open_sink


class RecordsSink:
    """``detections.jsonl``: one record per frame, written and flushed as each frame completes."""

    def __init__(self, path: Path, *, include_outputs: bool) -> None:
        self._path = path
        self._include_outputs = include_outputs
        self._file: Any = None

    def __call__(self, _reader: DriveReader, _rig: Mapping[str, SensorSpec]) -> AbstractContextManager[FrameSink]:
        return self

    def __enter__(self) -> RecordsSink:
        self._file = self._path.open("w", encoding="utf-8")
        return self

    def __exit__(self, *_exc: object) -> None:
        self._file.close()

    def add(self, result: FrameResult) -> None:
        self._file.write(json.dumps(frame_record(result, include_outputs=self._include_outputs)))
        self._file.write("\n")
        self._file.flush()


class EvaluationSink:
    """Every frame that was not dropped scored against the drive's ground truth at its time; a frame shed
    under overload is scored by its predicted detections (what downstream had at its time)."""

    def __init__(self, evaluator: DetectionEvaluator, gt_at: Callable[[int], GroundTruth | None]) -> None:
        self.evaluator = evaluator
        self._gt_at = gt_at

    def __call__(self, _reader: DriveReader, _rig: Mapping[str, SensorSpec]) -> AbstractContextManager[FrameSink]:
        return contextlib.nullcontext(self)

    def add(self, result: FrameResult) -> None:
        if result.status is FrameStatus.DROPPED and not result.predicted:
            return
        gt = self._gt_at(result.t_ns)
        if gt is not None:
            self.evaluator.add(result.t_ns, result.detections, gt)


class ProgressSink:
    """The progress bar over the drive's time (on when ``enabled``, or None and stderr is a terminal)."""

    def __init__(self, enabled: bool | None) -> None:
        self._enabled = enabled
        self._start_ns = 0
        self._bar: Progress | None = None

    @contextlib.contextmanager
    def __call__(self, reader: DriveReader, _rig: Mapping[str, SensorSpec]) -> Iterator[FrameSink]:
        self._start_ns = reader.start_ns
        duration = max(1, reader.end_ns - reader.start_ns)
        with Progress(duration / 1e9, "replay", enabled=self._enabled) as bar:
            self._bar = bar
            yield self

    def add(self, result: FrameResult) -> None:
        assert self._bar is not None
        self._bar.update((result.t_ns - self._start_ns) / 1e9, f"frame {result.frame_id}")
