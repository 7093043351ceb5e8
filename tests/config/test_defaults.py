"""Each default of a launch profile is defined once (the dataclasses of perception/config): the default
profile shows them, and a profile of one's own that leaves a key out gets the same value."""

from __future__ import annotations

from pathlib import Path

from perception.config import (
    RuntimeConfig,
    SensorConfig,
    SensorDefaults,
    ServerConfig,
    from_data,
    load_config,
    load_yaml,
    with_overrides,
)
from perception.types import SIM_GENERATOR

ROOT = Path(__file__).resolve().parents[2]


def _profile(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_every_value_of_the_default_profile_is_its_default() -> None:
    # launch/replay.yaml's budget was 200 / 15 ms and 450 ms for recordings, the dataclass's 100 / 10 and none
    assert from_data(RuntimeConfig, load_yaml(ROOT / "launch" / "replay.yaml")) == RuntimeConfig()


def test_a_profile_without_a_budget_gets_the_2_core_host_s(tmp_path: Path) -> None:
    # A profile listing its sensors alone was held to 100 ms (join at 90) on the 2-core host, where the
    # default profile's 200 ms (450 for recordings of real sensors) is what the frames take.
    cfg = load_config(_profile(tmp_path, "sensors:\n  - {name: lidar, kind: lidar, model: lidar_detector}\n"))
    budget = cfg.budget
    assert (budget.total_ms, budget.fusion_reserve_ms, budget.recorded_total_ms) == (200, 15, 450)
    assert budget.for_drive({"source": "nuscenes"}).total_ms == 450
    assert budget.for_drive({"generator": SIM_GENERATOR}).total_ms == 200
    # a budget given without recorded_total_ms holds every drive to its total, as --budget-ms does
    given = load_config(_profile(tmp_path, "budget: {total_ms: 300}\n", "given.yaml")).budget
    assert given.recorded_total_ms is None and given.for_drive({"source": "kitti"}).total_ms == 300
    overridden = with_overrides(cfg, budget_ms=120).budget
    assert overridden.recorded_total_ms is None and overridden.for_drive({"source": "kitti"}).total_ms == 120


def test_a_listed_sensor_gets_the_timing_a_sensor_of_the_drive_gets() -> None:
    # max_staleness_ms was 250 for a sensor listed in `sensors:` and 150 for one taken from the drive
    listed = SensorConfig("cam", "camera", "camera_detector")
    of_drive = SensorDefaults().camera
    assert (listed.sync_window_ms, listed.max_staleness_ms) == (of_drive.sync_window_ms, of_drive.max_staleness_ms)
    assert listed.max_staleness_ms == 150


def test_perception_server_waits_for_its_models_as_long_as_a_profile_does() -> None:
    # `perception server --startup-timeout` (and model-quality) defaulted to 120 s, a profile's server to 90
    from perception.cli._main import build_parser

    args = build_parser(["server"]).parse_args(["server"])
    assert args.startup_timeout == ServerConfig().startup_timeout_s == 120
