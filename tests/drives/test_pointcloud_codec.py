"""Property tests of point-cloud encode/decode: any N (incl. 0), any float32 bit pattern, any layout."""

from __future__ import annotations

import math

import numpy as np
import pytest
from foxglove_schemas_protobuf.PackedElementField_pb2 import PackedElementField
from foxglove_schemas_protobuf.PointCloud_pb2 import PointCloud
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from perception.drives import _codec as codec
from perception.drives import kind_fields
from perception.types import EgoPose, SensorKind, Transform

KINDS = st.sampled_from([SensorKind.LIDAR, SensorKind.RADAR])


ANY_N = st.integers(0, 300)


def raw_points(n_fields: int, n: st.SearchStrategy[int] = ANY_N) -> st.SearchStrategy[np.ndarray]:
    """``[N, n_fields]`` float32 from arbitrary 32-bit patterns: NaN payloads, +-inf, -0.0, subnormals."""
    return hnp.arrays(np.uint32, st.tuples(n, st.just(n_fields))).map(lambda a: a.view(np.float32))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), kind=KINDS)
def test_encode_decode_is_bit_exact(data: st.DataObject, kind: SensorKind) -> None:
    fields = kind_fields(kind)
    points = data.draw(raw_points(len(fields)))
    wire = codec.encode_point_cloud(123, "f", points, fields).SerializeToString()
    msg = codec.decode(PointCloud, wire)
    out = codec.decode_point_cloud(msg, fields)
    assert out.dtype == np.float32 and out.shape == points.shape
    assert out.view(np.uint32).tobytes() == points.view(np.uint32).tobytes()


@settings(max_examples=60, deadline=None)
@given(data=st.data(), kind=KINDS, extra=st.integers(0, 3), pad=st.integers(0, 8))
def test_decode_any_layout_by_field_name(data: st.DataObject, kind: SensorKind, extra: int, pad: int) -> None:
    """Fields in any order, extra fields (any type) and padding: the wanted columns come out by name."""
    wanted = kind_fields(kind)
    names = list(wanted) + [f"extra{i}" for i in range(extra)]
    order = data.draw(st.permutations(names))
    stride = 4 * len(order) + pad
    n = data.draw(st.integers(0, 50))
    buf = np.zeros((n, stride), dtype=np.uint8)
    expected = data.draw(raw_points(len(wanted), st.just(n)))
    fields = []
    for slot, name in enumerate(order):
        offset = 4 * slot
        if name in wanted:
            col = expected[:, wanted.index(name)].astype("<f4")
            buf[:, offset : offset + 4] = col.view(np.uint8).reshape(n, 4)
            fields.append(PackedElementField(name=name, offset=offset, type=PackedElementField.FLOAT32))
        else:
            buf[:, offset : offset + 4] = 0xAB
            fields.append(PackedElementField(name=name, offset=offset, type=PackedElementField.UINT32))
    msg = PointCloud(frame_id="f", point_stride=stride, fields=fields, data=buf.tobytes())
    out = codec.decode_point_cloud(msg, wanted)
    assert out.shape == (n, len(wanted))
    assert out.view(np.uint32).tobytes() == expected.view(np.uint32).tobytes()


def _cloud(stride: int, fields: list[tuple[str, int, int]], data: bytes) -> PointCloud:
    return PointCloud(
        point_stride=stride,
        fields=[PackedElementField(name=n, offset=o, type=t) for n, o, t in fields],  # type: ignore[arg-type]
        data=data,
    )


F32 = PackedElementField.FLOAT32
XYZI = [("x", 0, F32), ("y", 4, F32), ("z", 8, F32), ("intensity", 12, F32)]


@pytest.mark.parametrize(
    ("msg", "match"),
    [
        (_cloud(0, XYZI, b""), "point_stride must be positive"),
        (_cloud(16, XYZI, bytes(17)), "not a multiple of point_stride"),
        (_cloud(16, XYZI[:3], bytes(16)), "'intensity' missing"),
        (_cloud(16, [*XYZI[:3], ("intensity", 12, PackedElementField.FLOAT64)], bytes(16)), "numeric type"),
        (_cloud(14, XYZI, bytes(28)), "overruns stride"),
        (_cloud(16, [*XYZI, ("x", 0, F32)], bytes(16)), "duplicate"),
    ],
)
def test_invalid_layouts_are_rejected(msg: PointCloud, match: str) -> None:
    with pytest.raises(codec.DecodeError, match=match):
        codec.decode_point_cloud(msg, kind_fields(SensorKind.LIDAR))


def test_decode_is_a_view_not_a_per_point_loop() -> None:
    points = np.arange(400_000, dtype=np.float32).reshape(-1, 4)
    msg = codec.encode_point_cloud(0, "f", points, kind_fields(SensorKind.LIDAR))
    out = codec.decode_point_cloud(msg, kind_fields(SensorKind.LIDAR))
    assert not out.flags.owndata  # zero-copy view over the message bytes
    np.testing.assert_array_equal(out, points)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), kind=KINDS, n=st.sampled_from([0, 1, 31, 32, 300, 4096, 20_000]), t_ns=st.integers(0, 2**63))
def test_the_fast_encoding_is_the_message_serialised(data: st.DataObject, kind: SensorKind, n: int, t_ns: int) -> None:
    # byte for byte what protobuf writes (any length prefix: one to three varint bytes), so a drive's sweeps
    # and a recording's read back and open in Foxglove as before
    fields = kind_fields(kind)
    points = data.draw(raw_points(len(fields), st.just(n)))
    wire = codec.encode_point_cloud(t_ns, "f", points, fields).SerializeToString(deterministic=True)
    assert b"".join(codec.encode_point_cloud_parts(t_ns, "f", points, fields)) == wire
    assert b"".join(codec.encode_point_cloud_parts(t_ns, "f", np.asfortranarray(points), fields)) == wire


@settings(max_examples=80, deadline=None)
@given(
    data=st.binary(max_size=3_000),
    fmt=st.sampled_from(["", "jpeg", "png", "jpég"]),
    frame_id=st.text(max_size=20),
    t_ns=st.integers(0, 2**63),
)
def test_the_fast_image_encoding_is_the_message_serialised(data: bytes, fmt: str, frame_id: str, t_ns: int) -> None:
    wire = codec.encode_image(t_ns, frame_id, data, fmt).SerializeToString(deterministic=True)
    assert b"".join(codec.encode_image_parts(t_ns, frame_id, data, fmt)) == wire


_FLOATS = st.one_of(
    st.sampled_from([0.0, -0.0, 1.0, math.inf, -math.inf, math.nan]), st.floats(allow_nan=True, allow_infinity=True)
)


@settings(max_examples=200, deadline=None)
@given(
    t_ns=st.one_of(st.sampled_from([0, 5, 10**9, 2**63]), st.integers(0, 2**64 - 1)),
    values=st.lists(_FLOATS, min_size=11, max_size=11),
)
def test_the_fast_ego_pose_encoding_is_the_messages_serialised(t_ns: int, values: list[float]) -> None:
    # byte for byte what protobuf writes (zero fields left out, -0.0 kept, empty submessages present)
    t, r, v = values[0:3], values[3:7], values[7:10]
    pose = EgoPose(t_ns, Transform((t[0], t[1], t[2]), (r[0], r[1], r[2], r[3])), (v[0], v[1], v[2]), values[10])
    odometry, transform = codec.encode_ego_pose_parts(pose)
    assert odometry == codec.encode_odometry(pose).SerializeToString(deterministic=True)
    assert transform == codec.encode_ego_transform(pose).SerializeToString(deterministic=True)
