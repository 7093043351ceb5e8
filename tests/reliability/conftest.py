"""Fixtures of the reliability tests: small real drives and sleeper model repositories in tmp dirs."""

from __future__ import annotations

from pathlib import Path

import pytest
from reliability_helpers import sleepy_repository, write_drive


@pytest.fixture(scope="session")
def small_drive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 lidar sweeps at 10 Hz with radar and camera samples (3 s of recorded time)."""
    return write_drive(tmp_path_factory.mktemp("drive") / "small.mcap", 30)


@pytest.fixture
def sleepy_repo(tmp_path: Path) -> Path:
    """Lidar, radar and camera sleepers (20/30/40 ms, one instance each) for a server of the test's own."""
    return sleepy_repository(
        tmp_path / "models",
        {"sleepy_lidar": ("lidar", 20), "sleepy_radar": ("radar", 30), "sleepy_camera": ("camera", 40)},
    )
