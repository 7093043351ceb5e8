"""VizRecorder: a replay as Foxglove sees it, written one frame at a time to MCAP and/or a live server.

For every :class:`~perception.types.FrameResult` the recorder first copies the drive's own messages up
to the frame's horizon (the frame time, or the latest sample the frame used), then writes what the
runtime made of them (see :mod:`perception.viz._encode` for the topics). The copied messages keep
their schemas, channels, metadata, times and bytes, and the drive's metadata records (the rig) are
copied too, so a recording is itself a drive: :class:`~perception.drives.DriveReader` opens it and
``perception render`` needs nothing else.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from foxglove_schemas_protobuf.ImageAnnotations_pb2 import ImageAnnotations
from foxglove_schemas_protobuf.SceneUpdate_pb2 import SceneUpdate

from perception._lifetime import Closable, Lifetime
from perception.drives import DriveReader, read_chunk
from perception.kinds import FusionRole, fusion_role
from perception.types import FrameResult, FrameStatus, SensorSpec, SensorStatus
from perception.viz._copy import DriveCopy
from perception.viz._encode import (
    DETECTIONS_TOPIC,
    FRAME_STATS_TOPIC,
    ChannelDef,
    camera_detections,
    camera_detections_topic,
    encode_camera_detections,
    encode_detections,
    encode_frame_stats,
    frame_stats,
    frame_stats_channel,
    protobuf_channel,
)
from perception.viz._live import LiveServer
from perception.viz._outputs import McapOutput, Output

__all__ = ["REPLAY_METADATA", "BackgroundRecorder", "VizRecorder", "recorder_sink"]

log = logging.getLogger(__name__)

#: MCAP metadata record of a recording: format, and the runtime's sensors (name -> drive sensor, kind).
REPLAY_METADATA = "perception.replay"
FORMAT = "perception-replay/1"

_MAX_U32 = 2**32 - 1
_DEFAULT_PERIOD_NS = 100_000_000


class VizRecorder(Closable):
    """Record a replay's frames into ``outputs`` (which it owns and closes).

    ``drive`` is the replayed drive file (its messages are copied through unless ``copy_drive`` is
    false, starting at ``start_ns``); ``rig`` maps the runtime's sensor names to the drive's sensors
    (what :func:`perception.replay._source.match_rig` returns). Call the recorder (or :meth:`write`) with every
    frame result in order; :meth:`close` finishes every output, also after an error or an interrupt,
    so what was recorded stays readable. A sync context manager.
    """

    def __init__(
        self,
        drive: str | os.PathLike[str],
        rig: Mapping[str, SensorSpec],
        outputs: Sequence[Output],
        *,
        start_ns: int | None = None,
        copy_drive: bool = True,
    ) -> None:
        self._outputs = list(outputs)
        self._kinds = {name: spec.kind for name, spec in rig.items()}
        self._cameras = {
            name: camera_detections_topic(spec.name)
            for name, spec in rig.items()
            if fusion_role(spec.kind) is FusionRole.IMAGE_BOXES
        }
        self._sequence: dict[str, int] = {}
        self._last_t: int | None = None
        self._metadata_written = 0
        self._state = Lifetime.OPENED  # a failed construction closes what it opened
        self._ours = [
            protobuf_channel(DETECTIONS_TOPIC, SceneUpdate),
            frame_stats_channel(),
            *(protobuf_channel(topic, ImageAnnotations) for topic in self._cameras.values()),
        ]
        self._own_topics = frozenset(c.topic for c in self._ours)
        self._copied_topics: set[str] = set()
        self._replaced: set[str] = set()
        self._declared = False
        self._copy: DriveCopy | None = None
        #: The drive's whole chunks are copied byte for byte (not their messages): see :meth:`_chunk_copy`.
        self._chunked = False
        self._horizon: int | None = None
        try:
            if copy_drive:
                self._copy = DriveCopy(drive, start_ns=start_ns)
            self._open(rig)
            self._chunked = self._chunk_copy()
        except BaseException:
            self.close()
            raise

    def _open(self, rig: Mapping[str, SensorSpec]) -> None:
        copied = [ch for ch in (self._copy.channels.values() if self._copy else ()) if self._copies(ch)]
        for out in self._outputs:
            for ch in (*copied, *self._ours):
                out.add_channel(ch)
        self._declared = True
        sensors = {
            name: {"drive_sensor": spec.name, "kind": spec.kind, "topic": spec.topic}
            for name, spec in rig.items()
        }
        record = {"format": FORMAT, "sensors": json.dumps(sensors, separators=(",", ":"))}  # rig order
        for out in self._outputs:
            out.add_metadata(REPLAY_METADATA, record)
        self._copy_metadata()

    def _chunk_copy(self) -> bool:
        """Whether the drive's chunks can be copied as they are (compressed bytes, message indexes), which
        costs no decompression, no per-message work and no compression: an indexed drive copied whole
        (no start time, no topic replaced), into MCAP files only (a live view needs the messages), each
        numbering the drive's channels and schemas as the drive does. A chunk is copied once the frames
        have passed its last message; the first chunk (the static transforms: a recording cut short stays a
        drive) and what is left at the end are copied message by message up to the frames' horizons, so
        the recording holds the same messages either way."""
        copy = self._copy
        if copy is None or not copy.chunked or self._replaced:
            return False
        for out in self._outputs:
            if not isinstance(out, McapOutput):
                return False
            ids = out.channel_ids()
            for cid, ch in copy.channels.items():
                if ids.get(ch.topic) != (cid, copy.schema_ids.get(cid, 0)):
                    return False
        return True

    def _copy_metadata(self) -> None:
        if self._copy is None:
            return
        for name, data in self._copy.metadata[self._metadata_written :]:
            for out in self._outputs:
                out.add_metadata(name, data)
        self._metadata_written = len(self._copy.metadata)

    def _copies(self, ch: ChannelDef) -> bool:
        """Whether the drive's channel is copied (declaring it on first sight); a drive topic that is one
        of the recorder's own is left out (once, with a warning)."""
        if ch.topic in self._copied_topics:
            return True
        if ch.topic in self._own_topics:
            if ch.topic not in self._replaced:
                self._replaced.add(ch.topic)
                log.warning("drive topic %s is replaced by the runtime's own output", ch.topic)
            return False
        self._copied_topics.add(ch.topic)
        if self._declared:  # a channel a streamed (truncated) drive declares after the recording started
            for out in self._outputs:
                out.add_channel(ch)
        return True

    def _emit(self, topic: str, t_ns: int, data: bytes) -> None:
        seq = self._sequence.get(topic, 0)
        self._sequence[topic] = (seq + 1) & _MAX_U32
        for out in self._outputs:
            out.write(topic, t_ns, data, sequence=seq)

    def _copy_until(self, horizon_ns: int) -> None:
        if self._copy is None:
            return
        self._horizon = horizon_ns if self._horizon is None else max(self._horizon, horizon_ns)
        if self._chunked:
            for ch, msg in self._copy.head_until(horizon_ns):
                for out in self._outputs:
                    out.write(ch.topic, msg.log_time, msg.data, publish_ns=msg.publish_time, sequence=msg.sequence)
            for ci in self._copy.chunks_until(horizon_ns):
                for out in self._outputs:
                    if isinstance(out, McapOutput) and not out.copy_chunk(self._copy.file, ci):
                        for msg in read_chunk(self._copy.file, ci, None):
                            out.write(
                                self._copy.channels[msg.channel_id].topic, msg.log_time, msg.data,
                                publish_ns=msg.publish_time, sequence=msg.sequence,
                            )  # fmt: skip
            return
        for ch, msg in self._copy.until(horizon_ns):
            if not self._copies(ch):
                continue
            for out in self._outputs:
                out.write(ch.topic, msg.log_time, msg.data, publish_ns=msg.publish_time, sequence=msg.sequence)
        self._copy_metadata()

    def write(self, result: FrameResult) -> None:
        """Record one frame (and the drive's messages up to it)."""
        samples = [s.sample_t_ns for s in result.sensors.values() if s.sample_t_ns is not None]
        self._copy_until(max([result.t_ns, *samples]))
        t = result.t_ns
        period = _DEFAULT_PERIOD_NS if self._last_t is None or t <= self._last_t else t - self._last_t
        self._last_t = t
        if result.status is not FrameStatus.DROPPED:
            # A frame's boxes live ~one frame; the next update deletes them anyway (gaps: dropped frames).
            lifetime = min(max(period * 3 // 2, 50_000_000), 1_000_000_000)
            scene = encode_detections(t, result.detections, self._kinds, lifetime)
            self._emit(DETECTIONS_TOPIC, t, scene.SerializeToString(deterministic=True))
            for name, topic in self._cameras.items():
                res = result.sensors.get(name)
                if res is None or res.status is not SensorStatus.OK or res.sample_t_ns is None:
                    continue
                dets = camera_detections(res.outputs, name)
                if dets is not None:
                    msg = encode_camera_detections(res.sample_t_ns, dets)
                    self._emit(topic, res.sample_t_ns, msg.SerializeToString(deterministic=True))
        stats = frame_stats(result, self._kinds)
        self._emit(FRAME_STATS_TOPIC, t, encode_frame_stats(stats))
        for out in self._outputs:
            out.set_time(t)

    add = write  # a replay sink's FrameSink

    def _close(self) -> None:
        """Finish every output and close the drive (:meth:`close`: once); the first output error is raised."""
        error: BaseException | None = None
        if self._chunked and self._copy is not None and self._horizon is not None:
            try:  # the chunks the frames did not pass whole: their messages up to the last horizon
                for ch, msg in self._copy.rest_until(self._horizon):
                    for out in self._outputs:
                        out.write(ch.topic, msg.log_time, msg.data, publish_ns=msg.publish_time, sequence=msg.sequence)
            except Exception as exc:
                log.debug("copying the drive's last messages failed: %s", exc)
                error = exc
        for out in self._outputs:
            try:
                out.close()
            except Exception as exc:
                log.debug("closing %r failed: %s", out, exc)
                error = error or exc
        if self._copy is not None:
            self._copy.close()
        if error is not None:
            raise error



class BackgroundRecorder(Closable):
    """A :class:`VizRecorder` on its own thread, so the caller (the replay's event loop) never waits for
    compression, copying or disk I/O and the runtime's latency is not disturbed by the recording.

    Frames are queued in order; when the writer falls ``max_pending`` frames behind, :meth:`write`
    waits (back-pressure, no frame is lost). A failure of the writer is raised by the next
    :meth:`write` or by :meth:`close`, which drains the queue and finishes the recording.
    """

    def __init__(self, recorder: VizRecorder, *, max_pending: int = 32) -> None:
        self._recorder = recorder
        self._queue: queue.Queue[FrameResult | None] = queue.Queue(maxsize=max_pending)
        self._error: BaseException | None = None
        self._state = Lifetime.OPENED  # the writer thread runs from construction on
        self._thread = threading.Thread(target=self._run, name="viz-recorder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (result := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._recorder.write(result)
                except BaseException as exc:  # handed to the caller's thread
                    self._error = exc

    def write(self, result: FrameResult) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(result)

    add = write  # a replay sink's FrameSink

    def _close(self) -> None:
        """Record what is queued, then finish the outputs (:meth:`close`: once)."""
        self._queue.put(None)
        self._thread.join()
        try:
            self._recorder.close()
        finally:
            if self._error is not None:
                raise self._error


def recorder_sink(
    *,
    mcap_path: str | os.PathLike[str] | None = None,
    live: LiveServer | None = None,
    start_ns: int | None = None,
    compression: str = "zstd",
) -> Callable[[DriveReader, Mapping[str, SensorSpec]], BackgroundRecorder]:
    """A replay sink (for :func:`perception.replay.replay_drive`'s ``sinks``) recording into
    ``mcap_path`` and/or publishing through ``live`` (a :class:`~perception.viz.LiveServer`), on a
    background thread (:class:`BackgroundRecorder`)."""

    def open_recorder(reader: DriveReader, rig: Mapping[str, SensorSpec]) -> BackgroundRecorder:
        outputs: list[Output] = []
        try:
            if mcap_path is not None:
                outputs.append(McapOutput(Path(mcap_path), compression=compression))
            if live is not None:
                outputs.append(live.output())
        except BaseException:
            for out in outputs:
                out.close()
            raise
        return BackgroundRecorder(VizRecorder(reader.path, rig, outputs, start_ns=start_ns))

    return open_recorder
