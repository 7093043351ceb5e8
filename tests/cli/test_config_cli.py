"""``perception config FILE``: a valid profile is printed resolved and said ok; a broken one is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from reliability_helpers import REPO_ROOT, profile_data, write_profile

from perception.cli import main
from perception.config import load_config


def _resolved(out: str) -> tuple[dict[str, object], str]:
    """The printed JSON document and the verdict line after it."""
    body, _, verdict = out.rstrip("\n").rpartition("\n")
    return json.loads(body), verdict


def test_bundled_profile_is_valid_and_printed_resolved(capsys: pytest.CaptureFixture[str]) -> None:
    path = REPO_ROOT / "launch" / "replay.yaml"
    assert main(["config", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    doc, verdict = _resolved(out)
    cfg = load_config(path)
    # the bundled profile leaves its sensors to the drive, with a model and transport per kind
    assert verdict == f"{path}: ok (sensors from the drive)" and doc["sensors"] == [] and not cfg.sensors
    defaults = doc["sensor_defaults"]
    assert isinstance(defaults, dict) and set(defaults) == {"lidar", "camera", "radar"}
    assert defaults["lidar"]["model"] == "lidar_detector"
    assert doc["budget"]["total_ms"] == cfg.budget.total_ms  # type: ignore[index]
    assert doc["pipeline"]["max_in_flight"] == cfg.pipeline.max_in_flight  # type: ignore[index]


def test_a_written_profile_resolves_its_defaults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = profile_data("127.0.0.1:8001", {"lidar_top": "sleepy_lidar", "cam_front": "sleepy_camera"})
    path = write_profile(tmp_path / "mine.yaml", data)
    assert main(["config", str(path)]) == 0
    doc, verdict = _resolved(capsys.readouterr().out)
    assert verdict == f"{path}: ok (2 sensors)"
    sensors = {s["name"]: s for s in doc["sensors"]}  # type: ignore[union-attr]
    assert sensors["lidar_top"]["model"] == "sleepy_lidar" and sensors["cam_front"]["kind"] == "camera"
    # what the file left out is printed with the value the runtime will use
    assert doc["pipeline"] == json.loads(json.dumps(_plain_default_pipeline()))


def _plain_default_pipeline() -> object:
    from perception.cli._config import _plain
    from perception.config import PipelineConfig

    return _plain(PipelineConfig())


def test_a_broken_profile_is_one_line_naming_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = profile_data("127.0.0.1:8001", {"lidar_top": "sleepy_lidar"}, budget={"total_ms": -5})
    path = write_profile(tmp_path / "bad.yaml", data)
    assert main(["config", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and str(path) in err and "budget" in err and "total_ms" in err


def test_the_installed_entry_point_runs_it() -> None:
    """The console script's target, as a fresh process (what a user's shell runs)."""
    path = REPO_ROOT / "launch" / "replay.yaml"
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from perception.cli import main; sys.exit(main())", "config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith(f"{path}: ok (sensors from the drive)")


def test_output_whose_reader_went_away_ends_quietly() -> None:
    """``perception config FILE | head -1``: it said ``error: Broken pipe`` and exited 1. The reader here
    is gone before anything is written: every write fails."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from perception.cli import main; sys.exit(main())",
                "config",
                "launch/replay.yaml",
            ],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=REPO_ROOT,
            check=False,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


def test_the_printed_profile_loads_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # without the file it came from (``source``: not a key of a profile)
    assert main(["config", str(REPO_ROOT / "launch" / "replay.yaml")]) == 0
    doc, _ = _resolved(capsys.readouterr().out)
    assert "source" not in doc
    printed = tmp_path / "printed.yaml"
    printed.write_text(json.dumps(doc))
    assert load_config(printed).pipeline == load_config(REPO_ROOT / "launch" / "replay.yaml").pipeline
