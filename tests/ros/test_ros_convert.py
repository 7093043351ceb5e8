"""Messages <-> samples with real ROS 2 message classes (no node): point fields by name, a missing field
named in the error, images, odometry, topics, and the diagnostics' levels."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import PIL.Image
import pytest
from builtin_interfaces.msg import Time
from nav_msgs.msg import Odometry
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, PointCloud2, PointField
from std_msgs.msg import Header

from perception._imageio import decode_image, encode_jpeg
from perception.config import RosConfig
from perception.errors import ConfigError, InputError
from perception.ros._convert import (
    calibration_mismatch,
    calibration_to_info,
    cloud_to_sample,
    compressed_to_sample,
    ego_to_odometry,
    odometry_to_ego,
    raw_to_sample,
    sample_to_cloud,
    stamp_ns,
    to_stamp,
)
from perception.ros._diagnostics import ERROR, INPUT_ERROR_LOG_PERIOD_NS, OK, WARN, DiagnosticsTracker
from perception.ros._topics import sensor_topics
from perception.types import (
    CameraCalibration,
    EgoPose,
    FrameResult,
    FrameStatus,
    LatencyTree,
    PointCloudSample,
    SensorResult,
    SensorSpec,
    SensorStatus,
    Transform,
)


def _header(t_ns: int = 1_700_000_000_123_456_789, frame_id: str = "radar_front") -> Header:
    return Header(stamp=to_stamp(Time, t_ns), frame_id=frame_id)


def _cloud(fields: list[tuple[str, str]], rows: np.ndarray, *, bigendian: bool = False) -> PointCloud2:
    """A PointCloud2 with ``fields`` (name, numpy type) packed in that order, plus 3 bytes of padding."""
    types = {"f4": 7, "f8": 8, "u2": 4, "i4": 5}
    order = ">" if bigendian else "<"
    dtype = np.dtype(
        {
            "names": [n for n, _ in fields],
            "formats": [order + t for _, t in fields],
            "offsets": list(np.cumsum([0] + [np.dtype(t).itemsize for _, t in fields])[:-1]),
            "itemsize": sum(np.dtype(t).itemsize for _, t in fields) + 3,
        }
    )
    packed = np.zeros(len(rows), dtype=dtype)
    for i, (name, _) in enumerate(fields):
        packed[name] = rows[:, i]
    return PointCloud2(
        header=_header(),
        height=1,
        width=len(rows),
        fields=[PointField(name=n, offset=int(dtype.fields[n][1]), datatype=types[t], count=1) for n, t in fields],
        is_bigendian=bigendian,
        point_step=dtype.itemsize,
        row_step=dtype.itemsize * len(rows),
        data=packed.tobytes(),
        is_dense=True,
    )


def test_stamps_round_trip_in_integer_nanoseconds() -> None:
    t = 1_700_000_000_999_999_999
    assert stamp_ns(to_stamp(Time, t)) == t


def test_a_frame_s_published_stamp_is_its_trigger_s_to_the_nanosecond() -> None:
    # The node passed ROS now - monotonic now to the live runtime as offset_ms (a float of some 1e12 ms,
    # rounded back to ns there) and added the measured integer back when publishing: 9955 of 10000
    # stamps came out up to 128 ns off their trigger's. A frame's host time is stamp + offset_ns (the
    # live runtime's time base); its published stamp is that plus what ros_time_base returns.
    import random

    from perception.config import LiveConfig
    from perception.live._assembler import TimeBase
    from perception.ros._node import ros_time_base

    rng = random.Random(1)
    for _ in range(2000):
        ros_now = 1_766_000_000_000_000_000 + rng.randrange(10**15)
        ros_minus_mono = ros_now - rng.randrange(10**9, 10**15)
        live, back = ros_time_base(LiveConfig(time_base="offset"), ros_minus_mono)
        assert abs(back - ros_minus_mono) < 1_000  # the offset measured, to a rounding of offset_ms
        stamp = ros_now - rng.randrange(10**8)
        host_t, jump = TimeBase(live).to_host("lidar", stamp, stamp - ros_minus_mono)
        assert not jump and host_t is not None
        assert host_t + back == stamp
    estimate = LiveConfig(time_base="estimate")
    assert ros_time_base(estimate, 123_456_789) == (estimate, 123_456_789)  # its own offsets: published as measured


def test_a_radar_cloud_is_read_by_field_name_whatever_the_layout_and_endianness() -> None:
    rows = np.array([[1.0, 2.0, 0.5, 3.25, 7.0], [4.0, -5.0, 0.0, -1.5, 12.0]])
    # Another driver's order and types, a renamed Doppler field and an extra field the kind ignores.
    fields = [("rcs", "f8"), ("y", "f4"), ("x", "f4"), ("ring", "u2"), ("z", "f4"), ("doppler", "f4")]
    order = [4, 1, 0, 2, 2, 3]
    for bigendian in (False, True):
        msg = _cloud(fields, rows[:, order], bigendian=bigendian)
        sample = cloud_to_sample(msg, "radar_front", "radar", 5, {"doppler": "radial_velocity"})
        assert sample.fields == ("x", "y", "z", "radial_velocity", "rcs")
        np.testing.assert_array_equal(sample.points, rows.astype(np.float32))
        assert (sample.t_ns, sample.frame_id) == (5, "radar_front")


def test_a_missing_point_field_is_an_input_error_naming_it_and_the_sensor() -> None:
    msg = _cloud([("x", "f4"), ("y", "f4"), ("z", "f4"), ("doppler", "f4")], np.zeros((3, 4)))
    with pytest.raises(InputError) as err:
        cloud_to_sample(msg, "radar_front", "radar", 0, {"doppler": "radial_velocity"})
    assert str(err.value).startswith("radar_front: PointCloud2 has no field rcs (it has: x, y, z, doppler;")
    renamed = _cloud(
        [("x", "f4"), ("y", "f4"), ("z", "f4"), ("radial_velocity", "f4"), ("rcs", "f4")], np.zeros((1, 5))
    )
    with pytest.raises(InputError, match=r"radar_front: PointCloud2 has no field doppler \(for radial_velocity\)"):
        cloud_to_sample(renamed, "radar_front", "radar", 0, {"doppler": "radial_velocity"})


def test_a_cloud_sample_round_trips_through_point_cloud2() -> None:
    pts = np.arange(20, dtype=np.float32).reshape(5, 4)
    sample = PointCloudSample("lidar_top", 7, "lidar_top", pts, ("x", "y", "z", "intensity"))
    msg = sample_to_cloud(PointCloud2, PointField, sample, _header(7, "lidar_top"))
    back = cloud_to_sample(msg, "lidar_top", "lidar", 7, {})
    np.testing.assert_array_equal(back.points, pts)


def test_images_compressed_and_raw() -> None:
    rgb = np.zeros((4, 6, 3), np.uint8)
    rgb[..., 0] = 200  # red
    jpeg = encode_jpeg(rgb, 95)
    msg = CompressedImage(header=_header(frame_id="cam"), format="rgb8; jpeg compressed bgr8", data=jpeg)
    sample = compressed_to_sample(msg, "cam_front", 3)
    assert (sample.format, sample.data, sample.frame_id) == ("jpeg", jpeg, "cam")
    bgr = rgb[:, :, ::-1].copy()
    raw = Image(header=_header(), height=4, width=6, encoding="bgr8", step=6 * 3 + 2)
    raw.data = np.pad(bgr.reshape(4, 18), ((0, 0), (0, 2))).tobytes()  # rows padded to the step
    decoded = decode_image(raw_to_sample(raw, "cam_front", 3).data)
    assert decoded.shape == (4, 6, 3) and abs(int(decoded[..., 0].mean()) - 200) < 8
    assert int(decoded[..., 2].max()) < 30  # red stayed red: bgr8 was swapped
    with pytest.raises(InputError, match="cam_front: unsupported Image encoding '16UC1'"):
        raw_to_sample(Image(header=_header(), height=1, width=1, encoding="16UC1", step=2), "cam_front", 0)


def test_a_compressed_image_of_no_format_is_what_its_signature_says_as_everywhere() -> None:
    # An empty format is read by the data's signature, the one the importers and image_size read
    # (perception._imageio.image_format): 0xFF 0xD8 followed by no marker was a JPEG here alone, failing
    # later in the model's decode as the camera's fault.
    jpeg = encode_jpeg(np.zeros((4, 6, 3), np.uint8))
    png = io.BytesIO()
    PIL.Image.new("RGB", (6, 4)).save(png, format="PNG")
    for data, fmt in ((jpeg, "jpeg"), (png.getvalue(), "png")):
        msg = CompressedImage(header=_header(), format="", data=data)
        assert compressed_to_sample(msg, "cam_front", 0).format == fmt
    msg = CompressedImage(header=_header(), format="", data=b"\xff\xd8" + jpeg[3:])
    with pytest.raises(InputError, match="cam_front: unsupported CompressedImage format ''"):
        compressed_to_sample(msg, "cam_front", 0)


@pytest.mark.parametrize(
    ("height", "width", "step", "size", "error"),
    [
        (0, 0, 0, 0, r"cam_front: Image height and width 0 \(0x0 rgb8\): no pixels"),  # the review's message
        (0, 4, 12, 0, r"cam_front: Image height 0 \(4x0 rgb8\): no pixels"),
        (4, 0, 12, 48, r"cam_front: Image width 0 \(0x4 rgb8\): no pixels"),
        (1, 65_501, 3 * 65_501, 3 * 65_501, r"cam_front: Image image of 65501x1 exceeds the limit"),  # JPEG's
        (2, 4, 11, 24, r"cam_front: Image step 11 is shorter than a row of 4 rgb8 pixels"),
        (2, 4, 12, 23, r"cam_front: Image data has 23 bytes, 2 rows of step 12 need 24"),
    ],
)
def test_a_raw_image_without_pixels_over_the_size_limit_or_short_is_an_input_error_naming_the_field(
    height: int, width: int, step: int, size: int, error: str
) -> None:
    msg = Image(header=_header(), height=height, width=width, encoding="rgb8", step=step, data=bytes(size))
    with pytest.raises(InputError, match=error):
        raw_to_sample(msg, "cam_front", 0)


def test_camera_info_from_the_rig_matches_it_and_a_different_one_is_named() -> None:
    cal = CameraCalibration(640, 360, (500.0, 0.0, 320.0, 0.0, 500.0, 180.0, 0.0, 0.0, 1.0))
    info = calibration_to_info(CameraInfo, cal, _header())
    assert calibration_mismatch(info, cal) is None
    other = dataclasses.replace(cal, k=(510.0, 0.0, 320.0, 0.0, 500.0, 180.0, 0.0, 0.0, 1.0))
    assert calibration_mismatch(info, other) == "camera_info fx 500.0 differs from the rig's 510.0"
    info.k[4] = float("nan")
    assert calibration_mismatch(info, cal) == "camera_info fy nan differs from the rig's 500.0"


def test_odometry_round_trips_an_ego_pose() -> None:
    ego = EgoPose(5, Transform((1.0, 2.0, 0.5), (0.0, 0.0, 0.6, 0.8)), (3.0, 0.5, 0.0), 0.25)
    msg = ego_to_odometry(Odometry, ego, _header(5, "map"))
    assert msg.child_frame_id == "base_link"
    assert odometry_to_ego(msg, 5) == ego


def _rig() -> dict[str, SensorSpec]:
    cal = CameraCalibration(64, 48, (50.0, 0.0, 32.0, 0.0, 50.0, 24.0, 0.0, 0.0, 1.0))
    return {
        "lidar_top": SensorSpec("lidar_top", "lidar", "lidar_top", Transform(), "/x"),
        "cam_front": SensorSpec("cam_front", "camera", "cam_front_optical", Transform(), "/y", cal),
    }


def test_topics_default_from_the_sensor_names_and_the_profile_overrides_them() -> None:
    topics = sensor_topics(_rig(), RosConfig())
    assert topics["lidar_top"].data == "/sensors/lidar_top/points" and topics["lidar_top"].image is None
    cam = topics["cam_front"]
    assert (cam.data, cam.image, cam.camera_info) == (
        "/sensors/cam_front/image/compressed",
        "compressed",
        "/sensors/cam_front/camera_info",
    )
    raw = sensor_topics(_rig(), RosConfig(topics={"cam_front": "/sensing/front/image_raw"}))["cam_front"]
    assert (raw.image, raw.camera_info) == ("raw", "/sensing/front/camera_info")
    with pytest.raises(ConfigError, match=r"p.yaml: ros.topics: no such sensor in the rig: sonar \(it has: lidar_top"):
        sensor_topics(_rig(), RosConfig(topics={"sonar": "/s"}), file="p.yaml")


def test_a_default_topic_that_is_no_ros_2_topic_name_says_which_key_to_set() -> None:
    # A sensor named with a '-' made a default topic rclpy refuses: the player's create_publisher raised it.
    rig = {"front-lidar": SensorSpec("front-lidar", "lidar", "front_lidar", Transform(), "/x")}
    with pytest.raises(ConfigError, match=r"p.yaml: ros.topics.front-lidar: must be a ROS 2 topic name.*set the"):
        sensor_topics(rig, RosConfig(), file="p.yaml")
    taken = sensor_topics(rig, RosConfig(topics={"front-lidar": "/front_lidar/points"}))
    assert taken["front-lidar"].data == "/front_lidar/points"


def test_the_profile_s_topic_names_are_the_ones_rclpy_takes() -> None:
    # One check of a topic name, in the config (which does not import rclpy): it takes what rclpy takes.
    import random

    from rclpy.exceptions import InvalidTopicNameException
    from rclpy.validate_full_topic_name import validate_full_topic_name

    rng = random.Random(5)
    chars = "/a_Z09 -~{}.\u00e4"
    names = ["/" + "a" * n for n in (246, 247, 248)]
    names += [
        ("/" if rng.random() < 0.7 else "") + "".join(rng.choices(chars, k=rng.randrange(9))) for _ in range(5000)
    ]
    for name in names:
        try:
            validate_full_topic_name(name)
            rclpy_takes = True
        except InvalidTopicNameException:
            rclpy_takes = False
        try:
            RosConfig(odometry_topic=name)
            taken = True
        except ValueError:
            taken = False
        assert taken == rclpy_takes, name


def _result(i: int, lidar: SensorStatus, *, missed: bool = False) -> FrameResult:
    sensors = {
        "lidar_top": SensorResult("lidar_top", lidar, error="no sample" if lidar is SensorStatus.MISSING else None),
        "cam_front": SensorResult("cam_front", SensorStatus.OK),
    }
    return FrameResult(i, i, FrameStatus.OK, sensors, deadline_missed=missed)


def test_diagnostics_levels_follow_the_configured_rates_over_the_window() -> None:
    ros = RosConfig(diagnostics_window=10, warn_rate=0.2, error_rate=0.5)
    diag = DiagnosticsTracker("perception_fusion", ["lidar_top", "cam_front"], ros)
    for i in range(10):
        diag.add(_result(i, SensorStatus.OK))
    lidar, cam, _, budget = diag.statuses(None)
    assert (lidar.level, cam.level, budget.level) == (OK, OK, OK)
    for i in range(2):
        diag.add(_result(10 + i, SensorStatus.MISSING, missed=True))
    lidar, cam, _, budget = diag.statuses({"latency_ms": {"p50": 80.0, "p99": 120.0}, "deadline_misses": 2})
    assert (lidar.level, lidar.message) == (WARN, "missing in 20% of the last 10 frames")
    assert lidar.values["missing"] == "2" and lidar.values["ok"] == "10" and lidar.values["last_error"] == "no sample"
    assert cam.level == OK
    assert (
        budget.level == WARN and budget.values["latency_p99_ms"] == "120.0" and budget.values["deadline_misses"] == "2"
    )
    for i in range(3):
        diag.add(_result(12 + i, SensorStatus.LATE))
    lidar, _, _, _ = diag.statuses(None)
    assert (lidar.level, lidar.message) == (ERROR, "late in 50% of the last 10 frames")
    diag.input_error("cam_front", "cam_front: cannot decode image")
    _, cam, _, _ = diag.statuses(None)
    assert (cam.level, cam.message, cam.values["input_errors"]) == (
        ERROR,
        "input error: cam_front: cannot decode image",
        "1",
    )
    _, cam, _, _ = diag.statuses(None)
    assert cam.level == OK  # the input is back (no failing message since the last report)


def test_input_errors_are_counted_each_and_logged_once_per_sensor_kind_and_period() -> None:
    diag = DiagnosticsTracker("perception_fusion", ["lidar_top", "cam_front"], RosConfig())
    t0, period = 5_000_000_000, INPUT_ERROR_LOG_PERIOD_NS
    # the first of a kind is logged; the next ones within the period are counted and held back
    assert diag.input_error("lidar_top", "lidar_top: PointCloud2: data has 3 bytes", now_ns=t0) == 1
    assert [diag.input_error("lidar_top", f"lidar_top: {i}", now_ns=t0 + i) for i in range(1, 4)] == [0, 0, 0]
    # another kind of error, another sensor, the odometry: each logged on its own
    assert diag.input_error("lidar_top", "lidar_top: IndexError", kind="IndexError", now_ns=t0 + 5) == 1
    assert diag.input_error("cam_front", "cam_front: Image height 0", now_ns=t0 + 5) == 1
    assert diag.odometry_error("odometry: ego pose has a non-finite translation", now_ns=t0 + 5) == 1
    # after the period, one line says how many since the last
    assert diag.input_error("lidar_top", "lidar_top: 5", now_ns=t0 + period) == 4
    lidar, cam, odometry, _ = diag.statuses(None)
    assert (lidar.level, lidar.values["input_errors"], lidar.values["last_error"]) == (ERROR, "6", "lidar_top: 5")
    assert (cam.level, cam.values["input_errors"]) == (ERROR, "1")
    assert odometry.name == "perception_fusion: odometry"
    assert (odometry.level, odometry.message, odometry.values["input_errors"]) == (
        ERROR,
        "input error: odometry: ego pose has a non-finite translation",
        "1",
    )
    _, _, odometry, _ = diag.statuses(None)
    assert (odometry.level, odometry.message, odometry.values["input_errors"]) == (OK, "ok", "1")


def test_the_ros_section_of_the_profile_is_checked() -> None:
    with pytest.raises(ValueError, match="error_rate: must be >= warn_rate"):
        RosConfig(warn_rate=0.5, error_rate=0.2)
    with pytest.raises(ValueError, match=r"topics.lidar_top: must be an absolute topic name"):
        RosConfig(topics={"lidar_top": "points"})


def test_processing_time_is_from_the_trigger_s_arrival_and_none_for_a_timer_frame_never_processed() -> None:
    from perception.ros._node import frame_processing_ms

    processed = FrameResult(7, 0, FrameStatus.DEGRADED, {}, latency=LatencyTree(total_ns=25_000_000))
    dropped = FrameResult(8, 0, FrameStatus.DROPPED, {}, reason="queue overflow")
    now = 10_000_000_000
    # the trigger message's arrival is known: from it, whatever became of the frame (Autoware's convention)
    assert frame_processing_ms(dropped, now - 3_000_000, now) == pytest.approx(3.0)
    assert frame_processing_ms(processed, now - 40_000_000, now) == pytest.approx(40.0)
    # a frame the timer opened (no trigger message): its own processing time, none if it had none
    assert frame_processing_ms(processed, None, now) == pytest.approx(25.0)
    assert frame_processing_ms(dropped, None, now) is None
