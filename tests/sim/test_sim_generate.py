"""Drive generation end to end: determinism, file contents, the ``perception sim`` CLI."""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from drive_compare import drive_differences

from perception.cli import main
from perception.drives import DriveReader
from perception.errors import DriveError
from perception.sim import Simulator, generate_drive
from perception.types import ImageSample, PointCloudSample


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_identical_args_give_identical_bytes(tmp_path: Path) -> None:
    """Same seed, same machine: byte-identical drives, whatever the number of workers (across CPU models
    only within tolerance: test_bundled_drive_is_what_the_generator_makes)."""
    a, b, c = tmp_path / "a.mcap", tmp_path / "b.mcap", tmp_path / "c.mcap"
    generate_drive(a, scenario="urban", seed=5, duration_s=0.6)
    generate_drive(b, scenario="urban", seed=5, duration_s=0.6, workers=2)  # parallel capture, same bytes
    generate_drive(c, scenario="urban", seed=6, duration_s=0.6)
    assert _digest(a) == _digest(b)
    assert _digest(a) != _digest(c)


def test_drive_contents(tmp_path: Path) -> None:
    path = tmp_path / "drive.mcap"
    summary = generate_drive(path, scenario="highway", seed=2, duration_s=1.0)
    assert summary.messages["lidar_top"] == 10 and summary.messages["ego_pose"] == 50
    assert summary.messages["cam_front"] == 12 and summary.messages["ground_truth"] == 10
    assert summary.lidar_points_mean > 5_000 and summary.bytes == path.stat().st_size
    with DriveReader(path) as reader:
        assert set(reader.rig) == {"lidar_top", "cam_front", "cam_back", "radar_front", "radar_rear"}
        samples = list(reader.samples())
        times = [s.t_ns for s in samples]
        assert times == sorted(times)
        kinds = {s.sensor: s for s in samples}
        lidar, radar, cam = kinds["lidar_top"], kinds["radar_front"], kinds["cam_front"]
        assert isinstance(lidar, PointCloudSample) and lidar.fields == ("x", "y", "z", "intensity")
        assert isinstance(radar, PointCloudSample) and radar.points.shape[1] == 5
        assert isinstance(cam, ImageSample) and cam.decode().shape == (360, 640, 3)
        gts = reader.ground_truth()
        assert len(gts) == 10 and gts[0].objects
        assert {o.label for g in gts for o in g.objects} <= {"car", "truck"}
        # ground truth is stamped at the lidar's capture times
        lidar_times = [s.t_ns for s in samples if s.sensor == "lidar_top"]
        assert [g.t_ns for g in gts] == lidar_times
        ego = reader.ego_poses()
        assert ego[10].linear_velocity[0] == pytest.approx(25.0, rel=0.08)
    # the file's samples are the simulator's
    sim = Simulator("highway", seed=2, duration_s=1.0)
    again = sim.sample("lidar_top", len(lidar_times) - 1)
    assert isinstance(again, PointCloudSample)
    np.testing.assert_array_equal(again.points, lidar.points)


def test_dense_lidar_has_about_250k_points() -> None:
    sim = Simulator("dense", seed=1, duration_s=0.2)
    sweep = sim.sample("lidar_top", 0)
    assert isinstance(sweep, PointCloudSample)
    assert 200_000 < sweep.points.shape[0] < 300_000


def test_cli_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli.mcap"
    code = main(["sim", "--scenario", "urban", "--seed", "3", "--duration", "2", "-o", str(out), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr()
    assert "wrote" in printed.out and str(out) in printed.out and printed.err == ""
    with DriveReader(out) as reader:
        assert reader.end_ns < 2_000_000_000 <= reader.end_ns + 100_000_000
        assert reader.has_ground_truth


def test_cli_user_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "rig.yaml"
    bad.write_text("sensors:\n  - name: l\n    kind: lidar\n    mount: {xyz: [0, 0, 2]}\n    rate_hz: 10\n"
                   "    lidr: {}\n")
    code = main(["sim", "--duration", "1", "--rig", str(bad), "-o", str(tmp_path / "x.mcap")])
    err = capsys.readouterr().err
    assert code == 2 and str(bad) in err and "sensors[0].lidr" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit):
        main(["sim", "--duration", "-1", "-o", str(tmp_path / "x.mcap")])

def test_cli_makes_the_output_s_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # -o in a folder not there yet failed, 'cannot create drive: No such file or directory' (exit 1), where
    # every other command's output (replay --out, live --record...) has its folder made
    out = tmp_path / "drives" / "new" / "x.mcap"
    assert main(["sim", "--duration", "0.3", "-o", str(out), "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
    with DriveReader(out) as reader:
        assert reader.has_ground_truth


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_a_stopped_generation_leaves_no_drive(stop: type[BaseException], tmp_path: Path) -> None:
    # A Ctrl-C at 1 s of 3 left a valid 1 s drive under the requested name, its metadata saying 3 s.
    out = tmp_path / "cut.mcap"

    def progress(done_s: float) -> None:
        if done_s >= 1.0:
            raise stop("stopped")

    with pytest.raises(stop):
        generate_drive(out, duration_s=3.0, progress=progress, workers=1)
    assert not out.exists()
    (tmp_path / "taken").mkdir()  # a file that could not be made is not removed either (it was not made)
    with pytest.raises(DriveError, match="cannot create drive"):
        generate_drive(tmp_path / "taken", duration_s=1.0, workers=1)
    assert (tmp_path / "taken").is_dir()


REPLAY_DATA = Path(__file__).resolve().parents[2] / "replay_data"
BUNDLED = REPLAY_DATA / "urban_seed7_10s.mcap"
GENERATE_MD = REPLAY_DATA / "GENERATE.md"


def _generate_md() -> tuple[list[str], str]:
    """GENERATE.md's ``perception sim`` command (arguments after ``perception``) and the sha256 it states."""
    text = GENERATE_MD.read_text()
    line = next(ln for ln in text.splitlines() if ln.lstrip().startswith(".venv/bin/perception sim "))
    digest = re.search(r"`([0-9a-f]{64})`", text)
    assert digest is not None, f"{GENERATE_MD}: no sha256"
    return shlex.split(line)[1:], digest.group(1)


@pytest.mark.skipif(not BUNDLED.is_file(), reason="bundled drive not present")
def test_generate_md_states_the_committed_files_sha256() -> None:
    """The hash in GENERATE.md is the committed file's (a regenerated drive must update it). This hashes
    the file as committed; it does not recompute anything, so it holds on any machine."""
    args, digest = _generate_md()
    assert args[-1] == "replay_data/urban_seed7_10s.mcap"
    assert _digest(BUNDLED) == digest


@pytest.mark.slow
@pytest.mark.skipif(not BUNDLED.is_file(), reason="bundled drive not present")
def test_bundled_drive_is_what_the_generator_makes(tmp_path: Path) -> None:
    """GENERATE.md's command, run here, makes the committed drive: compared decoded and per field at the
    tolerances of ``drive_compare`` (exact topics, times, sequences, integers, strings and layouts;
    doubles to 2e-6, one step of the simulator's rounding grid plus margin; float32 points to 8 ulps;
    JPEGs to a few levels in a few blocks), not byte for byte: the file may have been written on another
    CPU model, whose numpy/libm transcendentals differ by an ulp. (Same machine, same seed, same bytes:
    ``test_identical_args_give_identical_bytes``.)"""
    args, _ = _generate_md()
    out = tmp_path / "again.mcap"
    assert main([*args[:-1], str(out), "--no-progress"]) == 0
    assert drive_differences(BUNDLED, out) == []


def test_ground_truth_encoding_is_the_per_object_construction() -> None:
    """The drive writer encodes ground truth from per-label templates: the same bytes as building
    every entity message by message (moving and standing objects of every class, -0.0 included)."""
    from foxglove_schemas_protobuf.SceneEntityDeletion_pb2 import SceneEntityDeletion
    from foxglove_schemas_protobuf.SceneUpdate_pb2 import SceneUpdate

    from perception.drives import _codec as codec
    from perception.types import GroundTruth, GroundTruthObject

    sim = Simulator("dense", seed=2, duration_s=20.0)
    gts = [sim.ground_truth(t) for t in sim.ground_truth_times()[::40]]
    gts.append(GroundTruth(5, (GroundTruthObject(7, "cyclist", (0.0, -0.0, 0.8), (1.8, 0.6, 1.6), -0.0, (-0.0, 0.0)),)))
    assert {o.label for g in gts for o in g.objects} == {"car", "truck", "pedestrian", "cyclist"}
    for gt in gts:
        plain = SceneUpdate(
            deletions=[SceneEntityDeletion(timestamp=codec._stamp(gt.t_ns), type=SceneEntityDeletion.ALL)],
            entities=[codec._gt_entity(gt.t_ns, obj) for obj in gt.objects],
        )
        assert codec.encode_ground_truth(gt).SerializeToString(deterministic=True) == plain.SerializeToString(
            deterministic=True
        )


def test_a_lidar_that_sees_no_ground_on_a_road_with_crosswalks(tmp_path: Path) -> None:
    # An upward-looking lidar (a valid rig) hit no ground point: the crosswalks' lookup took the minimum of no
    # points and the generation ended in a traceback (urban and dense roads have crosswalks; highway none).
    rig = tmp_path / "upward.yaml"
    rig.write_text(
        "name: upward\nsensors:\n  - name: lidar_top\n    kind: lidar\n    mount: {xyz: [1.0, 0.0, 1.9]}\n"
        "    rate_hz: 10\n    lidar: {beams: 16, fov_up_deg: 15, fov_down_deg: 0}\n"
    )
    path = tmp_path / "up.mcap"
    generate_drive(path, scenario="urban", seed=1, duration_s=0.3, rig=rig)
    with DriveReader(path, strict=True) as reader:
        assert [s.sensor for s in reader.samples()] == ["lidar_top"] * 3
