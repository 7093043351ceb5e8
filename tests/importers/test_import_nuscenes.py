"""``import_nuscenes`` on a tiny nuScenes-format dataset built in tmp_path."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from import_fixtures import NuScenes, write_nuscenes

from perception._imageio import encode_jpeg
from perception.drives import DriveReader
from perception.errors import DriveError
from perception.importers import ImportSummary, import_nuscenes
from perception.importers._nuscenes import nuscenes_label
from perception.types import ImageSample, PointCloudSample, SensorKind, Transform

US = 1000


def _same_transform(a: Transform, b: Transform) -> bool:
    return bool(np.allclose(a.matrix(), b.matrix(), atol=1e-9))


def test_rig_from_calibrated_sensor(nuscenes: NuScenes, nuscenes_drive: tuple[Path, ImportSummary]) -> None:
    path, _ = nuscenes_drive
    with DriveReader(path) as d:
        rig = d.rig
        meta = d.metadata
    assert list(rig) == ["lidar_top", "radar_front", "cam_front"]
    assert [s.kind for s in rig.values()] == [SensorKind.LIDAR, SensorKind.RADAR, SensorKind.CAMERA]
    # nuScenes stores (w, x, y, z); the drive's Transform is (x, y, z, w).
    assert _same_transform(rig["lidar_top"].extrinsic, nuscenes.lidar_extrinsic)
    assert _same_transform(rig["radar_front"].extrinsic, nuscenes.radar_extrinsic)
    assert _same_transform(rig["cam_front"].extrinsic, nuscenes.cam_extrinsic)
    cal = rig["cam_front"].calibration
    assert cal is not None
    assert (cal.width, cal.height) == (32, 24)
    assert cal.k == tuple(v for row in nuscenes.cam_k for v in row)
    assert rig["cam_front"].rate_hz == pytest.approx(2.0)  # keyframes 0.5 s apart
    assert meta["nuscenes.scene"] == "scene-0061"
    assert meta["nuscenes.location"] == "sg"
    assert meta["source"] == "nuscenes"


def test_the_rig_s_rates_are_those_of_the_files_present(tmp_path: Path) -> None:
    """A dataroot without ``sweeps/`` (keyframes only, as many excerpts ship) gives a lidar at the keyframes'
    2 Hz. The rate came from every sample_data record, sweeps whose files are missing included: 20 Hz on the
    real scene-0916, and ``perception live`` on that drive opened a timer frame every 50 ms for a lidar that
    came every 500 ms (401 frames "expected", 6 ok)."""
    ds = write_nuscenes(tmp_path / "ds")
    shutil.rmtree(ds.root / "sweeps")
    summary = import_nuscenes(ds.root, ds.scene, tmp_path / "k.mcap", version=ds.version)
    with DriveReader(tmp_path / "k.mcap") as d:
        assert d.rig["lidar_top"].rate_hz == pytest.approx(2.0)  # keyframes 0.5 s apart
        assert d.rig["cam_front"].rate_hz == pytest.approx(2.0)
    assert any(n.startswith("rates of the files present") and "lidar_top 2 (4)" in n for n in summary.notes)


def test_lidar_keyframes_and_sweeps(nuscenes: NuScenes, nuscenes_drive: tuple[Path, ImportSummary]) -> None:
    path, summary = nuscenes_drive
    with DriveReader(path) as d:
        got = list(d.samples(sensors="lidar_top"))
    expected_us = sorted(nuscenes.lidar_points)  # 3 keyframes + the sweep whose file exists
    assert nuscenes.missing_sweep_us not in expected_us
    assert [s.t_ns for s in got] == [t * US for t in expected_us]  # microseconds -> ns
    for sample, t in zip(got, expected_us, strict=True):
        assert isinstance(sample, PointCloudSample)
        np.testing.assert_array_equal(sample.points, nuscenes.lidar_points[t][:, :4])  # ring dropped
    assert summary.skipped["lidar_top: sweep files missing"] == 1


def test_radar_pcd_radial_velocity(nuscenes: NuScenes, nuscenes_drive: tuple[Path, ImportSummary]) -> None:
    path, summary = nuscenes_drive
    with DriveReader(path) as d:
        (sample,) = list(d.samples(sensors="radar_front"))
    assert isinstance(sample, PointCloudSample)
    assert sample.t_ns == nuscenes.radar_us * US
    rp = nuscenes.radar_points
    keep = (rp["invalid_state"] == 0) & (rp["ambig_state"] == 3)  # the devkit's default filters
    assert int(keep.sum()) == 4 and len(sample.points) == 4
    kept = rp[keep]
    r = np.hypot(kept["x"], kept["y"])  # z = 0
    vr = (kept["x"] * kept["vx_comp"] + kept["y"] * kept["vy_comp"]) / r
    np.testing.assert_array_equal(sample.points[:, 0], kept["x"])
    np.testing.assert_allclose(sample.points[:, 3], vr, rtol=1e-5)
    np.testing.assert_array_equal(sample.points[:, 4], kept["rcs"])
    assert summary.skipped["radar_front: radar points removed by the devkit's default filters"] == 2


def test_camera_jpeg_passthrough(nuscenes: NuScenes, nuscenes_drive: tuple[Path, ImportSummary]) -> None:
    path, _ = nuscenes_drive
    with DriveReader(path) as d:
        got = list(d.samples(sensors="cam_front"))
    assert [(s.t_ns, s.data) for s in got if isinstance(s, ImageSample)] == [
        (t * US, data) for t, data in sorted(nuscenes.jpegs.items())
    ]


def test_ego_poses_and_velocity(nuscenes: NuScenes, nuscenes_drive: tuple[Path, ImportSummary]) -> None:
    path, _ = nuscenes_drive
    with DriveReader(path) as d:
        poses = d.ego_poses()
    assert [p.t_ns for p in poses] == [t * US for t in sorted(nuscenes.ego)]  # one per sensor timestamp
    for p in poses:
        expected = nuscenes.ego[p.t_ns // US]
        assert _same_transform(p.pose, expected)
        # The fixture drives at (4, 1) m/s in the world frame, turning at 0.05 rad/s.
        v_body = expected.rotation_matrix().T @ np.array([4.0, 1.0, 0.0])
        np.testing.assert_allclose(p.linear_velocity, v_body, atol=1e-6)
        assert p.yaw_rate == pytest.approx(0.05, abs=1e-6)


def test_ground_truth_in_base_link(nuscenes: NuScenes, nuscenes_drive: tuple[Path, ImportSummary]) -> None:
    path, summary = nuscenes_drive
    with DriveReader(path) as d:
        gts = d.ground_truth()
    assert [g.t_ns for g in gts] == [t * US for t in nuscenes.keyframe_us]
    assert [[o.label for o in g.objects] for g in gts] == [["car", "pedestrian"], ["car"], ["car"]]
    anns = {a["token"]: a for a in nuscenes.annotations}
    for i, gt in enumerate(gts):
        ego = nuscenes.ego[nuscenes.keyframe_us[i]]  # the LIDAR_TOP keyframe's ego pose
        car = gt.objects[0]
        ann = anns[f"ann-car-{i}"]
        center = ego.inverse().apply([ann["translation"]])[0]
        np.testing.assert_allclose(car.center, center, atol=1e-9)
        assert car.size == (4.6, 1.9, 1.6)  # nuScenes (w, l, h) -> (l, w, h)
        assert car.yaw == pytest.approx(1.2 - ego.yaw(), abs=1e-9)
        v = ego.rotation_matrix().T @ np.array([8.0, -2.0, 0.0])  # global velocity rotated into ego
        np.testing.assert_allclose(car.velocity, v[:2], atol=1e-9)
        assert car.track_id == 0
    ped = gts[0].objects[1]
    assert ped.track_id == 1 and ped.size == (0.7, 0.6, 1.8)
    assert all(math.isnan(v) for v in ped.velocity)  # single annotation: unknown, as in the devkit
    assert summary.skipped["annotations of category movable_object.trafficcone (not one of our labels)"] == 1
    assert any("unknown velocity" in n for n in summary.notes)


def test_summary_lines(nuscenes_drive: tuple[Path, ImportSummary]) -> None:
    _, summary = nuscenes_drive
    assert summary.messages["/sensors/lidar_top/points"] == 4
    assert summary.messages["/ground_truth/objects"] == 3
    text = "\n".join(summary.lines())
    assert "lidar_top: sweep files missing: 1" in text
    assert "/sensors/cam_front/image/compressed  3" in text


def test_channels_and_radar_filter_options(nuscenes: NuScenes, tmp_path: Path) -> None:
    out = tmp_path / "radar.mcap"
    summary = import_nuscenes(
        nuscenes.root, nuscenes.scene, out, version=nuscenes.version, channels=["radar_front"], radar_filters=False
    )
    with DriveReader(out) as d:
        assert list(d.rig) == ["radar_front"]
        (sample,) = list(d.samples())
        assert len(sample.points) == 6
        assert len(d.ground_truth()) == 3  # ground truth does not depend on the channel selection
    assert not any("filters" in reason for reason in summary.skipped)
    with pytest.raises(DriveError, match=r"no channel LIDAR_FRONT in scene 'scene-0061' \(has CAM_FRONT,"):
        import_nuscenes(nuscenes.root, nuscenes.scene, tmp_path / "x.mcap", channels=["LIDAR_FRONT"])


def test_nuscenes_labels() -> None:
    assert nuscenes_label("vehicle.car") == "car"
    assert nuscenes_label("vehicle.bus.bendy") == "truck"
    assert nuscenes_label("vehicle.construction") == "truck"
    assert nuscenes_label("human.pedestrian.police_officer") == "pedestrian"
    assert nuscenes_label("vehicle.motorcycle") == "cyclist"
    assert nuscenes_label("vehicle.emergency.police") is None
    assert nuscenes_label("vehicle.cargo") is None  # a prefix must end at a dot
    assert nuscenes_label("animal") is None


# -- errors ------------------------------------------------------------------------------------------


def test_unknown_scene_lists_the_available_ones(nuscenes: NuScenes, tmp_path: Path) -> None:
    with pytest.raises(DriveError, match=r"unknown scene 'scene-9999'; available: scene-0061, scene-0103") as exc:
        import_nuscenes(nuscenes.root, "scene-9999", tmp_path / "x.mcap")
    assert exc.value.file == str(nuscenes.root / "v1.0-mini" / "scene.json")


def test_unknown_version_lists_the_available_ones(nuscenes: NuScenes, tmp_path: Path) -> None:
    with pytest.raises(DriveError, match=r"no table directory for version 'v1.0-trainval' \(found: v1.0-mini\)"):
        import_nuscenes(nuscenes.root, nuscenes.scene, tmp_path / "x.mcap", version="v1.0-trainval")


def test_the_table_directory_given_as_dataroot_says_which_is_the_dataroot(nuscenes: NuScenes, tmp_path: Path) -> None:
    """``perception import nuscenes DATAROOT/v1.0-mini`` (a user pointing at the folder of JSON tables) was
    'DATAROOT/v1.0-mini/v1.0-mini: no table directory ... (found: none)': now it names the dataroot."""
    tables = nuscenes.root / nuscenes.version
    with pytest.raises(DriveError, match="no table directory") as exc:
        import_nuscenes(tables, nuscenes.scene, tmp_path / "x.mcap", version=nuscenes.version)
    assert f"DATAROOT is the directory above it, {nuscenes.root}" in str(exc.value)
    assert not (tmp_path / "x.mcap").exists()


def test_missing_table_names_the_file(tmp_path: Path) -> None:
    ds = write_nuscenes(tmp_path / "ds")
    (ds.root / ds.version / "instance.json").unlink()
    with pytest.raises(DriveError, match="nuScenes table 'instance' is missing") as exc:
        import_nuscenes(ds.root, ds.scene, tmp_path / "x.mcap")
    assert exc.value.file == str(ds.root / ds.version / "instance.json")


def test_optional_tables_may_be_missing(tmp_path: Path) -> None:
    ds = write_nuscenes(tmp_path / "ds")
    for name in ("log", "map", "attribute", "visibility"):
        (ds.root / ds.version / f"{name}.json").unlink()
    summary = import_nuscenes(ds.root, ds.scene, tmp_path / "x.mcap")
    assert summary.messages["/ground_truth/objects"] == 3


@pytest.mark.parametrize(
    ("table", "content", "message"),
    [
        ("sample", "[{", "invalid JSON at line 1"),
        ("sample", '{"token": "x"}', "expected a JSON list of records"),
        ("ego_pose", '[{"token": "e", "timestamp": 1}]', "record 0 has no 'translation', 'rotation'"),
    ],
)
def test_malformed_table(tmp_path: Path, table: str, content: str, message: str) -> None:
    ds = write_nuscenes(tmp_path / "ds")
    (ds.root / ds.version / f"{table}.json").write_text(content)
    with pytest.raises(DriveError, match=message) as exc:
        import_nuscenes(ds.root, ds.scene, tmp_path / "x.mcap")
    assert exc.value.file == str(ds.root / ds.version / f"{table}.json")


def test_bad_record_values_name_the_table(tmp_path: Path) -> None:
    ds = write_nuscenes(tmp_path / "ds")
    path = ds.root / ds.version / "calibrated_sensor.json"
    rows = json.loads(path.read_text())
    rows[0]["rotation"] = [1.0, 0.0]
    path.write_text(json.dumps(rows))
    with pytest.raises(DriveError, match=r"rotation must be 4 finite numbers") as exc:
        import_nuscenes(ds.root, ds.scene, tmp_path / "x.mcap")
    assert exc.value.file == str(path)


@pytest.mark.parametrize(("table", "value"), [("sample_data", -5), ("ego_pose", 2**64 // 1000 + 1), ("sample", 1.5)])
def test_a_timestamp_a_drive_cannot_hold_names_the_table_and_record(tmp_path: Path, table: str, value: object) -> None:
    # a negative one was the writer's error, naming the hidden partial drive file, deleted as the import failed
    ds = write_nuscenes(tmp_path / "ds")
    path = ds.root / ds.version / f"{table}.json"
    rows = json.loads(path.read_text())
    rows[1]["timestamp"] = value
    path.write_text(json.dumps(rows))
    with pytest.raises(DriveError, match=rf"record 1: timestamp must be integer microseconds .*got {value!r}$") as exc:
        import_nuscenes(ds.root, ds.scene, tmp_path / "x.mcap")
    assert exc.value.file == str(path) and not list(tmp_path.glob("*x.mcap*"))


def test_two_annotations_of_one_instance_in_a_sample_name_both_records(tmp_path: Path) -> None:
    # the writer's 'duplicate track ids' named the hidden partial drive file, not the annotations
    ds = write_nuscenes(tmp_path / "ds")
    path = ds.root / ds.version / "sample_annotation.json"
    rows = json.loads(path.read_text())
    copy = {**rows[0], "token": "copy"}
    path.write_text(json.dumps([*rows, copy]))
    message = rf"records '{rows[0]['token']}' and 'copy': two annotations of instance '{rows[0]['instance_token']}'"
    with pytest.raises(DriveError, match=message + rf" in sample '{rows[0]['sample_token']}'") as exc:
        import_nuscenes(ds.root, ds.scene, tmp_path / "x.mcap")
    assert exc.value.file == str(path) and not list(tmp_path.glob("*x.mcap*"))


@pytest.mark.parametrize(
    ("table", "key"),
    [("sample_data", "token"), ("sample_data", "calibrated_sensor_token"), ("sample_data", "filename")],
)
def test_a_token_that_is_not_a_string_names_the_table(tmp_path: Path, table: str, key: str) -> None:
    # A list or object as a token was a TypeError traceback (unhashable type) while indexing the tables.
    ds = write_nuscenes(tmp_path / "ds")
    path = ds.root / ds.version / f"{table}.json"
    rows = json.loads(path.read_text())
    rows[1][key] = ["not", "a", "token"]
    path.write_text(json.dumps(rows))
    with pytest.raises(DriveError, match=rf"record 1: {key} must be a string, got \['not', 'a', 'token'\]") as exc:
        import_nuscenes(ds.root, ds.scene, tmp_path / "x.mcap")
    assert exc.value.file == str(path)


@pytest.mark.parametrize("value", ["false", 0, None])
def test_is_key_frame_must_be_a_boolean(tmp_path: Path, value: object) -> None:
    # "false" was taken for true: every sweep a keyframe, ground truth placed with a sweep's ego pose
    ds = write_nuscenes(tmp_path / "ds")
    path = ds.root / ds.version / "sample_data.json"
    rows = json.loads(path.read_text())
    rows[2]["is_key_frame"] = value
    path.write_text(json.dumps(rows))
    with pytest.raises(DriveError, match=rf"record 2: is_key_frame must be true or false, got {value!r}$") as exc:
        import_nuscenes(ds.root, ds.scene, tmp_path / "x.mcap")
    assert exc.value.file == str(path)


@pytest.mark.parametrize("width", [0, "abc", None])
def test_camera_image_size_names_sample_data(tmp_path: Path, width: object) -> None:
    # The error named calibrated_sensor.json ("bad intrinsics or image size"): the size is in sample_data.json.
    ds = write_nuscenes(tmp_path / "ds")
    path = ds.root / ds.version / "sample_data.json"
    rows = json.loads(path.read_text())
    for row in rows:
        if row["filename"].startswith("samples/CAM_FRONT/"):
            row["width"] = width
    path.write_text(json.dumps(rows))
    with pytest.raises(
        DriveError, match=rf"camera CAM_FRONT: width and height must be positive integers, got {width!r} x 24"
    ) as exc:
        import_nuscenes(ds.root, ds.scene, tmp_path / "x.mcap")
    assert exc.value.file == str(path)


def test_corrupt_sensor_file_names_it(tmp_path: Path) -> None:
    ds = write_nuscenes(tmp_path / "ds")
    lidar = sorted((ds.root / "samples" / "LIDAR_TOP").iterdir())[0]
    lidar.write_bytes(b"\x00" * 21)
    out = tmp_path / "x.mcap"
    with pytest.raises(DriveError, match="not a whole number of 5 x float32 points") as exc:
        import_nuscenes(ds.root, ds.scene, out)
    assert exc.value.file == str(lidar)
    assert not out.exists()


def test_an_empty_lidar_file_is_refused_naming_it(tmp_path: Path) -> None:
    # a 0-byte .pcd.bin (a failed copy) was imported as a sweep of no points, neither refused nor counted
    ds = write_nuscenes(tmp_path / "ds")
    lidar = sorted((ds.root / "samples" / "LIDAR_TOP").iterdir())[0]
    lidar.write_bytes(b"")
    out = tmp_path / "x.mcap"
    with pytest.raises(DriveError, match=r"empty file \(0 bytes\): a lidar sweep has points") as exc:
        import_nuscenes(ds.root, ds.scene, out)
    assert exc.value.file == str(lidar)
    assert not out.exists()


def test_no_sensor_file_at_all_is_an_error(tmp_path: Path) -> None:
    # A dataroot without the scene's sensor files (tables only, or the wrong directory) imported a drive
    # of ego poses and ground truth and no sample at all, exit 0; so did a channel whose files are all missing.
    ds = write_nuscenes(tmp_path / "ds")
    out = tmp_path / "x.mcap"
    shutil.rmtree(ds.root / "samples" / "RADAR_FRONT")
    with pytest.raises(DriveError, match=r"none of the 1 sensor files of scene 'scene-0061' is there") as exc:
        import_nuscenes(ds.root, ds.scene, out, channels=["RADAR_FRONT"])
    assert exc.value.file == str(ds.root) and not out.exists()
    import_nuscenes(ds.root, ds.scene, out, channels=["LIDAR_TOP"])  # a channel with its files still imports
    out.unlink()
    for d in ("samples", "sweeps"):
        shutil.rmtree(ds.root / d, ignore_errors=True)
    with pytest.raises(DriveError, match=r"expected the dataset root holding samples/ and sweeps/") as exc:
        import_nuscenes(ds.root, ds.scene, out)
    assert exc.value.file == str(ds.root) and not out.exists()


@pytest.mark.parametrize(
    ("cut", "message"),
    [
        (False, r"image is 16x12 but the camera's sample_data width x height is 32x24"),
        (True, r"not a readable JPEG: no frame header \(truncated\?\)"),
    ],
)
def test_camera_image_that_does_not_fit_its_calibration_names_it(tmp_path: Path, cut: bool, message: str) -> None:
    # Only the JPEG magic was checked: a truncated image or one of another size (a resized copy of the
    # dataset) was imported with intrinsics for the declared size, exit 0.
    ds = write_nuscenes(tmp_path / "ds")
    jpeg = sorted((ds.root / "samples" / "CAM_FRONT").iterdir())[1]
    other = encode_jpeg(np.zeros((12, 16, 3), np.uint8))
    jpeg.write_bytes(jpeg.read_bytes()[:20] if cut else other)
    out = tmp_path / "x.mcap"
    with pytest.raises(DriveError, match=message) as exc:
        import_nuscenes(ds.root, ds.scene, out)
    assert exc.value.file == str(jpeg) and not out.exists()


def test_a_camera_image_cut_short_is_refused_naming_it(tmp_path: Path) -> None:
    # Its header whole (the size read from it fits), its body cut short (the first 60 %: a partial
    # download): imported, for every replay to fail decoding it.
    ds = write_nuscenes(tmp_path / "ds")
    jpeg = sorted((ds.root / "samples" / "CAM_FRONT").iterdir())[1]
    whole = jpeg.read_bytes()
    jpeg.write_bytes(whole[: len(whole) * 6 // 10])
    out = tmp_path / "x.mcap"
    with pytest.raises(
        DriveError, match=r"JPEG image does not end with its end-of-image marker \(FF D9\): cut short"
    ) as exc:
        import_nuscenes(ds.root, ds.scene, out, version=ds.version)
    assert exc.value.file == str(jpeg) and not out.exists()
    jpeg.write_bytes(whole + bytes(3))  # zero padding after the end marker (a camera's, to a 4-byte word): whole
    import_nuscenes(ds.root, ds.scene, out, version=ds.version)
    with DriveReader(out) as d:
        assert whole + bytes(3) in [s.data for s in d.samples(sensors="cam_front") if isinstance(s, ImageSample)]


@pytest.mark.parametrize("filename", ["/etc/passwd", "../outside.bin", "samples/../../outside.bin", "C:\\secret"])
def test_a_filename_outside_the_dataroot_is_refused_before_any_file_is_read(tmp_path: Path, filename: str) -> None:
    ds = write_nuscenes(tmp_path / "ds")
    (tmp_path / "outside.bin").write_bytes(b"\x00" * 20)  # a whole number of points: read, it would import
    path = ds.root / ds.version / "sample_data.json"
    rows = json.loads(path.read_text())
    rows[0]["filename"] = filename
    path.write_text(json.dumps(rows))
    out = tmp_path / "x.mcap"
    with pytest.raises(DriveError, match="is not a path inside the dataroot") as exc:
        import_nuscenes(ds.root, ds.scene, out)
    assert exc.value.file == str(path) and not out.exists()
