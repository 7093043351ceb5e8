"""RunRecorder: writes a run's inputs and decisions into one MCAP (a drive plus the decisions).

The recorder is a :class:`perception.scheduler.RunObserver`: the entry point calls it from its own
threads (intake, fusion's worker thread, result delivery) and each call only hands references to a
bounded queue; one writer thread owns the file (encoding, compression, rotation). Nothing is raised into
the run: a call that finds the queue full drops its item (counted in :attr:`RunRecorder.stats`, said by the
end-of-run line), a sample the drive format refuses is counted too (``refused``: one the runtime refuses as
well, a cloud it would misread; a point cloud is written as the run takes it, :data:`._format.META_POINTS`).
Each segment says what was lost while it was written (``_format.LOSSES_TOPIC``, as it is finished), and a
frame dropped so shows as a gap in the fusion order (``seq``) or in the delivered results' indexes: its
replay names both. The tracker's state is copied in fusion's thread (it changes with the next frame) and
written, like the rest, by the writer. The run computes no digest (format 4): the recording holds every value a
digest covers, bit for bit, and its reader derives them (``_format.fusion_digests``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt

from perception._lifetime import Lifetime
from perception.drives import DriveWriter
from perception.errors import ConfigError, DriveError, PerceptionError
from perception.kinds import SensorKindDef, in_kind_order, kind_def
from perception.record import _format as fmt
from perception.record._digest import Layout, detection_values, detections_digest, recorded_arrays, recorded_outputs
from perception.scheduler import FusionStage, Session, TrackingStage
from perception.types import (
    Detection3D,
    EgoPose,
    Frame,
    FrameResult,
    ImageSample,
    PointCloudSample,
    Sample,
    SensorResult,
)

__all__ = ["RecordOptions", "RunRecorder"]

log = logging.getLogger(__name__)

_ENCODER = json.JSONEncoder(separators=(",", ":"))  # json.dumps(..., separators=...) without one per call
#: Received images remembered per sensor (the run threads'), by payload identity: which received image a
#: frame's is (its stamp as received). As many as the live assembler buffers a sensor (``MAX_BUFFERED``): a
#: frame's image is one of them, whatever the other sensors send (256 for the whole rig lost a slow camera's
#: images behind a fast one's). Only the stamp is kept, not the payload: an image a frame uses is alive, so no
#: other payload has its identity, and every received image is handed over (:meth:`RunRecorder.sample`) before
#: a frame can use it, its entry replacing any older one under that identity (the payloads held kept every
#: image of the bundled drive alive, ~7 MB between the run's transient buffers: its heap grew all run long,
#: ~40 fresh pages faulted in a frame).
_IMAGES_PER_SENSOR = 256
#: Received sweeps remembered per sensor (held: their rows are compared): which received sweeps a frame's
#: cloud begins with and merged.
_RECENT_PER_SENSOR = 16
#: Frames delivered that wake the writer (see RunRecorder._put): it writes several frames at a time, its code
#: and data warm in the caches (in a run, between the run's threads: one frame at a time cost ~1.4x as much).
_WAKE_RESULTS = 32
#: A segment's MCAP chunks: at most this, and half its size (a segment is rotated once the chunks written pass
#: its size, the chunk being filled not counted: it ends at most a chunk and a message over; 4 MiB chunks made a
#: 1 MiB segment 4.3 MB).
_CHUNK_BYTES = 4 * 2**20
#: Why a file where the recording would replace an earlier one's segment is refused (RunRecorder.check_replaceable).
_NOT_A_SEGMENT = "exists and is not a segment of a recording: move it or record to another name"
#: Sample bytes waiting that wake the writer (see RunRecorder._put): what the queue pins is bounded by bytes, not
#: only by frames (32 frames of a 12-sensor rig are ~200 MB, and its 512 items overflow the queue). Not less: a
#: wake-up per 4 MiB (~8 frames of the bundled drive) cost the writer ~15 % more CPU than one per ~32 frames
#: (its code and data cold at each wake-up; bench/README.md); 16 MiB is ~30 frames of the bundled drive.
_WAKE_BYTES = 16 * 2**20
_FUSED_REMEMBERED = 256  # frames fused whose results are not written yet (the writer's; see _remember)
_WAKE_AT = 256  # items waiting that wake the writer whatever they are (samples of a run whose frames stall)
_ARRIVALS_BATCH = 64  # arrivals per /record/arrivals message at most (one a frame otherwise)
_SPOT_ROWS = 256  # of an accumulated cloud's rows, every 256th (and the last) is checked against the sweep's
#: The counters (RunRecorder.stats) of what the recorder lost: written with each segment (_write_losses).
_LOSSES = ("dropped_", "refused", "unknown_sensor", "before_begin_")


@dataclass(frozen=True, slots=True)
class RecordOptions:
    """How a recording is bounded: segments of at most ``segment_bytes`` (the next is ``FILE-0001.mcap``...),
    at most ``max_segments`` of them kept (the oldest deleted; 0 keeps all). ``queue_items``: items waiting
    for the writer before new ones are dropped (counted). ``compression``: the MCAP chunks' ("none": lz4
    or zstd cost the run more CPU than the bytes they save; float32 sweeps hardly compress). The chunks
    carry no CRC either (``DriveWriter(crcs=False)``): the recording's cost is the run's. A segment is written
    streaming (``DriveWriter(streaming=True)``): past the page cache (``O_DIRECT``; where the file system refuses
    it, buffered and what it wrote 16 MB ago dropped from the page cache), so a long recording does not fill
    the host's memory and the kernel copies nothing."""

    segment_bytes: int = 256 * 2**20
    max_segments: int = 8
    queue_items: int = 512
    compression: str = "none"

    def __post_init__(self) -> None:
        if self.segment_bytes < 2**20:
            raise ConfigError(f"at least 1 MiB, got {self.segment_bytes} bytes", key="segment_bytes")
        if self.max_segments < 0:
            raise ConfigError(f"must be >= 0 (0: keep all), got {self.max_segments}", key="max_segments")
        if self.queue_items < 1:
            raise ConfigError(f"must be >= 1, got {self.queue_items}", key="queue_items")
        if self.compression not in ("none", "lz4", "zstd"):
            raise ConfigError(f"one of none, lz4, zstd, got {self.compression!r}", key="compression")


class _RecordingFusion:
    """The run's fusion stage, seen: every call recorded in call order (the order frames reach fusion)."""

    def __init__(self, inner: FusionStage, recorder: RunRecorder) -> None:
        self._inner = inner
        self._recorder = recorder
        self._state: Callable[[], Mapping[str, Any]] | None = (
            inner.tracker_state if isinstance(inner, TrackingStage) else None
        )

    def __call__(
        self, frame: Frame, results: Mapping[str, SensorResult]
    ) -> tuple[tuple[Detection3D, ...], Mapping[str, int]]:
        detections, stages = self._inner(frame, results)
        seq = self._recorder.next_seq()
        try:
            self._recorder.fused(seq, frame, dict(results), detections, self._state)
        except Exception:  # never into the run
            self._recorder.stats["failed"] += 1
            log.exception("recording frame %d failed", frame.frame_id)
        return detections, stages


class _RecordingTracker(_RecordingFusion):
    """A tracking fusion stage, seen (a :class:`perception.scheduler.TrackingStage` itself): a shed frame's
    prediction (``Runtime.shed``), in its fusion turn, recorded in the fusion order like a fused frame
    (read-only: the tracker stays as it was), for the replay to predict it at that place."""

    def __init__(self, inner: TrackingStage, recorder: RunRecorder) -> None:
        super().__init__(inner, recorder)
        self._tracker = inner

    def predict(self, frame: Frame) -> tuple[Detection3D, ...]:
        detections = self._tracker.predict(frame)
        try:
            self._recorder.predicted(self._recorder.next_seq(), frame, detections)
        except Exception:  # never into the run
            self._recorder.stats["failed"] += 1
            log.exception("recording frame %d's prediction failed", frame.frame_id)
        return detections

    def tracker_state(self) -> Mapping[str, Any]:
        return self._tracker.tracker_state()


class RunRecorder:
    """Records a run into ``path`` (see the module docs); a :class:`perception.scheduler.RunObserver`.

    ``with RunRecorder(path) as rec:`` then pass ``rec`` as the entry point's ``observer``. ``ego_poses``:
    the source's poses when fusion reads them (a replay of a drive), written into every segment.
    """

    def __init__(
        self, path: str | Path, options: RecordOptions | None = None, *, ego_poses: Sequence[EgoPose] = ()
    ) -> None:
        self.path = Path(path)
        self.options = options or RecordOptions()
        self._ego_poses = tuple(ego_poses)
        self._poses_data: bytes | None = None  # their encoding (the writer's, made once: fmt.encode_poses)
        self._items: deque[tuple[str, Any] | None] = deque()  # for the writer (None: the end), see _put
        #: Held to hand an item over (the run's threads, :meth:`_put`) and to end or empty the queue (close, the
        #: writer failing): the queue's bound, its counts and the wake-up are read and changed together.
        self._queue_lock = threading.Lock()
        self._wake = threading.Event()
        self._wake_at = max(1, min(_WAKE_AT, self.options.queue_items // 2))
        self._results_waiting = 0  # results handed over since the writer was last woken
        self._bytes_waiting = 0  # sample payload bytes handed over since the writer was last woken
        self._failed = False
        self._state = Lifetime.UNOPENED
        self._thread = threading.Thread(target=self._write_loop, name="run-recorder", daemon=True)
        self._lock = threading.Lock()
        #: The latest images' received stamps per sensor (recorded name), by payload identity (the run threads',
        #: under the lock; see _IMAGES_PER_SENSOR and fused).
        self._images: dict[str, OrderedDict[int, int]] = {}
        #: The latest point samples handed to the writer per sensor (recorded name; the run threads', under
        #: the lock, in the queue's order): what a frame's cloud is traced to in fusion's thread (see fused).
        self._sweeps: dict[str, deque[PointCloudSample]] = {}
        self._seq_of: dict[int, int] = {}  # frame id -> its fusion seq (until its result is recorded)
        self._frames = 0
        self._seq = 0  # the next frame's place in the fusion order
        self._runs = 0  # begin() calls
        #: Counters: ``samples``, ``fused``, ``predicted`` (shed frames), ``frames`` written; ``dropped_<kind>``
        #: (the queue was full), ``refused`` (a sample the drive format refuses), ``unknown_sensor``,
        #: ``failed``, ``segments`` (opened), ``segments_deleted`` (by ``max_segments``), ``wakes`` (the writer's),
        #: ``replaced`` (the earlier recording's files deleted).
        self.stats: Counter[str] = Counter()
        #: The writer thread's whole CPU time (ns: waking, encoding, writing, finishing segments) and the bytes of
        #: the finished segments (:attr:`deleted_bytes`: of those deleted since). (The calls on the run's threads do
        #: not time themselves: a thread's CPU clock is a system call, ~1.7 us, two a call cost ~28 us a frame;
        #: bench/bench_record.py times them.)
        self.cpu_ns = 0
        self.bytes = 0
        self._sizes: dict[int, int] = {}  # finished segment -> its bytes (the writer's: until it is deleted)
        self._lost: dict[str, int] = {}  # the loss counters as the last segment finished said them (_write_losses)
        self._writer: DriveWriter | None = None
        self._segment = -1
        self._rig: list[Any] = []
        self._kinds: dict[str, SensorKindDef] = {}  # recorded name -> its kind (the writer's, the run's rig)
        self._names: dict[str, str] = {}  # source sensor name -> recorded (configured) name
        self._metadata: dict[str, str] = {}
        self._error: BaseException | None = None
        #: The latest point samples written per sensor, as received (the writer thread's): what frames' clouds
        #: begin with.
        self._recent: dict[str, deque[PointCloudSample]] = {}
        #: fusion seq -> the detections fused (the writer thread's), until the frame's result is written: a
        #: result delivering those very detections records no digest (the reader derives it from the fused).
        self._fused: dict[int, tuple[Detection3D, ...]] = {}
        #: Arrivals not written yet (each one's JSON), and the first one's stamp (the writer thread's).
        self._arrivals: list[str] = []
        self._arrivals_t_ns = 0
        #: The received stamps' clock minus the frames' (the writer thread's): a live run's time base maps stamps
        #: to the host clock (a ROS node's: the ROS clock's); the frames' records are logged on the samples'
        #: clock with it, so that a viewer (Foxglove) shows each beside its samples, not decades away from them.
        self._stamp_offset = 0

    # -- lifetime ---------------------------------------------------------------------------------
    @property
    def state(self) -> Lifetime:
        """Where the recorder is in its life (:class:`~perception._lifetime.Lifetime`)."""
        return self._state

    @property
    def error(self) -> BaseException | None:
        """Why the recording stopped (a file that could not be created or written: the run goes on unrecorded,
        :meth:`close` raises it), None while it records."""
        return self._error

    @staticmethod
    def gaps(stats: Mapping[str, int]) -> dict[str, int]:
        """A recorder's :attr:`stats` of what it did not record: ``dropped_<kind>`` (its queue was full),
        ``refused`` (the drive format refused a sample), ``failed`` (recording a fused frame raised)."""
        return {k: v for k, v in stats.items() if v and (k.startswith("dropped_") or k in ("refused", "failed"))}

    def __enter__(self) -> RunRecorder:
        self._state.check_unopened("run recorder")
        self.check_replaceable()
        self._thread.start()
        self._state = Lifetime.OPENED
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def files(self) -> list[Path]:
        """The files of the recording at :attr:`path` that exist now, in order: ``path`` and its rotated segments
        (``<stem>-0001.mcap``...). The run's beginning (its first :meth:`begin`, on the writer thread) deletes an
        earlier recording's (it is replaced whole: none of a longer one's segments is read as this one's); not
        entering the recorder: a run that fails to start (a ROS node whose profile is not there) leaves it."""
        return fmt.segments(self.path)

    def check_replaceable(self) -> None:
        """Refuse (:class:`DriveError` naming the file) when a file the recording would replace (:meth:`files`:
        ``path``, ``<stem>-0001.mcap``... by their names) is not a segment of a recording -- a drive, another
        tool's MCAP, any other file: only a recording's segments (or one cut short before its metadata, by a
        crash) are ever deleted or overwritten. Entering the recorder and its first run's beginning check."""
        for f in self.files():
            if not fmt.is_replaceable_segment(f):
                raise DriveError(_NOT_A_SEGMENT, file=str(f))

    def _replace_earlier(self) -> None:
        self.check_replaceable()  # (again: a file may have appeared since the recorder was entered)
        earlier = self.files()
        for old in earlier:
            try:
                old.unlink(missing_ok=True)
            except OSError as exc:
                raise DriveError(f"cannot replace the earlier recording: {exc.strerror or exc}", file=str(old)) from exc
        if earlier:
            self.stats["replaced"] = len(earlier)
            log.warning("recording %s replaces an earlier recording (%d file(s) deleted)", self.path, len(earlier))

    def close(self) -> None:
        """Write what is queued, finish the segment (idempotent; a no-op on one never entered)."""
        if self._state is not Lifetime.OPENED:
            return
        self._state = Lifetime.CLOSING
        try:
            with self._queue_lock:  # an item handed over from now on is dropped, counted (_put)
                self._items.append(None)
            self._wake.set()
            self._thread.join()
        finally:
            self._state = Lifetime.CLOSED
        if self._error is not None:
            raise PerceptionError(f"recording {self.path} failed: {self._error}") from self._error

    # -- RunObserver ------------------------------------------------------------------------------
    def begin(self, session: Session) -> None:
        """A run starts (again, for a ROS node activated anew: a new segment, its fusion starting afresh)."""
        rig = [dataclasses.replace(spec, name=name) for name, spec in session.rig.items()]
        self._names = {spec.name: name for name, spec in session.rig.items()}
        self._names.update({name: name for name in session.rig})
        meta = {k: str(v) for k, v in session.source.metadata.items() if not k.startswith("record.")}
        meta[fmt.META_FORMAT] = fmt.FORMAT_VERSION
        meta[fmt.META_EGO] = "source" if session.source.ego_at is not None else "frame"
        meta[fmt.META_POINTS] = fmt.POINTS_TAKEN
        with self._lock:
            meta[fmt.META_RUN] = str(self._runs)
            self._runs += 1
        with self._queue_lock:
            self._items.append(("begin", (rig, meta)))  # never dropped: the recording cannot start without it
        self._wake.set()

    def fusion(self, stage: FusionStage | None) -> FusionStage | None:
        if stage is None:
            return None
        return _RecordingTracker(stage, self) if isinstance(stage, TrackingStage) else _RecordingFusion(stage, self)

    @property
    def deleted_bytes(self) -> int:
        """The bytes of the finished segments deleted since (``max_segments``): :attr:`bytes` less those kept."""
        return self.bytes - sum(self._sizes.values())

    def sample(self, sample: Sample, arrival_ns: int) -> None:
        if type(sample.t_ns) is not int:  # a numpy integer (the live intake takes them): a plain int from here on
            sample = dataclasses.replace(sample, t_ns=int(sample.t_ns))  # (the same payload: traced by identity)
        if isinstance(sample, ImageSample):
            data = sample.data
            with self._lock:
                name = self._names.get(sample.sensor)
                if name is not None:  # (else never in a frame)
                    images = self._images.get(name)
                    if images is None:
                        images = self._images[name] = OrderedDict()
                    images[id(data)] = sample.t_ns
                    images.move_to_end(id(data))  # (the payload pushed again, or a freed one's identity: the latest)
                    if len(images) > _IMAGES_PER_SENSOR:
                        images.popitem(last=False)
            self._put("sample", (sample, arrival_ns), len(data))
        elif isinstance(sample, PointCloudSample):
            with self._lock:  # the sweeps remembered in the queue's order: the writer's record as fused() sees it
                name = self._names.get(sample.sensor)
                if self._put("sample", (sample, arrival_ns), sample.points.nbytes) and name is not None:
                    self._sweeps.setdefault(name, deque(maxlen=_RECENT_PER_SENSOR)).append(sample)
        else:
            self._put("sample", (sample, arrival_ns))

    def ego(self, pose: EgoPose, arrival_ns: int) -> None:
        self._put("ego", (pose, arrival_ns))

    def result(self, result: FrameResult) -> None:
        with self._lock:
            index, self._frames = self._frames, self._frames + 1
            seq = self._seq_of.pop(result.frame_id, None)
        self._put("result", (index, seq, result))

    # -- from fusion's thread ---------------------------------------------------------------------
    def next_seq(self) -> int:
        """The next frame's place in the fusion order (over every run of this recording)."""
        with self._lock:
            seq, self._seq = self._seq, self._seq + 1
            return seq

    def fused(
        self, seq: int, frame: Frame, results: Mapping[str, SensorResult], detections: tuple[Detection3D, ...],
        tracker_state: Callable[[], Mapping[str, npt.NDArray[Any]]] | None,
    ) -> None:  # fmt: skip
        """A frame fused in its turn ``seq``; ``tracker_state``: the tracker's state after it (copies: the next
        frame changes the tracker's own), None without one, taken here and written by the writer. Each
        accumulated cloud is traced here to the received sweeps it is made of (:func:`_traced`: a few rows
        compared), so that the queue holds those sweeps (held anyway) instead of the cloud (~0.9 MB a frame on
        the bundled drive, ~32 frames long: freed in bursts, its memory faulted in again and again); a cloud
        not traced so is handed over as it is, for the writer's thorough search."""
        tracker = tracker_state() if tracker_state is not None else None
        samples: dict[str, Sample | _Traced | None] = dict(frame.samples)
        with self._lock:
            self._seq_of[frame.frame_id] = seq
            raw: dict[str, int | None] = {}  # an image's received stamp
            for name, s in frame.samples.items():
                if isinstance(s, ImageSample):
                    images = self._images.get(name)
                    raw[name] = None if images is None else images.get(id(s.data))
                elif isinstance(s, PointCloudSample):
                    samples[name] = _traced(self._sweeps.get(name, ()), s) or s
            # under the lock: the sweeps traced to are those queued before this frame (the writer's record then)
            # what the writer reads of it (frame id, time, ego pose), without the samples
            frame = Frame(frame.frame_id, frame.t_ns, samples={}, ego=frame.ego, created_ns=frame.created_ns)
            self._put("fused", (seq, frame, results, detections, tracker, raw, samples))

    def predicted(self, seq: int, frame: Frame, detections: tuple[Detection3D, ...]) -> None:
        """A shed frame's prediction, taken in its fusion turn ``seq`` (Runtime.shed)."""
        with self._lock:
            self._seq_of[frame.frame_id] = seq
        self._put("predicted", (seq, frame, detections))

    def _put(self, kind: str, item: Any, size: int = 0) -> bool:
        """Hand ``item`` to the writer, from any of the run's threads: appended to its queue under its lock (held
        for the append and the counts: threads dropping items at once lost counts), the writer woken once
        :data:`_WAKE_BYTES` of samples (``size``: the item's payload bytes) or :data:`_WAKE_RESULTS` frames'
        results were handed over, or :data:`_WAKE_AT` items wait (at most half the queue): a wake-up per sample
        cost the run as much as writing it, and one a frame ~1.4x as much as one every several (the writer's code
        and data cold each time). The items wait in memory meanwhile (their samples: ~0.54 MB a frame on the
        bundled drive, ~30 frames); :meth:`close` writes them all. False: the item was dropped, counted (the
        queue full, the recording failed, or closed: an item after its end was never written, nor counted)."""
        with self._queue_lock:
            if self._failed or self._state.done or len(self._items) >= self.options.queue_items:
                self.stats[f"dropped_{kind}"] += 1
                return False
            self._items.append((kind, item))
            if kind == "result":
                self._results_waiting += 1
            self._bytes_waiting += size
            wake = (
                self._bytes_waiting >= _WAKE_BYTES
                or self._results_waiting >= _WAKE_RESULTS
                or len(self._items) >= self._wake_at
            )
            if wake:
                self._results_waiting = self._bytes_waiting = 0
        if wake:
            self._wake.set()
        return True

    # -- the writer thread ------------------------------------------------------------------------
    def _write_loop(self) -> None:
        """Drain the queue whenever woken; :attr:`cpu_ns` is this thread's whole CPU time (waking, writing,
        finishing the segments)."""
        items = self._items
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                self.stats["wakes"] += 1
                while items:
                    item = items.popleft()
                    if item is None:
                        return
                    try:
                        self._write(*item)
                    except DriveError as exc:
                        # the file could not be created or written, or an earlier one not replaced
                        if isinstance(exc.__cause__, OSError) or item[0] == "begin":
                            raise
                        self.stats["refused"] += 1  # the drive format refuses the sample
                        log.debug("recording: %s", exc)
                self.cpu_ns = time.thread_time_ns()
        except BaseException as exc:  # an I/O failure ends the recording, never the run
            self._error = exc
            with self._queue_lock:
                self._failed = True  # the callers' items are dropped (counted) from now on
                items.clear()
            if isinstance(exc, DriveError):  # the file could not be created or written: no traceback for that
                log.error("recording %s failed; the run goes on unrecorded: %s", self.path, exc)
            else:
                log.exception("recording %s failed; the run goes on unrecorded", self.path)
        finally:
            try:
                self._finish_segment()
            except Exception as exc:  # the segment cannot be finished (after a failed write: the file again)
                if self._error is None:
                    self._error, self._failed = exc, True
                    log.error("recording %s failed at its end: %s", self.path, exc)
            finally:
                self.cpu_ns = time.thread_time_ns()

    def _write(self, kind: str, item: Any) -> None:
        if kind == "begin":
            if self._segment < 0:  # the recording's first run: it replaces an earlier recording at its path now
                self._replace_earlier()
            self._finish_segment()  # a run begun again: its own segment
            self._rig, self._metadata = item
            self._kinds = {spec.name: kind_def(spec.kind) for spec in self._rig}
            self._open_segment()
            return
        writer = self._writer
        if writer is None:
            self.stats[f"before_begin_{kind}"] += 1
            return
        if kind == "sample":
            self._write_sample(writer, *item)
        elif kind == "ego":
            pose, arrival = item
            writer.write_ego_pose(pose)
            self._arrival(writer, "ego", pose.t_ns, arrival)
        elif kind == "fused":
            self._write_fused(writer, *item)
        elif kind == "predicted":
            self._write_predicted(writer, *item)
        elif kind == "result":
            self._write_result(writer, *item)
        if writer.bytes_written >= self.options.segment_bytes:
            self._finish_segment()
            self._open_segment()

    def _write_sample(self, writer: DriveWriter, sample: Sample, arrival: int) -> None:
        name = self._names.get(sample.sensor)
        if name is None:
            self.stats["unknown_sensor"] += 1
            return
        if name != sample.sensor:
            sample = dataclasses.replace(sample, sensor=name)
        if isinstance(sample, PointCloudSample):  # as the run takes it (fmt.META_POINTS)
            writer.write(in_kind_order(sample, self._kinds[name], named=True))
            self._recent.setdefault(name, deque(maxlen=_RECENT_PER_SENSOR)).append(sample)  # (by identity)
        else:
            writer.write(sample)
        self.stats["samples"] += 1
        self._arrival(writer, name, sample.t_ns, arrival)

    def _write_fused(
        self, writer: DriveWriter, seq: int, frame: Frame, results: Mapping[str, SensorResult],
        detections: tuple[Detection3D, ...], tracker: Mapping[str, npt.NDArray[Any]] | None,
        raw: Mapping[str, int | None], frame_samples: Mapping[str, Sample | _Traced | None],
    ) -> None:  # fmt: skip
        samples: dict[str, Any] = {}
        for name, s in frame_samples.items():
            if s is None:
                samples[name] = None
            elif isinstance(s, _Traced):  # traced in fusion's thread (see fused), to sweeps written (checked)
                samples[name] = s.entry(self._recent.get(name, ()))
            elif isinstance(s, PointCloudSample):
                # A frame's cloud is the received sweep, then (accumulated) earlier sweeps moved into it: only
                # the rows after the received sweep's are written again (the sweep is on its own topic).
                recent = self._recent.get(name, ())
                base = _received_prefix(recent, s)
                n0 = 0 if base is None else base.points.shape[0]
                merged = _merged(recent, s, base) if base is not None else None
                extra = merged is None and s.points.shape[0] > n0
                if extra:  # rows the recording cannot rebuild: written as they are (as the sweeps are)
                    rows = in_kind_order(s if n0 == 0 else _rows_from(s, n0), self._kinds[name], named=True)
                    writer.write_points(fmt.points_topic(name), rows, seq)
                samples[name] = {"t_ns": s.t_ns, "raw_t_ns": None if base is None else base.t_ns, "points": extra}
                if merged:
                    samples[name]["merged"] = [m for _, m in merged]
            else:
                samples[name] = {"t_ns": s.t_ns, "raw_t_ns": raw.get(name)}
        for entry in samples.values():  # the frame's clock against its samples' as received (the trigger's)
            if entry is not None and entry.get("raw_t_ns") is not None:
                self._stamp_offset = int(entry["raw_t_ns"]) - int(entry["t_ns"])
                if entry["t_ns"] == frame.t_ns:
                    break
        values = detection_values(detections)
        self._remember(seq, detections)
        layout, data = recorded_outputs(results)
        state: tuple[Layout, list[Any]] | None = recorded_arrays(tracker) if tracker is not None else None
        # {"seq", "frame_id", "t_ns", "ego", "samples", "sensors", "detections", "tracker"} as the encoder writes
        # it: the floats (ego) and the samples' entries by the encoder, the rest (integers, names, layouts:
        # mostly the same from frame to frame) assembled from remembered pieces
        floats = _ENCODER.encode({"ego": fmt.encode_ego(frame.ego), "samples": samples})
        text = (f'{{"seq":{_scalar(seq)},"frame_id":{_scalar(frame.frame_id)},"t_ns":{_scalar(frame.t_ns)},'
                f'{floats[1:-1]},'
                f'"sensors":{_sensors_json(results, layout)},"detections":{_detections_json(detections)},'
                f'"tracker":{"null" if state is None else _layout_json(state[0])}}}')  # fmt: skip
        t_ns = self._logged(frame.t_ns)
        self._write_frame_record(writer, seq, t_ns, text, values, data, () if state is None else state[1])
        self.stats["fused"] += 1

    def _write_predicted(
        self, writer: DriveWriter, seq: int, frame: Frame, detections: tuple[Detection3D, ...]
    ) -> None:
        """A shed frame's place in the fusion order: its time and ego pose (what the prediction reads) and the
        detections predicted; the tracker is as the frame before left it (no tracker state)."""
        values = detection_values(detections)
        self._remember(seq, detections)
        head = {
            "seq": seq,
            "frame_id": frame.frame_id,
            "t_ns": frame.t_ns,
            "predicted": True,
            "ego": fmt.encode_ego(frame.ego),
            "samples": {},
            "sensors": {},
        }
        text = f'{_ENCODER.encode(head)[:-1]},"detections":{_detections_json(detections)},"tracker":null}}'
        self._write_frame_record(writer, seq, self._logged(frame.t_ns), text, values, b"")
        self.stats["predicted"] += 1

    def _write_frame_record(
        self, writer: DriveWriter, seq: int, t_ns: int, record: str, values: npt.NDArray[np.float64], outputs: bytes,
        tracker: Sequence[Any] = (),
    ) -> None:  # fmt: skip
        """A frame's fusion record (its JSON: what Foxglove shows) and its numbers (binary, the arrays' own
        buffers: the detections' values, the raw outputs, the tracker state's arrays: ``tracker``, views of
        the copies fusion's thread made), then the arrivals batched since the last frame."""
        writer.write_json(fmt.FUSION_TOPIC, t_ns, record.encode(), seq)
        writer.write_bytes(fmt.FUSION_DATA_TOPIC, t_ns, (values.tobytes(), outputs, *tracker), seq)
        self._flush_arrivals(writer)

    def _remember(self, seq: int, detections: tuple[Detection3D, ...]) -> None:
        self._fused[seq] = detections
        if len(self._fused) > _FUSED_REMEMBERED:  # results never delivered (a run cut short)
            del self._fused[next(iter(self._fused))]

    def _write_result(self, writer: DriveWriter, index: int, seq: int | None, r: FrameResult) -> None:
        # the digest of the detections delivered: none when they are the very detections fusion gave the frame
        # (the reader derives it from their fusion record: _format.frame_digest), else theirs (rare)
        digest = None
        if seq is not None and self._fused.pop(seq, None) is not r.detections:
            digest = detections_digest(r.detections)
        # {"index", "frame_id", "t_ns", "status", "reason", "predicted", "admission_limit", "deadline_missed",
        # "latency_ns", "fusion_seq", "sensors", "detections", "digest"} as the encoder writes it, without it
        text = (f'{{"index":{_scalar(index)},"frame_id":{_scalar(r.frame_id)},"t_ns":{_scalar(r.t_ns)},'
                f'"status":{_quoted(r.status.value)},"reason":{_scalar(r.reason)},"predicted":{_scalar(r.predicted)},'
                f'"admission_limit":{_scalar(r.admission_limit)},"deadline_missed":{_scalar(r.deadline_missed)},'
                f'"latency_ns":{_scalar(r.latency.total_ns)},"fusion_seq":{_scalar(seq)},'
                f'"sensors":{_sensors_json(r.sensors, {})},"detections":{len(r.detections)},'
                f'"digest":{_scalar(digest)}}}')  # fmt: skip
        writer.write_json(fmt.FRAMES_TOPIC, self._logged(r.t_ns), text.encode(), index)
        self.stats["frames"] += 1

    def _logged(self, t_ns: int) -> int:
        """A frame's time on the received stamps' clock: its records' log time (their own ``t_ns`` is the frame's)."""
        return max(0, t_ns + self._stamp_offset)

    def _arrival(self, writer: DriveWriter, sensor: str, t_ns: int, arrival_ns: int) -> None:
        # json.dumps's output for {"sensor": ..., "t_ns": ..., "arrival_ns": ...}, at a third of its cost; written
        # in a batch with the next frame's record (one message, not one per sample)
        if not self._arrivals:
            self._arrivals_t_ns = t_ns
        self._arrivals.append(f'{{"sensor":{_quoted(sensor)},"t_ns":{int(t_ns)},"arrival_ns":{int(arrival_ns)}}}')
        if len(self._arrivals) >= _ARRIVALS_BATCH:
            self._flush_arrivals(writer)

    def _write_losses(self, writer: DriveWriter) -> None:
        """What was lost while this segment was written (the counters' growth since the last segment's), on
        :data:`._format.LOSSES_TOPIC`: the recording says its own gaps, which its replay reports."""
        now = {k: v for k, v in list(self.stats.items()) if k.startswith(_LOSSES)}
        lost = {k: v - self._lost.get(k, 0) for k, v in sorted(now.items()) if v > self._lost.get(k, 0)}
        self._lost = now
        writer.write_json(fmt.LOSSES_TOPIC, self._arrivals_t_ns, _ENCODER.encode({"lost": lost}).encode())

    def _flush_arrivals(self, writer: DriveWriter) -> None:
        if self._arrivals:
            data = ('{"arrivals":[' + ",".join(self._arrivals) + "]}").encode()
            self._arrivals.clear()
            writer.write_json(fmt.ARRIVALS_TOPIC, self._arrivals_t_ns, data)

    def _open_segment(self) -> None:
        self._segment += 1
        path = fmt.segment_path(self.path, self._segment)
        if path.exists() and fmt.is_replaceable_segment(path):  # a recording's (another run's): replaced
            path.unlink(missing_ok=True)
        meta = {
            **self._metadata,
            fmt.META_SEGMENT: str(self._segment),
            fmt.META_PREDICTED_BEFORE: str(self.stats["predicted"]),  # (the writer's: those written before it)
        }
        try:
            # new: a file that appeared under its name since the run began is refused, never overwritten
            writer = DriveWriter(
                path,
                self._rig,
                metadata=meta,
                compression=self.options.compression,
                chunk_size=min(_CHUNK_BYTES, self.options.segment_bytes // 2),
                crcs=False,
                streaming=True,
                exclusive=True,
            )
        except DriveError as exc:
            if isinstance(exc.__cause__, FileExistsError):  # (an I/O failure: it ends the recording)
                raise DriveError(_NOT_A_SEGMENT, file=str(path)) from exc.__cause__
            raise
        try:
            for topic, (name, schema) in fmt.SCHEMAS.items():
                writer.add_json_channel(topic, name, schema)
            writer.add_bytes_channel(fmt.FUSION_DATA_TOPIC, fmt.DATA_ENCODING)
            writer.add_bytes_channel(fmt.SOURCE_POSES_TOPIC, fmt.POSES_ENCODING)
            for spec in self._rig:
                if not kind_def(spec.kind).is_image:
                    writer.add_points_channel(fmt.points_topic(spec.name), spec.kind)
            if self._ego_poses:  # every segment holds them all: any kept one can start a replay (fmt's docs)
                if self._poses_data is None:
                    self._poses_data = fmt.encode_poses(self._ego_poses)
                writer.write_bytes(fmt.SOURCE_POSES_TOPIC, self._ego_poses[0].t_ns, self._poses_data)
        except BaseException:  # (a full disk): the segment not opened, its file closed and removed (as DriveWriter's)
            with contextlib.suppress(Exception):
                writer.close()
            path.unlink(missing_ok=True)
            raise
        self._writer = writer
        self.stats["segments"] += 1
        keep = self.options.max_segments
        if keep and self._segment >= keep:
            old = fmt.segment_path(self.path, self._segment - keep)
            old.unlink(missing_ok=True)
            self.stats["segments_deleted"] += 1
            self._sizes.pop(self._segment - keep, None)
            log.info("recording: segment %s deleted (max_segments %d)", old, keep)

    def _finish_segment(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                if not self._failed:  # (after a failed write nothing more is written: the file is closed)
                    self._flush_arrivals(writer)
                    self._write_losses(writer)
            finally:
                writer.close()
            size = self._sizes[self._segment] = writer.path.stat().st_size
            self.bytes += size


def _detections_json(detections: Sequence[Detection3D]) -> str:
    """A frame's detections in its fusion record, what is not a number (their values: binary, beside it), as
    the encoder writes ``{"ids": [...], "labels": [...], "sources": [...]}`` (labels and sources remembered)."""
    ids = ",".join([_scalar(d.id) for d in detections])
    labels = ",".join([_quoted(d.label) for d in detections])
    sources = ",".join([_sources_json(d.sources) for d in detections])
    return f'{{"ids":[{ids}],"labels":[{labels}],"sources":[{sources}]}}'


@functools.lru_cache(maxsize=256)
def _sources_json(sources: tuple[str, ...]) -> str:
    return _ENCODER.encode(sources)


@functools.lru_cache(maxsize=256)
def _layout_json(layout: Layout) -> str:
    """The JSON of a layout (:func:`recorded_outputs`' or :func:`recorded_arrays`'): ``{key: [dtype, shape]}``."""
    return _ENCODER.encode({k: [d, list(shape)] for k, d, shape in layout})


def _sensors_json(results: Mapping[str, SensorResult], layout: Mapping[str, Layout]) -> str:
    """The JSON of ``{sensor: fmt.encode_result(r, outputs=False)}`` (sensors sorted), each ok sensor's outputs'
    layout (``layout``: :func:`recorded_outputs`'s) under ``"outputs"``, as the encoder writes it: what stays
    the same from frame to frame (status, error, model, version, layout) encoded once and remembered."""
    parts = []
    for name in sorted(results):
        r = results[name]
        head, tail = _sensor_parts(name, r.status.value, r.error, r.model, r.model_version, layout.get(name))
        parts.append(f"{head}{_scalar(r.sample_t_ns)},\"latency_ns\":{_scalar(r.latency_ns)},"
                     f"\"reused_age_ns\":{_scalar(r.reused_age_ns)}{tail}")  # fmt: skip
    return "{" + ",".join(parts) + "}"


@functools.lru_cache(maxsize=256)
def _sensor_parts(
    name: str, status: str, error: str | None, model: str | None, version: str,
    layout: Layout | None,
) -> tuple[str, str]:  # fmt: skip
    """A sensor's entry in :func:`_sensors_json` around its stamps and latency."""
    head = _ENCODER.encode({"status": status, "error": error, "model": model, "model_version": version})
    tail = "}" if layout is None else f',"outputs":{_layout_json(layout)}}}'
    return f'{_quoted(name)}:{head[:-1]},"sample_t_ns":', tail


def _scalar(value: Any) -> str:
    """A scalar's JSON as the encoder writes it (an int's, None's, a bool's without the encoder)."""
    if type(value) is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return _ENCODER.encode(value)


@functools.lru_cache(maxsize=256)
def _quoted(name: str) -> str:
    return json.dumps(name)


class _Traced:
    """A frame's cloud traced to the received sweeps it is made of (in fusion's thread, :func:`_traced`): its
    stamp, the sweep it begins with and the earlier sweeps merged into it with their entries, without the
    cloud's rows (all of them are those sweeps')."""

    __slots__ = ("base", "merged", "t_ns")

    def __init__(
        self, t_ns: int, base: PointCloudSample, merged: list[tuple[PointCloudSample, dict[str, Any]]]
    ) -> None:
        self.t_ns = t_ns
        self.base = base
        self.merged = merged

    def entry(self, written: Sequence[PointCloudSample]) -> dict[str, Any]:
        """The frame record's entry for the cloud, given the sweeps the writer wrote (``written``: its record of
        the latest, the same as fusion's thread saw unless the drive format refused one: then the cloud's
        rows are not in the recording, ``raw_t_ns`` None)."""
        for sweep in (self.base, *[f for f, _ in self.merged]):
            points = sweep.points
            for r in reversed(written):  # the latest first: the sweeps a frame is made of are recent
                if r.points is points:
                    break
            else:
                return {"t_ns": self.t_ns, "raw_t_ns": None, "points": False}
        out: dict[str, Any] = {"t_ns": self.t_ns, "raw_t_ns": self.base.t_ns, "points": False}
        if self.merged:
            out["merged"] = [m for _, m in self.merged]
        return out


def _traced(recent: Sequence[PointCloudSample], s: PointCloudSample) -> _Traced | None:
    """``s`` traced to the sweeps of ``recent``: by the accumulator's provenance (:func:`_by_identity`), else by
    the searches' first, quick steps (identity, a sample of rows) alone, as the writer's would trace it; None
    when those do not find every sweep (then the writer's own, thorough search decides, on the cloud itself)."""
    if s.merged_points:
        traced = _by_identity(recent, s)
        if traced is not None:
            return traced
    base = _received_prefix(recent, s, thorough=False)
    if base is None:
        return None
    merged = _merged(recent, s, base, thorough=False)
    return None if merged is None else _Traced(s.t_ns, base, merged)


def _by_identity(recent: Sequence[PointCloudSample], s: PointCloudSample) -> _Traced | None:
    """An accumulated cloud traced by its provenance (:attr:`PointCloudSample.merged_points`: the arrays the
    accumulator wrote and read, by identity) to the received sweeps of ``recent``, no row read (comparing a
    sample of a sweep's rows in memory the caches no longer hold cost ~15 us a sweep); None when its points
    are not those the accumulator wrote (replaced since: traced by rows) or a sweep is not in ``recent``."""
    made, base_points, *merged_points = s.merged_points
    if made is not s.points or len(merged_points) != len(s.merged_from):
        return None
    base = None
    found: list[PointCloudSample | None] = [None] * len(merged_points)
    for r in recent:  # (a loop: this runs in fusion's thread, each frame)
        points = r.points
        if points is base_points:
            base = r
        else:
            for i, sweep in enumerate(merged_points):
                if points is sweep:
                    found[i] = r
    if base is None:
        return None
    merged: list[tuple[PointCloudSample, dict[str, Any]]] = []
    for sweep_found, (t_ns, _, moved) in zip(found, s.merged_from, strict=True):
        if sweep_found is None:
            return None
        merged.append((sweep_found, {"raw_t_ns": sweep_found.t_ns, "t_ns": t_ns, "m": list(moved)}))
    return _Traced(s.t_ns, base, merged)


def _received_prefix(
    recent: Sequence[PointCloudSample], s: PointCloudSample, *, thorough: bool = True
) -> PointCloudSample | None:
    """The received sweep (written on the sensor's topic; ``recent``: the latest, oldest first) whose points
    begin the frame's cloud ``s``: the very sample; or, for an accumulated cloud, the sweep of its row count
    (the accumulator's contract, :attr:`PointCloudSample.merged_from`: its own rows come first), checked on a
    sample of rows, one of its stamp first (a live run's time base maps a received stamp to the host clock: a
    ROS node's always, so the frame's stamp is not the received one's); else (``thorough``) one of the same
    stamp (checked first) or the latest ones, checked row for row."""
    points = s.points
    for r in reversed(recent):  # (loops, not generators: this runs in fusion's thread, each frame)
        if r.points is points:  # the frame's sample is the one received (not accumulated): no rows to compare
            return r
    if s.merged_from:
        n0 = points.shape[0] - sum(n for _, n, _ in s.merged_from)
        shape = (n0, points.shape[1])
        for r in reversed(recent):
            if r.t_ns == s.t_ns and r.points.shape == shape and _spot_equal(r.points, points[:n0]):
                return r
        for r in reversed(recent):  # the stamp mapped by the run's time base
            if r.t_ns != s.t_ns and r.points.shape == shape and _spot_equal(r.points, points[:n0]):
                return r
    if not thorough:
        return None
    latest = list(reversed(recent))
    latest.sort(key=lambda r: r.t_ns != s.t_ns)  # the same stamp first, else the latest first (a stable sort)
    for r in latest[:4]:
        n0 = r.points.shape[0]
        fits = r.points.shape[1] == s.points.shape[1] and n0 <= s.points.shape[0]
        if fits and np.array_equal(r.points, s.points[:n0]):
            return r
    return None


def _merged(
    recent: Sequence[PointCloudSample], s: PointCloudSample, base: PointCloudSample, *, thorough: bool = True
) -> list[tuple[PointCloudSample, dict[str, Any]]] | None:
    """How the rows after the received sweep's (``base``) were made, for the replay to rebuild them: each merged
    earlier sweep's received stamp and the transform it was moved by (``s.merged_from``), the sweep found
    among those received (``recent``) by its stamp and row count (its measured columns checked on a sample
    of rows), else (``thorough``) by its row count and its measured columns; None when a sweep is not found.
    Each with the sweep found. The stamps of ``merged_from`` are the frame's (mapped by the run's time base, as
    ``s.t_ns`` is): a received stamp is compared mapped as the base's was (by a live run's fixed offset: a ROS
    node's; an estimated offset, which moves from sweep to sweep, leaves it to the thorough search)."""
    n0 = base.points.shape[0]
    offset = s.t_ns - base.t_ns  # the base's stamp as mapped (0: not mapped)
    if n0 + sum(n for _, n, _ in s.merged_from) != s.points.shape[0]:
        return None
    out: list[tuple[PointCloudSample, dict[str, Any]]] = []
    start = n0
    for t_ns, n, m in s.merged_from:
        rows = s.points[start : start + n, 3:]
        for r in reversed(recent):
            stamp = r.t_ns + offset == t_ns and r is not base
            if stamp and r.points.shape[0] == n and _spot_equal(r.points[:, 3:], rows):
                found = r
                break
        else:
            if not thorough:
                return None
            for r in reversed(recent):
                if r.points.shape[0] == n and r is not base and np.array_equal(r.points[:, 3:], rows):
                    found = r
                    break
            else:
                return None
        out.append((found, {"raw_t_ns": found.t_ns, "t_ns": t_ns, "m": list(m)}))
        start += n
    return out


def _spot_equal(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> bool:
    """``a`` and ``b`` (rows of clouds whose provenance the accumulator states) equal on every
    :data:`_SPOT_ROWS`-th row and the last, bit for bit: a stage that changed the rows (or a wrong sweep)
    shows there, without reading the whole of two sweeps from memory (~0.2 ms a frame); the rows' bytes
    compared (a copy's are the same; ``np.array_equal``'s calls cost more than the comparison)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.shape[0] == 0:
        return True
    return _spots(a) == _spots(b) and a[-1].tobytes() == b[-1].tobytes()


def _spots(a: npt.NDArray[Any]) -> bytes:
    """The bytes of every :data:`_SPOT_ROWS`-th row of ``a``; a row whose items are contiguous taken as one item
    (a void of the row's size: numpy copies 108 such items in one loop, not 108 loops of 4 floats: half the
    cost), the same bytes."""
    if a.ndim == 2 and a.shape[1] > 1 and a.strides[1] == a.itemsize and not a.dtype.hasobject:
        a = a.view(_void(a.itemsize * a.shape[1]))
    return a[::_SPOT_ROWS].tobytes()


@functools.lru_cache(maxsize=16)
def _void(size: int) -> np.dtype[np.void]:
    return np.dtype((np.void, size))


def _rows_from(s: PointCloudSample, n0: int) -> PointCloudSample:
    return dataclasses.replace(s, points=s.points[n0:])
