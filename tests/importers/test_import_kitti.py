"""``import_kitti`` on KITTI-format trees built in tmp_path (object, tracking with OXTS, View-of-Delft
radar, broken files)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from kitti_fixtures import (
    CAM2_OFFSET,
    CAM3_OFFSET,
    IMAGE_SIZE,
    TILTED,
    UPRIGHT,
    VOD_CAM_LIDAR,
    VOD_CAM_RADAR,
    Box,
    K,
    ObjectTree,
    TrackingTree,
    VodTree,
    jpeg,
    png,
    write_object,
    write_tracking,
    write_vod,
)

from perception.cli import main
from perception.drives import DriveReader
from perception.errors import DriveError
from perception.importers import ImportSummary, import_kitti, parse_frames
from perception.importers._kitti import KITTI_LABELS, OBJECT_FRAME_GAP_NS, format_frames, kitti_label
from perception.types import GroundTruthObject, ImageSample, PointCloudSample, SensorKind

S = OBJECT_FRAME_GAP_NS  # object frame n is at n x S


@pytest.fixture(scope="module")
def object_tree(tmp_path_factory: pytest.TempPathFactory) -> ObjectTree:
    return write_object(tmp_path_factory.mktemp("kitti_object"))


@pytest.fixture(scope="module")
def object_drive(object_tree: ObjectTree) -> tuple[Path, ImportSummary]:
    out = object_tree.root.parent / "object.mcap"
    return out, import_kitti(object_tree.root, out)


@pytest.fixture(scope="module")
def tracking_tree(tmp_path_factory: pytest.TempPathFactory) -> TrackingTree:
    return write_tracking(tmp_path_factory.mktemp("kitti_tracking"))


@pytest.fixture(scope="module")
def tracking_drive(tracking_tree: TrackingTree) -> tuple[Path, ImportSummary]:
    out = tracking_tree.root.parent / "tracking.mcap"
    return out, import_kitti(tracking_tree.root, out, sequence="0000")


@pytest.fixture(scope="module")
def vod_tree(tmp_path_factory: pytest.TempPathFactory) -> VodTree:
    return write_vod(tmp_path_factory.mktemp("vod"))


@pytest.fixture(scope="module")
def vod_drive(vod_tree: VodTree) -> tuple[Path, ImportSummary]:
    out = vod_tree.root.parent / "vod.mcap"
    return out, import_kitti(vod_tree.root, out)


def _match(objects: tuple[GroundTruthObject, ...], box: Box) -> GroundTruthObject:
    return min(objects, key=lambda o: float(np.hypot(o.center[0] - box.centre[0], o.center[1] - box.centre[1])))


def _angle(a: float, b: float) -> float:
    return abs(math.remainder(a - b, 2 * math.pi))


def _inside(points: npt.NDArray[np.float64], o: GroundTruthObject) -> int:
    q = points - np.asarray(o.center)
    c, s = math.cos(o.yaw), math.sin(o.yaw)
    x, y = q[:, 0] * c + q[:, 1] * s, -q[:, 0] * s + q[:, 1] * c
    length, width, height = o.size
    inside = (np.abs(x) <= length / 2) & (np.abs(y) <= width / 2) & (np.abs(q[:, 2]) <= height / 2)
    return int(np.count_nonzero(inside))


# --------------------------------------------------------------------------------------------------
# object layout
# --------------------------------------------------------------------------------------------------


def test_label_table() -> None:
    assert kitti_label("Car") == kitti_label("Van") == "car"
    assert kitti_label("Truck") == kitti_label("Tram") == "truck"
    assert kitti_label("Pedestrian") == kitti_label("Person_sitting") == "pedestrian"
    assert kitti_label("Cyclist") == "cyclist"
    assert kitti_label("Misc") is None and kitti_label("DontCare") is None and kitti_label("rider") is None
    assert set(KITTI_LABELS.values()) - {None} == {"car", "truck", "pedestrian", "cyclist"}


def test_parse_frames() -> None:
    assert parse_frames("0-2,7") == {0, 1, 2, 7}
    assert format_frames([7, 0, 2, 1, 9, 10]) == "0-2,7,9-10"
    assert parse_frames(format_frames([3, 4, 5, 11])) == {3, 4, 5, 11}
    for bad in ("", "a", "3-1", "1,,2"):
        with pytest.raises(ValueError):
            parse_frames(bad)


def test_object_rig_times_and_skips(object_tree: ObjectTree, object_drive: tuple[Path, ImportSummary]) -> None:
    path, summary = object_drive
    with DriveReader(path) as d:
        rig = d.rig
        meta = d.metadata
        lidar = list(d.samples(sensors="lidar_top"))
        images = list(d.samples(sensors="cam_front"))
        gts = d.ground_truth()
        assert d.ego_poses() == []
    assert list(rig) == ["lidar_top", "cam_front"]
    assert rig["lidar_top"].kind == SensorKind.LIDAR and rig["cam_front"].kind == SensorKind.CAMERA
    # base_link is the IMU frame: base <- velo = inverse of Tr_imu_to_velo
    np.testing.assert_allclose(rig["lidar_top"].extrinsic.matrix(), UPRIGHT.base_velo, atol=1e-9)
    # frame n at n seconds; frame 3's camera has its own calibration: its image is skipped and counted
    assert [s.t_ns for s in lidar] == [0, 1 * S, 3 * S]
    assert [s.t_ns for s in images] == [0, 1 * S]
    assert [g.t_ns for g in gts] == [0, 1 * S, 3 * S]
    differs = "cam_front: samples whose calibration differs from the drive's (frame 0's)"
    assert summary.skipped[f"{differs}; import those frames separately (--frames)"] == 1
    assert summary.skipped["annotations of type DontCare (unlabelled regions, not objects)"] == 1
    assert summary.skipped["annotations of type Misc (not one of our labels)"] == 1
    assert meta["source"] == "kitti" and meta["kitti.layout"] == "object" and meta["kitti.base_link"] == "imu_on_road"
    assert meta["kitti.frames"] == "0-1,3"
    assert "cam_front: 2 different calibrations among the frames: frames 0-1; frames 3" in summary.notes
    assert all(isinstance(s, ImageSample) and s.format == "png" for s in images)


def test_base_link_is_on_the_road_under_the_imu(object_drive: tuple[Path, ImportSummary]) -> None:
    # base_link was the IMU frame itself, 0.93 m above the road, while fusion takes z = 0 in base_link for the
    # ground (camera objects' ground-plane depth, the camera-guided step's ground): on the real KITTI frames a
    # pedestrian's camera object landed 3.6 m short of it, a car 35.6 m away at 16.9 m.
    path, _ = object_drive
    with DriveReader(path) as d:
        lidar, cam = d.rig["lidar_top"].extrinsic, d.rig["cam_front"].extrinsic
    # Tr_imu_to_velo puts the Velodyne 0.80 m above the IMU: 1.73 m above the road (KITTI's setup)
    assert lidar.translation[2] == pytest.approx(0.80 + 0.93, abs=0.01)
    assert cam.translation[2] == pytest.approx(lidar.translation[2] - 0.07, abs=0.02)  # cameras at 1.65 m


def test_object_lidar_points(object_tree: ObjectTree, object_drive: tuple[Path, ImportSummary]) -> None:
    path, summary = object_drive
    with DriveReader(path) as d:
        for s in d.samples(sensors="lidar_top"):
            assert isinstance(s, PointCloudSample)
            n = s.t_ns // S
            raw = np.fromfile(object_tree.root / "training" / "velodyne" / f"{n:06d}.bin", dtype="<f4").reshape(-1, 4)
            if n != 3:
                np.testing.assert_array_equal(s.points, raw)  # bit-exact: x, y, z, reflectance as intensity
            else:  # another lidar mount: the same points in base_link, re-expressed in the rig's lidar frame
                base = d.rig["lidar_top"].extrinsic.apply(s.points[:, :3])
                np.testing.assert_allclose(
                    base, raw[:, :3] @ TILTED.base_velo[:3, :3].T + TILTED.base_velo[:3, 3], atol=1e-4
                )
                np.testing.assert_array_equal(s.points[:, 3], raw[:, 3])
    assert any("re-expressed in the rig's lidar frame" in n for n in summary.notes)


def test_object_boxes_into_base_link(object_tree: ObjectTree, object_drive: tuple[Path, ImportSummary]) -> None:
    path, _ = object_drive
    with DriveReader(path) as d:
        ext = d.rig["lidar_top"].extrinsic
        samples = {s.t_ns: s for s in d.samples(sensors="lidar_top")}
        gts = {g.t_ns // S: g for g in d.ground_truth()}
    labels = {"Car": "car", "Van": "car", "Pedestrian": "pedestrian", "Cyclist": "cyclist", "Truck": "truck"}
    ids: list[int] = []
    for n, boxes in object_tree.frames.items():
        objects = gts[n].objects
        assert len(objects) == len(boxes)
        tilted = object_tree.calib[n] is TILTED
        for box in boxes:
            o = _match(objects, box)
            assert o.label == labels[box.kind]
            # Exact for upright calibrations. With a tilted one the devkit's box stands upright in the
            # camera frame, not in base_link: the centre moves by h/2 x tilt (< 0.01 rad here), the
            # yaw by the tilt's second order.
            np.testing.assert_allclose(o.center, box.centre, atol=box.size[2] / 2 * 0.01 if tilted else 1e-6)
            assert o.size == pytest.approx(box.size, abs=1e-9)
            assert _angle(o.yaw, box.yaw) < (1e-4 if tilted else 1e-9)
            assert math.isnan(o.velocity[0]) and math.isnan(o.velocity[1])
            sample = samples[n * S]
            assert isinstance(sample, PointCloudSample)
            # every sweep is in the rig's lidar frame (frame 3's, from a tilted mount, re-expressed in it)
            assert _inside(ext.apply(sample.points[:, :3]), o) == 6**3
            ids.append(o.track_id)
    assert len(set(ids)) == len(ids)  # unrelated frames: ids never repeat across frames


def test_object_camera_projection_matches_devkit(
    object_tree: ObjectTree, object_drive: tuple[Path, ImportSummary]
) -> None:
    """x = P2 * R0_rect * Tr_velo_to_cam * p (devkit) equals the drive's K and base_link <- camera."""
    path, _ = object_drive
    with DriveReader(path) as d:
        cam = d.rig["cam_front"]
        lidar = d.rig["lidar_top"]
    assert cam.calibration is not None
    assert (cam.calibration.width, cam.calibration.height) == IMAGE_SIZE
    assert cam.calibration.k == tuple(K.ravel())
    assert cam.calibration.d == (0.0,) * 5
    p_velo = np.array([[10.0, 1.0, 0.5], [25.0, -4.0, -1.0], [6.0, 2.0, 1.2]])
    hom = np.hstack([p_velo, np.ones((3, 1))])
    uvw = (UPRIGHT.p2 @ UPRIGHT.rect_velo @ hom.T).T
    devkit = uvw[:, :2] / uvw[:, 2:]
    p_cam = cam.extrinsic.inverse().apply(lidar.extrinsic.apply(p_velo))
    ours = (p_cam @ K.T)[:, :2] / p_cam[:, 2:]
    np.testing.assert_allclose(ours, devkit, atol=1e-6)
    # camera 2's frame is offset from rectified camera 0 by P2's baseline
    rect0 = UPRIGHT.rect_velo[:3, :3] @ p_velo.T + UPRIGHT.rect_velo[:3, 3:4]
    np.testing.assert_allclose(p_cam, (rect0.T + CAM2_OFFSET), atol=1e-9)


def test_right_camera(tmp_path: Path) -> None:
    tree = write_object(tmp_path / "data", calibs={0: UPRIGHT, 1: UPRIGHT, 3: UPRIGHT}, right=True)
    out = tmp_path / "right.mcap"
    import_kitti(tree.root, out)
    with DriveReader(out) as d:
        rig = d.rig
        right = list(d.samples(sensors="cam_front_right"))
    assert list(rig) == ["lidar_top", "cam_front", "cam_front_right"]
    assert [s.t_ns for s in right] == [0, 1 * S, 3 * S]
    cam = rig["cam_front_right"]
    p_velo = np.array([[10.0, 1.0, 0.5], [25.0, -4.0, -1.0]])
    uvw = (UPRIGHT.p3 @ UPRIGHT.rect_velo @ np.hstack([p_velo, np.ones((2, 1))]).T).T
    p_cam = cam.extrinsic.inverse().apply(rig["lidar_top"].extrinsic.apply(p_velo))
    np.testing.assert_allclose((p_cam @ K.T)[:, :2] / p_cam[:, 2:], uvw[:, :2] / uvw[:, 2:], atol=1e-6)
    np.testing.assert_allclose(
        p_cam[:, 0] - (UPRIGHT.rect_velo[:3, :3] @ p_velo.T + UPRIGHT.rect_velo[:3, 3:4])[0], CAM3_OFFSET[0], atol=1e-9
    )


def test_frames_subset(object_tree: ObjectTree, tmp_path: Path) -> None:
    out = tmp_path / "sub.mcap"
    summary = import_kitti(object_tree.root / "training", out, frames=[3])  # the split directory itself
    with DriveReader(out) as d:
        assert [s.t_ns for s in d.samples()] == [3 * S, 3 * S]
        cal = d.rig["cam_front"].calibration
        assert cal is not None and cal.k == tuple(TILTED.k.ravel())
        assert d.metadata["kitti.frames"] == "3"
    assert not any("calibration differs" in k for k in summary.skipped)
    with pytest.raises(DriveError, match=r"no frame 2 \(frames here: 0..3, 3 of them\)"):
        import_kitti(object_tree.root, tmp_path / "x.mcap", frames=[2])


# --------------------------------------------------------------------------------------------------
# tracking layout
# --------------------------------------------------------------------------------------------------


def test_tracking_times_and_ego(tracking_tree: TrackingTree, tracking_drive: tuple[Path, ImportSummary]) -> None:
    path, _ = tracking_drive
    with DriveReader(path) as d:
        ego = d.ego_poses()
        lidar = [s.t_ns for s in d.samples(sensors="lidar_top")]
        meta = d.metadata
        rate = d.rig["lidar_top"].rate_hz
    assert lidar == [i * 100_000_000 for i in range(5)]
    assert rate == pytest.approx(10.0)
    assert meta["kitti.layout"] == "tracking" and meta["kitti.sequence"] == "0000"
    assert [p.t_ns for p in ego] == lidar
    for pose, expected in zip(ego, tracking_tree.poses, strict=True):
        np.testing.assert_allclose(pose.pose.matrix(), expected, atol=1e-5)  # Mercator round trip
        assert pose.linear_velocity == pytest.approx((tracking_tree.ego_speed, 0.0, 0.0))
        assert pose.yaw_rate == pytest.approx(tracking_tree.yaw_rate)


def test_tracking_ground_truth(tracking_tree: TrackingTree, tracking_drive: tuple[Path, ImportSummary]) -> None:
    path, summary = tracking_drive
    with DriveReader(path) as d:
        gts = d.ground_truth()
    assert summary.skipped["annotations of type DontCare (unlabelled regions, not objects)"] == 5
    for i, (gt, boxes) in enumerate(zip(gts, tracking_tree.boxes, strict=True)):
        assert [o.track_id for o in gt.objects] == sorted(b.track for b in boxes)  # KITTI track ids kept
        car = next(o for o in gt.objects if o.track_id == 0)
        box = boxes[0]
        np.testing.assert_allclose(car.center, box.centre, atol=1e-6)
        assert _angle(car.yaw, box.yaw) < 1e-9
        # over-ground velocity, expressed in base_link: the map velocity rotated by the ego pose
        v = tracking_tree.poses[i][:3, :3].T @ tracking_tree.car_velocity_map
        assert car.velocity == pytest.approx((v[0], v[1]), abs=1e-4)
        ped = [o for o in gt.objects if o.track_id == 5]
        assert len(ped) == (1 if i in (1, 2) else 0)
        if ped:
            assert ped[0].label == "pedestrian" and np.isfinite(ped[0].velocity).all()  # one-sided difference


def test_tracking_needs_a_sequence(tracking_tree: TrackingTree, tmp_path: Path) -> None:
    with pytest.raises(DriveError, match=r"2 sequences: choose one with --sequence \(0000, 0001\)"):
        import_kitti(tracking_tree.root, tmp_path / "t.mcap")
    with pytest.raises(DriveError, match=r"no sequence '0007' \(has: 0000, 0001\)"):
        import_kitti(tracking_tree.root, tmp_path / "t.mcap", sequence="0007")
    summary = import_kitti(tracking_tree.root, tmp_path / "t.mcap", sequence="0001")
    assert any("no oxts/0001.txt" in n for n in summary.notes)
    with DriveReader(tmp_path / "t.mcap") as d:
        assert d.ego_poses() == []


def test_object_layout_refuses_a_sequence(object_tree: ObjectTree, vod_tree: VodTree, tmp_path: Path) -> None:
    # --sequence was silently ignored on a layout without sequences: every frame imported, exit 0.
    for root in (object_tree.root, vod_tree.root):
        with pytest.raises(DriveError, match=r"no sequence '0000': an object layout .* has no sequences") as exc:
            import_kitti(root, tmp_path / "o.mcap", sequence="0000")
        assert exc.value.file is not None and exc.value.file.endswith("velodyne")
        assert not (tmp_path / "o.mcap").exists()


def test_stray_folder_in_an_object_velodyne(object_tree: ObjectTree, tmp_path: Path) -> None:
    # Any folder in velodyne/ made it a tracking tree, its .bin frames ignored: a hidden one
    # (.ipynb_checkpoints) failed with "calibration of the sequence is missing" naming calib/.ipynb_checkpoints.txt.
    root = tmp_path / "o"
    shutil.copytree(object_tree.root, root)
    velodyne = next(root.rglob("velodyne"))
    (velodyne / ".ipynb_checkpoints").mkdir()
    summary = import_kitti(root, tmp_path / "o.mcap")
    assert summary.source.startswith("kitti object")
    (velodyne / "0000").mkdir()
    with pytest.raises(
        DriveError, match=r"both frame files \(\*\.bin: object layout\) and sequence folders \(0000:"
    ) as exc:
        import_kitti(root, tmp_path / "o2.mcap")
    assert exc.value.file == str(velodyne)


def test_tracking_frames_subset(tracking_tree: TrackingTree, tmp_path: Path) -> None:
    root = tmp_path / "t"
    shutil.copytree(tracking_tree.root, root)
    (root / "training" / "image_02" / "0000" / "000004.png").unlink()  # not selected: does not matter
    out = tmp_path / "sub.mcap"
    import_kitti(root, out, sequence="0000", frames=parse_frames("1-3"))
    with DriveReader(out) as d:
        gts = d.ground_truth()
        ego = d.ego_poses()
    assert [g.t_ns for g in gts] == [p.t_ns for p in ego] == [100_000_000, 200_000_000, 300_000_000]
    np.testing.assert_allclose(ego[0].pose.matrix(), tracking_tree.poses[1], atol=1e-5)
    for i, gt in zip((1, 2, 3), gts, strict=True):  # one-sided differences at the subset's ends: still exact
        car = next(o for o in gt.objects if o.track_id == 0)
        v = tracking_tree.poses[i][:3, :3].T @ tracking_tree.car_velocity_map
        assert car.velocity == pytest.approx((v[0], v[1]), abs=1e-4)


# --------------------------------------------------------------------------------------------------
# View-of-Delft
# --------------------------------------------------------------------------------------------------


def test_vod_rig_and_radar(vod_tree: VodTree, vod_drive: tuple[Path, ImportSummary]) -> None:
    path, summary = vod_drive
    with DriveReader(path) as d:
        rig = d.rig
        meta = d.metadata
        radar = list(d.samples(sensors="radar_front"))
        images = list(d.samples(sensors="cam_front"))
    assert list(rig) == ["lidar_top", "radar_front", "cam_front"]
    assert meta["kitti.layout"] == "view-of-delft" and meta["kitti.base_link"] == "lidar"
    np.testing.assert_allclose(rig["lidar_top"].extrinsic.matrix(), np.eye(4), atol=1e-12)
    np.testing.assert_allclose(
        rig["radar_front"].extrinsic.matrix(), np.linalg.inv(VOD_CAM_LIDAR) @ VOD_CAM_RADAR, atol=1e-9
    )
    assert [s.t_ns for s in radar] == [1 * S, 2 * S]
    for s in radar:
        assert isinstance(s, PointCloudSample)
        raw = vod_tree.radar[s.t_ns // S]
        cur = raw[raw[:, 6] == 0]
        assert s.fields == ("x", "y", "z", "radial_velocity", "rcs")
        np.testing.assert_array_equal(s.points, np.column_stack([cur[:, :3], cur[:, 5], cur[:, 3]]))
    assert summary.skipped["radar_front: points of earlier scans (time != 0, dropped)"] == 4
    assert all(isinstance(s, ImageSample) and s.format == "jpeg" for s in images)
    assert any("base_link is the lidar frame" in n for n in summary.notes)


def test_vod_root_inside_the_lidar_tree(vod_tree: VodTree, tmp_path: Path) -> None:
    for root in (vod_tree.root / "lidar", vod_tree.root / "lidar" / "training"):
        out = tmp_path / f"{root.name}.mcap"
        import_kitti(root, out)
        with DriveReader(out) as d:
            assert d.metadata["kitti.layout"] == "view-of-delft" and "radar_front" in d.rig


def test_vod_boxes(vod_tree: VodTree, vod_drive: tuple[Path, ImportSummary]) -> None:
    path, summary = vod_drive
    with DriveReader(path) as d:
        gts = {g.t_ns // S: g for g in d.ground_truth()}
    assert summary.skipped["annotations of type rider (not one of our labels)"] == 1
    for n, boxes in vod_tree.boxes.items():
        ours = [b for b in boxes if b.kind != "rider"]
        assert len(gts[n].objects) == len(ours)
        for box in ours:
            o = _match(gts[n].objects, box)
            np.testing.assert_allclose(o.center, box.centre, atol=1e-6)
            assert _angle(o.yaw, box.yaw) < 1e-9


# --------------------------------------------------------------------------------------------------
# broken files
# --------------------------------------------------------------------------------------------------


def _broken(tmp_path: Path) -> Path:
    write_object(tmp_path / "data", calibs={0: UPRIGHT, 1: UPRIGHT, 3: UPRIGHT})
    return tmp_path / "data" / "training"


@pytest.mark.parametrize(
    ("target", "content", "message"),
    [
        ("velodyne/000001.bin", b"\0" * 18, r"velodyne/000001.bin: 18 bytes is not a whole number of lidar points"),
        # a 0-byte sweep was imported as a cloud of no points, neither refused nor counted
        ("velodyne/000001.bin", b"", r"velodyne/000001.bin: empty file \(0 bytes\): a lidar sweep has points"),
        ("calib/000000.txt", "P0: 1 0 0 0\n", r"calib/000000.txt: line 1: P0 needs 12 values, got 4"),
        ("calib/000000.txt", "P2 7.0 x 1\n", r"calib/000000.txt: line 1: P2: 'x' is not a number"),
        (
            "calib/000001.txt",
            "R0_rect: 1 0 0 0 1 0 0 0 1\n",
            r"calib/000001.txt: calibration Tr_velo_to_cam is missing \(has: R0_rect\)",
        ),
        ("calib/000000.txt", "1.0 2.0\n", r"calib/000000.txt: line 1: expected 'KEY: values'"),
        (
            "label_2/000003.txt",
            "Car 0 0 0 1 2 3 4 1.5 1.8 4.0 1 2\n",
            r"label_2/000003.txt: line 1: expected 15 or 16 values",
        ),
        (
            "label_2/000001.txt",
            "Car 0 0 0 1 2 3 4 1.5 1.8 4.0 1 2 a 0\n",
            r"label_2/000001.txt: line 1: Car: 'a' is not a number",
        ),
        ("image_2/000001.png", b"not an image at all", r"image_2/000001.png: not a readable PNG or JPEG image"),
        # its header whole (the size read from it), its body cut short: imported, every replay failed its decode
        (
            "image_2/000001.png",
            png()[: len(png()) * 6 // 10],
            r"image_2/000001.png: PNG image does not end with an IEND",
        ),
        ("image_2/000001.png", jpeg()[:-2], r"image_2/000001.png: JPEG image does not end with its end-of-image"),
    ],
)
def test_bad_file_names_file_and_line(tmp_path: Path, target: str, content: str | bytes, message: str) -> None:
    tree = _broken(tmp_path)
    if isinstance(content, bytes):
        (tree / target).write_bytes(content)
    else:
        (tree / target).write_text(content)
    out = tmp_path / "out.mcap"
    with pytest.raises(DriveError, match=message):
        import_kitti(tree, out)
    assert not out.exists() and not list(tmp_path.glob(".out.mcap*"))


@pytest.mark.parametrize(
    ("p2", "problem"),
    [
        # within the importer's own tolerance (1e-9) once: written, then refused by the session at replay
        ("700 0 600 45 0 700 170 0.2 0 0 1.0000000001 0.003", "not a pinhole matrix"),
        ("700 0 600 45 0 -700 170 0.2 0 0 1 0.003", "fx, fy > 0"),
        ("700 0 600 45 0.5 700 170 0.2 0 0 1 0.003", "not a pinhole matrix"),  # below the diagonal
    ],
)
def test_a_camera_matrix_that_is_not_a_pinhole_is_refused_naming_file_and_key(
    tmp_path: Path, p2: str, problem: str
) -> None:
    # The importer checks a camera's K with the one camera-matrix check (CameraCalibration.problem, as
    # the session and the fuser do): its own rule, with a tolerance, wrote drives the session refused.
    tree = _broken(tmp_path)
    calib = tree / "calib/000000.txt"
    lines = [f"P2: {p2}" if line.startswith("P2:") else line for line in calib.read_text().splitlines()]
    calib.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.mcap"
    with pytest.raises(DriveError, match=rf"calib/000000.txt: P2 is not a rectified pinhole projection.*{problem}"):
        import_kitti(tree, out)
    assert not out.exists()


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        ("image_2/000001.png", r"image_2: image of frame 000001 is missing \(no 000001.png or 000001.jpg\)"),
        ("calib/000003.txt", r"calib/000003.txt: calibration of frame 000003 is missing"),
        ("label_2/000000.txt", r"label_2/000000.txt: labels of frame 000000 is missing"),
    ],
)
def test_missing_file(tmp_path: Path, missing: str, message: str) -> None:
    tree = _broken(tmp_path)
    (tree / missing).unlink()
    with pytest.raises(DriveError, match=message):
        import_kitti(tree, tmp_path / "out.mcap")


def test_bad_tracking_files(tracking_tree: TrackingTree, tmp_path: Path) -> None:
    root = tmp_path / "t"
    shutil.copytree(tracking_tree.root, root)
    oxts = root / "training" / "oxts" / "0000.txt"
    lines = oxts.read_text().splitlines()
    oxts.write_text("\n".join([*lines[:2], "1 2 3", *lines[3:]]) + "\n")
    with pytest.raises(DriveError, match=r"oxts/0000.txt: line 3: expected 30 OXTS values, got 3"):
        import_kitti(root, tmp_path / "o.mcap", sequence="0000")
    oxts.write_text("\n".join(lines[:3]) + "\n")
    with pytest.raises(DriveError, match=r"oxts/0000.txt: 3 OXTS lines, but the sequence has frame 4"):
        import_kitti(root, tmp_path / "o.mcap", sequence="0000")
    oxts.write_text("\n".join(lines) + "\n")
    labels = root / "training" / "label_02" / "0000.txt"
    labels.write_text("0 1 Car 0 0 0 1 2 3 4 1.5 1.8 4.0 1 2 3 0\n0 1 Car 0 0 0 1 2 3 4 1.5 1.8 4.0 5 2 3 0\n")
    with pytest.raises(DriveError, match=r"label_02/0000.txt: line 2: track 1 appears twice in frame \(also line 1\)"):
        import_kitti(root, tmp_path / "o.mcap", sequence="0000")
    labels.write_text("x 1 Car 0 0 0 1 2 3 4 1.5 1.8 4.0 1 2 3 0\n")
    with pytest.raises(DriveError, match=r"label_02/0000.txt: line 1: frame and track id must be integers"):
        import_kitti(root, tmp_path / "o.mcap", sequence="0000")


def test_not_a_kitti_tree(tmp_path: Path) -> None:
    with pytest.raises(DriveError, match="KITTI root not found"):
        import_kitti(tmp_path / "nope", tmp_path / "o.mcap")
    with pytest.raises(DriveError, match=r"no KITTI tree: expected velodyne/"):
        import_kitti(tmp_path, tmp_path / "o.mcap")
    (tmp_path / "velodyne").mkdir()
    (tmp_path / "velodyne" / "abc.bin").write_bytes(b"")
    with pytest.raises(DriveError, match=r"abc.bin: frame files must be named by their number"):
        import_kitti(tmp_path, tmp_path / "o.mcap")


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------


def test_cli_import_prints_summary_and_replay_command(
    object_tree: ObjectTree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "k.mcap"
    assert main(["import", "kitti", str(object_tree.root), "-o", str(out), "--frames", "0-1"]) == 0
    stdout, stderr = capsys.readouterr()
    lines = stdout.splitlines()
    assert lines[0] == f"imported kitti object {object_tree.root / 'training'} -> {out}"
    assert "  /sensors/lidar_top/points            2" in lines
    assert lines[-2] == f"replay it with:  perception replay {out} --out {tmp_path / 'k-replay'}"
    assert lines[-1] == f"score it with:   perception eval {out}"
    assert "Traceback" not in stderr
    assert main(["import", "kitti", str(object_tree.root), "-o", str(out)]) == 1  # exists: kept
    _, stderr = capsys.readouterr()
    assert stderr.strip().endswith("output exists (pass --force / overwrite=True to replace it)")


def test_cli_bad_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = _broken(tmp_path)
    (tree / "label_2" / "000001.txt").write_text("Car 0 0\n")
    assert main(["import", "kitti", str(tree), "-o", str(tmp_path / "k.mcap")]) == 1
    stdout, stderr = capsys.readouterr()
    assert stdout == ""
    assert stderr == (
        f"perception import: error: {tree / 'label_2' / '000001.txt'}: line 1: expected 15 or 16 values "
        "(with a score), got 3\n"
    )


def test_cli_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["import", "kitti", "root", "-o", "x.mcap", "--frames", "5-2"])
    assert exc.value.code == 2
    assert "ends before it starts" in capsys.readouterr().err
