"""The recording's own channels (beside the drive's), their JSON schemas, and the codecs of their payloads.

A recording is a drive (``perception.drives``: the samples as received on the rig's topics, a point cloud as
the run took it, :data:`META_POINTS`; the ego poses pushed during the run on ``/ego/odometry``) plus:

* ``/record/source_poses``: a replay's source poses (what fusion's ``ego_at`` read, :data:`META_EGO` ``source``),
  all of them, in one binary message at each segment's start (:data:`POSES_ENCODING`, :func:`encode_poses`):
  any kept segment can start a replay (two protobuf messages a pose cost each segment of an hour's drive
  2-3 s of CPU and 27 MB; these 17 MB are encoded once);

* every sample (of the sensors the run uses) and pose as received: sensor, stamp, arrival on the host's
  monotonic clock, in ``/record/arrivals``'s batches (``log_time``: the first one's stamp);
* ``/record/fusion``: every frame that reached fusion, in the order it did (``seq``): the samples that
  formed it (sensor -> stamp), the ego pose it carried, each sensor's status, model and version and the
  layout of the raw outputs of the sensors that were ok (``outputs``: key -> dtype, shape), the detections'
  ids, labels and sources, and the layout of the tracker state after it (``tracker``: key -> dtype, shape;
  null without a tracker); a frame shed under overload takes its turn there too (``predicted``: its time and
  ego pose, the tracker's prediction, no samples or sensors, no tracker state). No digest (formats 1-3 held
  the run's, ``digest``): a reader derives each from these values (:func:`fusion_digests`, :mod:`._digest`);
* ``/record/fusion_data``: the numbers of that frame (message sequence = its ``seq``), binary
  (:data:`DATA_ENCODING`): the detections' float fields (``<f8``, one row of 12 each:
  :func:`._digest.detection_values`), then the raw outputs in the order of the record's layout, then the
  tracker state's arrays in the order of theirs, each little-endian in C order and padded to 8 bytes
  (:func:`._digest.recorded_outputs`, :func:`._digest.recorded_arrays`) -- JSON numbers and base64 cost the
  run several times more;
* ``/record/fusion_points/<sensor>``: rows of a frame's point cloud (what the model was sent and camera-guided
  fusion read) that cannot be rebuilt from the received sweeps: a cloud is recorded as the received sweep
  it begins with (``raw_t_ns``) and, accumulated, each earlier sweep merged and the transform it was moved
  by (``merged``: ``PointCloudSample.merged_from``); only when those are not found are its rows written
  here (message sequence = the frame's ``seq``);
* ``/record/arrivals``: batches (one per frame reaching fusion, and at a segment's end) of arrivals;
* ``/record/frames``: every frame's result as delivered (dropped and shed frames too: status and reason),
  with the admission's in-flight limit in force when it was started or shed (``admission_limit``); its
  ``digest`` null when the detections delivered are those fusion gave the frame (``fusion_seq``'s: their
  digest is that record's, :func:`frame_digest`), else theirs (computed by the run: formats 1-3 always).
"""

from __future__ import annotations

import base64
import glob
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.drives import head_metadata
from perception.errors import DriveError
from perception.record._digest import decisions_digest, detections_digest, recorded_outputs_digest, tracker_digest
from perception.types import Detection3D, EgoPose, SensorResult, SensorStatus, Transform

__all__ = [
    "ARRIVALS_TOPIC",
    "DATA_ENCODING",
    "FORMAT_VERSION",
    "FRAMES_TOPIC",
    "FUSION_DATA_TOPIC",
    "FUSION_TOPIC",
    "LOSSES_TOPIC",
    "META_EGO",
    "META_FORMAT",
    "META_POINTS",
    "META_PREDICTED_BEFORE",
    "META_RUN",
    "META_SEGMENT",
    "POINTS_TAKEN",
    "POSES_ENCODING",
    "READABLE_VERSIONS",
    "SCHEMAS",
    "SOURCE_POSES_TOPIC",
    "TRACKER_WORLD",
    "decode_array",
    "decode_detection",
    "decode_ego",
    "decode_fusion",
    "decode_poses",
    "decode_result",
    "encode_array",
    "encode_detection",
    "encode_ego",
    "encode_poses",
    "encode_result",
    "frame_digest",
    "fusion_digests",
    "is_replaceable_segment",
    "points_topic",
    "segment_number",
    "segment_path",
    "segments",
]

#: 2: shed frames' predictions in the fusion order (``predicted``) and each frame's admission limit; a
#: recording of version 1 (neither) replays as well. 3: a frame's numbers (detections, raw outputs) binary on
#: ``/record/fusion_data``, its outputs digest exact (of those bytes), arrivals batched; 1 and 2 (JSON
#: numbers, base64) still replay. 4: no digest computed by the run (each one derived by the reader from the
#: values the record holds bit for bit: :func:`fusion_digests`), the tracker state after each fused frame
#: recorded instead; 1-3 (their digests recorded) still replay and compare as they did. 5: a replay's source
#: poses in one binary message a segment (:data:`SOURCE_POSES_TOPIC`), not two protobuf messages a pose on
#: ``/ego/odometry`` and ``/tf``; 1-4 (the poses there) still replay. 6: the tracker state holds the pose its
#: tracks are held against (``world``: ``perception.fusion``'s tracker keeps it through frames without one); in
#: 1-5 it is not compared (:data:`TRACKER_WORLD`). 7: each segment says what the recorder lost while it was
#: written (:data:`LOSSES_TOPIC`); 1-6 (no such message) replay as before.
FORMAT_VERSION = "7"
READABLE_VERSIONS = ("1", "2", "3", "4", "5", "6", "7")
#: The tracker state's array that formats 1-5 did not hold: a replay of one compares the state without it.
TRACKER_WORLD = "world"
ARRIVALS_TOPIC = "/record/arrivals"
FUSION_TOPIC = "/record/fusion"
FUSION_DATA_TOPIC = "/record/fusion_data"
#: The message encoding of ``/record/fusion_data`` (no schema: the layout is in the frame's fusion record).
DATA_ENCODING = "perception.record.arrays"
FRAMES_TOPIC = "/record/frames"
SOURCE_POSES_TOPIC = "/record/source_poses"
#: One message a segment, written as it is finished: what the recorder lost while it was written (its queue full,
#: a sample the drive format refuses...), by counter (format 7; a segment cut short has none).
LOSSES_TOPIC = "/record/losses"
#: The message encoding of ``/record/source_poses`` (no schema): ``n`` poses as ``<i8`` stamps (``n``), then
#: ``<f8`` rows of 11 (translation, rotation ``x y z w``, linear velocity, yaw rate): :func:`encode_poses`.
POSES_ENCODING = "perception.record.ego_poses"
#: Drive metadata keys a recording adds to its source's.
META_FORMAT = "record.format"
META_SEGMENT = "record.segment"
#: Which run of the recording a segment belongs to (a ROS node activated again starts a new one: fusion,
#: its tracker included, starts afresh).
META_RUN = "record.run"
#: ``source``: fusion read the source's ego poses (a replay's drive: on :data:`SOURCE_POSES_TOPIC`, formats
#: 1-4 on ``/ego/odometry``); ``frame``: only each frame's own pose (live: the poses the host pushed).
META_EGO = "record.fusion_ego"
#: How the point clouds on the rig's topics are recorded: :data:`POINTS_TAKEN` (not in recordings made before
#: it was added: a cloud whose fields were not its kind's alone, in their order, was refused, counted).
META_POINTS = "record.points"
#: A cloud as the run took it: its kind's point fields first, in the kind's order and under the kind's names
#: (a cloud naming them in another order is reordered, one read by position renamed:
#: :func:`perception.kinds.in_kind_order`), then its other columns under their own names (a lidar's ``ring``;
#: what a radar's model is sent after its kind's five). A reader of the drive selects the kind's fields; a
#: replay as recorded reads them all (``DriveReader.samples(extra_fields=True)``).
POINTS_TAKEN = "as_taken"
#: How many shed frames' predictions the recording's fusion order held before the segment (over every run; not
#: in recordings made before it was added): with the segment's first turn (its ``seq``), a replay from a kept
#: segment tells the frames fused in the segments rotated away from those predicted there.
META_PREDICTED_BEFORE = "record.predicted_before"


def points_topic(sensor: str) -> str:
    return f"/record/fusion_points/{sensor}"


def segment_path(path: Path, index: int) -> Path:
    """Segment ``index`` of the recording ``path``: ``path`` itself, then ``<stem>-0001.mcap``..."""
    return path if index == 0 else path.with_name(f"{path.stem}-{index:04d}{path.suffix or '.mcap'}")


def _segment_pattern(path: Path) -> re.Pattern[str]:
    return re.compile(re.escape(path.stem) + r"-(\d{4,})" + re.escape(path.suffix or ".mcap") + "$")


def segments(path: Path) -> list[Path]:
    """The segments of the recording ``path`` that exist, in order (``path`` first when it exists)."""
    pattern = _segment_pattern(path)
    named = path.parent.glob(f"{glob.escape(path.stem)}-*")  # (a name may hold glob's characters: run[1].mcap)
    found = sorted((int(m.group(1)), p) for p in named if (m := pattern.match(p.name)))
    return ([path] if path.exists() else []) + [p for _, p in found]


def is_replaceable_segment(path: Path) -> bool:
    """Whether the file ``path`` may be replaced (deleted, overwritten) as a segment of an earlier recording:
    its drive metadata, written at a segment's start, holds :data:`META_FORMAT`; or it was cut short before
    that metadata could be read (empty, or the MCAP magic and records cut short: a run that crashed). Only the
    file's beginning is read (:func:`perception.drives.head_metadata`: never a 256 MB segment's messages). A
    file that cannot be read, or does not begin as a drive, is not."""
    try:
        metadata = head_metadata(path)
    except DriveError:  # not MCAP, a message, chunk or schema before any drive metadata, unreadable
        return False
    return metadata is None or META_FORMAT in metadata


def segment_number(path: Path, segment: Path) -> int:
    """The number of ``segment`` (one of :func:`segments`) in the recording ``path``, by its name: 0 for ``path``
    (what a segment whose metadata cannot be read is taken for)."""
    m = _segment_pattern(path).match(segment.name)
    return int(m.group(1)) if m is not None and segment != path else 0


def encode_array(a: npt.NDArray[Any]) -> dict[str, Any]:
    arr = np.ascontiguousarray(a)
    arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
    return {"dtype": arr.dtype.str, "shape": list(arr.shape), "data": base64.b64encode(arr.tobytes()).decode()}


def decode_array(d: Mapping[str, Any]) -> npt.NDArray[Any]:
    raw = base64.b64decode(d["data"])
    out: npt.NDArray[Any] = np.frombuffer(raw, dtype=np.dtype(d["dtype"])).reshape(d["shape"])
    return out


def encode_ego(ego: EgoPose | None) -> dict[str, Any] | None:
    """A frame's ego pose as its record holds it: plain ints and floats (a live host's pose may hold numpy
    scalars: the JSON encoder refuses them; a float32's value is a float's exactly)."""
    if ego is None:
        return None
    return {
        "t_ns": int(ego.t_ns),
        "translation": [float(x) for x in ego.pose.translation],
        "rotation": [float(x) for x in ego.pose.rotation],
        "linear_velocity": [float(x) for x in ego.linear_velocity],
        "yaw_rate": float(ego.yaw_rate),
    }


def encode_poses(poses: Sequence[EgoPose]) -> bytes:
    """``poses`` as :data:`POSES_ENCODING` holds them, bit for bit (the floats as float64: Python's own)."""
    stamps = np.array([p.t_ns for p in poses], dtype="<i8")
    rows = np.array(
        [(*p.pose.translation, *p.pose.rotation, *p.linear_velocity, p.yaw_rate) for p in poses], dtype="<f8"
    ).reshape(len(poses), _POSE_FIELDS)
    return stamps.tobytes() + rows.tobytes()


def decode_poses(data: bytes) -> list[EgoPose]:
    """:func:`encode_poses`' poses back (ValueError: not that layout)."""
    n, rest = divmod(len(data), 8 * (1 + _POSE_FIELDS))
    if rest:
        raise ValueError(f"{len(data)} bytes are not whole poses of {8 * (1 + _POSE_FIELDS)} bytes")
    stamps = np.frombuffer(data, "<i8", n).tolist()
    rows = np.frombuffer(data, "<f8", n * _POSE_FIELDS, offset=8 * n).reshape(n, _POSE_FIELDS).tolist()
    return [
        EgoPose(t, Transform((r[0], r[1], r[2]), (r[3], r[4], r[5], r[6])), (r[7], r[8], r[9]), r[10])
        for t, r in zip(stamps, rows, strict=True)
    ]


_POSE_FIELDS = 11


def decode_ego(d: Mapping[str, Any] | None) -> EgoPose | None:
    if d is None:
        return None
    tx, ty, tz = d["translation"]
    qx, qy, qz, qw = d["rotation"]
    vx, vy, vz = d["linear_velocity"]
    return EgoPose(int(d["t_ns"]), Transform((tx, ty, tz), (qx, qy, qz, qw)), (vx, vy, vz), d["yaw_rate"])


def decode_fusion(record: dict[str, Any], data: bytes | None) -> dict[str, Any]:
    """A fusion record of format 3 or 4 with its ``/record/fusion_data`` message (``data``) read back as those
    of formats 1 and 2 are: ``detections`` a list of :func:`encode_detection`'s dicts, each ok sensor's
    ``outputs`` its arrays (aligned copies); format 4's ``tracker`` the tracker state's arrays (or None). A
    record of an older format (detections a list) is returned as it is."""
    dets = record.get("detections")
    if not isinstance(dets, Mapping):
        return record
    if data is None:
        raise ValueError(f"fusion #{record.get('seq')}: its {FUSION_DATA_TOPIC} message is missing")
    ids, labels, sources = dets["ids"], dets["labels"], dets["sources"]
    n = len(ids)
    outputs = [
        (id(sensor), *array)
        for sensor in (record["sensors"][name] for name in sorted(record["sensors"]))
        if (layout := sensor.get("outputs"))
        for array in _layout(layout)
    ]
    tracker = [(-1, *array) for array in _layout(record.get("tracker") or {})]
    sizes = [-(-int(np.prod(shape)) * dtype.itemsize // 8) * 8 for _, _, dtype, shape in outputs + tracker]
    if 96 * n + sum(sizes) != len(data):
        raise ValueError(
            f"fusion #{record.get('seq')}: {len(data)} bytes of data, its layout says {96 * n + sum(sizes)}"
        )
    values = np.frombuffer(data, "<f8", count=12 * n).reshape(n, 12).tolist()
    record["detections"] = [
        {"id": i, "label": label, "score": v[0], "center": v[1:4], "size": v[4:7], "yaw": v[7],
         "velocity": v[8:10], "uncertainty": v[10:12], "sources": src}
        for i, label, src, v in zip(ids, labels, sources, values, strict=True)
    ]  # fmt: skip
    at = 96 * n
    arrays: dict[int, dict[str, npt.NDArray[Any]]] = {}  # id(sensor's record), -1 the tracker -> its arrays
    for (owner, key, dtype, shape), size in zip(outputs + tracker, sizes, strict=True):
        count = int(np.prod(shape))
        out = np.frombuffer(data, dtype, count=count, offset=at).reshape(shape).copy()
        arrays.setdefault(owner, {})[key] = out
        at += size
    for sensor in record["sensors"].values():
        if id(sensor) in arrays:
            sensor["outputs"] = arrays[id(sensor)]
    if record.get("tracker") is not None:
        record["tracker"] = arrays.get(-1, {})
    return record


def _layout(layout: Mapping[str, Any]) -> list[tuple[str, np.dtype[Any], list[int]]]:
    """A layout of the record's JSON (``{key: [dtype, shape]}``), keys sorted: the order of their bytes."""
    return [(key, np.dtype(layout[key][0]), [int(x) for x in layout[key][1]]) for key in sorted(layout)]


def fusion_digests(
    record: Mapping[str, Any],
    version: str,
    *,
    decoded: tuple[Mapping[str, SensorResult], EgoPose | None, Sequence[Detection3D]] | None = None,
) -> dict[str, str | None]:
    """The digests of a fusion record read back (:func:`decode_fusion`) of a recording of format ``version``:
    ``outputs``, ``decisions``, ``detections``, ``tracker`` (None for a shed frame's prediction; "" when the
    run's fusion had no tracker). Formats 1-3: those the run computed, as recorded. Format 4 (no digest
    recorded): derived from what the record holds bit for bit -- the raw outputs' bytes, layout and models,
    the decisions (seq, frame, time, statuses, stamps, ego pose: JSON integers, strings and floats, which
    read back exactly), the detections' values, ids, labels and sources, the tracker state -- with the very
    functions the run of format 3 digested them with: the digests that run would have recorded. ``decoded``:
    the record's results, ego pose and detections, decoded already (the replay's), not decoded again."""
    if version in ("1", "2", "3"):
        return dict(record["digest"])
    predicted = bool(record.get("predicted"))
    if decoded is None:
        decoded = (
            {name: decode_result(name, d) for name, d in record["sensors"].items()},
            decode_ego(record["ego"]),
            [decode_detection(d) for d in record["detections"]],
        )
    results, ego, detections = decoded
    statuses = {n: r.status.value for n, r in results.items()}
    stamps = {n: r.sample_t_ns for n, r in results.items()}
    tracker = record.get("tracker")
    seq, frame_id, t_ns = int(record["seq"]), int(record["frame_id"]), int(record["t_ns"])
    return {
        "outputs": recorded_outputs_digest(results),
        "decisions": decisions_digest(seq, frame_id, t_ns, statuses, stamps, ego),
        "detections": detections_digest(detections),
        "tracker": None if predicted else "" if tracker is None else tracker_digest(tracker),
    }


def frame_digest(record: Mapping[str, Any], version: str, fused: Mapping[int, str]) -> str | None:
    """The digest of the detections a ``/record/frames`` record (of a recording of format ``version``) says
    were delivered: as recorded (formats 1-3; format 4 when they were not the very detections fusion gave
    the frame), else (format 4's null: they were) that of its fusion record's detections (``fused``: seq ->
    their digest, :func:`fusion_digests`; None when that record is not in the recording)."""
    digest = record.get("digest")
    seq = record.get("fusion_seq")
    if digest is not None or version in ("1", "2", "3") or seq is None:
        return digest if digest is None else str(digest)
    return fused.get(int(seq))


def encode_result(r: SensorResult, *, outputs: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "status": r.status.value,
        "error": r.error,
        "model": r.model,
        "model_version": r.model_version,
        "sample_t_ns": r.sample_t_ns,
        "latency_ns": r.latency_ns,
        # an earlier frame's result reused under overload (perception.scheduler's _reuse): its sample's age
        "reused_age_ns": r.reused_age_ns,
    }
    if outputs and r.status is SensorStatus.OK:
        out["outputs"] = {k: encode_array(np.asarray(v)) for k, v in sorted(r.outputs.items())}
    return out


def decode_result(sensor: str, d: Mapping[str, Any]) -> SensorResult:
    return SensorResult(
        sensor=sensor,
        status=SensorStatus(d["status"]),
        latency_ns=int(d.get("latency_ns") or 0),
        outputs={k: v if isinstance(v, np.ndarray) else decode_array(v) for k, v in (d.get("outputs") or {}).items()},
        error=d.get("error"),
        sample_t_ns=d.get("sample_t_ns"),
        model=d.get("model"),
        model_version=d.get("model_version") or "",
        reused_age_ns=d.get("reused_age_ns"),
    )


def encode_detection(d: Detection3D) -> dict[str, Any]:
    return {
        "id": d.id,
        "label": d.label,
        "score": d.score,
        "center": list(d.center),
        "size": list(d.size),
        "yaw": d.yaw,
        "velocity": list(d.velocity),
        "uncertainty": list(d.uncertainty),
        "sources": list(d.sources),
    }


def decode_detection(d: Mapping[str, Any]) -> Detection3D:
    cx, cy, cz = d["center"]
    sx, sy, sz = d["size"]
    vx, vy = d["velocity"]
    ux, uy = d["uncertainty"]
    return Detection3D(
        d["id"], d["label"], d["score"], (cx, cy, cz), (sx, sy, sz), d["yaw"], (vx, vy), (ux, uy), tuple(d["sources"])
    )


_SENSOR = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "description": "ok, late, error, missing, skipped"},
        "error": {"type": ["string", "null"]},
        "model": {"type": ["string", "null"]},
        "model_version": {"type": "string"},
        "sample_t_ns": {"type": ["integer", "null"]},
        "reused_age_ns": {"type": ["integer", "null"]},
        "latency_ns": {"type": "integer"},
        "outputs": {
            "type": "object",
            "description": "raw output tensors: key -> [dtype, shape], their bytes on /record/fusion_data",
        },
    },
}
_LAYOUT = {
    "type": ["object", "null"],
    "description": "the tracker state after the frame: key -> [dtype, shape], its bytes on /record/fusion_data",
}

#: Schema name and JSON Schema of each channel (Foxglove shows them in its raw-message and plot panels).
SCHEMAS: Mapping[str, tuple[str, Mapping[str, Any]]] = {
    ARRIVALS_TOPIC: (
        "perception.record.Arrivals",
        {
            "type": "object",
            "properties": {
                "arrivals": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "sensor": {"type": "string", "description": "the sensor, or 'ego' for a pose"},
                            "t_ns": {"type": "integer", "description": "the stamp"},
                            "arrival_ns": {"type": "integer", "description": "receipt on the host's monotonic clock"},
                        },
                    },
                },
            },
        },
    ),
    FUSION_TOPIC: (
        "perception.record.FusionInput",
        {
            "type": "object",
            "properties": {
                "seq": {"type": "integer", "description": "order in which the frame reached fusion"},
                "predicted": {"type": "boolean", "description": "a shed frame: the tracker's prediction"},
                "frame_id": {"type": "integer"},
                "t_ns": {"type": "integer"},
                "ego": {"type": ["object", "null"]},
                "samples": {"type": "object", "description": "sensor -> the sample that formed the frame"},
                "sensors": {"type": "object", "additionalProperties": _SENSOR},
                "detections": {
                    "type": "object",
                    "description": "ids, labels, sources; the values on /record/fusion_data",
                    "properties": {"ids": {"type": "array"}, "labels": {"type": "array"}, "sources": {"type": "array"}},
                },
                "tracker": _LAYOUT,
            },
        },
    ),
    FRAMES_TOPIC: (
        "perception.record.FrameDecision",
        {
            "type": "object",
            "properties": {
                "index": {"type": "integer", "description": "order in which the result was delivered"},
                "frame_id": {"type": "integer"},
                "t_ns": {"type": "integer"},
                "status": {"type": "string", "description": "ok, degraded, dropped"},
                "reason": {"type": ["string", "null"], "description": "why dropped (overflow, overload, shutdown)"},
                "predicted": {"type": "boolean", "description": "the detections are the tracker's prediction"},
                "admission_limit": {
                    "type": ["integer", "null"],
                    "description": "frames allowed in flight (adaptive admission) when it was started or shed",
                },
                "deadline_missed": {"type": "boolean"},
                "latency_ns": {"type": "integer"},
                "fusion_seq": {"type": ["integer", "null"]},
                "sensors": {"type": "object", "additionalProperties": _SENSOR},
                "detections": {"type": "integer"},
                "digest": {
                    "type": ["string", "null"],
                    "description": "of the detections delivered; null: those fusion gave the frame (fusion_seq)",
                },
            },
        },
    ),
    LOSSES_TOPIC: (
        "perception.record.Losses",
        {
            "type": "object",
            "properties": {
                "lost": {
                    "type": "object",
                    "additionalProperties": {"type": "integer"},
                    "description": "what the recorder lost while the segment was written, by counter: "
                    "dropped_<item> (its queue full), refused (a sample the drive format refuses), unknown_sensor, "
                    "before_begin_<item>",
                },
            },
        },
    ),
}
