"""Scenario presets: road cross-section, ego speed, traffic densities, default rig."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from perception.errors import ConfigError

__all__ = ["SCENARIOS", "Scenario", "get_scenario"]


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    rig: str  # bundled rig used when none is given
    ego_speed: float  # m/s (mean; a gentle +-5% oscillation is added)
    ego_lane: int  # 0 = innermost lane of the ego's (right-hand) side
    # cross-section, from the centre line outwards (each side mirrors the other), metres
    lanes_per_dir: int
    lane_width: float = 3.5
    median: float = 0.0  # full width of the central median (a concrete barrier sits on it when > 0)
    bike_lane: float = 0.0
    parking: float = 0.0
    shoulder: float = 0.0
    sidewalk: float = 0.0
    buildings: bool = False
    guardrail: bool = False
    # geometry: curve radius range (m) and straight / curve lengths (m)
    radius: tuple[float, float] = (250.0, 800.0)
    straight_len: tuple[float, float] = (80.0, 250.0)
    curve_len: tuple[float, float] = (60.0, 200.0)
    # traffic, per 100 m of a lane/strip
    vehicles_per_100m: float = 2.0
    truck_fraction: float = 0.1
    lane_speed: tuple[float, float] = (9.0, 12.0)  # free speed range of moving vehicles (m/s)
    parked_per_100m: float = 0.0
    cyclists_per_100m: float = 0.0
    pedestrians_per_100m: float = 0.0  # per sidewalk
    crossings_per_minute: float = 0.0  # per crosswalk
    crosswalk_spacing: float = 0.0  # 0 = no crosswalks


SCENARIOS: Mapping[str, Scenario] = {
    "urban": Scenario(
        name="urban",
        rig="default",
        ego_speed=10.0,
        ego_lane=0,
        lanes_per_dir=1,
        bike_lane=1.6,
        parking=2.3,
        sidewalk=3.5,
        buildings=True,
        vehicles_per_100m=1.9,
        truck_fraction=0.12,
        lane_speed=(9.0, 12.0),
        parked_per_100m=1.6,
        cyclists_per_100m=0.6,
        pedestrians_per_100m=2.0,
        crossings_per_minute=3.0,
        crosswalk_spacing=140.0,
    ),
    "highway": Scenario(
        name="highway",
        rig="default",
        ego_speed=25.0,
        ego_lane=1,
        lanes_per_dir=3,
        lane_width=3.7,
        median=2.0,
        shoulder=2.5,
        guardrail=True,
        radius=(800.0, 2500.0),
        straight_len=(200.0, 600.0),
        curve_len=(150.0, 400.0),
        vehicles_per_100m=1.4,
        truck_fraction=0.25,
        lane_speed=(22.0, 32.0),
    ),
    "dense": Scenario(
        name="dense",
        rig="dense",
        ego_speed=8.0,
        ego_lane=1,
        lanes_per_dir=2,
        bike_lane=1.6,
        parking=2.3,
        sidewalk=4.0,
        buildings=True,
        radius=(200.0, 600.0),
        vehicles_per_100m=4.0,
        truck_fraction=0.15,
        lane_speed=(7.0, 10.0),
        parked_per_100m=3.5,
        cyclists_per_100m=2.0,
        pedestrians_per_100m=9.0,
        crossings_per_minute=5.0,
        crosswalk_spacing=90.0,
    ),
}


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        choices = ", ".join(SCENARIOS)
        raise ConfigError(f"unknown scenario {name!r}; expected one of {choices}", key="scenario") from None
