"""DriveReader: opens a drive, validates it up front, and serves samples, ego poses and ground truth.

An intact file is read through its MCAP summary and indexes (seek by time, topic filtering, no full
scan). A file without a usable summary (truncated recording, crashed writer, summary failing its CRC)
is scanned linearly, skipping damaged records; what is readable is then served the same way.

Chunks are read one by one (:mod:`perception.drives._chunks`): a chunk that does not decompress, fails
its CRC or holds bad records is a :class:`~perception.drives._damage.DamagedChunk` -- in strict mode a
:class:`~perception.errors.DriveDamagedError` naming the file and byte offset, otherwise a logged,
counted skip, and the reading goes on with the next chunk. :attr:`DriveReader.damage` says what was
lost (per topic: messages and time ranges); :meth:`DriveReader.verify` checks every chunk at once.

Every sample and ego pose that decodes passes the intake check a live host's samples pass
(:func:`perception.kinds.sample_problem`, :func:`perception.kinds.ego_problem`: a zero quaternion, a
non-finite pose, a sample over the size limits...): one that fails is skipped with a warning (once per
sensor) and counted in :attr:`DriveReader.invalid` (a replay reports them: report.json's
``alignment.invalid_by_sensor``).
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any, TypeVar

from mcap.reader import SeekingReader
from mcap.records import Channel, ChunkIndex, Message
from mcap.summary import Summary
from mcap.well_known import MessageEncoding

from perception._lifetime import Closable, Lifetime
from perception.drives import _codec as codec
from perception.drives._chunks import (
    MAGIC,
    UNKNOWN_TOPICS,
    ChunkBuffer,
    ChunkUnreadable,
    iter_chunk_messages,
    lost_messages,
    read_chunk,
    read_footer,
    summary_crc_ok,
)
from perception.drives._damage import DamagedChunk, DriveDamage, LostMessages
from perception.drives._drive_stats import DriveStats, TopicStats
from perception.drives._scan import ChannelTimes, RawDamage, cut_short_in, scan_file, times_from_index
from perception.errors import DriveDamagedError, DriveError
from perception.kinds import ego_problem, kind_def, sample_problem
from perception.types import (
    CameraCalibration,
    EgoPose,
    GroundTruth,
    ImageSample,
    PointCloudSample,
    SensorSpec,
    SessionSource,
    Transform,
    interpolate_ego,
)

__all__ = ["GT_TOLERANCE_NS", "DriveReader"]

log = logging.getLogger(__name__)

#: How far from a frame's time the nearest ground truth may be and still count as that frame's
#: (:meth:`DriveReader.ground_truth_at` when replaying, evaluating and rendering a drive).
GT_TOLERANCE_NS = 60_000_000

T = TypeVar("T")

_CALIBRATION = "foxglove.CameraCalibration"
_TF_STATIC = "foxglove.FrameTransforms"
_ODOMETRY = "foxglove.Odometry"
_SCENE_UPDATE = "foxglove.SceneUpdate"
_IMAGE = "foxglove.CompressedImage"
_POINT_CLOUD = "foxglove.PointCloud"
_FIXED_TOPICS = {
    codec.TF_STATIC_TOPIC: _TF_STATIC,
    codec.TF_TOPIC: "foxglove.FrameTransform",
    codec.EGO_TOPIC: _ODOMETRY,
    codec.GROUND_TRUTH_TOPIC: _SCENE_UPDATE,
}


class DriveReader(Closable):
    """Read a drive (see ``replay_data/README.md``). A sync context manager; not thread-safe.

    ``sensors`` restricts the reader (validation, :attr:`rig`, :meth:`samples`) to those sensor names.

    Damage (see :attr:`damage`) with ``strict`` (default): a damaged chunk raises
    :class:`DriveDamagedError` (file and byte offset) when a read meets it -- at open when a scan found
    it; a truncated drive raises it once :meth:`samples` has yielded the readable prefix. Without
    ``strict`` each damaged chunk is skipped with a warning and counted, the reading goes on with the
    next chunk, and a truncation is a warning (``quiet``: no warnings, the caller reports
    :attr:`damage` itself). :attr:`truncated` is set either way.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sensors: Iterable[str] | str | None = None,
        strict: bool = True,
        quiet: bool = False,
    ) -> None:
        self.path = Path(path)
        self._quiet = quiet
        self.truncated: DriveDamagedError | None = None
        self._strict = strict
        self._bad: dict[int, DamagedChunk] = {}  # damaged chunks by byte offset
        self._checked: set[int] = set()  # offsets of chunks read successfully
        self._chunk_buffer = ChunkBuffer()  # every chunk is decompressed into it (see ChunkBuffer)
        self._summary_problem: str | None = None
        self._truncated_at: int | None = None
        self._ego: list[EgoPose] | None = None
        self._ego_times: list[int] = []  # of self._ego, for bisection (ego_pose_at runs several times a frame)
        self._gt: list[GroundTruth] | None = None
        #: Samples (by sensor) and ego poses (``"ego"``) skipped by the intake check.
        self.invalid: dict[str, int] = {}
        try:
            self._file: IO[bytes] = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise DriveError(f"cannot open drive: {exc.strerror or exc}", file=str(self.path)) from exc
        self._state = Lifetime.OPENED  # reading the summary below reads through the open reader
        try:
            self._open(_names(sensors))
        except BaseException:
            self._state = Lifetime.CLOSED
            self._file.close()
            raise

    # -- opening and validation --------------------------------------------------------------------

    def _err(self, message: str, **context: object) -> DriveError:
        return DriveError(message, file=str(self.path), **context)

    def _open(self, sensors: list[str] | None) -> None:
        head = self._file.read(len(MAGIC))
        if head != MAGIC:
            if head and MAGIC.startswith(head):  # cut within the magic (a writer that died at once): damage (an
                # empty file is nothing: not an MCAP file)
                self._truncated_at = len(head)
                self.truncated = self._damaged(f"truncated at byte {len(head)} before any message", offset=len(head))
                raise self.damage.error(str(self.path))
            raise self._err("not an MCAP file (bad magic)")
        summary = self._read_summary()
        unindexed: list[ChunkIndex] = []
        if summary is not None:
            self._file.seek(0)
            try:
                metadata = {m.name: m.metadata for m in SeekingReader(self._file).iter_metadata()}
                times, unindexed = times_from_index(self._file, summary)
            except Exception as exc:
                raise self._err(f"damaged index: {exc}") from exc
        else:
            scan = scan_file(self._file)
            summary = scan.summary
            metadata = {m.name: m.metadata for m in scan.metadata}
            times = scan.times
            for raw in scan.damaged:
                self._bad[raw.offset] = _from_raw(raw, summary.channels)
            cut = cut_short_in(self._file)
            if scan.data_complete and cut is not None and self._summary_problem is None:
                # all its data is there, its end is not (cut in the summary or the footer): no message lost
                self._summary_problem = f"cut short at byte {cut} (no footer)"
                if not self._quiet:
                    log.warning("%s: summary %s; scanning the file instead", self.path, self._summary_problem)
            if not scan.data_complete:
                self._truncated_at = scan.stop_offset
                at = f"truncated at byte {scan.stop_offset}"
                if scan.last_message is None:
                    self.truncated = self._damaged(f"{at} before any message", offset=scan.stop_offset)
                else:
                    t, cid = scan.last_message
                    self.truncated = self._damaged(
                        f"{at}; last readable message t={t} ns",
                        topic=summary.channels[cid].topic,
                        offset=scan.stop_offset,
                    )
        self._summary = summary
        self._channels: dict[str, Channel] = {}
        for ch in sorted(summary.channels.values(), key=lambda c: c.id):
            if self._channels.setdefault(ch.topic, ch) is not ch:
                raise self._err("several channels on one topic", topic=ch.topic)
        self._chunk_indexes = sorted(summary.chunk_indexes, key=lambda c: c.chunk_start_offset)
        self._counted = {c.chunk_start_offset for c in self._chunk_indexes} - {c.chunk_start_offset for c in unindexed}
        for ci in unindexed:  # chunks without (readable) message indexes: count by reading them once
            try:
                messages = read_chunk(self._file, ci, self._summary.channels, buffer=self._chunk_buffer)
            except ChunkUnreadable as exc:
                self._record(ci, exc.reason)
                continue
            self._checked.add(ci.chunk_start_offset)
            for msg in messages:
                times.setdefault(msg.channel_id, ChannelTimes()).add(msg.log_time, msg.log_time)
        self._times = times

        try:
            if codec.RIG_METADATA not in metadata:
                if any(ch.message_encoding == "cdr" for ch in summary.channels.values()):
                    raise self._err(
                        "a ROS 2 bag (CDR messages), not a drive: import it first: "
                        f"perception import ros2 {self.path} --map topics.yaml -o drive.mcap"
                    )
                raise self._err(f"no {codec.RIG_METADATA} metadata record (not a perception drive?)")
            try:
                self._entries = codec.decode_rig(metadata[codec.RIG_METADATA])
            except codec.DecodeError as exc:
                raise self._err(str(exc)) from exc
            self.metadata: Mapping[str, str] = MappingProxyType(dict(metadata.get(codec.DRIVE_METADATA, {})))
            self.rig: Mapping[str, SensorSpec] = MappingProxyType(self._load_rig(self._select_entries(sensors)))
        except DriveError as exc:
            damage = self.damage
            if not damage.data_lost or isinstance(exc, DriveDamagedError):
                raise
            # the cause is most likely the damage (a drive truncated before its channels: "no channel for
            # lidar sensor"): a damaged drive, as any other (the CLI's exit 3), naming the damage and its effect
            said = damage.error(str(self.path))
            raise DriveDamagedError(f"{said.message}: {exc.message}", **{**exc.context, **said.context}) from exc
        if self._strict and self._bad:  # found by the scan: an error before anything is read
            first = min(self._bad.values(), key=lambda c: c.offset)
            raise self._damaged(first.describe(), offset=first.offset)
        if not self._quiet:
            for chunk in sorted(self._bad.values(), key=lambda c: c.offset):
                log.warning("%s: %s; skipped", self.path, chunk.describe())
            if self.truncated is not None and not self._strict:
                log.warning("%s", self.truncated)

    def _damaged(self, message: str, **context: object) -> DriveDamagedError:
        return DriveDamagedError(message, file=str(self.path), **context)

    def _read_summary(self) -> Summary | None:
        """The summary, or None (no summary, or a damaged one: :attr:`damage` then says so)."""
        try:
            self._file.seek(0)
            summary: Summary | None = SeekingReader(self._file).get_summary()
        except Exception as exc:  # a damaged tail can fail anywhere in the library's footer parsing
            log.debug("%s: no usable summary (%s); scanning linearly", self.path, exc)
            if read_footer(self._file) is not None:  # a footer is there: the summary itself is damaged
                self._summary_problem = f"unreadable: {exc}"
                if not self._quiet:
                    log.warning("%s: summary %s; scanning the file instead", self.path, self._summary_problem)
            return None
        if summary is not None and summary_crc_ok(self._file) is False:
            self._summary_problem = "CRC mismatch"
            summary = None
        if summary is not None:
            problem = _summary_problem(summary, self._file.seek(0, os.SEEK_END))
            if problem is not None:
                self._summary_problem = problem
                summary = None
        if self._summary_problem is not None and not self._quiet:
            log.warning("%s: summary %s; scanning the file instead", self.path, self._summary_problem)
        return summary

    def _select_entries(self, sensors: list[str] | None) -> list[codec.RigEntry]:
        if sensors is None:
            return list(self._entries)
        names = {e.name for e in self._entries}
        unknown = [s for s in sensors if s not in names]
        if unknown:
            raise self._err(f"no sensor {', '.join(map(repr, unknown))} in drive (has {', '.join(sorted(names))})")
        return [e for e in self._entries if e.name in sensors]

    def _schema_of(self, topic: str, expected: str) -> Channel | None:
        """The topic's channel (None if absent) after checking it carries ``expected`` protobuf."""
        ch = self._channels.get(topic)
        if ch is None:
            return None
        schema = self._summary.schemas.get(ch.schema_id)
        name = schema.name if schema is not None else "<none>"
        if ch.message_encoding != MessageEncoding.Protobuf or name != expected:
            raise self._err(
                f"unknown schema {name!r} ({ch.message_encoding or 'no'} encoding); expected protobuf {expected}",
                topic=topic,
            )
        return ch

    def _load_rig(self, entries: list[codec.RigEntry]) -> dict[str, SensorSpec]:
        for topic, schema in _FIXED_TOPICS.items():  # other topics (an importer's extras) are ignored
            self._schema_of(topic, schema)
        for e in entries:
            if self._schema_of(e.topic, codec.sensor_schema(e.kind)) is None:
                raise self._err(f"no channel for {e.kind} sensor {e.name!r}", topic=e.topic)
        cal_topics = {e.calibration_topic: e for e in entries if e.calibration_topic is not None}
        for topic, e in cal_topics.items():
            if self._schema_of(topic, _CALIBRATION) is None:
                raise self._err(f"no calibration for camera {e.name!r}", topic=topic)
        if entries and self._schema_of(codec.TF_STATIC_TOPIC, _TF_STATIC) is None:
            raise self._err("no sensor extrinsics: topic missing", topic=codec.TF_STATIC_TOPIC)

        # Static data is repeated every second: stop at the first complete set.
        frames = {e.frame_id for e in entries}
        extrinsics: dict[str, Transform] = {}
        calibrations: dict[str, CameraCalibration] = {}
        topics = [codec.TF_STATIC_TOPIC, *cal_topics] if entries else []
        for ch, msg in self._raw(topics):
            if ch.topic == codec.TF_STATIC_TOPIC:
                for frame, tf in self._decode(ch, msg, _TF_STATIC, _tf_static).items():
                    extrinsics.setdefault(frame, tf)
            elif ch.topic not in calibrations:
                frame_id = cal_topics[ch.topic].frame_id
                calibrations[ch.topic] = self._decode(ch, msg, _CALIBRATION, partial(_calibration, frame_id=frame_id))
            if frames <= extrinsics.keys() and cal_topics.keys() <= calibrations.keys():
                break

        rig: dict[str, SensorSpec] = {}
        for e in entries:
            if e.frame_id not in extrinsics:
                raise self._err(
                    f"no extrinsic for sensor {e.name!r}: frame {e.frame_id!r} has no {codec.BASE_FRAME} transform",
                    topic=codec.TF_STATIC_TOPIC,
                )
            cal = None
            if e.calibration_topic is not None:
                cal = calibrations.get(e.calibration_topic)
                if cal is None:
                    raise self._err(f"no calibration message for camera {e.name!r}", topic=e.calibration_topic)
            rig[e.name] = SensorSpec(e.name, e.kind, e.frame_id, extrinsics[e.frame_id], e.topic, cal, e.rate_hz)
        return rig

    # -- low-level iteration -----------------------------------------------------------------------

    def _raw(
        self, topics: Sequence[str] | None, start_ns: int | None = None, end_ns: int | None = None
    ) -> Iterator[tuple[Channel, Message]]:
        """Messages of ``topics`` with ``start_ns <= log_time < end_ns`` in log-time order.

        A damaged chunk raises :class:`DriveDamagedError` (strict) or is skipped (see class docs)."""
        if self._state is not Lifetime.OPENED:
            raise self._err("reader is closed")
        it = iter_chunk_messages(
            self._file,
            self._chunk_indexes,
            self._summary.channels,
            topics,
            start_ns,
            end_ns,
            self._on_damage,
            skip=() if self._strict else self._bad.keys(),
            checked=self._checked,
            buffer=self._chunk_buffer,
        )
        while True:
            try:
                channel, message = next(it)
            except StopIteration:
                return
            except DriveError:
                raise
            except Exception as exc:  # the file itself failed (I/O): not a chunk that can be skipped
                raise self._err(f"unreadable data: {exc}") from exc
            yield channel, message

    def _record(self, ci: ChunkIndex, reason: str) -> DamagedChunk:
        """Remember the damaged chunk ``ci`` (once) with what it held."""
        known = self._bad.get(ci.chunk_start_offset)
        if known is not None:
            return known
        chunk = DamagedChunk(
            offset=ci.chunk_start_offset,
            length=ci.chunk_length,
            reason=reason,
            start_ns=ci.message_start_time,
            end_ns=ci.message_end_time,
            lost=lost_messages(self._file, ci, self._summary.channels),
        )
        self._bad[chunk.offset] = chunk
        return chunk

    def _on_damage(self, ci: ChunkIndex, reason: str) -> None:
        new = ci.chunk_start_offset not in self._bad
        chunk = self._record(ci, reason)
        if self._strict:
            raise self._damaged(chunk.describe(), offset=chunk.offset)
        if new and not self._quiet:
            log.warning("%s: %s; skipped", self.path, chunk.describe())

    def _valid(self, sensor: str, problem: str | None, topic: str, t_ns: int) -> bool:
        """Count and warn (once per sensor) about a decoded message the intake check refused."""
        if problem is None:
            return True
        self.invalid[sensor] = self.invalid.get(sensor, 0) + 1
        if self.invalid[sensor] == 1 and not self._quiet:
            log.warning("%s: %s at %d: %s; skipped (further ones counted)", self.path, topic, t_ns, problem)
        return False

    def _decode(self, ch: Channel, msg: Message, schema: str, fn: Callable[[Any, Message], T]) -> T:
        """Parse ``msg`` as ``schema`` and convert it with ``fn(pb, msg)``; errors name topic and time."""
        try:
            return fn(codec.decode(codec.SCHEMAS[schema], msg.data), msg)
        except (codec.DecodeError, ValueError) as exc:
            raise self._err(f"cannot decode {schema}: {exc}", topic=ch.topic, t_ns=msg.log_time) from exc

    def _topic_list(self, topic: str, schema: str, fn: Callable[[Any, int], T]) -> list[T]:
        if self._schema_of(topic, schema) is None:
            return []

        def convert(pb: Any, msg: Message) -> T:
            return fn(pb, msg.log_time)

        return [self._decode(ch, msg, schema, convert) for ch, msg in self._raw([topic])]

    # -- public API --------------------------------------------------------------------------------

    @property
    def start_ns(self) -> int:
        """Log time of the earliest message (0 for an empty drive)."""
        return min((t.first for t in self._times.values() if t.count), default=0)

    @property
    def end_ns(self) -> int:
        """Log time of the latest message (0 for an empty drive)."""
        return max((t.last for t in self._times.values() if t.count), default=0)

    @property
    def damage(self) -> DriveDamage:
        """The damage met so far (all of it after :meth:`verify`); empty for an intact drive."""
        return DriveDamage(
            chunks=tuple(sorted(self._bad.values(), key=lambda c: c.offset)),
            truncated=None if self.truncated is None else self.truncated.message,
            truncated_at=self._truncated_at,
            summary=self._summary_problem,
        )

    def verify(self) -> DriveDamage:
        """Read every chunk not read yet (decompress, check CRC and records) and return :attr:`damage`.

        Never raises for damage, strict or not: the caller decides (``--strict`` makes it an error).
        """
        if self._state is not Lifetime.OPENED:
            raise self._err("reader is closed")
        for ci in self._chunk_indexes:
            if ci.chunk_start_offset in self._checked or ci.chunk_start_offset in self._bad:
                continue
            try:
                read_chunk(self._file, ci, self._summary.channels, buffer=self._chunk_buffer)
            except ChunkUnreadable as exc:
                self._record(ci, exc.reason)
                continue
            except OSError as exc:
                raise self._err(f"unreadable data: {exc}") from exc
            self._checked.add(ci.chunk_start_offset)
        return self.damage

    @property
    def has_ground_truth(self) -> bool:
        ch = self._channels.get(codec.GROUND_TRUTH_TOPIC)
        return ch is not None and self._times.get(ch.id, ChannelTimes()).count > 0

    def samples(
        self, start_ns: int | None = None, end_ns: int | None = None, sensors: Iterable[str] | str | None = None,
        *, extra_fields: bool = False,
    ) -> Iterator[PointCloudSample | ImageSample]:  # fmt: skip
        """Samples with ``start_ns <= t_ns < end_ns`` in ``t_ns`` order (ties: file order). A point cloud holds
        its kind's fields; with ``extra_fields`` its other FLOAT32 fields too, after them in the cloud's order
        (a run's recording: the columns the run's clouds carried, ``perception.record``).

        Raises :class:`DriveError` for a message that does not decode (naming topic and time) and,
        in strict mode, after the readable prefix of a truncated drive.
        """
        selected = _names(sensors)
        names = list(self.rig) if selected is None else selected
        unknown = [n for n in names if n not in self.rig]
        if unknown:
            raise self._err(f"no sensor {', '.join(map(repr, unknown))} in this reader (has {', '.join(self.rig)})")
        if start_ns is not None and end_ns is not None and start_ns > end_ns:
            raise self._err(f"start_ns {start_ns} is after end_ns {end_ns}")
        return self._samples({self.rig[n].topic: self.rig[n] for n in names}, start_ns, end_ns, extra_fields)

    def _samples(
        self, by_topic: dict[str, SensorSpec], start_ns: int | None, end_ns: int | None, extra_fields: bool
    ) -> Iterator[PointCloudSample | ImageSample]:
        for ch, msg in self._raw(list(by_topic), start_ns, end_ns):
            spec = by_topic[ch.topic]
            sample: PointCloudSample | ImageSample
            if codec.is_image_kind(spec.kind):
                sample = self._decode(ch, msg, _IMAGE, partial(_image, spec=spec))
            else:
                sample = self._decode(ch, msg, _POINT_CLOUD, partial(_cloud, spec=spec, extra=extra_fields))
            if self._valid(spec.name, sample_problem(sample, kind_def(spec.kind)), ch.topic, msg.log_time):
                yield sample
        if self.truncated is not None and self._strict:
            raise DriveDamagedError(self.truncated.message, **self.truncated.context)

    def messages(self, topics: Sequence[str]) -> Iterator[tuple[str, int, int, bytes]]:
        """``(topic, log_time, sequence, data)`` of the messages of ``topics`` in log-time order (ties: file
        order): the channels added beside the drive's (:meth:`DriveWriter.add_json_channel`), undecoded."""
        for ch, msg in self._raw(list(topics)):
            yield ch.topic, msg.log_time, msg.sequence, msg.data

    def points(self, topic: str, sensor: str, *, extra_fields: bool = False) -> Iterator[PointCloudSample]:
        """The point clouds on ``topic`` (a channel of :meth:`DriveWriter.add_points_channel`) as samples of
        the rig's point sensor ``sensor``, in log-time order; ``seq`` is the message's sequence number.
        ``extra_fields``: as :meth:`samples`'."""
        spec = self.rig.get(sensor)
        if spec is None or codec.is_image_kind(spec.kind):
            raise self._err(f"no point sensor {sensor!r} in this reader", topic=topic)
        if topic not in self._channels:
            return
        for ch, msg in self._raw([topic]):
            yield self._decode(ch, msg, _POINT_CLOUD, partial(_cloud, spec=spec, extra=extra_fields))

    @property
    def source(self) -> SessionSource:
        """This drive as a session's source (:class:`perception.scheduler.Session`): its rig, metadata,
        ego poses (when it has any) and ground truth (when annotated, within :data:`GT_TOLERANCE_NS`)."""
        has_gt = self.has_ground_truth
        return SessionSource(
            rig=self.rig,
            metadata=self.metadata,
            name=f"drive {self.path}",
            file=str(self.path),
            ego_at=self.ego_pose_at if self._ego_list() else None,
            gt_at=(lambda t: self.ground_truth_at(t, GT_TOLERANCE_NS)) if has_gt else None,
        )

    def ego_poses(self) -> list[EgoPose]:
        """Every ego pose (``/ego/odometry``) in time order."""
        return list(self._ego_list())

    def _ego_list(self) -> list[EgoPose]:
        if self._ego is None:
            poses = self._topic_list(codec.EGO_TOPIC, _ODOMETRY, codec.decode_odometry)
            self._ego = [p for p in poses if self._valid("ego", ego_problem(p), codec.EGO_TOPIC, p.t_ns)]
            self._ego_times = [p.t_ns for p in self._ego]
        return self._ego

    def ego_pose_at(self, t_ns: int) -> EgoPose:
        """Ego pose at ``t_ns``: exact at a recorded time, else translation/velocity lerp and rotation
        slerp between the neighbours; held constant outside the recorded range."""
        poses = self._ego_list()
        if not poses:
            raise self._err("drive has no ego poses", topic=codec.EGO_TOPIC)
        return interpolate_ego(poses, t_ns, self._ego_times)

    def ground_truth(self) -> list[GroundTruth]:
        """Every ground-truth snapshot in time order (empty if the drive has none)."""
        if self._gt is None:
            self._gt = self._topic_list(codec.GROUND_TRUTH_TOPIC, _SCENE_UPDATE, codec.decode_ground_truth)
        return list(self._gt)

    def ground_truth_at(self, t_ns: int, tolerance_ns: int) -> GroundTruth | None:
        """The ground truth nearest ``t_ns`` (earlier wins a tie) if within ``tolerance_ns``."""
        gts = self.ground_truth()
        times = [g.t_ns for g in gts]
        i = bisect.bisect_left(times, t_ns)
        best = min((j for j in (i - 1, i) if 0 <= j < len(gts)), key=lambda j: abs(times[j] - t_ns), default=None)
        if best is None or abs(times[best] - t_ns) > tolerance_ns:
            return None
        return gts[best]

    def stats(self) -> DriveStats:
        """Duration and per-topic message counts, times, rates and schemas (from the index)."""
        damage = self.damage
        lost = damage.by_topic()
        counted_lost: dict[str, int] = {}  # lost messages that the index counts (to subtract)
        for chunk in damage.chunks:
            if chunk.offset in self._counted:
                for m in chunk.lost:
                    counted_lost[m.topic] = counted_lost.get(m.topic, 0) + (m.count or 0)
        topics = {}
        for topic, ch in self._channels.items():
            schema = self._summary.schemas.get(ch.schema_id)
            t = self._times.get(ch.id, ChannelTimes())
            loss = lost.get(topic)
            topics[topic] = TopicStats(
                topic=topic,
                schema=schema.name if schema is not None else "",
                message_count=t.count - counted_lost.get(topic, 0),
                first_t_ns=t.first if t.count else None,
                last_t_ns=t.last if t.count else None,
                lost_count=0 if loss is None else loss.count,
            )
        return DriveStats(
            path=str(self.path),
            start_ns=self.start_ns,
            end_ns=self.end_ns,
            topics=topics,
            sensors={e.name: e.kind for e in self._entries},
            has_ground_truth=self.has_ground_truth,
            truncated=None if self.truncated is None else self.truncated.message,
            damage=damage,
        )

    def _close(self) -> None:
        """Close the file (:meth:`close`: once)."""
        self._file.close()


def _names(sensors: Iterable[str] | str | None) -> list[str] | None:
    """Sensor selection as a list (a lone string is one name, not its characters)."""
    if sensors is None:
        return None
    return [sensors] if isinstance(sensors, str) else list(sensors)


def _from_raw(raw: RawDamage, channels: Mapping[int, Channel]) -> DamagedChunk:
    """A damaged region found by the scan, with what its surviving message index says it held."""
    start = raw.start_ns or 0
    end = raw.end_ns if raw.end_ns is not None else start
    if raw.index:
        lost = tuple(
            sorted(
                (LostMessages(_topic(channels, cid), len(ts), min(ts), max(ts)) for cid, ts in raw.index.items() if ts),
                key=lambda m: m.topic,
            )
        )
    else:
        lost = (LostMessages(UNKNOWN_TOPICS, None, start, end),)
    return DamagedChunk(raw.offset, raw.length, raw.reason, start, end, lost)


def _topic(channels: Mapping[int, Channel], cid: int) -> str:
    return channels[cid].topic if cid in channels else f"<channel {cid}>"


def _summary_problem(summary: Summary, size: int) -> str | None:
    """Why a summary that parsed cannot be trusted (chunk indexes pointing outside the file), or None."""
    for ci in summary.chunk_indexes:
        if ci.chunk_start_offset < len(MAGIC) or ci.chunk_start_offset + ci.chunk_length > size:
            return f"chunk index points outside the file (offset {ci.chunk_start_offset})"
        if ci.message_start_time > ci.message_end_time:
            return f"chunk index at offset {ci.chunk_start_offset} has its times reversed"
    for cid in {cid for ci in summary.chunk_indexes for cid in ci.message_index_offsets}:
        if cid not in summary.channels:
            return f"chunk index names unknown channel {cid}"
    return None


# -- decoding helpers ------------------------------------------------------------------------------


def _check_frame(frame_id: str, expected: str) -> None:
    if frame_id != expected:
        raise codec.DecodeError(f"frame_id {frame_id!r} differs from the rig's {expected!r}")


def _tf_static(msg: Any, _raw: Message) -> dict[str, Transform]:
    return codec.decode_tf_static(msg)


def _calibration(msg: Any, _raw: Message, *, frame_id: str) -> CameraCalibration:
    _check_frame(msg.frame_id, frame_id)
    return codec.decode_calibration(msg)


def _image(msg: Any, raw: Message, *, spec: SensorSpec) -> ImageSample:
    _check_frame(msg.frame_id, spec.frame_id)
    return ImageSample(spec.name, raw.log_time, spec.frame_id, bytes(msg.data), msg.format, raw.sequence)


def _cloud(msg: Any, raw: Message, *, spec: SensorSpec, extra: bool = False) -> PointCloudSample:
    _check_frame(msg.frame_id, spec.frame_id)
    fields = codec.kind_fields(spec.kind)
    if extra:  # (its other FLOAT32 fields, after the kind's)
        fields += tuple(f.name for f in msg.fields if f.type == codec.FLOAT32 and f.name not in fields)
    points = codec.decode_point_cloud(msg, fields)
    return PointCloudSample(spec.name, raw.log_time, spec.frame_id, points, fields, raw.sequence)
