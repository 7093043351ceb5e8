"""Import a ROS 2 bag (rosbag2 directory or a single ``.mcap``/``.db3`` file) into a drive.

Two passes over the bag with ``rosbags.highlevel.AnyReader`` (CDR deserialisation with the bag's
embedded message definitions, the latest ROS 2 LTS typestore as a fallback):

1. a scan: ``/tf_static`` and ``/tf`` (``tf2_msgs/msg/TFMessage``) into a
   :class:`~perception.importers._tf.TfTree`, the first ``sensor_msgs/msg/CameraInfo`` of every
   camera, and per sensor topic its time span (for the measured rate) and the ``header.frame_id`` of
   its first message (sensor messages are not deserialised beyond that). From these: the rig
   (extrinsics ``base_link <- sensor`` by composing the TF tree, intrinsics from CameraInfo) and the
   ego poses (``world <- base_link`` at the stamps of the dynamic edge closest to ``base_link``,
   velocity by finite differences);
2. the sensor topics, converted message by message and written in bag order, with the ego poses
   interleaved by time.

Messages the bag counts on a topic read (its statistics / metadata) but its reader does not return
(a record it cannot place, e.g. a damaged channel id) are counted as skipped, per topic.

Sample times are the messages' ``header.stamp`` (capture time). Drive sensor frames are the sensor
names; the ROS frames are recorded in the drive metadata (``ros2.frame.<sensor>``).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from perception._imageio import encode_jpeg, image_format, image_size, truncation_problem
from perception.drives import LIBRARY, cut_short_at, kind_fields, topic_for
from perception.errors import DriveError, PerceptionError
from perception.importers._motion import compensate_radial_velocity, ego_poses, ego_velocity_at, radial_velocity
from perception.importers._output import DriveOutput, ImportSummary
from perception.importers._pointcloud2 import decode_point_cloud2, point_fields
from perception.importers._tf import TfError, TfTree
from perception.importers._topic_map import Ros2Sensor, TopicMap, check_unique, load_topic_map
from perception.types import (
    CameraCalibration,
    EgoPose,
    ImageSample,
    PointCloudSample,
    SensorKind,
    SensorSpec,
    Transform,
)

__all__ = ["default_camera_info_topic", "image_to_rgb", "import_ros2"]

log = logging.getLogger(__name__)

POINTCLOUD2 = "sensor_msgs/msg/PointCloud2"
IMAGE = "sensor_msgs/msg/Image"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"
CAMERA_INFO = "sensor_msgs/msg/CameraInfo"
TF_MESSAGE = "tf2_msgs/msg/TFMessage"

_SENSOR_TYPES: dict[str, tuple[str, ...]] = {
    "lidar": (POINTCLOUD2,),
    "radar": (POINTCLOUD2,),
    "camera": (IMAGE, COMPRESSED_IMAGE),
}

#: ``sensor_msgs/msg/Image`` encodings we convert: channels, and how to reach RGB.
_ENCODINGS: dict[str, tuple[int, Callable[[npt.NDArray[np.uint8]], npt.NDArray[np.uint8]]]] = {
    "rgb8": (3, lambda px: px),
    "bgr8": (3, lambda px: px[..., ::-1]),
    "rgba8": (4, lambda px: px[..., :3]),
    "bgra8": (4, lambda px: px[..., 2::-1]),
    "mono8": (1, lambda px: np.repeat(px, 3, axis=2)),
    "8uc1": (1, lambda px: np.repeat(px, 3, axis=2)),
}


Progress = Callable[[float], None]


def _stamp_ns(stamp: Any) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def _frame(name: str) -> str:
    return str(name).lstrip("/")


def default_camera_info_topic(image_topic: str) -> str:
    """ROS convention: ``/ns/image_raw[/compressed]`` -> ``/ns/camera_info``."""
    topic = image_topic.rstrip("/")
    if topic.endswith("/compressed"):
        topic = topic[: -len("/compressed")]
    ns = topic.rsplit("/", 1)[0]
    return f"{ns}/camera_info"


@dataclass
class _Plan:
    """One mapped sensor as the bag resolved it."""

    index: int
    cfg: Ros2Sensor
    msgtype: str
    msgcount: int
    info_topic: str | None = None
    ros_frame: str | None = None
    spec: SensorSpec | None = None
    first_ns: int = 0  # bag times of the first and last message
    last_ns: int = 0

    @property
    def measured_rate_hz(self) -> float:
        span = (self.last_ns - self.first_ns) / 1e9
        return round((self.msgcount - 1) / span, 2) if self.msgcount > 1 and span > 0 else 0.0


def _cut_short(path: Path) -> Path | None:
    """The bag's MCAP file that starts as one and does not end as one (cut short), if any."""
    for file in [path] if path.is_file() else sorted(path.glob("*.mcap")):
        if cut_short_at(file) is not None:
            return file
    return None


def _is_drive(path: Path) -> bool:
    """Whether ``path`` is an MCAP file written by this package's drive writer (a drive, not a bag)."""
    from mcap.reader import make_reader

    if not path.is_file():
        return False
    try:
        with path.open("rb") as f:
            library = make_reader(f).get_header().library
    except Exception:  # not an MCAP file, or a header that does not parse: not a drive either
        return False
    return library.split("/")[0] == LIBRARY.split("/")[0]


class _Bag:
    """The opened bag: ``AnyReader`` plus errors that name the bag (and topic)."""

    def __init__(self, path: Path) -> None:
        from rosbags.highlevel import AnyReader
        from rosbags.typesys import Stores, get_typestore

        self.path = path
        if not path.exists():
            raise DriveError("bag not found", file=str(path))
        if path.suffix == ".bag":
            raise DriveError("ROS 1 bags are not supported; expected a rosbag2 directory or .mcap file", file=str(path))
        if path.is_dir() and not (path / "metadata.yaml").is_file():
            raise DriveError(
                "not a rosbag2 directory: no metadata.yaml in it (a bag without one: pass its .mcap file)",
                file=str(path),
            )
        try:
            self.reader = AnyReader([path], default_typestore=get_typestore(Stores.LATEST))
            self.reader.open()
        except Exception as exc:  # rosbags raises its own errors, OSError, yaml/sqlite errors...
            cut = _cut_short(path)
            if cut is not None:  # rosbags says only 'File end magic is invalid.'
                raise DriveError(
                    f"cannot open ROS 2 bag: its MCAP file is cut short (no end: a recording that did not "
                    f"finish); `mcap recover` rebuilds its readable part as a new file ({exc})",
                    file=str(cut),
                ) from exc
            if _is_drive(path):  # rosbags says only 'Profile is not ros2.'
                raise DriveError(
                    f"not a ROS 2 bag: a drive written by {LIBRARY.split('/')[0]} (import makes one); "
                    f"replay it as it is: perception replay {path}",
                    file=str(path),
                ) from exc
            raise DriveError(f"cannot open ROS 2 bag: {exc}", file=str(path)) from exc
        self.topics: dict[str, Any] = dict(self.reader.topics)

    def close(self) -> None:
        self.reader.close()

    def err(self, message: str, **context: object) -> DriveError:
        return DriveError(message, file=str(self.path), **context)

    def raw(self, topics: Sequence[str]) -> Iterator[tuple[str, str, int, bytes]]:
        """``(topic, msgtype, bag time, CDR bytes)`` of ``topics`` in bag order."""
        wanted = set(topics)
        conns = [c for c in self.reader.connections if c.topic in wanted]
        if not conns:
            return
        it = self.reader.messages(connections=conns)
        try:
            while True:
                try:
                    conn, t, raw = next(it)
                except StopIteration:
                    return
                except Exception as exc:  # corrupt chunk, bad compression...
                    raise self.err(f"unreadable bag data: {exc}") from exc
                yield conn.topic, conn.msgtype, int(t), raw
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def decode(self, topic: str, msgtype: str, t: int, raw: bytes) -> Any:
        try:
            return self.reader.deserialize(raw, msgtype)
        except Exception as exc:
            raise self.err(f"cannot deserialize {msgtype}: {exc}", topic=topic, t_ns=t) from exc

    def messages(self, topics: Sequence[str]) -> Iterator[tuple[str, str, int, Any]]:
        """``(topic, msgtype, bag time, message)`` of ``topics`` in bag order."""
        for topic, msgtype, t, raw in self.raw(topics):
            yield topic, msgtype, t, self.decode(topic, msgtype, t, raw)


# --------------------------------------------------------------------------------------------------
# planning: topics, TF, calibration, ego
# --------------------------------------------------------------------------------------------------


def _plan_sensors(bag: _Bag, tmap: TopicMap) -> list[_Plan]:
    plans = []
    available = ", ".join(sorted(bag.topics)) or "none"
    for i, cfg in enumerate(tmap.sensors):
        info = bag.topics.get(cfg.topic)
        if info is None:
            raise tmap.error(f"topic {cfg.topic} is not in the bag (bag topics: {available})", tmap.key(i, "topic"))
        expected = _SENSOR_TYPES[cfg.kind]
        if info.msgtype not in expected:
            raise tmap.error(
                f"topic {cfg.topic} has type {info.msgtype}; a {cfg.kind} needs {' or '.join(expected)}",
                tmap.key(i, "topic"),
            )
        plan = _Plan(i, cfg, info.msgtype, int(info.msgcount))
        if cfg.kind == "camera":
            if cfg.camera_info is not None:
                cam_info = bag.topics.get(cfg.camera_info)
                if cam_info is None:
                    raise tmap.error(f"topic {cfg.camera_info} is not in the bag", tmap.key(i, "camera_info"))
                if cam_info.msgtype != CAMERA_INFO:
                    raise tmap.error(
                        f"topic {cfg.camera_info} has type {cam_info.msgtype}, expected {CAMERA_INFO}",
                        tmap.key(i, "camera_info"),
                    )
                plan.info_topic = cfg.camera_info
            else:
                plan.info_topic = default_camera_info_topic(cfg.topic)
                cam_info = bag.topics.get(plan.info_topic)
                if cam_info is None or cam_info.msgtype != CAMERA_INFO:
                    raise bag.err(
                        f"no {CAMERA_INFO} for camera {cfg.name!r} (image topic {cfg.topic}); "
                        f"set camera_info: in the topic map",
                        topic=plan.info_topic,
                    )
        plans.append(plan)
    for key in ("tf_topic", "tf_static_topic"):
        topic = getattr(tmap, key)
        info = bag.topics.get(topic)
        if info is not None and info.msgtype != TF_MESSAGE:
            raise tmap.error(f"topic {topic} has type {info.msgtype}, expected {TF_MESSAGE}", key)
    return plans


def _scan(bag: _Bag, tmap: TopicMap, plans: list[_Plan]) -> tuple[TfTree, dict[str, Any], Counter[str]]:
    """Pass 1: the TF tree, the first CameraInfo per camera, and per sensor topic its time span and
    (from its first message) its frame. Sensor messages are not deserialised beyond the first. Also
    the messages of the TF and CameraInfo topics read (to compare with what the bag counts)."""
    tree = TfTree()
    infos: dict[str, Any] = {}
    info_topics = {p.info_topic for p in plans if p.info_topic is not None}
    by_topic = {p.cfg.topic: p for p in plans}
    topics = [tmap.tf_static_topic, tmap.tf_topic, *sorted(info_topics), *by_topic]
    read = Counter(dict.fromkeys((t for t in topics if t not in by_topic), 0))
    for topic, msgtype, t, raw in bag.raw(topics):
        plan = by_topic.get(topic)
        if plan is not None:
            if plan.first_ns == 0 and plan.last_ns == 0:
                plan.first_ns = t
                if plan.cfg.frame is None:
                    plan.ros_frame = _frame(bag.decode(topic, msgtype, t, raw).header.frame_id)
                    if not plan.ros_frame:
                        raise bag.err(
                            f"sensor {plan.cfg.name!r}: header.frame_id is empty (set frame: in the map)", topic=topic
                        )
            plan.last_ns = t
            continue
        read[topic] += 1
        if topic in info_topics:
            if topic not in infos:
                infos[topic] = bag.decode(topic, msgtype, t, raw)
            continue
        static = topic == tmap.tf_static_topic
        for ts in bag.decode(topic, msgtype, t, raw).transforms:
            tr, rot = ts.transform.translation, ts.transform.rotation
            try:
                tree.add(
                    _stamp_ns(ts.header.stamp),
                    ts.header.frame_id,
                    ts.child_frame_id,
                    (tr.x, tr.y, tr.z),
                    (rot.x, rot.y, rot.z, rot.w),
                    static=static,
                )
            except TfError as exc:
                raise bag.err(str(exc), topic=topic, t_ns=t) from exc
    for plan in plans:
        if plan.cfg.frame is not None:
            plan.ros_frame = _frame(plan.cfg.frame)
        elif plan.ros_frame is None:
            raise bag.err(
                f"sensor {plan.cfg.name!r}: topic has no messages, so its frame is unknown (set frame: in the map)",
                topic=plan.cfg.topic,
            )
    return tree, infos, read


def _calibration(bag: _Bag, plan: _Plan, msg: Any) -> CameraCalibration:
    k = tuple(float(v) for v in np.asarray(msg.k, dtype=np.float64).reshape(-1))
    if len(k) == 9 and not any(k):
        raise bag.err(f"CameraInfo K is all zeros: camera {plan.cfg.name!r} is not calibrated", topic=plan.info_topic)
    try:
        return CameraCalibration(
            width=int(msg.width),
            height=int(msg.height),
            k=k,
            d=tuple(float(v) for v in np.asarray(msg.d, dtype=np.float64).reshape(-1)),
            distortion_model=str(msg.distortion_model) or "plumb_bob",
        )
    except ValueError as exc:
        raise bag.err(f"invalid CameraInfo: {exc}", topic=plan.info_topic) from exc


def _build_rig(bag: _Bag, tmap: TopicMap, plans: list[_Plan], tree: TfTree, infos: dict[str, Any]) -> list[str]:
    notes = []
    base = _frame(tmap.base_frame)
    known = ", ".join(tree.frames) or "none"
    for plan in plans:
        cfg = plan.cfg
        assert plan.ros_frame is not None
        calibration = None
        if plan.info_topic is not None:
            msg = infos.get(plan.info_topic)
            if msg is None:
                raise bag.err(f"no CameraInfo message for camera {cfg.name!r}", topic=plan.info_topic)
            calibration = _calibration(bag, plan, msg)
        if plan.ros_frame == base:
            extrinsic, static = Transform.identity(), True
        else:
            try:
                found = tree.lookup(base, plan.ros_frame)
            except TfError as exc:
                raise bag.err(str(exc), topic=tmap.tf_static_topic, ros_frame=plan.ros_frame) from exc
            if found is None:
                raise bag.err(
                    f"no transform {base} <- {plan.ros_frame} for sensor {cfg.name!r} "
                    f"on {tmap.tf_static_topic} or {tmap.tf_topic} (frames with transforms: {known})",
                    topic=tmap.tf_static_topic,
                    ros_frame=plan.ros_frame,
                )
            extrinsic, static = found
        if not static:
            notes.append(f"{cfg.name}: mount {base} <- {plan.ros_frame} is on {tmap.tf_topic}; used its first value")
        rate = cfg.rate_hz
        if rate is None:
            rate = plan.measured_rate_hz
            notes.append(f"{cfg.name}: rate_hz not in the map; measured {rate:g} Hz in the bag")
        kind = SensorKind(cfg.kind)
        plan.spec = SensorSpec(
            name=cfg.name,
            kind=kind,
            frame_id=cfg.name,
            extrinsic=extrinsic,
            topic=topic_for(kind, cfg.name),
            calibration=calibration,
            rate_hz=float(rate),
        )
    return notes


def _ego(bag: _Bag, tmap: TopicMap, tree: TfTree) -> tuple[str, list[EgoPose]]:
    base = _frame(tmap.base_frame)
    if tmap.world_frame is not None:
        world = _frame(tmap.world_frame)
        if not tree.is_ancestor(world, base):
            raise bag.err(
                f"no transform chain {world} <- {base} for the ego pose (frames: {', '.join(tree.frames) or 'none'})",
                topic=tmap.tf_topic,
                ros_frame=base,
            )
    else:
        world = next((w for w in ("map", "odom") if tree.is_ancestor(w, base)), "")
        if not world:
            raise bag.err(
                f"no ego pose: {tmap.tf_topic} has no map <- {base} or odom <- {base} chain "
                f"(frames: {', '.join(tree.frames) or 'none'}); set world_frame: in the map",
                topic=tmap.tf_topic,
                ros_frame=base,
            )
    try:
        found = tree.poses(world, base)
    except TfError as exc:
        raise bag.err(str(exc), topic=tmap.tf_topic) from exc
    assert found is not None
    times, poses = found
    if not poses:
        raise bag.err(
            f"no ego motion: every transform on the chain {world} <- {base} is static",
            topic=tmap.tf_topic,
            ros_frame=base,
        )
    return world, ego_poses([int(t) for t in times], poses)


# --------------------------------------------------------------------------------------------------
# conversion
# --------------------------------------------------------------------------------------------------


def image_to_rgb(msg: Any) -> npt.NDArray[np.uint8]:
    """A ``sensor_msgs/msg/Image`` (rgb8, bgr8, rgba8, bgra8, mono8) as ``[H,W,3]`` RGB; honours ``step`` padding."""
    encoding = str(msg.encoding).lower()
    conv = _ENCODINGS.get(encoding)
    if conv is None:
        raise ValueError(f"unsupported image encoding {msg.encoding!r} (supported: rgb8, bgr8, rgba8, bgra8, mono8)")
    channels, to_rgb = conv
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height <= 0 or width <= 0:
        raise ValueError(f"empty image {width}x{height}")
    if step < width * channels:
        raise ValueError(f"step {step} is shorter than width {width} x {channels} channels")
    data = np.asarray(msg.data, dtype=np.uint8).reshape(-1)
    if data.size < height * step:
        raise ValueError(f"image data has {data.size} bytes, {height} rows of step {step} need {height * step}")
    rows = data[: height * step].reshape(height, step)
    px = rows[:, : width * channels].reshape(height, width, channels)
    return np.ascontiguousarray(to_rgb(px))


def _compressed(msg: Any) -> tuple[bytes, str]:
    data = np.asarray(msg.data, dtype=np.uint8).tobytes()
    fmt = image_format(data)
    if fmt is not None:
        return data, fmt
    raise ValueError(f"compressed image is neither JPEG nor PNG (format {msg.format!r})")


def _compressed_size(data: bytes) -> tuple[int, int]:
    """``(width, height)`` from the header (no decoding: cheap enough for every message)."""
    size = image_size(data)
    if size is None:
        raise ValueError("cannot read the compressed image's size from its header (truncated or damaged?)")
    return size


class _Converter:
    """Turns the sensor messages of the bag into drive samples, counting what it drops."""

    def __init__(self, out: DriveOutput, ego: list[EgoPose], jpeg_quality: int) -> None:
        self.out = out
        self.ego = ego
        self.jpeg_quality = jpeg_quality
        self.seq: Counter[str] = Counter()
        self.zero_stamps: Counter[str] = Counter()

    def convert(self, plan: _Plan, msgtype: str, bag_t: int, msg: Any) -> PointCloudSample | ImageSample:
        spec = plan.spec
        assert spec is not None
        t_ns = _stamp_ns(msg.header.stamp)
        if t_ns == 0:
            t_ns = bag_t
            self.zero_stamps[spec.name] += 1
        if plan.cfg.frame is None and _frame(msg.header.frame_id) != plan.ros_frame:
            raise ValueError(f"header.frame_id {msg.header.frame_id!r} differs from the first one, {plan.ros_frame!r}")
        seq = self.seq[spec.name]
        self.seq[spec.name] += 1
        if spec.kind == SensorKind.CAMERA:
            return self._image(plan, msgtype, msg, t_ns, seq)
        return self._cloud(plan, msg, t_ns, seq)

    def _image(self, plan: _Plan, msgtype: str, msg: Any, t_ns: int, seq: int) -> ImageSample:
        spec = plan.spec
        assert spec is not None and spec.calibration is not None
        cal = spec.calibration
        if msgtype == IMAGE:
            size = (int(msg.width), int(msg.height))
            self._check_size(plan, size, cal)
            data, fmt = encode_jpeg(image_to_rgb(msg), quality=self.jpeg_quality), "jpeg"
        else:
            data, fmt = _compressed(msg)
            self._check_size(plan, _compressed_size(data), cal)  # every image, as a raw one's
            if (problem := truncation_problem(data)) is not None:  # a whole header, its body cut short
                raise ValueError(problem)
        return ImageSample(spec.name, t_ns, spec.frame_id, data, fmt, seq)

    def _check_size(self, plan: _Plan, size: tuple[int, int], cal: CameraCalibration) -> None:
        if size != (cal.width, cal.height):
            raise ValueError(
                f"image is {size[0]}x{size[1]} but the CameraInfo on {plan.info_topic} is {cal.width}x{cal.height}"
            )

    def _cloud(self, plan: _Plan, msg: Any, t_ns: int, seq: int) -> PointCloudSample:
        spec, cfg = plan.spec, plan.cfg
        assert spec is not None
        have = set(point_fields(msg))
        names = ["x", "y", "z"]
        if spec.kind == SensorKind.LIDAR:
            extra = [self._optional(spec.name, cfg.intensity, "intensity", have)]
        else:
            velocity = [cfg.radial_velocity] if cfg.radial_velocity is not None else list(cfg.velocity or ())
            extra = [*velocity, self._optional(spec.name, cfg.rcs, "rcs", have)]
        cols = decode_point_cloud2(msg, names + [e for e in extra if e is not None])
        finite = np.isfinite(cols[:, :3]).all(axis=1)
        dropped = int(np.count_nonzero(~finite))
        if dropped:
            cols = cols[finite]
            self.out.skip(f"{spec.name}: points with non-finite x/y/z (dropped)", dropped)
        xyz = cols[:, :3]
        rest = iter(range(3, cols.shape[1]))
        if spec.kind == SensorKind.LIDAR:
            intensity = cols[:, next(rest)] if extra[0] is not None else np.zeros(len(cols), np.float32)
            points = np.column_stack([xyz, intensity])
        else:
            if cfg.radial_velocity is not None:
                vr = cols[:, next(rest)]
            else:
                vr = radial_velocity(xyz, cols[:, next(rest)], cols[:, next(rest)])
            if cfg.compensate_ego_motion:
                v, w = ego_velocity_at(self.ego, t_ns)
                vr = compensate_radial_velocity(xyz, vr, spec.extrinsic, v, w)
            rcs = cols[:, next(rest)] if extra[-1] is not None else np.zeros(len(cols), np.float32)
            points = np.column_stack([xyz, vr, rcs])
        fields = kind_fields(spec.kind)
        return PointCloudSample(spec.name, t_ns, spec.frame_id, points.astype(np.float32), fields, seq)

    def _optional(self, sensor: str, configured: str | None, default: str, have: set[str]) -> str | None:
        if configured is not None:
            return configured  # must exist: decoding names it if missing
        if default in have:
            return default
        self.out.note(f"{sensor}: the clouds have no {default!r} field; {default} set to 0")
        return None


# --------------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------------


def import_ros2(
    bag: str | os.PathLike[str],
    topic_map: TopicMap | str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    jpeg_quality: int = 90,
    on_progress: Progress | None = None,
) -> ImportSummary:
    """Import the mapped topics of a ROS 2 bag into the drive ``output`` (see the module docs).

    Raises :class:`ConfigError` for a map that does not fit the bag (file + key path) and
    :class:`DriveError` for bag content that cannot be imported (missing CameraInfo or TF, undecodable
    messages), naming the bag and the topic/frame. ``output`` only appears if the import succeeds.
    """
    tmap = topic_map if isinstance(topic_map, TopicMap) else load_topic_map(Path(topic_map))
    check_unique(tmap)
    if not 1 <= jpeg_quality <= 100:
        raise ValueError(f"jpeg_quality must be in 1..100, got {jpeg_quality}")
    src = _Bag(Path(bag))
    try:
        plans = _plan_sensors(src, tmap)
        tree, infos, read = _scan(src, tmap, plans)
        notes = _build_rig(src, tmap, plans, tree, infos)
        world, ego = _ego(src, tmap, tree)
        metadata = {
            "source": "rosbag2",
            "rosbag2.bag": Path(bag).name,
            "rosbag2.world_frame": world,
            "rosbag2.base_frame": _frame(tmap.base_frame),
            **{f"ros2.frame.{p.cfg.name}": p.ros_frame or "" for p in plans},
        }
        rig = [p.spec for p in plans if p.spec is not None]
        with DriveOutput(output, rig, source=f"rosbag2 {bag}", metadata=metadata, overwrite=overwrite) as out:
            for note in notes:
                out.note(note)
            for topic, n in sorted(read.items()):
                _count_lost(src, out, topic, n)
            _write(src, plans, out, ego, jpeg_quality, on_progress)
        return out.summary
    finally:
        src.close()


def _write(
    bag: _Bag, plans: list[_Plan], out: DriveOutput, ego: list[EgoPose], jpeg_quality: int, on_progress: Progress | None
) -> None:
    by_topic = {p.cfg.topic: p for p in plans}
    total = max(sum(p.msgcount for p in plans), 1)
    conv = _Converter(out, ego, jpeg_quality)
    next_ego = 0
    read: Counter[str] = Counter()
    for done, (topic, msgtype, bag_t, msg) in enumerate(bag.messages(list(by_topic)), start=1):
        plan = by_topic[topic]
        read[topic] += 1
        try:
            sample = conv.convert(plan, msgtype, bag_t, msg)
        except (ValueError, PerceptionError) as exc:
            raise _message_error(bag, plan, topic, bag_t, exc) from exc
        while next_ego < len(ego) and ego[next_ego].t_ns <= sample.t_ns:
            _write_ego(bag, out, ego[next_ego])
            next_ego += 1
        try:
            out.write(sample)  # the writer's checks (a negative stamp): named by the bag's message too
        except DriveError as exc:
            raise _message_error(bag, plan, topic, bag_t, exc) from exc
        if on_progress is not None:
            on_progress(done / total)
    for pose in ego[next_ego:]:
        _write_ego(bag, out, pose)
    for topic in by_topic:
        _count_lost(bag, out, topic, read[topic])
    for name, n in sorted(conv.zero_stamps.items()):
        out.note(f"{name}: {n} messages had a zero header stamp; used the bag receive time")


def _message_error(bag: _Bag, plan: _Plan, topic: str, bag_t: int, exc: ValueError | PerceptionError) -> DriveError:
    message = exc.message if isinstance(exc, PerceptionError) else str(exc)
    return bag.err(f"sensor {plan.cfg.name!r}: {message}", topic=topic, t_ns=bag_t)


def _write_ego(bag: _Bag, out: DriveOutput, pose: EgoPose) -> None:
    """``out.write_ego_pose``, its errors naming the bag (the pose comes from its TF)."""
    try:
        out.write_ego_pose(pose)
    except DriveError as exc:
        raise bag.err(f"ego pose at t={pose.t_ns} ns (from the TF): {exc.message}") from exc


def _count_lost(bag: _Bag, out: DriveOutput, topic: str, read: int) -> None:
    """Messages the bag counts on ``topic`` (its statistics / metadata) that its reader did not return:
    rosbags passes over a record it cannot place (e.g. a damaged channel id) without a word."""
    info = bag.topics.get(topic)
    lost = (int(info.msgcount) if info is not None else 0) - read
    if lost > 0:
        out.skip(f"{topic}: messages the bag counts but its reader did not return (unreadable records)", lost)
