"""``--record`` and ``--as-recorded`` refuse what would lose data or be ignored, before anything runs (exit 2)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from perception.cli import main
from perception.errors import ReplayError
from perception.metrics import LatencyAccumulator
from perception.replay import ReplayOutcome

DRIVE = Path(__file__).resolve().parents[2] / "replay_data" / "urban_seed7_10s.mcap"


@pytest.fixture
def drive(tmp_path: Path) -> Path:
    copy = tmp_path / "drive.mcap"
    shutil.copyfile(DRIVE, copy)
    return copy


@pytest.mark.parametrize("target", ["drive.mcap", "./drive.mcap", "link.mcap", "drive-0001"])
def test_a_recording_never_overwrites_the_drive_it_reads(
    drive: Path, target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the drive itself, by another spelling or a link, or a segment the recording would replace: refused
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link.mcap").symlink_to(drive)
    read = drive
    if target == "drive-0001":  # the drive is named as the recording's first rotated segment
        read = drive.rename(tmp_path / "run-0001.mcap")
        target = "run.mcap"
    before = read.read_bytes()
    code = main(["replay", str(read), "--rate", "max", "--record", target, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "would overwrite the drive being read" in err and "Traceback" not in err
    assert read.read_bytes() == before


@pytest.mark.parametrize("name", ["run-0001.mcap", "run.mcap"])
def test_a_file_named_as_a_segment_that_is_not_a_recording_is_refused_before_the_run(
    drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    # a user's drive named run-0001.mcap beside --record run.mcap was deleted as the recording's segment
    other = tmp_path / name
    shutil.copyfile(DRIVE, other)
    code = main(
        ["replay", str(drive), "--rate", "max", "--record", str(tmp_path / "run.mcap"), "--out", str(tmp_path / "out")]
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"{other}: --record: exists and is not a segment of a recording: move it or record to another name" in err
    assert other.read_bytes() == DRIVE.read_bytes() and not (tmp_path / "out").exists()


def test_a_recording_whose_directory_cannot_be_made_is_refused_before_the_run(
    drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").write_text("a file where the recording's directory would be\n")
    target = tmp_path / "taken" / "run.mcap"
    with pytest.raises(SystemExit) as exit_:  # refused while parsing (perception/cli/_args.py's output_file)
        main(["replay", str(drive), "--rate", "max", "--record", str(target), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert f"argument --record: {target}: {tmp_path / 'taken'} is not a directory" in err
    assert not (tmp_path / "out" / "detections.jsonl").exists()  # nothing ran


def test_options_a_replay_as_recorded_does_not_use_are_refused(
    drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["replay", str(drive), "--as-recorded", "--out", str(tmp_path / "out")]
    assert main([*argv, "--record", str(tmp_path / "again.mcap"), "--live"]) == 2
    err = capsys.readouterr().err
    assert "--record, --live: not used by a replay as recorded" in err
    assert not (tmp_path / "again.mcap").exists()


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--record-segment-mb", "0.5", "must be >= 1"),
        ("--record-segment-mb", "nan", "must be >= 1"),
        ("--record-max-segments", "-1", "must be >= 0"),
    ],
)
def test_a_bad_recording_bound_is_a_usage_error(
    drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, said: str
) -> None:
    argv = ["replay", str(drive), "--record", str(tmp_path / "run.mcap"), option, value]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"argument {option}: {said}" in err and "Traceback" not in err


def test_a_replay_as_recorded_naming_no_sensor_is_a_usage_error(
    drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the same --sensors as every command's (it was every sensor here)
    assert main(["replay", str(drive), "--as-recorded", "--sensors", ",", "--out", str(tmp_path / "out")]) == 2
    assert "--sensors: names no sensor, got ','" in capsys.readouterr().err


@pytest.mark.parametrize(
    "given", [["--sensors", "lidar_top"], ["--url", "localhost:8001"], ["--sensors", "lidar_top", "--url", "h:1"]]
)
def test_model_options_of_a_replay_as_recorded_without_rerun_models_are_a_usage_error(
    drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], given: list[str]
) -> None:
    # they did nothing (the recorded answers of every recorded sensor re-fused, every digest equal): as if obeyed
    out = tmp_path / "out"
    assert main(["replay", str(drive), "--as-recorded", *given, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    flags = ", ".join(flag for flag in given if flag.startswith("--"))
    assert f"{flags}: used with --rerun-models only" in err and err.count("\n") == 1, err
    assert not out.exists()


@pytest.mark.parametrize("what", ["missing", "directory"])
def test_a_replay_as_recorded_of_no_recording_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str
) -> None:
    # as for a drive: a recording not there (nor any segment of it) or a directory is named, exit 2; it was exit 1
    # ('recording not found'; 'cannot open drive: Is a directory')
    path = tmp_path / "run.mcap"
    if what == "directory":
        path.mkdir()
    assert main(["replay", str(path), "--as-recorded", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    said = "recording not found (nor a segment of it, run-NNNN.mcap)" if what == "missing" else "is a directory"
    assert err.count("\n") == 1 and f"{path}: {said}" in err, err


@pytest.mark.parametrize("value", ["max", "lockstep", "2"])
def test_a_replay_as_recorded_at_a_rate_is_refused(
    drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    # its timing is the recording's: --rate was ignored in silence (the recorded speed, the default, is not refused)
    argv = ["replay", str(drive), "--as-recorded", "--out", str(tmp_path / "out")]
    assert main([*argv, "--rate", value]) == 2
    err = capsys.readouterr().err
    assert "--rate: not used by a replay as recorded" in err and err.count("\n") == 1, err


def test_the_options_of_a_recording_are_named_as_typed(
    drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # They were named without their dashes, unlike every other option's error: "rerun-models: --rerun-models needs
    # --as-recorded", "record: ... would overwrite the drive being read", "as-recorded: --rate: not used ...".
    out = ["--out", str(tmp_path / "out")]
    assert main(["replay", str(drive), "--rerun-models", *out]) == 2
    assert capsys.readouterr().err == "perception replay: error: --rerun-models: needs --as-recorded\n"
    assert main(["replay", str(drive), "--record", str(drive), *out]) == 2
    assert capsys.readouterr().err.startswith(f"perception replay: error: --record: {drive} would overwrite the drive")
    assert main(["replay", str(drive), "--as-recorded", "--rate", "max", *out]) == 2
    assert capsys.readouterr().err.startswith("perception replay: error: --as-recorded: --rate: not used by a replay")


def _replay_recorded(
    drive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ends: Callable[[], ReplayOutcome]
) -> tuple[int, Path]:
    """``perception replay DRIVE --record`` whose run begins (the recording with it) and ``ends`` (no server): its
    exit code and the recording's path."""
    from perception.cli import _replay

    async def run(stop: Any, reader: Any, session: Any, options: Any, *, observer: Any, **kwargs: Any) -> Any:
        observer.begin(session)
        return ends()

    monkeypatch.setattr(_replay, "replay_with_stop", run)
    rec = tmp_path / "run.mcap"
    code = main(["replay", str(drive), "--rate", "max", "--record", str(rec), "--out", str(tmp_path / "out")])
    return code, rec


def test_a_replay_stopped_by_ctrl_c_says_its_recording_is_cut(
    drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C drains a replay and it returns: its 'recorded FILE: ...' line did not say INTERRUPTED, as live's
    # does (nuScenes stopped at 22 s: 'recorded x.mcap: 33 frames fused, ... 51.6 MiB', then 'interrupted').
    def stopped() -> ReplayOutcome:
        acc = LatencyAccumulator(budget_ns=1)
        return ReplayOutcome(acc.report(), acc, interrupted=True)

    code, rec = _replay_recorded(drive, tmp_path, monkeypatch, stopped)
    out = capsys.readouterr().out
    assert code == 130, out
    line = next((x for x in out.splitlines() if x.startswith(f"recorded {rec}: ")), None)
    assert line is not None and line.endswith("; INTERRUPTED: the recording holds the run up to the stop (the frames "
                                              "finished then included)"), out  # fmt: skip
    assert out.index(line) < out.index("interrupted: records are complete")


def test_a_replay_that_fails_says_what_its_recording_holds(
    drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A replay's run that failed closed its recording without a word of it (live's says the run FAILED).
    def failed() -> ReplayOutcome:
        raise ReplayError("the server went away")

    code, rec = _replay_recorded(drive, tmp_path, monkeypatch, failed)
    captured = capsys.readouterr()
    assert code == 1 and "the server went away" in captured.err and "Traceback" not in captured.err
    line = next((x for x in captured.out.splitlines() if x.startswith(f"recorded {rec}: ")), None)
    assert line is not None and line.endswith("; the run FAILED: the recording holds it up to its failure"), captured
    assert rec.exists()
