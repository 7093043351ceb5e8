"""Evaluation modes select sensors by kind; ``fused`` keeps every kind, registered ones included."""

from __future__ import annotations

from perception.replay import MODES
from perception.replay._eval import SensorMode


def test_fused_keeps_every_kind_including_a_registered_one() -> None:
    assert all(MODES["fused"].keeps(k) for k in ("lidar", "radar", "camera", "thermal"))


def test_only_modes_keep_their_kind_alone() -> None:
    assert MODES["camera_only"].keeps("camera")
    assert not any(MODES["camera_only"].keeps(k) for k in ("lidar", "radar", "thermal"))


def test_without_modes_drop_their_kind_alone() -> None:
    assert not MODES["no_lidar"].keeps("lidar")
    assert all(MODES["no_lidar"].keeps(k) for k in ("radar", "camera", "thermal"))


def test_a_mode_is_a_value() -> None:
    assert SensorMode(only=frozenset({"lidar"})) == MODES["lidar_only"]
