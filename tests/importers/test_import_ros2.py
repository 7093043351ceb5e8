"""``import_ros2`` on a bag written with the real ROS 2 serializer (rosbags, MCAP storage)."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from import_fixtures import (
    CAM_FRONT,
    CAM_REAR,
    D_FRONT,
    IMAGE_H,
    IMAGE_W,
    K_FRONT,
    K_REAR,
    LIDAR_MOUNT,
    MAP_ODOM,
    RADAR_FRONT,
    RADAR_REAR,
    SPEED,
    TOPIC_MAP,
    VELODYNE,
    YAW_RATE,
    Bag,
    ego_pose,
    gradient_image,
    write_bag,
)
from PIL import Image as PILImage

from perception._imageio import encode_jpeg
from perception.drives import DriveReader
from perception.errors import ConfigError, DriveError
from perception.importers import ImportSummary, import_ros2
from perception.importers._topic_map import load_topic_map
from perception.types import ImageSample, PointCloudSample, SensorKind, Transform


def _same_transform(a: Transform, b: Transform) -> bool:
    return bool(np.allclose(a.matrix(), b.matrix(), atol=1e-9))


def _png(rgb: np.ndarray) -> bytes:
    buf = io.BytesIO()
    PILImage.fromarray(rgb).save(buf, format="PNG")
    return buf.getvalue()


def _cut(data: bytes) -> bytes:
    """The first 60 % of ``data`` (a partial download, a full disk)."""
    return data[: len(data) * 6 // 10]


def _samples(drive: Path, sensor: str) -> list[PointCloudSample | ImageSample]:
    with DriveReader(drive) as d:
        return list(d.samples(sensors=sensor))


def test_rig_extrinsics_and_calibration(ros2_drive: tuple[Path, ImportSummary]) -> None:
    path, _ = ros2_drive
    with DriveReader(path) as d:
        rig = d.rig
        meta = d.metadata
    assert list(rig) == ["lidar_top", "radar_front", "radar_rear", "cam_front", "cam_rear"]
    assert [rig[n].kind for n in rig] == [SensorKind.LIDAR, SensorKind.RADAR, SensorKind.RADAR] + [
        SensorKind.CAMERA
    ] * 2
    # The lidar hangs off a two-level static chain: base_link <- lidar_mount <- velodyne.
    assert _same_transform(rig["lidar_top"].extrinsic, LIDAR_MOUNT.compose(VELODYNE))
    assert _same_transform(rig["radar_front"].extrinsic, RADAR_FRONT)
    assert _same_transform(rig["radar_rear"].extrinsic, RADAR_REAR)
    assert _same_transform(rig["cam_front"].extrinsic, CAM_FRONT)
    assert _same_transform(rig["cam_rear"].extrinsic, CAM_REAR)  # frame override, header says otherwise
    front, rear = rig["cam_front"].calibration, rig["cam_rear"].calibration
    assert front is not None and rear is not None
    assert (front.width, front.height, front.k, front.d) == (IMAGE_W, IMAGE_H, K_FRONT, D_FRONT)
    assert (rear.k, rear.d, rear.distortion_model) == (K_REAR, (), "plumb_bob")
    assert rig["lidar_top"].rate_hz == 10.0  # from the map
    assert rig["radar_front"].rate_hz == pytest.approx(10.0)  # measured in the bag
    assert rig["lidar_top"].frame_id == "lidar_top"
    assert meta["ros2.frame.lidar_top"] == "velodyne"
    assert meta["ros2.frame.cam_rear"] == "cam_rear_optical"
    assert meta["rosbag2.world_frame"] == "map"


def test_lidar_points_and_header_stamps(bag: Bag, ros2_drive: tuple[Path, ImportSummary]) -> None:
    path, summary = ros2_drive
    got = _samples(path, "lidar_top")
    assert [s.t_ns for s in got] == [t for t, _ in bag.lidar]  # capture time, not bag receive time
    for sample, (_, expected) in zip(got, bag.lidar, strict=True):
        assert isinstance(sample, PointCloudSample)
        assert sample.points.shape == expected.shape  # NaN points dropped, padding skipped
        np.testing.assert_array_equal(sample.points, expected)
    assert [s.seq for s in got] == list(range(len(bag.lidar)))
    assert summary.skipped == {"lidar_top: points with non-finite x/y/z (dropped)": bag.lidar_nan}


def test_radar_doppler_is_ego_compensated(bag: Bag, ros2_drive: tuple[Path, ImportSummary]) -> None:
    path, _ = ros2_drive
    got = _samples(path, "radar_front")
    assert [s.t_ns for s in got] == [t for t, _ in bag.radar_front]
    for sample, (_, raw) in zip(got, bag.radar_front, strict=True):
        assert isinstance(sample, PointCloudSample)
        assert sample.fields == ("x", "y", "z", "radial_velocity", "rcs")
        np.testing.assert_array_equal(sample.points[:, :3], raw[:, :3])
        assert np.abs(raw[:, 3]).max() > 1.0  # the raw Doppler of static targets is not zero...
        # ...compensated it is (up to the finite-difference ego velocity: one-sided at the start of
        # the trajectory, so off in direction by ~yaw_rate * baseline / 2 -> ~1 cm/s at 5 m/s).
        np.testing.assert_allclose(sample.points[:, 3], 0.0, atol=0.015)
        np.testing.assert_array_equal(sample.points[:, 4], raw[:, 4])


def test_radar_cartesian_velocity_big_endian(bag: Bag, ros2_drive: tuple[Path, ImportSummary]) -> None:
    path, _ = ros2_drive
    got = _samples(path, "radar_rear")
    for sample, (_, src) in zip(got, bag.radar_rear, strict=True):
        assert isinstance(sample, PointCloudSample)
        xyz, v = src[:, :3], src[:, 3:5]
        expected = (xyz[:, 0] * v[:, 0] + xyz[:, 1] * v[:, 1]) / np.linalg.norm(xyz, axis=1)
        np.testing.assert_array_equal(sample.points[:, :3], xyz)
        np.testing.assert_allclose(sample.points[:, 3], expected, rtol=1e-5)
        np.testing.assert_array_equal(sample.points[:, 4], src[:, 5])


def test_images_raw_to_jpeg_and_compressed_passthrough(bag: Bag, ros2_drive: tuple[Path, ImportSummary]) -> None:
    path, _ = ros2_drive
    front = _samples(path, "cam_front")
    assert [s.t_ns for s in front] == [t for t, _ in bag.cam_front]
    for i, (sample, (_, rgb)) in enumerate(zip(front, bag.cam_front, strict=True)):
        assert isinstance(sample, ImageSample) and sample.format == "jpeg"
        decoded = sample.decode()
        assert decoded.shape == (IMAGE_H, IMAGE_W, 3)
        assert np.abs(decoded.astype(int) - rgb.astype(int)).mean() < 6, f"frame {i} differs beyond JPEG loss"
        assert np.array_equal(rgb, gradient_image(i))
    rear = _samples(path, "cam_rear")
    assert [(s.t_ns, s.data) for s in rear if isinstance(s, ImageSample)] == bag.cam_rear  # bytes untouched


def test_ego_poses_from_tf_chain(bag: Bag, ros2_drive: tuple[Path, ImportSummary]) -> None:
    path, _ = ros2_drive
    with DriveReader(path) as d:
        poses = d.ego_poses()
    assert [p.t_ns for p in poses] == bag.ego_stamps  # the odom <- base_link stamps
    for i, p in enumerate(poses):
        t_s = (p.t_ns - bag.ego_stamps[0]) / 1e9
        expected = MAP_ODOM.compose(ego_pose(t_s))  # map <- odom <- base_link
        assert _same_transform(p.pose, expected)
        # Central differences inside; one-sided over ~50 ms at the two ends (heading off by ~w*dt/2).
        inside = 3 <= i < len(poses) - 3
        np.testing.assert_allclose(p.linear_velocity, (SPEED, 0.0, 0.0), atol=1e-3 if inside else 0.02)
        assert p.yaw_rate == pytest.approx(YAW_RATE, abs=1e-6)


def test_summary_counts_every_topic(bag: Bag, ros2_drive: tuple[Path, ImportSummary]) -> None:
    path, summary = ros2_drive
    assert summary.output == path and summary.source.startswith("rosbag2")
    for topic in ("lidar_top/points", "radar_front/points", "radar_rear/points"):
        assert summary.messages[f"/sensors/{topic}"] == 5
    assert summary.messages["/sensors/cam_front/image/compressed"] == 5
    assert summary.messages["/ego/odometry"] == len(bag.ego_stamps)
    text = "\n".join(summary.lines())
    assert "lidar_top: points with non-finite x/y/z (dropped): 10" in text
    assert "cam_rear: rate_hz not in the map; measured 10 Hz in the bag" in text
    assert not list(path.parent.glob(".*.partial"))


def test_single_mcap_file_input(bag: Bag, tmp_path: Path) -> None:
    (mcap,) = bag.path.glob("*.mcap")
    summary = import_ros2(mcap, bag.topic_map, tmp_path / "d.mcap")
    assert summary.messages["/sensors/lidar_top/points"] == 5


def _damage_channel_ids(mcap: Path, out: Path, topics: dict[str, int]) -> None:
    """``mcap`` with the channel id of the ``n``-th message record of each topic (``{topic: n}``) made
    unknown (one damaged field: rosbags passes over such a record without a word)."""
    from mcap.reader import make_reader

    data = bytearray(mcap.read_bytes())
    with mcap.open("rb") as f:
        summary = make_reader(f).get_summary()
    assert summary is not None
    todo = {c.id: topics[c.topic] for c in summary.channels.values() if c.topic in topics}
    seen = dict.fromkeys(todo, 0)
    for ci in summary.chunk_indexes:
        assert ci.compression == ""
        pos = ci.chunk_start_offset + 9 + 8 + 8 + 8 + 4 + 4 + 8  # chunk record head, fixed fields, '' compression
        while pos < ci.chunk_start_offset + ci.chunk_length:
            op, length = struct.unpack_from("<BQ", data, pos)
            (channel,) = struct.unpack_from("<H", data, pos + 9) if op == 0x05 else (-1,)
            if channel in todo:
                seen[channel] += 1
                if seen[channel] == todo[channel]:
                    struct.pack_into("<H", data, pos + 9, 0x7777)
            pos += 9 + length
    assert all(seen[c] >= n for c, n in todo.items())
    out.write_bytes(bytes(data))


def test_bag_messages_its_reader_passes_over_are_counted_as_skipped(bag: Bag, tmp_path: Path) -> None:
    # rosbags skips a record whose channel is unknown: an image and an ego pose were lost without a word
    (mcap,) = bag.path.glob("*.mcap")
    damaged = tmp_path / "damaged.mcap"
    _damage_channel_ids(mcap, damaged, {"/cam_front/image_raw": 2, "/tf": 10})
    summary = import_ros2(damaged, bag.topic_map, tmp_path / "d.mcap")
    assert summary.messages["/sensors/cam_front/image/compressed"] == 4
    assert summary.messages["/ego/odometry"] == len(bag.ego_stamps) - 1
    lost = "messages the bag counts but its reader did not return (unreadable records)"
    assert {r: n for r, n in summary.skipped.items() if lost in r} == {
        f"/cam_front/image_raw: {lost}": 1,
        f"/tf: {lost}": 1,
    }


# -- errors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("as_directory", [False, True])
def test_a_bag_cut_short_is_said_so_naming_its_file(bag: Bag, tmp_path: Path, as_directory: bool) -> None:
    # A recording that did not finish (no MCAP end): rosbags' 'cannot open ROS 2 bag: File end magic is
    # invalid.' named the bag, not which file, nor what it means or what to do.
    (mcap,) = bag.path.glob("*.mcap")
    data = mcap.read_bytes()
    d = tmp_path / "cut"
    d.mkdir()
    cut = d / mcap.name
    cut.write_bytes(data[: len(data) * 2 // 3])
    if as_directory:
        (d / "metadata.yaml").write_bytes((bag.path / "metadata.yaml").read_bytes())
    with pytest.raises(DriveError, match=r"cannot open ROS 2 bag: its MCAP file is cut short .*`mcap recover`") as exc:
        import_ros2(d if as_directory else cut, bag.topic_map, tmp_path / "out.mcap")
    assert exc.value.file == str(cut)
    assert not (tmp_path / "out.mcap").exists()


def test_a_drive_given_as_the_bag_says_to_replay_it(bag: Bag, tmp_path: Path) -> None:
    # A drive (what import writes, or the bundled one) given to `import ros2` was rosbags' 'cannot open ROS 2
    # bag: Profile is not ros2.': it now says what the file is and what to run instead.
    drive = tmp_path / "drive.mcap"
    import_ros2(bag.path, bag.topic_map, drive)
    with pytest.raises(DriveError, match=r"not a ROS 2 bag: a drive written by perception-fusion") as exc:
        import_ros2(drive, bag.topic_map, tmp_path / "again.mcap")
    assert str(exc.value).endswith(f"replay it as it is: perception replay {drive}")
    assert exc.value.file == str(drive)
    assert not (tmp_path / "again.mcap").exists()


@pytest.mark.parametrize("content", [(), ("bag.mcap",)])
def test_directory_without_metadata_is_not_a_bag(bag: Bag, tmp_path: Path, content: tuple[str, ...]) -> None:
    # rosbags' own message named the directory as the missing file: "Expected metadata file 'DIR' does not exist."
    d = tmp_path / "notabag"
    d.mkdir()
    for name in content:
        (d / name).write_bytes(next(bag.path.glob("*.mcap")).read_bytes())
    with pytest.raises(DriveError) as exc:
        import_ros2(d, bag.topic_map, tmp_path / "out.mcap")
    assert str(exc.value) == (
        f"{d}: not a rosbag2 directory: no metadata.yaml in it (a bag without one: pass its .mcap file)"
    )
    assert not (tmp_path / "out.mcap").exists()


@pytest.mark.parametrize(
    ("frame", "topic", "message"),
    [
        ("velodyne", "/velodyne_points", "sensor 'lidar_top': sample t_ns must be an integer in [0, 2^64), got -1"),
        ("odom", None, "ego pose at t=-1000000000 ns (from the TF): ego pose t_ns must be an integer in [0, 2^64)"),
    ],
)
def test_a_negative_header_stamp_names_the_bag_not_the_hidden_partial_drive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, frame: str, topic: str | None, message: str
) -> None:
    # the writer's error named '.out.mcap.partial', a hidden file deleted as the import failed
    import import_fixtures

    plain, first = import_fixtures.header, [True]

    def header(t_ns: int, frame_id: str) -> object:
        if frame_id == frame and first[0]:
            first[0] = False
            return plain(-import_fixtures.S, frame_id)  # sec=-1 (int32 allows it)
        return plain(t_ns, frame_id)

    monkeypatch.setattr(import_fixtures, "header", header)
    b = write_bag(tmp_path)
    with pytest.raises(DriveError) as exc:
        import_ros2(b.path, b.topic_map, tmp_path / "out.mcap")
    assert exc.value.file == str(b.path) and exc.value.topic == topic
    assert exc.value.message.startswith(message)
    assert not list(tmp_path.glob("*out.mcap*"))


def test_missing_camera_info_names_the_topic(tmp_path: Path) -> None:
    b = write_bag(tmp_path, omit_topics=("/cam_front/camera_info",))
    with pytest.raises(DriveError, match="CameraInfo") as exc:
        import_ros2(b.path, b.topic_map, tmp_path / "out.mcap")
    assert exc.value.topic == "/cam_front/camera_info"
    assert exc.value.file == str(b.path)
    assert not list(tmp_path.glob("*out.mcap*"))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda _: encode_jpeg(np.zeros((IMAGE_H * 2, IMAGE_W, 3), np.uint8)), rf"image is {IMAGE_W}x{IMAGE_H * 2} "),
        (lambda jpeg: jpeg[:6], "cannot read the compressed image's size from its header"),
        # its header whole, its body cut short (the first 60 %): imported, for every replay to fail its decode
        (_cut, r"JPEG image does not end with its end-of-image marker \(FF D9\)"),
        (lambda _: _cut(_png(gradient_image(8))), r"PNG image does not end with an IEND chunk: cut short"),
    ],
)
def test_every_compressed_image_is_checked_naming_its_message(
    tmp_path: Path, damage: Callable[[bytes], bytes], message: str
) -> None:
    # Only a camera's first compressed image was checked against its CameraInfo: a later one of another
    # size (or cut short) went into the drive, for its intrinsics to project it wrong.
    b = write_bag(tmp_path, rear_jpeg=lambda i, jpeg: damage(jpeg) if i == 3 else jpeg)
    with pytest.raises(DriveError, match=f"sensor 'cam_rear': {message}") as exc:
        import_ros2(b.path, b.topic_map, tmp_path / "out.mcap")
    assert exc.value.topic == "/cam_rear/image/compressed"
    assert exc.value.t_ns is not None and exc.value.file == str(b.path)
    assert not list(tmp_path.glob("*out.mcap*"))


def test_missing_tf_names_the_frame(tmp_path: Path) -> None:
    b = write_bag(tmp_path, omit_static=("velodyne",))
    with pytest.raises(DriveError, match=r"no transform base_link <- velodyne for sensor 'lidar_top'") as exc:
        import_ros2(b.path, b.topic_map, tmp_path / "out.mcap")
    assert exc.value.topic == "/tf_static"
    assert exc.value.ros_frame == "velodyne"


def test_missing_ego_motion(tmp_path: Path) -> None:
    b = write_bag(tmp_path, omit_topics=("/tf",))
    with pytest.raises(DriveError, match="no ego pose") as exc:
        import_ros2(b.path, b.topic_map, tmp_path / "out.mcap")
    assert exc.value.topic == "/tf"


def test_unknown_topic_is_a_config_error_naming_file_and_key(bag: Bag, tmp_path: Path) -> None:
    tmap = tmp_path / "topics.yaml"
    tmap.write_text(TOPIC_MAP.replace("/radar_rear/points", "/radar_rear/typo"))
    with pytest.raises(ConfigError, match="topic /radar_rear/typo is not in the bag") as exc:
        import_ros2(bag.path, tmap, tmp_path / "out.mcap")
    assert exc.value.file == str(tmap)
    assert exc.value.key == "sensors[2].topic"
    assert str(exc.value).startswith(f"{tmap}: sensors[2].topic: ")


def test_topic_of_the_wrong_type(bag: Bag, tmp_path: Path) -> None:
    tmap = tmp_path / "topics.yaml"
    tmap.write_text("sensors:\n  - {name: cam, kind: camera, topic: /velodyne_points}\n")
    with pytest.raises(ConfigError, match="has type sensor_msgs/msg/PointCloud2") as exc:
        import_ros2(bag.path, tmap, tmp_path / "out.mcap")
    assert exc.value.key == "sensors[0].topic"


def test_configured_field_missing_in_cloud(tmp_path: Path) -> None:
    b = write_bag(tmp_path, topic_map=TOPIC_MAP.replace("radial_velocity: doppler", "radial_velocity: range_rate"))
    with pytest.raises(DriveError, match="point field 'range_rate' missing") as exc:
        import_ros2(b.path, b.topic_map, tmp_path / "out.mcap")
    assert exc.value.topic == "/radar_front/points"


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ("sensors:\n  - {name: r, kind: radar, topic: /r}\n", "sensors[0].radial_velocity", "exactly one of"),
        ("sensors:\n  - {name: c, kind: camera, topic: /c, intensity: i}\n", "sensors[0].intensity", "only applies"),
        ("sensors:\n  - {name: l, kind: lidar, topic: /l, bogus: 1}\n", "sensors[0].bogus", "unknown key"),
        ("sensors:\n  - {name: l, kind: sonar, topic: /l}\n", "sensors[0].kind", "expected one of"),
        ("sensors:\n  - {name: l, kind: lidar, topic: l}\n", "sensors[0].topic", "absolute ROS topic"),
        (
            "sensors:\n  - {name: a, kind: lidar, topic: /a}\n  - {name: a, kind: lidar, topic: /b}\n",
            "sensors[1].name",
            "duplicate sensor name",
        ),
        ("sensors: []\n", "sensors", "at least one"),
        (
            "sensors:\n  - {name: r, kind: radar, topic: /r, velocity: [vx]}\n",
            "sensors[0].velocity",
            "two different field names",
        ),
    ],
)
def test_topic_map_validation(tmp_path: Path, text: str, key: str, message: str) -> None:
    path = tmp_path / "topics.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as exc:
        load_topic_map(path)
    assert exc.value.file == str(path)
    assert exc.value.key == key


@pytest.mark.parametrize("key", ["server", "source"])
def test_an_unknown_key_s_message_lists_only_keys_a_topic_map_may_have(tmp_path: Path, key: str) -> None:
    # It listed 'source' among them, which is refused as a key (the file the map came from): add it, be refused.
    path = tmp_path / "topics.yaml"
    path.write_text(f"sensors:\n  - {{name: l, kind: lidar, topic: /l}}\n{key}: x\n")
    with pytest.raises(ConfigError) as exc:
        load_topic_map(path)
    assert exc.value.key == key
    assert (
        exc.value.message
        == "unknown key (expected one of: base_frame, sensors, tf_static_topic, tf_topic, world_frame)"
    )


def test_existing_output_is_kept_unless_overwrite(bag: Bag, tmp_path: Path) -> None:
    out = tmp_path / "d.mcap"
    out.write_bytes(b"precious")
    with pytest.raises(DriveError, match="output exists"):
        import_ros2(bag.path, bag.topic_map, out)
    assert out.read_bytes() == b"precious"
    import_ros2(bag.path, bag.topic_map, out, overwrite=True)
    with DriveReader(out) as d:
        assert d.stats().topics["/sensors/lidar_top/points"].message_count == 5


def test_failed_import_leaves_no_file(bag: Bag, tmp_path: Path) -> None:
    tmap = tmp_path / "topics.yaml"
    tmap.write_text(TOPIC_MAP.replace("intensity: intensity\n", "").replace("rate_hz: 10\n", "intensity: nope\n", 1))
    out = tmp_path / "d.mcap"
    with pytest.raises(DriveError, match="point field 'nope' missing"):
        import_ros2(bag.path, tmap, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["topics.yaml"]


def test_not_a_bag(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mcap"
    junk.write_bytes(b"not an mcap file at all")
    tmap = tmp_path / "topics.yaml"
    tmap.write_text(TOPIC_MAP)
    with pytest.raises(DriveError, match="cannot open ROS 2 bag") as exc:
        import_ros2(junk, tmap, tmp_path / "out.mcap")
    assert exc.value.file == str(junk)
