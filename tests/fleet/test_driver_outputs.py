"""What the driver reports for a drive it did not hear back from: its published output, or cancelled."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from perception.fleet._driver import _published
from perception.fleet._plan import FleetDrive
from perception.fleet._worker import SUMMARY_FILE


def _publish(out: Path, name: str, summary: dict[str, object], mtime: float | None = None) -> Path:
    d = out / name
    d.mkdir(parents=True)
    path = d / SUMMARY_FILE
    path.write_text(json.dumps(summary))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def test_a_drive_published_in_this_run_is_reported_as_it_finished(tmp_path: Path) -> None:
    since = time.time() - 1.0
    _publish(tmp_path, "first", {"name": "first", "status": "ok", "frames": 10})
    assert _published(tmp_path, FleetDrive("first", tmp_path / "first.mcap"), since=since) == {
        "name": "first",
        "status": "ok",
        "frames": 10,
    }


def test_an_earlier_run_s_output_or_a_broken_or_foreign_summary_is_not_this_run_s(tmp_path: Path) -> None:
    since = time.time()
    _publish(tmp_path, "old", {"name": "old", "status": "ok"}, mtime=since - 3600)
    (_publish(tmp_path, "broken", {})).write_text("{not json")
    _publish(tmp_path, "other", {"name": "someone-else", "status": "ok"})
    for name in ("old", "broken", "other", "absent"):
        assert _published(tmp_path, FleetDrive(name, tmp_path / f"{name}.mcap"), since=since - 1.0) is None, name
