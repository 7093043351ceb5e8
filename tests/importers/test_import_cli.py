"""``perception import``: summaries on stdout, one-line errors with the right exit code."""

from __future__ import annotations

from pathlib import Path

import pytest
from import_fixtures import TOPIC_MAP, Bag, NuScenes, write_bag

from perception.cli import main
from perception.drives import DriveReader
from perception.importers import OBJECT_FRAME_GAP_NS


def test_import_ros2_cli(bag: Bag, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "drive.mcap"
    assert main(["import", "ros2", str(bag.path), "--map", str(bag.topic_map), "-o", str(out)]) == 0
    stdout, stderr = capsys.readouterr()
    assert f"imported rosbag2 {bag.path} -> {out}" in stdout
    assert "/sensors/lidar_top/points            5" in stdout
    assert "lidar_top: points with non-finite x/y/z (dropped): 10" in stdout
    assert "Traceback" not in stderr
    with DriveReader(out) as d:
        assert len(d.rig) == 5
        assert not d.has_ground_truth
    # A bag has no ground truth: the replay is suggested, not `perception eval`, which would refuse it.
    assert f"replay it with:  perception replay {out} --out {tmp_path / 'drive-replay'}\n" in stdout
    assert "score it with" not in stdout


def test_import_nuscenes_cli(nuscenes: NuScenes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "drive.mcap"
    argv = ["import", "nuscenes", str(nuscenes.root), "--scene", nuscenes.scene, "-o", str(out)]
    assert main([*argv, "--channels", "LIDAR_TOP,CAM_FRONT"]) == 0
    stdout, _ = capsys.readouterr()
    assert "/ground_truth/objects                3" in stdout
    assert "lidar_top: sweep files missing: 1" in stdout
    # What to run next, with no profile to write first (the default one takes the drive's sensors).
    assert f"replay it with:  perception replay {out} --out {tmp_path / 'drive-replay'}\n" in stdout
    assert f"score it with:   perception eval {out}\n" in stdout
    assert main(argv) == 1  # exists: kept
    _, stderr = capsys.readouterr()
    assert stderr.strip().endswith("output exists (pass --force / overwrite=True to replace it)")
    assert main([*argv, "--force"]) == 0


@pytest.mark.parametrize("given", ["directory", "storage"])
def test_an_output_that_is_the_bag_being_imported_is_refused_even_with_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str
) -> None:
    # It said "output exists (pass --force / overwrite=True to replace it)"; with --force the drive replaced the
    # bag's own .mcap: the recording imported was lost.
    bag = write_bag(tmp_path)
    (storage,) = bag.path.glob("*.mcap")
    before = storage.read_bytes()
    source = bag.path if given == "directory" else storage
    assert main(["import", "ros2", str(source), "--map", str(bag.topic_map), "-o", str(storage), "--force"]) == 2
    assert capsys.readouterr().err == (
        f"perception import: error: {storage}: --output: is the bag being imported (or a file of it): "
        "write the drive elsewhere\n"
    )
    assert storage.read_bytes() == before


def test_the_output_s_folder_is_made(nuscenes: NuScenes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # It was 'output directory does not exist' (exit 1), where every other command makes its output's folder
    out = tmp_path / "drives" / "new" / "drive.mcap"
    argv = ["import", "nuscenes", str(nuscenes.root), "--scene", nuscenes.scene, "-o", str(out)]
    assert main([*argv, "--channels", "LIDAR_TOP"]) == 0
    with DriveReader(out) as d:
        assert list(d.rig) == ["lidar_top"]
    with pytest.raises(SystemExit) as exc:  # a file in its way: argparse's usage error naming -o
        main([*argv[:-1], str(tmp_path / "drives" / "new" / "drive.mcap" / "x.mcap")])
    assert exc.value.code == 2 and "argument -o/--output:" in capsys.readouterr().err


@pytest.mark.parametrize("channels", [",", "", " , "])
def test_no_channels_is_a_usage_error(
    nuscenes: NuScenes, tmp_path: Path, capsys: pytest.CaptureFixture[str], channels: str
) -> None:
    # An empty --channels list imported a drive without any sensor (exit 0) or, empty, every sensor.
    out = tmp_path / "drive.mcap"
    argv = ["import", "nuscenes", str(nuscenes.root), "--scene", nuscenes.scene, "-o", str(out)]
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--channels", channels])
    assert exc.value.code == 2
    _, stderr = capsys.readouterr()
    assert f"argument --channels: expected channel names like LIDAR_TOP,CAM_FRONT, got {channels!r}" in stderr
    assert not out.exists()


def test_config_error_is_one_line_exit_2(bag: Bag, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tmap = tmp_path / "topics.yaml"
    tmap.write_text(TOPIC_MAP.replace("/velodyne_points", "/nope"))
    out = tmp_path / "drive.mcap"
    assert main(["import", "ros2", str(bag.path), "--map", str(tmap), "-o", str(out)]) == 2
    stdout, stderr = capsys.readouterr()
    assert stdout == ""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"perception import: error: {tmap}: sensors[0].topic: topic /nope is not in the bag")
    assert not out.exists()


def test_data_error_is_one_line_exit_1(nuscenes: NuScenes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["import", "nuscenes", str(nuscenes.root), "--scene", "nope", "-o", str(tmp_path / "d.mcap")]
    assert main(argv) == 1
    _, stderr = capsys.readouterr()
    assert stderr.count("\n") == 1
    assert "unknown scene 'nope'; available: scene-0061, scene-0103" in stderr


@pytest.mark.parametrize(
    ("source", "options", "what"),
    [
        ("ros2", ["--map", "{map}"], "bag"),
        ("nuscenes", ["--scene", "scene-0061"], "nuScenes dataroot"),
        ("kitti", [], "KITTI root"),
    ],
)
def test_a_missing_input_is_a_usage_error(
    source: str, options: list[str], what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # exit 1 (a data error) where every other command says of a missing drive exit 2 (replay, info, eval...)
    tmap = tmp_path / "topics.yaml"
    tmap.write_text(TOPIC_MAP)
    argv = [a.format(map=tmap) for a in options]
    assert main(["import", source, str(tmp_path / "nope"), *argv, "-o", str(tmp_path / "d.mcap")]) == 2
    _, stderr = capsys.readouterr()
    assert stderr == f"perception import: error: {tmp_path / 'nope'}: {what} not found\n"
    assert not (tmp_path / "d.mcap").exists()


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["import", "ros2", "bag", "-o", "x.mcap"])  # --map is required
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        main(["import", "ros2", "bag", "--map", "m", "-o", "x.mcap", "--jpeg-quality", "0"])
    _, stderr = capsys.readouterr()
    assert "must be within 1..100" in stderr


def test_help_names_every_source_and_the_object_layout_s_spacing(capsys: pytest.CaptureFixture[str]) -> None:
    """``perception --help`` names KITTI beside ROS 2 and nuScenes; ``import kitti --help`` gives the object
    frames' spacing the importer uses (it said 1 s after the importer had moved to 10 s)."""
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("import "))
    assert "ROS 2" in line and "nuScenes" in line and "KITTI" in line
    with pytest.raises(SystemExit) as exc:
        main(["import", "kitti", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"frame number x {OBJECT_FRAME_GAP_NS / 1e9:g} s" in text and OBJECT_FRAME_GAP_NS / 1e9 == 10
