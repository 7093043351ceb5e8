"""A small generated drive with ground truth, shared by the viz tests (generated once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest
from viz_fixtures import record

from perception.sim import generate_drive
from perception.types import FrameResult


@pytest.fixture(scope="session")
def small_drive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """0.5 s of the urban scenario with the default rig (lidar, 2 cameras, 2 radars): 5 GT snapshots."""
    path = tmp_path_factory.mktemp("viz_drive") / "urban.mcap"
    generate_drive(path, scenario="urban", seed=7, duration_s=0.5)
    return path


@pytest.fixture(scope="session")
def recorded(small_drive: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[FrameResult]]:
    """A replay output directory holding ``fused.mcap`` of the hand-made frames, and those frames."""
    out = tmp_path_factory.mktemp("replay_out")
    return out, record(small_drive, out)
