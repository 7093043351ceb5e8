"""``find_drives``: which files of the command line a fleet run replays."""

from __future__ import annotations

from pathlib import Path

import pytest

from perception.errors import ConfigError
from perception.fleet import find_drives
from perception.fleet._outputs import OUT_MARKER


def _drive(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89MCAP0\r\n")  # only the name matters to find_drives
    return path


def test_an_earlier_run_s_output_inside_the_drives_directory_is_not_replayed(tmp_path: Path) -> None:
    drives = tmp_path / "drives"
    drive = _drive(drives / "urban.mcap")
    out = drives / "out"  # `perception fleet drives --out drives/out`, run before
    _drive(out / "urban" / "fused.mcap")
    (out / OUT_MARKER).write_text("perception fleet output\n", encoding="utf-8")

    assert [(d.name, d.path) for d in find_drives([drives])] == [("urban", drive)]


def test_a_fleet_output_given_as_the_drives_directory_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _drive(out / "urban" / "fused.mcap")
    (out / OUT_MARKER).write_text("perception fleet output\n", encoding="utf-8")

    with pytest.raises(ConfigError, match="fleet run's output") as err:
        find_drives([out])
    assert err.value.context["file"] == str(out)
