"""The importers' format pieces: PointCloud2 decoding, image conversion, PCD parsing, TF tree, motion."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from import_fixtures import gradient_image, image_msg, point_cloud2, radar_dtype, radar_pcd

from perception.importers._motion import compensate_radial_velocity, ego_poses, quat_from_wxyz, radial_velocity
from perception.importers._pcd import parse_pcd
from perception.importers._pointcloud2 import decode_point_cloud2
from perception.importers._ros2 import default_camera_info_topic, image_to_rgb
from perception.importers._tf import TfError, TfTree
from perception.types import Transform

# -- PointCloud2 -------------------------------------------------------------------------------------

_CODES = {1: "b", 2: "B", 3: "h", 4: "H", 5: "i", 6: "I", 7: "f", 8: "d"}
_NP = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 8: "f8"}


class _Field:
    def __init__(self, name: str, offset: int, datatype: int) -> None:
        self.name, self.offset, self.datatype, self.count = name, offset, datatype, 1


class _Cloud:
    def __init__(self, **kw: object) -> None:
        self.__dict__.update(kw)


@st.composite
def _clouds(draw: st.DrawFn) -> tuple[_Cloud, dict[str, list[float]]]:
    """A random layout (types, gaps, endianness, organised rows with padding) and per-point values."""
    big = draw(st.booleans())
    types = draw(st.lists(st.sampled_from(list(_CODES)), min_size=1, max_size=4))
    fields, offset = [], 0
    for i, dt in enumerate(types):
        offset += draw(st.integers(0, 3))  # unaligned gaps are legal
        fields.append(_Field(f"f{i}", offset, dt))
        offset += struct.calcsize(_CODES[dt])
    point_step = offset + draw(st.integers(0, 5))
    height, width = draw(st.integers(1, 3)), draw(st.integers(0, 5))
    row_step = width * point_step + draw(st.integers(0, 7))
    data = bytearray(draw(st.binary(min_size=height * row_step, max_size=height * row_step)))
    order = ">" if big else "<"
    expected: dict[str, list[float]] = {f.name: [] for f in fields}
    for r in range(height):
        for c in range(width):
            base = r * row_step + c * point_step
            for f in fields:
                (v,) = struct.unpack_from(order + _CODES[f.datatype], data, base + f.offset)
                with np.errstate(over="ignore"):
                    expected[f.name].append(float(np.float32(v)))
    cloud = _Cloud(
        height=height,
        width=width,
        fields=fields,
        is_bigendian=big,
        point_step=point_step,
        row_step=row_step,
        data=np.frombuffer(bytes(data), dtype=np.uint8),
    )
    return cloud, expected


@settings(max_examples=60, deadline=None)
@given(_clouds())
def test_point_cloud2_matches_a_per_point_reference(case: tuple[_Cloud, dict[str, list[float]]]) -> None:
    cloud, expected = case
    names = list(expected)[::-1]  # any order
    out = decode_point_cloud2(cloud, names)
    assert out.dtype == np.float32 and out.shape == (cloud.height * cloud.width, len(names))
    for i, name in enumerate(names):
        np.testing.assert_array_equal(out[:, i], np.array(expected[name], dtype=np.float32))


def test_point_cloud2_errors() -> None:
    good = point_cloud2(0, "f", {"x": np.zeros(4, np.float32), "i": np.zeros(4, np.uint16)})
    with pytest.raises(ValueError, match=r"point field 'y' missing \(cloud has x, i\)"):
        decode_point_cloud2(good, ["x", "y"])
    good.data = good.data[:-1]
    with pytest.raises(ValueError, match="data has 23 bytes, the 1x4 layout needs 24"):
        decode_point_cloud2(good, ["x"])
    good.fields[1].datatype = 42
    with pytest.raises(ValueError, match="unknown datatype 42"):
        decode_point_cloud2(good, ["i"])
    good.fields[1].datatype, good.fields[1].offset = 4, 5
    with pytest.raises(ValueError, match="overruns point_step 6"):
        decode_point_cloud2(good, ["i"])


def test_point_cloud2_keeps_nan_points() -> None:
    x = np.array([1.0, np.nan, 3.0], np.float32)
    out = decode_point_cloud2(point_cloud2(0, "f", {"x": x}), ["x"])
    np.testing.assert_array_equal(out[:, 0], x)


# -- images ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "mono8"])
def test_image_encodings_to_rgb(encoding: str) -> None:
    rgb = gradient_image(2)
    out = image_to_rgb(image_msg(0, "cam", rgb, encoding, padding=3))
    expected = np.repeat(rgb[..., :1], 3, axis=2) if encoding == "mono8" else rgb
    np.testing.assert_array_equal(out, expected)


def test_image_errors() -> None:
    msg = image_msg(0, "cam", gradient_image(0))
    msg.encoding = "bayer_rggb8"
    with pytest.raises(ValueError, match="unsupported image encoding 'bayer_rggb8'"):
        image_to_rgb(msg)
    msg = image_msg(0, "cam", gradient_image(0))
    msg.data = msg.data[:-1]
    with pytest.raises(ValueError, match="image data has"):
        image_to_rgb(msg)


def test_default_camera_info_topic() -> None:
    assert default_camera_info_topic("/cam/image_raw") == "/cam/camera_info"
    assert default_camera_info_topic("/cam/image_raw/compressed") == "/cam/camera_info"
    assert default_camera_info_topic("/a/b/image_rect_color") == "/a/b/camera_info"


# -- PCD ---------------------------------------------------------------------------------------------


def _radar_points() -> np.ndarray:
    rng = np.random.default_rng(0)
    rp = np.zeros(5, dtype=radar_dtype())
    for name in ("x", "y", "vx_comp", "rcs"):
        rp[name] = rng.uniform(-10, 10, 5)
    rp["id"] = np.arange(5)
    rp["ambig_state"] = 3
    return rp


@pytest.mark.parametrize("ascii_body", [False, True])
def test_pcd_binary_and_ascii(ascii_body: bool) -> None:
    rp = _radar_points()
    header, rec = parse_pcd(radar_pcd(rp, ascii_body=ascii_body))
    assert header.points == 5 and header.data == ("ascii" if ascii_body else "binary")
    assert rec.dtype.names == rp.dtype.names
    for name in ("x", "y", "vx_comp", "rcs", "id", "ambig_state"):
        np.testing.assert_array_equal(rec[name], rp[name])


def test_pcd_errors() -> None:
    raw = radar_pcd(_radar_points())
    with pytest.raises(ValueError, match="PCD body truncated"):
        parse_pcd(raw[:-1])
    with pytest.raises(ValueError, match="'binary_compressed' is not supported"):
        parse_pcd(raw.replace(b"DATA binary", b"DATA binary_compressed"))
    with pytest.raises(ValueError, match="no DATA line"):
        parse_pcd(b"VERSION 0.7\nFIELDS x\n")
    with pytest.raises(ValueError, match="lengths differ"):
        parse_pcd(b"FIELDS x y\nSIZE 4\nTYPE F F\nWIDTH 1\nPOINTS 1\nDATA binary\n" + b"\x00" * 8)
    with pytest.raises(ValueError, match="unsupported TYPE F / SIZE 2"):
        parse_pcd(b"FIELDS x\nSIZE 2\nTYPE F\nWIDTH 1\nPOINTS 1\nDATA binary\n\x00\x00")
    with pytest.raises(ValueError, match=r"WIDTH x HEIGHT \(2x1\) differs from POINTS 3"):
        parse_pcd(b"FIELDS x\nSIZE 4\nTYPE F\nWIDTH 2\nHEIGHT 1\nPOINTS 3\nDATA binary\n")
    # a POINTS line without its value was an IndexError (a traceback from perception import nuscenes)
    with pytest.raises(ValueError, match="PCD header POINTS has no value"):
        parse_pcd(b"FIELDS x\nSIZE 4\nTYPE F\nWIDTH 1\nPOINTS\nDATA binary\n\x00\x00\x00\x00")


# -- TF tree -----------------------------------------------------------------------------------------


def test_tf_interpolates_dynamic_edges_and_composes_static_ones() -> None:
    tree = TfTree()
    tree.add(
        0, "base_link", "sensor", (1.0, 0.0, 0.0), Transform.from_xyz_rpy((0, 0, 0), (0, 0, 0.5)).rotation, static=True
    )
    for t, (x, yaw) in enumerate([(0.0, 0.0), (2.0, 1.0)]):
        rot = Transform.from_xyz_rpy((0, 0, 0), (0, 0, yaw)).rotation
        tree.add(t * 1000, "/odom", "base_link", (x, 0.0, 0.0), rot, static=False)
    tree.add(500, "map", "odom", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0), static=True)
    found = tree.lookup("base_link", "sensor")
    assert found is not None and found[1] is True
    assert found[0].translation == pytest.approx((1.0, 0.0, 0.0))
    assert tree.chain("base_link", "odom") is None  # not an ancestor
    poses = tree.poses("map", "base_link")
    assert poses is not None
    times, tfs = poses
    assert list(times) == [0, 1000]
    assert tfs[1].yaw() == pytest.approx(1.0)
    assert tree.lookup("odom", "sensor") is not None
    with pytest.raises(TfError, match="two parents"):
        tree.add(0, "map", "base_link", (0, 0, 0), (0, 0, 0, 1), static=True)


def test_tf_stamps_closer_than_float64_resolves_at_the_epoch_stay_distinct() -> None:
    t0 = 1_700_000_000 * 10**9  # float64 spacing here is 256 ns
    tree = TfTree()
    for dt, x in ((0, 0.0), (100, 0.001), (20_000_000, 0.2)):
        tree.add(t0 + dt, "odom", "base_link", (x, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0), static=False)
    poses = tree.poses("odom", "base_link")
    assert poses is not None
    assert [int(t) - t0 for t in poses[0]] == [0, 100, 20_000_000]
    assert [p.translation[0] for p in poses[1]] == pytest.approx([0.0, 0.001, 0.2])
    # stamps float64 cannot tell apart even relative to the first (2^60 ns on): a TfError naming the edge
    far = TfTree()
    for t in (0, 2**60, 2**60 + 1):
        far.add(t, "odom", "base_link", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0), static=False)
    with pytest.raises(TfError, match="odom -> base_link"):
        far.poses("odom", "base_link")


# -- motion ------------------------------------------------------------------------------------------


def test_ego_velocity_by_finite_differences() -> None:
    times = [0, 10_000_000, 10_000_000, 50_000_000, 100_000_000, 200_000_000]  # a duplicate, uneven spacing
    poses = [Transform.from_xyz_rpy((3.0 * t / 1e9, 0.0, 0.0), (0, 0, math.pi / 2)) for t in times]
    out = ego_poses(times, poses)
    assert [p.t_ns for p in out] == sorted(set(times))
    for p in out:  # moving along world +x while facing +y: body velocity is (0, -3)
        np.testing.assert_allclose(p.linear_velocity, (0.0, -3.0, 0.0), atol=1e-9)
        assert p.yaw_rate == pytest.approx(0.0)
    (single,) = ego_poses([5], [Transform.identity()])
    assert single.linear_velocity == (0.0, 0.0, 0.0)


def test_radial_velocity_and_compensation() -> None:
    xyz = np.array([[10.0, 0.0, 0.0], [0.0, 5.0, 0.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(radial_velocity(xyz, [2.0, 2.0, 1.0], [1.0, -1.0, 1.0]), [2.0, -1.0, 0.0])
    # A radar looking backwards on a car driving forward at 10 m/s: static targets read +10 (receding).
    extrinsic = Transform.from_xyz_rpy((-1.0, 0.0, 0.0), (0.0, 0.0, math.pi))
    raw = np.array([10.0, 0.0], np.float32)
    out = compensate_radial_velocity(xyz[:2], raw, extrinsic, [10.0, 0.0, 0.0], 0.0)
    np.testing.assert_allclose(out, [0.0, 0.0], atol=1e-5)


def test_quaternion_order() -> None:
    assert quat_from_wxyz([0.9, 0.1, 0.2, 0.3]) == (0.1, 0.2, 0.3, 0.9)
    with pytest.raises(ValueError):
        quat_from_wxyz([1.0, 0.0, 0.0])


def test_point_cloud2_declaring_billions_of_points_is_refused_before_allocating(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cloud = point_cloud2(0, "f", {"x": np.zeros(4, np.float32)})
    cloud.height, cloud.width, cloud.row_step = 100_000, 100_000, 400_000  # 10^10 points: 80 GB as float32 pairs
    allocated: list[tuple[int, ...]] = []
    real_empty = np.empty

    def spy(shape: tuple[int, ...], *args: object, **kwargs: object) -> object:
        allocated.append(tuple(shape))
        return real_empty(shape, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(np, "empty", spy)
    with pytest.raises(ValueError, match="the 100000x100000 layout needs"):
        decode_point_cloud2(cloud, ["x", "x"])
    assert allocated == []
