"""The node never dies of its input: every subscribed message type (PointCloud2, Image, CompressedImage,
CameraInfo, Odometry) fuzzed with hypothesis through the callbacks the node subscribes
(:meth:`FusionNode.inputs`: what rclpy calls with each message), built from the real message classes.

Whatever the message, the callback returns, and the message is either handed to the live runtime as a
sample (or an ego pose) its intake check takes, or counted against its sensor (the odometry) as an input
error in what ``/diagnostics`` says -- never both, never neither. No server: the live runtime is a
recorder of what the node hands it (the node over real loopback is ``test_node.py``'s)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nav_msgs.msg import Odometry
from ros_helpers import DRIVE, write_profile
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, PointCloud2, PointField
from std_msgs.msg import Header

from perception._imageio import encode_jpeg
from perception.config import load_config
from perception.kinds import ego_problem, kind_def, sample_problem
from perception.ros._diagnostics import DiagnosticsTracker
from perception.ros._topics import sensor_topics
from perception.types import EgoPose

#: Bounded and derandomized: the same examples on every run (CI on a busy 2-core host), each a few ms.
FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

UINT32 = 2**32 - 1
RAW_TOPIC = "/sensors/cam_back/image_raw"  # cam_back subscribed raw, cam_front compressed


@dataclasses.dataclass
class Recorder:
    """Stands in for the live runtime: what the node hands it."""

    items: list[Any] = dataclasses.field(default_factory=list)

    def push(self, sample: Any, arrived: tuple[int, int] | None = None) -> None:  # (LiveRuntime.push's)
        self.items.append(sample)

    def push_ego(self, pose: EgoPose, arrived: tuple[int, int] | None = None) -> None:
        self.items.append(pose)


@dataclasses.dataclass
class Inputs:
    node: Any  # FusionNode, configured without a server (topics, rig, diagnostics)
    callbacks: dict[str, tuple[type, str | None, Callable[[Any], None]]]  # topic -> (type, sensor, callback)

    def on(self, msg_type: type, sensor: str | None) -> tuple[str, Callable[[Any], None]]:
        for topic, (t, s, cb) in self.callbacks.items():
            if t is msg_type and s == sensor:
                return topic, cb
        raise AssertionError(f"the node does not subscribe a {msg_type.__name__} of {sensor}")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Inputs]:
    import rclpy

    from perception.ros._node import FusionNode, rig_session

    profile = write_profile(tmp_path_factory.mktemp("inputs") / "ros.yaml")
    session = rig_session(DRIVE, load_config(profile))
    config, rig = session.config, dict(session.rig)
    context = rclpy.Context()
    rclpy.init(context=context)
    node = FusionNode(context=context)
    try:
        # What configure sets up, but the server (the subscriptions' callbacks need nothing else).
        node.config, node.rig, node.session = config, rig, session
        node.topics = sensor_topics(rig, dataclasses.replace(config.ros, topics={"cam_back": RAW_TOPIC}))
        node.odometry_topic = config.ros.odometry_topic
        node._diag = DiagnosticsTracker(node.get_name(), list(node.topics), config.ros)
        by_topic = {t.data: t.sensor for t in node.topics.values()}
        by_topic.update({t.camera_info: t.sensor for t in node.topics.values() if t.camera_info})
        callbacks = {topic: (msg_type, by_topic.get(topic), cb) for msg_type, topic, cb in node.inputs()}
        yield Inputs(node, callbacks)
    finally:
        node.destroy_node()
        context.try_shutdown()


def input_errors(node: Any, sensor: str | None) -> int:
    """The sensor's (None: the odometry's) input errors as the next /diagnostics says them."""
    name = f"perception_fusion: sensor {sensor}" if sensor is not None else "perception_fusion: odometry"
    (status,) = [s for s in node._diag.statuses(None) if s.name == name]
    return int(status.values["input_errors"])


def deliver(inputs: Inputs, msg: Any, sensor: str | None) -> tuple[list[Any], int]:
    """``msg`` to the node's callback for its type and sensor, as rclpy calls it: what it handed to the
    live runtime and how many input errors it counted."""
    _, callback = inputs.on(type(msg), sensor)
    live = Recorder()
    inputs.node.live = live
    before = input_errors(inputs.node, sensor)
    callback(msg)  # raising here is what stopped the node (the executor's spin_once)
    return live.items, input_errors(inputs.node, sensor) - before


def taken_or_counted(inputs: Inputs, msg: Any, sensor: str) -> None:
    items, counted = deliver(inputs, msg, sensor)
    assert (len(items), counted) in ((1, 0), (0, 1)), (items, counted)
    if items:
        (sample,) = items
        assert sample.sensor == sensor
        assert sample_problem(sample, kind_def(inputs.node.rig[sensor].kind)) is None


@pytest.mark.parametrize("fmt", ["tiff", "webp", "16UC1; compressedDepth png", "bgr8; tiff compressed bgr8", "theora"])
def test_a_compressed_image_of_another_format_is_refused_naming_it(
    inputs: Inputs, fmt: str, capfd: pytest.CaptureFixture[str]
) -> None:
    # Before: any format but png was labelled jpeg and passed on (a depth image's "compressedDepth png" as
    # png): it failed later, in the server's decode, counted against the camera as its model's failure.
    # Now refused where it arrives, counted as the camera's input error, the format and topic named.
    topic, _ = inputs.on(CompressedImage, "cam_front")
    header = Header(stamp=Time(sec=1_700_000_000), frame_id="cam_front")
    inputs.node._diag._sensors["cam_front"].logged.clear()  # logged now, not held back by an earlier error
    capfd.readouterr()
    items, counted = deliver(inputs, CompressedImage(header=header, format=fmt, data=JPEG), "cam_front")
    assert (items, counted) == ([], 1)
    (status,) = [s for s in inputs.node._diag.statuses(None) if s.name == "perception_fusion: sensor cam_front"]
    assert status.values["last_error"] == f"cam_front: unsupported CompressedImage format {fmt!r} (jpeg or png)"
    _, err = capfd.readouterr()  # rclpy's logger writes to the process's stderr
    assert f"cam_front: unsupported CompressedImage format {fmt!r} (jpeg or png) [CompressedImage on {topic}]" in err


def test_a_compressed_image_without_a_format_is_known_by_its_signature(inputs: Inputs) -> None:
    header = Header(stamp=Time(sec=1_700_000_000), frame_id="cam_front")
    items, counted = deliver(inputs, CompressedImage(header=header, format="", data=JPEG), "cam_front")
    assert counted == 0 and [s.format for s in items] == ["jpeg"]


# -- strategies: real messages, in the ranges their wire types have -----------------------------------------
u32 = st.integers(0, UINT32)
sizes = st.one_of(st.integers(0, 48), st.sampled_from([65_500, 65_501, 2**31, UINT32]), u32)
stamps = st.one_of(
    st.builds(Time, sec=st.integers(1_600_000_000, 1_900_000_000), nanosec=st.integers(0, 999_999_999)),
    st.builds(Time, sec=st.integers(-(2**31), 2**31 - 1), nanosec=u32),
)
headers = st.builds(Header, stamp=stamps, frame_id=st.text(max_size=12))
floats = st.floats(allow_nan=True, allow_infinity=True)


def _cloud(kind: str, rows: np.ndarray, header: Header) -> PointCloud2:
    names = kind_def(kind).point_fields
    pts = np.ascontiguousarray(rows[:, : len(names)], dtype="<f4")
    return PointCloud2(
        header=header,
        height=1,
        width=pts.shape[0],
        fields=[PointField(name=n, offset=4 * i, datatype=7, count=1) for i, n in enumerate(names)],
        is_bigendian=False,
        point_step=4 * len(names),
        row_step=4 * len(names) * pts.shape[0],
        data=pts.tobytes(),
        is_dense=True,
    )


@st.composite
def clouds(draw: st.DrawFn, kind: str) -> PointCloud2:
    """A cloud of the kind's fields with one of its header's fields, fields or data broken -- or anything."""
    names = list(kind_def(kind).point_fields)
    if draw(st.booleans()):  # anything the message type can hold
        fields = draw(
            st.lists(
                st.builds(
                    PointField,
                    name=st.one_of(st.sampled_from([*names, "doppler", ""]), st.text(max_size=6)),
                    offset=st.one_of(st.integers(0, 24), u32),
                    datatype=st.integers(0, 255),
                    count=st.one_of(st.integers(0, 3), u32),
                ),
                max_size=7,
            )
        )
        return PointCloud2(
            header=draw(headers),
            height=draw(sizes),
            width=draw(sizes),
            fields=fields,
            is_bigendian=draw(st.booleans()),
            point_step=draw(sizes),
            row_step=draw(sizes),
            data=draw(st.binary(max_size=256)),
            is_dense=draw(st.booleans()),
        )
    n = draw(st.integers(0, 12))
    rows = np.array(draw(st.lists(floats, min_size=n * len(names), max_size=n * len(names))), np.float64)
    with np.errstate(over="ignore"):
        msg = _cloud(kind, rows.reshape(n, len(names)), draw(headers))
    broken = draw(st.sampled_from(["none", "data", "height", "width", "point_step", "row_step", "field", "type"]))
    if broken == "data":  # truncated
        msg.data = bytes(msg.data)[: draw(st.integers(0, max(0, len(msg.data) - 1)))]
    elif broken in ("height", "width", "point_step", "row_step"):
        setattr(msg, broken, draw(sizes))
    elif broken == "field":
        del msg.fields[draw(st.integers(0, len(names) - 1))]
    elif broken == "type":
        f = msg.fields[draw(st.integers(0, len(names) - 1))]
        f.datatype, f.offset = draw(st.integers(0, 255)), draw(st.one_of(st.integers(0, 24), u32))
    return msg


@pytest.mark.parametrize(("sensor", "kind"), [("lidar_top", "lidar"), ("radar_front", "radar")])
def test_any_point_cloud2_is_taken_or_counted(inputs: Inputs, sensor: str, kind: str) -> None:
    @FUZZ
    @given(msg=clouds(kind))
    def check(msg: PointCloud2) -> None:
        taken_or_counted(inputs, msg, sensor)

    check()


ENCODINGS = ["rgb8", "bgr8", "mono8", "rgba8", "bgra8"]
CHANNELS = {"rgb8": 3, "bgr8": 3, "mono8": 1, "rgba8": 4, "bgra8": 4}


@st.composite
def raw_images(draw: st.DrawFn) -> Image:
    """A raw image a few bytes off its layout (or right), of no pixels, too wide -- or anything."""
    header = draw(headers)
    if draw(st.booleans()):
        return Image(
            header=header,
            height=draw(sizes),
            width=draw(sizes),
            encoding=draw(st.one_of(st.sampled_from([*ENCODINGS, "16UC1", "yuv422", ""]), st.text(max_size=8))),
            is_bigendian=draw(st.integers(0, 255)),
            step=draw(sizes),
            data=draw(st.binary(max_size=2048)),
        )
    encoding = draw(st.sampled_from(ENCODINGS))
    h, w = draw(st.integers(0, 16)), draw(st.one_of(st.integers(0, 16), st.sampled_from([65_500, 65_501])))
    step = max(0, w * CHANNELS[encoding] + draw(st.integers(-2, 3)))
    size = max(0, min(h * step + draw(st.integers(-3, 3)), 1 << 20))
    pattern = draw(st.binary(min_size=1, max_size=16))  # the pixels matter less than the layout
    data = (pattern * (size // len(pattern) + 1))[:size]
    return Image(header=header, height=h, width=w, encoding=encoding, step=step, data=data)


@FUZZ
@given(msg=raw_images())
def test_any_raw_image_is_taken_or_counted(inputs: Inputs, msg: Image) -> None:
    taken_or_counted(inputs, msg, "cam_back")


def _png_header(width: int, height: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR" + width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes(8)


JPEG = encode_jpeg(np.full((8, 12, 3), 90, np.uint8), 90)


@st.composite
def compressed_images(draw: st.DrawFn) -> CompressedImage:
    """A real JPEG cut or with bytes changed, a PNG header of any size, no data -- or any bytes."""
    data = draw(
        st.one_of(
            st.binary(max_size=512),
            st.builds(lambda n: JPEG[:n], st.integers(0, len(JPEG))),
            st.builds(
                lambda i, b: JPEG[:i] + bytes([b]) + JPEG[i + 1 :], st.integers(0, len(JPEG) - 1), st.integers(0, 255)
            ),
            st.builds(lambda w, h, tail: _png_header(w, h) + tail, u32, u32, st.binary(max_size=64)),
        )
    )
    fmt = draw(st.one_of(st.sampled_from(["jpeg", "png", "rgb8; jpeg compressed bgr8", ""]), st.text(max_size=12)))
    return CompressedImage(header=draw(headers), format=fmt, data=data)


@FUZZ
@given(msg=compressed_images())
def test_any_compressed_image_is_taken_or_counted(inputs: Inputs, msg: CompressedImage) -> None:
    taken_or_counted(inputs, msg, "cam_front")


@FUZZ
@given(
    header=headers,
    width=sizes,
    height=sizes,
    k=st.lists(floats, min_size=9, max_size=9),
    d=st.lists(floats, max_size=8),
    model=st.text(max_size=12),
    sensor=st.sampled_from(["cam_front", "cam_back"]),
)
def test_any_camera_info_is_checked_without_an_exception(
    inputs: Inputs, header: Header, width: int, height: int, k: list[float], d: list[float], model: str, sensor: str
) -> None:
    msg = CameraInfo(header=header, width=width, height=height, k=k, d=d, distortion_model=model)
    inputs.node._info_checked.clear()  # each is the sensor's first (the one compared with the rig)
    items, counted = deliver(inputs, msg, sensor)
    assert (items, counted) == ([], 0)  # a disagreement is a warning: the rig's calibration is used


@st.composite
def odometries(draw: st.DrawFn) -> Odometry:
    """A pose and twist with any floats (NaN, inf, the zero quaternion), or unit-quaternion finite ones."""
    msg = Odometry(header=draw(headers), child_frame_id=draw(st.text(max_size=8)))
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    v, w = msg.twist.twist.linear, msg.twist.twist.angular
    if draw(st.booleans()):
        p.x, p.y, p.z, q.x, q.y, q.z, q.w, v.x, v.y, v.z, w.z = draw(st.lists(floats, min_size=11, max_size=11))
        return msg
    finite = st.floats(-1e6, 1e6)
    p.x, p.y, p.z, v.x, v.y, v.z, w.z = draw(st.lists(finite, min_size=7, max_size=7))
    yaw = draw(st.floats(-math.pi, math.pi))
    q.z, q.w = math.sin(yaw / 2), math.cos(yaw / 2)
    return msg


@FUZZ
@given(msg=odometries())
def test_any_odometry_is_taken_or_counted(inputs: Inputs, msg: Odometry) -> None:
    items, counted = deliver(inputs, msg, None)
    assert (len(items), counted) in ((1, 0), (0, 1)), (items, counted)
    if items:
        assert ego_problem(items[0]) is None


def test_an_input_error_is_reported_in_at_most_400_characters(inputs: Inputs) -> None:
    """A cloud of 2,000 fields, each named in the error: its names are the publisher's to choose."""
    fields = [PointField(name=f"field_{i:04d}", offset=0, datatype=7, count=1) for i in range(2000)]
    msg = PointCloud2(header=Header(), height=1, width=1, fields=fields, point_step=4, row_step=4, data=bytes(4))
    _, callback = inputs.on(PointCloud2, "lidar_top")
    callback(msg)
    (lidar,) = [s for s in inputs.node._diag.statuses(None) if s.name == "perception_fusion: sensor lidar_top"]
    error = lidar.values["last_error"]
    assert error.startswith("lidar_top: PointCloud2 has no field x, y, z, intensity (it has: field_0000, ")
    assert len(error) == 400 and error.endswith("...")


def test_the_node_subscribes_each_sensor_s_topics_and_the_odometry(inputs: Inputs) -> None:
    """What the fuzzing covers is what activate subscribes: every callback, of every message type."""
    got = {(t.__name__, s) for t, s, _ in inputs.callbacks.values()}
    assert got == {
        ("PointCloud2", "lidar_top"),
        ("PointCloud2", "radar_front"),
        ("PointCloud2", "radar_rear"),
        ("CompressedImage", "cam_front"),
        ("CameraInfo", "cam_front"),
        ("Image", "cam_back"),
        ("CameraInfo", "cam_back"),
        ("Odometry", None),
    }
    assert RAW_TOPIC in inputs.callbacks
