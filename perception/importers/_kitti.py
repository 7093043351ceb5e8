"""Import a KITTI-format dataset (object or tracking layout, with View-of-Delft's radar) into a drive.

Layouts (``ROOT`` may be the split directory itself or the dataset root holding ``training/``):

* **object** (KITTI 3D object, unrelated frames): ``velodyne/<frame>.bin``, ``image_2/<frame>.png``,
  ``calib/<frame>.txt``, ``label_2/<frame>.txt``;
* **tracking** (sequences): ``velodyne/<seq>/<frame>.bin``, ``image_02/<seq>/<frame>.png``,
  ``calib/<seq>.txt``, ``label_02/<seq>.txt`` (frame and track id first), ``oxts/<seq>.txt``;
* **View-of-Delft**: a KITTI object tree per sensor, ``ROOT/lidar/<split>/...`` (lidar, camera
  ``.jpg``, labels) and ``ROOT/radar/<split>/velodyne/<frame>.bin`` with its own ``calib`` (whose
  ``Tr_velo_to_cam`` is radar -> camera).

``velodyne`` defines the frames; ``image_2``/``image_3``/``label_2`` (``image_02``...) are optional
folders, but when a folder is there every frame needs its file (a missing one is an error naming
it). File formats: :mod:`perception.importers._kitti_format`.

Sensors (drive name <- KITTI): ``lidar_top`` <- ``velodyne`` (x, y, z, reflectance as intensity),
``cam_front`` <- ``image_2`` (the left colour camera, rectified: K = ``P2[:, :3]``, no distortion;
its frame is camera 2's rectified optical frame, i.e. ``R0_rect`` and P2's baseline applied),
``cam_front_right`` <- ``image_3`` (the right colour camera, likewise with ``P3``),
``radar_front`` <- View-of-Delft ``radar`` (x, y, z, ``v_r_compensated`` as the over-ground radial
velocity, RCS; points of earlier scans, ``time != 0``, are dropped and counted).

Frames:

* ``base_link`` is the GPS/IMU (OXTS) frame moved down to the road under it (:data:`KITTI_IMU_HEIGHT_M`)
  — x forward, y left, z up, on the ground plane ``z = 0`` fusion places camera objects on — when every
  calib has ``Tr_imu_to_velo`` (all of KITTI); otherwise (View-of-Delft) the lidar frame.
* Ground truth: the box's bottom-face centre, ``rotation_y`` about the camera's y axis, in the
  rectified camera frame (KITTI devkit) -> centre, size ``(l, w, h)`` and yaw in ``base_link``, by
  the frame's own calibration. View-of-Delft defines its ``rotation`` about the lidar's -z axis
  (its devkit: lidar yaw = ``-(rotation + pi/2)``, box upright in the lidar frame), and the boxes
  are converted that way for that layout. Classes map by :data:`KITTI_LABELS`; ``DontCare``,
  ``Misc`` and other types are skipped and counted. KITTI annotates objects inside the camera
  image only.

Time (KITTI gives none): tracking frame ``i`` is at ``i x 100 ms`` (10 Hz); object frame ``n``
(its file number) at ``n x 10 s`` (:data:`OBJECT_FRAME_GAP_NS`). Object frames are unrelated, so each
is its own one-sample segment: 10 s is farther apart than any sync window, staleness limit,
ground-truth tolerance and the tracker's longest gap (fusion's ``track_max_gap_s``, after which every
track is dropped), so nothing of one frame is used with another. The camera, lidar and radar of a frame share its
time (KITTI triggers the cameras from the lidar; View-of-Delft syncs and motion-compensates radar
and camera to the lidar).

Ego motion (tracking with ``oxts``): ``map`` is east-north-up with its origin at the first frame's
``base_link`` (the devkit's Mercator projection, scale from the first latitude), the IMU's pose ``R =
Rz(yaw) Ry(pitch) Rx(roll)``; velocity ``(vf, vl, vu)`` and yaw rate ``wu`` as OXTS measures them (the
IMU's velocity: ``base_link``'s differs by the roll and pitch rates times the IMU's height). Ground-truth
velocity then comes from each track's map position in the neighbouring frames; without poses it is
unknown (NaN).

One drive holds one rig. Object frames were calibrated per recording day, so each sensor's rig entry
is its most common calibration. A frame whose camera (or radar) calibration differs keeps its lidar
and ground truth (computed with its own calibration) and its image (radar scan) is skipped and
counted — import such frames into their own drive with ``frames=``; a sweep from another lidar mount
is re-expressed in the rig's lidar frame (a rigid transform, exact up to float32 rounding).
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from perception._imageio import image_format, image_size, truncation_problem
from perception.drives import topic_for
from perception.errors import DriveError
from perception.importers._kitti_format import Calib, KittiLabel, parse_calib, parse_labels, parse_oxts, read_points
from perception.importers._output import DriveOutput, ImportSummary
from perception.types import (
    CameraCalibration,
    EgoPose,
    GroundTruth,
    GroundTruthObject,
    ImageSample,
    PointCloudSample,
    SensorKind,
    SensorSpec,
    Transform,
)

__all__ = [
    "KITTI_IMU_HEIGHT_M",
    "KITTI_LABELS",
    "OBJECT_FRAME_GAP_NS",
    "TRACKING_PERIOD_NS",
    "format_frames",
    "import_kitti",
    "kitti_label",
    "parse_frames",
]

log = logging.getLogger(__name__)

F64 = npt.NDArray[np.float64]
Progress = Callable[[float], None]

#: KITTI (and View-of-Delft) object types -> our label; ``None`` = skipped (and counted). Types not
#: listed are skipped too. Van is a car as in nuScenes' ``vehicle.car``; Tram goes with the large
#: vehicles as nuScenes' bus does; a sitting person is a pedestrian; KITTI's Cyclist box holds rider
#: and bicycle. View-of-Delft's ``rider`` is the person on a Cyclist box (counting it would count the
#: cyclist twice), its parked ``bicycle``, ``moped_scooter``, ``motor``, ``bicycle_rack``,
#: ``human_depiction``, ``ride_other``, ``ride_uncertain`` and ``vehicle_other`` are not ours.
KITTI_LABELS: Mapping[str, str | None] = {
    "Car": "car",
    "Van": "car",
    "Truck": "truck",
    "Tram": "truck",
    "Pedestrian": "pedestrian",
    "Person_sitting": "pedestrian",
    "Cyclist": "cyclist",
    "Misc": None,
    "DontCare": None,
    "truck": "truck",  # View-of-Delft spells it lowercase
}

#: Object frames are unrelated: frame ``n`` is placed at ``n`` times this, farther apart than any sync
#: window, staleness limit, ground-truth tolerance and the tracker's longest gap (``track_max_gap_s``,
#: 2 s), so nothing of one frame is used with another (at 1 s the tracker linked unrelated scenes).
OBJECT_FRAME_GAP_NS = 10_000_000_000
TRACKING_PERIOD_NS = 100_000_000
#: Height of KITTI's GPS/IMU (OXTS RT 3003) above the road, m (the recording platform's sensor setup: Geiger
#: et al., "Vision meets Robotics: The KITTI Dataset", IJRR 2013, Fig. 3; Velodyne 1.73 m, cameras 1.65 m).
#: ``base_link`` is the IMU frame this far down, on the road: fusion takes ``z = 0`` in ``base_link`` for
#: the ground (camera objects' ground-plane depth, the camera-guided step's ground), as on every other drive.
KITTI_IMU_HEIGHT_M = 0.93
_BASE_IMU: F64 = np.eye(4)
_BASE_IMU[2, 3] = KITTI_IMU_HEIGHT_M  # base_link <- imu
_BASE_IMU.setflags(write=False)
_EARTH_RADIUS_M = 6378137.0  # the raw-data devkit's latlonToMercator
#: Cameras: drive name -> (object-layout folder, tracking-layout folder, projection matrix).
_CAMERAS: Mapping[str, tuple[str, str, str]] = {
    "cam_front": ("image_2", "image_02", "P2"),  # left colour camera
    "cam_front_right": ("image_3", "image_03", "P3"),  # right colour camera
}
_LABEL_DIRS = {False: "label_2", True: "label_02"}
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
_LIDAR, _CAMERA, _RADAR = "lidar_top", "cam_front", "radar_front"
_SENSORS = (_LIDAR, _RADAR, *_CAMERAS)  # rig order

Convention = Literal["camera", "lidar"]


def kitti_label(kind: str) -> str | None:
    """Our label of a KITTI object type, or ``None`` if it is not one of ours."""
    return KITTI_LABELS.get(kind)


def parse_frames(spec: str) -> frozenset[int]:
    """``"0-9,12,20-22"`` -> the frame numbers (ranges inclusive). Raises ``ValueError``."""
    out: set[int] = set()
    for part in (p.strip() for p in spec.split(",")):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if m is None:
            raise ValueError(f"expected frame numbers like 0-9,12, got {part!r}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ValueError(f"range {part!r} ends before it starts")
        out.update(range(lo, hi + 1))
    return frozenset(out)


def format_frames(numbers: Iterable[int]) -> str:
    """The inverse of :func:`parse_frames`: ``[0, 1, 2, 7]`` -> ``"0-2,7"``."""
    parts: list[str] = []
    run: list[int] = []
    for n in sorted(set(numbers)):
        if run and n != run[-1] + 1:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(n)
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


# --------------------------------------------------------------------------------------------------
# layout
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    lidar: Path  # the tree with velodyne/ calib/ (image_2/ label_2/)
    radar: Path | None  # View-of-Delft's radar tree
    tracking: bool
    vod: bool

    @property
    def name(self) -> str:
        return "view-of-delft" if self.vod else ("tracking" if self.tracking else "object")


def _tree(path: Path, split: str) -> Path | None:
    for cand in (path, path / split):
        if (cand / "velodyne").is_dir():
            return cand
    return None


def _layout(root: Path, split: str) -> _Layout:
    if not root.is_dir():
        raise DriveError("KITTI root not found (or not a directory)", file=str(root))
    # ROOT pointing inside a View-of-Delft tree (ROOT/lidar or ROOT/lidar/<split>) is that dataset too
    for up in (root, root.parent):
        if up.name == "lidar" and (up.parent / "radar").is_dir() and _tree(up, split) is not None:
            root = up.parent
            break
    vod_lidar = _tree(root / "lidar", split) if (root / "lidar").is_dir() else None
    lidar = vod_lidar or _tree(root, split)
    if lidar is None:
        raise DriveError(
            f"no KITTI tree: expected velodyne/ in it, in {split}/, or lidar/{split}/ (View-of-Delft)", file=str(root)
        )
    radar = None
    if vod_lidar is not None and (root / "radar").is_dir():
        radar = _tree(root / "radar", split)
        if radar is None:
            raise DriveError(f"radar tree has no velodyne/ (nor {split}/velodyne/)", file=str(root / "radar"))
    velodyne = lidar / "velodyne"
    sequences = _sequences(velodyne)
    tracking = bool(sequences)
    if tracking and any(p.is_file() for p in velodyne.glob("*.bin")):
        raise DriveError(
            f"both frame files (*.bin: object layout) and sequence folders ({', '.join(sequences)}: tracking layout)",
            file=str(velodyne),
        )
    if tracking and radar is not None:
        raise DriveError("a radar tree is only read with the object layout", file=str(root / "radar"))
    return _Layout(lidar, radar, tracking, vod_lidar is not None)


def _sequences(velodyne: Path) -> list[str]:
    """The tracking sequences: the folders in ``velodyne/`` (not hidden ones such as ``.ipynb_checkpoints``)."""
    return sorted(p.name for p in velodyne.iterdir() if p.is_dir() and not p.name.startswith("."))


def _number(path: Path) -> int:
    if not path.stem.isdigit():
        raise DriveError("frame files must be named by their number (e.g. 000123.bin)", file=str(path))
    return int(path.stem)


def _bins(directory: Path) -> list[tuple[int, Path]]:
    files = sorted((_number(p), p) for p in directory.glob("*.bin") if p.is_file())
    if not files:
        raise DriveError("no .bin point clouds", file=str(directory))
    return files


def _image_file(directory: Path, stem: str) -> Path:
    for suffix in _IMAGE_SUFFIXES:
        p = directory / f"{stem}{suffix}"
        if p.is_file():
            return p
    raise DriveError(f"image of frame {stem} is missing (no {stem}.png or {stem}.jpg)", file=str(directory))


def _required(path: Path, what: str) -> Path:
    if not path.is_file():
        raise DriveError(f"{what} is missing", file=str(path))
    return path


@dataclass
class _Frame:
    number: int
    stem: str
    t_ns: int
    lidar: Path
    calib: Path
    images: dict[str, Path] = field(default_factory=dict)  # camera -> image file
    labels: Path | None = None  # object layout; tracking labels are one file per sequence
    radar: Path | None = None
    radar_calib: Path | None = None


@dataclass
class _Plan:
    layout: _Layout
    frames: list[_Frame]
    sequence: str | None = None
    labels: Path | None = None  # tracking: label_02/<seq>.txt
    oxts: Path | None = None
    cameras: tuple[str, ...] = ()  # the cameras whose folder exists
    has_labels: bool = False
    notes: list[str] = field(default_factory=list)


def _select(frames: list[_Frame], wanted: frozenset[int] | None, where: Path) -> list[_Frame]:
    if wanted is None:
        return frames
    have = {f.number for f in frames}
    unknown = sorted(wanted - have)
    if unknown:
        shown = ", ".join(str(n) for n in unknown[:10]) + (" ..." if len(unknown) > 10 else "")
        raise DriveError(
            f"no frame {shown} (frames here: {min(have)}..{max(have)}, {len(have)} of them)", file=str(where)
        )
    return [f for f in frames if f.number in wanted]


def _plan(root: Path, split: str, sequence: str | None, wanted: frozenset[int] | None) -> _Plan:
    layout = _layout(root, split)
    tree = layout.lidar
    image_dirs = {cam: tree / dirs[int(layout.tracking)] for cam, dirs in _CAMERAS.items()}
    image_dirs = {cam: d for cam, d in image_dirs.items() if d.is_dir()}
    label_dir = tree / _LABEL_DIRS[layout.tracking]
    plan = _Plan(layout, [], cameras=tuple(image_dirs), has_labels=label_dir.is_dir())
    if layout.tracking:
        seqs = _sequences(tree / "velodyne")
        if sequence is None:
            if len(seqs) > 1:
                raise DriveError(
                    f"tracking layout with {len(seqs)} sequences: choose one with --sequence ({', '.join(seqs)})",
                    file=str(tree / "velodyne"),
                )
            sequence = seqs[0]
        if sequence not in seqs:
            raise DriveError(f"no sequence {sequence!r} (has: {', '.join(seqs)})", file=str(tree / "velodyne"))
        plan.sequence = sequence
        calib = _required(tree / "calib" / f"{sequence}.txt", "calibration of the sequence")
        plan.frames = _select(
            [_Frame(n, p.stem, n * TRACKING_PERIOD_NS, p, calib) for n, p in _bins(tree / "velodyne" / sequence)],
            wanted,
            tree / "velodyne" / sequence,
        )
        for frame in plan.frames:
            frame.images = {cam: _image_file(d / sequence, frame.stem) for cam, d in image_dirs.items()}
        if plan.has_labels:
            plan.labels = _required(label_dir / f"{sequence}.txt", "labels of the sequence")
        oxts = tree / "oxts" / f"{sequence}.txt"
        plan.oxts = oxts if oxts.is_file() else None
        if plan.oxts is None:
            plan.notes.append(f"no oxts/{sequence}.txt: no ego poses, ground-truth velocity unknown (NaN)")
        return plan
    if sequence is not None:
        raise DriveError(
            f"no sequence {sequence!r}: an object layout (velodyne/<frame>.bin) has no sequences "
            "(pick frames with --frames)",
            file=str(tree / "velodyne"),
        )
    for n, path in _bins(tree / "velodyne"):
        stem = path.stem
        frame = _Frame(n, stem, n * OBJECT_FRAME_GAP_NS, path, tree / "calib" / f"{stem}.txt")
        plan.frames.append(frame)
    plan.frames = _select(plan.frames, wanted, tree / "velodyne")
    for frame in plan.frames:
        _required(frame.calib, f"calibration of frame {frame.stem}")
        frame.images = {cam: _image_file(d, frame.stem) for cam, d in image_dirs.items()}
        if plan.has_labels:
            frame.labels = _required(label_dir / f"{frame.stem}.txt", f"labels of frame {frame.stem}")
        if layout.radar is not None:
            frame.radar = _required(
                layout.radar / "velodyne" / f"{frame.stem}.bin", f"radar scan of frame {frame.stem}"
            )
            frame.radar_calib = _required(
                layout.radar / "calib" / f"{frame.stem}.txt", f"radar calibration of frame {frame.stem}"
            )
    plan.notes.append(
        f"object layout: unrelated frames, each its own segment, placed at frame number x "
        f"{OBJECT_FRAME_GAP_NS / 1e9:g} s; ground-truth velocity unknown (NaN)"
    )
    return plan


# --------------------------------------------------------------------------------------------------
# geometry
# --------------------------------------------------------------------------------------------------


def _transform(m: F64) -> Transform:
    return Transform.from_matrix(m)


def _image_size(path: Path) -> tuple[int, int]:
    """``(width, height)`` of an image file, from its header (:func:`perception._imageio.image_size`); a file
    cut short (:func:`perception._imageio.truncation_problem`) is refused here, before anything is written."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DriveError(f"not a readable PNG or JPEG image: {exc.strerror or exc}", file=str(path)) from exc
    size = image_size(data)
    if size is None:
        raise DriveError("not a readable PNG or JPEG image: no PNG or JPEG header", file=str(path))
    if (problem := truncation_problem(data)) is not None:
        raise DriveError(problem, file=str(path))
    return size


@dataclass(frozen=True)
class _Geometry:
    """One frame's calibration: 4x4 transforms into ``base_link`` and the sensor specs it implies."""

    base_velo: F64  # base_link <- velodyne
    base_rect: F64  # base_link <- rectified camera 0 (the labels' frame)
    velo_rect: F64  # velodyne <- rectified camera 0
    specs: Mapping[str, SensorSpec]


def _geometry(
    frame: _Frame, calibs: dict[Path, Calib], imu_base: bool, sizes: dict[Path, tuple[int, int]], rate: float
) -> _Geometry:
    cal = _calib(frame.calib, calibs)
    rect_velo = cal.rigid("R0_rect") @ cal.rigid("Tr_velo_to_cam")
    base_velo: F64 = _BASE_IMU @ np.linalg.inv(cal.rigid("Tr_imu_to_velo")) if imu_base else np.eye(4)
    velo_rect = np.linalg.inv(rect_velo)
    specs = {
        _LIDAR: SensorSpec(
            _LIDAR, SensorKind.LIDAR, _LIDAR, _transform(base_velo), topic_for(SensorKind.LIDAR, _LIDAR), None, rate
        )
    }
    for cam, image in frame.images.items():
        specs[cam] = _camera_spec(cam, cal, image, base_velo @ velo_rect, sizes, rate)
    if frame.radar_calib is not None:
        rcal = _calib(frame.radar_calib, calibs)
        rect_radar = rcal.rigid("R0_rect") @ rcal.rigid("Tr_velo_to_cam")
        specs[_RADAR] = SensorSpec(
            _RADAR,
            SensorKind.RADAR,
            _RADAR,
            _transform(base_velo @ velo_rect @ rect_radar),
            topic_for(SensorKind.RADAR, _RADAR),
            None,
            rate,
        )
    return _Geometry(base_velo, base_velo @ velo_rect, velo_rect, specs)


def _camera_spec(
    name: str, cal: Calib, image: Path, base_rect: F64, sizes: dict[Path, tuple[int, int]], rate: float
) -> SensorSpec:
    key = _CAMERAS[name][2]
    p = cal.projection(key)
    k = p[:, :3]
    size = sizes.get(image)
    if size is None:
        size = sizes[image] = _image_size(image)
    calibration = CameraCalibration(size[0], size[1], tuple(float(v) for v in k.ravel()), (0.0, 0.0, 0.0, 0.0, 0.0))
    if (problem := calibration.problem()) is not None:  # the one camera-matrix check (the session's, the fuser's)
        raise DriveError(f"{key} is not a rectified pinhole projection K [I | t]: {problem}", file=str(cal.path))
    cam_rect = np.eye(4)
    cam_rect[:3, 3] = np.linalg.solve(k, p[:, 3])  # this camera's offset from camera 0 (rectified)
    return SensorSpec(
        name,
        SensorKind.CAMERA,
        name,
        _transform(base_rect @ np.linalg.inv(cam_rect)),
        topic_for(SensorKind.CAMERA, name),
        calibration,
        rate,
    )


def _rig(frames: Sequence[_Frame], geos: Sequence[_Geometry]) -> tuple[list[SensorSpec], dict[str, int], list[str]]:
    """Per sensor the most common spec (ties: the earliest frame's), the frame number it came from,
    and for sensors with several calibrations a note listing the frames of each (for ``--frames``)."""
    rig: list[SensorSpec] = []
    source: dict[str, int] = {}
    notes: list[str] = []
    for name in _SENSORS:
        specs = [(g.specs[name], f.number) for f, g in zip(frames, geos, strict=True) if name in g.specs]
        if not specs:
            continue
        groups: dict[SensorSpec, list[int]] = {}
        for s, n in specs:
            groups.setdefault(s, []).append(n)
        best = max(len(v) for v in groups.values())
        spec = next(s for s, v in groups.items() if len(v) == best)  # dicts keep first-seen order
        rig.append(spec)
        source[name] = groups[spec][0]
        if len(groups) > 1 and name != _LIDAR:
            shown = "; ".join(f"frames {format_frames(v)}" for v in list(groups.values())[:10])
            more = f"; ... ({len(groups) - 10} more)" if len(groups) > 10 else ""
            notes.append(f"{name}: {len(groups)} different calibrations among the frames: {shown}{more}")
    return rig, source, notes


def _box(label: KittiLabel, geo: _Geometry, convention: Convention) -> tuple[tuple[float, float, float], float]:
    """Centre in ``base_link`` and yaw of a label's box."""
    h = label.size_hwl[0]
    loc = np.asarray(label.location, dtype=np.float64)
    ry = label.rotation_y
    if convention == "camera":  # KITTI devkit: box upright along the camera's -y, ry about +y
        m = geo.base_rect
        centre = m[:3, :3] @ (loc + np.array([0.0, -h / 2, 0.0])) + m[:3, 3]
        heading = m[:3, :3] @ np.array([math.cos(ry), 0.0, -math.sin(ry)])
    else:  # View-of-Delft devkit: box upright in the lidar frame, yaw = -(rotation + pi/2)
        bottom = geo.velo_rect[:3, :3] @ loc + geo.velo_rect[:3, 3]
        yaw_velo = -(ry + math.pi / 2)
        m = geo.base_velo
        centre = m[:3, :3] @ (bottom + np.array([0.0, 0.0, h / 2])) + m[:3, 3]
        heading = m[:3, :3] @ np.array([math.cos(yaw_velo), math.sin(yaw_velo), 0.0])
    return (float(centre[0]), float(centre[1]), float(centre[2])), math.atan2(float(heading[1]), float(heading[0]))


# --------------------------------------------------------------------------------------------------
# ego motion (oxts)
# --------------------------------------------------------------------------------------------------


def _rotation(roll: float, pitch: float, yaw: float) -> F64:
    cr, sr, cp, sp, cy, sy = (
        math.cos(roll),
        math.sin(roll),
        math.cos(pitch),
        math.sin(pitch),
        math.cos(yaw),
        math.sin(yaw),
    )
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]], dtype=np.float64)
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]], dtype=np.float64)
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]], dtype=np.float64)
    out: F64 = rz @ ry @ rx
    return out


def oxts_poses(oxts: F64) -> list[F64]:
    """``map <- base_link`` 4x4 poses of OXTS rows (east-north-up, origin at the first row's ``base_link``):
    the IMU's pose, ``base_link`` :data:`KITTI_IMU_HEIGHT_M` below it."""
    scale = math.cos(math.radians(float(oxts[0, 0])))
    imu_base = np.linalg.inv(_BASE_IMU)
    out: list[F64] = []
    origin: F64 | None = None
    for row in oxts:
        lat, lon, alt, roll, pitch, yaw = (float(v) for v in row[:6])
        m = np.eye(4)
        m[:3, :3] = _rotation(roll, pitch, yaw)
        m[:3, 3] = (
            scale * lon * math.pi * _EARTH_RADIUS_M / 180.0,
            scale * _EARTH_RADIUS_M * math.log(math.tan((90.0 + lat) * math.pi / 360.0)),
            alt,
        )
        m = m @ imu_base
        if origin is None:
            origin = m[:3, 3].copy()
        m[:3, 3] -= origin
        out.append(m)
    return out


# --------------------------------------------------------------------------------------------------
# ground truth
# --------------------------------------------------------------------------------------------------


@dataclass
class _Object:
    track: int
    label: str
    centre: tuple[float, float, float]
    size: tuple[float, float, float]
    yaw: float


def _objects(
    labels: Iterable[KittiLabel],
    geo: _Geometry,
    convention: Convention,
    out: DriveOutput,
    file: Path,
    next_track: Callable[[KittiLabel], int],
) -> list[_Object]:
    objects: list[_Object] = []
    seen: dict[int, int] = {}
    for lab in labels:
        label = kitti_label(lab.type)
        if lab.type == "DontCare":
            out.skip("annotations of type DontCare (unlabelled regions, not objects)")
            continue
        if label is None:
            out.skip(f"annotations of type {lab.type} (not one of our labels)")
            continue
        if not lab.has_box:
            out.skip(f"annotations of type {lab.type} without a 3D box (size <= 0 or location -1000)")
            continue
        track = next_track(lab)
        if track < 0:
            raise DriveError(f"line {lab.line}: {lab.type} has no track id ({track})", file=str(file))
        if track in seen:
            raise DriveError(
                f"line {lab.line}: track {track} appears twice in frame (also line {seen[track]})", file=str(file)
            )
        seen[track] = lab.line
        h, w, length = lab.size_hwl
        centre, yaw = _box(lab, geo, convention)
        objects.append(_Object(track, label, centre, (length, w, h), yaw))
    return objects


def _velocities(
    per_frame: Sequence[list[_Object]], poses: Sequence[F64] | None, numbers: Sequence[int]
) -> list[list[tuple[float, float]]]:
    """Per object the over-ground (vx, vy) in ``base_link`` from its map positions in the neighbouring
    frames (central difference, one-sided at a track's ends); NaN without poses or neighbours."""
    nan = (math.nan, math.nan)
    if poses is None:
        return [[nan] * len(objs) for objs in per_frame]
    world: dict[tuple[int, int], F64] = {}  # (frame index, track) -> map position
    for i, objs in enumerate(per_frame):
        for o in objs:
            world[(i, o.track)] = poses[i][:3, :3] @ np.asarray(o.centre) + poses[i][:3, 3]
    out: list[list[tuple[float, float]]] = []
    for i, objs in enumerate(per_frame):
        row: list[tuple[float, float]] = []
        for o in objs:
            lo = i - 1 if (i - 1, o.track) in world and numbers[i] - numbers[i - 1] == 1 else i
            hi = i + 1 if (i + 1, o.track) in world and numbers[i + 1] - numbers[i] == 1 else i
            if lo == hi:
                row.append(nan)
                continue
            dt = (numbers[hi] - numbers[lo]) * TRACKING_PERIOD_NS * 1e-9
            v_map = (world[(hi, o.track)] - world[(lo, o.track)]) / dt
            v = poses[i][:3, :3].T @ v_map
            row.append((float(v[0]), float(v[1])))
        out.append(row)
    return out


# --------------------------------------------------------------------------------------------------
# sensor files
# --------------------------------------------------------------------------------------------------


def _finite(points: npt.NDArray[np.float32], sensor: str, out: DriveOutput) -> npt.NDArray[np.float32]:
    keep = np.isfinite(points[:, :3]).all(axis=1)
    out.skip(f"{sensor}: points with non-finite x/y/z (dropped)", int(np.count_nonzero(~keep)))
    return points if keep.all() else points[keep]


def _lidar(frame: _Frame, seq: int, out: DriveOutput, move: Transform | None = None) -> PointCloudSample:
    points = _finite(read_points(frame.lidar, 4, "lidar"), _LIDAR, out)
    if move is not None:
        points = np.column_stack([move.apply(points[:, :3]), points[:, 3]]).astype(np.float32)
    return PointCloudSample(_LIDAR, frame.t_ns, _LIDAR, points, ("x", "y", "z", "intensity"), seq)


def _radar(path: Path, t_ns: int, seq: int, out: DriveOutput) -> PointCloudSample:
    raw = read_points(path, 7, "View-of-Delft radar", empty_ok=True)  # x, y, z, RCS, v_r, v_r_compensated, time
    current = raw[:, 6] == 0
    out.skip(f"{_RADAR}: points of earlier scans (time != 0, dropped)", int(np.count_nonzero(~current)))
    pts = _finite(raw[current], _RADAR, out)
    points = np.column_stack([pts[:, 0:3], pts[:, 5], pts[:, 3]])
    return PointCloudSample(_RADAR, t_ns, _RADAR, points, ("x", "y", "z", "radial_velocity", "rcs"), seq)


def _camera(name: str, path: Path, t_ns: int, seq: int) -> ImageSample:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DriveError(f"cannot read: {exc.strerror or exc}", file=str(path)) from exc
    fmt = image_format(data)
    if fmt is None:
        raise DriveError("not a PNG or JPEG file", file=str(path))
    return ImageSample(name, t_ns, name, data, fmt, seq)


# --------------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------------


def import_kitti(
    root: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    split: str = "training",
    sequence: str | None = None,
    frames: Iterable[int] | None = None,
    overwrite: bool = False,
    on_progress: Progress | None = None,
) -> ImportSummary:
    """Import a KITTI-format tree under ``root`` into the drive ``output`` (see the module docs).

    ``split`` names the subdirectory tried under ``root`` (and under View-of-Delft's ``lidar/`` and
    ``radar/``); ``sequence`` picks a tracking sequence (required when there are several);
    ``frames`` restricts the import to these frame numbers. Raises :class:`DriveError` naming the
    file (and line) for a missing or malformed file.
    """
    root_path = Path(root)
    wanted = frozenset(int(n) for n in frames) if frames is not None else None
    plan = _plan(root_path, split, sequence, wanted)
    layout = plan.layout
    calibs: dict[Path, Calib] = {}
    sizes: dict[Path, tuple[int, int]] = {}
    imu_base = all(_calib(f.calib, calibs).has("Tr_imu_to_velo") for f in plan.frames)
    rate = 1e9 / (TRACKING_PERIOD_NS if layout.tracking else OBJECT_FRAME_GAP_NS)
    geos = [_geometry(f, calibs, imu_base, sizes, rate) for f in plan.frames]
    rig, rig_source, rig_notes = _rig(plan.frames, geos)
    plan.notes.extend(rig_notes)
    convention: Convention = "lidar" if layout.vod else "camera"

    oxts_pose: list[F64] | None = None
    ego: list[EgoPose] = []
    if plan.oxts is not None:
        if not imu_base:
            plan.notes.append("oxts ignored: the calibration has no Tr_imu_to_velo to place the IMU")
        else:
            rows = parse_oxts(plan.oxts)
            numbers = [f.number for f in plan.frames]
            if len(rows) <= max(numbers):
                raise DriveError(
                    f"{len(rows)} OXTS lines, but the sequence has frame {max(numbers)} (one line a frame)",
                    file=str(plan.oxts),
                )
            all_poses = oxts_poses(rows)
            oxts_pose = [all_poses[n] for n in numbers]
            for f, n in zip(plan.frames, numbers, strict=True):
                r = rows[n]
                ego.append(
                    EgoPose(f.t_ns, _transform(all_poses[n]), (float(r[8]), float(r[9]), float(r[10])), float(r[22]))
                )

    gts = _ground_truth(plan, geos, convention, oxts_pose) if plan.has_labels else None
    metadata = {
        "source": "kitti",
        "kitti.layout": layout.name,
        "kitti.split": split,
        "kitti.base_link": "imu_on_road" if imu_base else "lidar",
        "kitti.box_convention": convention,
        "kitti.frames": format_frames(f.number for f in plan.frames),
        "kitti.annotated_region": f"inside the image of {_CAMERA} (image_2)",
        **({"kitti.sequence": plan.sequence} if plan.sequence is not None else {}),
        **{f"kitti.rig.{name}": f"calibration of frame {n}" for name, n in rig_source.items()},
    }
    source = f"kitti {layout.name} {layout.lidar}" + (f" sequence {plan.sequence}" if plan.sequence else "")
    with DriveOutput(output, rig, source=source, metadata=metadata, overwrite=overwrite) as out:
        for note in plan.notes:
            out.note(note)
        if not imu_base:
            out.note("base_link is the lidar frame (no Tr_imu_to_velo in the calibration)")
        if not plan.has_labels:
            out.note(f"no {_LABEL_DIRS[layout.tracking]}/: the drive has no ground truth")
        gt_frames = gts(out) if gts is not None else None
        _write(out, plan, geos, {s.name: s for s in rig}, rig_source, ego, gt_frames, on_progress)
    return out.summary


def _calib(path: Path, calibs: dict[Path, Calib]) -> Calib:
    cal = calibs.get(path)
    if cal is None:
        cal = calibs[path] = parse_calib(path)
    return cal


def _ground_truth(
    plan: _Plan, geos: Sequence[_Geometry], convention: Convention, poses: Sequence[F64] | None
) -> Callable[[DriveOutput], list[GroundTruth]]:
    """The frames' ground truth, built once the output (which counts what is skipped) exists."""

    def build(out: DriveOutput) -> list[GroundTruth]:
        numbers = [f.number for f in plan.frames]
        per_frame: list[list[_Object]] = []
        if plan.layout.tracking:
            assert plan.labels is not None
            by_frame: dict[int, list[KittiLabel]] = {}
            for lab in parse_labels(plan.labels, tracking=True):
                by_frame.setdefault(lab.frame, []).append(lab)
            index = set(numbers)
            out.skip(
                "annotations of frames outside the import (or without a lidar sweep)",
                sum(len(v) for k, v in by_frame.items() if k not in index),
            )
            for f, geo in zip(plan.frames, geos, strict=True):
                per_frame.append(_objects(by_frame.get(f.number, []), geo, convention, out, plan.labels, _kitti_track))
        else:
            counter = iter(range(1 << 62))
            for f, geo in zip(plan.frames, geos, strict=True):
                assert f.labels is not None
                labels = parse_labels(f.labels, tracking=False)
                per_frame.append(_objects(labels, geo, convention, out, f.labels, lambda _lab: next(counter)))
        velocity = _velocities(per_frame, poses if plan.layout.tracking else None, numbers)
        gts = []
        for f, objs, vels in zip(plan.frames, per_frame, velocity, strict=True):
            items = tuple(
                sorted(
                    (
                        GroundTruthObject(o.track, o.label, o.centre, o.size, o.yaw, v)
                        for o, v in zip(objs, vels, strict=True)
                    ),
                    key=lambda g: g.track_id,
                )
            )
            gts.append(GroundTruth(f.t_ns, items))
        return gts

    return build


def _kitti_track(lab: KittiLabel) -> int:
    return lab.track_id


def _write(
    out: DriveOutput,
    plan: _Plan,
    geos: Sequence[_Geometry],
    rig: Mapping[str, SensorSpec],
    rig_source: Mapping[str, int],
    ego: Sequence[EgoPose],
    gts: Sequence[GroundTruth] | None,
    on_progress: Progress | None,
) -> None:
    seq: Counter[str] = Counter()
    for i, (frame, geo) in enumerate(zip(plan.frames, geos, strict=True)):
        if ego:
            out.write_ego_pose(ego[i])
        if gts is not None:
            out.write_ground_truth(gts[i])
        for name in _SENSORS:
            spec = geo.specs.get(name)
            if spec is None:
                continue
            if name == _LIDAR and spec != rig[name]:
                # a lidar sweep is re-expressed exactly in the rig's lidar frame (the rigid change of mount)
                out.write(_lidar(frame, seq[name], out, rig[name].extrinsic.inverse().compose(spec.extrinsic)))
                out.note(
                    f"{_LIDAR}: sweeps of frames whose lidar mount differs from frame {rig_source[name]}'s are "
                    "re-expressed in the rig's lidar frame (float32 rounding)"
                )
            elif spec != rig[name]:
                out.skip(
                    f"{name}: samples whose calibration differs from the drive's (frame {rig_source[name]}'s); "
                    "import those frames separately (--frames)"
                )
                continue
            elif name == _LIDAR:
                out.write(_lidar(frame, seq[name], out))
            elif name == _RADAR:
                assert frame.radar is not None
                out.write(_radar(frame.radar, frame.t_ns, seq[name], out))
            else:
                out.write(_camera(name, frame.images[name], frame.t_ns, seq[name]))
            seq[name] += 1
        if on_progress is not None:
            on_progress((i + 1) / len(plan.frames))
