"""The fleet fault tests build their drives, sleeper-model repositories and launch profiles with the
reliability tests' helpers (one definition of the small three-sensor drive and of the sleeper models).
The fleet runs that join a cluster share the session's Ray head (:mod:`fleet_helpers`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet_helpers import RayHeads


@pytest.fixture(scope="session")
def ray_heads() -> Iterator[RayHeads]:
    """The session's Ray head, shared by the fleet test modules."""
    heads = RayHeads()
    try:
        yield heads
    finally:
        heads.close()
