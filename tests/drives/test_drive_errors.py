"""Broken drives and misuse: every failure is a DriveError naming the file (and topic when known)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from drive_fixtures import LIDAR_FIELDS, T0, Written, make_rig, static_messages, write_drive, write_raw

from perception._lifetime import Lifetime
from perception.drives import DriveReader, DriveWriter, topic_for
from perception.drives import _codec as codec
from perception.errors import DriveError
from perception.types import (
    EgoPose,
    GroundTruth,
    GroundTruthObject,
    ImageSample,
    PointCloudSample,
    SensorKind,
    SensorSpec,
    Transform,
)

LIDAR_ONLY = [s for s in make_rig() if s.kind == SensorKind.LIDAR]


def lidar_msg(t: int, n: int = 4) -> object:
    return codec.encode_point_cloud(t, "lidar_top", np.zeros((n, 4), np.float32), LIDAR_FIELDS)


# -- not a drive -----------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"", b"hello world, not an mcap file" * 10, bytes(range(256))])
def test_garbage_file_names_the_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "garbage.mcap"
    path.write_bytes(content)
    with pytest.raises(DriveError, match="bad magic") as info:
        DriveReader(path)
    assert info.value.file == str(path)
    assert str(info.value).startswith(f"{path}: ")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DriveError, match="cannot open") as info:
        DriveReader(tmp_path / "nope.mcap")
    assert info.value.file == str(tmp_path / "nope.mcap")


def test_magic_then_garbage(tmp_path: Path) -> None:
    path = tmp_path / "magic.mcap"
    path.write_bytes(b"\x89MCAP0\r\n" + bytes(range(256)) * 4)
    with pytest.raises(DriveError) as info:
        DriveReader(path)
    assert info.value.file == str(path)


def test_mcap_without_rig_record(tmp_path: Path) -> None:
    path = tmp_path / "plain.mcap"
    write_raw(path, None, [("/sensors/top/points", T0, lidar_msg(T0))])  # type: ignore[list-item]
    with pytest.raises(DriveError, match=r"no perception\.rig metadata"):
        DriveReader(path)


def test_a_ros2_bag_read_as_a_drive_says_to_import_it(tmp_path: Path) -> None:
    # `perception replay/info BAG.mcap` (a bag not imported yet) said 'no perception.rig metadata record
    # (not a perception drive?)': now what the file is and the command that makes a drive of it.
    from mcap.writer import Writer

    path = tmp_path / "bag.mcap"
    with path.open("wb") as f:
        w = Writer(f)
        w.start(profile="ros2", library="rosbag2")
        schema = w.register_schema("std_msgs/msg/String", "ros2msg", b"string data")
        channel = w.register_channel("/chatter", "cdr", schema)
        w.add_message(channel, log_time=T0, data=b"\x00\x01\x00\x00\x03\x00\x00\x00hi\x00", publish_time=T0)
        w.finish()
    with pytest.raises(DriveError, match=r"a ROS 2 bag \(CDR messages\), not a drive: import it first") as info:
        DriveReader(path)
    assert str(info.value).endswith(f"perception import ros2 {path} --map topics.yaml -o drive.mcap")
    assert info.value.file == str(path)


# -- truncation ------------------------------------------------------------------------------------


def truncated_copy(src: Path, dst: Path, fraction: float) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: int(len(data) * fraction)])
    return dst


def test_truncated_strict_yields_prefix_then_raises(chunked_drive: Written, tmp_path: Path) -> None:
    path = truncated_copy(chunked_drive.path, tmp_path / "cut.mcap", 0.6)
    got: list[PointCloudSample | ImageSample] = []
    with DriveReader(path) as d:
        assert d.truncated is not None
        with pytest.raises(DriveError, match=r"truncated at byte \d+; last readable message t=\d+") as info:
            for s in d.samples():
                got.append(s)
        assert d.stats().truncated == d.truncated.message
    err = info.value
    assert err.file == str(path) and isinstance(err.topic, str) and err.topic.startswith("/")
    want = chunked_drive.sorted_samples()
    assert 0 < len(got) < len(want)
    assert [(s.sensor, s.t_ns) for s in got] == [(s.sensor, s.t_ns) for s in want[: len(got)]]


def test_truncated_non_strict_warns_and_yields_prefix(
    chunked_drive: Written, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = truncated_copy(chunked_drive.path, tmp_path / "cut.mcap", 0.5)
    with caplog.at_level(logging.WARNING, logger="perception.drives"), DriveReader(path, strict=False) as d:
        got = list(d.samples())
        ego = d.ego_poses()
        gt = d.ground_truth()
        assert d.truncated is not None and "truncated at byte" in str(d.truncated)
        t = got[len(got) // 2].t_ns  # seeking works on the readable prefix
        assert [s.t_ns for s in d.samples(start_ns=t)] == [s.t_ns for s in got if s.t_ns >= t]
    assert any("truncated at byte" in r.getMessage() for r in caplog.records)
    assert 0 < len(got) < len(chunked_drive.samples)
    assert ego == chunked_drive.ego[: len(ego)] and 0 < len(ego) < len(chunked_drive.ego)
    assert gt == chunked_drive.gt[: len(gt)]
    assert d.state is Lifetime.CLOSED
    d.close()  # idempotent
    assert d.state is Lifetime.CLOSED
    with pytest.raises(DriveError, match="reader is closed"):
        list(d.samples())


def test_lost_summary_only_is_not_truncation(chunked_drive: Written, tmp_path: Path) -> None:
    data = chunked_drive.path.read_bytes()
    path = tmp_path / "nosummary.mcap"
    path.write_bytes(data[:-20])  # footer gone, all data intact
    with DriveReader(path) as d:
        assert d.truncated is None
        assert len(list(d.samples())) == len(chunked_drive.samples)


def test_truncated_before_first_chunk(chunked_drive: Written, tmp_path: Path) -> None:
    path = truncated_copy(chunked_drive.path, tmp_path / "cut.mcap", 0.02)
    with pytest.raises(DriveError) as info:
        DriveReader(path)
    assert info.value.file == str(path)


def test_corrupt_chunk_in_indexed_file(drive: Written, tmp_path: Path) -> None:
    data = bytearray(drive.path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)
    path = tmp_path / "corrupt.mcap"
    path.write_bytes(bytes(data))
    with pytest.raises(DriveError) as info, DriveReader(path) as d:  # open or iterate: either fails cleanly
        list(d.samples())
    assert info.value.file == str(path)


# -- schema and static-data validation -------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (("foxglove.LaserScan", "protobuf", "protobuf"), "'foxglove.LaserScan'"),
        (("foxglove.PointCloud", "jsonschema", "json"), "json encoding"),
    ],
)
def test_unknown_schema_on_sensor_topic(tmp_path: Path, schema: tuple[str, str, str], expected: str) -> None:
    path = tmp_path / "schema.mcap"
    topic = topic_for("lidar", "top")
    write_raw(path, LIDAR_ONLY, [*static_messages(LIDAR_ONLY, T0), (topic, T0, b"{}")], schemas={topic: schema})
    with pytest.raises(DriveError, match=expected) as info:
        DriveReader(path)
    assert (info.value.file, info.value.topic) == (str(path), topic)


def test_missing_calibration(tmp_path: Path) -> None:
    rig = make_rig()
    path = tmp_path / "nocal.mcap"
    statics = [m for m in static_messages(rig, T0) if m[0] == codec.TF_STATIC_TOPIC]
    data = [
        (
            s.topic,
            T0,
            lidar_msg(T0) if s.kind != SensorKind.CAMERA else codec.encode_image(T0, s.frame_id, b"x", "jpeg"),
        )
        for s in rig
        if s.kind != SensorKind.RADAR
    ]
    radar = codec.encode_point_cloud(
        T0, "radar_front", np.zeros((1, 5), np.float32), codec.kind_fields(SensorKind.RADAR)
    )
    write_raw(path, rig, [*statics, *data, (rig[2].topic, T0, radar)])  # type: ignore[list-item]
    with pytest.raises(DriveError, match="no calibration for camera 'front'") as info:
        DriveReader(path)
    assert info.value.topic == "/sensors/front/calibration"
    with DriveReader(path, sensors=["top", "radar"]) as d:  # only the selected sensors are validated
        assert set(d.rig) == {"top", "radar"}


def test_missing_extrinsic(tmp_path: Path) -> None:
    rig = [
        *LIDAR_ONLY,
        SensorSpec("radar", SensorKind.RADAR, "radar_front", Transform(), topic_for("radar", "radar"), None, 13.0),
    ]
    path = tmp_path / "notf.mcap"
    radar = codec.encode_point_cloud(
        T0, "radar_front", np.zeros((1, 5), np.float32), codec.kind_fields(SensorKind.RADAR)
    )
    write_raw(
        path,
        rig,
        [*static_messages(LIDAR_ONLY, T0), (rig[0].topic, T0, lidar_msg(T0)), (rig[1].topic, T0, radar)],  # type: ignore[list-item]
    )
    with pytest.raises(DriveError, match="no extrinsic for sensor 'radar'") as info:
        DriveReader(path)
    assert info.value.topic == "/tf_static"


def test_no_tf_static_at_all(tmp_path: Path) -> None:
    path = tmp_path / "notf.mcap"
    write_raw(path, LIDAR_ONLY, [(LIDAR_ONLY[0].topic, T0, lidar_msg(T0))])  # type: ignore[list-item]
    with pytest.raises(DriveError, match="extrinsics") as info:
        DriveReader(path)
    assert info.value.topic == "/tf_static"


# -- single-message decode errors ------------------------------------------------------------------


def test_bad_point_cloud_message_names_topic_and_time(tmp_path: Path) -> None:
    topic = LIDAR_ONLY[0].topic
    bad = lidar_msg(T0 + 2)
    bad.data = bad.data[:-3]  # type: ignore[attr-defined]
    path = tmp_path / "bad.mcap"
    write_raw(
        path,
        LIDAR_ONLY,
        [*static_messages(LIDAR_ONLY, T0), (topic, T0 + 1, lidar_msg(T0 + 1)), (topic, T0 + 2, bad)],  # type: ignore[list-item]
    )
    with DriveReader(path) as d:
        it = d.samples()
        assert next(it).t_ns == T0 + 1
        with pytest.raises(DriveError, match="not a multiple of point_stride") as info:
            next(it)
    assert (info.value.topic, info.value.t_ns) == (topic, T0 + 2)


def test_undecodable_bytes_and_wrong_frame(tmp_path: Path) -> None:
    topic = LIDAR_ONLY[0].topic
    wrong_frame = codec.encode_point_cloud(T0 + 2, "elsewhere", np.zeros((1, 4), np.float32), LIDAR_FIELDS)
    path = tmp_path / "bad.mcap"
    write_raw(
        path,
        LIDAR_ONLY,
        [
            *static_messages(LIDAR_ONLY, T0),
            (topic, T0 + 1, lidar_msg(T0 + 1)),
            (topic, T0 + 2, wrong_frame),
            (topic, T0 + 3, b"\xff\xff\xff"),
        ],  # type: ignore[list-item]
    )
    with DriveReader(path) as d:
        with pytest.raises(DriveError, match="frame_id 'elsewhere'") as info:
            list(d.samples())
        assert info.value.t_ns == T0 + 2
        with pytest.raises(DriveError, match=r"not a valid foxglove\.PointCloud") as info:
            list(d.samples(start_ns=T0 + 3))
        assert (info.value.topic, info.value.t_ns) == (topic, T0 + 3)


def test_malformed_ground_truth(tmp_path: Path) -> None:
    msg = codec.encode_ground_truth(GroundTruth(T0, (GroundTruthObject(1, "car", (0, 0, 0), (1, 1, 1), 0.0, (0, 0)),)))
    del msg.entities[0].metadata[1]  # track_id
    path = tmp_path / "gt.mcap"
    write_raw(path, [], [(codec.GROUND_TRUTH_TOPIC, T0, msg)])
    with DriveReader(path) as d, pytest.raises(DriveError, match="lacks metadata key 'track_id'") as info:
        d.ground_truth()
    assert (info.value.topic, info.value.t_ns) == (codec.GROUND_TRUTH_TOPIC, T0)


# -- writer misuse ---------------------------------------------------------------------------------


def _cloud(
    sensor: str = "top", t: int = T0, frame: str = "lidar_top", fields: tuple[str, ...] = LIDAR_FIELDS
) -> PointCloudSample:
    return PointCloudSample(sensor, t, frame, np.zeros((2, len(fields)), np.float32), fields)


@pytest.mark.parametrize(
    ("sample", "match"),
    [
        (_cloud(sensor="ghost"), "not in the rig"),
        (_cloud(frame="base_link"), "frame_id 'base_link' differs"),
        (_cloud(fields=("x", "y", "z", "rcs")), "must have fields"),
        (_cloud(fields=("x", "y", "z", "intensity", "t", "t")), r"must have fields .* each named once"),
        (_cloud(fields=("intensity", "x", "y", "z")), "must have fields"),  # (the recorder puts them in order)
        (_cloud(t=-1), "t_ns must be an integer"),
        (ImageSample("top", T0, "lidar_top", b"jpeg"), "take PointCloudSample"),
        (_cloud(sensor="front", frame="cam_front"), "camera sensors take ImageSample"),
    ],
)
def test_writer_rejects_bad_samples(tmp_path: Path, sample: PointCloudSample | ImageSample, match: str) -> None:
    with DriveWriter(tmp_path / "w.mcap", make_rig()) as w, pytest.raises(DriveError, match=match) as info:
        w.write(sample)
    assert info.value.file == str(tmp_path / "w.mcap")


@pytest.mark.parametrize(
    ("rig", "match"),
    [
        (make_rig() + make_rig()[:1], "duplicate sensor name"),
        (
            [make_rig()[1], SensorSpec("b", SensorKind.LIDAR, "l2", Transform(), make_rig()[1].topic)],
            "topic used twice",
        ),
        ([SensorSpec("b", SensorKind.LIDAR, "base_link", Transform(), "/b")], "must be its own frame"),
        ([SensorSpec("c", SensorKind.CAMERA, "c", Transform(), "/c")], "camera has no calibration"),
        ([SensorSpec("b", SensorKind.LIDAR, "b", Transform(), "/tf")], "topic used twice"),
    ],
)
def test_writer_rejects_bad_rigs(tmp_path: Path, rig: list[SensorSpec], match: str) -> None:
    with pytest.raises(DriveError, match=match):
        DriveWriter(tmp_path / "w.mcap", rig)
    assert not (tmp_path / "w.mcap").exists()


def test_writer_rejects_bad_options_and_write_after_close(tmp_path: Path) -> None:
    with pytest.raises(DriveError, match="unknown compression"):
        DriveWriter(tmp_path / "w.mcap", [], compression="gzip")
    with pytest.raises(DriveError, match="cannot create"):
        DriveWriter(tmp_path / "no" / "such" / "dir.mcap", [])
    w = DriveWriter(tmp_path / "w.mcap", [])
    assert w.state is Lifetime.OPENED
    w.close()
    assert w.state is Lifetime.CLOSED and w.bytes_written == 0
    w.close()  # idempotent
    assert w.state is Lifetime.CLOSED
    with pytest.raises(DriveError, match="write after close"):
        w.write_ego_pose(EgoPose(T0, Transform()))


def test_writer_finishes_the_file_when_the_body_raises(tmp_path: Path) -> None:
    path = tmp_path / "w.mcap"
    with pytest.raises(RuntimeError, match="boom"), DriveWriter(path, LIDAR_ONLY) as w:
        w.write(_cloud())
        raise RuntimeError("boom")
    with DriveReader(path) as d:
        assert d.truncated is None and len(list(d.samples())) == 1


def test_numpy_integer_times_are_accepted(tmp_path: Path) -> None:
    written = write_drive(tmp_path / "ok.mcap", frames=1)
    with DriveWriter(tmp_path / "np.mcap", []) as w:
        w.write_ego_pose(EgoPose(np.int64(T0), Transform()))  # type: ignore[arg-type]
    with DriveReader(tmp_path / "np.mcap") as d:
        assert d.ego_poses()[0].t_ns == T0
    assert written.path.exists()


def test_writer_rejects_unknown_labels_and_duplicate_tracks(tmp_path: Path) -> None:
    car = GroundTruthObject(1, "car", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 0.0, (0.0, 0.0))
    with DriveWriter(tmp_path / "w.mcap", []) as w:
        with pytest.raises(DriveError, match="unknown labels \\['bus'\\]") as info:
            w.write_ground_truth(GroundTruth(T0, (GroundTruthObject(2, "bus", (0, 0, 0), (1, 1, 1), 0.0, (0, 0)),)))
        assert info.value.topic == "/ground_truth/objects"
        with pytest.raises(DriveError, match="duplicate track ids"):
            w.write_ground_truth(GroundTruth(T0, (car, car)))


def test_plain_string_kind_and_single_sensor_name(tmp_path: Path) -> None:
    spec = SensorSpec("top", "lidar", "lidar_top", Transform(), "/sensors/top/points")  # type: ignore[arg-type]
    with DriveWriter(tmp_path / "w.mcap", [spec]) as w:
        w.write(_cloud())
    with DriveReader(tmp_path / "w.mcap", sensors="top") as d:
        assert d.rig["top"].kind == SensorKind.LIDAR
        assert [s.sensor for s in d.samples(sensors="top")] == ["top"]
    with pytest.raises(DriveError, match="unknown sensor kind 'sonar'"):
        DriveWriter(tmp_path / "x.mcap", [SensorSpec("s", "sonar", "s", Transform(), "/s")])  # type: ignore[arg-type]


def test_a_drive_of_a_kind_that_is_not_registered_names_it(tmp_path: Path) -> None:
    import dataclasses

    from perception.kinds import LIDAR, register_kind, unregister_kind

    register_kind(dataclasses.replace(LIDAR, name="lidar_b"))
    try:
        with DriveWriter(tmp_path / "b.mcap", [SensorSpec("top", "lidar_b", "lidar_top", Transform(), "/top")]) as w:
            w.write(_cloud())
        with DriveReader(tmp_path / "b.mcap") as d:
            assert d.rig["top"].kind == "lidar_b"
    finally:
        unregister_kind("lidar_b")
    with pytest.raises(DriveError, match=r"sensor 'top' has unknown sensor kind 'lidar_b' \(known kinds: lidar"):
        DriveReader(tmp_path / "b.mcap")


def test_wrong_schema_on_a_fixed_topic(tmp_path: Path) -> None:
    path = tmp_path / "ego.mcap"
    write_raw(
        path,
        [],
        [(codec.EGO_TOPIC, T0, b"{}")],
        schemas={codec.EGO_TOPIC: ("perception.EgoMotion", "jsonschema", "json")},
    )
    with pytest.raises(DriveError, match=r"unknown schema 'perception\.EgoMotion'") as info:
        DriveReader(path)
    assert info.value.topic == "/ego/odometry"


def test_rig_record_with_duplicate_sensor(tmp_path: Path) -> None:
    path = tmp_path / "dup.mcap"
    write_raw(path, [*LIDAR_ONLY, *LIDAR_ONLY], [*static_messages(LIDAR_ONLY, T0)])
    with pytest.raises(DriveError, match="appears twice in the rig"):
        DriveReader(path)
