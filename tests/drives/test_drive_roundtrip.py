"""What the writer writes, the reader returns exactly; output is byte-deterministic."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest
from drive_fixtures import PERIOD, T0, Written, make_rig, write_drive
from mcap.records import Chunk
from mcap.stream_reader import StreamReader

from perception.drives import DriveReader, DriveWriter, topic_for
from perception.errors import DriveError
from perception.types import (
    EgoPose,
    GroundTruth,
    GroundTruthObject,
    ImageSample,
    PointCloudSample,
    SensorKind,
    Transform,
)


def assert_same_sample(got: PointCloudSample | ImageSample, want: PointCloudSample | ImageSample) -> None:
    assert type(got) is type(want)
    assert (got.sensor, got.t_ns, got.frame_id, got.seq) == (want.sensor, want.t_ns, want.frame_id, want.seq)
    if isinstance(want, PointCloudSample):
        assert isinstance(got, PointCloudSample)
        assert got.fields == want.fields
        assert got.points.dtype == np.float32
        assert got.points.shape == want.points.shape
        assert got.points.tobytes() == want.points.tobytes()  # bit-exact
    else:
        assert isinstance(got, ImageSample)
        assert (got.data, got.format) == (want.data, want.format)


def test_samples_round_trip_in_time_order(drive: Written) -> None:
    with DriveReader(drive.path) as d:
        got = list(d.samples())
    want = drive.sorted_samples()
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert_same_sample(g, w)
    assert [s.t_ns for s in got] == sorted(s.t_ns for s in got)
    assert any(isinstance(s, PointCloudSample) and len(s.points) == 0 for s in got)  # empty clouds survive


def test_rig_calibration_extrinsics_and_metadata_round_trip(drive: Written) -> None:
    with DriveReader(drive.path) as d:
        assert d.path == drive.path
        assert dict(d.rig) == {s.name: s for s in drive.rig}  # exact: extrinsic, K, D, topic, frame, rate
        assert dict(d.metadata) == drive.metadata
        assert d.start_ns == T0
        assert d.end_ns == T0 + 11 * PERIOD + 7_000_000
        assert d.has_ground_truth
        assert d.truncated is None


def test_ego_and_ground_truth_round_trip(drive: Written) -> None:
    with DriveReader(drive.path) as d:
        assert d.ego_poses() == drive.ego
        assert d.ground_truth() == drive.gt
    assert any(not g.objects for g in drive.gt)
    assert any(o.velocity[1] == 0.0 for g in drive.gt for o in g.objects)


def test_ego_pose_at_interpolates_and_holds(drive: Written) -> None:
    with DriveReader(drive.path) as d:
        assert d.ego_pose_at(drive.ego[3].t_ns) == drive.ego[3]
        a, b = drive.ego[3], drive.ego[4]
        mid = d.ego_pose_at((a.t_ns + b.t_ns) // 2)
        assert mid.t_ns == (a.t_ns + b.t_ns) // 2
        np.testing.assert_allclose(mid.pose.translation, np.add(a.pose.translation, b.pose.translation) / 2, atol=1e-9)
        assert math.isclose(mid.pose.yaw(), (a.pose.yaw() + b.pose.yaw()) / 2, abs_tol=1e-9)
        assert math.isclose(mid.yaw_rate, (a.yaw_rate + b.yaw_rate) / 2)
        np.testing.assert_allclose(mid.linear_velocity, np.add(a.linear_velocity, b.linear_velocity) / 2)
        before = d.ego_pose_at(T0 - 5)
        assert (before.t_ns, before.pose) == (T0 - 5, drive.ego[0].pose)
        assert d.ego_pose_at(T0 + 10**12).pose == drive.ego[-1].pose


def test_ego_pose_at_slerps_across_the_yaw_wrap(tmp_path: Path) -> None:
    poses = [
        EgoPose(0, Transform.from_xyz_rpy((0, 0, 0), (0, 0, math.pi - 0.1))),
        EgoPose(100, Transform.from_xyz_rpy((1, 0, 0), (0, 0, -math.pi + 0.1))),
    ]
    with DriveWriter(tmp_path / "wrap.mcap", []) as w:
        for p in poses:
            w.write_ego_pose(p)
    with DriveReader(tmp_path / "wrap.mcap") as d:
        mid = d.ego_pose_at(50)
    assert math.isclose(abs(mid.pose.yaw()), math.pi, abs_tol=1e-9)  # the short way round


def test_ground_truth_at_nearest_within_tolerance(drive: Written) -> None:
    with DriveReader(drive.path) as d:
        assert d.ground_truth_at(drive.gt[5].t_ns + 10, tolerance_ns=20) == drive.gt[5]
        assert d.ground_truth_at(drive.gt[5].t_ns + PERIOD // 2, tolerance_ns=PERIOD) == drive.gt[5]  # tie: earlier
        assert d.ground_truth_at(drive.gt[5].t_ns + 30, tolerance_ns=20) is None
        assert d.ground_truth_at(T0 - PERIOD, tolerance_ns=PERIOD) == drive.gt[0]


def test_seek_by_time_is_half_open(drive: Written) -> None:
    start, end = T0 + 3 * PERIOD, T0 + 6 * PERIOD
    with DriveReader(drive.path) as d:
        got = list(d.samples(start_ns=start, end_ns=end))
        assert list(d.samples(start_ns=end, end_ns=end)) == []
        tail = list(d.samples(start_ns=T0 + 10 * PERIOD))
        with pytest.raises(DriveError, match="after end_ns"):
            d.samples(start_ns=end, end_ns=start)
    want = [s for s in drive.sorted_samples() if start <= s.t_ns < end]
    assert [(s.sensor, s.t_ns) for s in got] == [(s.sensor, s.t_ns) for s in want]
    assert len(got) == 9 and len(tail) == 6


def test_topic_selection(drive: Written) -> None:
    with DriveReader(drive.path) as d:
        lidar = list(d.samples(sensors=["top"]))
        assert {s.sensor for s in lidar} == {"top"} and len(lidar) == 12
        with pytest.raises(DriveError, match="no sensor 'nope'"):
            d.samples(sensors=["nope"])
    with DriveReader(drive.path, sensors=["radar", "front"]) as d:
        assert list(d.rig) == ["front", "radar"]
        assert {s.sensor for s in d.samples()} == {"front", "radar"}
        with pytest.raises(DriveError, match="no sensor 'top'"):
            d.samples(sensors=["top"])
    with pytest.raises(DriveError, match="no sensor 'lidar9'"):
        DriveReader(drive.path, sensors=["lidar9"])


def test_two_writes_are_byte_identical_whatever_the_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = write_drive(tmp_path / "a.mcap", seed=7).path.read_bytes()
    monkeypatch.setattr(time, "time", lambda: 4.0e9)
    monkeypatch.setattr(time, "time_ns", lambda: 4 * 10**18)
    b = write_drive(tmp_path / "b.mcap", seed=7).path.read_bytes()
    assert a == b
    assert write_drive(tmp_path / "c.mcap", seed=8).path.read_bytes() != a


@pytest.mark.parametrize("compression", ["lz4", "none"])
def test_other_compressions_round_trip(tmp_path: Path, compression: str) -> None:
    written = write_drive(tmp_path / f"{compression}.mcap", frames=3, compression=compression)
    with DriveReader(written.path) as d:
        assert len(list(d.samples())) == 9
        assert d.ground_truth() == written.gt


def test_a_drive_written_without_crcs_round_trips_and_says_so(tmp_path: Path) -> None:
    # a run recording's choice (cheaper to write): MCAP's CRC 0, "not computed", which readers skip
    written = write_drive(tmp_path / "nocrc.mcap", frames=5, compression="none", crcs=False, chunk_size=2_000)
    with DriveReader(written.path, strict=True) as d:
        for got, want in zip(d.samples(), sorted(written.samples, key=lambda s: s.t_ns), strict=True):
            assert_same_sample(got, want)
        assert d.ground_truth() == written.gt
    with written.path.open("rb") as f:
        chunks = [r for r in StreamReader(f, skip_magic=False, emit_chunks=True).records if isinstance(r, Chunk)]
        assert len(chunks) > 1 and all(c.uncompressed_crc == 0 for c in chunks)
    with_crcs = write_drive(tmp_path / "crc.mcap", frames=5, compression="none", chunk_size=2_000)
    with with_crcs.path.open("rb") as f:
        chunks = [r for r in StreamReader(f, skip_magic=False, emit_chunks=True).records if isinstance(r, Chunk)]
        assert chunks and all(c.uncompressed_crc != 0 for c in chunks)


def test_stats(drive: Written) -> None:
    with DriveReader(drive.path) as d:
        stats = d.stats()
    assert stats.sensors == {"front": SensorKind.CAMERA, "top": SensorKind.LIDAR, "radar": SensorKind.RADAR}
    assert stats.has_ground_truth and stats.truncated is None
    assert stats.duration_ns == 11 * PERIOD + 7_000_000
    lidar = stats.topics[topic_for("lidar", "top")]
    assert (lidar.schema, lidar.message_count, lidar.first_t_ns, lidar.last_t_ns) == (
        "foxglove.PointCloud",
        12,
        T0,
        T0 + 11 * PERIOD,
    )
    assert math.isclose(lidar.rate_hz, 10.0)
    assert stats.topics["/sensors/front/image/compressed"].schema == "foxglove.CompressedImage"
    assert stats.topics["/ego/odometry"].message_count == 12
    assert stats.topics["/tf"].message_count == 12
    assert stats.topics["/ground_truth/objects"].schema == "foxglove.SceneUpdate"
    assert stats.topics["/tf_static"].message_count == 2  # repeated once per second of drive
    assert stats.topics["/sensors/front/calibration"].message_count == 2


def test_empty_drive_and_drive_without_ground_truth(tmp_path: Path) -> None:
    with DriveWriter(tmp_path / "empty.mcap", make_rig()):
        pass
    with DriveReader(tmp_path / "empty.mcap") as d:  # static data only, written at close at t=0
        assert d.rig["front"].calibration == make_rig()[0].calibration
        assert list(d.samples()) == [] and d.ego_poses() == [] and not d.has_ground_truth
        assert (d.start_ns, d.end_ns) == (0, 0)
        with pytest.raises(DriveError, match="no ego poses"):
            d.ego_pose_at(0)
    written = write_drive(tmp_path / "nogt.mcap", frames=2, ground_truth=False)
    with DriveReader(written.path) as d:
        assert not d.has_ground_truth and d.ground_truth() == [] and d.ground_truth_at(T0, 10) is None


def test_gt_objects_with_odd_values_round_trip(tmp_path: Path) -> None:
    obj = GroundTruthObject(2**40, "pedestrian", (1e-300, -0.0, 3.3), (0.1, 0.2, 1.7), -math.pi, (1 / 3, -2e-17))
    with DriveWriter(tmp_path / "gt.mcap", []) as w:
        w.write_ground_truth(GroundTruth(5, (obj,)))
    with DriveReader(tmp_path / "gt.mcap") as d:
        (gt,) = d.ground_truth()
    assert gt == GroundTruth(5, (obj,))
    assert math.copysign(1.0, gt.objects[0].center[1]) == -1.0


def test_special_float_bit_patterns_survive_the_file(tmp_path: Path) -> None:
    bits = np.array(
        [[0x7FC00001, 0x7F800001, 0xFF800000, 0x80000000], [0x00000001, 0x7F800000, 0xFFFFFFFF, 0]], np.uint32
    )
    rig = [s for s in make_rig() if s.kind == SensorKind.LIDAR]
    with DriveWriter(tmp_path / "nan.mcap", rig) as w:
        w.write(PointCloudSample("top", 1, "lidar_top", bits.view(np.float32), ("x", "y", "z", "intensity")))
    with DriveReader(tmp_path / "nan.mcap") as d:
        (s,) = list(d.samples())
    assert isinstance(s, PointCloudSample)
    assert s.points.view(np.uint32).tolist() == bits.tolist()


def test_bytes_written_is_the_file_s_size_as_chunks_are_written(tmp_path: Path) -> None:
    # what a recording's segment cap reads after every message: the bytes in the file so far (its chunks
    # written with writev past the stream's buffer), counted without asking the file
    rig = [s for s in make_rig() if s.kind == SensorKind.LIDAR]
    path = tmp_path / "sizes.mcap"
    seen = []
    lidar = ("x", "y", "z", "intensity")
    with DriveWriter(path, rig, chunk_size=4096) as w:
        for i in range(40):
            w.write(PointCloudSample("top", 1 + i, "lidar_top", np.full((100, 4), i, np.float32), lidar))
            w._file.flush()
            seen.append(w.bytes_written)
            assert w.bytes_written == path.stat().st_size
        final = w.bytes_written
    assert len(set(seen)) > 10 and seen == sorted(seen)  # chunks written one after another, each counted
    assert path.stat().st_size > final  # the summary and footer came at close


def test_a_cloud_s_other_fields_after_its_kind_s_are_written_and_read_on_request(tmp_path: Path) -> None:
    # A run's recording holds its clouds as the run took them: a lidar's ring after its x, y, z, intensity. Before,
    # the writer refused every cloud whose fields were not its kind's alone.
    rig = [s for s in make_rig() if s.name == "top"]
    fields = ("x", "y", "z", "intensity", "ring")
    points = np.arange(15, dtype=np.float32).reshape(3, 5)
    with DriveWriter(tmp_path / "d.mcap", rig) as w:
        w.write(PointCloudSample("top", T0, rig[0].frame_id, points, fields))
    with DriveReader(tmp_path / "d.mcap", strict=True) as r:
        [plain] = r.samples()
        [every] = r.samples(extra_fields=True)
    assert plain.fields == fields[:4] and every.fields == fields
    np.testing.assert_array_equal(plain.points, points[:, :4])
    np.testing.assert_array_equal(every.points, points)
