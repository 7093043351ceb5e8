"""Real source recordings for the importer tests, built in tmp_path.

* :func:`write_bag` writes a small ROS 2 bag with ``rosbags.rosbag2.Writer`` (MCAP storage) and the
  ROS 2 typestore's CDR serializer: PointCloud2 lidar (organised, padded rows, NaN points) and two
  radars (Doppler / big-endian Cartesian velocity), a raw ``Image`` camera and a ``CompressedImage``
  camera with their ``CameraInfo``, ``/tf_static`` (a two-level lidar mount) and ``/tf``
  (``map <- odom`` and ``odom <- base_link`` driving an arc).
* :func:`write_nuscenes` writes a tiny nuScenes-format dataset: v1.0 JSON tables, lidar ``.pcd.bin``
  (keyframes + a sweep), a radar PCD v0.7 binary, camera JPEGs, two annotated objects and one of a
  category we do not map.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

from perception._imageio import encode_jpeg
from perception.types import Transform

TS = get_typestore(Stores.ROS2_HUMBLE)
T = TS.types

S = 1_000_000_000
T0 = 1_700_000_000 * S  # header stamps start here
BAG_DELAY_NS = 20_000_000  # bag (receive) time = header stamp + 20 ms
SPEED = 5.0  # m/s, forward
YAW_RATE = 0.1  # rad/s
MAP_ODOM = Transform.from_xyz_rpy((100.0, -50.0, 0.0), (0.0, 0.0, 0.3))

# /tf_static: base_link <- lidar_mount <- velodyne; base_link <- cam_front_optical; ...
LIDAR_MOUNT = Transform.from_xyz_rpy((1.0, 0.0, 1.5), (0.0, 0.0, 0.1))
VELODYNE = Transform.from_xyz_rpy((0.0, 0.0, 0.3), (0.02, -0.01, 0.0))
OPTICAL = (-math.pi / 2, 0.0, -math.pi / 2)  # body (x fwd) -> optical (z fwd)
CAM_FRONT = Transform.from_xyz_rpy((1.5, 0.0, 1.2), OPTICAL)
CAM_REAR = Transform.from_xyz_rpy((-1.0, 0.0, 1.2), (-math.pi / 2, 0.0, math.pi / 2))
RADAR_FRONT = Transform.from_xyz_rpy((2.0, 0.3, 0.5), (0.0, 0.0, 0.05))
RADAR_REAR = Transform.from_xyz_rpy((-2.0, 0.0, 0.5), (0.0, 0.0, math.pi))

STATIC: dict[str, tuple[str, Transform]] = {  # child -> (parent, transform)
    "lidar_mount": ("base_link", LIDAR_MOUNT),
    "velodyne": ("lidar_mount", VELODYNE),
    "cam_front_optical": ("base_link", CAM_FRONT),
    "cam_rear_optical": ("base_link", CAM_REAR),
    "radar_front": ("base_link", RADAR_FRONT),
    "radar_rear": ("base_link", RADAR_REAR),
}

IMAGE_W, IMAGE_H = 16, 12
K_FRONT = (20.0, 0.0, 8.0, 0.0, 21.0, 6.0, 0.0, 0.0, 1.0)
K_REAR = (18.0, 0.0, 7.5, 0.0, 18.0, 5.5, 0.0, 0.0, 1.0)
D_FRONT = (-0.1, 0.01, 0.0, 0.0, 0.0)

TOPIC_MAP = """\
sensors:
  - name: lidar_top
    kind: lidar
    topic: /velodyne_points
    rate_hz: 10
  - name: radar_front
    kind: radar
    topic: /radar_front/points
    radial_velocity: doppler
    compensate_ego_motion: true
  - name: radar_rear
    kind: radar
    topic: /radar_rear/points
    velocity: [vx_comp, vy_comp]
  - name: cam_front
    kind: camera
    topic: /cam_front/image_raw
    rate_hz: 10
  - name: cam_rear
    kind: camera
    topic: /cam_rear/image/compressed
    camera_info: /cam_rear/info
    frame: cam_rear_optical
"""


def ego_pose(t_s: float) -> Transform:
    """odom <- base_link: an arc at SPEED with YAW_RATE, starting at the odom origin."""
    yaw = YAW_RATE * t_s
    r = SPEED / YAW_RATE
    return Transform.from_xyz_rpy((r * math.sin(yaw), r * (1 - math.cos(yaw)), 0.0), (0.0, 0.0, yaw))


def stamp(t_ns: int) -> Any:
    return T["builtin_interfaces/msg/Time"](sec=t_ns // S, nanosec=t_ns % S)


def header(t_ns: int, frame: str) -> Any:
    return T["std_msgs/msg/Header"](stamp=stamp(t_ns), frame_id=frame)


def transform_stamped(t_ns: int, parent: str, child: str, tf: Transform) -> Any:
    g = "geometry_msgs/msg/"
    x, y, z = tf.translation
    qx, qy, qz, qw = tf.rotation
    return T[g + "TransformStamped"](
        header=header(t_ns, parent),
        child_frame_id=child,
        transform=T[g + "Transform"](
            translation=T[g + "Vector3"](x=x, y=y, z=z), rotation=T[g + "Quaternion"](x=qx, y=qy, z=qz, w=qw)
        ),
    )


def point_cloud2(
    t_ns: int,
    frame: str,
    columns: dict[str, np.ndarray],
    *,
    height: int = 1,
    row_padding: int = 0,
    big_endian: bool = False,
) -> Any:
    """A PointCloud2 with one field per column (dtype from the array), optionally organised and padded."""
    order = ">" if big_endian else "<"
    codes = {"f4": 7, "f8": 8, "u2": 4, "i1": 1, "u1": 2, "i2": 3, "i4": 5, "u4": 6}
    names = list(columns)
    dtype = np.dtype([(n, order + columns[n].dtype.str[1:]) for n in names])
    n = len(columns[names[0]])
    width = n // height
    rec = np.zeros(n, dtype=dtype)
    for name in names:
        rec[name] = columns[name]
    rows = rec.tobytes()
    row_bytes = width * dtype.itemsize
    data = b"".join(rows[i * row_bytes : (i + 1) * row_bytes] + b"\xee" * row_padding for i in range(height))
    fields = [
        T["sensor_msgs/msg/PointField"](
            name=name, offset=dtype.fields[name][1], datatype=codes[columns[name].dtype.str[1:]], count=1
        )
        for name in names
    ]
    return T["sensor_msgs/msg/PointCloud2"](
        header=header(t_ns, frame),
        height=height,
        width=width,
        fields=fields,
        is_bigendian=big_endian,
        point_step=dtype.itemsize,
        row_step=row_bytes + row_padding,
        data=np.frombuffer(data, dtype=np.uint8),
        is_dense=False,
    )


def image_msg(t_ns: int, frame: str, rgb: np.ndarray, encoding: str = "rgb8", padding: int = 0) -> Any:
    if encoding == "bgr8":
        px = rgb[..., ::-1]
    elif encoding == "mono8":
        px = rgb[..., :1]
    else:
        px = rgb
    h, w, c = px.shape
    rows = np.zeros((h, w * c + padding), dtype=np.uint8)
    rows[:, : w * c] = px.reshape(h, w * c)
    return T["sensor_msgs/msg/Image"](
        header=header(t_ns, frame),
        height=h,
        width=w,
        encoding=encoding,
        is_bigendian=0,
        step=w * c + padding,
        data=rows.reshape(-1),
    )


def camera_info(t_ns: int, frame: str, k: Sequence[float], d: Sequence[float]) -> Any:
    roi = T["sensor_msgs/msg/RegionOfInterest"](x_offset=0, y_offset=0, height=0, width=0, do_rectify=False)
    return T["sensor_msgs/msg/CameraInfo"](
        header=header(t_ns, frame),
        height=IMAGE_H,
        width=IMAGE_W,
        distortion_model="plumb_bob",
        d=np.asarray(d, dtype=np.float64),
        k=np.asarray(k, dtype=np.float64),
        r=np.eye(3).reshape(-1),
        p=np.zeros(12),
        binning_x=0,
        binning_y=0,
        roi=roi,
    )


def gradient_image(i: int) -> np.ndarray:
    """A smooth RGB image (JPEG-friendly), different per frame."""
    yy, xx = np.mgrid[0:IMAGE_H, 0:IMAGE_W]
    img = np.stack([xx * 12 + i * 10, yy * 15 + 20, np.full_like(xx, 128 + i)], axis=-1)
    return np.clip(img, 0, 255).astype(np.uint8)


@dataclass
class Bag:
    path: Path
    topic_map: Path
    lidar: list[tuple[int, np.ndarray]] = field(default_factory=list)  # stamp, [N,4] valid points
    lidar_nan: int = 0
    radar_front: list[tuple[int, np.ndarray]] = field(default_factory=list)  # stamp, [N,5] raw (doppler raw)
    radar_rear: list[tuple[int, np.ndarray]] = field(default_factory=list)  # stamp, [N,5] x,y,z,vx,vy
    cam_front: list[tuple[int, np.ndarray]] = field(default_factory=list)  # stamp, rgb
    cam_rear: list[tuple[int, bytes]] = field(default_factory=list)  # stamp, jpeg
    ego_stamps: list[int] = field(default_factory=list)


def write_bag(
    tmp: Path,
    *,
    name: str = "bag",
    frames: int = 5,
    omit_topics: Sequence[str] = (),
    omit_static: Sequence[str] = (),
    topic_map: str = TOPIC_MAP,
    rear_jpeg: Callable[[int, bytes], bytes] | None = None,
) -> Bag:
    """Write the test bag (MCAP storage) and its topics.yaml under ``tmp``. ``rear_jpeg(i, jpeg)``: frame
    ``i``'s compressed rear image instead of ``jpeg`` (a damaged or resized one)."""
    rng = np.random.default_rng(7)
    out = Bag(tmp / name, tmp / f"{name}_topics.yaml")
    out.topic_map.write_text(topic_map)
    msgs: list[tuple[int, str, str, Any]] = []  # bag time, topic, type, message

    def add(t_ns: int, topic: str, msg: Any) -> None:
        if topic not in omit_topics:
            msgs.append((t_ns + BAG_DELAY_NS, topic, msg.__msgtype__, msg))

    tfm = T["tf2_msgs/msg/TFMessage"]
    static = [transform_stamped(T0, p, c, tf) for c, (p, tf) in STATIC.items() if c not in omit_static]
    add(T0 - BAG_DELAY_NS, "/tf_static", tfm(transforms=static))
    for i in range(2):  # map <- odom, low rate
        add(T0 + i * S, "/tf", tfm(transforms=[transform_stamped(T0 + i * S, "map", "odom", MAP_ODOM)]))
    for i in range(51):  # odom <- base_link at 50 Hz over 1 s
        t = T0 + i * 20_000_000
        out.ego_stamps.append(t)
        add(t, "/tf", tfm(transforms=[transform_stamped(t, "odom", "base_link", ego_pose(i * 0.02))]))
    add(T0, "/cam_front/camera_info", camera_info(T0, "cam_front_optical", K_FRONT, D_FRONT))
    add(T0, "/cam_rear/info", camera_info(T0, "cam_rear_optical", K_REAR, ()))

    for i in range(frames):
        t = T0 + 100_000_000 * i + 5_000_000
        # Lidar: organised 2 x 6, padded rows, some NaN points, uint16 intensity, an extra 'ring'.
        xyz = rng.uniform(-20, 20, size=(12, 3)).astype(np.float32)
        xyz[[1, 7]] = np.nan
        intensity = rng.integers(0, 1000, size=12).astype(np.uint16)
        cols = {
            "x": xyz[:, 0],
            "y": xyz[:, 1],
            "z": xyz[:, 2],
            "intensity": intensity,
            "ring": np.arange(12, dtype=np.uint16),
        }
        add(t, "/velodyne_points", point_cloud2(t, "velodyne", cols, height=2, row_padding=8))
        valid = np.isfinite(xyz).all(axis=1)
        out.lidar.append((t, np.column_stack([xyz[valid], intensity[valid].astype(np.float32)])))
        out.lidar_nan += int((~valid).sum())

        # Radar front: raw Doppler of static targets (what a moving radar measures), float64 rcs.
        tr = t + 1_000_000
        rxyz = np.column_stack([rng.uniform(5, 50, 6), rng.uniform(-10, 10, 6), np.zeros(6)]).astype(np.float32)
        doppler = _static_target_doppler(rxyz, tr)
        rcs = rng.uniform(-5, 20, 6)
        cols = {"x": rxyz[:, 0], "y": rxyz[:, 1], "z": rxyz[:, 2], "doppler": doppler, "rcs": rcs}
        add(tr, "/radar_front/points", point_cloud2(tr, "radar_front", cols))
        out.radar_front.append((tr, np.column_stack([rxyz, doppler, rcs]).astype(np.float32)))

        # Radar rear: nuScenes-style Cartesian compensated velocity, big-endian, int8 rcs.
        tr2 = t + 2_000_000
        bxyz = np.column_stack([rng.uniform(5, 50, 4), rng.uniform(-10, 10, 4), rng.uniform(-1, 1, 4)])
        bxyz = bxyz.astype(np.float32)
        v = rng.uniform(-3, 3, size=(4, 2)).astype(np.float32)
        cols = {
            "x": bxyz[:, 0],
            "y": bxyz[:, 1],
            "z": bxyz[:, 2],
            "vx_comp": v[:, 0],
            "vy_comp": v[:, 1],
            "rcs": rng.integers(-10, 30, 4).astype(np.int8),
        }
        add(tr2, "/radar_rear/points", point_cloud2(tr2, "radar_rear", cols, big_endian=True))
        out.radar_rear.append((tr2, np.column_stack([bxyz, v, cols["rcs"].astype(np.float32)])))

        # Cameras: raw rgb8 with step padding; compressed JPEG (published in a frame we override).
        tc = t + 3_000_000
        rgb = gradient_image(i)
        add(tc, "/cam_front/image_raw", image_msg(tc, "cam_front_optical", rgb, padding=4))
        out.cam_front.append((tc, rgb))
        jpeg = encode_jpeg(gradient_image(i + 5), quality=80)
        if rear_jpeg is not None:
            jpeg = rear_jpeg(i, jpeg)
        comp = T["sensor_msgs/msg/CompressedImage"](
            header=header(tc, "some_other_frame"), format="jpeg", data=np.frombuffer(jpeg, dtype=np.uint8)
        )
        add(tc, "/cam_rear/image/compressed", comp)
        out.cam_rear.append((tc, jpeg))

    msgs.sort(key=lambda m: m[0])
    with Writer(out.path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns: dict[str, Any] = {}
        for t, topic, msgtype, msg in msgs:
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, msgtype, typestore=TS)
            writer.write(conns[topic], t, bytes(TS.serialize_cdr(msg, msgtype)))
    return out


def _static_target_doppler(xyz: np.ndarray, t_ns: int) -> np.ndarray:
    """What radar_front reads for static targets: -(sensor velocity) . line of sight."""
    v_base = np.array([SPEED, 0.0, 0.0]) + np.cross([0.0, 0.0, YAW_RATE], RADAR_FRONT.translation)
    v_sensor = RADAR_FRONT.rotation_matrix().T @ v_base
    u = xyz / np.linalg.norm(xyz, axis=1, keepdims=True)
    return (-(u @ v_sensor)).astype(np.float32)


# --------------------------------------------------------------------------------------------------
# nuScenes
# --------------------------------------------------------------------------------------------------

NUS_T0_US = 1_533_151_603_547_590
RADAR_PCD_FIELDS = (
    ("x", "F", 4),
    ("y", "F", 4),
    ("z", "F", 4),
    ("dyn_prop", "I", 1),
    ("id", "I", 2),
    ("rcs", "F", 4),
    ("vx", "F", 4),
    ("vy", "F", 4),
    ("vx_comp", "F", 4),
    ("vy_comp", "F", 4),
    ("is_quality_valid", "I", 1),
    ("ambig_state", "I", 1),
    ("x_rms", "I", 1),
    ("y_rms", "I", 1),
    ("invalid_state", "I", 1),
    ("pdh0", "I", 1),
    ("vx_rms", "I", 1),
    ("vy_rms", "I", 1),
)


def wxyz(tf: Transform) -> list[float]:
    x, y, z, w = tf.rotation
    return [w, x, y, z]


def radar_pcd(points: np.ndarray, ascii_body: bool = False) -> bytes:
    """A nuScenes radar PCD v0.7 file from a structured array with RADAR_PCD_FIELDS."""
    head = [
        "# .PCD v0.7 - Point Cloud Data file format",
        "VERSION 0.7",
        "FIELDS " + " ".join(f[0] for f in RADAR_PCD_FIELDS),
        "SIZE " + " ".join(str(f[2]) for f in RADAR_PCD_FIELDS),
        "TYPE " + " ".join(f[1] for f in RADAR_PCD_FIELDS),
        "COUNT " + " ".join("1" for _ in RADAR_PCD_FIELDS),
        f"WIDTH {len(points)}",
        "HEIGHT 1",
        "VIEWPOINT 0 0 0 1 0 0 0",
        f"POINTS {len(points)}",
        f"DATA {'ascii' if ascii_body else 'binary'}",
    ]
    text = ("\n".join(head) + "\n").encode("ascii")
    if ascii_body:
        rows = [" ".join(repr(p[n].item()) for n, _, _ in RADAR_PCD_FIELDS) for p in points]
        return text + ("\n".join(rows) + "\n").encode("ascii")
    return text + points.tobytes()


def radar_dtype() -> np.dtype[Any]:
    return np.dtype([(n, f"<{'f' if t == 'F' else 'i'}{s}") for n, t, s in RADAR_PCD_FIELDS])


@dataclass
class NuScenes:
    root: Path
    version: str
    scene: str
    lidar_extrinsic: Transform
    radar_extrinsic: Transform
    cam_extrinsic: Transform
    cam_k: list[list[float]]
    keyframe_us: list[int]
    sweep_us: list[int]
    ego: dict[int, Transform]  # timestamp us -> pose
    annotations: list[dict[str, Any]]
    lidar_points: dict[int, np.ndarray]  # timestamp us -> [N,5]
    radar_points: np.ndarray  # structured, all points of the one radar file
    radar_us: int
    jpegs: dict[int, bytes]
    missing_sweep_us: int


def write_nuscenes(root: Path, *, version: str = "v1.0-mini") -> NuScenes:
    """3 keyframes (LIDAR_TOP, CAM_FRONT, one RADAR_FRONT) + 2 lidar sweeps (one file missing)."""
    rng = np.random.default_rng(3)
    names = "log scene sample sample_data ego_pose calibrated_sensor sensor sample_annotation instance category"
    tables: dict[str, list[dict[str, Any]]] = {k: [] for k in [*names.split(), "attribute", "visibility", "map"]}
    tables["log"].append(
        {"token": "log0", "logfile": "n015-test", "vehicle": "n015", "date_captured": "2018-08-01", "location": "sg"}
    )
    lidar_tf = Transform((0.94, 0.0, 1.84), (0.0, 0.0, -0.7071, 0.7071))
    radar_tf = Transform.from_xyz_rpy((3.41, 0.0, 0.5), (0.0, 0.0, 0.02))
    cam_tf = Transform.from_xyz_rpy((1.7, 0.0, 1.5), OPTICAL)
    cam_k = [[1266.4, 0.0, 816.3], [0.0, 1266.4, 491.5], [0.0, 0.0, 1.0]]
    sensors = {"LIDAR_TOP": ("lidar", lidar_tf), "RADAR_FRONT": ("radar", radar_tf), "CAM_FRONT": ("camera", cam_tf)}
    for ch, (modality, tf) in sensors.items():
        tables["sensor"].append({"token": f"s-{ch}", "channel": ch, "modality": modality})
        tables["calibrated_sensor"].append(
            {
                "token": f"cs-{ch}",
                "sensor_token": f"s-{ch}",
                "translation": list(tf.translation),
                "rotation": wxyz(tf),
                "camera_intrinsic": cam_k if modality == "camera" else [],
            }
        )
    tables["category"] += [
        {"token": "cat-car", "name": "vehicle.car", "description": ""},
        {"token": "cat-ped", "name": "human.pedestrian.adult", "description": ""},
        {"token": "cat-cone", "name": "movable_object.trafficcone", "description": ""},
    ]
    tables["scene"].append(
        {
            "token": "scene0",
            "name": "scene-0061",
            "description": "test scene",
            "log_token": "log0",
            "nbr_samples": 3,
            "first_sample_token": "smp0",
            "last_sample_token": "smp2",
        }
    )
    tables["scene"].append(
        {"token": "scene1", "name": "scene-0103", "log_token": "log0", "first_sample_token": "", "nbr_samples": 0}
    )

    keyframes = [NUS_T0_US + i * 500_000 for i in range(3)]
    sweeps = [keyframes[0] + 50_000, keyframes[1] + 50_000]
    ego: dict[int, Transform] = {}

    def ego_at(t_us: int) -> Transform:
        dt = (t_us - NUS_T0_US) * 1e-6
        return Transform.from_xyz_rpy((600.0 + 4.0 * dt, 1600.0 + 1.0 * dt, 0.0), (0.0, 0.0, 0.5 + 0.05 * dt))

    def add_sd(token: str, sample: str, ch: str, t_us: int, key: bool, filename: str, w: int = 0, h: int = 0) -> None:
        ego[t_us] = ego_at(t_us)
        tables["ego_pose"].append(
            {
                "token": f"ego-{token}",
                "timestamp": t_us,
                "translation": list(ego[t_us].translation),
                "rotation": wxyz(ego[t_us]),
            }
        )
        tables["sample_data"].append(
            {
                "token": token,
                "sample_token": sample,
                "ego_pose_token": f"ego-{token}",
                "calibrated_sensor_token": f"cs-{ch}",
                "timestamp": t_us,
                "fileformat": "pcd" if ch != "CAM_FRONT" else "jpg",
                "is_key_frame": key,
                "height": h,
                "width": w,
                "filename": filename,
                "prev": "",
                "next": "",
            }
        )

    lidar_points: dict[int, np.ndarray] = {}
    jpegs: dict[int, bytes] = {}
    for i, t in enumerate(keyframes):
        tables["sample"].append(
            {
                "token": f"smp{i}",
                "timestamp": t,
                "scene_token": "scene0",
                "prev": f"smp{i - 1}" if i else "",
                "next": f"smp{i + 1}" if i < 2 else "",
            }
        )
        name = f"n015-test__LIDAR_TOP__{t}.pcd.bin"
        add_sd(f"sd-lidar-{i}", f"smp{i}", "LIDAR_TOP", t, True, f"samples/LIDAR_TOP/{name}")
        pts = rng.uniform(-30, 30, size=(50 + i, 5)).astype(np.float32)
        lidar_points[t] = pts
        _write(root / "samples/LIDAR_TOP" / name, pts.tobytes())
        tc = t + 12_000  # camera a bit later than the lidar
        name = f"n015-test__CAM_FRONT__{tc}.jpg"
        add_sd(f"sd-cam-{i}", f"smp{i}", "CAM_FRONT", tc, True, f"samples/CAM_FRONT/{name}", 32, 24)
        jpegs[tc] = encode_jpeg(np.full((24, 32, 3), 40 * i, np.uint8))
        _write(root / "samples/CAM_FRONT" / name, jpegs[tc])
    for j, t in enumerate(sweeps):
        name = f"n015-test__LIDAR_TOP__{t}.pcd.bin"
        add_sd(f"sd-lidar-sweep-{j}", f"smp{j + 1}", "LIDAR_TOP", t, False, f"sweeps/LIDAR_TOP/{name}")
        if j == 0:  # the second sweep's file is missing
            pts = rng.uniform(-30, 30, size=(40, 5)).astype(np.float32)
            lidar_points[t] = pts
            _write(root / "sweeps/LIDAR_TOP" / name, pts.tobytes())

    # One radar keyframe: 6 points, one filtered out by invalid_state, one by ambig_state.
    radar_us = keyframes[1] + 20_000
    name = f"n015-test__RADAR_FRONT__{radar_us}.pcd"
    add_sd("sd-radar-1", "smp1", "RADAR_FRONT", radar_us, True, f"samples/RADAR_FRONT/{name}")
    rp = np.zeros(6, dtype=radar_dtype())
    rp["x"] = rng.uniform(5, 60, 6)
    rp["y"] = rng.uniform(-10, 10, 6)
    rp["vx_comp"] = rng.uniform(-5, 5, 6)
    rp["vy_comp"] = rng.uniform(-5, 5, 6)
    rp["vx"] = 99.0  # raw velocity: must not be used
    rp["rcs"] = rng.uniform(-5, 25, 6)
    rp["dyn_prop"] = 1
    rp["ambig_state"] = 3
    rp["invalid_state"] = 0
    rp["invalid_state"][2] = 5
    rp["ambig_state"][4] = 1
    _write(root / "samples/RADAR_FRONT" / name, radar_pcd(rp))

    # Annotations: a car on all three keyframes, a pedestrian on the first only, a cone (skipped).
    tables["instance"] += [
        {"token": "inst-car", "category_token": "cat-car", "nbr_annotations": 3},
        {"token": "inst-ped", "category_token": "cat-ped", "nbr_annotations": 1},
        {"token": "inst-cone", "category_token": "cat-cone", "nbr_annotations": 1},
    ]
    anns: list[dict[str, Any]] = []
    for i, t in enumerate(keyframes):
        dt = (t - NUS_T0_US) * 1e-6
        anns.append(
            {
                "token": f"ann-car-{i}",
                "sample_token": f"smp{i}",
                "instance_token": "inst-car",
                "translation": [610.0 + 8.0 * dt, 1605.0 - 2.0 * dt, 1.0],
                "size": [1.9, 4.6, 1.6],
                "rotation": wxyz(Transform.from_xyz_rpy((0, 0, 0), (0.0, 0.0, 1.2))),
                "prev": f"ann-car-{i - 1}" if i else "",
                "next": f"ann-car-{i + 1}" if i < 2 else "",
                "num_lidar_pts": 10,
                "num_radar_pts": 1,
                "attribute_tokens": [],
                "visibility_token": "4",
            }
        )
    anns.append(
        {
            "token": "ann-ped-0",
            "sample_token": "smp0",
            "instance_token": "inst-ped",
            "translation": [603.0, 1598.0, 0.9],
            "size": [0.6, 0.7, 1.8],
            "rotation": wxyz(Transform.from_xyz_rpy((0, 0, 0), (0.0, 0.0, -0.4))),
            "prev": "",
            "next": "",
        }
    )
    anns.append(
        {
            "token": "ann-cone-0",
            "sample_token": "smp1",
            "instance_token": "inst-cone",
            "translation": [605.0, 1601.0, 0.3],
            "size": [0.3, 0.3, 0.7],
            "rotation": [1.0, 0.0, 0.0, 0.0],
            "prev": "",
            "next": "",
        }
    )
    tables["sample_annotation"] = anns

    tdir = root / version
    tdir.mkdir(parents=True, exist_ok=True)
    for table, rows in tables.items():
        (tdir / f"{table}.json").write_text(json.dumps(rows, indent=1))
    return NuScenes(
        root=root,
        version=version,
        scene="scene-0061",
        lidar_extrinsic=lidar_tf,
        radar_extrinsic=radar_tf,
        cam_extrinsic=cam_tf,
        cam_k=cam_k,
        keyframe_us=keyframes,
        sweep_us=sweeps,
        ego=ego,
        annotations=anns,
        lidar_points=lidar_points,
        radar_points=rp,
        radar_us=radar_us,
        jpegs=jpegs,
        missing_sweep_us=sweeps[1],
    )


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
