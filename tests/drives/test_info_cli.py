"""``perception info``: text and JSON summaries, one-line errors with a non-zero exit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from drive_fixtures import Written, write_drive

from perception.cli import main


def test_info_text(drive: Written, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(drive.path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert f"drive         {drive.path}" in out
    assert "duration      1.107 s" in out
    assert "ground truth  yes" in out
    assert "metadata      generator=tests, seed=0" in out
    lines = out.splitlines()
    assert any(line.split()[:3] == ["front", "camera", "/sensors/front/image/compressed"] for line in lines)
    assert any(line.split()[:2] == ["radar", "radar"] for line in lines)
    topic_line = next(line for line in lines if line.strip().startswith("/sensors/top/points"))
    assert topic_line.split()[1:] == ["foxglove.PointCloud", "12", "10.00"]


def test_info_json(drive: Written, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--json", str(drive.path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["has_ground_truth"] is True and doc["truncated"] is None
    assert doc["sensors"]["top"] == {
        "kind": "lidar",
        "topic": "/sensors/top/points",
        "frame_id": "lidar_top",
        "rate_hz": 10.0,
    }
    top = doc["topics"]["/sensors/top/points"]
    assert (top["schema"], top["message_count"], top["rate_hz"]) == ("foxglove.PointCloud", 12, 10.0)
    assert doc["topics"]["/ground_truth/objects"]["message_count"] == 12


def test_info_without_ground_truth(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    written = write_drive(tmp_path / "nogt.mcap", frames=2, ground_truth=False)
    assert main(["info", str(written.path)]) == 0
    assert "ground truth  no" in capsys.readouterr().out


def test_info_bad_file_is_one_line_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.mcap"
    path.write_bytes(b"not a drive")
    assert main(["info", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and str(path) in err and "bad magic" in err


def test_info_missing_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # It was exit 1 ("cannot open drive: No such file or directory"); replay, eval and render say exit 2.
    path = tmp_path / "nope.mcap"
    assert main(["info", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"perception info: error: {path}: drive not found\n"


def test_info_truncated_prints_what_it_can_and_fails(
    chunked_drive: Written, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = chunked_drive.path.read_bytes()
    path = tmp_path / "cut.mcap"
    path.write_bytes(data[: len(data) // 2])
    assert main(["info", str(path)]) == 3  # a damaged drive (not 1: the file could be read)
    out, err = capsys.readouterr()
    assert "/sensors/top/points" in out
    assert err.count("\n") == 1 and str(path) in err and "truncated at byte" in err


@pytest.mark.parametrize("keep", ["magic", "header", "channels"])
@pytest.mark.parametrize("command", ["info", "eval"])
def test_a_drive_truncated_before_its_first_message_is_a_damaged_drive(
    drive: Written, tmp_path: Path, capsys: pytest.CaptureFixture[str], keep: str, command: str
) -> None:
    # It was exit 1 ("no channel for lidar sensor 'top' (truncated at byte N before any message)"; "bad magic"
    # for one cut within its magic): a damaged drive is exit 3, the one line naming the file and the damage.
    data = drive.path.read_bytes()
    cut = {"magic": 5, "header": 8, "channels": 1_000}[keep]
    path = tmp_path / "cut.mcap"
    path.write_bytes(data[:cut])
    assert main([command, str(path)]) == 3
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"perception {command}: error: {path}: " in err and "drive damaged: truncated at byte" in err, err
    assert "before any message" in err and "(offset=" in err, err
