"""``perception eval`` end to end on the session's real Triton: one lockstep replay with the reference
models, then fusion re-run per sensor mode and scored against the drive's ground truth."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from reliability_helpers import profile_data, write_drive, write_profile

from perception.cli import main
from perception.config import load_config
from perception.drives import DriveReader
from perception.replay import MODES
from perception.server import EmbeddedTriton

SINGLE = ("lidar_only", "radar_only", "camera_only")


def test_eval_scores_every_mode_and_fusion_beats_each_single_sensor(
    triton: EmbeddedTriton, urban_drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eval"
    code = main(["eval", str(urban_drive), "--url", triton.grpc_url, "--json", "--out", str(out)])
    printed, err = capsys.readouterr()
    assert code == 0, err
    modes = json.loads(printed)
    assert json.loads((out / "eval.json").read_text()) == modes
    assert list(modes) == list(MODES)

    with DriveReader(urban_drive) as reader:  # the default profile takes its sensors from the drive
        kinds = {name: spec.kind for name, spec in reader.rig.items()}
    for mode, keep in MODES.items():
        m = modes[mode]
        assert m["sensors"] == sorted(n for n, k in kinds.items() if keep.keeps(k)), mode
        # every mode is scored on the same frames against the same ground truth
        assert m["frames"] == 5 and m["num_ground_truth"] == modes["fused"]["num_ground_truth"], (mode, m)
    assert sum(modes["fused"]["num_ground_truth"].values()) > 0
    # Measured on this drive (0.5 s urban, seed 7): fused 0.63, lidar only 0.52, camera only 0.09,
    # radar only 0.01 -- floors with a wide margin, so a model or the fusion scoring ~0 fails.
    fused = modes["fused"]["mAP"]
    assert fused >= 0.35, modes["fused"]
    assert modes["lidar_only"]["mAP"] >= 0.25
    # the point of fusion, and proof that the modes really masked their sensors
    for mode in SINGLE:
        assert fused > modes[mode]["mAP"], (mode, modes[mode]["mAP"], fused)
    assert modes["fused"]["ate"] is not None and modes["fused"]["ate"] < 1.5


def test_eval_prints_a_table_of_the_modes(
    triton: EmbeddedTriton, urban_drive: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(urban_drive), "--url", triton.grpc_url, "--no-progress"]) == 0
    protocol, *lines = capsys.readouterr().out.splitlines()
    assert protocol.startswith("protocol: ")  # a simulated drive is scored with the native protocol
    assert lines[0].split() == ["mode", "mAP", "ATE", "m", "AVE", "m/s", "IDsw", "sensors"]
    assert [line.split()[0] for line in lines[1:]] == list(MODES)
    fused = lines[1].split()
    assert float(fused[1]) >= 0.35 and fused[-1] == "cam_back,cam_front,lidar_top,radar_front,radar_rear"


def test_eval_of_a_drive_without_ground_truth_is_one_line(
    triton: EmbeddedTriton, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drive = write_drive(tmp_path / "nogt.mcap", 3)  # no ground truth topic
    profile = write_profile(
        tmp_path / "p.yaml", profile_data(triton.grpc_url, {"lidar_top": "sleepy_lidar", "cam_front": "sleepy_camera"})
    )
    assert load_config(profile).sensors
    assert main(["eval", str(drive), "--config", str(profile), "--no-progress"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and str(drive) in err and "no ground truth" in err


def test_eval_without_one_usable_frame_fails_in_one_line(
    triton: EmbeddedTriton, urban_drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The drive has ground truth; every model fails every request, so every mode scores an empty run
    # (mAP 0): that is a failure of the run, not a result.
    sleepy = {"lidar_top": "sleepy_lidar", "radar_front": "sleepy_radar", "cam_front": "sleepy_camera"}
    faults = [{"model": m, "error_probability": 1.0} for m in sleepy.values()]
    profile = write_profile(tmp_path / "p.yaml", profile_data(triton.grpc_url, sleepy, faults=faults))
    assert main(["eval", str(urban_drive), "--config", str(profile), "--no-progress"]) == 1
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"perception eval: error: {urban_drive}: no usable frame: no sensor answered ok in any")
    assert "injected fault" in lines[0]
    assert out.startswith("protocol: ")  # the table is still printed, before the verdict


@pytest.mark.parametrize("sensors", [",", ""])
def test_eval_with_no_sensor_named_is_a_usage_error(
    urban_drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], sensors: str
) -> None:
    # An empty --sensors list was silently ignored: every mode was run and scored with every sensor, exit 0.
    out = tmp_path / "eval"
    argv = ["eval", str(urban_drive), "--url", "127.0.0.1:1", "--no-progress", "--out", str(out)]
    assert main([*argv, "--sensors", sensors]) == 2
    printed, err = capsys.readouterr()
    assert printed == ""
    assert (
        err == f"perception eval: error: --sensors: names no sensor, got {sensors!r} (omit it to enable every sensor)\n"
    )
    assert not out.exists()


@pytest.mark.parametrize("under", ["", "sub"])
def test_eval_out_that_cannot_be_a_directory_fails_before_the_run(
    urban_drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], under: str
) -> None:
    # --out naming a file (or a path under one) was a FileExistsError/NotADirectoryError traceback after
    # the whole run, every score lost. Now a usage error before anything runs (the URL is never called).
    taken = tmp_path / "taken"
    taken.write_text("not a directory\n")
    out = taken / under if under else taken
    argv = ["eval", str(urban_drive), "--url", "127.0.0.1:1", "--no-progress", "--out", str(out)]
    with pytest.raises(SystemExit) as exit_:  # refused while parsing (perception/cli/_args.py's output_dir)
        main(argv)
    printed, err = capsys.readouterr()
    assert exit_.value.code == 2 and printed == ""
    said = f"{out} exists and is not a directory" if out == taken else f"{out}: {taken} is not a directory"
    assert f"argument --out: {said}" in err and "Traceback" not in err
    assert taken.read_text() == "not a directory\n"


def test_eval_with_an_empty_url_is_a_usage_error(urban_drive: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --url '' was a ValueError traceback from the server config (exit 1).
    assert main(["eval", str(urban_drive), "--url", "", "--no-progress"]) == 2
    printed, err = capsys.readouterr()
    assert printed == ""
    assert err == "perception eval: error: --url: must be 'embedded' or host:port (port 1..65535), got ''\n"


def test_eval_scores_only_the_sensors_enabled(
    triton: EmbeddedTriton, urban_drive: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `perception eval --sensors lidar_top,radar_front` replayed and scored every sensor (evaluate_modes
    # enabled them all again): the "fused" row listed both cameras, a silent wrong result. Now the modes
    # are scored on the sensors enabled, and a mode with none of them is skipped.
    argv = ["eval", str(urban_drive), "--url", triton.grpc_url, "--sensors", "lidar_top,radar_front", "--json"]
    assert main(argv) == 0
    modes = json.loads(capsys.readouterr().out)
    assert modes["fused"]["sensors"] == ["lidar_top", "radar_front"]
    assert modes["camera_only"]["mAP"] is None and modes["camera_only"]["skipped"] == "no enabled sensor"
    assert modes["no_camera"]["sensors"] == ["lidar_top", "radar_front"]


def test_eval_stopped_mid_run_scores_what_it_replayed_and_says_so(
    triton: EmbeddedTriton,
    urban_drive: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A Ctrl-C during the replay logged "stopping after in-flight frames" but the replay was not given the
    # stop: it ran to its end, scored and exited 0. Now it stops, scores the frames replayed, marks every
    # mode (and eval.md) interrupted and exits 130. The stop is set by the first frame's result, as the
    # first Ctrl-C sets it.
    import perception.cli._eval as cli_eval
    from perception.replay import each_frame

    real = cli_eval.evaluate_modes

    async def stopped_after_one_frame(*args: Any, stop: Any = None, **kwargs: Any) -> Any:
        sinks = [each_frame(lambda _: stop.set())] if stop is not None else []
        return await real(*args, **({"stop": stop} if stop is not None else {}), sinks=sinks, **kwargs)

    monkeypatch.setattr(cli_eval, "evaluate_modes", stopped_after_one_frame)
    out = tmp_path / "eval"
    assert main(["eval", str(urban_drive), "--url", triton.grpc_url, "--json", "--out", str(out)]) == 130
    printed, err = capsys.readouterr()
    modes = json.loads(printed)
    assert all(summary["interrupted"] is True for summary in modes.values()), modes
    assert json.loads((out / "eval.json").read_text()) == modes
    assert "**Interrupted**" in (out / "eval.md").read_text()
    assert "interrupted: the scores cover the " in err, err


def test_a_mode_not_scored_is_printed_as_skipped() -> None:
    # A drive without a radar (KITTI) printed 'radar_only  -  -  -  0' (0 ID switches, as if scored) where the help
    # says such a mode is skipped; eval.md the same, a cell short.
    from perception.cli._eval import _markdown, _table

    modes = {
        "fused": {"protocol": "native", "mAP": 0.5, "ate": 0.4, "id_switches": 2, "sensors": ["lidar_top"]},
        "radar_only": {"protocol": "native", "mAP": None, "sensors": [], "skipped": "no enabled sensor"},
    }
    lines = _table(modes)
    assert lines[1].split() == ["fused", "0.500", "0.400", "-", "2", "lidar_top"]
    assert lines[2] == "radar_only   skipped: no enabled sensor"
    assert "| radar_only | skipped: no enabled sensor | - | - | - | - |" in _markdown(Path("k.mcap"), modes)
    nuscenes = {mode: {**m, "protocol": "nuscenes"} for mode, m in modes.items()}
    assert _table(nuscenes)[2] == "radar_only   skipped: no enabled sensor"
