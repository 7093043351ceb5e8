"""ROS 2 messages <-> the runtime's samples, ego poses and detections (no node, no executor here).

Message classes are passed in by the node (rclpy is imported only inside :mod:`perception.ros`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from perception._imageio import encode_jpeg, image_format, size_problem
from perception.errors import InputError
from perception.importers import decode_point_cloud2, point_fields
from perception.kinds import kind_def
from perception.types import CameraCalibration, EgoPose, ImageSample, PointCloudSample, Transform

__all__ = [
    "RAW_JPEG_QUALITY",
    "calibration_mismatch",
    "calibration_to_info",
    "cloud_to_sample",
    "compressed_to_sample",
    "ego_to_odometry",
    "odometry_to_ego",
    "raw_to_sample",
    "sample_to_cloud",
    "sample_to_compressed",
    "stamp_ns",
    "to_stamp",
]

#: A raw ``sensor_msgs/Image`` is re-encoded for the camera model (which takes encoded images).
RAW_JPEG_QUALITY = 95

_FLOAT32 = 7  # sensor_msgs/PointField datatype


def stamp_ns(stamp: Any) -> int:
    """A ``builtin_interfaces/Time`` as integer ns."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def to_stamp(time_cls: Any, t_ns: int) -> Any:
    sec, nanosec = divmod(int(t_ns), 1_000_000_000)
    return time_cls(sec=sec, nanosec=nanosec)


def cloud_to_sample(
    msg: Any, sensor: str, kind: str, t_ns: int, field_map: Mapping[str, str], seq: int = 0
) -> PointCloudSample:
    """A ``sensor_msgs/PointCloud2`` as the kind's point columns, read by field name in any layout
    (``field_map``: ROS name -> kind field). A field the kind needs and the cloud lacks is an
    :class:`InputError` naming it."""
    want = kind_def(kind).point_fields
    ros_name = {target: name for name, target in field_map.items()}
    names = [ros_name.get(f, f) for f in want]
    have = point_fields(msg)
    missing = [n if n == f else f"{n} (for {f})" for n, f in zip(names, want, strict=True) if n not in have]
    if missing:
        raise InputError(
            f"PointCloud2 has no field {', '.join(missing)} (it has: {', '.join(have) or 'none'}; "
            "map names with ros.field_map)",
            sensor=sensor,
        )
    try:
        points = decode_point_cloud2(msg, names)
    except ValueError as exc:
        raise InputError(f"PointCloud2: {exc}", sensor=sensor) from exc
    return PointCloudSample(sensor, t_ns, msg.header.frame_id, points, tuple(want), seq)


def sample_to_cloud(cloud_cls: Any, field_cls: Any, sample: PointCloudSample, header: Any) -> Any:
    """A sample as a dense little-endian float32 ``PointCloud2``."""
    pts = np.ascontiguousarray(sample.points, dtype="<f4")
    fields = [field_cls(name=name, offset=4 * i, datatype=_FLOAT32, count=1) for i, name in enumerate(sample.fields)]
    return cloud_cls(
        header=header,
        height=1,
        width=pts.shape[0],
        fields=fields,
        is_bigendian=False,
        point_step=4 * pts.shape[1],
        row_step=4 * pts.shape[1] * pts.shape[0],
        data=pts.tobytes(),
        is_dense=True,
    )


def compressed_to_sample(msg: Any, sensor: str, t_ns: int, seq: int = 0) -> ImageSample:
    """A ``sensor_msgs/CompressedImage`` (``format`` as image_transport writes it, e.g. ``jpeg`` or
    ``rgb8; png compressed bgr8``; an empty one: the data's own signature). Another format (``tiff``,
    ``webp``, a depth image's ``16UC1; compressedDepth png``) is an :class:`InputError` naming it and the
    sensor: it was taken as a JPEG and failed later, in the server's decode, counted as the camera's fault."""
    fmt = compressed_format(str(msg.format), bytes(msg.data[:8]))
    if fmt is None:
        raise InputError(f"unsupported CompressedImage format {str(msg.format)!r:.60} (jpeg or png)", sensor=sensor)
    return ImageSample(sensor, t_ns, msg.header.frame_id, bytes(msg.data), fmt, seq)


def compressed_format(format_field: str, head: bytes) -> Literal["jpeg", "png"] | None:
    """``jpeg`` or ``png`` for a CompressedImage's ``format`` (its first bytes ``head`` when it is empty),
    None for anything else."""
    words = set(re.split(r"[\s;]+", format_field.strip().lower())) - {""}
    if not words:
        return image_format(head)
    if "compresseddepth" in words:  # a depth image (16-bit or float), not a camera's colour image
        return None
    if "png" in words:
        return "png"
    if words & {"jpeg", "jpg"}:
        return "jpeg"
    return None


def sample_to_compressed(image_cls: Any, sample: ImageSample, header: Any) -> Any:
    return image_cls(header=header, format=sample.format, data=sample.data)


def raw_to_sample(msg: Any, sensor: str, t_ns: int, seq: int = 0) -> ImageSample:
    """A raw ``sensor_msgs/Image`` (rgb8, bgr8, mono8, rgba8, bgra8), re-encoded as JPEG. A message that
    cannot be one (an encoding not listed, no pixels, over the image size limit, a ``step`` or ``data``
    shorter than its rows) is an :class:`InputError` naming the sensor and the field."""
    encoding = str(msg.encoding)
    channels = {"rgb8": 3, "bgr8": 3, "mono8": 1, "rgba8": 4, "bgra8": 4}.get(encoding)
    if channels is None:
        raise InputError(
            f"unsupported Image encoding {encoding!r:.40} (rgb8, bgr8, mono8, rgba8, bgra8)", sensor=sensor
        )
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    empty = [name for name, v in (("height", h), ("width", w)) if v <= 0]
    if empty:
        raise InputError(f"Image {' and '.join(empty)} 0 ({w}x{h} {encoding}): no pixels", sensor=sensor)
    if (problem := size_problem(w, h)) is not None:
        raise InputError(f"Image {problem}", sensor=sensor)
    data = np.frombuffer(memoryview(msg.data).cast("B") if not isinstance(msg.data, bytes) else msg.data, np.uint8)
    if step < w * channels:
        raise InputError(f"Image step {step} is shorter than a row of {w} {encoding} pixels", sensor=sensor)
    if data.size < h * step:
        raise InputError(f"Image data has {data.size} bytes, {h} rows of step {step} need {h * step}", sensor=sensor)
    img = data[: h * step].reshape(h, step)[:, : w * channels].reshape(h, w, channels)
    if channels == 1:
        img = np.repeat(img, 3, axis=2)
    elif encoding.startswith("bgr"):
        img = img[:, :, 2::-1]
    else:
        img = img[:, :, :3]
    try:
        jpeg = encode_jpeg(img, RAW_JPEG_QUALITY)
    except (ValueError, OSError) as exc:  # Pillow's own limits, should one remain past the checks above
        raise InputError(f"Image of {w}x{h} {encoding} cannot be encoded as JPEG: {exc}", sensor=sensor) from exc
    return ImageSample(sensor, t_ns, msg.header.frame_id, jpeg, "jpeg", seq)


def calibration_to_info(info_cls: Any, cal: CameraCalibration, header: Any) -> Any:
    k = list(cal.k)
    p = [k[0], k[1], k[2], 0.0, k[3], k[4], k[5], 0.0, k[6], k[7], k[8], 0.0]
    return info_cls(
        header=header,
        width=cal.width,
        height=cal.height,
        distortion_model=cal.distortion_model,
        d=list(cal.d),
        k=k,
        r=[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        p=p,
    )


def calibration_mismatch(info: Any, cal: CameraCalibration | None, *, tolerance_px: float = 0.5) -> str | None:
    """Why a ``CameraInfo`` disagrees with the rig's calibration (size, fx, fy, cx, cy), else None."""
    if cal is None:
        return None
    if (int(info.width), int(info.height)) != (cal.width, cal.height):
        return f"camera_info is {info.width}x{info.height}, the rig's calibration {cal.width}x{cal.height}"
    for i, name in ((0, "fx"), (4, "fy"), (2, "cx"), (5, "cy")):
        if not abs(float(info.k[i]) - cal.k[i]) <= tolerance_px:  # a NaN differs too
            return f"camera_info {name} {float(info.k[i]):.1f} differs from the rig's {cal.k[i]:.1f}"
    return None


def odometry_to_ego(msg: Any, t_ns: int) -> EgoPose:
    """``nav_msgs/Odometry`` (pose: map <- base_link, twist in base_link) as an :class:`EgoPose`."""
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    v, w = msg.twist.twist.linear, msg.twist.twist.angular
    return EgoPose(
        t_ns=t_ns,
        pose=Transform((float(p.x), float(p.y), float(p.z)), (float(q.x), float(q.y), float(q.z), float(q.w))),
        linear_velocity=(float(v.x), float(v.y), float(v.z)),
        yaw_rate=float(w.z),
    )


def ego_to_odometry(odom_cls: Any, ego: EgoPose, header: Any, child_frame_id: str = "base_link") -> Any:
    msg = odom_cls(header=header, child_frame_id=child_frame_id)
    t, q = ego.pose.translation, ego.pose.rotation
    msg.pose.pose.position.x, msg.pose.pose.position.y, msg.pose.pose.position.z = (float(x) for x in t)
    o = msg.pose.pose.orientation
    o.x, o.y, o.z, o.w = (float(x) for x in q)
    lin = msg.twist.twist.linear
    lin.x, lin.y, lin.z = (float(x) for x in ego.linear_velocity)
    msg.twist.twist.angular.z = float(ego.yaw_rate)
    return msg
