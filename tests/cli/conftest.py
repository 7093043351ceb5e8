"""The CLI tests run the real ``perception`` entry point (in-process through ``perception.cli.main``, or
as a ``python -m perception`` subprocess where a second process is the point) on real files written to
tmp_path. Drives and launch profiles come from the reliability tests' helpers (one definition of the
small three-sensor drive and of the sleeper-model profiles)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))

from perception.sim import generate_drive


@pytest.fixture(scope="session")
def urban_drive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """0.5 s of the urban scenario with the default rig and ground truth (5 lidar sweeps)."""
    path = tmp_path_factory.mktemp("cli_drive") / "urban.mcap"
    generate_drive(path, scenario="urban", seed=7, duration_s=0.5)
    return path
