"""KITTI-format trees for the importer tests, written into tmp_path.

The builders start from boxes and an ego trajectory in ``base_link``/``map`` and write what the KITTI
devkits specify: labels by the devkit's box definition (bottom-face centre and ``rotation_y`` about
the y axis, in the rectified camera frame), calib matrices row-major, OXTS rows through the raw-data
devkit's Mercator projection, View-of-Delft boxes by its devkit (``rotation = -yaw_lidar - pi/2``).
They share no code with the importer.

* :func:`write_object` — the object layout: frames 000000, 000001 (same calibration) and 000003 (its
  own camera calibration), DontCare and Misc lines, PNG images.
* :func:`write_tracking` — the tracking layout: sequence 0000 (5 frames, a car driving through, a
  pedestrian in frames 1-2, OXTS poses of a turning ego) and sequence 0001 (1 frame), with the
  tracking devkit's calib spelling.
* :func:`write_vod` — View-of-Delft: ``lidar/training`` (JPEG, no IMU calib, 16-column labels) and
  ``radar/training`` (7-column points, two scans accumulated, its own calib).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
from PIL import Image

F64 = npt.NDArray[np.float64]

K = np.array([[700.0, 0.0, 32.0], [0.0, 700.0, 12.0], [0.0, 0.0, 1.0]])
K_OTHER = np.array([[720.0, 0.0, 31.0], [0.0, 720.0, 12.5], [0.0, 0.0, 1.0]])
CAM2_OFFSET = np.array([0.06, -0.001, 0.002])  # camera 2 in rectified camera 0 coordinates
CAM3_OFFSET = np.array([-0.47, 0.002, -0.003])  # camera 3
IMAGE_SIZE = (64, 24)
EARTH = 6378137.0
#: KITTI's GPS/IMU height above the road (its sensor setup): base_link is the IMU frame this far down.
IMU_HEIGHT = 0.93


def rz(a: float) -> F64:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def ry(a: float) -> F64:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def rx(a: float) -> F64:
    c, s = math.cos(a), math.sin(a)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def rigid(r: F64, t: Sequence[float]) -> F64:
    m = np.eye(4)
    m[:3, :3] = r
    m[:3, 3] = t
    return m


#: velodyne (x fwd, y left, z up) -> camera (x right, y down, z fwd)
AXES = np.array([[0.0, -1.0, 0.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0]])


@dataclass
class Calibration:
    """``T_velo_imu`` (Tr_imu_to_velo), ``T_cam_velo`` (Tr_velo_to_cam), ``R0_rect``, K of P2."""

    velo_imu: F64
    cam_velo: F64
    r0: F64
    k: F64 = field(default_factory=K.copy)

    @property
    def p2(self) -> F64:
        return np.hstack([self.k, (self.k @ CAM2_OFFSET)[:, None]])

    @property
    def p3(self) -> F64:
        return np.hstack([self.k, (self.k @ CAM3_OFFSET)[:, None]])

    @property
    def rect_velo(self) -> F64:
        return rigid(self.r0, (0, 0, 0)) @ self.cam_velo

    @property
    def base_velo(self) -> F64:
        """``base_link <- velodyne``: base_link is the IMU frame moved down to the road (IMU_HEIGHT)."""
        out: F64 = rigid(np.eye(3), (0.0, 0.0, IMU_HEIGHT)) @ np.linalg.inv(self.velo_imu)
        return out

    @property
    def base_rect(self) -> F64:
        out: F64 = self.base_velo @ np.linalg.inv(self.rect_velo)
        return out

    def text(self, tracking: bool = False, imu: bool = True) -> str:
        def row(m: F64) -> str:
            return " ".join(repr(float(v)) for v in np.asarray(m).ravel())

        p0 = np.hstack([self.k, np.zeros((3, 1))])
        names = (
            ("R_rect", "Tr_velo_cam", "Tr_imu_velo") if tracking else ("R0_rect:", "Tr_velo_to_cam:", "Tr_imu_to_velo:")
        )
        lines = [f"P{i}: {row({2: self.p2, 3: self.p3}.get(i, p0))}" for i in range(4)]
        lines.append(f"{names[0]} {row(self.r0)}")
        lines.append(f"{names[1]} {row(self.cam_velo[:3])}")
        lines.append(f"{names[2]} {row(self.velo_imu[:3])}" if imu else names[2])
        return "\n".join(lines) + "\n"


#: Rotations that keep base_link's z and the camera's -y parallel: the devkit's box conversion is exact.
UPRIGHT = Calibration(
    velo_imu=rigid(rz(0.01), (-0.81, 0.32, -0.80)),
    cam_velo=rigid(AXES @ rz(0.004), (0.003, -0.076, -0.272)),
    r0=ry(0.006),
)
#: A tilted set (roll/pitch between the sensors, as real calibrations have).
TILTED = Calibration(
    velo_imu=rigid(rz(0.01) @ rx(0.004), (-0.81, 0.32, -0.80)),
    cam_velo=rigid(AXES @ ry(0.003) @ rz(0.004), (0.003, -0.076, -0.272)),
    r0=ry(0.006) @ rx(-0.004),
    k=K_OTHER.copy(),
)


@dataclass(frozen=True)
class Box:
    """A true object in base_link: bottom on the ground, as the drive stores it (centre)."""

    kind: str  # KITTI type
    centre: tuple[float, float, float]
    size: tuple[float, float, float]  # l, w, h
    yaw: float
    track: int = -1

    def points(self, n: int = 6) -> F64:
        """``[n^3, 3]`` points strictly inside the box (base_link)."""
        length, w, h = self.size
        g = (np.arange(n) + 0.5) / n - 0.5
        x, y, z = np.meshgrid(g * length * 0.9, g * w * 0.9, g * h * 0.9, indexing="ij")
        local = np.column_stack([x.ravel(), y.ravel(), z.ravel()])
        out: F64 = local @ rz(self.yaw).T + np.asarray(self.centre)
        return out


def kitti_label_line(box: Box, cal: Calibration, base_rect: F64 | None = None) -> str:
    """The label_2 line of a box by the object devkit's definition."""
    m = np.linalg.inv(cal.base_rect if base_rect is None else base_rect)  # rect <- base
    length, w, h = box.size
    bottom = np.asarray(box.centre) - np.array([0.0, 0.0, h / 2])
    loc = m[:3, :3] @ bottom + m[:3, 3]
    d = m[:3, :3] @ np.array([math.cos(box.yaw), math.sin(box.yaw), 0.0])
    rot = math.atan2(-d[2], d[0])
    alpha = rot - math.atan2(loc[0], loc[2])
    return (
        f"{box.kind} 0.00 0 {alpha:.6f} 10.0 5.0 30.0 20.0 {h!r} {w!r} {length!r} "
        f"{loc[0]!r} {loc[1]!r} {loc[2]!r} {rot!r}"
    )


DONTCARE = "DontCare -1 -1 -10 503.89 169.71 590.61 190.13 -1 -1 -1 -1000 -1000 -1000 -10"


def png(size: tuple[int, int] = IMAGE_SIZE, value: int = 90) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (value, 120, 30)).save(buf, format="PNG")
    return buf.getvalue()


def jpeg(size: tuple[int, int] = IMAGE_SIZE) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (20, 40, 200)).save(buf, format="JPEG")
    return buf.getvalue()


def lidar_bin(points_base: F64, cal: Calibration) -> bytes:
    """Points (base_link) -> velodyne frame, x y z reflectance float32."""
    m = np.linalg.inv(cal.base_velo)
    p = points_base @ m[:3, :3].T + m[:3, 3]
    refl = np.linspace(0.0, 0.99, len(p))[:, None]
    return np.hstack([p, refl]).astype("<f4").tobytes()


def _write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)


# --------------------------------------------------------------------------------------------------
# object layout
# --------------------------------------------------------------------------------------------------


@dataclass
class ObjectTree:
    root: Path  # holds training/
    frames: dict[int, list[Box]]  # frame number -> boxes (ours only)
    calib: dict[int, Calibration]
    lidar: dict[int, F64]  # frame -> points (base_link) written


def write_object(root: Path, *, calibs: dict[int, Calibration] | None = None, right: bool = False) -> ObjectTree:
    tree = root / "training"
    calibs = calibs or {0: UPRIGHT, 1: UPRIGHT, 3: TILTED}
    frames = {
        0: [
            Box("Car", (12.0, 1.5, -0.1), (4.2, 1.8, 1.5), 0.3),
            Box("Pedestrian", (8.0, -2.0, 0.0), (0.6, 0.7, 1.8), -1.2),
        ],
        1: [
            Box("Van", (20.0, -3.0, 0.1), (5.0, 2.0, 2.1), 2.8),
            Box("Cyclist", (9.0, 4.0, -0.05), (1.8, 0.6, 1.7), 1.0),
        ],
        3: [Box("Truck", (25.0, 2.0, 0.5), (9.0, 2.5, 3.2), -0.4)],
    }
    lidar: dict[int, F64] = {}
    for n, boxes in frames.items():
        cal = calibs[n]
        stem = f"{n:06d}"
        ground = np.column_stack([np.linspace(3, 30, 50), np.linspace(-5, 5, 50), np.full(50, -1.5)])
        pts = np.vstack([ground, *[b.points() for b in boxes]])
        lidar[n] = pts
        _write(tree / "velodyne" / f"{stem}.bin", lidar_bin(pts, cal))
        _write(tree / "calib" / f"{stem}.txt", cal.text())
        _write(tree / "image_2" / f"{stem}.png", png())
        if right:
            _write(tree / "image_3" / f"{stem}.png", png(value=200))
        lines = [kitti_label_line(b, cal) for b in boxes]
        if n == 0:
            lines += [DONTCARE, kitti_label_line(Box("Misc", (15.0, -4.0, 0.0), (1.0, 1.0, 1.0), 0.0), cal)]
        _write(tree / "label_2" / f"{stem}.txt", "\n".join(lines) + "\n")
    return ObjectTree(root, frames, calibs, lidar)


# --------------------------------------------------------------------------------------------------
# tracking layout
# --------------------------------------------------------------------------------------------------


@dataclass
class TrackingTree:
    root: Path
    poses: list[F64]  # map <- base_link per frame (map: ENU at frame 0's position)
    ego_speed: float
    yaw_rate: float
    car_velocity_map: F64
    boxes: list[list[Box]]  # per frame, in base_link


LAT0, LON0 = 49.011, 8.423


def _latlon(mx: float, my: float, scale: float) -> tuple[float, float]:
    lon = mx * 180.0 / (scale * math.pi * EARTH)
    lat = 360.0 / math.pi * math.atan(math.exp(my / (scale * EARTH))) - 90.0
    return lat, lon


def write_tracking(root: Path, *, frames: int = 5) -> TrackingTree:
    tree = root / "training"
    cal = UPRIGHT
    scale = math.cos(math.radians(LAT0))
    mx0 = scale * LON0 * math.pi * EARTH / 180.0
    my0 = scale * EARTH * math.log(math.tan((90.0 + LAT0) * math.pi / 360.0))
    speed, yaw0, yaw_rate, dt = 8.0, 0.4, 0.2, 0.1
    car_v = np.array([2.0, -1.0, 0.0])
    car0 = np.array([15.0, 6.0, -0.2])
    poses: list[F64] = []
    boxes: list[list[Box]] = []
    oxts: list[str] = []
    labels: list[str] = []
    x = y = 0.0
    for i in range(frames):
        yaw = yaw0 + yaw_rate * i * dt
        if i:
            # exact arc between frames (constant speed and yaw rate)
            y0 = yaw0 + yaw_rate * (i - 1) * dt
            x += speed / yaw_rate * (math.sin(yaw) - math.sin(y0))
            y += speed / yaw_rate * (math.cos(y0) - math.cos(yaw))
        pose = rigid(rz(yaw), (x, y, 0.0))
        poses.append(pose)
        lat, lon = _latlon(mx0 + x, my0 + y, scale)
        row = (
            [lat, lon, 110.0, 0.0, 0.0, yaw, 0.0, 0.0, speed, 0.0, 0.0]
            + [0.0] * 11
            + [yaw_rate]
            + [0.5, 0.1, 4, 10, 5, 5, 5]
        )
        oxts.append(" ".join(repr(float(v)) if k < 25 else str(int(v)) for k, v in enumerate(row)))
        inv = np.linalg.inv(pose)
        car_map = car0 + car_v * i * dt
        car_base = inv[:3, :3] @ car_map + inv[:3, 3]
        frame_boxes = [Box("Car", tuple(car_base), (4.0, 1.8, 1.5), 0.5 - yaw, track=0)]  # heading 0.5 in map
        if i in (1, 2):
            frame_boxes.append(Box("Pedestrian", (7.0, -1.0, 0.0), (0.5, 0.6, 1.7), 0.0, track=5))
        boxes.append(frame_boxes)
        for b in frame_boxes:
            labels.append(f"{i} {b.track} {kitti_label_line(b, cal)}")
        labels.append(f"{i} -1 {DONTCARE}")
        stem = f"{i:06d}"
        pts = np.vstack([b.points() for b in frame_boxes])
        _write(tree / "velodyne" / "0000" / f"{stem}.bin", lidar_bin(pts, cal))
        _write(tree / "image_02" / "0000" / f"{stem}.png", png())
    _write(tree / "calib" / "0000.txt", cal.text(tracking=True))
    _write(tree / "label_02" / "0000.txt", "\n".join(labels) + "\n")
    _write(tree / "oxts" / "0000.txt", "\n".join(oxts) + "\n")
    # a second, one-frame sequence without oxts
    _write(tree / "velodyne" / "0001" / "000000.bin", lidar_bin(np.zeros((3, 3)), cal))
    _write(tree / "image_02" / "0001" / "000000.png", png())
    _write(tree / "calib" / "0001.txt", cal.text(tracking=True))
    _write(tree / "label_02" / "0001.txt", "")
    return TrackingTree(root, poses, speed, yaw_rate, car_v, boxes)


# --------------------------------------------------------------------------------------------------
# View-of-Delft
# --------------------------------------------------------------------------------------------------

#: radar -> camera (the radar calib's Tr_velo_to_cam): behind the bumper, below and ahead of the lidar.
VOD_CAM_RADAR = rigid(AXES @ rz(-0.02), (0.05, 0.98, 1.44))
VOD_CAM_LIDAR = rigid(AXES @ ry(0.0) @ rz(0.01), (0.15, -0.46, -0.92))


@dataclass
class VodTree:
    root: Path
    boxes: dict[int, list[Box]]  # in the lidar frame (= base_link)
    radar: dict[int, npt.NDArray[np.float32]]  # frame -> [N, 7] written


def _vod_calib(cam_sensor: F64) -> str:
    def row(m: F64) -> str:
        return " ".join(repr(float(v)) for v in np.asarray(m).ravel())

    p = np.hstack([K, np.zeros((3, 1))])
    lines = [f"P{i}: {row(p)}" for i in range(4)]
    lines += [f"R0_rect: {row(np.eye(3))}", f"Tr_velo_to_cam: {row(cam_sensor[:3])}", "Tr_imu_to_velo: "]
    return "\n".join(lines) + "\n"


def vod_label_line(box: Box) -> str:
    """View-of-Delft's label line (its devkit: rotation = -yaw_lidar - pi/2, bottom centre in camera)."""
    length, w, h = box.size
    bottom = np.asarray(box.centre) - np.array([0.0, 0.0, h / 2])
    loc = VOD_CAM_LIDAR[:3, :3] @ bottom + VOD_CAM_LIDAR[:3, 3]
    rot = -box.yaw - math.pi / 2
    return f"{box.kind} 0 0 0.1 10.0 5.0 30.0 20.0 {h!r} {w!r} {length!r} {loc[0]!r} {loc[1]!r} {loc[2]!r} {rot!r} 1"


def write_vod(root: Path) -> VodTree:
    lidar_tree = root / "lidar" / "training"
    radar_tree = root / "radar" / "training"
    boxes = {
        1: [Box("Car", (10.0, 2.0, -0.8), (4.0, 1.8, 1.5), 0.2), Box("rider", (8.0, -1.0, -0.6), (0.8, 0.6, 1.6), 0.0)],
        2: [
            Box("Cyclist", (7.0, -1.0, -0.7), (1.9, 0.6, 1.7), 1.4),
            Box("Pedestrian", (6.0, 3.0, -0.7), (0.5, 0.6, 1.7), 0.0),
        ],
    }
    radar: dict[int, npt.NDArray[np.float32]] = {}
    rng = np.random.default_rng(4)
    for n, bs in boxes.items():
        stem = f"{n:05d}"
        pts = np.vstack([b.points(4) for b in bs])
        _write(
            lidar_tree / "velodyne" / f"{stem}.bin", np.hstack([pts, np.ones((len(pts), 1))]).astype("<f4").tobytes()
        )
        _write(lidar_tree / "calib" / f"{stem}.txt", _vod_calib(VOD_CAM_LIDAR))
        _write(lidar_tree / "image_2" / f"{stem}.jpg", jpeg())
        _write(lidar_tree / "label_2" / f"{stem}.txt", "\n".join(vod_label_line(b) for b in bs) + "\n")
        r = rng.normal(size=(6, 7)).astype(np.float32)
        r[:, 0] = np.abs(r[:, 0]) + 5.0
        r[:, 6] = [0, 0, 0, 0, -1, -2]  # two points from earlier scans
        radar[n] = r
        _write(radar_tree / "velodyne" / f"{stem}.bin", r.astype("<f4").tobytes())
        _write(radar_tree / "calib" / f"{stem}.txt", _vod_calib(VOD_CAM_RADAR))
    return VodTree(root, boxes, radar)
