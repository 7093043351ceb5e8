"""DriveWriter: records samples, ego poses and ground truth into one MCAP file.

The output is byte-deterministic: nothing but the caller's data (and constant library/format
identifiers) reaches the file, channels are registered in rig order, metadata keys are sorted, and
compression is a pure function of the bytes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
from google.protobuf.message import Message as PbMessage
from mcap.exceptions import UnsupportedCompressionError
from mcap.well_known import MessageEncoding, SchemaEncoding
from mcap_protobuf.schema import build_file_descriptor_set

from perception import __version__
from perception._lifetime import Closable, Lifetime
from perception.drives import _codec as codec
from perception.drives._direct import DirectFile
from perception.drives._mcap_out import Buffer, McapOut
from perception.errors import DriveError
from perception.kinds import known_kinds
from perception.types import (
    LABELS,
    EgoPose,
    GroundTruth,
    ImageSample,
    PointCloudSample,
    SensorSpec,
)

__all__ = ["LIBRARY", "DriveWriter"]

log = logging.getLogger(__name__)

#: Written into the MCAP header; constant for a given package version (no clock, no host).
LIBRARY = f"perception-fusion/{__version__}"

#: Static topics (/tf_static, camera calibrations) are repeated this often so a seek in Foxglove finds them.
STATIC_PERIOD_NS = 1_000_000_000
#: A ``streaming`` writer's pages this far behind the file's end are dropped from the page cache, where it
#: writes buffered (a file system refusing ``O_DIRECT``): they are written back by then (the kernel starts
#: their writeback when it is told to drop them, one step earlier).
STREAMING_BEHIND = 16 * 2**20

_COMPRESSION = {"zstd": "zstd", "lz4": "lz4", "none": ""}  # MCAP's names of the chunk compressions
_RESERVED_TOPICS = (codec.TF_STATIC_TOPIC, codec.TF_TOPIC, codec.EGO_TOPIC, codec.GROUND_TRUTH_TOPIC)
_MAX_U64 = 2**64 - 1
_MAX_U32 = 2**32 - 1


def _check_rig(rig: Sequence[SensorSpec], file: str) -> dict[str, SensorSpec]:
    by_name: dict[str, SensorSpec] = {}
    topics: set[str] = set(_RESERVED_TOPICS)
    frames: dict[str, SensorSpec] = {}
    for given in rig:
        if not isinstance(given, SensorSpec):
            raise DriveError(f"rig entries must be SensorSpec, got {type(given).__name__}", file=file)
        if given.kind not in known_kinds():
            raise DriveError(
                f"unknown sensor kind {given.kind!r} (known kinds: {', '.join(known_kinds())})",
                file=file,
                sensor=given.name,
            )
        spec = given
        kind = spec.kind
        if not spec.name or not spec.topic.startswith("/"):
            raise DriveError(
                f"sensor needs a name and an absolute topic, got {spec.topic!r}", file=file, sensor=spec.name
            )
        if not math.isfinite(spec.rate_hz) or spec.rate_hz < 0:
            raise DriveError(f"rate_hz must be finite and >= 0, got {spec.rate_hz}", file=file, sensor=spec.name)
        if spec.name in by_name:
            raise DriveError("duplicate sensor name in rig", file=file, sensor=spec.name)
        own = [spec.topic] + ([codec.calibration_topic(spec.name)] if codec.is_image_kind(kind) else [])
        for topic in own:
            if topic in topics:
                raise DriveError("topic used twice in rig (or reserved)", file=file, topic=topic, sensor=spec.name)
            topics.add(topic)
        if spec.frame_id in (codec.BASE_FRAME, codec.MAP_FRAME, ""):
            raise DriveError(
                f"sensor frame_id must be its own frame, not {spec.frame_id!r}", file=file, sensor=spec.name
            )
        other = frames.setdefault(spec.frame_id, spec)
        if other.extrinsic != spec.extrinsic:
            raise DriveError(
                f"sensors {other.name!r} and {spec.name!r} share frame {spec.frame_id!r} with different extrinsics",
                file=file,
            )
        if codec.is_image_kind(kind) and spec.calibration is None:
            raise DriveError(f"{kind} has no calibration", file=file, sensor=spec.name)
        by_name[spec.name] = spec
    return by_name


def _point_fields(kind: str, want: tuple[str, ...], given: Sequence[str]) -> tuple[str, ...] | str:
    """A cloud's ``given`` fields as a drive holds them (``want``: its ``kind``'s, first, in their order; then
    its other columns' names, each once), or why they are not."""
    fields = tuple(given)
    n = len(want)
    if fields == want:
        return fields
    if fields[:n] == want and len(set(fields)) == len(fields) and all(isinstance(f, str) and f for f in fields):
        return fields
    return f"{kind} points must have fields {want} first, then other fields each named once, got {fields}"


def _check_time(t_ns: int, what: str, file: str, topic: str) -> int:
    if type(t_ns) is int and 0 <= t_ns <= _MAX_U64:  # the usual case, in two checks (a bool is not an int's type)
        return t_ns
    if isinstance(t_ns, bool) or not isinstance(t_ns, int | np.integer) or not 0 <= int(t_ns) <= _MAX_U64:
        raise DriveError(f"{what} t_ns must be an integer in [0, 2^64), got {t_ns!r}", file=file, topic=topic)
    return int(t_ns)


def _create(path: Path, *, streaming: bool, exclusive: bool) -> IO[bytes] | DirectFile:
    """The new file at ``path`` (truncated, or ``exclusive``: created, refused if there) to write a drive into:
    a :class:`DirectFile` where it is ``streaming`` and the file system takes ``O_DIRECT``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC), 0o666)
    try:
        direct = DirectFile.adopt(fd, path) if streaming else None
        return direct if direct is not None else os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


class DriveWriter(Closable):
    """Write a drive (see ``replay_data/README.md``). A sync context manager; not thread-safe.

    ``rig`` is the sensors (cameras need a calibration); ``metadata`` free-form str -> str pairs.
    ``compression`` is ``"zstd"`` (falls back to lz4, then none, if the codec is missing), ``"lz4"``
    or ``"none"``. ``crcs``: each chunk's and the summary's CRC-32 (MCAP's integrity check); without them
    (0: "not computed", which readers skip) writing costs less CPU (zlib's CRC runs at ~2.5 GB/s here: about
    0.2 ms per lidar sweep), for a file whose writing must stay cheap (a run recording). ``streaming``: a
    file written once and not read back soon (a run recording): written past the page cache (``O_DIRECT``,
    through a block-aligned staging buffer: the device reads the data from memory, the kernel neither
    allocates pages nor copies into them; the same bytes, the last block padded and truncated at
    :meth:`close`); where the platform or the file system refuses ``O_DIRECT``, written buffered and what
    was written more than :data:`STREAMING_BEHIND` bytes ago is dropped from the page cache as it goes, so
    that a long recording neither fills the host's memory nor makes the kernel take fresh pages for every
    write. A streaming file's last part block reaches the file at :meth:`close` only. ``exclusive``: the file
    must be new (created with ``O_EXCL``): a file already at ``path`` is refused (:class:`DriveError` from a
    :class:`FileExistsError`), never overwritten, however late it appeared. If the ``with`` body raises, the
    file is still finished (what was written stays readable) and the exception propagates.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        rig: Sequence[SensorSpec],
        *,
        metadata: Mapping[str, str] | None = None,
        compression: str = "zstd",
        chunk_size: int = 4 * 1024 * 1024,
        crcs: bool = True,
        streaming: bool = False,
        exclusive: bool = False,
    ) -> None:
        self.path = Path(path)
        file = str(self.path)
        self._rig = _check_rig(rig, file)
        #: Per sensor: its spec, whether its samples are images, its point fields (what write() checks).
        self._plans: dict[str, tuple[SensorSpec, bool, tuple[str, ...]]] = {}
        for name, spec in self._rig.items():
            image = codec.is_image_kind(spec.kind)
            self._plans[name] = (spec, image, () if image else codec.kind_fields(spec.kind))
        meta = dict(metadata or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            raise DriveError("metadata keys and values must be strings", file=file)
        if compression not in _COMPRESSION:
            raise DriveError(f"unknown compression {compression!r}; expected zstd, lz4 or none", file=file)
        if chunk_size <= 0:
            raise DriveError(f"chunk_size must be positive, got {chunk_size}", file=file)
        try:
            self._file = _create(self.path, streaming=streaming, exclusive=exclusive)
        except OSError as exc:
            raise DriveError(f"cannot create drive: {exc.strerror or exc}", file=file) from exc
        direct = isinstance(self._file, DirectFile)  # no page cache to drop from
        drop_behind = STREAMING_BEHIND if streaming and not direct else 0
        self._state = Lifetime.OPENED
        self._channels: dict[str, tuple[int, str]] = {}  # topic -> (channel id, schema name)
        self._counters: dict[str, int] = {}
        self._next_static_ns: int | None = None
        self._own_topics: set[str] = set()
        self._extra_kinds: dict[str, str] = {}  # topic -> point kind, of add_points_channel's channels
        try:
            self._mcap = self._open_mcap(compression, chunk_size, crcs, drop_behind)
            self._mcap.start(profile="", library=LIBRARY)
            self._mcap.add_metadata(codec.RIG_METADATA, codec.encode_rig(list(self._rig.values())))
            self._mcap.add_metadata(codec.DRIVE_METADATA, dict(sorted(meta.items())))
            self._register_channels()
            self._own_topics = set(self._channels)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                self._file.close()
            self.path.unlink(missing_ok=True)
            if isinstance(exc, OSError):  # a streaming file writes its first blocks as soon as they are staged
                raise DriveError(f"cannot create drive: {exc.strerror or exc}", file=file) from exc
            raise

    # -- public API --------------------------------------------------------------------------------

    @property
    def rig(self) -> Mapping[str, SensorSpec]:
        return dict(self._rig)

    def write(self, sample: PointCloudSample | ImageSample) -> None:
        """Write a sensor sample on its sensor's topic at ``log_time = publish_time = sample.t_ns``. A point
        cloud has its kind's fields first, in the kind's order, then any other columns, each named once (a
        reader selects the kind's by name; :meth:`DriveReader.samples` ``extra_fields`` reads them all)."""
        plan = self._plans.get(sample.sensor)
        if plan is None:
            raise DriveError("sample from a sensor not in the rig", file=str(self.path), sensor=sample.sensor)
        spec, image, fields = plan
        t = _check_time(sample.t_ns, "sample", str(self.path), spec.topic)
        if sample.frame_id != spec.frame_id:
            raise DriveError(
                f"sample frame_id {sample.frame_id!r} differs from the rig's {spec.frame_id!r}",
                file=str(self.path),
                topic=spec.topic,
            )
        if not 0 <= sample.seq <= _MAX_U32:
            raise DriveError(f"seq must be in [0, 2^32), got {sample.seq}", file=str(self.path), topic=spec.topic)
        data: tuple[bytes, bytes, bytes] | tuple[bytes, memoryview]
        if image:
            if not isinstance(sample, ImageSample):
                raise DriveError(f"{spec.kind} sensors take ImageSample", file=str(self.path), topic=spec.topic)
            data = codec.encode_image_parts(t, spec.frame_id, sample.data, sample.format)
        else:
            if not isinstance(sample, PointCloudSample):
                raise DriveError(f"{spec.kind} sensors take PointCloudSample", file=str(self.path), topic=spec.topic)
            given = fields if sample.fields is fields else _point_fields(spec.kind, fields, sample.fields)
            if isinstance(given, str):
                raise DriveError(given, file=str(self.path), topic=spec.topic)
            data = codec.encode_point_cloud_parts(t, spec.frame_id, sample.points, given)
        self._maybe_write_static(t)
        self._add_raw(spec.topic, t, data, sample.seq)

    def write_ego_pose(self, pose: EgoPose) -> None:
        """Write the ego pose on ``/ego/odometry`` (pose, velocity, yaw rate) and mirror it on ``/tf``."""
        t = _check_time(pose.t_ns, "ego pose", str(self.path), codec.EGO_TOPIC)
        self._maybe_write_static(t)
        odometry, transform = codec.encode_ego_pose_parts(pose)
        self._add_raw(codec.EGO_TOPIC, t, odometry)
        self._add_raw(codec.TF_TOPIC, t, transform)

    def write_ground_truth(self, gt: GroundTruth) -> None:
        """Write the true objects (``base_link``) as a ``foxglove.SceneUpdate``."""
        t = _check_time(gt.t_ns, "ground truth", str(self.path), codec.GROUND_TRUTH_TOPIC)
        ids = [o.track_id for o in gt.objects]
        if len(set(ids)) != len(ids):
            raise DriveError(f"duplicate track ids at t={t}", file=str(self.path), topic=codec.GROUND_TRUTH_TOPIC)
        unknown = sorted({o.label for o in gt.objects} - set(LABELS))
        if unknown:
            raise DriveError(
                f"unknown labels {unknown} at t={t}; expected one of {', '.join(LABELS)}",
                file=str(self.path),
                topic=codec.GROUND_TRUTH_TOPIC,
            )
        self._maybe_write_static(t)
        self._add(codec.GROUND_TRUTH_TOPIC, t, codec.encode_ground_truth(gt))

    def add_json_channel(self, topic: str, schema_name: str, schema: Mapping[str, Any]) -> None:
        """Register a channel of JSON messages described by a JSON Schema (``schema``), beside the drive's
        own topics: a reader of the drive ignores it, Foxglove shows it. Its messages go through
        :meth:`write_json`."""
        self._new_topic(topic)
        data = json.dumps(schema, sort_keys=True, separators=(",", ":")).encode()
        sid = self._mcap.register_schema(schema_name, SchemaEncoding.JSONSchema, data)
        self._channels[topic] = (self._mcap.register_channel(topic, MessageEncoding.JSON, sid), schema_name)

    def write_json(self, topic: str, t_ns: int, data: bytes, seq: int | None = None) -> None:
        """Write one JSON message (``data``: its UTF-8 bytes) on a channel of :meth:`add_json_channel`."""
        self._write_extra(topic, t_ns, data, seq)

    def add_bytes_channel(self, topic: str, message_encoding: str) -> None:
        """Register a channel of binary messages without a schema (``message_encoding`` names their layout, which
        their reader knows) beside the drive's own topics: a reader of the drive ignores it. Its messages go
        through :meth:`write_bytes`."""
        self._new_topic(topic)
        self._channels[topic] = (self._mcap.register_channel(topic, message_encoding, 0), "")

    def write_bytes(self, topic: str, t_ns: int, data: Buffer | Sequence[Buffer], seq: int | None = None) -> None:
        """Write one message on a channel of :meth:`add_bytes_channel`: ``data``'s buffers one after another,
        kept (not copied) until their chunk is written: they must not change before :meth:`close`."""
        self._write_extra(topic, t_ns, data, seq)

    def add_points_channel(self, topic: str, kind: str) -> None:
        """Register a channel of point clouds of a point ``kind`` (the drive's encoding, ``foxglove.PointCloud``)
        beside the rig's sensor topics; a reader of the drive ignores it. Its messages go through
        :meth:`write_points`."""
        if codec.is_image_kind(kind):
            raise DriveError(f"{kind} is not a point kind", file=str(self.path), topic=topic)
        self._new_topic(topic)
        cls = codec.SCHEMAS[codec.sensor_schema(kind)]
        name = cls.DESCRIPTOR.full_name
        data = build_file_descriptor_set(cls).SerializeToString(deterministic=True)
        sid = self._mcap.register_schema(name, SchemaEncoding.Protobuf, data)
        self._channels[topic] = (self._mcap.register_channel(topic, MessageEncoding.Protobuf, sid), name)
        self._extra_kinds[topic] = kind

    def write_points(self, topic: str, sample: PointCloudSample, seq: int | None = None) -> None:
        """Write ``sample`` on a channel of :meth:`add_points_channel` at ``log_time = sample.t_ns``."""
        self._extra(topic)
        kind = self._extra_kinds[topic]
        fields = _point_fields(kind, codec.kind_fields(kind), sample.fields)
        if isinstance(fields, str):
            raise DriveError(fields, file=str(self.path), topic=topic)
        t = _check_time(sample.t_ns, "sample", str(self.path), topic)
        self._add_raw(topic, t, codec.encode_point_cloud_parts(t, sample.frame_id, sample.points, fields), seq)

    @property
    def bytes_written(self) -> int:
        """Bytes in the file so far (the chunk being filled is not counted until it is written): the MCAP
        writer's count (the file's position without a ``tell``, a system call, per message written)."""
        return 0 if self._state is Lifetime.CLOSED else self._mcap.offset

    def _close(self) -> None:
        """Write the index and summary and close the file (:meth:`close`: once; while ``CLOSING`` the rig's
        static data may still be written)."""
        try:
            if self._next_static_ns is None:  # nothing written: still record the rig's static data
                self._maybe_write_static(0)
            self._mcap.finish()
            self._file.close()  # a direct file's last block written here
        except OSError as exc:
            raise DriveError(f"cannot finish drive: {exc.strerror or exc}", file=str(self.path)) from exc
        finally:
            self._file.close()  # closed whatever happened (again: nothing)

    # -- internals ---------------------------------------------------------------------------------

    def _open_mcap(self, compression: str, chunk_size: int, crcs: bool, drop_behind: int) -> McapOut:
        order = {"zstd": ["zstd", "lz4", "none"], "lz4": ["lz4", "none"], "none": ["none"]}[compression]
        for name in order:
            try:
                return McapOut(
                    self._file,
                    chunk_size=chunk_size,
                    compression=_COMPRESSION[name],
                    crcs=crcs,
                    drop_behind=drop_behind,
                )
            except UnsupportedCompressionError:
                log.warning("%s: %s compression unavailable, trying the next codec", self.path, name)
        raise AssertionError("'none' compression is always available")  # pragma: no cover

    def _register_channels(self) -> None:
        schema_ids: dict[str, int] = {}

        def channel(topic: str, cls: type[PbMessage]) -> None:
            name = cls.DESCRIPTOR.full_name
            if name not in schema_ids:
                data = build_file_descriptor_set(cls).SerializeToString(deterministic=True)
                schema_ids[name] = self._mcap.register_schema(name, SchemaEncoding.Protobuf, data)
            cid = self._mcap.register_channel(topic, MessageEncoding.Protobuf, schema_ids[name])
            self._channels[topic] = (cid, name)

        for spec in self._rig.values():
            channel(spec.topic, codec.SCHEMAS[codec.sensor_schema(spec.kind)])
            if codec.is_image_kind(spec.kind):
                channel(codec.calibration_topic(spec.name), codec.SCHEMAS["foxglove.CameraCalibration"])
        channel(codec.TF_STATIC_TOPIC, codec.SCHEMAS["foxglove.FrameTransforms"])
        channel(codec.TF_TOPIC, codec.SCHEMAS["foxglove.FrameTransform"])
        channel(codec.EGO_TOPIC, codec.SCHEMAS["foxglove.Odometry"])
        channel(codec.GROUND_TRUTH_TOPIC, codec.SCHEMAS["foxglove.SceneUpdate"])

    def _maybe_write_static(self, t_ns: int) -> None:
        if self._next_static_ns is not None and t_ns < self._next_static_ns:
            return
        self._next_static_ns = t_ns + STATIC_PERIOD_NS
        self._add(codec.TF_STATIC_TOPIC, t_ns, codec.encode_tf_static(t_ns, list(self._rig.values())))
        for spec in self._rig.values():
            if spec.calibration is not None and codec.is_image_kind(spec.kind):
                msg = codec.encode_calibration(t_ns, spec.frame_id, spec.calibration)
                self._add(codec.calibration_topic(spec.name), t_ns, msg)

    def _new_topic(self, topic: str) -> None:
        if not topic.startswith("/") or topic in self._channels:
            raise DriveError("a channel needs a new absolute topic", file=str(self.path), topic=topic)

    def _extra(self, topic: str) -> None:
        if topic not in self._channels or topic in self._own_topics:
            raise DriveError("not a channel added beside the drive's", file=str(self.path), topic=topic)

    def _write_extra(self, topic: str, t_ns: int, data: Buffer | Sequence[Buffer], seq: int | None) -> None:
        """One message, as it is, on a channel added beside the drive's (JSON or bytes)."""
        self._extra(topic)
        self._add_raw(topic, _check_time(t_ns, "message", str(self.path), topic), data, seq)

    def _add(self, topic: str, t_ns: int, msg: PbMessage, seq: int | None = None) -> None:
        self._add_raw(topic, t_ns, msg.SerializeToString(deterministic=True), seq)

    def _add_raw(self, topic: str, t_ns: int, data: Buffer | Sequence[Buffer], seq: int | None = None) -> None:
        if self._state is Lifetime.CLOSED:
            raise DriveError("write after close", file=str(self.path), topic=topic)
        channel_id, _ = self._channels[topic]
        if seq is None:  # non-sensor topics: a per-topic counter
            seq = self._counters.get(topic, 0) & _MAX_U32
            self._counters[topic] = seq + 1
        try:
            self._mcap.add_message(
                channel_id=channel_id,
                log_time=t_ns,
                data=data,
                publish_time=t_ns,
                sequence=seq,
            )
        except OSError as exc:
            raise DriveError(f"cannot write: {exc.strerror or exc}", file=str(self.path), topic=topic) from exc
