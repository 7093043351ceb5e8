"""The live publisher's wire (perception.live._publisher): what ``receive`` reads back from a socket, whole
or cut, through its buffered reader; a point cloud read into the array the sample keeps, and a cloud whose
bytes do not hold its shape, or that the stream cuts, a DriveError naming what was wrong."""

from __future__ import annotations

import json
import socket
import threading

import numpy as np
import pytest

from perception.errors import DriveError
from perception.live._publisher import _LEN, _encode, receive
from perception.types import EgoPose, ImageSample, PointCloudSample, Sample, Transform


def _received(data: bytes, died: dict[str, str] | None = None) -> list[Sample | EgoPose]:
    """What ``receive`` yields for ``data`` written to the other end of a socket (then closed); ``died``
    gets the sensors whose publisher died (error messages)."""
    died = {} if died is None else died
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    def write() -> None:
        with theirs:
            theirs.sendall(data)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        with ours:
            return list(receive(ours, died.__setitem__))
    finally:
        writer.join()


def _end() -> bytes:
    head = json.dumps({"type": "end", "size": 0}).encode()
    return _LEN.pack(len(head)) + head


def test_samples_and_poses_come_back_as_they_were_sent() -> None:
    rng = np.random.default_rng(5)
    big = rng.random((300_000, 4), dtype=np.float32)  # 4.8 MB: read a MiB at a time
    items: list[Sample | EgoPose] = [
        EgoPose(1, Transform((1.0, 2.0, 3.0), (0.0, 0.0, 0.6, 0.8)), (4.0, 0.5, 0.0), 0.25),
        PointCloudSample("lidar_top", 2, "lidar_top", big, ("x", "y", "z", "i"), 7),
        ImageSample("cam_front", 3, "cam_front", bytes(range(256)) * 40, "jpeg", 8),
        EgoPose(4, Transform.identity()),
        PointCloudSample("radar_front", 5, "radar_front", np.zeros((0, 5), np.float32), ("x", "y", "z", "v", "r")),
    ]
    kinds = {"lidar_top": "lidar", "cam_front": "camera", "radar_front": "radar"}
    data = b"".join(_encode(it, kinds.get(getattr(it, "sensor", ""), "ego")) for it in items) + _end()
    got = _received(data + b"after the end: never read")
    assert len(got) == len(items)
    for sent, back in zip(items, got, strict=True):
        assert type(back) is type(sent)
        if isinstance(sent, PointCloudSample):
            assert isinstance(back, PointCloudSample)
            assert (back.sensor, back.t_ns, back.fields, back.seq) == (sent.sensor, sent.t_ns, sent.fields, sent.seq)
            np.testing.assert_array_equal(back.points, sent.points)
        else:
            assert back == sent
    unended = _received(data[: -len(_end())])  # the stream closed without its end message: the same items
    assert [(type(x), x.t_ns) for x in unended] == [(type(x), x.t_ns) for x in items]


def test_an_error_message_names_the_sensor_whose_publisher_died_and_the_stream_goes_on() -> None:
    head = json.dumps({"type": "error", "sensor": "radar_rear", "error": "ValueError: corrupt", "size": 0}).encode()
    pose = EgoPose(4, Transform.identity())
    died: dict[str, str] = {}
    got = _received(_LEN.pack(len(head)) + head + _encode(pose, "ego") + _end(), died)
    assert got == [pose] and died == {"radar_rear": "ValueError: corrupt"}


@pytest.mark.parametrize(
    ("cut", "what"),
    [(lambda msg: msg[:6], "inside a message header"), (lambda msg: msg[:-1], "inside a message payload")],
)
def test_a_stream_cut_inside_a_message_says_where(cut: object, what: str) -> None:
    msg = _encode(ImageSample("cam_front", 3, "cam_front", b"\xff" * 5000, "jpeg", 1), "camera")
    with pytest.raises(DriveError, match=what):
        _received(cut(msg))  # type: ignore[operator]


def test_a_header_claiming_a_huge_payload_allocates_only_what_arrives() -> None:
    head = json.dumps({"type": "sample", "sensor": "cam_front", "t_ns": 1, "frame_id": "c", "seq": 0,
                       "format": "jpeg", "size": 1 << 40}).encode()  # fmt: skip
    with pytest.raises(DriveError, match="inside a message payload"):  # not a MemoryError for 1 TiB
        _received(_LEN.pack(len(head)) + head + b"\xff" * 1000)


def _cloud_message(shape: list[int], payload: bytes) -> bytes:
    header = {"type": "sample", "kind": "lidar", "sensor": "lidar_top", "t_ns": 1, "frame_id": "l", "seq": 0}
    head = json.dumps({**header, "fields": ["x", "y", "z", "i"], "shape": shape, "size": len(payload)}).encode()
    return _LEN.pack(len(head)) + head + payload


def test_a_received_cloud_is_a_read_only_array_of_its_own_with_the_points_sent() -> None:
    points = np.arange(27_535 * 4, dtype=np.float32).reshape(27_535, 4)  # the bundled drive's lidar sweep
    (back,) = _received(_encode(PointCloudSample("lidar_top", 2, "lidar_top", points, ("x", "y", "z", "i")), "lidar"))
    assert isinstance(back, PointCloudSample)
    np.testing.assert_array_equal(back.points, points)
    assert back.points.dtype == np.float32 and back.points.base is None and not back.points.flags.writeable


@pytest.mark.parametrize(("shape", "nbytes"), [([10, 4], 156), ([10, 4], 164), ([40], 160), ([-10, -4], 160)])
def test_a_cloud_whose_bytes_do_not_hold_its_shape_names_the_sensor(shape: list[int], nbytes: int) -> None:
    with pytest.raises(DriveError, match="point cloud of shape") as err:
        _received(_cloud_message(shape, b"\0" * nbytes))
    assert err.value.sensor == "lidar_top"


def test_a_cloud_cut_inside_its_points_says_so() -> None:
    msg = _cloud_message([1000, 4], b"\0" * 16_000)
    with pytest.raises(DriveError, match="inside a message payload"):
        _received(msg[:-100])


def _message(head: bytes, payload: bytes = b"") -> bytes:
    return _LEN.pack(len(head)) + head + payload


_IMAGE = {"type": "sample", "sensor": "cam_front", "t_ns": 1, "frame_id": "c", "seq": 0, "format": "jpeg", "size": 3}
_EGO = {"type": "ego", "t_ns": 1, "translation": [0, 0, 0], "rotation": [0, 0, 0, 1], "linear_velocity": [0, 0, 0]}


@pytest.mark.parametrize(
    ("message", "what", "sensor"),
    [
        (_message(b"{not json"), r"malformed message: its header is not a JSON object", None),
        (_message(b"\xff\xfe{"), r"malformed message: its header is not a JSON object", None),
        (_message(b"[1, 2]"), r"malformed message: its header is not a JSON object \(a list\)", None),
        (
            _message(json.dumps({k: v for k, v in _IMAGE.items() if k != "t_ns"}).encode(), b"abc"),
            "no 't_ns'",
            "cam_front",
        ),
        (_message(json.dumps({**_IMAGE, "t_ns": "soon"}).encode(), b"abc"), "malformed sample message", "cam_front"),
        (_message(json.dumps({**_IMAGE, "size": "3"}).encode(), b"abc"), None, None),  # a number as text: read
        (_message(json.dumps({**_IMAGE, "size": [3]}).encode(), b"abc"), "malformed sample message", "cam_front"),
        (_message(json.dumps(_EGO).encode()), "malformed ego message: no 'yaw_rate'", None),
        (_message(json.dumps({**_EGO, "yaw_rate": 0.0, "rotation": 7}).encode()), "malformed ego message", None),
    ],
)
def test_a_malformed_message_is_a_drive_error_saying_what_was_wrong(
    message: bytes, what: str | None, sensor: str | None
) -> None:
    # Before: a header that is not JSON, or lacks a field, escaped as JSONDecodeError, KeyError or TypeError
    if what is None:
        (image,) = _received(message + _end())
        assert isinstance(image, ImageSample) and image.data == b"abc"
        return
    with pytest.raises(DriveError, match=what) as err:
        _received(message + _end())
    assert err.value.topic == "live" and err.value.sensor == sensor
