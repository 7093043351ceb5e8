"""What the runtime saw, as Foxglove messages: one frame's fused detections, stats and camera detections.

* ``/perception/detections`` (``foxglove.SceneUpdate``, ``base_link``): one entity per fused detection,
  ``id`` = track id, a cube coloured by the combination of sensor kinds that saw it (see
  :mod:`perception.viz._palette`), a ``"<label> #<id> <score>"`` text and a velocity arrow (one second
  of travel). The full :class:`~perception.types.Detection3D` is kept in the entity metadata, so the
  renderer reads detections back exactly (:func:`decode_detections`).
* ``/perception/frame_stats`` (JSON, ``perception.FrameStats``): the ``detections.jsonl`` record of the
  frame without the detection list, plus numeric status codes, so Foxglove's Plot panel can plot
  ``.latency_ms.total``, ``.latency_ms.fusion``, ``.sensors.cam_front.latency_ms``,
  ``.sensors.cam_front.status_code``...
* ``/sensors/<camera>/detections`` (``foxglove.ImageAnnotations``, stamped with the image's time): the
  camera model's own 2D boxes, which Foxglove's Image panel overlays on ``/sensors/<camera>/image/...``.

The protobuf helpers (timestamps, poses, yaw quaternions, schema embedding) are the drive codec's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from foxglove_schemas_protobuf.ArrowPrimitive_pb2 import ArrowPrimitive
from foxglove_schemas_protobuf.Color_pb2 import Color
from foxglove_schemas_protobuf.CubePrimitive_pb2 import CubePrimitive
from foxglove_schemas_protobuf.ImageAnnotations_pb2 import ImageAnnotations
from foxglove_schemas_protobuf.KeyValuePair_pb2 import KeyValuePair
from foxglove_schemas_protobuf.Point2_pb2 import Point2
from foxglove_schemas_protobuf.PointsAnnotation_pb2 import PointsAnnotation
from foxglove_schemas_protobuf.SceneEntity_pb2 import SceneEntity
from foxglove_schemas_protobuf.SceneEntityDeletion_pb2 import SceneEntityDeletion
from foxglove_schemas_protobuf.SceneUpdate_pb2 import SceneUpdate
from foxglove_schemas_protobuf.TextAnnotation_pb2 import TextAnnotation
from foxglove_schemas_protobuf.TextPrimitive_pb2 import TextPrimitive
from foxglove_schemas_protobuf.Vector3_pb2 import Vector3
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message as PbMessage
from mcap.well_known import MessageEncoding, SchemaEncoding
from mcap_protobuf.schema import build_file_descriptor_set

from perception.drives import _codec as codec
from perception.errors import InputError
from perception.metrics import frame_record
from perception.types import LABELS, Detection3D, FrameResult, FrameStatus, SensorStatus
from perception.viz._palette import LABEL_COLORS, RGB, combination, combination_color, source_kinds

__all__ = [
    "DETECTIONS_TOPIC",
    "FRAME_STATS_SCHEMA",
    "FRAME_STATS_TOPIC",
    "ChannelDef",
    "LabelledBoxes",
    "SchemaDef",
    "camera_detections",
    "camera_detections_topic",
    "decode_camera_detections",
    "decode_detections",
    "encode_camera_detections",
    "encode_detections",
    "frame_stats",
    "protobuf_schema",
]

DETECTIONS_TOPIC = "/perception/detections"
FRAME_STATS_TOPIC = "/perception/frame_stats"
FRAME_STATS_SCHEMA = "perception.FrameStats"

F64 = npt.NDArray[np.float64]
_NS = 1_000_000_000
_SENSOR_CODES = {s.value: i for i, s in enumerate(SensorStatus)}  # ok 0, late 1, error 2, missing 3, skipped 4
_FRAME_CODES = {s.value: i for i, s in enumerate(FrameStatus)}  # ok 0, degraded 1, dropped 2


def camera_detections_topic(sensor: str) -> str:
    """Topic of a camera's own 2D detections, beside its image topic."""
    return f"/sensors/{sensor}/detections"


@dataclass(frozen=True, slots=True)
class SchemaDef:
    """A schema as MCAP and Foxglove carry it: name, encoding (``protobuf``, ``jsonschema``) and bytes."""

    name: str
    encoding: str
    data: bytes


@dataclass(frozen=True, slots=True)
class ChannelDef:
    topic: str
    message_encoding: str
    schema: SchemaDef | None
    metadata: Mapping[str, str] = field(default_factory=dict)


_SCHEMAS: dict[str, SchemaDef] = {}


def protobuf_schema(cls: type[PbMessage]) -> SchemaDef:
    """The embedded protobuf schema of a message class (a deterministic FileDescriptorSet)."""
    name = cls.DESCRIPTOR.full_name
    if name not in _SCHEMAS:
        data = build_file_descriptor_set(cls).SerializeToString(deterministic=True)
        _SCHEMAS[name] = SchemaDef(name, SchemaEncoding.Protobuf, data)
    return _SCHEMAS[name]


def protobuf_channel(topic: str, cls: type[PbMessage]) -> ChannelDef:
    return ChannelDef(topic, MessageEncoding.Protobuf, protobuf_schema(cls))


_STATUS_JSON = {"type": "string", "enum": [s.value for s in SensorStatus]}
_FRAME_STATS_JSON_SCHEMA: dict[str, Any] = {
    "title": FRAME_STATS_SCHEMA,
    "description": "Per-frame latency (ms) and status of the perception runtime",
    "type": "object",
    "properties": {
        "timestamp": {
            "type": "object",
            "properties": {"sec": {"type": "integer"}, "nsec": {"type": "integer"}},
        },
        "frame_id": {"type": "integer"},
        "t_ns": {"type": "integer"},
        "status": {"type": "string", "enum": [s.value for s in FrameStatus]},
        "status_code": {"type": "integer", "description": "0 ok, 1 degraded, 2 dropped"},
        "deadline_missed": {"type": "boolean"},
        "reason": {"type": "string"},
        "detections": {"type": "integer"},
        "sources": {"type": "object", "additionalProperties": {"type": "integer"}},
        "latency_ms": {"type": "object", "additionalProperties": True},
        "sensors": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {
                    "status": _STATUS_JSON,
                    "status_code": {"type": "integer", "description": "0 ok, 1 late, 2 error, 3 missing, 4 skipped"},
                    "latency_ms": {"type": "number"},
                    "sample_t_ns": {"type": "integer"},
                    "error": {"type": "string"},
                },
            },
        },
    },
}


def frame_stats_channel() -> ChannelDef:
    data = json.dumps(_FRAME_STATS_JSON_SCHEMA, sort_keys=True).encode()
    return ChannelDef(FRAME_STATS_TOPIC, MessageEncoding.JSON, SchemaDef(FRAME_STATS_SCHEMA, "jsonschema", data))


def frame_stats(result: FrameResult, kinds: Mapping[str, str]) -> dict[str, Any]:
    """The frame's ``detections.jsonl`` record with the detection list replaced by counts (total and
    per source combination) and numeric status codes added for plotting."""
    rec = frame_record(result)
    rec.pop("detections")
    rec["timestamp"] = {"sec": result.t_ns // _NS, "nsec": result.t_ns % _NS}
    rec["status_code"] = _FRAME_CODES[result.status.value]
    rec["detections"] = len(result.detections)
    counts: dict[str, int] = {}
    style = _styles(kinds)
    for d in result.detections:
        name = style(d.sources)[0]
        counts[name] = counts.get(name, 0) + 1
    rec["sources"] = dict(sorted(counts.items()))
    for entry in rec["sensors"].values():
        entry["status_code"] = _SENSOR_CODES[entry["status"]]
    return rec


def encode_frame_stats(stats: Mapping[str, Any]) -> bytes:
    return json.dumps(stats, sort_keys=True, separators=(",", ":")).encode()


# --------------------------------------------------------------------------------------------------
# fused detections
# --------------------------------------------------------------------------------------------------


def _color(rgb: Sequence[float], a: float) -> Color:
    return Color(r=rgb[0], g=rgb[1], b=rgb[2], a=a)


def _duration(ns: int) -> Duration:
    return Duration(seconds=ns // _NS, nanos=ns % _NS)


def _styles(kinds: Mapping[str, str]) -> Callable[[tuple[str, ...]], tuple[str, RGB]]:
    """The combination name and colour of a detection's sources, computed once per distinct sources of a
    frame (a few, for ~100 detections)."""
    seen: dict[tuple[str, ...], tuple[str, RGB]] = {}

    def style(sources: tuple[str, ...]) -> tuple[str, RGB]:
        out = seen.get(sources)
        if out is None:
            present = source_kinds(sources, kinds)
            out = seen[sources] = (combination(present), combination_color(present))
        return out

    return style


def _detection_entity(
    t_ns: int, d: Detection3D, style: Callable[[tuple[str, ...]], tuple[str, RGB]], lifetime_ns: int
) -> SceneEntity:
    combo, rgb = style(d.sources)
    cx, cy, cz = d.center
    vx, vy = d.velocity
    speed = math.hypot(vx, vy) if math.isfinite(vx) and math.isfinite(vy) else 0.0
    arrows = []
    if speed > 0.1:  # one second of travel from the box centre
        arrows.append(
            ArrowPrimitive(
                pose=codec._pose(d.center, codec._yaw_quat(math.atan2(vy, vx))),
                shaft_length=speed,
                shaft_diameter=0.12,
                head_length=0.6,
                head_diameter=0.35,
                color=_color(rgb, 1.0),
            )
        )
    meta = {
        "label": d.label,
        "track_id": str(d.id),
        "score": repr(float(d.score)),
        "yaw": repr(float(d.yaw)),
        "vx": repr(float(vx)),
        "vy": repr(float(vy)),
        "sigma_x": repr(float(d.uncertainty[0])),
        "sigma_y": repr(float(d.uncertainty[1])),
        "sources": ",".join(d.sources),
        "combination": combo,
    }
    return SceneEntity(
        timestamp=codec._stamp(t_ns),
        frame_id=codec.BASE_FRAME,
        id=str(d.id),
        lifetime=_duration(lifetime_ns),
        metadata=[KeyValuePair(key=k, value=v) for k, v in meta.items()],
        cubes=[
            CubePrimitive(
                pose=codec._pose(d.center, codec._yaw_quat(d.yaw)),
                size=Vector3(x=d.size[0], y=d.size[1], z=d.size[2]),
                color=_color(rgb, 0.45),
            )
        ],
        arrows=arrows,
        texts=[
            TextPrimitive(
                pose=codec._pose((cx, cy, cz + d.size[2] / 2.0 + 0.6), (0.0, 0.0, 0.0, 1.0)),
                billboard=True,
                font_size=14.0,
                scale_invariant=True,
                color=_color(rgb, 1.0),
                text=f"{d.label} #{d.id} {d.score:.2f}",
            )
        ],
    )


def encode_detections(
    t_ns: int, detections: Sequence[Detection3D], kinds: Mapping[str, str], lifetime_ns: int
) -> SceneUpdate:
    """Delete what the previous frame showed, then one entity per detection (``id`` = track id)."""
    style = _styles(kinds)
    return SceneUpdate(
        deletions=[SceneEntityDeletion(timestamp=codec._stamp(t_ns), type=SceneEntityDeletion.ALL)],
        entities=[_detection_entity(t_ns, d, style, lifetime_ns) for d in detections],
    )


def decode_detections(msg: SceneUpdate) -> tuple[Detection3D, ...]:
    """Detections back from :func:`encode_detections` (raises :class:`codec.DecodeError`)."""
    out = []
    for e in msg.entities:
        meta = {kv.key: kv.value for kv in e.metadata}
        if not e.cubes:
            raise codec.DecodeError(f"entity {e.id!r} has no cube")
        cube = e.cubes[0]
        try:
            out.append(
                Detection3D(
                    id=int(meta["track_id"]),
                    label=meta["label"],
                    score=float(meta["score"]),
                    center=codec._vec(cube.pose.position),
                    size=codec._vec(cube.size),
                    yaw=float(meta["yaw"]),
                    velocity=(float(meta["vx"]), float(meta["vy"])),
                    uncertainty=(float(meta["sigma_x"]), float(meta["sigma_y"])),
                    sources=tuple(s for s in meta["sources"].split(",") if s),
                )
            )
        except KeyError as exc:
            raise codec.DecodeError(f"entity {e.id!r} lacks metadata key {exc.args[0]!r}") from exc
        except ValueError as exc:
            raise codec.DecodeError(f"entity {e.id!r} has a malformed metadata value: {exc}") from exc
    return tuple(out)


# --------------------------------------------------------------------------------------------------
# camera 2D detections
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LabelledBoxes:
    """A camera model's 2D detections as drawn and recorded: ``boxes`` ``[K,4]`` ``x1, y1, x2, y2`` in image
    pixels, class names as ``labels`` (not :class:`perception.modelkit.CameraDetections`, the model-side
    float32 boxes with integer class ids)."""

    boxes: F64
    labels: tuple[str, ...]
    scores: F64


def camera_detections(outputs: Mapping[str, npt.ArrayLike], sensor: str) -> LabelledBoxes | None:
    """A camera model's valid detections from its output tensors (fusion's own validation of the
    outputs; ``None`` when they are missing or malformed)."""
    from perception.fusion._inputs import parse_camera  # the one validated reading of camera outputs

    if not outputs:
        return None
    try:
        parsed = parse_camera({k: np.asarray(v, dtype=np.float64) for k, v in outputs.items()}, sensor, 0.0)
    except (InputError, TypeError, ValueError):
        return None
    labels = tuple(LABELS[int(i)] for i in parsed.labels)
    return LabelledBoxes(np.asarray(parsed.boxes, np.float64), labels, np.asarray(parsed.scores, np.float64))


def encode_camera_detections(t_ns: int, dets: LabelledBoxes) -> ImageAnnotations:
    """One outline (``LINE_LOOP``) and one ``"<label> <score>"`` text per 2D box, coloured by label."""
    points, texts = [], []
    for (x1, y1, x2, y2), label, score in zip(dets.boxes.tolist(), dets.labels, dets.scores.tolist(), strict=True):
        rgb = LABEL_COLORS.get(label, (0.8, 0.8, 0.8))
        points.append(
            PointsAnnotation(
                timestamp=codec._stamp(t_ns),
                type=PointsAnnotation.LINE_LOOP,
                points=[Point2(x=x1, y=y1), Point2(x=x2, y=y1), Point2(x=x2, y=y2), Point2(x=x1, y=y2)],
                outline_color=_color(rgb, 1.0),
                thickness=2.0,
                metadata=[KeyValuePair(key="label", value=label), KeyValuePair(key="score", value=repr(score))],
            )
        )
        texts.append(
            TextAnnotation(
                timestamp=codec._stamp(t_ns),
                position=Point2(x=x1, y=max(y1 - 2.0, 0.0)),
                text=f"{label} {score:.2f}",
                font_size=12.0,
                text_color=_color((1.0, 1.0, 1.0), 1.0),
                background_color=_color(rgb, 0.6),
            )
        )
    return ImageAnnotations(points=points, texts=texts)


def decode_camera_detections(msg: ImageAnnotations) -> LabelledBoxes:
    """2D boxes back from :func:`encode_camera_detections` (raises :class:`codec.DecodeError`)."""
    boxes, labels, scores = [], [], []
    for p in msg.points:
        meta = {kv.key: kv.value for kv in p.metadata}
        if len(p.points) != 4 or "label" not in meta:
            raise codec.DecodeError("image annotation is not a labelled 4-point box")
        xs = [q.x for q in p.points]
        ys = [q.y for q in p.points]
        boxes.append([min(xs), min(ys), max(xs), max(ys)])
        labels.append(meta["label"])
        try:
            scores.append(float(meta.get("score", "nan")))
        except ValueError as exc:
            raise codec.DecodeError(f"malformed score: {exc}") from exc
    return LabelledBoxes(np.asarray(boxes, np.float64).reshape(-1, 4), tuple(labels), np.asarray(scores))
