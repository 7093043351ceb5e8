"""Test helpers about recordings shared by the test directories (tests/ is on sys.path: its conftest.py)."""

from __future__ import annotations

from pathlib import Path

from mcap.writer import Writer


def earlier_recording(path: Path, segment: int = 0) -> bytes:
    """A file that is an earlier recording's segment by its metadata (what --record may replace): its bytes."""
    with path.open("wb") as f:
        writer = Writer(f)
        writer.start("", "perception")
        writer.add_metadata("perception.drive", {"record.format": "4", "record.segment": str(segment)})
        writer.finish()
    return path.read_bytes()
