"""Point clouds on the live publisher's wire: read into the array the sample keeps, and a cloud whose
bytes do not hold its shape, or that the stream cuts, is a DriveError naming what was wrong."""

from __future__ import annotations

import json
import socket
import threading

import numpy as np
import pytest

from perception.errors import DriveError
from perception.live._publisher import _LEN, _encode, receive
from perception.types import EgoPose, PointCloudSample, Sample


def _received(data: bytes) -> list[Sample | EgoPose]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    def write() -> None:
        with theirs:
            theirs.sendall(data)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        with ours:
            return list(receive(ours))
    finally:
        writer.join()


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
