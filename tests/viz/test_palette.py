"""Box colours by the combination of sensor kinds, including a kind registered after import."""

from __future__ import annotations

import dataclasses

from perception.kinds import CAMERA, register_kind, unregister_kind
from perception.viz._palette import COMBINATIONS, combination, combination_color


def test_built_in_combinations_keep_their_names_and_colours() -> None:
    assert combination(["radar", "lidar", "camera"]) == "lidar+camera+radar"
    assert combination_color(["camera"]) == COMBINATIONS["camera"] == CAMERA.color
    assert combination([]) == "predicted"


def test_a_registered_kind_has_its_own_colour_and_joins_combinations() -> None:
    register_kind(dataclasses.replace(CAMERA, name="thermal_viz", color=(0.1, 0.2, 0.3)))
    try:
        assert combination(["thermal_viz", "lidar"]) == "lidar+thermal_viz"
        assert combination_color(["thermal_viz", "lidar"]) == COMBINATIONS["lidar"]  # its built-in companions'
        assert combination_color(["thermal_viz"]) == (0.1, 0.2, 0.3)
    finally:
        unregister_kind("thermal_viz")
