"""Import one scene of a nuScenes-format dataset (v1.0 JSON tables) into a drive.

Reads the tables of ``DATAROOT/<version>/`` — required: ``scene``, ``sample``, ``sample_data``,
``ego_pose``, ``calibrated_sensor``, ``sensor``, ``sample_annotation``, ``instance``, ``category``;
``log`` is used for metadata when present, ``attribute`` for attribute names when present (else
nuScenes' own eight attribute tokens are recognised); ``map`` and ``visibility`` are not needed — and
the scene's sensor files:

* every ``sample_data`` of the scene, keyframes and sweeps, whose file exists (missing files are
  skipped and counted per sensor; none of the selected channels' files there at all is an error):
  lidar ``.pcd.bin`` (float32 x, y, z, intensity, ring -> x, y, z, intensity), radar PCD v0.7 (x, y,
  z, ``vx_comp``/``vy_comp`` projected on the line of sight, ``rcs``; the devkit's default point
  filters applied unless disabled), camera JPEG (as is);
* ``calibrated_sensor`` -> extrinsics (nuScenes quaternions are ``w, x, y, z``) and camera
  intrinsics (size from ``sample_data``; the images are undistorted); each sensor's ``rate_hz`` from
  the timestamps of its records whose files are there (keyframes only: ~2 Hz; noted when the tables'
  rate differs), the rate the live runtime and the ROS node expect it at;
* ``ego_pose`` -> ego poses at every sensor timestamp, velocity by finite differences;
* ``sample_annotation`` -> ground truth in ``base_link`` at every keyframe (the LIDAR_TOP keyframe's
  ego pose), classes mapped onto :data:`perception.types.LABELS`, others skipped and counted. Each
  object keeps what the nuScenes detection protocol (:mod:`perception.evaluation._nuscenes`) needs:
  its original ``category``, its ``attribute`` name (``""`` if it has none) and ``num_lidar_pts`` /
  ``num_radar_pts``; ``static_object.bicycle_rack`` annotations are kept as ground-truth *regions*
  (the protocol does not evaluate bicycles and motorcycles inside them).

Timestamps are microseconds in nuScenes and nanoseconds in the drive. Sensor names (and frames) are
the lowercase channel names: ``lidar_top``, ``cam_front``, ``radar_front``...
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import numpy as np

from perception._imageio import image_format, image_size, truncation_problem
from perception.drives import topic_for
from perception.errors import DriveError
from perception.importers._motion import ego_poses, quat_from_wxyz, radial_velocity
from perception.importers._output import DriveOutput, ImportSummary
from perception.importers._pcd import parse_pcd
from perception.types import (
    CameraCalibration,
    EgoPose,
    GroundTruth,
    GroundTruthObject,
    GroundTruthRegion,
    ImageSample,
    PointCloudSample,
    SensorKind,
    SensorSpec,
    Transform,
)

__all__ = ["BIKE_RACK", "NUSCENES_ATTRIBUTES", "NUSCENES_LABELS", "import_nuscenes", "nuscenes_label"]

log = logging.getLogger(__name__)

REQUIRED_TABLES = (
    "scene",
    "sample",
    "sample_data",
    "ego_pose",
    "calibrated_sensor",
    "sensor",
    "sample_annotation",
    "instance",
    "category",
)

#: Keys each record of a table must have (checked once when the table is loaded).
_KEYS: Mapping[str, tuple[str, ...]] = {
    "scene": ("token", "name", "first_sample_token"),
    "sample": ("token", "timestamp", "scene_token"),
    "sample_data": (
        "token",
        "sample_token",
        "ego_pose_token",
        "calibrated_sensor_token",
        "timestamp",
        "filename",
        "is_key_frame",
    ),
    "ego_pose": ("token", "timestamp", "translation", "rotation"),
    "calibrated_sensor": ("token", "sensor_token", "translation", "rotation", "camera_intrinsic"),
    "sensor": ("token", "channel", "modality"),
    "sample_annotation": ("token", "sample_token", "instance_token", "translation", "size", "rotation", "prev", "next"),
    "instance": ("token", "category_token"),
    "category": ("token", "name"),
    "log": ("token",),
    "attribute": ("token", "name"),
}

#: nuScenes' attribute table (the same eight tokens in every release), used when a dataroot has no
#: ``attribute.json``.
NUSCENES_ATTRIBUTES: Mapping[str, str] = {
    "cb5118da1ab342aa947717dc53544259": "vehicle.moving",
    "c3246a1e22a14fcb878aa61e69ae3329": "vehicle.stopped",
    "58aa28b1c2a54dc88e169808c07331e3": "vehicle.parked",
    "a14936d865eb4216b396adae8cb3939c": "cycle.with_rider",
    "5a655f9751944309a277276b8f473452": "cycle.without_rider",
    "03aa62109bf043afafdea7d875dd4f43": "pedestrian.sitting_lying_down",
    "4d8821270b4a47e3a8a300cbec48188e": "pedestrian.standing",
    "ab83627ff28b465b85c427162dec722f": "pedestrian.moving",
}

#: Annotations of this category become ground-truth regions (see the module docs).
BIKE_RACK = "static_object.bicycle_rack"

#: nuScenes category prefixes -> our label (first match wins); anything else is skipped.
NUSCENES_LABELS: tuple[tuple[str, str], ...] = (
    ("vehicle.car", "car"),
    ("vehicle.truck", "truck"),
    ("vehicle.bus", "truck"),
    ("vehicle.trailer", "truck"),
    ("vehicle.construction", "truck"),
    ("human.pedestrian", "pedestrian"),
    ("vehicle.bicycle", "cyclist"),
    ("vehicle.motorcycle", "cyclist"),
)

#: The devkit's default radar filters (``RadarPointCloud.default_filters``).
_RADAR_FILTERS: Mapping[str, frozenset[int]] = {
    "invalid_state": frozenset({0}),
    "dynprop": frozenset(range(7)),
    "ambig_state": frozenset({3}),
}
_RADAR_FIELD = {"invalid_state": "invalid_state", "dynprop": "dyn_prop", "ambig_state": "ambig_state"}

#: The devkit's ``box_velocity`` limit on the time between the two annotations used (s).
_MAX_VELOCITY_DT_S = 1.5

_US = 1000  # us -> ns
_MAX_TIMESTAMP_US = (2**64 - 1) // _US  # a drive's times are unsigned 64-bit ns
_MODALITY = {"lidar": SensorKind.LIDAR, "radar": SensorKind.RADAR, "camera": SensorKind.CAMERA}
_KIND_ORDER = {SensorKind.LIDAR: 0, SensorKind.RADAR: 1, SensorKind.CAMERA: 2}

Progress = Callable[[float], None]


def nuscenes_label(category: str) -> str | None:
    """Our label of a nuScenes category name, or ``None`` if it is not one of ours."""
    for prefix, label in NUSCENES_LABELS:
        if category == prefix or category.startswith(prefix + "."):
            return label
    return None


# --------------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------------


class _Tables:
    """The JSON tables of one dataset version, indexed by token."""

    def __init__(self, root: Path, version: str) -> None:
        self.dir = root / version
        if not root.is_dir():
            raise DriveError("nuScenes dataroot not found (or not a directory)", file=str(root))
        if not self.dir.is_dir():
            versions = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name.startswith("v1.0"))
            hint = ""
            if (root / "scene.json").is_file():  # the table directory given for the dataroot
                hint = f"; {root} holds the tables itself: DATAROOT is the directory above it, {root.parent}"
            raise DriveError(
                f"no table directory for version {version!r} (found: {', '.join(versions) or 'none'}){hint}",
                file=str(self.dir),
            )
        self.rows: dict[str, list[dict[str, Any]]] = {}
        for name in REQUIRED_TABLES:
            self.rows[name] = self._load(name, required=True)
        self.rows["log"] = self._load("log", required=False)
        self.rows["attribute"] = self._load("attribute", required=False)
        self.by_token = {name: {r["token"]: r for r in rows} for name, rows in self.rows.items()}

    def file(self, table: str) -> str:
        return str(self.dir / f"{table}.json")

    def _load(self, table: str, *, required: bool) -> list[dict[str, Any]]:
        path = self.dir / f"{table}.json"
        if not path.is_file():
            if required:
                raise DriveError(f"nuScenes table {table!r} is missing", file=str(path))
            return []
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise DriveError(f"cannot read table: {exc}", file=str(path)) from exc
        except json.JSONDecodeError as exc:
            raise DriveError(f"invalid JSON at line {exc.lineno}: {exc.msg}", file=str(path)) from exc
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise DriveError("expected a JSON list of records", file=str(path))
        for i, rec in enumerate(rows):
            missing = [k for k in _KEYS[table] if k not in rec]
            if missing:
                raise DriveError(f"record {i} has no {', '.join(map(repr, missing))}", file=str(path))
            for key in _KEYS[table]:
                text = key in ("token", "prev", "next", "filename") or key.endswith("_token")
                if text and not isinstance(rec[key], str):
                    raise DriveError(f"record {i}: {key} must be a string, got {rec[key]!r}", file=str(path))
                if key == "is_key_frame" and not isinstance(rec[key], bool):  # "false" would be true
                    raise DriveError(f"record {i}: {key} must be true or false, got {rec[key]!r}", file=str(path))
            ts = rec.get("timestamp", 0)
            if isinstance(ts, bool) or not isinstance(ts, int) or not 0 <= ts <= _MAX_TIMESTAMP_US:
                raise DriveError(
                    f"record {i}: timestamp must be integer microseconds in [0, 2^64 ns), got {ts!r}", file=str(path)
                )
        return rows

    def get(self, table: str, token: str, referrer: str) -> dict[str, Any]:
        rec = self.by_token[table].get(token)
        if rec is None:
            raise DriveError(f"{referrer} refers to unknown {table} token {token!r}", file=self.file(table))
        return rec


def _vector(rec: Mapping[str, Any], key: str, n: int, file: str) -> tuple[float, ...]:
    value = rec[key]
    try:
        out = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        out = ()
    if len(out) != n or not all(math.isfinite(v) for v in out):
        raise DriveError(f"record {rec['token']!r}: {key} must be {n} finite numbers, got {value!r}", file=file)
    return out


def _transform(tables: _Tables, table: str, rec: Mapping[str, Any]) -> Transform:
    file = tables.file(table)
    t = _vector(rec, "translation", 3, file)
    q = _vector(rec, "rotation", 4, file)
    if math.hypot(*q) < 1e-9:
        raise DriveError(f"record {rec['token']!r}: rotation is a zero quaternion", file=file)
    return Transform((t[0], t[1], t[2]), quat_from_wxyz(q))


# --------------------------------------------------------------------------------------------------
# the scene
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Data:
    """A sample_data record of the scene, resolved."""

    sensor: str
    kind: SensorKind
    t_ns: int
    path: Path
    keyframe: bool
    rec: Mapping[str, Any]


def _find_scene(tables: _Tables, name: str) -> dict[str, Any]:
    scenes = tables.rows["scene"]
    for rec in scenes:
        if rec["name"] == name:
            return rec
    names = sorted(str(r["name"]) for r in scenes)
    shown = ", ".join(names[:20]) + (f", ... ({len(names) - 20} more)" if len(names) > 20 else "")
    raise DriveError(f"unknown scene {name!r}; available: {shown or 'none'}", file=tables.file("scene"))


def _data_path(tables: _Tables, root: Path, filename: str) -> Path:
    """``root / filename`` for a ``sample_data`` filename, refusing one that is absolute or climbs out of
    the dataroot with ``..`` (a table is input like any other: it names files only inside the dataroot;
    symlinks inside it, e.g. to another disk, are the user's and followed)."""
    rel = PurePosixPath(filename.replace("\\", "/"))
    if not filename or rel.is_absolute() or PureWindowsPath(filename).drive or ".." in rel.parts:
        raise DriveError(
            f"sample_data filename {filename!r} is not a path inside the dataroot {root}",
            file=tables.file("sample_data"),
        )
    return root / rel


def _sensor_of(tables: _Tables, sd: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    cs = tables.get("calibrated_sensor", sd["calibrated_sensor_token"], f"sample_data {sd['token']!r}")
    sensor = tables.get("sensor", cs["sensor_token"], f"calibrated_sensor {cs['token']!r}")
    return cs, sensor


def _scene_data(
    tables: _Tables, root: Path, sample_tokens: set[str]
) -> tuple[list[_Data], dict[str, tuple[SensorKind, dict[str, Any], list[dict[str, Any]]]]]:
    """The scene's sample_data (time-ordered) and per sensor its kind, calibration and records."""
    sensors: dict[str, tuple[SensorKind, dict[str, Any], list[dict[str, Any]]]] = {}
    out: list[_Data] = []
    for sd in tables.rows["sample_data"]:
        if sd["sample_token"] not in sample_tokens:
            continue
        cs, sensor = _sensor_of(tables, sd)
        kind = _MODALITY.get(str(sensor["modality"]))
        if kind is None:
            raise DriveError(
                f"sensor {sensor['channel']!r} has unknown modality {sensor['modality']!r}", file=tables.file("sensor")
            )
        name = str(sensor["channel"]).lower()
        entry = sensors.setdefault(name, (kind, cs, []))
        if entry[1]["token"] != cs["token"] and (
            _transform(tables, "calibrated_sensor", entry[1]) != _transform(tables, "calibrated_sensor", cs)
            or entry[1]["camera_intrinsic"] != cs["camera_intrinsic"]
        ):
            raise DriveError(
                f"sensor {sensor['channel']} has several different calibrations in the scene",
                file=tables.file("calibrated_sensor"),
            )
        entry[2].append(sd)
        t_ns = int(sd["timestamp"]) * _US
        out.append(_Data(name, kind, t_ns, _data_path(tables, root, str(sd["filename"])), bool(sd["is_key_frame"]), sd))
    out.sort(key=lambda d: (d.t_ns, d.sensor))
    return out, sensors


def _rig(
    tables: _Tables,
    sensors: Mapping[str, tuple[SensorKind, dict[str, Any], list[dict[str, Any]]]],
    present: set[str],
    notes: list[str],
) -> list[SensorSpec]:
    """The drive's rig. A sensor's ``rate_hz`` is that of the records whose files are there (``present``:
    their tokens), the rate the drive will hold: a dataroot without ``sweeps/`` gives the keyframes' 2 Hz,
    not the sensor's 20 Hz, which the live runtime would wait for (a timer frame every 50 ms)."""
    rig = []
    changed: list[str] = []
    for name, (kind, cs, records) in sorted(sensors.items(), key=lambda kv: (_KIND_ORDER[kv[1][0]], kv[0])):
        extrinsic = _transform(tables, "calibrated_sensor", cs)
        calibration = None
        if kind == SensorKind.CAMERA:
            k = cs["camera_intrinsic"]
            rec = records[0]
            try:
                width, height = int(rec.get("width") or 0), int(rec.get("height") or 0)
            except (TypeError, ValueError):
                width = height = 0
            if width <= 0 or height <= 0:
                raise DriveError(
                    f"record {rec['token']!r}: camera {name.upper()}: width and height must be positive integers, "
                    f"got {rec.get('width')!r} x {rec.get('height')!r}",
                    file=tables.file("sample_data"),
                )
            try:
                calibration = CameraCalibration(
                    width=width,
                    height=height,
                    k=tuple(float(v) for row in k for v in row),
                    d=(0.0, 0.0, 0.0, 0.0, 0.0),  # nuScenes images are undistorted
                )
            except (TypeError, ValueError) as exc:
                raise DriveError(
                    f"camera {name.upper()}: bad intrinsics: {exc}", file=tables.file("calibrated_sensor")
                ) from exc
        rate = _rate_hz([r for r in records if str(r["token"]) in present] or records)
        if rate != (table_rate := _rate_hz(records)):
            changed.append(f"{name} {rate:g} ({table_rate:g})")
        rig.append(SensorSpec(name, kind, name, extrinsic, topic_for(kind, name), calibration, rate))
    if changed:
        notes.append(
            f"rates of the files present, not the tables' (which count the missing ones): {', '.join(changed)} Hz"
        )
    return rig


def _rate_hz(records: Sequence[Mapping[str, Any]]) -> float:
    """Records per second: 1 / the median gap between their timestamps (0 for fewer than two)."""
    times = np.sort(np.array([int(r["timestamp"]) for r in records], dtype=np.int64))
    period_us = float(np.median(np.diff(times))) if len(times) > 1 else 0.0
    return round(1e6 / period_us, 2) if period_us > 0 else 0.0


def _ego(tables: _Tables, data: Iterable[_Data]) -> list[EgoPose]:
    times: list[int] = []
    poses: list[Transform] = []
    seen: set[str] = set()
    for d in data:
        token = str(d.rec["ego_pose_token"])
        if token in seen:
            continue
        seen.add(token)
        rec = tables.get("ego_pose", token, f"sample_data {d.rec['token']!r}")
        times.append(int(rec["timestamp"]) * _US)
        poses.append(_transform(tables, "ego_pose", rec))
    return ego_poses(times, poses)


# --------------------------------------------------------------------------------------------------
# ground truth
# --------------------------------------------------------------------------------------------------


def _reference_pose(tables: _Tables, sample: Mapping[str, Any], data: Sequence[_Data]) -> Transform:
    """Ego pose of the sample's LIDAR_TOP keyframe (else the keyframe closest to the sample time)."""
    t = int(sample["timestamp"]) * _US
    keyframes = [d for d in data if d.keyframe and d.rec["sample_token"] == sample["token"]]
    if not keyframes:
        raise DriveError(f"sample {sample['token']!r} has no keyframe sample_data", file=tables.file("sample_data"))
    ref = next((d for d in keyframes if d.sensor == "lidar_top"), None)
    if ref is None:
        ref = min(keyframes, key=lambda d: (abs(d.t_ns - t), d.sensor))
    rec = tables.get("ego_pose", str(ref.rec["ego_pose_token"]), f"sample_data {ref.rec['token']!r}")
    return _transform(tables, "ego_pose", rec)


def _global_velocity(tables: _Tables, ann: Mapping[str, Any]) -> tuple[float, float] | None:
    """Instance velocity (global frame) by finite differences of its neighbouring annotations, as the
    devkit's ``box_velocity``; ``None`` if it has no neighbour or they are too far apart in time."""
    file = tables.file("sample_annotation")
    prev = tables.by_token["sample_annotation"].get(ann["prev"]) if ann["prev"] else None
    nxt = tables.by_token["sample_annotation"].get(ann["next"]) if ann["next"] else None
    if prev is None and nxt is None:
        return None
    first = prev if prev is not None else ann
    last = nxt if nxt is not None else ann
    t0 = int(tables.get("sample", first["sample_token"], f"sample_annotation {first['token']!r}")["timestamp"])
    t1 = int(tables.get("sample", last["sample_token"], f"sample_annotation {last['token']!r}")["timestamp"])
    dt = (t1 - t0) * 1e-6
    limit = _MAX_VELOCITY_DT_S * (2 if prev is not None and nxt is not None else 1)
    if dt <= 0 or dt > limit:
        return None
    p0 = _vector(first, "translation", 3, file)
    p1 = _vector(last, "translation", 3, file)
    return ((p1[0] - p0[0]) / dt, (p1[1] - p0[1]) / dt)


def _attribute(tables: _Tables, ann: Mapping[str, Any], unresolved: Counter[str]) -> str | None:
    """The annotation's attribute name as the devkit's ``load_gt`` takes it: ``""`` without one, the
    name of its one attribute; ``None`` (unknown) for several attributes, which the devkit rejects."""
    tokens = ann.get("attribute_tokens")
    if tokens is None:
        unresolved["no attribute_tokens field"] += 1
        return None
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise DriveError(
            f"record {ann['token']!r}: attribute_tokens must be a list of tokens, got {tokens!r}",
            file=tables.file("sample_annotation"),
        )
    if not tokens:
        return ""
    if len(tokens) > 1:
        unresolved["several attributes"] += 1
        return None
    rec = tables.by_token["attribute"].get(tokens[0])
    if rec is not None:
        return str(rec["name"])
    name = NUSCENES_ATTRIBUTES.get(tokens[0])
    if name is None:
        unresolved["unknown attribute token"] += 1
    return name


def _num_points(tables: _Tables, ann: Mapping[str, Any], key: str) -> int | None:
    value = ann.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DriveError(
            f"record {ann['token']!r}: {key} must be a non-negative integer, got {value!r}",
            file=tables.file("sample_annotation"),
        )
    return value


def _ground_truth(
    tables: _Tables, samples: Sequence[Mapping[str, Any]], data: Sequence[_Data], out: DriveOutput
) -> list[GroundTruth]:
    file = tables.file("sample_annotation")
    unresolved: Counter[str] = Counter()
    by_sample: dict[str, list[dict[str, Any]]] = {}
    for ann in tables.rows["sample_annotation"]:
        by_sample.setdefault(str(ann["sample_token"]), []).append(ann)
    track_ids: dict[str, int] = {}
    unknown_velocity = 0
    gts = []
    for sample in samples:
        ego = _reference_pose(tables, sample, data)
        to_ego = ego.inverse()
        r_ego = ego.rotation_matrix()
        objects = []
        regions = []
        instances: dict[str, str] = {}  # instance token -> the sample's annotation of it
        for ann in sorted(by_sample.get(str(sample["token"]), []), key=lambda a: str(a["instance_token"])):
            other = instances.setdefault(str(ann["instance_token"]), str(ann["token"]))
            if other != ann["token"]:
                raise DriveError(
                    f"records {other!r} and {ann['token']!r}: two annotations of instance {ann['instance_token']!r} "
                    f"in sample {sample['token']!r}",
                    file=file,
                )
            instance = tables.get("instance", str(ann["instance_token"]), f"sample_annotation {ann['token']!r}")
            category = str(
                tables.get("category", str(instance["category_token"]), f"instance {instance['token']!r}")["name"]
            )
            label = nuscenes_label(category)
            if label is None and category != BIKE_RACK:
                out.skip(f"annotations of category {category} (not one of our labels)")
                continue
            box = _transform(tables, "sample_annotation", ann)
            width, length, height = _vector(ann, "size", 3, file)  # nuScenes order: w, l, h
            local = to_ego.compose(box)
            if label is None:
                regions.append(GroundTruthRegion(category, local.translation, (length, width, height), local.yaw()))
                continue
            v_global = _global_velocity(tables, ann)
            if v_global is None:
                unknown_velocity += 1
                velocity = (math.nan, math.nan)
            else:
                v = r_ego.T @ np.array([v_global[0], v_global[1], 0.0])
                velocity = (float(v[0]), float(v[1]))
            track = track_ids.setdefault(str(ann["instance_token"]), len(track_ids))
            objects.append(
                GroundTruthObject(
                    track,
                    label,
                    local.translation,
                    (length, width, height),
                    local.yaw(),
                    velocity,
                    category=category,
                    attribute=_attribute(tables, ann, unresolved),
                    num_lidar_pts=_num_points(tables, ann, "num_lidar_pts"),
                    num_radar_pts=_num_points(tables, ann, "num_radar_pts"),
                )
            )
        objects.sort(key=lambda o: o.track_id)
        gts.append(GroundTruth(int(sample["timestamp"]) * _US, tuple(objects), tuple(regions)))
    for why, n in sorted(unresolved.items()):
        out.note(f"{n} ground-truth objects have an unknown attribute ({why})")
    if unknown_velocity:
        out.note(
            f"{unknown_velocity} ground-truth objects have an unknown velocity (NaN): "
            "their instance has no neighbouring annotation within the devkit's time limit"
        )
    return gts


# --------------------------------------------------------------------------------------------------
# sensor files
# --------------------------------------------------------------------------------------------------


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise DriveError(f"cannot read: {exc.strerror or exc}", file=str(path)) from exc


def _lidar(d: _Data, seq: int) -> PointCloudSample:
    raw = _read(d.path)
    if not raw:  # a sweep always has points: a 0-byte file was cut short (as KITTI's read_points says)
        raise DriveError("empty file (0 bytes): a lidar sweep has points (a file cut short?)", file=str(d.path))
    if len(raw) % 20:
        raise DriveError(f"{len(raw)} bytes is not a whole number of 5 x float32 points", file=str(d.path))
    pts = np.frombuffer(raw, dtype="<f4").reshape(-1, 5)[:, :4]
    return PointCloudSample(d.sensor, d.t_ns, d.sensor, pts, ("x", "y", "z", "intensity"), seq)


def _radar(d: _Data, seq: int, out: DriveOutput, filtered: bool) -> PointCloudSample:
    try:
        _, rec = parse_pcd(_read(d.path))
    except ValueError as exc:
        raise DriveError(str(exc), file=str(d.path)) from exc
    names = set(rec.dtype.names or ())
    missing = [n for n in ("x", "y", "z", "vx_comp", "vy_comp", "rcs") if n not in names or rec.dtype[n].shape]
    if missing:
        raise DriveError(f"radar PCD lacks scalar field(s) {', '.join(missing)}", file=str(d.path))
    if filtered:
        keep = np.ones(len(rec), dtype=bool)
        for key, allowed in _RADAR_FILTERS.items():
            field = _RADAR_FIELD[key]
            if field in names:
                keep &= np.isin(rec[field], sorted(allowed))
        out.skip(f"{d.sensor}: radar points removed by the devkit's default filters", int(np.count_nonzero(~keep)))
        rec = rec[keep]
    xyz = np.column_stack([rec["x"], rec["y"], rec["z"]]).astype(np.float32)
    vr = radial_velocity(xyz, rec["vx_comp"], rec["vy_comp"])
    points = np.column_stack([xyz, vr, rec["rcs"].astype(np.float32)])
    return PointCloudSample(d.sensor, d.t_ns, d.sensor, points, ("x", "y", "z", "radial_velocity", "rcs"), seq)


def _camera(d: _Data, seq: int, size: tuple[int, int]) -> ImageSample:
    data = _read(d.path)
    if image_format(data) != "jpeg":
        raise DriveError("not a JPEG file", file=str(d.path))
    found = image_size(data)
    if found is None:
        raise DriveError("not a readable JPEG: no frame header (truncated?)", file=str(d.path))
    if found != size:  # the drive's intrinsics are for the size sample_data declares
        raise DriveError(
            f"image is {found[0]}x{found[1]} but the camera's sample_data width x height is {size[0]}x{size[1]}",
            file=str(d.path),
        )
    if (problem := truncation_problem(data)) is not None:  # a whole header, its body cut short
        raise DriveError(problem, file=str(d.path))
    return ImageSample(d.sensor, d.t_ns, d.sensor, data, "jpeg", seq)


# --------------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------------


def import_nuscenes(
    dataroot: str | os.PathLike[str],
    scene: str,
    output: str | os.PathLike[str],
    *,
    version: str = "v1.0-mini",
    channels: Sequence[str] | None = None,
    radar_filters: bool = True,
    overwrite: bool = False,
    on_progress: Progress | None = None,
) -> ImportSummary:
    """Import the nuScenes scene named ``scene`` into the drive ``output`` (see the module docs).

    ``channels`` restricts the sensors (nuScenes channel names, any case). ``radar_filters`` applies
    the devkit's default radar point filters. Raises :class:`DriveError` naming the table file for
    missing or malformed tables and an unknown scene (listing the available ones).
    """
    root = Path(dataroot)
    tables = _Tables(root, version)
    scene_rec = _find_scene(tables, scene)
    samples = sorted(
        (s for s in tables.rows["sample"] if s["scene_token"] == scene_rec["token"]), key=lambda s: int(s["timestamp"])
    )
    if not samples:
        raise DriveError(f"scene {scene!r} has no samples", file=tables.file("sample"))
    every, sensors = _scene_data(tables, root, {str(s["token"]) for s in samples})
    if not every:
        raise DriveError(f"scene {scene!r} has no sample_data", file=tables.file("sample_data"))
    data = every
    if channels is not None:
        wanted = {c.lower() for c in channels}
        unknown = sorted(wanted - sensors.keys())
        if unknown:
            raise DriveError(
                f"no channel {', '.join(c.upper() for c in unknown)} in scene {scene!r} "
                f"(has {', '.join(sorted(n.upper() for n in sensors))})",
                file=tables.file("sensor"),
            )
        sensors = {n: v for n, v in sensors.items() if n in wanted}
        data = [d for d in every if d.sensor in wanted]
    if not any(d.path.is_file() for d in data):
        raise DriveError(
            f"none of the {len(data)} sensor files of scene {scene!r} is there (the first: "
            f"{data[0].path.relative_to(root)}): expected the dataset root holding samples/ and sweeps/",
            file=str(root),
        )
    notes: list[str] = []
    rig = _rig(tables, sensors, {str(d.rec["token"]) for d in data if d.path.is_file()}, notes)
    ego = _ego(tables, every)
    log_rec = tables.by_token["log"].get(str(scene_rec.get("log_token", "")), {})
    metadata = {
        "source": "nuscenes",
        "nuscenes.version": version,
        "nuscenes.scene": str(scene_rec["name"]),
        "nuscenes.scene_token": str(scene_rec["token"]),
        "nuscenes.description": str(scene_rec.get("description", "")),
        **{f"nuscenes.{k}": str(log_rec[k]) for k in ("location", "vehicle", "logfile") if k in log_rec},
    }
    with DriveOutput(output, rig, source=f"nuscenes {scene}", metadata=metadata, overwrite=overwrite) as out:
        for note in notes:
            out.note(note)
        gts = _ground_truth(tables, samples, every, out)
        sizes = {s.name: (s.calibration.width, s.calibration.height) for s in rig if s.calibration is not None}
        _write(out, data, ego, gts, sizes, radar_filters, on_progress)
    return out.summary


def _write(
    out: DriveOutput,
    data: Sequence[_Data],
    ego: Sequence[EgoPose],
    gts: Sequence[GroundTruth],
    sizes: Mapping[str, tuple[int, int]],
    radar_filters: bool,
    on_progress: Progress | None,
) -> None:
    # One time-ordered stream: ego poses, then ground truth, then sensor data at equal times.
    events: list[tuple[int, int, int]] = [(p.t_ns, 0, i) for i, p in enumerate(ego)]
    events += [(g.t_ns, 1, i) for i, g in enumerate(gts)]
    events += [(d.t_ns, 2, i) for i, d in enumerate(data)]
    events.sort()
    seq: Counter[str] = Counter()
    missing: Counter[str] = Counter()
    for done, (_, what, i) in enumerate(events, start=1):
        if what == 0:
            out.write_ego_pose(ego[i])
        elif what == 1:
            out.write_ground_truth(gts[i])
        else:
            d = data[i]
            if not d.path.is_file():
                missing[f"{d.sensor}: {'keyframe' if d.keyframe else 'sweep'} files missing"] += 1
                continue
            n = seq[d.sensor]
            seq[d.sensor] += 1
            if d.kind == SensorKind.LIDAR:
                out.write(_lidar(d, n))
            elif d.kind == SensorKind.RADAR:
                out.write(_radar(d, n, out, radar_filters))
            else:
                out.write(_camera(d, n, sizes[d.sensor]))
        if on_progress is not None:
            on_progress(done / len(events))
    for reason, n in missing.items():
        out.skip(reason, n)
