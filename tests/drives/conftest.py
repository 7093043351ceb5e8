"""Fixtures for drive tests (helpers live in ``drive_fixtures``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from drive_fixtures import Written, make_rig, write_drive

from perception.types import SensorSpec


@pytest.fixture
def rig() -> list[SensorSpec]:
    return make_rig()


@pytest.fixture
def drive(tmp_path: Path) -> Written:
    return write_drive(tmp_path / "drive.mcap")


@pytest.fixture
def chunked_drive(tmp_path: Path) -> Written:
    """Many small chunks, so a truncated copy still has a readable prefix."""
    return write_drive(tmp_path / "chunked.mcap", frames=20, chunk_size=2_000)
